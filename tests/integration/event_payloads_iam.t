# event_payloads_iam.t: the data of every node.* and IAM event (tenant.*,
# identity.*, token.*, delegation.*, policy.*, quota.set, offer.set,
# pool.budget-check-set) has exactly the keys docs/iam.md ("Events") and
# docs/operations.md ("Node events") promise for its type, whether the API
# published it or the tenant teardown did (before issue 13 the API's had
# no data at all and the teardown's were SQL literals of their own). Each
# (type, how) pair expected must be seen at least once, and none
# unexpected. The tenant's events are read through Events.List (bcctl
# events list) up to its teardown; the teardown's (a deleted tenant's are
# not listed) and the node and pool events (no tenant's) from the outbox. Checked values: the teardown's reasons, the user-inactive
# revocation, a state, a policy's target, a node's pool.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

export BC_NODE_LOST_SECONDS=4
stack_up --controllers 1 --agents 2 --agent-capacity 4,8192,100 || bail_out "stack_up failed"
img=$(stack_image_create evi-img) || bail_out "no image"
node2=$(agent_node_id 2)

# -- every IAM change through the API
bcctl tenant create acme --name 'Acme Inc' >/dev/null || bail_out "tenant"
adm=$(tenant_identity acme user adm --admin)
bob=$(tenant_identity acme user bob)
agent=$(tenant_identity acme agent bot)
A=$(tenant_token "$adm")
tenant_token "$bob" >/dev/null
tok=$(jid "$(bcctl --format json token create --identity "$bob" --name ci)")
bcctl token revoke "$tok" >/dev/null || fail 'token revoke'
dlg=$(jid "$(bcctl --format json delegation create --agent "$agent" --user "$adm")")
bcctl delegation revoke "$dlg" >/dev/null || fail 'delegation revoke'
bcctl delegation create --agent "$agent" --user "$bob" >/dev/null || fail 'delegation'
# bob suspended: his delegation goes with him (reason user-inactive)
bcctl identity set-state "$bob" suspended >/dev/null || fail 'identity set-state'
bcctl identity set-state "$bob" active >/dev/null || fail 'identity set-state'
bcctl delegation create --agent "$agent" --user "$adm" >/dev/null || fail 'delegation'
printf '{"effect":"allow","actions":"compute:*","resources":"*"}' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --identity "$agent" >/dev/null || fail 'policy attach'
bcctl policy attach "$pol" --tenant >/dev/null || fail 'policy attach --tenant'
bcctl policy detach "$pol" --tenant >/dev/null || fail 'policy detach'
pol2=$(jid "$(bcctl --format json policy create --tenant acme --name gone --file "$STACK_DIR/p.json")")
bcctl policy delete "$pol2" >/dev/null || fail 'policy delete'
bcctl tenant quota acme --instances 10 >/dev/null || fail 'quota'
bcctl tenant offer acme --spend-limit-cents 100000 --on-budget-exceeded stop-new >/dev/null ||
	fail 'offer'
bcctl pool budget-check "$POOL_ID" meter >/dev/null || fail 'budget-check'
bcctl pool budget-check "$POOL_ID" none >/dev/null || fail 'budget-check'
bcctl tenant set-state acme suspended >/dev/null || fail 'tenant suspended'
bcctl tenant set-state acme active >/dev/null || fail 'tenant active'

# a sandbox for the teardown to end
tmpl=$(jid "$(as "$A" --format json sandbox-template create --name t1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)") || bail_out "template"
sbx=$(jid "$(as "$A" --format json sandbox create --template "$tmpl" --wait 20s)") || bail_out "sandbox"
ok "[ -n '$sbx' ]" 'a sandbox of the tenant'

# -- a node lost, recovered and retired
pid=$(awk '$1 == "bcd-2" {print $2}' "$STACK_DIR/pids")
kill -STOP "$pid"
node_state() { q "SELECT state FROM nodes WHERE id = '$node2'"; }
eventually 30 eval '[ "$(node_state)" = lost ]'
ok $? 'a silent node is lost'
kill -CONT "$pid"
eventually 30 eval '[ "$(node_state)" = ready ]'
ok $? '... and recovers'
bcctl node retire "$node2" >/dev/null || fail 'node retire'
bcctl node retire "$node2" >/dev/null 2>&1
is "$(q "SELECT count(*) FROM events WHERE type = 'node.retired' AND subject = 'node/$node2'")" 1 \
	'node.retired is published once, by the retire that retired the node'

# -- the tenant's events so far through Events.List, as a tenant reads them
# (a deleted tenant's are not listed any more)
: >"$STACK_DIR/events"
events_list "$STACK_DIR/events" --tenant acme || bail_out "events list"
listed=$(jq -r .id "$STACK_DIR/events" | sort -n | tail -1)
ok "[ $(wc -l <"$STACK_DIR/events") -gt 20 ]" "$(wc -l <"$STACK_DIR/events") tenant events listed"

