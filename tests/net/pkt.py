#!/usr/bin/python3
"""pkt.py: send crafted frames from one network namespace and count them on
another namespace's interface, in one process (setns), for tests/net.

  pkt.py once RECV_NS RECV_IF SEND_NS SEND_IF 'SCAPY_EXPR'
      send the frame once (three copies, 20 ms apart) and print how many
      arrived unchanged on RECV_IF within 1 s (0 = dropped)
  pkt.py flood RECV_NS RECV_IF SEND_NS SEND_IF SECONDS 'SCAPY_EXPR'
      send the frame every 2 ms for SECONDS; print "sent N received M"
  pkt.py send SEND_NS SEND_IF COUNT 'SCAPY_EXPR'
      send the frame COUNT times, 1 ms apart (nothing is counted)
  pkt.py macflood SEND_NS SEND_IF COUNT 'SCAPY_EXPR'
      send the frame COUNT times, each with a fresh random locally
      administered unicast source MAC (the bridge's MAC table filler)

A frame counts as arrived when the bytes captured on RECV_IF start with the
bytes sent (the bridge forwards frames unchanged). Namespaces are names
under /run/netns ("-" = stay where we are)."""
import ctypes
import os
import select
import socket
import sys
import time

from scapy.all import ARP, Dot1Q, Ether, ICMPv6ND_NA, ICMPv6ND_RA, ICMPv6ND_RS, ICMP, IP, IPv6, Raw, TCP, UDP  # noqa: F401
from scapy.all import BOOTP, DHCP, DHCP6_Advertise, DHCP6_Reply, DHCP6_Solicit  # noqa: F401
from scapy.all import IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, PadN  # noqa: F401

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def enter(ns):
    if ns == "-":
        return
    fd = os.open("/run/netns/" + ns, os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns " + ns)
    os.close(fd)


def sock(ns, ifname):
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    enter(ns)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((ifname, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    libc.setns(home, CLONE_NEWNET)
    os.close(home)
    return s


def count(rx, frame, until):
    n = 0
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return n
        r, _, _ = select.select([rx], [], [], left)
        if not r:
            return n
        data, addr = rx.recvfrom(65535)
        if addr[2] != socket.PACKET_OUTGOING and data.startswith(frame):
            n += 1


def send_only(mode):
    tx = sock(sys.argv[2], sys.argv[3])
    n = int(sys.argv[4])
    frame = bytes(eval(sys.argv[5]))
    for i in range(n):
        if mode == "macflood":
            mac = bytes([0x02]) + os.urandom(5)
            frame = frame[:6] + mac + frame[12:]
        tx.send(frame)
        if mode == "send":
            time.sleep(0.001)
    print("sent %d" % n)


def main():
    mode = sys.argv[1]
    if mode in ("send", "macflood"):
        return send_only(mode)
    rns, rif, sns, sif = sys.argv[2:6]
    rx = sock(rns, rif)
    tx = sock(sns, sif)
    frame = bytes(eval(sys.argv[-1]))
    if mode == "once":
        for _ in range(3):
            tx.send(frame)
            time.sleep(0.02)
        print(min(count(rx, frame, time.monotonic() + 1.0), 3))
        return
    seconds = float(sys.argv[6])
    end = time.monotonic() + seconds
    sent = got = 0
    while time.monotonic() < end:
        tx.send(frame)
        sent += 1
        got += count(rx, frame, time.monotonic() + 0.002)
    got += count(rx, frame, time.monotonic() + 0.5)
    print("sent %d received %d" % (sent, got))


main()
