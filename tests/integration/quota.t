# quota.t: quotas charged from bookings, and what a same-tenant caller
# without read permission is told (docs/iam.md, "Quotas and budgets",
# "Instances").
# - an instance waiting for room is charged (it will be booked without
#   asking the quota again); a deleting one stays charged until its host
#   confirms and its booking is released; a volume's booking counts
#   toward diskGiB; each refusal is QUOTA_EXCEEDED with resource,
#   requested, remaining and limit;
# - another user's instance in the same tenant, which the caller may not
#   read, is ACCESS_DENIED naming the action (the decision's answer: the
#   spec keeps NOT_FOUND for other tenants, drafts and an agent's view), and
#   list leaves it out.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

# the host is away on purpose for a while: it must not be declared lost meanwhile
export BC_NODE_LOST_SECONDS=600

stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,200 || bail_out "stack_up failed"
img=$(stack_image_create quota-img) || bail_out "no image"

st() { q "SELECT state FROM instances WHERE id = '$1'"; }
st_is() { [ "$(st "$1")" = "$2" ]; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
TENANT_ARGS=(--tenant acme)
alice=$(tenant_identity acme user alice)
bob=$(tenant_identity acme user bob)
A=$(tenant_token "$alice")
B=$(tenant_token "$bob")
printf '{"effect":"allow","actions":"compute:instances:*","resources":"*"}' >"$STACK_DIR/a.json"
printf '{"effect":"allow","actions":"compute:instances:create","resources":"*"}' >"$STACK_DIR/b.json"
bcctl policy attach "$(jid "$(bcctl --format json policy create --tenant acme --name a --file "$STACK_DIR/a.json")")" --identity "$alice" >/dev/null
bcctl policy attach "$(jid "$(bcctl --format json policy create --tenant acme --name b --file "$STACK_DIR/b.json")")" --identity "$bob" >/dev/null
bcctl flavor create --name huge --vcpus 64 --memory-mib 1024 --disk-gib 1 >/dev/null
mkinst() { jid "$(as "$A" --format json instance create --pool "$POOL_ID" --flavor "$1" --image "$img")"; }
create() { as "$A" instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"; }

# -- a same-tenant instance the caller may not read
ia=$(mkinst "$FLAVOR_NAME")
refused "$B" 5 'action: compute:instances:read' "another user's instance bob may not read: ACCESS_DENIED" -- \
	instance get "$ia"
like "$(cat "$STACK_DIR/err")" 'reason: no-allow' '... no-allow'
is "$(as "$B" --format json instance list --scope all | jq '.items | length')" 0 '... and list leaves it out'

# -- an instance waiting for room is charged
iu=$(mkinst huge)
is "$(q "SELECT node_id IS NULL FROM instances WHERE id = '$iu'")" t 'a 64-vCPU instance waits for room'
ib=$(mkinst "$FLAVOR_NAME")
eventually 30 st_is "$ib" running
ok $? 'a second small one runs'
used=$(q "SELECT sum(vcpus) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")
booked=$(q "SELECT sum(vcpus) FROM allocations WHERE tenant_id = 'acme' AND released_at IS NULL")
ok "[ '$booked' -lt '$used' ]" "booked vCPUs ($booked) leave out the waiting instance's ($used in all)"
bcctl tenant quota acme --vcpus "$used" --instances 10 >/dev/null
refused "$A" 9 'resource: vcpus' 'the waiting instance is charged: no vCPU left' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" "remaining: 0" '... remaining 0'
like "$(cat "$STACK_DIR/err")" "limit: $used" "... limit $used"
like "$(cat "$STACK_DIR/err")" 'requested: 1' '... requested 1'
bcctl tenant quota acme --instances 3 >/dev/null
refused "$A" 9 'resource: instances' 'three instances (one waiting) fill a quota of 3' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"

# -- a deleting instance stays charged until its host confirms
bcctl tenant quota acme --vcpus "$used" --instances 10 >/dev/null
agent_kill 1
as "$A" instance delete "$ib" >/dev/null
is "$(st "$ib")" deleting 'with its host away, the deleted instance stays deleting'
refused "$A" 9 'resource: vcpus' '... and charged' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
agent_start 1 || bail_out "agent restart"
eventually 60 st_is "$ib" deleted
ok $? 'the host confirms the deletion'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$ib' AND released_at IS NULL")" 0 \
	'... its booking is released'
ok "create >/dev/null" '... and its vCPU can be used again'

# -- a volume's booking counts toward diskGiB
disk=$(q "SELECT coalesce(sum(disk_gib), 0) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")
node=$(q "SELECT id FROM nodes LIMIT 1")
q "INSERT INTO allocations (node_id, owner_kind, owner_id, tenant_id, vcpus, memory_mib, disk_gib) VALUES ('$node', 'volume', 'vol_0000000000000000000000test', 'acme', 0, 0, 50)" >/dev/null
bcctl tenant quota acme --disk-gib $((disk + 50)) >/dev/null
refused "$A" 9 'resource: diskGiB' "a volume's 50 GiB booking fills the disk quota" -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
q "UPDATE allocations SET released_at = now() WHERE owner_id = 'vol_0000000000000000000000test'" >/dev/null
ok "create >/dev/null" '... released, it gives the disk back'

done_testing
