# node_reenrol.t: a host joined again as a new node does not adopt the old
# node's spec (issue 12, item 8). Before the fix bcd loaded the old node's
# spec.pb at start: it kept running the old node's instances and refused
# every spec of the new node (an older generation than the old node's).
# Now bcd sets aside (renames, never deletes) a spec.pb and a command record
# of another node when it starts.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 4,8192,50 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
d1=$STACK_DIR/agent-1
old=$(agent_node_id 1)
img=$(stack_image_create reenrol-img) || bail_out "no image"
for i in 1 2 3; do
	bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" >/dev/null
done
three() { [ "$(q "SELECT count(*) FROM instances WHERE node_id = '$old' AND state = 'running'")" = 3 ]; }
eventually 30 three
ok $? 'three instances run on the old node'
caught_up() { [ "$(q "SELECT applied_generation = spec_generation FROM nodes WHERE id = '$old'")" = t ]; }
eventually 20 caught_up
gen=$(q "SELECT applied_generation FROM nodes WHERE id = '$old'")
ok "[ '$gen' -ge 3 ]" "the old node applied generation $gen"

# -- the operator retires the old node and enrols the host again
agent_kill 1 TERM
bcctl node retire "$old" >/dev/null
ok $? 'the old node is retired'
rm -f "$d1/node.pem" "$d1/node.id" "$d1/node.key"
agent_start 1 || bail_out "agent 1 did not restart"
joined() { [ -s "$d1/node.id" ] && [ "$(agent_node_id 1)" != "$old" ]; }
eventually 30 joined
ok $? 'the host joined again'
new=$(agent_node_id 1)
eventually 20 grep -q "spec and command record of node $old set aside" "$STACK_DIR/bcd-1.log"
ok $? 'bcd sets aside the old node'"'"'s spec and says so'
ok "ls '$d1' | grep -q '^spec\.pb\.$old\.'" 'the old spec.pb is kept, renamed'
ok "! grep -q 'loaded spec generation $gen' <(sed -n '/joined as node/,\$p' '$STACK_DIR/bcd-1.log')" \
	'the new node does not load it'

# -- the new node runs what its controller sends it
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
id=$(json_get "$out" id)
eventually 30 instance_state_is "$id" running
ok $? "an instance placed on the new node $new runs"
is "$(q "SELECT node_id FROM instances WHERE id = '$id'")" "$new" 'on the new node'
ok "! sed -n '/joined as node/,\$p' '$STACK_DIR/bcd-1.log' | grep -q 'older than applied $gen\|refused: applied $gen'" \
	"the new node's specs are not held back by the old node's generation $gen"

done_testing
