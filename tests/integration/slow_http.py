#!/usr/bin/env python3
"""slow_http.py: a plain-http server on 127.0.0.1 that is slow on purpose,
so a test can kill bcd in the middle of a transfer (snapshot_host.t).

  python3 slow_http.py PORT_FILE FILE

GET serves FILE: the first GET trickles (64 KiB every 50 ms), later ones go
at full speed. PUT reads its body at 64 KiB every 50 ms, keeps nothing and
answers 200. Each request is logged to stderr."""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, FILE = sys.argv[1], sys.argv[2]
CHUNK = 64 * 1024
state = {"gets": 0}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        with lock:
            state["gets"] += 1
            slow = state["gets"] == 1
        with open(FILE, "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(0, len(data), CHUNK):
                self.wfile.write(data[i:i + CHUNK])
                if slow:
                    time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_PUT(self):
        left = int(self.headers.get("Content-Length", "0"))
        try:
            while left > 0:
                got = self.rfile.read(min(CHUNK, left))
                if not got:
                    return
                left -= len(got)
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os  # noqa: E402

os.rename(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
