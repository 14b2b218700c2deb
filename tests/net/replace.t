# replace.t: the ruleset is replaced whole in one transaction. 1,000
# replacements under a steady flow lose nothing and never open a gap for a
# forbidden frame; a batch the kernel refuses leaves the previous rules in
# force and the changed instance in error; the same spec applied twice
# changes nothing in the kernel.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/one.json" none
net_spec "$NET_TMP/two.json" private
net_apply "$NET_TMP/one.json" >/dev/null
ok $? 'ruleset loaded'

SPOOF="Ether(src='52:54:00:00:00:0a',dst='ff:ff:ff:ff:ff:ff')/IP(src='10.77.0.99',dst='10.77.0.255')/UDP(sport=4000,dport=4001)/Raw(b'gap?')"

# --- atomic replace under load
in_g a ping -i 0.005 -c 5000 -q 10.77.0.13 >"$NET_TMP/ping.out" 2>&1 &
ping_pid=$!
$PKT flood "${P}e" eth0 "${P}a" eth0 21 "$SPOOF" >"$NET_TMP/flood.out" 2>&1 &
flood_pid=$!
sleep 1
start=$EPOCHREALTIME
out=$(in_h "$NETDRV" loop 1000 "$NET_TMP/one.json" "$NET_TMP/two.json" 2>&1)
is "$(echo "$out" | tail -1)" 'loads 1000 failed 0' '1,000 replacements, every one loaded'
diag "1,000 replacements in $(awk "BEGIN{print $EPOCHREALTIME - $start}") s"
kill -0 "$ping_pid" 2>/dev/null
ok $? 'the flow was still running when the replacements ended'
wait "$ping_pid"
stats=$(grep 'packets transmitted' "$NET_TMP/ping.out")
diag "flow a -> d: $stats"
like "$stats" '5000 packets transmitted, 5000 received' 'steady flow between two guests lost nothing'
wait "$flood_pid"
flood=$(cat "$NET_TMP/flood.out")
diag "spoofed frames during the replacements: $flood"
like "$flood" '^sent [1-9][0-9]* received 0$' 'no spoofed frame got through during the replacements'

# --- a batch the kernel refuses
out=$(in_h "$NETDRV" converge "$NET_TMP/one.json" --break "$NET_TMP/two.json" 2>"$NET_TMP/err")
like "$out" 'converge .*two.json: load refused' 'the broken batch is refused by the kernel'
like "$out" 'error inst_c NetworkPolicy: rules failed to load: ' 'the changed instance (c) is put in error'
unlike "$out" 'error inst_a' 'an unchanged instance (a) is not'
grep -q 'previous rules stay' "$NET_TMP/err"
ok $? 'the refusal is logged'
in_h "$NETDRV" check "$NET_TMP/one.json" >/dev/null
ok $? 'the kernel still holds the previous ruleset'
is "$(arrives a e eth0 "$SPOOF")" 0 'the previous guards are in force'
pings() { in_g "$1" ping -c1 -W1 -q "$2" >/dev/null 2>&1; }
pings c 10.77.0.10; ok $((! $?)) "the previous policy of c (none) is in force"

# --- the same spec twice changes nothing
in_h timeout 5 nft monitor >"$NET_TMP/monitor" 2>&1 &
mon=$!
sleep 0.5
out=$(in_h "$NETDRV" converge "$NET_TMP/one.json" "$NET_TMP/one.json" 2>"$NET_TMP/err")
sleep 0.5
kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
is "$(grep -c 'ruleset loaded' "$NET_TMP/err")" 1 'one process, the same spec twice: one load'
is "$(grep -c '^add chain bridge bcd_instances half_' "$NET_TMP/monitor")" 1 \
	'the kernel saw one transaction, not two'
in_h "$NETDRV" check "$NET_TMP/one.json" >/dev/null
ok $? 'and holds the ruleset'

done_testing
