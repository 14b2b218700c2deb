# sandbox_templates.t: SandboxTemplates over gRPC (bcctl) and JSON/HTTP:
# create with defaults and every refusal (code and details): unknown pool,
# another tenant's pool, unknown flavor and image, a runtime that passes no
# GPUs through, private/none without the pool's IP range, TTL bounds, env
# naming another tenant's secret, an unknown volume (volume_attach.t has the rest), unknown fields, a taken name; update
# (only the fields given, version raised every time, instance_version only
# by a change to what the guest runs, pool/name/runtime immutable); delete
# hides the template and frees its name; list by name; the decision
# compute:sandboxes:manage on the tenant for writes.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create tmpl-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }

T=$BC_TOKEN
base="\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\""

# -- create, defaults
out=$(bcctl --format json sandbox-template create --name py-small --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img") || bail_out "template create"
t1=$(jid "$out")
like "$t1" '^sbxt_' 'a template id is sbxt_...'
is "$(json_get "$out" network)" egress 'network defaults to egress'
is "$(json_get "$out" default_ttl_seconds)" 3600 'defaultTtlSeconds defaults to 3600'
is "$(json_get "$out" max_ttl_seconds)" 86400 'maxTtlSeconds defaults to 86400'
is "$(json_get "$out" version)" 1 'version 1'
is "$(json_get "$out" runtime)" fake "runtime is the pool's"
is "$(q "SELECT count(*) FROM events WHERE type LIKE 'sandbox%'")" 0 'no event is published'

# -- refusals
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"maxTtlSeconds\":86401}" 400 \
	INVALID_INPUT field=maxTtlSeconds 'maxTtlSeconds above 86400'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"defaultTtlSeconds\":7200,\"maxTtlSeconds\":3600}" \
	400 INVALID_INPUT field=defaultTtlSeconds 'defaultTtlSeconds above maxTtlSeconds'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"network\":\"open\"}" 400 \
	INVALID_INPUT field=network 'an unknown network'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"bogus\":1}" 400 \
	INVALID_INPUT - 'an unknown field'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x y\",$base}" 400 INVALID_INPUT field=name \
	'a name with a space'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",\"poolId\":\"$POOL_ID\",\"flavor\":\"nope\",\"imageId\":\"$img\"}" \
	400 INVALID_INPUT field=flavor 'an unknown flavor'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"nope\"}" \
	400 INVALID_INPUT field=imageId 'an unknown image'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",\"poolId\":\"pool_00000000000000000000000000\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\"}" \
	404 NOT_FOUND - 'an unknown pool'
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"env\":{\"K\":\"secret://x/y\"}}" 400 \
	INVALID_INPUT reason=secret-other-tenant "env naming another tenant's secret (secrets.t has the rest)"
api_refused "$T" sandboxtemplates/create "{\"name\":\"x\",$base,\"volumes\":[{\"name\":\"v\",\"mountPath\":\"/w\"}]}" \
	404 NOT_FOUND - 'a volume the tenant does not have (volume_attach.t has the rest)'
api_refused "$T" sandboxtemplates/create "{\"name\":\"py-small\",$base}" 409 CONFLICT reason=name-taken \
	'a name in use'
# a pool without an IP range: private and none are INVALID_STATE
bare=$(jid "$(bcctl --format json pool create --name bare --runtime fake --bridge bcbr9)")
for net in private none; do
	api_refused "$T" sandboxtemplates/create "{\"name\":\"n-$net\",\"poolId\":\"$bare\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\",\"network\":\"$net\"}" \
		409 INVALID_STATE reason=pool-without-ip-range "$net on a pool without an IP range"
done
# a runtime that passes no GPUs through
ch=$(jid "$(bcctl --format json pool create --name chp --runtime cloud-hypervisor --bridge bcbr8)")
gpu=$(jid "$(bcctl --format json flavor create --name g1 --vcpus 1 --memory-mib 512 --disk-gib 1 --gpus 1)")
api_refused "$T" sandboxtemplates/create "{\"name\":\"g\",\"poolId\":\"$ch\",\"flavor\":\"g1\",\"imageId\":\"$img\"}" \
	400 INVALID_INPUT reason=gpus-unsupported 'GPUs on cloud-hypervisor'
# another tenant's pool is NOT_FOUND to it
bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
only=$(jid "$(bcctl --format json pool create --name other --runtime fake --bridge bcbr7 --tenant root)")
api_refused "$A" sandboxtemplates/create "{\"name\":\"x\",\"poolId\":\"$only\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\"}" \
	403 ACCESS_DENIED action=compute:sandboxes:manage 'a user without compute:sandboxes:manage'
printf '{"effect":"allow","actions":["compute:sandboxes:manage","compute:sandboxes:read"],"resources":["*"]}' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name m --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null || bail_out "attach"
api_refused "$A" sandboxtemplates/create "{\"name\":\"x\",\"poolId\":\"$only\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\"}" \
	404 NOT_FOUND - "a pool not offered to the tenant"
out=$(api "$A" sandboxtemplates/create "{\"name\":\"mine\",$base}")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'with the grant, alice creates a template over JSON/HTTP'
ta=$(printf '%s\n' "$out" | sed '$d' | jq -r .id)
api_refused "$A" sandboxtemplates/get "{\"templateId\":\"$t1\"}" 404 NOT_FOUND - "another tenant's template"
is "$(q "SELECT count(*) FROM sandbox_templates")" 2 'refusals wrote no template'

# -- update
iv() { q "SELECT instance_version FROM sandbox_templates WHERE id = '$t1'"; }
out=$(bcctl --format json sandbox-template update "$t1" --max-ttl 4h --default-ttl 30m) || fail 'update'
is "$(json_get "$out" version)" 2 'an update raises version'
is "$(json_get "$out" max_ttl_seconds)" 14400 'maxTtlSeconds changed'
is "$(json_get "$out" default_ttl_seconds)" 1800 'defaultTtlSeconds changed'
is "$(json_get "$out" flavor)" "$FLAVOR_NAME" 'the flavor stays (only the fields given)'
is "$(iv)" 1 'a TTL change leaves instance_version'
printf '#cloud-config\nruncmd: [true]\n' >"$STACK_DIR/ud"
out=$(bcctl --format json sandbox-template update "$t1" --user-data-file "$STACK_DIR/ud") || fail 'update ud'
is "$(json_get "$out" version)" 3 'version 3'
is "$(iv)" 2 'a user data change raises instance_version'
out=$(bcctl --format json sandbox-template update "$t1" --network private) || fail 'update net'
is "$(iv)" 3 'a network change raises instance_version'
out=$(bcctl --format json sandbox-template update "$t1" --warm-min 1 --warm-max 2) || fail 'update warm'
is "$(iv)" 3 'a warm pool change leaves instance_version'
is "$(json_get "$out" version)" 5 'version 5'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"poolId\":\"$bare\"}" 400 \
	INVALID_INPUT field=poolId 'the pool cannot change'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"name\":\"other\"}" 400 \
	INVALID_INPUT field=name 'the name cannot change'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"runtime\":\"libvirt\"}" 400 \
	INVALID_INPUT field=runtime 'the runtime cannot change'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"flavor\":\"nope\"}" 400 \
	INVALID_INPUT field=flavor 'a new flavor is checked again'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"defaultTtlSeconds\":20000}" 400 \
	INVALID_INPUT field=defaultTtlSeconds 'defaultTtlSeconds above the (current) max'
is "$(q "SELECT version FROM sandbox_templates WHERE id = '$t1'")" 5 'refused updates changed nothing'

# -- list by name, get, delete
bcctl sandbox-template create --name aaa --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" >/dev/null
out=$(bcctl --format json sandbox templates)
is "$(json_items "$out" | jq -r .name | tr '\n' ' ')" 'aaa py-small ' 'list: the live templates by name'
bcctl sandbox templates | grep -q 'py-small' ; ok $? 'the table shows the template'
out=$(bcctl --format json sandbox-template delete "$t1") ; ok $? 'delete'
bcctl sandbox-template get "$t1" >/dev/null 2>&1
is $? 3 'a deleted template is NOT_FOUND (exit 3)'
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$t1\",\"defaultTtlSeconds\":60}" 404 \
	NOT_FOUND - 'a deleted template cannot be updated'
out=$(bcctl --format json sandbox-template create --name py-small --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img") ; ok $? 'delete frees the name'
isnt "$(jid "$out")" "$t1" 'a new template under the old name'
is "$(json_items "$(bcctl --format json sandbox templates)" | jq -r .name | tr '\n' ' ')" \
	'aaa py-small ' 'list hides the deleted one'
done_testing
