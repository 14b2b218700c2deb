#!/usr/bin/env python3
"""attack_http.py: hold connections open to an HTTP(S) port from one source
address, the way a slowloris client does, for tests/integration/attack_*.t.

  attack_http.py --port P --src 127.0.0.2 [--tls CAFILE] [--path /healthz]
                 [--tls-silent M] [--partial K] [--full-noread F] [--idle N]
                 [--reopen] --stop FILE

Opens, in this order: M connections that complete the TLS handshake and
send nothing; K that send the start of a request head and then one more
header byte every second; F that send a whole GET request and never read
the answer (small receive buffer); N plain TCP connections that send
nothing. Prints one line "opened=<connected> failed=<not connected>" once
all are attempted, then keeps them (dribbling the partial heads) until the
file --stop names exists, then closes everything and exits. With --reopen,
a connection the server closes is opened again at once (of the same kind),
so the attack stays as large as it was."""
import argparse
import os
import select
import socket
import ssl
import threading
import time


def connect(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind((args.src, 0))
    s.settimeout(args.connect_timeout)
    s.connect(("127.0.0.1", args.port))
    return s


def wrap(args, s):
    if not args.tls:
        return s
    ctx = ssl.create_default_context(cafile=args.tls)
    ctx.check_hostname = False
    t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    t.settimeout(None)
    return t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--src", default="127.0.0.1")
    p.add_argument("--tls")
    p.add_argument("--path", default="/healthz")
    p.add_argument("--tls-silent", type=int, default=0)
    p.add_argument("--partial", type=int, default=0)
    p.add_argument("--full-noread", type=int, default=0)
    p.add_argument("--idle", type=int, default=0)
    p.add_argument("--connect-timeout", type=float, default=3.0)
    p.add_argument("--reopen", action="store_true")
    p.add_argument("--stop", required=True)
    args = p.parse_args()

    held, failed = [], 0   # held: [kind, socket]
    plan = [("tls", args.tls_silent), ("partial", args.partial),
            ("full", args.full_noread), ("idle", args.idle)]

    def open_one(kind):
        s = connect(args)
        if kind != "idle":
            s = wrap(args, s)
        if kind == "partial":
            s.sendall(b"POST /api/compute/instances/list HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        elif kind == "full":
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % args.path).encode() * 64)
        return s

    for kind, n in plan:
        for _ in range(n):
            try:
                held.append([kind, open_one(kind)])
            except (OSError, ssl.SSLError):
                failed += 1
    print("opened=%d failed=%d" % (len(held), failed), flush=True)

    stop = threading.Event()

    def closed(kind, s):
        if kind == "full":
            return False
        try:
            r, _, _ = select.select([s], [], [], 0)
            if not r:
                return False
            s.setblocking(False)
            got = s.recv(1)
            s.setblocking(True)
            return not got
        except (ssl.SSLWantReadError, BlockingIOError):
            s.setblocking(True)
            return False
        except (OSError, ssl.SSLError, ValueError):
            return True

    def tend():
        tick = 0
        while not stop.wait(0.2):
            tick += 1
            for h in held:
                kind, s = h
                if kind == "partial" and tick % 5 == 0:
                    try:
                        s.send(b"a")
                    except (OSError, ssl.SSLError):
                        pass
                if args.reopen and closed(kind, s):
                    s.close()
                    try:
                        h[1] = open_one(kind)
                    except (OSError, ssl.SSLError):
                        pass

    t = threading.Thread(target=tend, daemon=True)
    t.start()
    while not os.path.exists(args.stop):
        time.sleep(0.2)
    stop.set()
    t.join()
    for _, s in held:
        try:
            s.close()
        except OSError:
            pass


if __name__ == "__main__":
    main()
