# node_capacity.t: what a node reports is capped by the operator (issue 12,
# item 12). A host's capacity at join is its ceiling; a host that reports
# more afterwards (a compromised or misconfigured bcd) is placed on only up
# to the ceiling, and its labels stay those it joined with. The operator
# raises or lowers the ceiling with `bcctl node set-capacity`; changes are
# logged.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 2,8192,50 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
node1=$(agent_node_id 1)
img=$(stack_image_create cap-img) || bail_out "no image"

out=$(bcctl --format json node get "$node1")
is "$(printf '%s' "$out" | jq -r '.capacityCeiling.vcpus // .capacity_ceiling.vcpus')" 2 \
	'the ceiling is the capacity the node joined with'

# -- the host now claims 8 vCPUs and a label it did not join with
agent_kill 1 TERM
STACK_CAP_VCPUS=8
BC_AGENT_LABELS=tier=gold agent_start 1 || bail_out "agent 1 did not restart"
eventually 30 grep -q "node $node1: reports 8/" "$STACK_DIR/ctl-1.log"
ok $? 'the host reports 8 vCPUs'
is "$(q "SELECT cap_vcpus FROM nodes WHERE id = '$node1'")" 2 'its capacity stays at the ceiling, 2'
is "$(q "SELECT labels ? 'tier' FROM nodes WHERE id = '$node1'")" f 'a label the report claims is not taken'
ok "[ \"\$(q \"SELECT count(*) FROM nodes WHERE id = '$node1' AND labels ? 'bc.dev/cap.instance.network-policy'\")\" = 1 ]" \
	'capability labels still come from the report'

# -- placement: four one-vCPU instances, room for two
ids=()
for i in 1 2 3 4; do
	out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
	ids+=("$(json_get "$out" id)")
done
placed() { q "SELECT count(*) FROM instances WHERE node_id = '$node1' AND desired_state <> 'deleted'"; }
running() { [ "$(q "SELECT count(*) FROM instances WHERE node_id = '$node1' AND state = 'running'")" = "$1" ]; }
running_ge() { [ "$(q "SELECT count(*) FROM instances WHERE node_id = '$node1' AND state = 'running'")" -ge "$1" ]; }
eventually 30 running_ge 2
ok $? 'two instances (or more) run (control: the node takes work)'
sleep 3
is "$(placed)" 2 'only two are placed on the node: the ceiling, not the claim'

# -- the operator raises the ceiling to 3
out=$(bcctl --format json node set-capacity "$node1" --vcpus 3)
ok $? 'bcctl node set-capacity answers'
is "$(printf '%s' "$out" | jq -r '.capacityCeiling.vcpus // .capacity_ceiling.vcpus')" 3 'the node shows its new ceiling'
like "$(grep "node $node1: capacity ceiling" "$STACK_DIR/ctl-1.log" | tail -1)" '3/8192/50/0 .* \(was 2/8192/50/0\)' \
	'the controller logs the change with the old value'
eventually 30 running 3
ok $? 'a third instance is placed and runs once the next report is capped at 3'
sleep 3
is "$(placed)" 3 'never a fourth'
ok "grep -q \"node $node1: capacity 3/\" '$STACK_DIR/ctl-1.log'" 'the capacity change is logged'

# -- and lowers it: the capacity drops at once
bcctl node set-capacity "$node1" --vcpus 1 >/dev/null
is "$(q "SELECT cap_vcpus FROM nodes WHERE id = '$node1'")" 1 'a lower ceiling cuts the capacity at once'

# -- refusals
bcctl node set-capacity "$node1" >/dev/null 2>&1
ok "[ $? -ne 0 ]" 'set-capacity without a resource is a usage error'
out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" - - bc/admin/v1/admin.proto \
	bc.admin.v1.Nodes SetCapacity "{\"node_id\": \"$node1\", \"ceiling\": {}}")
is "$(printf '%s' "$out" | jq -r .code)" 3 'SetCapacity with an empty ceiling: INVALID_ARGUMENT'

done_testing
