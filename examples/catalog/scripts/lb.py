#!/usr/bin/env python3
"""A round-robin HTTP load balancer for GET: each request goes to the next backend (host:port)."""
import argparse, os, signal, threading, urllib.error, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

p = argparse.ArgumentParser()
p.add_argument("--bind", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--backends", default="")
p.add_argument("--conf", help="a file with a line backends=h:p,h:p; re-read when it changes")
a = p.parse_args()
lock = threading.Lock()
state = {"mtime": None, "backends": [b for b in a.backends.split(",") if b], "next": 0}


def next_backends():
    """Every backend, starting with the next one round robin; the conf file is re-read when it
    changes (expand, shrink)."""
    with lock:
        if a.conf:
            try:
                m = os.stat(a.conf).st_mtime_ns
                if m != state["mtime"]:
                    for line in open(a.conf):
                        if line.startswith("backends="):
                            state["backends"] = [b for b in line.strip()[len("backends="):].split(",") if b]
                    state["mtime"] = m
            except OSError:
                pass
        bs = state["backends"]
        if not bs:
            return []
        i = state["next"] % len(bs)
        state["next"] += 1
        return bs[i:] + bs[:i]

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            code, body, ctype = 200, b"ok", "text/plain"
        else:
            code, body, ctype = self.forward()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def forward(self):
        """Sends the request to the next backend; one that cannot be reached (stopped, restarting)
        is skipped for the next, each backend tried at most once, as balancers do for idempotent
        requests. An answer from a backend, whatever its status, is passed on."""
        err = "no backends"
        for b in next_backends():
            try:
                with urllib.request.urlopen("http://%s%s" % (b, self.path), timeout=5) as r:
                    return r.status, r.read(), r.headers.get("Content-Type", "text/plain")
            except urllib.error.HTTPError as e:
                return e.code, e.read(), e.headers.get("Content-Type", "text/plain")
            except Exception as e:  # refused, reset, cut short: the next backend is asked
                err = "backend %s: %s" % (b, e)
        return 502, ("no backend answered: %s" % err).encode(), "text/plain"

    def log_message(self, *args):
        pass

# A stop (SIGTERM) is graceful: no new connection is accepted and requests in flight are answered
# before the process exits, so a balancer never sees an answer cut in half.
server = ThreadingHTTPServer((a.bind, a.port), H)
server.daemon_threads = False
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
server.serve_forever()
server.server_close()
