# iam.t: who may do what, decided before anything is written. A tenant
# with users, a service, and an agent acting for a user under a delegation;
# the policy matrix on Instances (allow, explicit deny over allow,
# wildcards, a pool grant reaching the instances in it, the ShortCpu
# statement adapted to the attributes instances have, another tenant's id
# NOT_FOUND); the agent limited to what it created and cut off when its
# delegation is revoked; a refused create leaving no row in any table;
# malformed policies refused naming the field; quotas and budgets; the
# refusals' codes and details through gRPC (bcctl) and JSON/HTTP alike.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create iam-img) || bail_out "no image"

# every table's row count, one line each
# every table's row count; not usage, which the metering pass writes on its
# own clock (a refused call never writes it)
all_rows() {
	local t
	for t in $(q "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'usage' ORDER BY 1"); do
		echo "$t $(q "SELECT count(*) FROM \"$t\"")"
	done
}
policy() { # NAME JSON: create a policy in acme, print its id
	printf '%s' "$2" >"$STACK_DIR/pol.json"
	jid "$(bcctl --format json policy create --tenant acme --name "$1" --file "$STACK_DIR/pol.json")"
}
# http_create TOKEN POOL FLAVOR: POST /api/compute/instances/create; prints
# the body, then the HTTP status on a line of its own
http_create() {
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $1" \
		-H 'Content-Type: application/json' -w '\n%{http_code}' \
		--data-binary "{\"poolId\":\"$2\",\"flavor\":\"$3\",\"imageId\":\"$img\"}" \
		"https://127.0.0.1:$HTTP_PORT/api/compute/instances/create"
}
# http_refused TOKEN POOL FLAVOR STATUS CODE DETAIL VALUE MSG
http_refused() {
	local out
	out=$(http_create "$1" "$2" "$3")
	is "$(printf '%s\n' "$out" | tail -n 1)" "$4" "$8 over JSON/HTTP: status $4"
	is "$(printf '%s\n' "$out" | sed '$d' | jq -r ".error.code + \" \" + .error.details.$6")" \
		"$5 $7" "$8 over JSON/HTTP: $5 with $6 $7"
}
create_as() { # TOKEN POOL FLAVOR: create, print the id
	jid "$(as "$1" --format json instance create --pool "$2" --flavor "$3" --image "$img")"
}

# -- tenants, identities, tokens
out=$(bcctl --format json tenant create acme --name "Acme Corp") || bail_out "tenant create"
is "$(json_get "$out" state)" active 'tenant acme is active'
alice=$(tenant_identity acme user alice); bob=$(tenant_identity acme user bob); carol=$(tenant_identity acme user carol); svc=$(tenant_identity acme service ci)
agent=$(tenant_identity acme agent helper)
ok "[ -n '$alice' ] && [ -n '$agent' ]" 'identities created'
A=$(tenant_token "$alice"); B=$(tenant_token "$bob"); C=$(tenant_token "$carol"); S=$(tenant_token "$svc")
like "$A" '^bct_[0-9a-f]{64}$' 'a token is shown once, bct_ + 64 hex'
is "$(q "SELECT count(*) FROM api_tokens WHERE token_hash = encode(sha256('$A'), 'hex')")" 1 \
	'only its SHA-256 is stored'
refused "$A" 5 'operator credential' 'a tenant user cannot call the admin API' -- tenant list
pool2=$(jid "$(bcctl --format json pool create --name p2 --runtime fake --bridge bcbr2)")
big=$(jid "$(bcctl --format json flavor create --name big --vcpus 2 --memory-mib 512 --disk-gib 1)")
gpu=$(jid "$(bcctl --format json flavor create --name gpu --vcpus 1 --memory-mib 512 --disk-gib 1 --gpus 1)")

# -- default deny, and a refused create leaves nothing behind
before=$(all_rows)
refused "$A" 5 'reason: no-allow' 'no policy: default deny' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
refused "$A" 5 'action: compute:instances:create' 'the refusal names the action' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key k1
http_refused "$A" "$POOL_ID" "$FLAVOR_NAME" 403 ACCESS_DENIED reason no-allow 'default deny'
is "$(all_rows)" "$before" 'a refused create leaves no row in any table'

# -- malformed policies are refused naming the field
printf '%s' '[{"effect": "maybe", "actions": "*", "resources": "*"}]' >"$STACK_DIR/bad.json"
refused "$BC_TOKEN" 2 'field: document.statements\[0\].effect' 'bad effect' -- policy create --tenant acme --name bad --file "$STACK_DIR/bad.json"
printf '%s' '{"effect": "allow", "actions": "*", "resources": "*", "conditions": {"NumericLessThan": {"resource.vcpus": "two"}}}' >"$STACK_DIR/bad.json"
refused "$BC_TOKEN" 2 'field: document.statement.conditions.NumericLessThan.resource.vcpus' 'bad condition value' -- policy create --tenant acme --name bad --file "$STACK_DIR/bad.json"
is "$(q "SELECT count(*) FROM policies")" 0 'no malformed policy stored'

