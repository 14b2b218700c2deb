# sandboxes.t: Sandboxes Create, Get, List, Delete over gRPC (bcctl) and
# JSON/HTTP with the fake runtime: defaults and bounds of the lifetime,
# wait answering the last read, readiness stamped in the instance's own
# report transaction, the instance behind the sandbox (sandbox_id,
# ssh_from_host_only, placed only on nodes that enforce it, refused by
# Instances.Delete), idempotency keys, list scopes and paging, delete
# idempotent and finished right after the instance (the reconciler's period
# is an hour here, so only the wake can do it), a failed sandbox not
# replaced, refusals leaving no row in any table, events with templateId,
# instanceId and poolId, and the metrics on /metrics.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
MET_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
metrics_listen = 127.0.0.1:$MET_PORT
sandbox_reconcile_seconds = 3600"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create sbx-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
# every table's row count; not usage, which the metering pass writes on its
# own clock (a refused call never writes it)
all_rows() {
	local t
	for t in $(q "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'usage' ORDER BY 1"); do
		echo "$t $(q "SELECT count(*) FROM \"$t\"")"
	done
}
sbx_state() { json_get "$(bcctl --format json sandbox get "$1" 2>/dev/null)" state; }
state_is() { [ "$(sbx_state "$1")" = "$2" ]; }

T=$BC_TOKEN
tmpl=$(jid "$(bcctl --format json sandbox-template create --name s1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)") || bail_out "template"

# -- create with wait: ready in the answer
out=$(bcctl --format json sandbox create --template "$tmpl" --wait 20s) || bail_out "create"
s1=$(jid "$out")
like "$s1" '^sbx_' 'a sandbox id is sbx_...'
is "$(json_get "$out" state)" ready 'with wait, the answer is ready'
is "$(json_get "$out" warm)" '' 'warm is false (a cold create)'
is "$(json_get "$out" ttl_seconds)" 3600 "ttlSeconds defaults to the template's"
life=$(( ($(json_get "$out" expires_at) - $(json_get "$out" created_at)) / 1000 ))
is "$life" 3600 'expiresAt = createdAt + the lifetime'
inst=$(json_get "$out" instance_id)
is "$(q "SELECT ready_source FROM sandboxes WHERE id = '$s1'")" report \
	"readiness stamped in the instance's report transaction"
is "$(q "SELECT count(*) FROM sandboxes s JOIN instances i ON i.id = s.instance_id WHERE s.id = '$s1'
	AND i.sandbox_id = '$s1' AND i.ssh_from_host_only AND i.running_at IS NOT NULL")" 1 \
	'its instance has sandbox_id and ssh_from_host_only'
is "$(q "SELECT abs(extract(epoch FROM s.ready_at - i.running_at)) < 0.001 FROM sandboxes s JOIN instances i
	ON i.id = s.instance_id WHERE s.id = '$s1'")" t 'readyAt is the instant the instance ran'
is "$(q "SELECT string_agg(type, ' ' ORDER BY id) FROM events WHERE subject = 'sandbox/$s1'")" \
	'sandbox.created sandbox.ready' 'events sandbox.created, sandbox.ready'
is "$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$s1' AND data->>'templateId' = '$tmpl'
	AND data->>'instanceId' = '$inst' AND data->>'poolId' = '$POOL_ID'")" 2 \
	'both carry templateId, instanceId and poolId'
is "$(q "SELECT data->>'sandboxId' FROM events WHERE type = 'instance.created' AND subject = 'instance/$inst'")" \
	"$s1" 'instance.created carries sandboxId'
out=$(bcctl --format json instance list --scope all)
is "$(json_items "$out" | jq -r "select(.id == \"$inst\") | .sandboxId")" "$s1" 'instances.list shows it'
bcctl instance delete "$inst" >/dev/null 2>"$STACK_DIR/err"
is $? 6 "Instances.Delete refuses a sandbox's instance (INVALID_STATE)"
like "$(cat "$STACK_DIR/err")" "managed by sandbox $s1" 'naming the sandbox'
api_refused "$T" instances/delete "{\"instanceId\":\"$inst\"}" 409 INVALID_STATE reason=sandbox-managed \
	'and over JSON/HTTP'
out=$(bcctl --format json sandbox get "$s1")
is "$(printf '%s' "$out" | jq '.snapshots | length')" 0 'get: the snapshots list is empty'

# -- lifetime, wait and template refusals
api_refused "$T" sandboxes/create "{\"templateId\":\"$tmpl\",\"ttlSeconds\":7201}" 400 INVALID_INPUT \
	maxTtlSeconds=7200 "ttlSeconds above the template's maxTtlSeconds"
