# secrets.t: the secret broker end to end, with the fake runtime:
# - Secrets.Put / List / Delete over gRPC (bcctl, the value on stdin or
#   --from-file) and JSON/HTTP: write-only (no answer, event or log line
#   carries a value), rotation raises the version and drops the old blob,
#   tenant and fleet scope (fleet for operators only), every refusal with
#   its code and details and no row left behind;
# - a template's env and secret:// user data: every refusal of the issue
#   (syntax, another tenant's, missing, platform-minted, fleet secrets:
#   INVALID_INPUT; no compute:secrets:manage: ACCESS_DENIED; an agent under
#   a delegation: credential-required; a concurrent change of the
#   template's secrets: CONFLICT secrets-changed), none leaving a row;
# - delivery: a sandbox's instance gets /etc/sandbox/env (root, 0600) in
#   the sealed user data its node receives through Node.GetBootData, and
#   `. file` in a real shell gives every value back byte for byte (quotes,
#   newlines, $, backslashes, non-ASCII); the secret:// user data is
#   resolved before the MIME multipart is built;
# - warm pools: the versions each warm instance was given are recorded; a
#   rotation makes them stale: the next claim retires them and creates
#   cold, the pool pass replaces them, and the claim after is warm and
#   fresh; a template without secrets records nothing;
# - a deleted tenant's secrets go with its teardown;
# - without a broker (secret_broker = 0): INVALID_CONFIG at the template
#   write, at instance creation and at Put.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
sandbox_reconcile_seconds = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create sec-img) || bail_out "no image"