# -- the teardown
bcctl tenant set-state acme deleting >/dev/null || fail 'tenant deleting'
tenant_deleted() { [ "$(q "SELECT state FROM tenants WHERE id = 'acme'")" = deleted ]; }
eventually 60 tenant_deleted
ok $? 'the tenant is torn down'

# the teardown's events and those of no tenant (nodes, pools) from the outbox
bcctl events list --limit 1 >/dev/null 2>&1 # numbers the committed events
q "SELECT json_build_object('id', seq, 'type', type, 'subject', subject, 'data', data::text)
	FROM events WHERE (tenant_id = 'acme' AND seq > $listed) OR tenant_id IS NULL
	ORDER BY seq" >>"$STACK_DIR/events"
ok "[ $(wc -l <"$STACK_DIR/events") -gt 40 ]" "$(wc -l <"$STACK_DIR/events") events read in all"

# How an event came about: the teardown's carry a reason of their own.
how_of() { # TYPE DATA
	case $2 in
	*'"reason": "tenant deleted"'* | *'"reason":"tenant deleted"'*) echo teardown ;;
	*'"reason": "teardown"'* | *'"reason":"teardown"'*) echo teardown ;;
	*'user-inactive'*) echo user-inactive ;;
	*) echo api ;;
	esac
}

# The keys each type carries, by how (sorted, comma-separated).
declare -A want=(
	["node.joined api"]="poolId"
	["node.lost api"]="poolId"
	["node.recovered api"]="poolId"
	["node.retired api"]="poolId"
	["tenant.created api"]="name"
	["tenant.state-changed api"]="state"
	["tenant.state-changed teardown"]="reason,state"
	["identity.created api"]="kind,name"
	["identity.state-changed api"]="state"
	["identity.state-changed teardown"]="reason,state"
	["token.created api"]="identityId,name"
	["token.revoked api"]=""
	["token.revoked teardown"]="reason"
	["delegation.created api"]="agentId,userId"
	["delegation.revoked api"]=""
	["delegation.revoked user-inactive"]="reason"
	["delegation.revoked teardown"]="reason"
	["policy.created api"]="name"
	["policy.attached api"]="targetId,targetKind"
	["policy.detached api"]="targetId,targetKind"
	["policy.deleted api"]=""
	["policy.deleted teardown"]="reason"
	["quota.set api"]=""
	["offer.set api"]="onBudgetExceeded"
	["pool.budget-check-set api"]="budgetCheck"
	["sandbox.deleting teardown"]="expired,instanceId,poolId,reason,templateId"
)
# node and IAM events, and the teardown's sandbox.deleting, by how
classify() { # ID TYPE SUBJECT DATA
	case $2 in
	node.* | tenant.* | identity.* | token.* | delegation.* | policy.* | quota.* | offer.* | pool.*)
		how_of "$2" "$4" ;;
	sandbox.deleting) [ "$(how_of "$2" "$4")" != teardown ] || echo teardown ;;
	esac
}
event_kinds_check "$STACK_DIR/events" classify

# a few values, beyond the keys
ev() { q "SELECT count(*) FROM events WHERE type = '$1' AND $2"; }
is "$(ev tenant.created "subject = 'tenant/acme' AND data->>'name' = 'Acme Inc'")" 1 \
	"tenant.created names the tenant's name"
is "$(ev tenant.state-changed "subject = 'tenant/acme' AND data->>'state' = 'suspended'")" 1 \
	'tenant.state-changed says the new state'
is "$(ev tenant.state-changed "subject = 'tenant/acme' AND data = '{\"state\": \"deleted\", \"reason\": \"teardown\"}'")" 1 \
	'the teardown ends with tenant.state-changed {state: deleted, reason: teardown}'
is "$(ev identity.state-changed "data = '{\"state\": \"deleted\", \"reason\": \"tenant deleted\"}'")" 3 \
	'each of its three identities: identity.state-changed {state: deleted, reason: tenant deleted}'
is "$(ev delegation.revoked "data->>'reason' = 'user-inactive'")" 1 \
	"bob's suspension revokes his delegation (reason user-inactive)"
is "$(ev policy.attached "subject = 'policy/$pol' AND data->>'targetKind' = 'identity' AND data->>'targetId' = '$agent'")" 1 \
	'policy.attached names its identity'
is "$(ev policy.detached "subject = 'policy/$pol' AND data->>'targetKind' = 'tenant' AND data->>'targetId' = 'acme'")" 1 \
	'policy.detached names its tenant'
is "$(ev sandbox.deleting "subject = 'sandbox/$sbx' AND data->>'templateId' = '$tmpl' AND data->>'instanceId' IS NOT NULL AND data->>'expired' = 'false'")" 1 \
	"the teardown's sandbox.deleting names the sandbox's template and instance"
is "$(ev node.lost "subject = 'node/$node2' AND data->>'poolId' = '$POOL_ID'")" 1 \
	"node.lost names the node's pool"

done_testing
