# volumes.t: SandboxVolumes over gRPC (bcctl) and JSON/HTTP on the fake
# runtime, whose reported volume store is its capacity_disk_gib (100 GiB
# here, a reserve of 5 %: 95 GiB of headroom). Create (id vol_..., serial
# bcv- + the id's last 16 characters, a booking owned by the volume,
# sandbox.volume.created); every refusal with its code and reason, leaving
# no row (volumes, staged authorization rows, bookings, events counted
# before and after); the idempotency key (the same volume back, CONFLICT
# for another request, the id derived from it); list scopes mine/all with
# limit and cursor; a policy bounding sizeGiB; resize (grow only, the
# current size unchanged, resize-in-flight and its 60 s takeover, the
# host's headroom, the quota, the pending value cleared on refusal);
# delete refused while a live template names the volume or a live instance
# attaches it, deleting then deleted once the host applied a later
# generation (booking released); tenant teardown deletes the tenant's volumes
# before the tenant is deleted; the booking is metered; a host that never
# reported its store takes no volume; 50 concurrent creates on one host never
# book past its headroom (volumes_race.t: through two replicas).
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
metering_interval_seconds = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,100 || bail_out "stack_up failed"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
T=$BC_TOKEN
node=$(agent_node_id 1)
GIB=1073741824

stored() { [ "$(q "SELECT count(*) FROM host_volume_storage WHERE node_id = '$node'")" = 1 ]; }
eventually 20 stored
ok $? 'the host reported its volume store (host_volume_storage)'
is "$(q "SELECT available_bytes / $GIB || ' ' || reserved_bytes / $GIB FROM host_volume_storage")" \
	'100 5' 'the store: 100 GiB available, 5 GiB reserved'

# rows a refusal must not leave
rows() {
	q "SELECT (SELECT count(*) FROM volumes) || ' ' || (SELECT count(*) FROM authz_resources WHERE
		type = 'compute-sandbox-volume') || ' ' || (SELECT count(*) FROM allocations WHERE
		owner_kind = 'volume') || ' ' || (SELECT count(*) FROM events WHERE type LIKE
		'sandbox.volume.%')"
}
body() { printf '%s\n' "$1" | sed '$d'; }
status() { printf '%s\n' "$1" | tail -n 1; }

# -- refusals on input and capacity, none leaving a row
before=$(rows)
vc() { echo "{\"poolId\":\"$POOL_ID\",\"name\":\"$1\",\"sizeGib\":$2,\"idempotencyKey\":\"k-$1-$2\"}"; }
api_refused "$T" sandboxvolumes/create "$(vc a 0)" 400 INVALID_INPUT field=sizeGib 'size 0'
api_refused "$T" sandboxvolumes/create "$(vc a 16385)" 400 INVALID_INPUT field=sizeGib 'size above 16384'
api_refused "$T" sandboxvolumes/create "$(vc 'a b' 1)" 400 INVALID_INPUT field=name 'a name with a space'
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"p1\",\"name\":\"a\",\"sizeGib\":1}" 400 \
	INVALID_INPUT field=poolId 'a pool id that is not pool_...'
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"pool_00000000000000000000000000\",\"name\":\"a\",\"sizeGib\":1}" \
	404 NOT_FOUND - 'an unknown pool'
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"a\",\"sizeGib\":1,\"bogus\":1}" \
	400 INVALID_INPUT - 'an unknown field'
out=$(api "$T" sandboxvolumes/create "$(vc big 96)")
is "$(status "$out")" 503 'more than the headroom: HTTP 503'
is "$(body "$out" | jq -r '.error.code + " " + .error.details.reason + " " + .error.details.freeGiB + " " + .error.details.neededGiB')" \
	'CAPACITY_UNAVAILABLE volume-storage 95 96' '... CAPACITY_UNAVAILABLE volume-storage, freeGiB 95, neededGiB 96'
bare=$(jid "$(bcctl --format json pool create --name bare --runtime fake --bridge bcbr9)")
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"$bare\",\"name\":\"a\",\"sizeGib\":1}" 503 \
	CAPACITY_UNAVAILABLE reason=volume-storage 'a pool without hosts'
bcctl tenant quota root --disk-gib 10 >/dev/null || bail_out "quota"
api_refused "$T" sandboxvolumes/create "$(vc q 11)" 429 QUOTA_EXCEEDED resource=diskGiB \
	'past the diskGiB quota'
