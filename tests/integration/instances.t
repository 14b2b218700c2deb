# instances.t: the backbone under load and under failure. Two controller
# replicas on one database and two fake-runtime agents over mTLS:
# - 50 instances created concurrently through both replicas are each placed
#   within their node's capacity, get distinct addresses and MACs, and run;
# - with the pool full, one more waits Unschedulable and is placed as soon as
#   a delete frees room;
# - an idempotency key returns the same instance through either replica and
#   is CONFLICT with another request;
# - SIGKILL of an agent and a restart lose and duplicate nothing;
# - deleting everything releases every booking and address.
. "$(dirname "$0")/../lib/stack.sh"

CAP_VCPUS=25
stack_up --controllers 2 --agents 2 --agent-capacity "$CAP_VCPUS,65536,500" || bail_out "stack_up failed"
img=$(stack_image_create inst-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }

create_one() { # N: create through replica (N % 2) + 1, print the id
	local out
	out=$(bcctl_n $(($1 % 2 + 1)) --format json instance create --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img") || return 1
	json_get "$out" id
}
export -f create_one bcctl_n ctl_url json_get
export BC_URL_1 BC_URL_2 img

# -- 50 concurrent creates through both replicas
seq 1 50 | xargs -P 10 -I{} bash -c 'create_one {}' >"$STACK_DIR/ids" 2>"$STACK_DIR/create.err"
is "$(sort -u "$STACK_DIR/ids" | grep -c '^inst_')" 50 '50 distinct instances created through two replicas'
is "$(wc -c <"$STACK_DIR/create.err")" 0 'no create failed'

all_running() {
	[ "$(q "SELECT count(*) FROM instances WHERE state = 'running'")" = 50 ]
}
eventually 60 all_running
ok $? 'all 50 reach running'

is "$(q "SELECT count(*) FROM instances WHERE node_id IS NULL")" 0 'every instance is placed'
is "$(q "SELECT count(*) FROM (SELECT n.id FROM nodes n JOIN allocations a ON a.node_id = n.id
	AND a.released_at IS NULL GROUP BY n.id, n.cap_vcpus, n.cap_memory_mib
	HAVING sum(a.vcpus) > n.cap_vcpus OR sum(a.memory_mib) > n.cap_memory_mib) x")" 0 \
	'no node is booked beyond its capacity'
is "$(q "SELECT sum(vcpus) FROM allocations WHERE released_at IS NULL")" 50 '50 vCPUs booked in all'
is "$(q "SELECT count(DISTINCT address) FROM ip_leases")" 50 '50 distinct addresses leased'
is "$(q "SELECT count(DISTINCT mac) FROM instances WHERE state <> 'deleted'")" 50 '50 distinct MACs'
is "$(q "SELECT count(*) FROM ip_leases WHERE NOT (address << '10.77.0.0/24'::inet)
	OR address = '10.77.0.1'::inet")" 0 'addresses inside the subnet, never the gateway'
out=$(bcctl --format json node list)
is "$(json_items "$out" | jq -s '[.[] | .booked.vcpus // 0] | add')" 50 'node list shows the bookings'

# each agent runs exactly what its node was given
for n in 1 2; do
	node=$(agent_node_id "$n")
	want=$(q "SELECT count(*) FROM instances WHERE node_id = '$node' AND state = 'running'")
	have=$(ls "$STACK_DIR/agent-$n/fake" | grep -c '^inst_')
	is "$have" "$want" "agent $n holds the $want instances of its node"
done

# -- full pool: one more waits, and is placed when room appears
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
is "$?" 0 'a create into a full pool is accepted'
extra=$(json_get "$out" id)
is "$(json_get "$out" node_id)" "" 'it has no node'
like "$(json_get "$out" reason)" '^Unschedulable' 'its reason says Unschedulable'
victim=$(head -1 "$STACK_DIR/ids")
bcctl_n 2 instance delete "$victim" >/dev/null
eventually 30 instance_state_is "$extra" running
ok $? 'the waiting instance is placed and runs once a delete freed room'
is "$(instance_state "$victim")" deleted 'the deleted one is deleted'

# -- idempotency across replicas
a=$(bcctl_n 1 --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key k-1)
b=$(bcctl_n 2 --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key k-1)
is "$(json_get "$b" id)" "$(json_get "$a" id)" 'the same key and request return the same instance'
bcctl_n 2 instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key k-1 \
	--ssh-key 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6C bench' >/dev/null 2>"$STACK_DIR/idem.err"
is "$?" 4 'the same key with another request is CONFLICT (exit 4)'
like "$(cat "$STACK_DIR/idem.err")" 'idempotency-key-reused' 'details.reason names it'
keyed=$(json_get "$a" id)

# -- SIGKILL an agent and restart it
node1=$(agent_node_id 1)
before=$(q "SELECT string_agg(id, ',' ORDER BY id) FROM instances WHERE node_id = '$node1' AND state = 'running'")
creates_before=$(grep -c 'op=create' "$STACK_DIR/agent-1/fake/ledger.log")
agent_kill 1
agent_start 1 || bail_out "agent 1 did not restart"
reported_again() {
	[ "$(q "SELECT last_report_at > now() - interval '2 seconds' FROM nodes WHERE id = '$node1'")" = t ]
}
sleep 1
eventually 30 reported_again
ok $? 'the restarted agent reports again'
sleep 1
after=$(q "SELECT string_agg(id, ',' ORDER BY id) FROM instances WHERE node_id = '$node1' AND state = 'running'")
is "$after" "$before" 'after SIGKILL and restart the same instances run on the node'
is "$(grep -c 'op=create' "$STACK_DIR/agent-1/fake/ledger.log")" "$creates_before" 'no instance was created again'
dups=$(grep 'op=create' "$STACK_DIR/agent-1/fake/ledger.log" | sed 's/.* id=\([^ ]*\).*/\1/' | sort | uniq -d | wc -l)
is "$dups" 0 'no instance was ever created twice'
grep -q 'adopt' "$STACK_DIR/bcd-1.log"
ok $? 'the agent logged adopting what it had'

# a new instance still reaches the restarted agent
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --wait 20s)
newid=$(json_get "$out" id)
bcctl instance delete "$victim" >/dev/null
bcctl instance delete "$(sed -n 2p "$STACK_DIR/ids")" >/dev/null

# -- delete everything through both replicas
n=0
for id in $(q "SELECT id FROM instances WHERE state <> 'deleted'"); do
	n=$((n + 1))
	bcctl_n $((n % 2 + 1)) instance delete "$id" >/dev/null || fail "delete $id"
done
all_deleted() {
	[ "$(q "SELECT count(*) FROM instances WHERE state <> 'deleted'")" = 0 ]
}
eventually 60 all_deleted
ok $? 'every instance ends deleted'
is "$(q "SELECT count(*) FROM allocations WHERE released_at IS NULL")" 0 'every booking released'
is "$(q "SELECT count(*) FROM ip_leases")" 0 'every address released'
is "$(ls "$STACK_DIR/agent-1/fake" "$STACK_DIR/agent-2/fake" | grep -c '^inst_')" 0 'the agents run nothing'
is "$(q "SELECT count(*) FROM events WHERE type = 'instance.deleted'")" \
	"$(q "SELECT count(*) FROM instances")" 'one instance.deleted event per instance'
out=$(bcctl --format json instance delete "$keyed")
is "$(json_get "$out" state)" deleted 'delete of a deleted instance is idempotent'

done_testing
