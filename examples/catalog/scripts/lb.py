#!/usr/bin/env python3
"""A round-robin HTTP load balancer for GET: each request goes to the next backend (host:port)."""
import argparse, itertools, threading, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

p = argparse.ArgumentParser()
p.add_argument("--bind", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--backends", required=True)
a = p.parse_args()
backends = [b for b in a.backends.split(",") if b]
ring = itertools.cycle(backends)
lock = threading.Lock()

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            code, body, ctype = 200, b"ok", "text/plain"
        else:
            with lock:
                b = next(ring)
            try:
                with urllib.request.urlopen("http://%s%s" % (b, self.path), timeout=5) as r:
                    code, body, ctype = r.status, r.read(), r.headers.get("Content-Type", "text/plain")
            except Exception as e:
                code, body, ctype = 502, ("backend %s: %s" % (b, e)).encode(), "text/plain"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer((a.bind, a.port), H).serve_forever()
