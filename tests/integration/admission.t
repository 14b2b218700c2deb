# admission.t: host admission and re-placement (the spec's "hosts that
# cannot start an instance"), with fake agents whose real room is smaller
# than what they offer (the fake runtime's admission hook), and
# replace_after_seconds = 1:
# - an instance its host refuses (stopped, ResourcesExhausted) stays
#   provisioning with the host's reason (instance.refused), and once the
#   refusal stood its time it leaves that host: booking and address
#   released, the host in refused_nodes, replacements + 1
#   (instance.rescheduling); with no other host it waits Unschedulable
#   naming the hosts that refused it, and is placed on the first new host
#   that has room (instance.placed), where it runs: same id, same
#   created_at, booked and addressed only there;
# - an instance every host refuses is re-placed three times and failed by
#   the fourth refusal: state error, the reason naming the four hosts, four
#   instance.refused and three instance.rescheduling events;
# - an instance that ran once is not re-placed when its host refuses it.
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="replace_after_seconds = 1"
stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
img=$(stack_image_create adm-img) || bail_out "no image"
big=$(json_get "$(bcctl --format json flavor create --name big --vcpus 2 --memory-mib 2048 --disk-gib 1)" name)

q() { psql -d bc -XAtq -c "$1"; }
# start_agent N MEMORY: agent N offering 16 vCPUs / 32 GiB, admitting
# MEMORY MiB at most (no limit with "")
start_agent() {
	mkdir -p "$STACK_DIR/agent-$1/fake"
	[ -n "$2" ] && printf 'capacity_memory_mib=%s\n' "$2" >"$STACK_DIR/agent-$1/fake/admission"
	STACK_AGENTS=$1
	agent_start "$1" && stack_wait_nodes_ready "$1" 60
}
col() { q "SELECT $2 FROM instances WHERE id = '$1'"; }
events_of() { q "SELECT count(*) FROM events WHERE subject = 'instance/$1' AND type = '$2'"; }
unplaced_after() { # ID N: unplaced with N re-placements
	[ "$(col "$1" "node_id IS NULL AND replacements = $2")" = t ]
}

start_agent 1 256 || bail_out "agent 1"
n1=$(agent_node_id 1)

# -- refused by the only host: re-placed away from it, waits, then runs elsewhere
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
id=$(json_get "$out" id)
created=$(json_get "$out" created_at)
is "$(json_get "$out" node_id)" "$n1" 'placed on the only node'
# the refusal is stamped (refused_at, the host's reason) and published as
# instance.refused by one statement; the stamp lasts only until the
# re-placement 1 s later, which a slow poll can miss, the event stays
refused_db() {
	[ "$(col "$1" "reason LIKE 'ResourcesExhausted:%' AND refused_at IS NOT NULL")" = t ] ||
		[ "$(q "SELECT count(*) FROM events WHERE subject = 'instance/$1' AND type = 'instance.refused' AND data->>'reason' LIKE 'ResourcesExhausted:%' AND data->>'nodeId' = '$n1'")" = 1 ]
}
eventually 30 refused_db "$id"
ok $? 'the host refuses it: reason ResourcesExhausted, refusal stamped'
is "$(col "$id" state)" provisioning '... it stays provisioning (it never ran)'
is "$(events_of "$id" instance.refused)" 1 '... instance.refused'
eventually 30 unplaced_after "$id" 1
ok $? 'once the refusal stood 1 s it leaves the node (1 re-placement)'
is "$(col "$id" "array_to_string(refused_nodes, ',')")" "$n1" '... the node is in refused_nodes'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$id' AND released_at IS NULL")" 0 \
	'... its booking is released'
like "$(col "$id" reason)" "^Unschedulable: .*has not refused it \\($n1\\)" \
	'... no other node: Unschedulable, naming the node that refused it'