# -- allow
allow=$(policy AllowInstances '{"statements": [{"sid": "Instances", "effect": "allow", "actions": ["compute:instances:*"], "resources": ["compute-instance/*"]}]}')
bcctl policy attach "$allow" --identity "$alice" >/dev/null
ia=$(create_as "$A" "$POOL_ID" "$FLAVOR_NAME")
like "$ia" '^inst_' 'allow: alice creates an instance'
is "$(json_get "$(as "$A" --format json instance get "$ia")" id)" "$ia" 'allow: alice reads it'
is "$(q "SELECT owner_id || ' ' || draft FROM authz_resources WHERE id = '$ia'")" "$alice false" \
	'its authorization row is owned by alice and no longer a draft'

# -- explicit deny wins over allow
deny=$(policy NoDelete '[{"sid": "NoDelete", "effect": "deny", "actions": "compute:instances:delete", "resources": "*"}]')
bcctl policy attach "$deny" --identity "$alice" >/dev/null
refused "$A" 5 'reason: explicit-deny' 'explicit deny over allow' -- instance delete "$ia"
like "$(cat "$STACK_DIR/err")" 'sid: NoDelete' 'the refusal names the deny statement'
bcctl policy detach "$deny" --identity "$alice" >/dev/null

# -- wildcards: bob may do anything in compute
wild=$(policy Wild '[{"effect": "allow", "actions": "compute:*", "resources": "*"}]')
bcctl policy attach "$wild" --identity "$bob" >/dev/null
ib=$(create_as "$B" "$POOL_ID" "$FLAVOR_NAME")
like "$ib" '^inst_' 'wildcards: bob creates'
ok "as '$B' instance delete '$ib' >/dev/null" 'wildcards: bob deletes'
B2=$(tenant_token "$bob")

# -- a pool grant reaches the instances in the pool, and only that pool
pg=$(policy PoolTwo "[{\"effect\": \"allow\", \"actions\": \"compute:instances:*\", \"resources\": \"compute-pool/$pool2\"}]")
bcctl policy attach "$pg" --identity "$svc" >/dev/null
is2=$(create_as "$S" "$pool2" "$FLAVOR_NAME")
like "$is2" '^inst_' 'a grant on pool p2 reaches an instance created in it'
refused "$S" 5 'no-allow' 'the p2 grant does not reach pool p1' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"

# -- ShortCpu for instances: at most 1 vCPU and no GPU
sc=$(policy ShortCpu '{"sid": "ShortCpuInstances", "effect": "allow", "actions": ["compute:instances:create", "compute:instances:read"], "resources": ["compute-instance/*"], "conditions": {"NumericLessThanEquals": {"resource.vcpus": 1, "resource.gpus": 0}}}')
bcctl policy attach "$sc" --identity "$carol" >/dev/null
like "$(create_as "$C" "$POOL_ID" "$FLAVOR_NAME")" '^inst_' 'ShortCpu: 1 vCPU, no GPU allowed'
before=$(all_rows)
refused "$C" 5 'no-allow' 'ShortCpu: 2 vCPUs refused' -- instance create --pool "$POOL_ID" --flavor big --image "$img"
refused "$C" 5 'no-allow' 'ShortCpu: a GPU refused' -- instance create --pool "$POOL_ID" --flavor gpu --image "$img"
is "$(all_rows)" "$before" 'the refused creates left no row in any table'

