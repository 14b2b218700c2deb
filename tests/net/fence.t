# fence.t: a fenced converge pass (agent/converge.c: bcd cut off from
# every controller for node_lost_seconds) pauses the running instances and
# sets their taps down, so a guest's frames stop at the bridge; the next
# normal pass (the fence lifted: the controller confirmed the spec) brings
# the taps up and resumes the instances. The control: the same frame
# arrives before the fence and after it lifts.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/one.json" none
sd=$NET_TMP/state
mkdir -p "$sd"
U="UDP(sport=4000,dport=4001)/Raw(b'fence')"
from_d() {
	arrives d e eth0 "Ether(src='52:54:00:00:00:0d',dst='ff:ff:ff:ff:ff:ff')/IP(src='10.77.0.13',dst='10.77.0.255')/$U"
}
link_up() { in_h ip -o link show "$1" | grep -q '[<,]UP[,>]'; }

out=$(in_h "$NETDRV" pass "$sd" "$NET_TMP/one.json" 2>"$NET_TMP/log")
ok $? 'a normal pass'
like "$out" 'inst_d running' '... the instance runs'
ok "link_up bcd0" '... its tap is up'
isnt "$(from_d)" 0 "... and its guest's frames reach another guest"

out=$(in_h "$NETDRV" pass "$sd" "$NET_TMP/one.json" --fence "$NET_TMP/one.json" 2>>"$NET_TMP/log")
ok $? 'a pass, then one fenced'
like "$out" 'inst_d paused Fenced: no contact with a controller' 'fenced: the instance is paused, reported Fenced'
grep -q 'op=pause id=inst_d ' "$sd/fake/ledger.log"
ok $? '... the runtime paused it'
ok "! link_up bcd0" '... its tap is down'
is "$(from_d)" 0 "... and its guest's frames go nowhere"
like "$(cat "$NET_TMP/log")" 'fence: no contact with a controller' 'the fence is logged'

out=$(in_h "$NETDRV" pass "$sd" "$NET_TMP/one.json" 2>>"$NET_TMP/log")
ok $? 'the fence lifted: a normal pass'
like "$out" 'inst_d running' '... the instance resumed'
ok "link_up bcd0" '... its tap up again'
isnt "$(from_d)" 0 "... and its guest's frames flow again"

done_testing
