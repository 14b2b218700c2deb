# links.t: agent/netlink.c and the link part of agent/net.c in an empty
# namespace: the bridge is made with the gateway address, every tap is
# made (a real tun/tap device), enslaved and up; doing it again changes
# nothing; a tap whose instance leaves the spec is removed.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
ip netns add "$H" || bail_out "netns add"
tap_on_exit net_cleanup
net_spec "$NET_TMP/spec.json"
/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
s["instances"] = [i for i in s["instances"] if i["id"] != "inst_e"]
json.dump(s, open(sys.argv[2], "w"))' "$NET_TMP/spec.json" "$NET_TMP/less.json"

in_h "$NETDRV" links "$NET_TMP/spec.json"
ok $? 'links made'
in_h ip -d link show bcbr0 | grep -q 'bridge '
ok $? 'bcbr0 is a bridge'
in_h ip addr show dev bcbr0 | grep -q 'inet 10.77.0.1/24'
ok $? 'with the gateway address and the subnet prefix'
in_h ip link show bcbr0 | grep -q 'state UP\|,UP'
ok $? 'and up'
for t in bca0 bcb0 bcc0 bcd0 bce0; do
	in_h ip -d link show "$t" 2>/dev/null | grep -q 'tun type tap'
	ok $? "$t is a tap"
	in_h ip link show "$t" | grep -q 'master bcbr0'
	ok $? "$t is enslaved to bcbr0"
done
before=$(in_h ip -o link show | awk '{print $1, $2}')
in_h "$NETDRV" links "$NET_TMP/spec.json"
ok $? 'links made again'
is "$(in_h ip -o link show | awk '{print $1, $2}')" "$before" 'nothing was recreated'

in_h ip link add notabridge type veth peer name notabridge1
sed 's/"bridge":"bcbr0"/"bridge":"notabridge"/' "$NET_TMP/spec.json" >"$NET_TMP/wrong.json"
in_h "$NETDRV" links "$NET_TMP/wrong.json" 2>/dev/null
ok $((! $?)) 'a link of another kind under the bridge name is refused'

out=$(in_h "$NETDRV" converge "$NET_TMP/spec.json" "$NET_TMP/less.json" 2>"$NET_TMP/log")
ok $? 'converge with every instance, then without inst_e'
grep -q 'tap bce0 removed' "$NET_TMP/log"
ok $? 'the removal is logged'
in_h ip link show bce0 >/dev/null 2>&1
ok $((! $?)) "inst_e's tap is gone"

# passes over the same spec hold each tap once (the list of made taps
# once grew by every tap at every pass), and a tap that leaves the spec is
# removed and dropped at once
out=$(in_h "$NETDRV" converge "$NET_TMP/spec.json" "$NET_TMP/spec.json" "$NET_TMP/spec.json" \
	"$NET_TMP/spec.json" "$NET_TMP/less.json" 2>"$NET_TMP/log")
held=$(grep '^taps held' <<<"$out" | awk '{print $3}' | tr '\n' ' ')
ntaps=$(grep -o '"tap":"[^"]*"' "$NET_TMP/spec.json" | sort -u | wc -l)
is "$held" "$ntaps $ntaps $ntaps $ntaps $((ntaps - 1)) " 'each tap is held once, pass after pass'
is "$(grep -c 'tap bce0 removed' "$NET_TMP/log")" 1 'the removal is logged once'
in_h ip link show bca0 >/dev/null 2>&1
ok $? 'the other taps stay'

done_testing
