# hostloss.t: recreateOnHostLoss. Two fake agents in a pool that sets it,
# one in a pool that does not, node_lost_seconds = 10 (short: the delete
# below is sent while the silent node's bcd is frozen, so it cannot race it):
# - when the node of an instance of the first pool goes silent and is
#   declared lost, the instance is not left lost: its booking and address
#   are released, it goes back to provisioning (instance.lost, then
#   instance.recreating) and is placed on the other node, where it runs
#   again (same id and created_at, a new address, booked only there);
# - an instance being deleted is not recreated: its deletion finishes;
# - the instance of the pool without the flag becomes lost and stays so;
# - the lost agent, back, learns from its spec that the instance moved and
#   destroys its copy.
. "$(dirname "$0")/../lib/stack.sh"

export BC_NODE_LOST_SECONDS=10
stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
img=$(stack_image_create loss-img) || bail_out "no image"
plain_pool=$POOL_ID
out=$(bcctl --format json pool create --name p2 --runtime fake --subnet 10.78.0.0/24 \
	--gateway 10.78.0.1 --bridge bcbr1 --recreate-on-host-loss) || bail_out "pool p2: $out"
rpool=$(json_get "$out" id)
is "$(json_get "$out" recreate_on_host_loss)" true 'pool p2 recreates on host loss'

q() { psql -d bc -XAtq -c "$1"; }
col() { q "SELECT $2 FROM instances WHERE id = '$1'"; }
types_of() { q "SELECT string_agg(type, ' ' ORDER BY id) FROM events WHERE subject = 'instance/$1'"; }
start_in() { # N POOL
	POOL_ID=$2
	STACK_AGENTS=$1
	agent_start "$1" && stack_wait_nodes_ready "$1" 60
}
start_in 1 "$rpool" || bail_out "agent 1"
start_in 2 "$rpool" || bail_out "agent 2"
start_in 3 "$plain_pool" || bail_out "agent 3"
POOL_ID=$plain_pool

mk() { json_get "$(bcctl --format json instance create --pool "$1" --flavor "$FLAVOR_NAME" --image "$img")" id; }
r=$(mk "$rpool")
d=$(mk "$rpool")
l=$(mk "$plain_pool")
for i in "$r" "$d" "$l"; do
	eventually 30 instance_state_is "$i" running
	ok $? "instance $i runs"
done
# both recreate-pool instances on one node, so losing it tests both
rn=$(col "$r" node_id)
if [ "$(col "$d" node_id)" != "$rn" ]; then
	bcctl instance delete "$d" >/dev/null
	for try in 1 2 3 4 5 6 7 8; do
		d=$(mk "$rpool")
		[ "$(col "$d" node_id)" = "$rn" ] && break
		bcctl instance delete "$d" >/dev/null
	done
fi
is "$(col "$d" node_id)" "$rn" 'a second instance on the same node'
if [ "$rn" = "$(agent_node_id 1)" ]; then lost=1 other=2; else lost=2 other=1; fi
other_node=$(agent_node_id $other)
created=$(col "$r" "created_at")
addr=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$r'")

# the node stops reporting; the instance being deleted cannot finish there.
# Its bcd is frozen first and the delete sent at once: killing two ASan
# agents can outlast node_lost_seconds on a loaded machine, and a delete on
# a node already lost finishes at once. Its last report is moved 10 s ahead
# too: on a loaded machine the delete alone can take longer than what was
# left of node_lost_seconds since the node's last report (the node is then
# lost 20 s from now)
kill -STOP "$(_stack_get_pid "bcd-$lost")"
q "UPDATE nodes SET last_report_at = now() + interval '10 seconds' WHERE id = '$rn'" >/dev/null
bcctl instance delete "$d" >/dev/null
is "$(col "$d" state)" deleting 'one instance is being deleted when its node goes silent'
agent_kill $lost
agent_kill 3

moved() { [ "$(col "$r" "state || ' ' || node_id")" = "running $other_node" ]; }
eventually 60 moved
ok $? 'the node is lost: the instance runs again, on the other node of its pool'
is "$(col "$r" created_at)" "$created" '... same id, same created_at'
like "$(types_of "$r")" 'instance.lost instance.recreating instance.placed instance.running$' \
	'... instance.lost, instance.recreating, instance.placed, instance.running'
for te in "instance.lost nodeId,reason" "instance.recreating fromNodeId,reason" "instance.placed nodeId"; do
	is "$(event_keys "${te%% *}" "instance/$r")" "${te#* }" "... ${te%% *}: its data's keys"
done
is "$(q "SELECT string_agg(node_id, ',') FROM allocations WHERE owner_id = '$r' AND released_at IS NULL")" \
	"$other_node" '... booked only there'
is "$(q "SELECT count(*) FROM ip_leases WHERE instance_id = '$r'")" 1 '... with one address'
isnt "$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$r'")" "$addr" '... a new one'
like "$(q "SELECT data->>'reason' FROM events WHERE subject = 'instance/$r' AND type = 'instance.recreating'")" \
	"^Recreating: node $rn was lost" '... the event says why'
is "$(col "$d" state)" deleted 'the instance being deleted is not recreated: its deletion finished'
is "$(col "$l" state)" lost 'without recreateOnHostLoss the instance is lost'
sleep 2
is "$(col "$l" "state || ' ' || node_id")" "lost $(agent_node_id 3)" '... and stays so'

# the lost agent comes back: it drops its copy
agent_start $lost
gone() { [ ! -e "$STACK_DIR/agent-$lost/fake/$r.inst" ]; }
eventually 30 gone
ok $? 'the lost host, back, destroys its copy of the moved instance'
is "$(col "$r" "state || ' ' || node_id")" "running $other_node" 'the instance runs on its new node'

done_testing