# -- another tenant's resource is NOT_FOUND, never ACCESS_DENIED
root_inst=$(jid "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
refused "$A" 3 '' "another tenant's instance is NOT_FOUND" -- instance get "$root_inst"
refused "$A" 3 '' "another tenant's instance through its tenant id is NOT_FOUND" -- instance get "$root_inst" --tenant root
refused "$A" 3 '' "another tenant's instance cannot be deleted" -- instance delete "$root_inst"
is "$(json_get "$(bcctl --format json instance get "$root_inst")" state | grep -c deleting)" 0 'and it was not'

# -- list: scope mine (default) and all, each item checked
is "$(json_items "$(as "$A" --format json instance list)" | wc -l)" 1 'alice lists her one instance (mine)'
like "$(create_as "$B" "$POOL_ID" big)" '^inst_' 'bob creates a 2-vCPU instance'
n=$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")
is "$(json_items "$(as "$A" --format json instance list --scope all)" | wc -l)" "$n" \
	"scope all: every live instance of the tenant alice may read ($n)"
is "$(json_items "$(as "$C" --format json instance list --scope all)" | wc -l)" "$((n - 1))" \
	'scope all for carol: each item checked, ShortCpu reads leave out the 2-vCPU one'
refused "$A" 2 'field: scope' 'a bad scope' -- instance list --scope everything

# -- an agent under a delegation: only what it created, cut off on revoke
refused "$(tenant_token "$agent")" 5 'delegation-revoked' 'an agent without a delegation is refused' -- instance list
dlg=$(jid "$(bcctl --format json delegation create --agent "$agent" --user "$alice")")
like "$dlg" '^dlg_' 'delegation created'
G=$(tenant_token "$agent")
refused "$G" 5 'no-allow' 'the agent has no policy of its own yet' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
agp=$(policy AgentAll '[{"effect": "allow", "actions": "*", "resources": "*"}]')
bcctl policy attach "$agp" --identity "$agent" >/dev/null
ig=$(create_as "$G" "$POOL_ID" "$FLAVOR_NAME")
like "$ig" '^inst_' 'the agent creates for alice'
is "$(q "SELECT owner_id || ' ' || agent_id FROM authz_resources WHERE id = '$ig'")" "$alice $agent" \
	'owned by alice, created by the agent'
ok "as '$G' instance get '$ig' >/dev/null" 'the agent reads what it created'
bcctl policy attach "$deny" --identity "$alice" >/dev/null
refused "$G" 5 'explicit-deny' "the agent may do no more than its user: alice's deny holds it" -- instance delete "$ig"
bcctl policy detach "$deny" --identity "$alice" >/dev/null
refused "$G" 3 '' "the agent cannot see alice's own instance" -- instance get "$ia"
is "$(json_items "$(as "$G" --format json instance list --scope all)" | jq -r .id)" "$ig" \
	'the agent lists only what it created'
bcctl delegation revoke "$dlg" >/dev/null
refused "$G" 5 'delegation-revoked' 'revoked: the agent is cut off at once' -- instance get "$ig"
ok "as '$A' instance get '$ig' >/dev/null" 'alice still reads what the agent created for her'

# -- quotas: charged from the tenant's live instances
live=$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")
bcctl tenant quota acme --instances "$live" --vcpus 100 >/dev/null
before=$(all_rows)
refused "$A" 9 'resource: instances' 'quota: one instance too many' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'remaining: 0' 'QUOTA_EXCEEDED says what is left'
http_refused "$A" "$POOL_ID" "$FLAVOR_NAME" 429 QUOTA_EXCEEDED remaining 0 'quota'
is "$(all_rows)" "$before" 'a quota refusal leaves no row'
bcctl tenant quota acme --vcpus "$live" >/dev/null
refused "$B" 9 'requested: 2' 'quota: vCPUs asked past the limit' -- instance create --pool "$POOL_ID" --flavor big --image "$img"
bcctl tenant quota acme --gpus 0 >/dev/null
refused "$B" 9 'resource: gpus' 'quota: no GPUs left' -- instance create --pool "$POOL_ID" --flavor gpu --image "$img"
used=$(q "SELECT sum(memory_mib) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")
bcctl tenant quota acme --memory-gib $((used / 1024)) >/dev/null
refused "$B" 9 'resource: memoryMib' "quota: memory ($used MiB used, $((used / 1024)) GiB allowed)" -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'requested: 512' 'memory is told in MiB: 512 asked'
bcctl tenant quota acme >/dev/null
bcctl tenant quota acme --vcpus 1000 >/dev/null

# -- budgets: a spent budget stops new work (spend as metering would record it)
bcctl tenant offer acme --spend-limit-cents 100 >/dev/null
q "INSERT INTO usage (tenant_id, meter, quantity, cost_cents) VALUES ('acme', 'vcpu.hours', 3, 150)"
is "$(json_get "$(bcctl --format json tenant offer acme)" spent_cents)" 150 'the offer shows the spend'
like "$(create_as "$A" "$POOL_ID" "$FLAVOR_NAME")" '^inst_' "budget none and a pool that does not check: allowed"
bcctl pool budget-check "$POOL_ID" meter >/dev/null
refused "$A" 11 'budget-spent' 'a metering pool refuses new work on a spent budget' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
http_refused "$A" "$POOL_ID" "$FLAVOR_NAME" 402 SPEND_LIMIT_REACHED reason budget-spent 'budget'
bcctl pool budget-check "$POOL_ID" none >/dev/null
bcctl tenant offer acme --spend-limit-cents 100 --on-budget-exceeded stop-new >/dev/null
refused "$A" 11 'budget-spent' 'an offer with stop-new refuses new work anywhere' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
bcctl tenant offer acme --on-budget-exceeded none >/dev/null
like "$(create_as "$A" "$POOL_ID" "$FLAVOR_NAME")" '^inst_' 'no spend limit: allowed again'
refused "$BC_TOKEN" 3 '' "an unknown tenant's offer" -- tenant offer nobody --spend-limit-cents 1

# -- a tenant administrator: everything in its tenant, nothing outside
adm=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name boss --admin)")
D=$(tenant_token "$adm")
ok "as '$D' instance get '$ig' >/dev/null" "a tenant admin reads another user's instance (implicit allow)"
is "$(json_items "$(as "$D" --format json instance list --scope all)" | wc -l)" \
	"$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")" \
	'a tenant admin lists the whole tenant'