is "$(rows)" "$before" 'the refusals left no volume, staged row, booking or event'

# -- create
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem --size 10 --key k1) ||
	fail 'create'
v1=$(jid "$out")
like "$v1" '^vol_[0-9a-z]{26}$' 'a volume id is vol_...'
is "$(json_get "$out" serial)" "bcv-${v1: -16}" "serial: bcv- and the id's last 16 characters"
is "$(json_get "$out" state)" ready 'state ready'
is "$(json_get "$out" node_id)" "$node" 'on the pool host'
is "$(json_get "$out" size_gib)" 10 'sizeGiB 10'
is "$(q "SELECT disk_gib || ' ' || tenant_id FROM allocations WHERE owner_kind = 'volume' AND owner_id = '$v1' AND released_at IS NULL")" \
	'10 root' 'an open booking of 10 GiB owned by the volume'
is "$(q "SELECT draft::int || ' ' || parent || ' ' || (attrs->>'sizeGiB') FROM authz_resources WHERE type = 'compute-sandbox-volume' AND id = '$v1'")" \
	"0 compute-pool/$POOL_ID 10" 'its authorization row: live, under its pool, sizeGiB 10'
is "$(event_keys sandbox.volume.created "volume/$v1")" name,nodeId,poolId,sizeGiB \
	'sandbox.volume.created keys'
api_refused "$T" sandboxvolumes/create "$(vc q 1)" 429 QUOTA_EXCEEDED resource=diskGiB \
	'the booking counts toward the quota (10 of 10)'
committed() { [ "$(q "SELECT committed_bytes / $GIB FROM host_volume_storage")" = "$1" ]; }
eventually 20 committed 10
ok $? "the host's spec lists the volume: its store reports 10 GiB committed"
bcctl tenant quota root --disk-gib 1000 >/dev/null || bail_out "quota"

# -- idempotency
n=$(q "SELECT count(*) FROM events WHERE type = 'sandbox.volume.created'")
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem --size 10 --key k1)
is "$(jid "$out")" "$v1" 'the same key and request: the same volume'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.volume.created'")" "$n" '... without a new event'
before=$(rows)
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"mem\",\"sizeGib\":11,\"idempotencyKey\":\"k1\"}" \
	409 CONFLICT - 'the key with another request'
api_refused "$T" sandboxvolumes/create "$(vc mem 1)" 409 CONFLICT reason=name-taken \
	'a name in use among live volumes'
# the id derives from tenant, caller and key: with the key's record gone,
# the same key names the same id again
q "DELETE FROM idempotency_keys WHERE scope = 'sandboxvolumes.create' AND key = 'k1'" >/dev/null
api_refused "$T" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"other\",\"sizeGib\":1,\"idempotencyKey\":\"k1\"}" \
	409 CONFLICT reason=idempotency-key-reused 'a purged key derives the id of its volume again'
is "$(rows)" "$before" 'no row left by the conflicts'
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem2 --size 1)
v2=$(jid "$out")
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem3 --size 1)
isnt "$(jid "$out")" "$v2" 'without --key, bcctl sends a fresh key each time'
v3=$(jid "$out")
bcctl sandbox-volume get bogus >/dev/null 2>&1
is $? 1 'get of a non-vol_ id is a usage error before any call'
bcctl sandbox-volume delete inst_00000000000000000000000000 >/dev/null 2>&1
is $? 1 'delete of a non-vol_ id is a usage error'

