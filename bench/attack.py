#!/usr/bin/python3
"""attack.py: what a stranger without credentials holds open against a
controller, for the "API under attack" row of `make bench` (bench/run.sh).

  attack.py --grpc HOST:PORT --held N --http HOST:PORT --idle M --status FILE

--held N: N unary calls (grpc.health.v1.Health/Check, which needs no
credential) opened as HTTP/2 HEADERS with no DATA and never finished, over
TLS connections of at most 10 streams each (fewer if the server's
SETTINGS_MAX_CONCURRENT_STREAMS says so). A call the server resets or
answers is opened again, a connection it closes is made again: the
attacker keeps N outstanding.
--idle M: M TCP connections to the JSON/HTTP port that never send a byte,
made again when the server closes them.

FILE is rewritten every 0.5 s: "held=<calls outstanding now> idle=<open
now> reopened=<calls opened again> reconnected=<idle connections made
again>". Runs until killed. Needs python3-h2 (Debian).
"""
import argparse
import os
import socket
import ssl
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

lock = threading.Lock()
tally = {"held": 0, "idle": 0, "reopened": 0, "reconnected": 0}


def bump(key, n=1):
    with lock:
        tally[key] += n


def split(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


class Held(threading.Thread):
    """One TLS connection keeping `want` calls outstanding."""

    def __init__(self, addr, want):
        super().__init__(daemon=True)
        self.addr, self.want = addr, want

    def connect(self):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection(split(self.addr), timeout=10)
        sock = ctx.wrap_socket(raw, server_hostname="localhost")
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        sock.settimeout(0.5)
        return sock, conn

    def open_call(self, conn):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [
            (":method", "POST"), (":scheme", "https"), (":authority", self.addr),
            (":path", "/grpc.health.v1.Health/Check"),
            ("content-type", "application/grpc"), ("te", "trailers"),
        ], end_stream=False)
        return sid

    def session(self):
        sock, conn = self.connect()
        open_ids = set()
        try:
            while True:
                limit = min(self.want, conn.remote_settings.max_concurrent_streams)
                while len(open_ids) < limit:
                    open_ids.add(self.open_call(conn))
                    bump("held")
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                for ev in conn.receive_data(data):
                    sid = getattr(ev, "stream_id", None)
                    if isinstance(ev, (h2.events.StreamReset, h2.events.StreamEnded,
                                       h2.events.ResponseReceived)) and sid in open_ids:
                        open_ids.discard(sid)
                        bump("held", -1)
                        bump("reopened")
                        if isinstance(ev, h2.events.ResponseReceived):
                            conn.reset_stream(sid)
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        return
        finally:
            bump("held", -len(open_ids))
            sock.close()

    def run(self):
        while True:
            try:
                self.session()
            except (OSError, ssl.SSLError, h2.exceptions.H2Error):
                pass
            time.sleep(0.2)


def idle_loop(addr, want):
    socks = []
    first = True
    while True:
        alive = []
        for s in socks:
            try:
                s.setblocking(False)
                gone = s.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                s.close()
            else:
                alive.append(s)
        socks = alive
        while len(socks) < want:
            try:
                socks.append(socket.create_connection(split(addr), timeout=5))
                if not first:
                    bump("reconnected")
            except OSError:
                break
        first = first and len(socks) < want
        with lock:
            tally["idle"] = len(socks)
        time.sleep(0.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc")
    ap.add_argument("--held", type=int, default=0)
    ap.add_argument("--http")
    ap.add_argument("--idle", type=int, default=0)
    ap.add_argument("--status", required=True)
    a = ap.parse_args()
    left = a.held
    while left > 0:
        Held(a.grpc, min(10, left)).start()
        left -= 10
    if a.idle:
        threading.Thread(target=idle_loop, args=(a.http, a.idle), daemon=True).start()
    while True:
        with lock:
            line = " ".join(f"{k}={v}" for k, v in tally.items())
        with open(a.status + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(a.status + ".tmp", a.status)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