refused "$D" 3 '' "a tenant admin does not see another tenant's instance" -- instance get "$root_inst"
refused "$D" 5 'operator credential' 'a tenant admin is no operator' -- tenant list

# -- a deleted policy stops applying at once (parsed documents are cached)
ok "bcctl policy delete '$wild' >/dev/null" 'policy delete'
refused "$B2" 5 'no-allow' "bob's wildcard policy is gone: refused at once" -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
is "$(q "SELECT count(*) FROM policy_attachments WHERE policy_id = '$wild'")" 0 'its attachments went with it'
W=$(tenant_token "$(jid "$(bcctl --format json identity create --tenant acme --kind user --name walt)")")
ok "[ -z \"\$(as '$W' --format json instance list --scope all | jq -r '.items[]?.id')\" ]" \
	'and a list shows nothing it may not read'
is "$(json_get "$(bcctl --format json policy get "$sc")" statements)" 1 'policy get counts statements'
refused "$BC_TOKEN" 3 '' 'a deleted policy is gone' -- policy get "$wild"

# -- an expiring token
# (8 s: a loaded machine can take seconds between the create and the call)
E=$(json_get "$(bcctl --format json token create --identity "$alice" --ttl 8s)" token)
ok "as '$E' instance list >/dev/null" 'an 8-second token works at once'
sleep 9
refused "$E" 14 '' 'and is UNAUTHENTICATED once expired' -- instance list

# -- tokens and states
tok_id=$(q "SELECT id FROM api_tokens WHERE token_hash = encode(sha256('$B'), 'hex')")
bcctl token revoke "$tok_id" >/dev/null
refused "$B" 14 '' 'a revoked token is UNAUTHENTICATED' -- instance list
bcctl identity set-state "$carol" suspended >/dev/null
refused "$C" 5 'identity-inactive' 'a suspended identity is refused' -- instance list
bcctl tenant set-state acme suspended >/dev/null
refused "$A" 5 'tenant-inactive' 'a suspended tenant is refused' -- instance list
bcctl tenant set-state acme active >/dev/null
ok "as '$A' instance list >/dev/null" 'reactivated'
refused "$BC_TOKEN" 6 'reason: tenant-not-empty' 'a tenant with live instances cannot become deleted' -- tenant set-state acme deleted
bcctl tenant create empty >/dev/null
is "$(json_get "$(bcctl --format json tenant set-state empty deleted)" state)" deleted 'an empty tenant can'
refused "$BC_TOKEN" 3 '' 'a deleted tenant stays deleted' -- tenant set-state empty active
refused "$BC_TOKEN" 6 'root-tenant' "the operator's own tenant stays active" -- tenant set-state root suspended

# -- the admin and events services over JSON/HTTP
post() { # TOKEN PATH BODY: prints the body, then the status on its own line
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
		-w '\n%{http_code}' --data-binary "$3" "https://127.0.0.1:$HTTP_PORT$2"
}
out=$(post "$BC_TOKEN" /api/admin/apitokens/create "{\"identityId\":\"$alice\"}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/admin/apitokens/create is 200'
H=$(printf '%s\n' "$out" | sed '$d' | jq -r .token)
like "$H" '^bct_' '... and shows the token'
out=$(post "$H" /api/compute/events/list '{"limit": 5}')
is "$(printf '%s\n' "$out" | tail -n 1)" 403 "alice's new token works, but no policy of hers grants compute:events:read"
out=$(post "$D" /api/compute/events/list '{"limit": 5}')
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/compute/events/list is 200 for the tenant admin'
is "$(printf '%s\n' "$out" | sed '$d' | jq '[.items[] | select(.tenantId == "acme")] | length')" 5 \
	'... five events, all of acme'
out=$(post "$H" /api/compute/events/watch '{}')
is "$(printf '%s\n' "$out" | tail -n 1)" 403 'Events.Watch over JSON/HTTP is decided before it streams: 403'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .error.details.action)" compute:events:read \
	'... naming the action'

# -- every change published its event
for ev in tenant.created identity.created token.created token.revoked policy.created \
	policy.attached policy.detached delegation.created delegation.revoked quota.set \
	identity.state-changed tenant.state-changed offer.set pool.budget-check-set; do
	ok "[ \"\$(q \"SELECT count(*) FROM events WHERE type = '$ev'\")\" -ge 1 ]" "$ev published"
done

done_testing
