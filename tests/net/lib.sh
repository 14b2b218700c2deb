# lib.sh: the namespace topology of the network tests. Sourced by
# tests/net/*.t after tap.sh.
#
# A namespace $H poses as the host: bridge bcbr0 (10.77.0.1/24, fd77::1/64)
# and on lo 192.0.2.1 and 2001:db8::1, addresses not on the bridge.
# Each guest namespace $G_x has eth0, the peer of the veth port bcx0 on the
# bridge (standing in for the instance's tap):
#
#   a  egress, guarded        52:54:00:00:00:0a  10.77.0.10  fd77::a
#   b  private, guarded       52:54:00:00:00:0b  10.77.0.11  fd77::b
#   c  none, guarded (v4)     52:54:00:00:00:0c  10.77.0.12
#   d  egress + ssh-only      52:54:00:00:00:0d  10.77.0.13  fd77::d
#   e  unguarded (no IPAM)    52:54:00:00:00:0e  10.77.0.50  fd77::50 (self-chosen)
#
# net_spec writes the NodeSpec JSON of that; netdrv loads it in $H.

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
NETDRV=${NETDRV:-$BC_SRC/build/tests/net/netdrv}
PKT="/usr/bin/python3 $BC_SRC/tests/net/pkt.py"
P=bcn$$
H=${P}h
GUESTS="a b c d e"
NET_TMP=$(mktemp -d /tmp/bcnet.XXXXXX)

net_require() {
	[ "$(id -u)" -eq 0 ] || skip_all "needs root (network namespaces, nftables)"
	ip netns add "${P}probe" 2>/dev/null || skip_all "cannot create network namespaces"
	ip netns del "${P}probe"
	[ -x "$NETDRV" ] || bail_out "no $NETDRV: run make first"
	/usr/bin/python3 -c 'import scapy' 2>/dev/null || bail_out "python3-scapy missing (make deps)"
}

in_h() { ip netns exec "$H" "$@"; }
in_g() { local g=$1; shift; ip netns exec "$P$g" "$@"; }

net_cleanup() {
	local g ns
	for ns in $(for g in $GUESTS; do echo "$P$g"; done) "$H"; do
		# every process left in the namespace (listeners, a bcd)
		ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "$NET_TMP"
}

net_setup() {
	local g
	tap_on_exit net_cleanup
	ip netns add "$H" || bail_out "netns add"
	in_h sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	in_h ip link set lo up
	in_h ip link add bcbr0 type bridge
	in_h ip addr add 10.77.0.1/24 dev bcbr0
	in_h ip addr add fd77::1/64 dev bcbr0 nodad
	in_h ip addr add 192.0.2.1/32 dev lo
	in_h ip addr add 2001:db8::1/128 dev lo nodad
	for g in $GUESTS; do
		ip netns add "$P$g"
		in_g "$g" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
		in_h ip link add "bc${g}0" type veth peer name eth0 netns "$P$g"
		in_h ip link set "bc${g}0" master bcbr0 up
		in_g "$g" ip link set lo up
		in_g "$g" ip link set eth0 address "52:54:00:00:00:0$g" up
	done
	in_h ip link set bcbr0 up
	in_g a ip addr add 10.77.0.10/24 dev eth0
	in_g a ip addr add fd77::a/64 dev eth0 nodad
	in_g b ip addr add 10.77.0.11/24 dev eth0
	in_g b ip addr add fd77::b/64 dev eth0 nodad
	in_g c ip addr add 10.77.0.12/24 dev eth0
	in_g d ip addr add 10.77.0.13/24 dev eth0
	in_g d ip addr add fd77::d/64 dev eth0 nodad
	in_g e ip addr add 10.77.0.50/24 dev eth0
	in_g e ip addr add fd77::50/64 dev eth0 nodad
	for g in $GUESTS; do
		in_g "$g" ip route add default via 10.77.0.1
		in_g "$g" ip -6 route add default via fd77::1 2>/dev/null
	done
	# the bridge's link-local is one of the host's addresses: wait for it
	eventually 5 bridge_ll || bail_out "bcbr0 has no link-local address"
}

bridge_ll() { in_h ip -6 addr show dev bcbr0 scope link | grep -q 'inet6 fe80'; }

# net_spec FILE [c_policy]: the NodeSpec of the topology (c's policy
# varies in the replace test).
net_spec() {
	local file=$1 cpol=${2:-none}
	cat >"$file" <<EOF
{"generation":1,"bridge":"bcbr0","ipamSubnet":"10.77.0.0/24","ipamGateway":"10.77.0.1","ipamSubnet6":"fd77::/64",
 "instances":[
  {"id":"inst_a","networkPolicy":"egress","nics":[{"tap":"bca0","mac":"52:54:00:00:00:0a","ipv4":"10.77.0.10","ipv4Prefix":24,"ipv6":"fd77::a","ipv6Prefix":64}]},
  {"id":"inst_b","networkPolicy":"private","nics":[{"tap":"bcb0","mac":"52:54:00:00:00:0b","ipv4":"10.77.0.11","ipv4Prefix":24,"ipv6":"fd77::b","ipv6Prefix":64}]},
  {"id":"inst_c","networkPolicy":"$cpol","nics":[{"tap":"bcc0","mac":"52:54:00:00:00:0c","ipv4":"10.77.0.12","ipv4Prefix":24}]},
  {"id":"inst_d","networkPolicy":"egress","sshFromHostOnly":true,"nics":[{"tap":"bcd0","mac":"52:54:00:00:00:0d","ipv4":"10.77.0.13","ipv4Prefix":24,"ipv6":"fd77::d","ipv6Prefix":64}]},
  {"id":"inst_e","nics":[{"tap":"bce0"}]}
 ]}
EOF
}

# net_apply FILE: load FILE's ruleset in $H; fails the test run if it fails
net_apply() { in_h "$NETDRV" apply "$1"; }

# arrives FROM_G TO RECV_IF EXPR: how many copies of EXPR sent from guest
# FROM_G's eth0 arrive on RECV_IF of namespace TO ("h" = the host).
arrives() {
	local from=$1 to=$2 rif=$3 expr=$4 rns
	if [ "$to" = h ]; then rns=$H; else rns=$P$to; fi
	$PKT once "$rns" "$rif" "$P$from" eth0 "$expr"
}

# ns_of X: the namespace of guest letter X, or of the host for h
ns_of() { if [ "$1" = h ]; then echo "$H"; else echo "$P$1"; fi; }

# arrives_via FROM FROM_IF TO RECV_IF EXPR: like arrives, from any
# interface of any namespace (h bcbr0: the host sending through the bridge)
arrives_via() { $PKT once "$(ns_of "$3")" "$4" "$(ns_of "$1")" "$2" "$5"; }

# tcp_ok NS DST PORT [SRC]: a TCP connection from namespace NS (a guest
# letter or h) to DST:PORT is accepted within 2 s
tcp_ok() {
	local ns=$1 dst=$2 port=$3 src=${4:-}
	[ "$ns" = h ] && ns=$H || ns=$P$ns
	ip netns exec "$ns" /usr/bin/python3 -c '
import socket, sys
dst, port, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.settimeout(2)
if src:
    s.bind((src, 0))
s.connect((dst, port))
' "$dst" "$port" "$src" 2>/dev/null
}

# listen G PORT...: accept-and-close servers in guest G, or in the host
# namespace for h (ended with the namespace by net_cleanup)
listen() {
	local g=$1 port
	shift
	for port in "$@"; do
		ip netns exec "$(ns_of "$g")" /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.close()
' "$port" </dev/null >/dev/null 2>&1 &
	done
	sleep 0.5
}
