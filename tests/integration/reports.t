# reports.t: delta host reports. With report_interval_seconds far away (no
# periodic complete report interferes), a host with several instances pauses,
# stops, resumes, starts and deletes some of them: the controller sees every
# state and every deletion right, though bcd's reports after the first list
# only what changed (bcd_reports_total{kind="delta"} moves, its log shows
# delta reports of fewer instances than it runs). A delta alone updates the
# node's liveness and finishes a deletion the host confirms. A report that
# is not complete never finishes a deletion by omission; the same report
# said complete does.
. "$(dirname "$0")/../lib/stack.sh"

mport=$(free_tcp_port)
export BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$mport"
export BC_REPORT_INTERVAL_SECONDS=600 BC_NODE_LOST_SECONDS=600
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,100 || bail_out "stack_up failed"
img=$(stack_image_create reports-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
node1=$(agent_node_id 1)
scrape() { curl -s --max-time 2 "http://127.0.0.1:$mport/metrics"; }
reports() { scrape | sed -n "s/^bcd_reports_total{kind=\"$1\"} //p"; }
st() { q "SELECT state FROM instances WHERE id = '$1'"; }
st_is() { [ "$(st "$1")" = "$2" ]; }
inst() { bcctl --format json instance "$@" >/dev/null; }

ids=()
for i in 1 2 3 4 5 6; do
	out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
	ids+=("$(json_get "$out" id)")
done
all_running() { [ "$(q "SELECT count(*) FROM instances WHERE state = 'running'")" = 6 ]; }
eventually 30 all_running
ok $? 'six instances run'
c0=$(reports complete)
d0=$(reports delta)
ok "[ '${c0:-0}' -ge 1 ]" "bcd delivered complete reports ($c0: the first one at least)"

a=${ids[0]} b=${ids[1]} c=${ids[2]} d=${ids[3]} e=${ids[4]} f=${ids[5]}
inst pause "$a"
inst pause "$b"
inst stop "$c"
inst delete "$d"
settled() { st_is "$a" paused && st_is "$b" paused && st_is "$c" stopped && st_is "$d" deleted; }
eventually 30 settled
ok $? 'paused, paused, stopped, deleted: the controller has every change'
is "$(st "$e") $(st "$f")" 'running running' 'the others still run'
inst resume "$a"
inst start "$c"
settled2() { st_is "$a" running && st_is "$c" running; }
eventually 30 settled2
ok $? 'resumed and started: running again'
is "$(q "SELECT state FROM instances WHERE id = '$b'")" paused 'the one left paused stays paused'
d1=$(reports delta)
ok "[ '${d1:-0}' -gt '${d0:-0}' ]" "bcd sent delta reports ($d0 -> $d1)"
# a delta lists what changed: fewer instances than the host runs (5 or 6)
small=$(grep -c 'instances delivered (delta)' "$STACK_DIR/bcd-1.log")
ok "[ '$small' -ge 1 ]" "bcd logs delta reports ($small)"
ok "grep 'instances delivered (delta)' '$STACK_DIR/bcd-1.log' | grep -q ', [0-2] instances delivered'" \
	'a delta carries only the few instances that changed'
is "$(q "SELECT state FROM nodes WHERE id = '$node1'")" ready 'the node is ready'
is "$(q "SELECT count(*) FROM instances WHERE state IN ('lost', 'deleted') AND id <> '$d'")" 0 \
	'nothing was taken as lost or deleted by omission'

# -- one change alone, nothing else pending: a delta does all of it
caught_up() { [ "$(q "SELECT applied_generation = spec_generation FROM nodes WHERE id = '$node1'")" = t ]; }
eventually 20 caught_up
ok $? 'the host applied the newest spec'
sleep 1
c1=$(reports complete)
d1=$(reports delta)
seen=$(q "SELECT last_report_at FROM nodes WHERE id = '$node1'")
inst pause "$f"
eventually 30 st_is "$f" paused
ok $? 'a pause alone reaches the controller'
d2=$(reports delta)
ok "[ '${d2:-0}' -gt '$d1' ]" "... in a delta ($d1 -> $d2)"
c2=$(reports complete)
ok "[ -n '$c1' ] && [ '$c2' = '$c1' ]" "... and no complete report was sent meanwhile ($c1 -> $c2)"
is "$(q "SELECT last_report_at > '$seen' FROM nodes WHERE id = '$node1'")" t \
	'the delta updated the node liveness (last_report_at)'
is "$(st "$b") $(st "$e")" 'paused running' 'the instances it did not list are unchanged'
# a deletion the host confirms: the report carrying "deleted" is a delta
inst delete "$e"
eventually 30 st_is "$e" deleted
ok $? 'a deletion confirmed by a delta report is finished'
d3=$(reports delta)
ok "[ '${d3:-0}' -gt '$d2' ]" "... it came in a delta ($d2 -> $d3)"

# -- the controller: no deletion by omission from a report that is not
# complete (agent down; the report says it applied the newest spec)
agent_kill 1 TERM
inst delete "$f"
is "$(st "$f")" deleting "$f is being deleted"
gen=$(q "SELECT spec_generation + (EXISTS (SELECT 1 FROM node_spec_changes WHERE node_id = '$node1'))::int FROM nodes WHERE id = '$node1'")
ad=$STACK_DIR/agent-1
report() {
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$ad/ca.pem" "$ad/node.pem" "$ad/node.key" \
		bc/node/v1/node.proto bc.node.v1.Node Report \
		"{\"applied_generation\": \"$gen\", \"complete\": $1, \"instances\": []}"
}
seen=$(q "SELECT last_report_at FROM nodes WHERE id = '$node1'")
out=$(report false)
is "$(printf '%s' "$out" | jq -r .spec_generation)" "$gen" 'an incomplete report of the newest spec: acked'
is "$(st "$f")" deleting '... it does not finish a deletion by omission'
is "$(st "$b") $(st "$a")" 'paused running' '... nor changes what it does not list'
is "$(q "SELECT last_report_at > '$seen' FROM nodes WHERE id = '$node1'")" t '... and it counts as liveness'
out=$(report true)
is "$(st "$f")" deleted 'the same report said complete: the deletion is finished by omission'

done_testing
