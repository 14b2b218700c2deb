# hostports.t: from the pool's bridge, guests reach only the host ports the
# operator opened (guest_host_ports; here tcp/2222 and udp/5001) on any of
# the host's addresses, and tcp/9469 (the guest-up signal) and tcp/9470
# (the identity endpoint) on the pool's IPv4 gateway only, whatever their policy; ICMP, neighbour discovery and
# replies to the host's own connections still pass. Listeners run in the
# host namespace.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/spec.json"

# host_udp_echo PORT...: UDP echo servers in the host namespace
host_udp_echo() {
	local port
	for port in "$@"; do
		in_h /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("::", int(sys.argv[1])))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
' "$port" </dev/null >/dev/null 2>&1 &
	done
}
# udp_ok G DST PORT: guest G gets an answer from DST:PORT within 2 s
udp_ok() {
	in_g "$1" /usr/bin/python3 -c '
import socket, sys
dst, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in dst else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(b"ping", (dst, port))
sys.exit(0 if s.recv(100) == b"ping" else 1)
' "$2" "$3" 2>/dev/null
}

listen h 2222 8080 9469 9470 9471
host_udp_echo 5001 5002
listen a 80

# control: with no ruleset loaded every host port is open to guests
tcp_ok a 10.77.0.1 8080;  ok $? 'control: before the ruleset a guest connects to host port 8080'
udp_ok a 10.77.0.1 5002;  ok $? 'control: and gets an answer from host udp/5002'

out=$(NETDRV_HOST_PORTS='tcp/2222 udp/5001' net_apply "$NET_TMP/spec.json")
ok $? 'ruleset loaded with tcp/2222 and udp/5001 open to guests'

tcp_ok a 10.77.0.1 8080;      ok $((! $?)) 'a guest cannot connect to host tcp/8080 (bridge address)'
tcp_ok a 192.0.2.1 8080;      ok $((! $?)) 'nor on a host address off the bridge'
tcp_ok a fd77::1 8080;        ok $((! $?)) 'nor over IPv6'
tcp_ok c 10.77.0.1 8080;      ok $((! $?)) 'nor from a none guest'
tcp_ok e 10.77.0.1 8080;      ok $((! $?)) 'nor from an unguarded guest'
udp_ok a 10.77.0.1 5002;      ok $((! $?)) 'a guest gets no answer from host udp/5002'
tcp_ok a 10.77.0.1 2222;      ok $? 'an allowed port: a guest connects to host tcp/2222'
tcp_ok a fd77::1 2222;        ok $? 'and over IPv6'
tcp_ok c 10.77.0.1 2222;      ok $? 'and from a none guest'
udp_ok a 10.77.0.1 5001;      ok $? 'an allowed port: host udp/5001 answers a guest'
in_g a ping -c1 -W2 -q 10.77.0.1 >/dev/null;      ok $? 'guests still ping the host'
in_g a ping -6 -c1 -W2 -q fd77::1 >/dev/null;     ok $? 'and over IPv6 (neighbour discovery passes)'
tcp_ok a 10.77.0.1 9469;      ok $? 'the guest-up port: an egress guest reaches tcp/9469 on the gateway'
tcp_ok b 10.77.0.1 9469;      ok $? 'and a private guest'
tcp_ok c 10.77.0.1 9469;      ok $? 'and a none guest'
tcp_ok a 192.0.2.1 9469;      ok $((! $?)) 'but not tcp/9469 on a host address off the bridge'
tcp_ok a fd77::1 9469;        ok $((! $?)) 'nor over IPv6'
tcp_ok a 10.77.0.1 9470;      ok $? 'the identity port: an egress guest reaches tcp/9470 on the gateway'
tcp_ok b 10.77.0.1 9470;      ok $? 'and a private guest'
tcp_ok c 10.77.0.1 9470;      ok $? 'and a none guest'
tcp_ok a 192.0.2.1 9470;      ok $((! $?)) 'but not tcp/9470 on a host address off the bridge'
tcp_ok a fd77::1 9470;        ok $((! $?)) 'nor over IPv6'
tcp_ok a 10.77.0.1 9471;      ok $((! $?)) 'and no port beside them (tcp/9471)'
tcp_ok h 10.77.0.10 80;       ok $? "the host's own connections to a guest still work (replies pass)"
in_g a ping -c1 -W2 -q 10.77.0.13 >/dev/null;     ok $? 'guest to guest traffic is not affected'

# none open: the default list without DHCP/DNS servers still lets ICMP through
out=$(NETDRV_HOST_PORTS=none net_apply "$NET_TMP/spec.json")
ok $? 'reloaded with no host port open'
tcp_ok a 10.77.0.1 2222;      ok $((! $?)) 'no port open: tcp/2222 closed to guests'
tcp_ok a 10.77.0.1 9469;      ok $? 'the guest-up port stays open on the gateway'
tcp_ok a 10.77.0.1 9470;      ok $? 'and the identity port'
tcp_ok h 10.77.0.10 80;       ok $? 'the host still reaches a guest'

done_testing
