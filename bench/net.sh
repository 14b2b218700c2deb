#!/usr/bin/env bash
# net.sh: the nftables rows of `make bench` (called by bench/run.sh, which
# prints them in its table). Needs root and network namespaces; prints
# nothing (and says why on stderr) otherwise.
#
#   full ruleset load, 10/100/1,000/5,000 guarded instances: agent code
#     (tests/net/netdrv apply: parse the spec, read the tables, build, one
#     transaction filling the idle half and switching to it) next to `nft -f`
#     loading the same ruleset's text (one half, saved with `nft list
#     ruleset` after a load from empty; both tables replaced whole)
#   per-packet cost: ping -f round trips between two guarded guests with
#     10 and with 5,000 guarded taps in the ruleset
#
# Output: one tab-separated row per line: name, metric, bc value, peer
# name, peer value.
set -u

BC_SRC=${BC_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
NETDRV=$BC_SRC/build/tests/net/netdrv
: "${BENCH_NET_SIZES:=10 100 1000 5000}"
: "${BENCH_NET_LOADS:=5}"
: "${BENCH_NET_PINGS:=50000}"

if [ "$(id -u)" -ne 0 ] || ! ip netns add "bcbench$$" 2>/dev/null; then
	echo "bench/net.sh: skipped: needs root and network namespaces" >&2
	exit 0
fi
ns=bcbench$$
tmp=$(mktemp -d /tmp/bcbench.XXXXXX)
cleanup() {
	local n
	for n in "$ns" "${ns}g0" "${ns}g1"; do ip netns del "$n" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

now_ms() { awk "BEGIN{printf \"%.3f\", ${EPOCHREALTIME/,/.} * 1000}"; }

# spec N FILE: N guarded instances (every third private, every other one
# ssh-only); instances 0 and 1 are the two guests of the packet test.
spec() {
	/usr/bin/python3 - "$1" >"$2" <<'EOF'
import json, sys
n = int(sys.argv[1])
inst = []
for i in range(n):
    inst.append({"id": "inst_%d" % i,
                 "networkPolicy": "private" if i % 3 == 2 else "egress",
                 "sshFromHostOnly": i % 2 == 1,
                 "nics": [{"tap": "t%d" % i, "mac": "52:54:00:00:%02x:%02x" % (i >> 8, i & 255),
                           "ipv4": "10.64.%d.%d" % (i // 250, i % 250 + 2), "ipv4Prefix": 16,
                           "ipv6": "fd64::%x" % (i + 2), "ipv6Prefix": 64}]})
print(json.dumps({"generation": 1, "bridge": "bcbr0", "ipamSubnet": "10.64.0.0/16",
                  "ipamGateway": "10.64.255.1", "ipamSubnet6": "fd64::/64", "instances": inst}))
EOF
}

# mean ms of BENCH_NET_LOADS runs of CMD...
timed() {
	local i t0 total=0
	for ((i = 0; i < BENCH_NET_LOADS; i++)); do
		t0=$(now_ms)
		"$@" >/dev/null 2>>"$tmp/err" || { echo "bench/net.sh: failed: $*" >&2; return 1; }
		total=$(awk "BEGIN{print $total + $(now_ms) - $t0}")
	done
	awk "BEGIN{printf \"%.1f\", $total / $BENCH_NET_LOADS}"
}

ip -n "$ns" link add bcbr0 type bridge
ip -n "$ns" addr add 10.64.255.1/16 dev bcbr0
ip -n "$ns" link set bcbr0 up
for n in $BENCH_NET_SIZES; do
	spec "$n" "$tmp/spec$n.json"
	# one half only in the text: a load from empty
	ip netns exec "$ns" nft flush ruleset
	ip netns exec "$ns" "$NETDRV" apply "$tmp/spec$n.json" >/dev/null 2>&1
	# the same ruleset as text; nft cannot parse its own rendering of a
	# raw-payload set lookup (the neighbour-advert target), so those three
	# rules are loaded as the same-sized ip6 saddr lookup
	{
		printf 'table bridge bcd_instances\ndelete table bridge bcd_instances\n'
		printf 'table inet bcd_taps\ndelete table inet bcd_taps\n'
		ip netns exec "$ns" nft list ruleset | sed 's/@th,64,128 @/ip6 saddr @/'
	} >"$tmp/rules$n.nft"
	bc=$(timed ip netns exec "$ns" "$NETDRV" apply "$tmp/spec$n.json")
	peer=$(timed ip netns exec "$ns" nft -f "$tmp/rules$n.nft")
	rules=$(grep -c 'drop$\|vmap\|jump' "$tmp/rules$n.nft")
	printf 'nftables full load, %s inst\tms\t%s\tnft -f same text\t%s\n' "$n" "$bc" "$peer"
	echo "bench/net.sh: $n instances: $rules rules, agent $bc ms, nft -f $peer ms" >&2
done

# per-packet: two guests on the bridge, ports t0 and t1
for g in 0 1; do
	ip netns add "${ns}g$g"
	ip -n "$ns" link add "t$g" type veth peer name eth0 netns "${ns}g$g"
	ip -n "$ns" link set "t$g" master bcbr0 up
	ip -n "${ns}g$g" link set eth0 address "52:54:00:00:00:0$g" up
	ip -n "${ns}g$g" addr add "10.64.0.$((g + 2))/16" dev eth0
done
per_ping_us() {
	local out ms
	ip netns exec "$ns" "$NETDRV" apply "$tmp/spec$1.json" >/dev/null 2>&1 || return 1
	ip netns exec "${ns}g0" ping -c 3 -q 10.64.0.3 >/dev/null 2>&1
	out=$(ip netns exec "${ns}g0" ping -f -c "$BENCH_NET_PINGS" -q 10.64.0.3 2>&1)
	ms=$(echo "$out" | sed -n 's/.* received.* time \([0-9]*\)ms.*/\1/p')
	awk "BEGIN{printf \"%.2f\", $ms * 1000 / $BENCH_NET_PINGS}"
}
[ -f "$tmp/spec10.json" ] || spec 10 "$tmp/spec10.json"
[ -f "$tmp/spec5000.json" ] || spec 5000 "$tmp/spec5000.json"
p10=$(per_ping_us 10)
p5000=$(per_ping_us 5000)
printf 'ping -f round trip, 5000 guarded taps\tus\t%s\tsame, 10 guarded taps\t%s\n' "$p5000" "$p10"
exit 0
