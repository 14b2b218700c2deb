# fdb.t: the bridge's MAC table (FDB) cannot be poisoned or filled from a
# tap. A guest sending frames with another guest's MAC as source must not
# move that MAC to its own port (the bridge learns before its forward and
# input hooks run: the source checks sit in prerouting, tap ports do not
# learn, each NIC's MAC is a static entry on its tap); a guest sending
# frames with fresh MACs must not grow the table; a guarded tap receives no
# unicast for unknown MACs; and the learned entries of the other ports (an
# uplink) are bounded. The test looks at the FDB itself and at where the
# victim's traffic goes afterwards, with the control that it still flows.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/spec.json"

MA=52:54:00:00:00:0a
MB=52:54:00:00:00:0b
ME=52:54:00:00:00:0e
BC=ff:ff:ff:ff:ff:ff
U='UDP(sport=4000,dport=4001)/Raw(b"bc-fdb-test")'
E_TO_B="Ether(src='$ME',dst='$MB')/IP(src='10.77.0.50',dst='10.77.0.11')/$U"
H_TO_B="Ether(dst='$MB')/IP(src='10.77.0.1',dst='10.77.0.11')/$U"
SPOOF_B="Ether(src='$MB',dst='$BC')/IP(src='10.77.0.11',dst='10.77.0.255')/$U"

# an uplink: a port of the bridge that is not a tap (it learns, bounded)
in_h ip link add up0 type veth peer name up1
in_h ip link set up0 master bcbr0 up
in_h ip link set up1 up

out=$(NETDRV_FDB_MAX_LEARNED=500 in_h "$NETDRV" converge "$NET_TMP/spec.json" 2>&1)
like "$out" 'load ok' 'converge: bridge, ruleset and taps (the veth ports) in place'

fdb() { in_h bridge fdb show br bcbr0; }
# the entries naming mac, one line each: "<dev> <flags...>"
fdb_of() { fdb | awk -v m="$1" '$1 == m { $1 = ""; print }'; }

# the victim talks, so whatever the bridge learns, it has learned b
in_g b ping -c1 -W2 -q 10.77.0.1 >/dev/null
ok $? 'control: the victim (b) reaches the host'
isnt "$(arrives_via e eth0 b eth0 "$E_TO_B")" 0 'control: a frame from e to b reaches b before the attack'

# the attack: a sends 200 frames with b's MAC (and address) as source
$PKT send "$P"a eth0 200 "$SPOOF_B" >/dev/null
is "$(arrives a e eth0 "$SPOOF_B")" 0 "the spoofed frame itself is dropped"
like "$(fdb_of $MB)" 'dev bcb0' "FDB: b's MAC is on b's port"
unlike "$(fdb_of $MB)" 'dev bca0' "FDB: b's MAC is not on the attacker's port"
# where b's traffic goes right after the attack
is "$(arrives_via e eth0 a eth0 "$E_TO_B")" 0 "after the attack a frame from e to b does not reach the attacker"
isnt "$(arrives_via e eth0 b eth0 "$E_TO_B")" 0 'and it reaches b'
$PKT send "$P"a eth0 50 "$SPOOF_B" >/dev/null
is "$(arrives_via h bcbr0 a eth0 "$H_TO_B")" 0 "a frame from the host to b does not reach the attacker"
isnt "$(arrives_via h bcbr0 b eth0 "$H_TO_B")" 0 'and it reaches b'
in_h ping -c1 -W2 -q 10.77.0.11 >/dev/null
ok $? "control: the host pings b after the attack"
in_g a ping -c1 -W2 -q 10.77.0.11 >/dev/null
ok $? "control: the attacker's ordinary traffic to b still flows"

# unicast for a MAC nobody owns is not flooded to a guarded tap
UNKNOWN="Ether(src='$ME',dst='52:54:00:00:00:77')/IP(src='10.77.0.50',dst='10.77.0.77')/$U"
is "$(arrives_via e eth0 a eth0 "$UNKNOWN")" 0 'unknown unicast does not reach a guarded tap'

# the table: learning off on taps, a static entry per NIC MAC
like "$(in_h bridge -d link show dev bca0)" 'learning off' 'tap port a does not learn'
like "$(in_h bridge -d link show dev bce0)" 'learning off' 'tap port e (unguarded) does not learn'
like "$(fdb_of $MA)" 'dev bca0.*static' "a's MAC is a static entry on its tap"

# 5,000 frames with fresh source MACs from a guarded and an unguarded tap
before=$(fdb | wc -l)
$PKT macflood "$P"a eth0 5000 "Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U" >/dev/null
$PKT macflood "$P"e eth0 5000 "Ether(src='$ME',dst='$BC')/IP(src='10.77.0.50',dst='10.77.0.255')/$U" >/dev/null
after=$(fdb | wc -l)
ok "[ $after -le $((before + 5)) ]" "10,000 fresh MACs from taps do not grow the FDB ($before -> $after entries)"

# the uplink learns, up to the bound (fdb_max_learned: kernel 6.8 on)
$PKT macflood "$H" up1 2000 "Ether(src='02:00:00:00:00:01',dst='$BC')/IP(src='10.77.0.200',dst='10.77.0.255')/$U" >/dev/null
learned=$(fdb | grep -c ' dev up0 master bcbr0 *$')
ok "[ $learned -gt 0 ] && [ $learned -le 500 ]" "the uplink learns, at most fdb_max_learned entries ($learned)"

# fencing (net_cut_all, for a node cut off from its controller): every
# tap's frames dropped; the next converge without the cut restores them
H_TO_A="Ether(dst='$MA')/IP(src='10.77.0.1',dst='10.77.0.10')/$U"
out=$(in_h "$NETDRV" cut "$NET_TMP/spec.json" 2>&1)
like "$out" 'cut: ok' 'net_cut_all: every tap cut'
in_g a ping -c1 -W2 -q 10.77.0.1 >/dev/null
ok $((! $?)) 'cut: a guest no longer reaches the host'
is "$(arrives_via h bcbr0 a eth0 "$H_TO_A")" 0 'cut: nothing from the host reaches a guest'
is "$(arrives e a eth0 "Ether(src='$ME',dst='$BC')/IP(src='10.77.0.50',dst='10.77.0.255')/$U")" 0 \
	'cut: nothing from an unguarded guest reaches another'
out=$(in_h "$NETDRV" converge "$NET_TMP/spec.json" 2>&1)
in_g a ping -c1 -W2 -q 10.77.0.1 >/dev/null
ok $? 'the next converge without the cut restores the guests'

done_testing
