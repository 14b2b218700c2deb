#!/usr/bin/env python3
"""https_server.py: a static file server over TLS on loopback, for tests.

    https_server.py --dir DIR --cert CERT --key KEY --port-file FILE [--port N]

Serves DIR read-only (GET and HEAD, Content-Length, single byte ranges) on
127.0.0.1, one thread per connection, and writes the port it bound to
PORT_FILE once it listens (port 0 = any free port). Every request is logged
to stderr as one line. Ends on SIGTERM/SIGINT. tests/lib/https.sh starts and
stops it.
"""
import argparse
import http.server
import os
import signal
import ssl
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("https: %s %s\n" % (self.address_string(), fmt % args))
        sys.stderr.flush()

    def list_directory(self, path):
        self.send_error(403, "no listings")
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()

    root = os.path.realpath(a.dir)

    def handler(*args, **kw):
        return Handler(*args, directory=root, **kw)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(a.cert, a.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, a.port_file)
    try:
        srv.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass


if __name__ == "__main__":
    main()