T=$BC_TOKEN
CANARY=bc-canary-7f3a9e21
counts() { q "SELECT (SELECT count(*) FROM secret_refs) || ' ' || (SELECT count(*) FROM sealed_blobs)
	|| ' ' || (SELECT count(*) FROM sandbox_templates) || ' ' || (SELECT count(*) FROM events)"; }
b64() { base64 -w0; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(tenant_identity acme user alice --admin); A=$(tenant_token "$alice")
bob=$(tenant_identity acme user bob); B=$(tenant_token "$bob")
agent=$(tenant_identity acme agent helper)
bcctl delegation create --agent "$agent" --user "$alice" >/dev/null || bail_out "delegation"
G=$(tenant_token "$agent")
printf '%s' '[{"effect": "allow", "actions": "*", "resources": "*"}]' >"$STACK_DIR/all.json"
pall=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/all.json")")
bcctl policy attach "$pall" --identity "$agent" >/dev/null || bail_out "attach"
printf '%s' '[{"effect": "allow", "actions": ["compute:sandboxes:*"], "resources": "*"}]' >"$STACK_DIR/sbx.json"
psbx=$(jid "$(bcctl --format json policy create --tenant acme --name sbx --file "$STACK_DIR/sbx.json")")
bcctl policy attach "$psbx" --identity "$bob" >/dev/null || bail_out "attach"

# -- Put: the value from stdin, never echoed; tricky bytes kept
V1=$(printf "it's a \"$CANARY\" \$HOME \\\\n \`x\` \\\\\\\\ é€ \x01\x7f\xff tab\there\nsecond line\n")
printf '%s' "$V1" >"$STACK_DIR/v1"
out=$(as "$A" --format json secret put api-key <"$STACK_DIR/v1") || bail_out "put: $out"
sid=$(jid "$out")
like "$sid" '^sec_' 'a secret id is sec_...'
is "$(json_get "$out" version)" 1 'version 1'
is "$(json_get "$out" scope)" tenant 'tenant scope by default'
is "$(json_get "$out" kind)" user 'kind user'
unlike "$out" "$CANARY" 'the answer carries no value'
is "$(printf '%s' "$out" | jq -r 'has("value")')" false '... not even a value field'
is "$(q "SELECT count(*) FROM secret_refs s JOIN sealed_blobs b ON b.ref = s.sealed_ref
	WHERE s.id = '$sid' AND b.owner_kind = 'secret' AND b.owner_id = '$sid' AND b.tenant_id = 'acme'")" 1 \
	'the value lives in the sealed store, owned by the secret'
is "$(q "SELECT count(*) FROM information_schema.columns WHERE table_name = 'secret_refs'
	AND column_name IN ('value', 'data')")" 0 'secret_refs has no column for it'
ev=$(q "SELECT type || ' ' || data::text FROM events WHERE subject = 'secret/$sid'")
is "$ev" 'secret.put {"name": "api-key", "scope": "tenant", "version": 1}' \
	'secret.put carries the name, scope and version only'
is "$(event_keys secret.put "secret/$sid")" name,scope,version "secret.put: its data's keys"

# --from-file, and a rotation
printf 'v2-%s' "$CANARY" >"$STACK_DIR/v2"
old_ref=$(q "SELECT sealed_ref FROM secret_refs WHERE id = '$sid'")
out=$(as "$A" --format json secret put api-key --from-file "$STACK_DIR/v2") || bail_out "rotate"
is "$(jid "$out"):$(json_get "$out" version)" "$sid:2" 'Put on an existing name rotates it: same id, version 2'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$old_ref'")" 0 'the old value is deleted'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE owner_kind = 'secret' AND owner_id = '$sid'")" 1 \
	'one blob per secret'
out=$(api "$A" secrets/put "{\"name\":\"db.password\",\"value\":\"$(printf 'pw-%s' "$CANARY" | b64)\"}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'Put over JSON/HTTP (the value base64, as proto3 JSON bytes)'
unlike "$out" "$CANARY" '... answers no value'
unlike "$out" "$(printf 'pw-%s' "$CANARY" | b64)" '... not even encoded'
out=$(as "$A" --format json secret list)
is "$(json_items "$out" | jq -r '.name + " " + (.version|tostring)' | tr '\n' ,)" 'api-key 2,db.password 1,' \
	'List: names and versions, by name'
unlike "$out" "$CANARY" 'List carries no value'
like "$(as "$A" secret list)" 'api-key +tenant +2 ' 'the table shows name, scope and version'
out=$(api "$A" secrets/list '{}')
unlike "$out" "$CANARY" 'nor over JSON/HTTP'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '[.items[] | keys[]] | unique | join(",")')" \
	'createdAt,createdBy,id,kind,name,scope,tenantId,updatedAt,version' 'List answers these fields only'

# bcctl secret put --help says where the value comes from
help=$(bcctl secret put --help 2>&1)
like "$help" 'standard input' '--help: the value is read from standard input'
like "$help" 'never taken from the command line' '--help: never from argv'
printf x | as "$A" secret put api-key value-on-argv >/dev/null 2>&1
is $? 1 'a value on the command line is a usage error'
is "$(q "SELECT version FROM secret_refs WHERE id = '$sid'")" 2 '... and writes nothing'

# -- Put refusals: each with its code and details, no row left
before=$(counts)
api_refused "$A" secrets/put "{\"name\":\"Bad_Name\",\"value\":\"eA==\"}" 400 INVALID_INPUT field=name 'a name outside the id rules'
api_refused "$A" secrets/put "{\"name\":\"-x\",\"value\":\"eA==\"}" 400 INVALID_INPUT field=name 'a name starting with -'
api_refused "$A" secrets/put "{\"name\":\"$(printf 'a%.0s' $(seq 64))\",\"value\":\"eA==\"}" 400 INVALID_INPUT field=name 'a 64-byte name'
api_refused "$A" secrets/put '{"name":"e"}' 400 INVALID_INPUT reason=value-empty 'an empty value'
head -c 65537 /dev/zero | tr '\0' a >"$STACK_DIR/big"
api_refused "$A" secrets/put "{\"name\":\"big\",\"value\":\"$(b64 <"$STACK_DIR/big")\"}" 400 INVALID_INPUT reason=value-too-large 'a value above 64 KiB'
head -c 65536 /dev/zero | tr '\0' a >"$STACK_DIR/max"
out=$(api "$A" secrets/put "{\"name\":\"max\",\"value\":\"$(b64 <"$STACK_DIR/max")\"}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'a value of exactly 64 KiB is taken'
as "$A" secret delete max >/dev/null
before=$(counts)
api_refused "$A" secrets/put "{\"name\":\"nul\",\"value\":\"$(printf 'a\0b' | b64)\"}" 400 INVALID_INPUT reason=value-has-nul 'a NUL byte'
api_refused "$A" secrets/put '{"name":"x","value":"eA==","scope":"global"}' 400 INVALID_INPUT field=scope 'an unknown scope'
api_refused "$A" secrets/put '{"name":"x","value":"eA==","bogus":1}' 400 INVALID_INPUT - 'an unknown field'
api_refused "$A" secrets/put '{"name":"x","value":"eA==","scope":"fleet"}' 403 ACCESS_DENIED reason=operator-required 'fleet scope from a tenant admin'
api_refused "$B" secrets/put '{"name":"x","value":"eA=="}' 403 ACCESS_DENIED action=compute:secrets:manage 'no compute:secrets:manage'
api_refused "$B" secrets/list '{}' 403 ACCESS_DENIED action=compute:secrets:manage 'List is decided the same'
api_refused "$B" secrets/delete '{"name":"api-key"}' 403 ACCESS_DENIED action=compute:secrets:manage 'and Delete'
api_refused "$A" secrets/put '{"tenantId":"root","name":"x","value":"eA=="}' 404 NOT_FOUND - "another tenant's"
api_refused "$A" secrets/delete '{"name":"nope"}' 404 NOT_FOUND - 'Delete of an unknown name'
printf x | as "$A" secret put x --from-file /nonexistent >/dev/null 2>&1
isnt $? 0 'bcctl: an unreadable --from-file is refused'
as "$A" secret put x </dev/null >/dev/null 2>&1
isnt $? 0 'bcctl: an empty stdin is refused'
is "$(counts)" "$before" 'the refused Puts left no row (secret_refs, sealed_blobs, templates, events)'

# -- fleet scope: the operator's
printf 'fleet-%s' "$CANARY" | bcctl --format json secret put registry --fleet >"$STACK_DIR/out" || bail_out "fleet put"
fid=$(jid "$(cat "$STACK_DIR/out")")
is "$(json_get "$(cat "$STACK_DIR/out")" scope)" fleet 'the operator writes a fleet secret'
is "$(json_items "$(bcctl --format json secret list --fleet)" | jq -r .name)" registry 'list --fleet shows it'
is "$(json_items "$(bcctl --format json secret list)" | wc -l)" 0 "the root tenant's own list does not"
printf 'root-%s' "$CANARY" | bcctl secret put rootkey >/dev/null || bail_out "root put"

# -- template env: every refusal, none leaving a row
tmpl_http() { # TOKEN EXTRA_JSON: create over JSON/HTTP with env etc.
	api "$1" sandboxtemplates/create "{\"name\":\"t$RANDOM\",\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\",$2}"
}
tref() { # TOKEN JSON STATUS CODE KEY=VALUE MSG
	local tok=$1 body=$2
	shift 2
	api_refused "$tok" sandboxtemplates/create "{\"name\":\"tx\",\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\",$body}" "$@"
}
minted=$(q "SELECT id FROM secret_refs WHERE kind <> 'user' LIMIT 1")
[ -z "$minted" ] && {
	bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" >/dev/null
	minted=$(q "SELECT id FROM secret_refs WHERE kind = 'sealed-user-data' AND tenant_id = 'root' LIMIT 1")
}
like "$minted" '^sec_' "an instance's sealed user data is recorded as a platform-minted secret"
before=$(counts)
tref "$A" '"env":{"K":"plain"}' 400 INVALID_INPUT field=env 'an env value that is no reference'
tref "$A" '"env":{"1K":"secret://acme/api-key"}' 400 INVALID_INPUT field=env 'an env name that is no shell name'
tref "$A" '"env":{"K":"secret://acme/"}' 400 INVALID_INPUT field=env 'a reference without a secret'
tref "$A" '"env":{"K":"secret://root/rootkey"}' 400 INVALID_INPUT reason=secret-other-tenant "another tenant's secret"
tref "$A" '"env":{"K":"secret://acme/nope"}' 400 INVALID_INPUT reason=secret-not-found 'a secret that does not exist'
tref "$A" '"userData":"secret://acme/nope"' 400 INVALID_INPUT field=userData 'user data naming a secret that does not exist'
tref "$T" "\"tenantId\":\"root\",\"env\":{\"K\":\"secret://root/$minted\"}" 400 INVALID_INPUT reason=secret-platform-minted 'a platform-minted secret'
tref "$T" "\"tenantId\":\"root\",\"env\":{\"K\":\"secret://root/$fid\"}" 400 INVALID_INPUT reason=secret-fleet 'a fleet secret by id'
tref "$T" '"tenantId":"root","env":{"K":"secret://root/registry"}' 400 INVALID_INPUT reason=secret-fleet 'a fleet secret by name'
tref "$B" '"env":{"K":"secret://acme/api-key"}' 403 ACCESS_DENIED action=compute:secrets:manage 'compute:sandboxes:manage alone does not name secrets'
tref "$G" '"env":{"K":"secret://acme/api-key"}' 403 ACCESS_DENIED reason=credential-required 'an agent acting under a delegation'
tref "$G" '"userData":"secret://acme/api-key"' 403 ACCESS_DENIED reason=credential-required '... with secret:// user data too'
is "$(counts)" "$before" 'the refused template writes left no row'
out=$(tmpl_http "$B" '"warm":{"min":0,"max":0}')
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'bob still writes a template that names no secret'
rootok=$(tmpl_http "$T" '"tenantId":"root","env":{"K":"secret://root/rootkey"}')
is "$(printf '%s\n' "$rootok" | tail -n 1)" 200 "the operator names the root tenant's own secret (decided on the fleet too)"

# -- a template with env and secret:// user data, by bcctl
printf '#!/bin/sh\necho "ud-%s" > /var/tmp/ud\n' "$CANARY" | as "$A" secret put boot-script >/dev/null
printf "o'neil\n" | as "$A" secret put quote >/dev/null
printf 'secret://acme/boot-script' >"$STACK_DIR/ud"
out=$(as "$A" --format json sandbox-template create --name agent --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --env "API_KEY=secret://acme/$sid" --env "DB_PASSWORD=secret://acme/db.password" \
	--env "Q=secret://acme/quote" --user-data-file "$STACK_DIR/ud") || bail_out "template: $out"
tmpl=$(jid "$out")
is "$(printf '%s' "$out" | jq -c '.env')" \
	"{\"API_KEY\":\"secret://acme/$sid\",\"DB_PASSWORD\":\"secret://acme/db.password\",\"Q\":\"secret://acme/quote\"}" \
	'the template shows its references'
unlike "$out" "$CANARY" '... never a value'
is "$(q "SELECT names_secrets FROM sandbox_templates WHERE id = '$tmpl'")" t 'it is marked as naming secrets'

# -- delivery: the node's boot data
boot() { # INSTANCE REF: GetBootData as agent 1 into $STACK_DIR/mime
	local dir=$STACK_DIR/agent-1
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$2\"}" | jq -r .user_data | base64 -d >"$STACK_DIR/mime"
}
envfile() { # MIME OUT: the /etc/sandbox/env entry of the cloud-config part into OUT; prints owner perms
	python3 - "$1" "$2" <<'EOF'
import base64, email, sys, yaml
m = email.message_from_bytes(open(sys.argv[1], 'rb').read())
cc = yaml.safe_load(m.get_payload()[0].get_payload(decode=True))
f = [w for w in cc.get('write_files', []) if w['path'] == '/etc/sandbox/env']
if len(f) != 1:
    sys.exit(1)
open(sys.argv[2], 'wb').write(base64.b64decode(f[0]['content']))
print(f[0]['owner'], f[0]['permissions'], f[0]['encoding'])
EOF
}
userpart() { python3 -c 'import email,sys; m=email.message_from_bytes(open(sys.argv[1],"rb").read()); sys.stdout.buffer.write(m.get_payload()[1].get_payload(decode=True))' "$1"; }
shval() { sh -c '. "$1"; eval "printf %s \"\$$2\""' sh "$1" "$2"; }

out=$(as "$A" --format json sandbox create --template "$tmpl" --wait 20s) || bail_out "sandbox: $out"
sbx=$(jid "$out")
unlike "$out" "$CANARY" 'the sandbox answer carries no value'
inst=$(json_get "$out" instance_id)
ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$inst'")
boot "$inst" "$ref"
is "$(envfile "$STACK_DIR/mime" "$STACK_DIR/env")" 'root:root 0600 b64' \
	'/etc/sandbox/env is written root:root, mode 0600'
cmp -s <(shval "$STACK_DIR/env" API_KEY) "$STACK_DIR/v2"
ok $? '. /etc/sandbox/env gives API_KEY back byte for byte (the rotated value)'
is "$(shval "$STACK_DIR/env" DB_PASSWORD)" "pw-$CANARY" 'DB_PASSWORD too'
is "$(shval "$STACK_DIR/env" Q; echo .)" "o'neil
." "Q keeps its quote and trailing newline"
is "$(grep -c '^[A-Z_]*=' "$STACK_DIR/env")" 3 'one assignment per secret'
is "$(userpart "$STACK_DIR/mime")" "#!/bin/sh
echo \"ud-$CANARY\" > /var/tmp/ud" 'the secret:// user data is resolved into the second part'
cloud-init schema --config-file <(python3 -c 'import email,sys; sys.stdout.buffer.write(email.message_from_bytes(open(sys.argv[1],"rb").read()).get_payload()[0].get_payload(decode=True))' "$STACK_DIR/mime") >/dev/null 2>&1
ok $? 'the platform part with the env file passes cloud-init schema'
# the first value, with every awkward byte, through a template of its own
printf '%s' "$V1" | as "$A" secret put tricky >/dev/null
t2=$(jid "$(as "$A" --format json sandbox-template create --name tricky --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --env "X=secret://acme/tricky")")
i2=$(json_get "$(as "$A" --format json sandbox create --template "$t2")" instance_id)
boot "$i2" "$(q "SELECT user_data_ref FROM instances WHERE id = '$i2'")"
envfile "$STACK_DIR/mime" "$STACK_DIR/env2" >/dev/null
cmp -s <(shval "$STACK_DIR/env2" X) "$STACK_DIR/v1"
ok $? "quotes, newlines, \$, backslashes, control and non-ASCII bytes round-trip through . /etc/sandbox/env"

# nothing else carries a value
is "$(q "SELECT count(*) FROM events WHERE data::text LIKE '%$CANARY%'")" 0 'no event carries a value'
is "$(q "SELECT count(*) FROM instances i WHERE i::text LIKE '%$CANARY%'")" 0 'nor the instances table'
is "$(q "SELECT count(*) FROM sandbox_templates t WHERE t::text LIKE '%$CANARY%'")" 0 'nor the templates table'
is "$(grep -c "$CANARY" "$STACK_DIR"/ctl-1.log "$STACK_DIR"/bcd-1.log | awk -F: '{s += $2} END {print s}')" 0 \
	'nor a log line of the controller or the agent'
is "$(grep -c -e "$(printf 'pw-%s' "$CANARY" | b64)" -e "$(b64 <"$STACK_DIR/v1")" "$STACK_DIR"/ctl-1.log)" 0 \
	'... not even base64-encoded as JSON/HTTP carried it'
out=$(as "$A" --format json sandbox-template get "$tmpl"; as "$A" --format json sandbox get "$sbx";
	as "$A" --format json sandbox templates; as "$A" --format json instance get "$inst")
unlike "$out" "$CANARY" 'nor Get and List of templates, sandboxes and instances'

# -- an update that changes what the guest runs, racing a change of the secrets
before=$(counts)
psql -d bc -XAtq -c "BEGIN; SELECT 1 FROM sandbox_templates WHERE id = '$tmpl' FOR UPDATE;
	SELECT pg_sleep(3); UPDATE sandbox_templates SET env = env || '{\"EXTRA\": \"secret://acme/quote\"}'
	WHERE id = '$tmpl'; COMMIT;" >/dev/null &
racer=$!
sleep 1
as "$A" sandbox-template update "$tmpl" --network egress --default-ttl 30m >/dev/null 2>"$STACK_DIR/err"
is "$?" 4 'the update decided on the old secrets is refused (CONFLICT)'
like "$(cat "$STACK_DIR/err")" 'secrets-changed' 'reason secrets-changed'
wait "$racer"
is "$(q "SELECT version FROM sandbox_templates WHERE id = '$tmpl'")" 1 'and wrote nothing'
out=$(as "$A" --format json sandbox-template update "$tmpl" --network egress --default-ttl 30m)
is "$(json_get "$out" version)" 2 'retried, it is decided again and written'
out=$(as "$A" --format json sandbox-template update "$tmpl" --no-env)
is "$(printf '%s' "$out" | jq -c '.env // {}')" '{}' '--no-env clears the env'
is "$(q "SELECT names_secrets FROM sandbox_templates WHERE id = '$tmpl'")" t '... the secret:// user data still names one'
as "$G" sandbox-template update "$tmpl" --flavor "$FLAVOR_NAME" >/dev/null 2>"$STACK_DIR/err"
is "$?:$(grep -c credential-required "$STACK_DIR/err")" 5:1 \
	"an agent's update of what the guest runs is decided on the template's secrets (credential-required)"
as "$B" sandbox-template update "$tmpl" --image "$img" >/dev/null 2>"$STACK_DIR/err"
is "$?:$(grep -q 'compute:secrets:manage' "$STACK_DIR/err" && echo named)" 5:named \
	"so is bob's, who may manage templates but not secrets (even naming none himself)"
out=$(as "$B" --format json sandbox-template update "$tmpl" --max-ttl 2h)
is "$(json_get "$out" max_ttl_seconds)" 7200 'a TTL change decides nothing more: bob may make it'

# -- warm pools and rotation
tw=$(jid "$(as "$A" --format json sandbox-template create --name warm --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --env "K=secret://acme/quote" --warm-min 2 --warm-max 2)")
t0=$(jid "$(as "$A" --format json sandbox-template create --name plain --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 1 --warm-max 1)")
paused() { q "SELECT count(*) FROM instances WHERE warm_template_id = '$1' AND desired_state <> 'deleted' AND state = 'paused'"; }
eventually 90 eval '[ "$(paused "$tw")" = 2 ] && [ "$(paused "$t0")" = 1 ]'
ok $? 'both pools fill'
qid=$(q "SELECT id FROM secret_refs WHERE tenant_id = 'acme' AND name = 'quote'")
is "$(q "SELECT DISTINCT warm_secret_versions::text FROM instances WHERE warm_template_id = '$tw' AND desired_state <> 'deleted'")" \
	"{\"$qid\": 1}" 'each warm instance records the version it was given'
is "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '$t0' AND warm_secret_versions IS NOT NULL")" 0 \
	'a template without secrets records nothing'
stale=$(q "SELECT string_agg(id, ' ' ORDER BY id) FROM instances WHERE warm_template_id = '$tw' AND desired_state <> 'deleted'")
printf 'rotated-%s' "$CANARY" | as "$A" secret put quote >/dev/null
out=$(as "$A" --format json sandbox create --template "$tw")
i3=$(json_get "$out" instance_id)
# the pass (every second) may have replaced them already: cold, or fresh
warm=$(json_get "$out" warm)
is "${warm:-false}:$(q "SELECT coalesce(warm_secret_versions->>'$qid', 'cold') FROM instances WHERE id = '$i3'")" \
	"$([ "$warm" = true ] && echo true:2 || echo false:cold)" \
	'after a rotation the next claim is cold or fresh, never a stale instance'
is "$(q "SELECT count(*) FROM instances WHERE id IN (SELECT unnest(string_to_array('$stale', ' ')))
	AND sandbox_id IS NULL AND desired_state = 'deleted'")" 2 'neither stale instance was claimed: both retired'
is "$(q "SELECT count(*) FROM events WHERE type = 'instance.deleting' AND data->>'reason' = 'warm-stale'
	AND subject IN (SELECT 'instance/' || unnest(string_to_array('$stale', ' ')))")" 2 \
	'each published instance.deleting, reason warm-stale'
grep -q "stale warm instances of template $tw retired" "$STACK_DIR/ctl-1.log" &&
	note "the claim retired them" || note "the pool pass retired them first"
boot "$i3" "$(q "SELECT user_data_ref FROM instances WHERE id = '$i3'")"
envfile "$STACK_DIR/mime" "$STACK_DIR/env3" >/dev/null
is "$(shval "$STACK_DIR/env3" K)" "rotated-$CANARY" 'the cold instance has the new value'
eventually 90 eval '[ "$(paused "$tw")" = 2 ]'
ok $? 'the pass refills the pool'
is "$(q "SELECT DISTINCT warm_secret_versions::text FROM instances WHERE warm_template_id = '$tw' AND desired_state <> 'deleted'")" \
	"{\"$qid\": 2}" '... with instances given version 2'
out=$(as "$A" --format json sandbox create --template "$tw")
is "$(json_get "$out" warm)" true 'the next claim is warm and fresh'
# the pass retires stale ones by itself
eventually 90 eval '[ "$(paused "$tw")" = 2 ]'
printf 'again-%s' "$CANARY" | as "$A" secret put quote >/dev/null
v2_left() { [ "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '$tw' AND
	desired_state <> 'deleted' AND warm_secret_versions->>'$qid' = '2'")" = 0 ]; }
eventually 60 v2_left
ok $? 'a pool pass retires stale warm instances without a claim'
out=$(as "$A" --format json sandbox create --template "$t0")
is "$(json_get "$out" warm)" true 'a template without secrets still claims warm'

# the claim's own retirement, with no pass in between: the reconciler
# passes once at start, then only when a claim wakes it
eventually 90 eval '[ "$(paused "$tw")" = 2 ] && v2_left'
ctl_kill 1 TERM
printf 'sandbox_reconcile_seconds = 3600\n' >>"$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart"
eventually 30 grep -q 'runs the sandbox reconciler' "$STACK_DIR/ctl-1.log"
sleep 2
eventually 60 eval '[ "$(paused "$tw")" = 2 ]'
stale=$(q "SELECT string_agg(id, ' ' ORDER BY id) FROM instances WHERE warm_template_id = '$tw' AND desired_state <> 'deleted'")
printf 'fourth-%s' "$CANARY" | as "$A" secret put quote >/dev/null
out=$(as "$A" --format json sandbox create --template "$tw")
is "$(json_get "$out" warm)" '' 'the claim finds only stale warm instances: a cold create (warm: false)'
is "$(q "SELECT count(*) FROM events WHERE type = 'instance.deleting' AND data->>'reason' = 'warm-stale'
	AND subject IN (SELECT 'instance/' || unnest(string_to_array('$stale', ' ')))")" 2 \
	'the claim retired both (instance.deleting, reason warm-stale)'
like "$(grep "stale warm instances of template $tw retired" "$STACK_DIR/ctl-1.log")" "sandbox sbx_.*: 2 stale" \
	'... in the claim, as its log line says'

# -- Delete: secret.deleted, and a template naming it cannot make instances
out=$(as "$A" --format json secret delete db.password)
is "$(json_get "$out" name)" db.password 'Delete answers the secret (no value)'
is "$(event_keys secret.deleted "secret/$(jid "$out")")" name,scope,version \
	"secret.deleted: its data's keys"
is "$(q "SELECT data::text FROM events WHERE type = 'secret.deleted' AND data->>'name' = 'db.password'")" \
	'{"name": "db.password", "scope": "tenant", "version": 1}' 'secret.deleted carries the name only'
is "$(q "SELECT count(*) FROM secret_refs WHERE name = 'db.password'")" 0 'its record is gone'
before=$(counts)
as "$A" secret delete tricky >/dev/null
before=$(q "SELECT count(*) FROM sandboxes")
api_refused "$A" sandboxes/create "{\"templateId\":\"$t2\"}" 409 INVALID_STATE reason=secret-not-found \
	'a template naming a deleted secret makes no instance'
is "$(q "SELECT count(*) FROM sandboxes")" "$before" '... and no sandbox row'

# -- a deleted tenant's secrets go with it
bcctl tenant create gone >/dev/null || bail_out "tenant gone"
X=$(tenant_token "$(tenant_identity gone user admin --admin)")
printf 'gone-%s' "$CANARY" | as "$X" secret put going >/dev/null
gref=$(q "SELECT sealed_ref FROM secret_refs WHERE tenant_id = 'gone'")
like "$gref" '^sealed_' "tenant gone has a secret"
bcctl tenant set-state gone deleting >/dev/null
tenant_deleted() { [ "$(q "SELECT state FROM tenants WHERE id = 'gone'")" = deleted ]; }
eventually 120 tenant_deleted
ok $? 'the tenant is torn down'
is "$(q "SELECT count(*) FROM secret_refs WHERE tenant_id = 'gone'") $(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$gref'")" \
	'0 0' 'its secrets are deleted with their sealed values'
is "$(q "SELECT count(*) FROM events WHERE tenant_id = 'gone' AND type = 'secret.deleted' AND data->>'name' = 'going'")" 1 \
	'... each publishing secret.deleted'

# -- without a broker: INVALID_CONFIG
ctl_kill 1 TERM
# (host certificates need the broker too: guest_trust.t; off here)
printf 'secret_broker = 0\nsandbox_certify_host_key = 0\n' >>"$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart"
before=$(counts)
tref "$A" '"env":{"K":"secret://acme/api-key"}' 500 INVALID_CONFIG reason=no-secret-broker 'a template with env without a broker'
tref "$T" '"tenantId":"root","userData":"secret://root/rootkey"' 500 INVALID_CONFIG reason=no-secret-broker '... or with secret:// user data'
api_refused "$A" sandboxes/create "{\"templateId\":\"$tmpl\"}" 500 INVALID_CONFIG reason=no-secret-broker 'an instance from a template naming secrets'
api_refused "$A" secrets/put '{"name":"y","value":"eA=="}' 500 INVALID_CONFIG reason=no-secret-broker 'Put'
is "$(counts)" "$before" 'none left a row'
out=$(api "$A" sandboxes/create "{\"templateId\":\"$t0\"}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'a template without secrets still makes sandboxes'


done_testing