api_refused "$T" sandboxes/create "{\"templateId\":\"$tmpl\",\"wait\":{\"timeoutMs\":30001}}" 400 \
	INVALID_INPUT field=wait.timeoutMs 'a wait above 30 s'
api_refused "$T" sandboxes/create "{\"templateId\":\"$tmpl\",\"fromSnapshot\":\"snap_x\"}" 400 \
	INVALID_INPUT field=fromSnapshot 'a malformed fromSnapshot (restores: snapshots.t)'
api_refused "$T" sandboxes/create "{\"templateId\":\"sbxt_00000000000000000000000000\"}" 404 NOT_FOUND - \
	'an unknown template'
api_refused "$T" sandboxes/create "{\"templateId\":\"$tmpl\",\"bogus\":1}" 400 INVALID_INPUT - \
	'an unknown field'
out=$(api "$T" sandboxes/create "{\"templateId\":\"$tmpl\",\"ttlSeconds\":900}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/compute/sandboxes/create'
s2=$(printf '%s\n' "$out" | sed '$d' | jq -r .id)
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .ttlSeconds)" 900 'with ttlSeconds 900'

api_refused "$T" sandboxes/extend "{\"sandboxId\":\"$s1\"}" 400 INVALID_INPUT field=until \
	'extend with neither until nor by'
api_refused "$T" sandboxes/extend "{\"sandboxId\":\"$s1\",\"by\":\"30m\",\"until\":1}" 400 INVALID_INPUT \
	field=until 'extend with both until and by'

# -- idempotency
a=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --key job-1)")
b=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --key job-1)")
is "$b" "$a" 'the same idempotency key returns the same sandbox'
bcctl sandbox create --template "$tmpl" --key job-1 --ttl 10m >/dev/null 2>"$STACK_DIR/err"
is $? 4 'the key with another request is CONFLICT'
like "$(cat "$STACK_DIR/err")" 'idempotency-key-reused' 'reason idempotency-key-reused'

# -- a refused create leaves nothing staged
bcctl tenant create acme >/dev/null || bail_out "tenant"
mkid() { jid "$(bcctl --format json identity create --tenant acme --kind user --name "$1")"; }
alice=$(mkid alice); bob=$(mkid bob)
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
B=$(json_get "$(bcctl --format json token create --identity "$bob")" token)
pol() { printf '%s' "$2" >"$STACK_DIR/p.json"; jid "$(bcctl --format json policy create --tenant acme --name "$1" --file "$STACK_DIR/p.json")"; }
p1=$(pol manage '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}')
bcctl policy attach "$p1" --tenant >/dev/null || bail_out "attach"
p2=$(pol short '{"sid":"NoLong","effect":"deny","actions":["compute:sandboxes:create"],"resources":["compute-sandbox/*"],"conditions":{"NumericGreaterThan":{"resource.ttlSeconds":1800}}}')
bcctl policy attach "$p2" --identity "$bob" >/dev/null
at=$(printf '%s' "$(api "$A" sandboxtemplates/create "{\"name\":\"t\",\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\"}")" | sed '$d' | jq -r .id)
like "$at" '^sbxt_' "acme's template"
bcctl tenant quota acme --instances 0 >/dev/null
before=$(all_rows)
api_refused "$B" sandboxes/create "{\"templateId\":\"$at\"}" 403 ACCESS_DENIED sid=NoLong \
	'a deny on resource.ttlSeconds > 1800 (the default 3600)'
api_refused "$A" sandboxes/create "{\"templateId\":\"$tmpl\"}" 404 NOT_FOUND - "another tenant's template"
api_refused "$A" sandboxes/create "{\"templateId\":\"$at\"}" 429 QUOTA_EXCEEDED resource=instances \
	'past the quota'
is "$(all_rows)" "$before" 'the refused creates left no row in any table'
bcctl tenant quota acme --instances 100 >/dev/null
out=$(api "$B" sandboxes/create "{\"templateId\":\"$at\",\"ttlSeconds\":1800,\"wait\":{\"timeoutMs\":20000}}")
sb=$(printf '%s\n' "$out" | sed '$d' | jq -r .id)
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .state)" ready 'bob creates within the policy'
out=$(api "$A" sandboxes/create "{\"templateId\":\"$at\"}")
sa=$(printf '%s\n' "$out" | sed '$d' | jq -r .id)

