# tamper.t: the guard check. With agent/net.c's guard thread running (as in
# bcd), `nft flush ruleset` and a flushed chain are repaired within 5 s,
# logged and counted; the guards hold again afterwards.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/spec.json"
SPOOF="Ether(src='52:54:00:00:00:0a',dst='ff:ff:ff:ff:ff:ff')/IP(src='10.77.0.99',dst='10.77.0.255')/UDP(sport=4000,dport=4001)/Raw(b'tamper')"

in_h env NETDRV_METRICS=127.0.0.1:9464 "$NETDRV" guard "$NET_TMP/spec.json" 16 \
	>"$NET_TMP/out" 2>"$NET_TMP/log" &
drv=$!
checks() { in_h "$NETDRV" check "$NET_TMP/spec.json" >/dev/null 2>&1; }
eventually 3 checks
ok $? 'ruleset loaded by the converge step'

in_h nft flush ruleset
t0=$EPOCHREALTIME
checks; ok $((! $?)) 'nft flush ruleset: the tables are gone'
eventually 5 checks
ok $? 'the ruleset is back within 5 s'
diag "back after $(awk "BEGIN{print $EPOCHREALTIME - $t0}") s"
grep -q 'tables differ from the loaded ruleset' "$NET_TMP/log"
ok $? 'the difference is logged'
grep -q 'ruleset reloaded (tamper reloads: 1)' "$NET_TMP/log"
ok $? 'the reload is logged and counted'
scrape() { in_h curl -s --max-time 2 http://127.0.0.1:9464/metrics; }
like "$(scrape)" 'bcd_nft_tamper_reloads_total 1' 'the reload is counted in /metrics'
like "$(scrape)" 'bcd_nft_addresses_trusted 1' 'addresses are trusted again after the reload'
is "$(arrives a e eth0 "$SPOOF")" 0 'the guards hold again'

half=$(in_h nft list table bridge bcd_instances | sed -n 's/.*chain half_\([ab]\) .*/\1/p')
in_h nft flush chain bridge bcd_instances "${half}_f-bca0"
ok $? "flushed chain ${half}_f-bca0 (the half in use)"
eventually 5 checks
ok $? 'a flushed chain is restored within 5 s'
grep -q 'ruleset reloaded (tamper reloads: 2)' "$NET_TMP/log"
ok $? 'the second reload is counted'

wait "$drv"
is "$(cat "$NET_TMP/out" | tail -1)" 'reloads 2 trusted 1' 'two reloads, addresses trusted again'
diag "$(grep -v 'level=info' "$NET_TMP/log")"

done_testing
