#!/usr/bin/env python3
"""A web node: GET / answers JSON with this node's name, a greeting and the store's `message`."""
import argparse, json, signal, threading, urllib.request, urllib.error
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

p = argparse.ArgumentParser()
p.add_argument("--bind", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--kv", required=True)
p.add_argument("--name", required=True)
p.add_argument("--greeting", default="hello")
a = p.parse_args()

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b"ok"
        else:
            try:
                with urllib.request.urlopen(a.kv + "/kv/message", timeout=2) as r:
                    msg = r.read().decode()
            except urllib.error.HTTPError:
                msg = None
            except Exception as e:
                msg = "store unreachable: %s" % e
            body = json.dumps({"node": a.name, "greeting": a.greeting, "message": msg}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

# A stop (SIGTERM) is graceful: no new connection is accepted and requests in flight are answered
# before the process exits, so a balancer never sees an answer cut in half.
server = ThreadingHTTPServer((a.bind, a.port), H)
server.daemon_threads = False
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
server.serve_forever()
server.server_close()
