#!/usr/bin/env python3
"""A tiny HTTP key-value store. The primary takes writes; a replica follows a primary by polling it.

GET /kv/KEY -> value (404 if absent); PUT /kv/KEY (body = value) -> 204 (primary only);
GET /dump -> all pairs as JSON; GET /health -> ok.
"""
import argparse, json, threading, time, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

p = argparse.ArgumentParser()
p.add_argument("--bind", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--data", required=True)
p.add_argument("--follow", default="")
a = p.parse_args()

lock = threading.Lock()
try:
    with open(a.data) as f:
        store = json.load(f)
except (OSError, ValueError):
    store = {}

def save():
    tmp = a.data + ".tmp"
    with open(tmp, "w") as f:
        json.dump(store, f)
    import os
    os.replace(tmp, a.data)

class H(BaseHTTPRequestHandler):
    def reply(self, code, body=b"", ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, b"ok")
        if self.path == "/dump":
            with lock:
                return self.reply(200, json.dumps(store).encode(), "application/json")
        if self.path.startswith("/kv/"):
            with lock:
                v = store.get(self.path[4:])
            return self.reply(404, b"no such key") if v is None else self.reply(200, v.encode())
        self.reply(404, b"not found")

    def do_PUT(self):
        if a.follow:
            return self.reply(403, b"read-only replica")
        if not self.path.startswith("/kv/"):
            return self.reply(404, b"not found")
        n = int(self.headers.get("Content-Length") or 0)
        v = self.rfile.read(n).decode()
        with lock:
            store[self.path[4:]] = v
            save()
        self.reply(204)

    def log_message(self, *args):
        pass

def follow():
    while True:
        try:
            with urllib.request.urlopen(a.follow + "/dump", timeout=2) as r:
                data = json.load(r)
            with lock:
                store.clear()
                store.update(data)
                save()
        except Exception:
            pass
        time.sleep(0.3)

if a.follow:
    threading.Thread(target=follow, daemon=True).start()
ThreadingHTTPServer((a.bind, a.port), H).serve_forever()
