# quota_harden.t: one tenant cannot grow the deployment without bound
# (issue 12, item 14), each attack beside a control tenant whose calls
# still flow.
# - default per-tenant quotas when the tenant has none: instances, unplaced
#   instances (waiting for room), open sandboxes; QUOTA_EXCEEDED with
#   resource, requested, remaining and limit; Quotas.Set overrides the
#   instance default;
# - retention: idempotency keys and sequenced events older than their
#   config keys are purged by the reconciler, younger ones stay;
# - a per-principal request rate limit: RESOURCE_EXHAUSTED with
#   retryAfterSeconds over gRPC and JSON/HTTP, another principal unaffected,
#   the throttled one served again after the wait.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

export BC_NODE_LOST_SECONDS=600
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
# HARDEN_CONF= (empty) runs the attacks against a controller without these keys
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
${HARDEN_CONF-default_quota_instances = 4
default_quota_unplaced_instances = 2
default_quota_sandboxes = 2
idempotency_retention_seconds = 86400
events_retention_seconds = 86400}"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,400 || bail_out "stack_up failed"
img=$(stack_image_create qh-img) || bail_out "no image"

printf '%s' '{"effect": "allow", "actions": "*", "resources": "*"}' >"$STACK_DIR/all.json"
# tenant_user TENANT NAME: a user allowed everything in TENANT, its token
tenant_user() {
	local id pol
	id=$(tenant_identity "$1" user "$2")
	pol=$(jid "$(bcctl --format json policy create --tenant "$1" --name "all-$2" --file "$STACK_DIR/all.json")")
	bcctl policy attach "$pol" --identity "$id" >/dev/null
	tenant_token "$id"
}
mk() { # TOKEN POOL [ARGS...]: create an instance, print its id
	local tok=$1 pool=$2
	shift 2
	jid "$(as "$tok" --format json instance create --pool "$pool" --flavor "$FLAVOR_NAME" --image "$img" "$@")"
}
for t in acme beta gamma delta; do bcctl tenant create "$t" >/dev/null || bail_out "tenant $t"; done
A=$(tenant_user acme alice); B=$(tenant_user beta bob); G=$(tenant_user gamma gina); D=$(tenant_user delta dan)

# -- default quota: instances
for i in 1 2 3 4; do
	like "$(mk "$A" "$POOL_ID")" '^inst_' "acme: instance $i of the default 4"
done
refused "$A" 9 'resource: instances' 'acme: the 5th instance is QUOTA_EXCEEDED (no quota set: the default)' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'limit: 4' 'the refusal names the default limit'
like "$(mk "$B" "$POOL_ID")" '^inst_' 'control: beta, another tenant, still creates'
bcctl tenant quota acme --instances 10 >/dev/null || bail_out "quota"
like "$(mk "$A" "$POOL_ID")" '^inst_' "acme's own quota (10) replaces the default"

# -- default quota: unplaced instances (a pool without hosts: they wait for room)
empty=$(jid "$(bcctl --format json pool create --name empty --runtime fake --bridge bcbr9)")
u1=$(mk "$G" "$empty"); u2=$(mk "$G" "$empty")
is "$(q "SELECT count(*) FROM instances WHERE id IN ('$u1', '$u2') AND node_id IS NULL")" 2 \
	'gamma: two instances wait for room'
refused "$G" 9 'resource: unplacedInstances' 'gamma: a third waiting instance is QUOTA_EXCEEDED' -- \
	instance create --pool "$empty" --flavor "$FLAVOR_NAME" --image "$img"
like "$(mk "$G" "$POOL_ID")" '^inst_' 'control: gamma still creates an instance that is placed'
as "$G" instance delete "$u1" >/dev/null
eventually 60 bash -c "[ \"\$(psql -d bc -XAtq -c \"SELECT state FROM instances WHERE id = '$u1'\")\" = deleted ]" ||
	diag "u1 not deleted"
like "$(mk "$G" "$empty")" '^inst_' 'gamma: one deleted, one more may wait'