# -- another identity: decisions on the volume, a policy bounding sizeGiB
alice=$(jid "$(bcctl --format json identity create --tenant root --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
before=$(rows)
api_refused "$A" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"al\",\"sizeGib\":5,\"idempotencyKey\":\"a1\"}" \
	403 ACCESS_DENIED action=compute:sandboxes:manage 'alice without a grant'
is "$(rows)" "$before" 'the refused create removed its staged row'
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:manage","compute:sandboxes:read"],"resources":["compute-sandbox-volume/*"],"conditions":{"NumericLessThanEquals":{"resource.sizeGiB":20}}}' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant root --name small --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null || bail_out "attach"
api_refused "$A" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"al\",\"sizeGib\":21,\"idempotencyKey\":\"a1\"}" \
	403 ACCESS_DENIED action=compute:sandboxes:manage 'a policy bounds sizeGiB: 21 refused'
is "$(rows)" "$before" '... no row left'
out=$(api "$A" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"al\",\"sizeGib\":5,\"idempotencyKey\":\"a1\"}")
is "$(status "$out")" 200 '... 5 GiB allowed'
va=$(body "$out" | jq -r .id)
isnt "$va" "$v1" 'the id derives from the caller too'
out=$(api "$A" sandboxvolumes/create "{\"poolId\":\"$POOL_ID\",\"name\":\"al\",\"sizeGib\":5,\"idempotencyKey\":\"a1\"}")
is "$(body "$out" | jq -r .id)" "$va" "alice's retry returns her volume"

# -- list: mine and all, limit and cursor
ids() { json_items "$1" | jq -r .id | tr '\n' ' '; }
out=$(api "$A" sandboxvolumes/list '{}')
is "$(body "$out" | jq -r '[.items[].id] | join(" ")')" "$va" 'alice: mine is her own volume'
out=$(api "$A" sandboxvolumes/list '{"scope":"all"}')
is "$(body "$out" | jq -r '.items | length')" 4 "alice: all is the tenant's (each readable to her)"
out=$(bcctl --format json sandbox-volume list)
is "$(ids "$out")" "$v3 $v2 $v1 " 'admin: mine, newest first'
out=$(api "$T" sandboxvolumes/list '{"limit":2}')
is "$(body "$out" | jq -r '.items | length')" 2 'limit 2'
cur=$(body "$out" | jq -r .cursor)
is "$cur" "$v2" 'the cursor is the last id of the page'
out=$(api "$T" sandboxvolumes/list "{\"limit\":2,\"cursor\":\"$cur\"}")
is "$(body "$out" | jq -r '[.items[].id] | join(" ")')" "$v1" 'the next page'
api_refused "$T" sandboxvolumes/list '{"scope":"some"}' 400 INVALID_INPUT field=scope 'a bad scope'
bcctl sandbox-volume list --format table | grep -q "$v1"
ok $? 'the table shows the volume'
out=$(bcctl --format json sandbox-volume get "$v1")
is "$(jid "$out")" "$v1" 'get'
api_refused "$A" sandboxvolumes/resize "{\"volumeId\":\"$va\",\"sizeGib\":21}" 403 ACCESS_DENIED \
	action=compute:sandboxes:manage 'alice may not grow hers past 20 (decided on the pending size)'
is "$(q "SELECT coalesce(pending::text, 'none') FROM authz_resources WHERE id = '$va'")" none \
	'... the refusal cleared the pending size'

# -- resize
api_refused "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":9}" 400 INVALID_INPUT \
	reason=shrink 'a smaller size'
n=$(q "SELECT count(*) FROM events WHERE type = 'sandbox.volume.resized'")
out=$(bcctl --format json sandbox-volume resize "$v1" --size 10)
is "$(json_get "$out" size_gib)" 10 'the current size returns the volume unchanged'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.volume.resized'")" "$n" '... no event'
out=$(bcctl --format json sandbox-volume resize "$v1" --size 20) || fail 'resize'
is "$(json_get "$out" size_gib)" 20 'grown to 20 GiB'
is "$(q "SELECT string_agg(disk_gib || ':' || (released_at IS NULL), ' ' ORDER BY id) FROM allocations WHERE owner_id = '$v1'")" \
	'10:false 20:true' 'the booking is reopened at the new size'
is "$(event_keys sandbox.volume.resized "volume/$v1")" name,nodeId,poolId,previousSizeGiB,sizeGiB \
	'sandbox.volume.resized keys'
is "$(q "SELECT attrs->>'sizeGiB' || ' ' || coalesce(pending::text, 'none') FROM authz_resources WHERE id = '$v1'")" \
	'20 none' 'its authorization row says 20, nothing pending'
# booked: 20 + 1 + 1 + 5 = 27 of 95
out=$(api "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":89}")
is "$(body "$out" | jq -r '.error.code + " " + .error.details.reason + " " + .error.details.freeGiB + " " + .error.details.neededGiB')" \
	'CAPACITY_UNAVAILABLE volume-storage 68 69' 'growth past the host headroom: freeGiB 68, neededGiB 69'
is "$(q "SELECT size_gib || ' ' || (SELECT coalesce(pending::text, 'none') FROM authz_resources WHERE id = '$v1') FROM volumes WHERE id = '$v1'")" \
	'20 none' '... nothing changed and the pending size is cleared'
bcctl tenant quota root --disk-gib 30 >/dev/null
api_refused "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":24}" 429 QUOTA_EXCEEDED \
	resource=diskGiB 'growth past the quota'
is "$(q "SELECT string_agg(disk_gib::text, ' ') FROM allocations WHERE owner_id = '$v1' AND released_at IS NULL")" \
	20 '... the booking is as it was'
bcctl tenant quota root --disk-gib 1000 >/dev/null
# one resize at a time: a hold of another resize in flight
q "UPDATE authz_resources SET pending = '{\"sizeGiB\": \"30\"}', pending_hold = 'hold_other', pending_at = now() WHERE id = '$v1'" >/dev/null
out=$(api "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":25}")
is "$(body "$out" | jq -r '.error.code + " " + .error.details.reason + " " + .error.details.retryAfterSeconds')" \
	'CONFLICT resize-in-flight 60' 'another resize in flight: CONFLICT resize-in-flight, retryAfterSeconds 60'
is "$(q "SELECT pending_hold FROM authz_resources WHERE id = '$v1'")" hold_other '... its hold is left alone'
q "UPDATE authz_resources SET pending_at = now() - interval '61 seconds' WHERE id = '$v1'" >/dev/null
out=$(bcctl --format json sandbox-volume resize "$v1" --size 25)
is "$(json_get "$out" size_gib)" 25 'a hold older than 60 s is taken over'
api_refused "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":16385}" 400 INVALID_INPUT \
	field=sizeGib 'a size above 16384'

# -- metering: the booking, each size for its own time
metered() { [ "$(q "SELECT count(*) FROM usage WHERE resource_id = '$v1' AND meter = 'vps.volume.gib.hours' AND quantity > 0")" -ge 1 ]; }
eventually 20 metered
ok $? 'the metering pass writes vps.volume.gib.hours for the volume'
is "$(q "SELECT DISTINCT identity_id FROM usage WHERE resource_id = '$v1'")" \
	"$(q "SELECT created_by FROM volumes WHERE id = '$v1'")" '... charged to its creator'

# -- delete
img=$(stack_image_create vimg) || bail_out "no image"
tmpl=$(jid "$(bcctl --format json sandbox-template create --name t --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
q "INSERT INTO template_volumes VALUES ('$tmpl', '$v2', 0, '/w', false)" >/dev/null
api_refused "$T" sandboxvolumes/delete "{\"volumeId\":\"$v2\"}" 409 CONFLICT reason=volume-named \
	'a live template names it'
bcctl sandbox-template delete "$tmpl" >/dev/null
inst=$(jid "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
q "INSERT INTO instance_volumes VALUES ('$inst', '$v2', false)" >/dev/null
api_refused "$T" sandboxvolumes/delete "{\"volumeId\":\"$v2\"}" 409 CONFLICT reason=volume-attached \
	'a live instance attaches it (the deleted template no longer counts)'
is "$(q "SELECT state FROM volumes WHERE id = '$v2'")" ready '... still ready'
bcctl instance delete "$inst" >/dev/null
gone() { [ "$(q "SELECT state FROM instances WHERE id = '$inst'")" = deleted ]; }
eventually 20 gone
ok $? 'the instance is deleted'
eventually 20 committed 32
ok $? "before the delete, the host's store holds the ready volumes (25 + 1 + 1 + 5 GiB)"
gen=$(q "SELECT spec_generation FROM nodes WHERE id = '$node'")
out=$(bcctl --format json sandbox-volume delete "$v2") || fail 'delete'
is "$(json_get "$out" state)" deleting 'delete: deleting'
is "$(event_keys sandbox.volume.deleting "volume/$v2")" name,nodeId,poolId,sizeGiB 'sandbox.volume.deleting keys'
eventually 20 committed 31
ok $? "its host's spec no longer lists it: the store holds 31 GiB"
dead() { [ "$(q "SELECT state FROM volumes WHERE id = '$v2'")" = deleted ]; }
eventually 20 dead
ok $? 'deleted once the host reported that generation'
is "$(q "SELECT deleting_generation > $gen AND (SELECT applied_generation FROM nodes WHERE id = '$node') >= deleting_generation FROM volumes WHERE id = '$v2'")" \
	t '... a generation after the delete, which the host applied'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$v2' AND released_at IS NULL")" 0 \
	'... its booking released'
is "$(event_keys sandbox.volume.deleted "volume/$v2")" name,nodeId,poolId,sizeGiB 'sandbox.volume.deleted keys'
out=$(bcctl --format json sandbox-volume delete "$v2")
is "$(json_get "$out" state)" deleted 'delete again: idempotent'
api_refused "$T" sandboxvolumes/resize "{\"volumeId\":\"$v2\",\"sizeGib\":2}" 409 INVALID_STATE \
	state=deleted 'a deleted volume cannot grow'
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem2 --size 1) ; ok $? \
	'the name is free again once deleted'
is "$(ids "$(bcctl --format json sandbox-volume list --deleted --limit 200)" | grep -c "$v2")" 1 \
	'list --deleted shows it'

# -- tenant teardown deletes the tenant's volumes after its instances
bcctl tenant create acme >/dev/null || bail_out "tenant"
out=$(bcctl --format json sandbox-volume create --tenant acme --pool "$POOL_ID" --name gone --size 1) ||
	fail 'a volume of tenant acme'
vt=$(jid "$out")
bcctl tenant set-state acme deleting >/dev/null || bail_out "set-state"
torn() { [ "$(q "SELECT state FROM tenants WHERE id = 'acme'")" = deleted ]; }
eventually 30 torn
ok $? 'the tenant is torn down'
is "$(q "SELECT state FROM volumes WHERE id = '$vt'")" deleted '... its volume deleted'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$vt' AND released_at IS NULL")" 0 \
	'... its booking released'
is "$(q "SELECT (SELECT min(id) FROM events WHERE type = 'sandbox.volume.deleted' AND subject = 'volume/$vt') < (SELECT max(id) FROM events WHERE type = 'tenant.state-changed' AND subject = 'tenant/acme')")" \
	t '... before the tenant became deleted'

# -- a host that never reported its store takes no volume
agent_kill 1
q "DELETE FROM host_volume_storage" >/dev/null
before=$(rows)
api_refused "$T" sandboxvolumes/create "$(vc late 1)" 503 CAPACITY_UNAVAILABLE reason=volume-storage \
	'a host without a reported store takes no volume'
api_refused "$T" sandboxvolumes/resize "{\"volumeId\":\"$v1\",\"sizeGib\":26}" 503 CAPACITY_UNAVAILABLE \
	reason=volume-storage-unknown "resize on a host that has not reported: volume-storage-unknown"
is "$(rows)" "$before" '... no row left'
agent_start 1 || bail_out "agent restart"
eventually 20 stored
ok $? 'the host reports its store again'

# -- concurrent creates never book past a host's headroom
free=$(q "SELECT floor((available_bytes - reserved_bytes - outstanding_bytes - greatest(0, (SELECT sum(disk_gib) FROM allocations WHERE node_id = '$node' AND owner_kind = 'volume' AND released_at IS NULL) * $GIB - committed_bytes)) / $GIB)::bigint FROM host_volume_storage")
want=$((free / 5))
pids=()
for i in $(seq 1 50); do
	bcctl --format json sandbox-volume create --pool "$POOL_ID" --name "c$i" --size 5 \
		>"$STACK_DIR/c$i.out" 2>&1 &
	pids+=($!)
done
wait "${pids[@]}" # never a bare wait: the stack's daemons are children too
made=$(q "SELECT count(*) FROM volumes WHERE name LIKE 'c%' AND state = 'ready'")
is "$made" "$want" "50 concurrent 5 GiB creates: exactly the $want that fit in $free GiB"
is "$(grep -l CAPACITY_UNAVAILABLE "$STACK_DIR"/c*.out | wc -l)" $((50 - want)) \
	'... the others CAPACITY_UNAVAILABLE'
is "$(q "SELECT (available_bytes - reserved_bytes) / $GIB >= (SELECT sum(disk_gib) FROM allocations WHERE node_id = '$node' AND owner_kind = 'volume' AND released_at IS NULL) FROM host_volume_storage")" \
	t 'what is booked on the host stays within its store'

done_testing
