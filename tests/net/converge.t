# converge.t: the converge pass (agent/converge.c) with networking, over the
# fake runtime: the ruleset is loaded before any instance is created; an
# instance whose policy cannot be expressed is never created and is
# reported error; one that becomes inexpressible while running is stopped;
# a refused load puts the changed instances in error and stops them, the
# others keep running under the previous rules.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/one.json" none
net_spec "$NET_TMP/two.json" private
# a loses its MAC and asks for none: inexpressible
sed 's/"mac":"52:54:00:00:00:0a",//; s/"id":"inst_a","networkPolicy":"egress"/"id":"inst_a","networkPolicy":"none"/' \
	"$NET_TMP/one.json" >"$NET_TMP/three.json"
# a new instance f asks for private without addresses: inexpressible
sed 's/"id":"inst_e","nics"/"id":"inst_f","networkPolicy":"private","nics":[{"tap":"bcf0"}]},{"id":"inst_e","nics"/' \
	"$NET_TMP/one.json" >"$NET_TMP/one_f.json"
sd=$NET_TMP/state
mkdir -p "$sd"

out=$(in_h "$NETDRV" pass "$sd" "$NET_TMP/one_f.json" "$NET_TMP/three.json" --break "$NET_TMP/two.json" 2>"$NET_TMP/log")
ok $? 'three converge passes'
pass_of() { echo "$out" | awk -v f="$1" '/^pass /{p=($2 ~ f)} p && !/^pass /'; }
p1=$(pass_of one_f.json); p2=$(pass_of three.json); p3=$(pass_of two.json)

like "$p1" 'inst_f error NetworkPolicy: private needs IPAM addresses and a valid MAC on bcf0' \
	'pass 1: a private NIC without addresses: error with the reason'
ok "! grep -q 'id=inst_f' '$sd/fake/ledger.log'" 'pass 1: that instance was never created'
like "$p1" 'inst_a running' 'pass 1: the others run'
first_load=$(grep -n 'ruleset loaded' "$NET_TMP/log" | head -1 | cut -d: -f1)
first_create=$(grep -n ': created' "$NET_TMP/log" | head -1 | cut -d: -f1)
ok "[ $first_load -lt $first_create ]" 'the ruleset is loaded before the first instance is created'
ok "ip netns exec $H ip link show bcf0 >/dev/null 2>&1; [ \$? -ne 0 ]" 'no tap is made for the refused instance'

like "$p2" 'inst_a error NetworkPolicy: none needs IPAM addresses and a valid MAC on bca0' \
	'pass 2: a running instance whose policy becomes inexpressible: error'
grep -q 'op=stop id=inst_a ' "$sd/fake/ledger.log"
ok $? 'pass 2: and it is stopped'

like "$p3" 'inst_c error NetworkPolicy: rules failed to load: ' 'pass 3: refused load: the changed instance (c) in error'
grep -q 'op=stop id=inst_c ' "$sd/fake/ledger.log"
ok $? 'pass 3: and stopped'
like "$p3" 'inst_b running' 'pass 3: an unchanged instance keeps running'
ok "! grep -q 'op=stop id=inst_b ' '$sd/fake/ledger.log'" 'pass 3: and was never stopped'
in_h "$NETDRV" check "$NET_TMP/three.json" >/dev/null 2>&1
ok $? 'pass 3: the previous ruleset is still in force'

# a refused instance's tap is blocked, not left unguarded, while it stops
U="UDP(sport=4000,dport=4001)/Raw(b'converge')"
is "$(arrives a e eth0 "Ether(src='52:54:00:00:00:0a',dst='ff:ff:ff:ff:ff:ff')/IP(src='10.77.0.10',dst='10.77.0.255')/$U")" 0 \
	"the refused instance's tap (a) sends nothing"
isnt "$(arrives d e eth0 "Ether(src='52:54:00:00:00:0d',dst='ff:ff:ff:ff:ff:ff')/IP(src='10.77.0.13',dst='10.77.0.255')/$U")" 0 \
	'a running instance (d) still does'

# a tap an earlier bcd left on the bridge for an instance that is gone
# since: the next bcd process removes it at its first pass; the guests'
# ports (veths, not taps) stay
in_h ip tuntap add dev bcz9 mode tap && in_h ip link set bcz9 master bcbr0
ok $? 'a leftover tap bcz9 on the bridge'
in_h "$NETDRV" pass "$sd" "$NET_TMP/one.json" >/dev/null 2>"$NET_TMP/log2"
ok "! in_h ip link show bcz9 >/dev/null 2>&1" 'a new process removes the tap no spec names'
ok "in_h ip link show bca0 >/dev/null 2>&1" 'the named taps stay'
is "$(in_h ls /sys/class/net/bcbr0/brif | grep -c '^bc[a-e]0$')" "$(echo $GUESTS | wc -w)" \
	"the guests' own ports (veths, not taps) stay on the bridge"

done_testing