is "$(events_of "$id" instance.rescheduling)" 1 '... instance.rescheduling'
sleep 2
is "$(col "$id" "node_id IS NULL")" t '... it is never placed on the node that refused it again'

start_agent 2 1024 || bail_out "agent 2"
n2=$(agent_node_id 2)
eventually 30 instance_state_is "$id" running
ok $? 'a new node with room: it is placed there and runs'
is "$(col "$id" node_id)" "$n2" '... on that node'
is "$(json_get "$(bcctl --format json instance get "$id")" created_at)" "$created" '... same id, same created_at'
is "$(q "SELECT string_agg(node_id, ',') FROM allocations WHERE owner_id = '$id' AND released_at IS NULL")" \
	"$n2" '... booked only there'
is "$(q "SELECT count(*) FROM ip_leases WHERE instance_id = '$id'")" 1 '... with one address'
is "$(events_of "$id" instance.placed)" 1 '... instance.placed'
[ ! -e "$STACK_DIR/agent-1/fake/$id.inst" ]
ok $? 'the refusing host holds nothing of it'
is "$(col "$id" replacements)" 1 'one re-placement in all'

# -- every host refuses: three re-placements, the fourth refusal fails it
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor big --image "$img" 2>&1)
y=$(json_get "$out" id)
[ -n "$y" ] || diag "big create: $out"
eventually 60 unplaced_after "$y" 2
ok $? 'a big instance: both nodes refuse it, re-placed twice, waiting' || diag "$(col "$y" "state || ' ' || reason || ' ' || coalesce(node_id, '-') || ' ' || replacements")"
start_agent 3 1024 || bail_out "agent 3"
eventually 60 unplaced_after "$y" 3
ok $? 'a third node refuses it too: three re-placements'
start_agent 4 1024 || bail_out "agent 4"
failed_db() { [ "$(col "$1" state)" = error ]; }
eventually 60 failed_db "$y"
ok $? 'the fourth refusal fails it'
is "$(col "$y" replacements)" 3 '... after three re-placements'
is "$(events_of "$y" instance.refused)" 4 '... four refusals (instance.refused)'
is "$(events_of "$y" instance.rescheduling)" 3 '... three instance.rescheduling'
is "$(events_of "$y" instance.error)" 1 '... one instance.error'
# the data of each type (docs/operations.md, "Instance lifecycle")
for te in "instance.refused nodeId,reason" "instance.rescheduling fromNodeId,reason,refusedNodes,replacements" \
	"instance.placed nodeId" "instance.error nodeId,reason,refusedNodes,replacements"; do
	is "$(event_keys "${te%% *}" "instance/$y")" "${te#* }" "... ${te%% *}: its data's keys"
done
is "$(col "$y" "cardinality(refused_nodes) || ' ' || (SELECT count(DISTINCT x) FROM unnest(refused_nodes) x)")" \
	'4 4' '... refused by four distinct nodes'
reason=$(col "$y" reason)
like "$reason" '^ResourcesExhausted: refused by 4 hosts' '... the reason says so'
for n in 1 2 3 4; do
	like "$reason" "$(agent_node_id $n)" "... naming node $n"
done
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$y' AND released_at IS NULL")" 0 \
	'... it holds no booking'
is "$(col "$y" "node_id IS NULL")" t '... and no node'
sleep 2
is "$(col "$y" "state || ' ' || replacements")" 'error 3' 'a failed instance stays failed'
bcctl instance delete "$y" >/dev/null
eventually 30 instance_state_is "$y" deleted
ok $? 'and can be deleted'

# -- an instance that ran is not re-placed by a later refusal
ran=$(col "$id" "running_at IS NOT NULL")
is "$ran" t 'the first instance ran'
q "UPDATE instances SET refused_at = now() - interval '1 hour' WHERE id = '$id'" >/dev/null
sleep 3
is "$(col "$id" "node_id || ' ' || replacements")" "$n2 1" 'a refusal stamp on an instance that ran moves nothing'

done_testing