# -- default quota: open sandboxes
tmpl=$(jid "$(as "$D" --format json sandbox-template create --name t --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"
for i in 1 2; do
	like "$(jid "$(as "$D" --format json sandbox create --template "$tmpl")")" '^sbx_' "delta: sandbox $i of the default 2"
done
refused "$D" 9 'resource: sandboxes' 'delta: a third open sandbox is QUOTA_EXCEEDED' -- sandbox create --template "$tmpl"
is "$(q "SELECT count(*) FROM sandboxes WHERE tenant_id = 'delta'")" 2 'and left no sandbox row'

# -- retention: idempotency keys and events
old=$(mk "$B" "$POOL_ID" --key old-key); new=$(mk "$B" "$POOL_ID" --key new-key)
refused "$B" 4 'idempotency-key-reused' 'control: a live key with another request is CONFLICT' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key old-key --network private
q "UPDATE idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'old-key'" >/dev/null
key_gone() { [ "$(q "SELECT count(*) FROM idempotency_keys WHERE key = 'old-key'")" = 0 ]; }
ok "eventually 150 key_gone" 'an idempotency key older than idempotency_retention_seconds is purged'
is "$(q "SELECT count(*) FROM idempotency_keys WHERE key = 'new-key'")" 1 'a younger key stays'
is "$(jid "$(as "$B" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --key new-key)")" \
	"$new" 'the younger key still returns its instance'

cut=$(q "SELECT max(id) FROM (SELECT id FROM events ORDER BY id LIMIT 10) e")
younger=$(q "SELECT count(*) FROM events WHERE id > $cut")
q "UPDATE events SET created_at = now() - interval '2 days' WHERE id <= $cut" >/dev/null
ev_gone() { [ "$(q "SELECT count(*) FROM events WHERE id <= $cut")" = 0 ]; }
ok "eventually 150 ev_gone" 'events older than events_retention_seconds are purged'
ok "[ \"\$(q \"SELECT count(*) FROM events WHERE id > $cut\")\" -ge $younger ]" 'younger events stay'

# -- a per-principal rate limit
ctl_kill 1 TERM
# HARDEN_RATE_CONF= (empty) runs the attack against a controller without them
printf '%s\n' "${HARDEN_RATE_CONF-rate_limit_per_second = 1
rate_limit_burst = 5}" >>"$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart with a rate limit"
URL="https://127.0.0.1:$HTTP_PORT/api/compute/instances/list"
# burst N PREFIX: N requests as alice over one kept-alive connection (one
# process, so the machine's load does not spread them out), each body in
# PREFIX.<i>; prints one HTTP status per line
burst() {
	local args=() i
	for i in $(seq 1 "$1"); do args+=(-o "$2.$i" "$URL"); done
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $A" -H 'Content-Type: application/json' \
		--data-binary '{}' -w '%{http_code}\n' "${args[@]}"
}
codes=$(burst 30 "$STACK_DIR/b")
n_ok=$(grep -c '^200$' <<<"$codes"); n_limited=$(grep -c '^429$' <<<"$codes")
ok "[ $n_ok -ge 5 ]" "the burst is served ($n_ok of 30 calls)"
ok "[ $n_limited -ge 10 ]" "30 quick calls of one principal: $n_limited refused with 429"
body=$(grep -l 'RESOURCE_EXHAUSTED' "$STACK_DIR"/b.* | head -n 1)
is "$(jq -r '.error.code' "${body:-/dev/null}" 2>/dev/null)" RESOURCE_EXHAUSTED 'over JSON/HTTP: RESOURCE_EXHAUSTED'
like "$(jq -r '.error.details.retryAfterSeconds' "${body:-/dev/null}" 2>/dev/null)" '^[1-9][0-9]*$' \
	'over JSON/HTTP: details.retryAfterSeconds'
# gRPC: while a long burst keeps alice's bucket empty
burst 150 "$STACK_DIR/d" >/dev/null &
drain=$!
rc=0
for i in $(seq 1 10); do
	as "$A" instance list >/dev/null 2>"$STACK_DIR/err"
	rc=$?
	[ "$rc" = 0 ] || break
done
is "$rc" 18 'over gRPC: bcctl exits 18 (RESOURCE_EXHAUSTED)'
like "$(cat "$STACK_DIR/err")" 'retryAfterSeconds: [1-9]' 'over gRPC: details.retryAfterSeconds'
ok "as '$B' instance list >/dev/null" 'control: another principal is served meanwhile'
wait "$drain"
ok "eventually 30 as '$A' instance list >/dev/null 2>&1" 'after the wait, the throttled principal is served again'

done_testing