# -- list: scopes, read check per item, template filter, paging, deleted
ids() { printf '%s\n' "$1" | sed '$d' | jq -r '[.items[].id] | join(" ")'; }
is "$(ids "$(api "$B" sandboxes/list '{}')")" "$sb" 'mine: only what bob created'
is "$(ids "$(api "$B" sandboxes/list '{"scope":"all"}')")" "$sa $sb" 'all: the tenant, newest first'
p3=$(pol noread "{\"effect\":\"deny\",\"actions\":[\"compute:sandboxes:read\"],\"resources\":[\"compute-sandbox/$sa\"]}")
bcctl policy attach "$p3" --identity "$bob" >/dev/null
is "$(ids "$(api "$B" sandboxes/list '{"scope":"all"}')")" "$sb" 'all leaves out what bob may not read'
api_refused "$B" sandboxes/get "{\"sandboxId\":\"$sa\"}" 403 ACCESS_DENIED action=compute:sandboxes:read \
	'get is decided too'
out=$(bcctl --format json sandbox list --template "$tmpl" --limit 2)
is "$(json_items "$out" | wc -l)" 2 'limit 2'
cur=$(json_get "$out" cursor)
out2=$(bcctl --format json sandbox list --template "$tmpl" --limit 2 --cursor "$cur")
is "$(json_items "$out2" | wc -l)" 1 'the next page holds the rest'
is "$( (json_items "$out"; json_items "$out2") | jq -r .id | sort -r | tr '\n' ' ')" \
	"$( (json_items "$out"; json_items "$out2") | jq -r .id | tr '\n' ' ')" 'newest first'
api_refused "$T" sandboxes/list '{"limit":201}' 400 INVALID_INPUT field=limit 'limit above 200'
api_refused "$T" sandboxes/list '{"scope":"some"}' 400 INVALID_INPUT field=scope 'an unknown scope'

# -- delete: idempotent, deleted right after its instance (no pass for an hour)
out=$(bcctl --format json sandbox delete "$s2") ; ok $? 'delete'
is "$(json_get "$out" state)" deleting 'the sandbox is deleting'
bcctl sandbox delete "$s2" >/dev/null ; ok $? 'a second delete is fine'
eventually 30 state_is "$s2" deleted
ok $? 'deleted right after its instance, by the wake'
is "$(q "SELECT string_agg(type, ' ' ORDER BY id) FROM events WHERE subject = 'sandbox/$s2'")" \
	'sandbox.created sandbox.ready sandbox.deleting sandbox.deleted' 'each event once'
is "$(q "SELECT data->>'expired' FROM events WHERE subject = 'sandbox/$s2' AND type = 'sandbox.deleted'")" \
	false 'sandbox.deleted says expiry did not end it'
is "$(q "SELECT count(*) FROM authz_resources WHERE id = '$s2'")" 0 'it left the authorization projection'
is "$(json_get "$(bcctl --format json sandbox get "$s2")" state)" deleted 'get still shows it'
bcctl sandbox list --all | grep -q "$s2"
is $? 1 'list leaves it out'
bcctl --format json sandbox list --all --deleted | grep -q "$s2"
ok $? '... unless deleted is asked for'

# -- a failed sandbox is not replaced
q "UPDATE instances SET state = 'error', reason = 'boom' WHERE sandbox_id = '$a'" >/dev/null
is "$(sbx_state "$a")" failed 'an instance in error fails its sandbox, in the same transaction'
sleep 3
is "$(q "SELECT count(*) FROM instances WHERE sandbox_id = '$a'")" 1 'and nothing replaces it'

# -- placement only on nodes that enforce ssh-from-host-only
node=$(agent_node_id 1)
agent_kill 1
q "UPDATE nodes SET labels = labels - 'bc.dev/cap.instance.ssh-host-only' WHERE id = '$node'" >/dev/null
out=$(bcctl --format json sandbox create --template "$tmpl")
s3=$(jid "$out")
is "$(json_get "$out" state)" starting 'without a capable node the sandbox is starting'
like "$(json_get "$out" reason)" 'Unschedulable' 'its instance waits Unschedulable'
is "$(q "SELECT count(*) FROM instances WHERE sandbox_id = '$s3' AND node_id IS NULL")" 1 \
	'it is not placed on the node without the label'
agent_start 1
eventually 60 state_is "$s3" ready
ok $? 'once the node reports the capability again, it is placed and becomes ready'

# -- metrics
m=$(curl -sS "http://127.0.0.1:$MET_PORT/metrics")
like "$m" 'better_compute_sandbox_ready_seconds_bucket\{source="cold",le="\+Inf"\} [0-9]+' \
	'/metrics: better_compute_sandbox_ready_seconds{source="cold"}'
is "$(printf '%s\n' "$m" | sed -n 's/^better_compute_sandbox_ready_seconds_count{source="cold"} //p')" \
	"$(q "SELECT count(*) FROM sandboxes WHERE ready_at IS NOT NULL AND NOT warm")" \
	'its count is the number of ready sandboxes'
like "$m" 'better_compute_sandbox_expiry_lag_seconds' '/metrics: better_compute_sandbox_expiry_lag_seconds'
done_testing
