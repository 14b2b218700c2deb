# volume_attach.t: templates that name sandbox volumes and the sandboxes
# that attach them (controller/volume_attach.c), on the fake runtime with
# two hosts in the pool. Every template refusal with its code and reason,
# leaving no template or template_volumes row; the decision on each volume
# (manage for read-write, read for read-only) with the caller's own
# credential; names resolved to ids; no warm pool; --volumes "" clears.
# Sandboxes: placed only on the volumes' host; one read-write attachment
# alone or many read-only ones (CONFLICT volume-in-use, leaving no sandbox,
# instance or attachment); volumes on different hosts INVALID_STATE; a host
# without bc.dev/cap.instance.volumes leaves the sandbox waiting, placed
# once the host carries it again; the NodeSpec carries the attachments.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 2 --agent-capacity 16,32768,100 || bail_out "stack_up failed"
img=$(stack_image_create vol-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
T=$BC_TOKEN
adm() { # the admin API over JSON/HTTP: adm TOKEN PATH BODY
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
		-w '\n%{http_code}' --data-binary "$3" "https://127.0.0.1:$HTTP_PORT/api/admin/$2"
}
n1=$(agent_node_id 1)
n2=$(agent_node_id 2)

stored() { [ "$(q "SELECT count(*) FROM host_volume_storage")" = 2 ]; }
eventually 30 stored
ok $? 'both hosts reported their volume store'

m1=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name m1 --size 2)") ||
	bail_out "volume m1"
m2=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name m2 --size 1)") ||
	bail_out "volume m2"
host=$(q "SELECT node_id FROM volumes WHERE id = '$m1'")
other=$([ "$host" = "$n1" ] && echo "$n2" || echo "$n1")
# m2 on m1's host (placement of the booking is the volumes module's; the
# test needs one host for both, and the other host for "far")
q "UPDATE volumes SET node_id = '$host' WHERE id = '$m2'; UPDATE allocations SET node_id = '$host' WHERE owner_id = '$m2'" >/dev/null
far=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name far --size 1)")
q "UPDATE volumes SET node_id = '$other' WHERE id = '$far'; UPDATE allocations SET node_id = '$other' WHERE owner_id = '$far'" >/dev/null

# -- template refusals, none leaving a row
trows() { q "SELECT (SELECT count(*) FROM sandbox_templates) || ' ' || (SELECT count(*) FROM template_volumes)"; }
tc() { # tc NAME VOLUMES-JSON [WARM-JSON]
	echo "{\"name\":\"$1\",\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\",\"volumes\":$2${3:+,\"warm\":$3}}"
}
before=$(trows)
api_refused "$T" sandboxtemplates/create "$(tc a "[{\"volumeId\":\"$m1\",\"name\":\"m1\",\"mountPath\":\"/w\"}]")" \
	400 INVALID_INPUT reason=volume-id-or-name 'a volume named by id and name'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"mountPath":"/w"}]')" \
	400 INVALID_INPUT reason=volume-id-or-name 'a volume named by neither'
for p in w /w/../x /w/./x /w/ '/a b' //w; do
	api_refused "$T" sandboxtemplates/create "$(tc a "[{\"name\":\"m1\",\"mountPath\":\"$p\"}]")" \
		400 INVALID_INPUT reason=mount-path-invalid "mount path '$p'"
done
for p in / /etc /usr /var /tmp /root /proc/x /sys/fs/y /dev/shm /boot/efi; do
	api_refused "$T" sandboxtemplates/create "$(tc a "[{\"name\":\"m1\",\"mountPath\":\"$p\"}]")" \
		400 INVALID_INPUT reason=mount-path-system \
		"system mount path $p"
done
api_refused "$T" sandboxtemplates/create "$(tc a '[{"name":"m1","mountPath":"/w"},{"name":"m2","mountPath":"/w/x"}]')" \
	400 INVALID_INPUT reason=mount-path-overlap 'nested mount paths'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"name":"m1","mountPath":"/w"},{"name":"m2","mountPath":"/w","readOnly":true}]')" \
	400 INVALID_INPUT reason=mount-path-overlap 'a shared mount path'
nine=$(for i in 1 2 3 4 5 6 7 8 9; do printf '{"name":"m1","mountPath":"/v%s"},' "$i"; done)
api_refused "$T" sandboxtemplates/create "$(tc a "[${nine%,}]")" \
	400 INVALID_INPUT reason=too-many-volumes 'nine volumes'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"name":"m1","mountPath":"/w"},{"name":"m1","mountPath":"/x"}]')" \
	400 INVALID_INPUT reason=volume-repeated 'one volume twice'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"name":"nope","mountPath":"/w"}]')" \
	404 NOT_FOUND - 'an unknown volume name'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"volumeId":"vol_00000000000000000000000000","mountPath":"/w"}]')" \
	404 NOT_FOUND - 'an unknown volume id'
api_refused "$T" sandboxtemplates/create "$(tc a '[{"name":"m1","mountPath":"/w"}]' '{"min":0,"max":1}')" \
	400 INVALID_INPUT reason=volumes-warm 'volumes with a warm pool'
gone=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name gone --size 1)")
# held in deleting (a deletion the host has not applied yet; a real delete
# would finish at once here)
q "UPDATE volumes SET state = 'deleting', deleting_at = now() WHERE id = '$gone'" >/dev/null
api_refused "$T" sandboxtemplates/create "$(tc a "[{\"volumeId\":\"$gone\",\"mountPath\":\"/w\"}]")" \
	409 INVALID_STATE reason=volume-not-ready 'a volume being deleted'
is "$(trows)" "$before" 'the refusals left no template or template_volumes row'
bcctl sandbox-template create --name a --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--volumes 'm1' >/dev/null 2>&1
is $? 1 '--volumes without a path is a usage error'
bcctl sandbox-template create --name a --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--volumes 'm1:/w:rx' >/dev/null 2>&1
is $? 1 '--volumes with a mode other than ro is a usage error'

# -- decisions on the volumes with the caller's own credential
alice=$(jid "$(bcctl --format json identity create --tenant root --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
printf '%s' '{"statements":[{"effect":"allow","actions":["compute:sandboxes:*","compute:pools:read"],"resources":["*"]},{"effect":"deny","actions":["compute:sandboxes:manage"],"resources":["compute-sandbox-volume/*"]}]}' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant root --name ro --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null || bail_out "attach"
api_refused "$A" sandboxtemplates/create "$(tc al '[{"name":"m1","mountPath":"/w"}]')" \
	403 ACCESS_DENIED action=compute:sandboxes:manage 'read-write: manage on the volume, refused'
is "$(trows)" "$before" '... no row left'
out=$(api "$A" sandboxtemplates/create "$(tc al '[{"name":"m1","mountPath":"/w","readOnly":true}]')")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'read-only: read on the volume suffices'

# -- a template with volumes
out=$(bcctl --format json sandbox-template create --name rw --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --volumes "m1:/workspace,$m2:/data:ro") || fail 'create with --volumes'
trw=$(jid "$out")
is "$(printf '%s' "$out" | jq -r '[.volumes[] | (.volumeId // .volume_id) + " " + .name + " " + (.mountPath // .mount_path) + " " + ((.readOnly // .read_only // false) | tostring)] | join(",")')" \
	"$m1 m1 /workspace false,$m2 m2 /data true" 'names resolved to ids, in order, with their mode'
tro=$(jid "$(bcctl --format json sandbox-template create --name ro --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --volumes "m1:/workspace:ro")")
api_refused "$T" sandboxtemplates/update "{\"templateId\":\"$trw\",\"warm\":{\"min\":1,\"max\":1}}" \
	400 INVALID_INPUT reason=volumes-warm 'update: a warm pool for a template with volumes'
api_refused "$T" sandboxvolumes/delete "{\"volumeId\":\"$m1\"}" 409 CONFLICT reason=volume-named \
	'a volume a live template names cannot be deleted'
# an update that changes what the guest runs decides the current list; a
# mount made writable meanwhile is CONFLICT volumes-changed
psql -d bc -XAtq -c "BEGIN; SELECT 1 FROM sandbox_templates WHERE id = '$tro' FOR UPDATE;
	SELECT pg_sleep(3); UPDATE template_volumes SET read_only = false WHERE template_id = '$tro';
	COMMIT;" >/dev/null &
racer=$!
sleep 1
v0=$(q "SELECT version FROM sandbox_templates WHERE id = '$tro'")
bcctl sandbox-template update "$tro" --network egress >/dev/null 2>"$STACK_DIR/err"
is "$?" 4 'an update decided on a read-only mount made writable meanwhile: CONFLICT'
like "$(cat "$STACK_DIR/err")" 'volumes-changed' '... reason volumes-changed'
wait "$racer"
is "$(q "SELECT version FROM sandbox_templates WHERE id = '$tro'")" "$v0" '... and it wrote nothing'
q "UPDATE template_volumes SET read_only = true WHERE template_id = '$tro'" >/dev/null
out=$(bcctl --format json sandbox-template update "$tro" --network egress) || fail 'update again'
is "$(json_get "$out" version)" "$((v0 + 1))" 'retried, it is decided again and written'

# -- sandboxes attach
srows() { q "SELECT (SELECT count(*) FROM sandboxes) || ' ' || (SELECT count(*) FROM instances) || ' ' || (SELECT count(*) FROM instance_volumes)"; }
sc() { echo "{\"templateId\":\"$1\"}"; }
out=$(bcctl --format json sandbox create --template "$trw" --wait 20s) || fail 'sandbox rw'
s1=$(jid "$out")
is "$(json_get "$out" node_id)" "$host" "placed on the volumes' host"
inst1=$(json_get "$out" instance_id)
is "$(q "SELECT string_agg(volume_id || ':' || read_only, ' ' ORDER BY volume_id) FROM instance_volumes WHERE instance_id = '$inst1'")" \
	"$(printf '%s\n' "$m1:false" "$m2:true" | sort | tr '\n' ' ' | sed 's/ $//')" 'its attachments are recorded'
before=$(srows)
api_refused "$T" sandboxes/create "$(sc "$trw")" 409 CONFLICT reason=volume-in-use \
	'a second read-write attachment'
api_refused "$T" sandboxes/create "$(sc "$tro")" 409 CONFLICT reason=volume-in-use \
	'a read-only attachment beside a read-write one'
is "$(srows)" "$before" 'no sandbox, instance or attachment left'
api_refused "$T" sandboxvolumes/delete "{\"volumeId\":\"$m2\"}" 409 CONFLICT reason=volume-attached \
	'... nor can a volume a live instance attaches be deleted'
bcctl sandbox delete "$s1" >/dev/null || fail 'delete s1'
inst_gone() { [ "$(q "SELECT state FROM instances WHERE id = '$1'")" = deleted ]; }
eventually 60 inst_gone "$inst1"
ok $? 'the first sandbox is gone'
ids=""
for i in 1 2 3; do
	out=$(bcctl --format json sandbox create --template "$tro" --wait 20s) || fail "ro $i"
	ids="$ids $(jid "$out")"
	is "$(json_get "$out" node_id)" "$host" "read-only sandbox $i on the volumes' host"
done
is "$(q "SELECT count(*) FROM instance_volumes iv JOIN instances i ON i.id = iv.instance_id WHERE iv.volume_id = '$m1' AND iv.read_only AND i.state <> 'deleted'")" \
	3 'three read-only attachments at once'
api_refused "$T" sandboxes/create "$(sc "$trw")" 409 CONFLICT reason=volume-in-use \
	'a read-write attachment beside read-only ones'
for s in $ids; do bcctl sandbox delete "$s" >/dev/null; done
none_live() { [ "$(q "SELECT count(*) FROM instance_volumes iv JOIN instances i ON i.id = iv.instance_id WHERE i.state <> 'deleted'")" = 0 ]; }
eventually 60 none_live
ok $? 'the read-only sandboxes are gone'

# -- the NodeSpec carries the attachments (the agent's state, from its spec)
out=$(bcctl --format json sandbox create --template "$trw" --wait 20s) || fail 'sandbox rw again'
s4=$(jid "$out")
inst4=$(json_get "$out" instance_id)
is "$(json_get "$out" state)" ready 'a read-write sandbox again once the others are gone'
ser1=$(q "SELECT serial FROM volumes WHERE id = '$m1'")
agent_no=$([ "$host" = "$n1" ] && echo 1 || echo 2)
ser2=$(q "SELECT serial FROM volumes WHERE id = '$m2'")
# the fake runtime's record of the instance lists its InstanceSpec.volumes
spec_has() { grep -rqsF --exclude='*.raw' "volume=$m1|$ser1|rw" "$STACK_DIR/agent-$agent_no" &&
	grep -rqsF --exclude='*.raw' "volume=$m2|$ser2|ro" "$STACK_DIR/agent-$agent_no"; }
eventually 20 spec_has
ok $? "the volumes' host runs the instance with its attachments (InstanceSpec.volumes: id, serial, rw/ro)"
bcctl sandbox delete "$s4" >/dev/null
eventually 60 inst_gone "$inst4"

# -- volumes on different hosts
tfar=$(jid "$(bcctl --format json sandbox-template create --name far --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --volumes "m1:/a,far:/b")")
before=$(srows)
api_refused "$T" sandboxes/create "$(sc "$tfar")" 409 INVALID_STATE reason=volumes-on-different-hosts \
	'volumes on different hosts'
is "$(srows)" "$before" '... nothing left'
out=$(bcctl --format json sandbox-template update "$tfar" --volumes "") || fail 'clear volumes'
is "$(printf '%s' "$out" | jq -r '.volumes | length')" 0 '--volumes "" removes every volume'

# -- waits while the host lacks the capability
agent_kill "$agent_no"
q "UPDATE nodes SET labels = labels - 'bc.dev/cap.instance.volumes' WHERE id = '$host'" >/dev/null
out=$(bcctl --format json sandbox create --template "$trw")
s5=$(jid "$out")
is "$(json_get "$out" state)" starting 'without the capability on its host the sandbox is starting'
like "$(json_get "$out" reason)" 'Unschedulable: its volumes. host .* lacks (.*, )?bc.dev/cap.instance.volumes' \
	'... its instance waits, saying why'
is "$(q "SELECT count(*) FROM instances WHERE sandbox_id = '$s5' AND node_id IS NULL")" 1 \
	'... unplaced (not on the other host)'
agent_start "$agent_no"
sbx_ready() { [ "$(json_get "$(bcctl --format json sandbox get "$1")" state)" = ready ]; }
eventually 90 sbx_ready "$s5"
ok $? 'once the host reports the capability again, it is placed there and ready'
is "$(json_get "$(bcctl --format json sandbox get "$s5")" node_id)" "$host" '... on the volumes host'

# -- the doctor on the volume stores: stale and unreported (the other host,
# stopped: it stays "connected" for 5 minutes after its last report)
ano=$([ "$agent_no" = 1 ] && echo 2 || echo 1)
agent_kill "$ano"
"$BC_BIN/bc-controller" doctor --config "$STACK_DIR/ctl-1.conf" >"$STACK_DIR/doc" 2>&1
is "$? $(cat "$STACK_DIR/doc")" '0 ok' 'doctor: ok while every store report is fresh'
q "UPDATE host_volume_storage SET reported_at = now() - interval '2 hours' WHERE node_id = '$other'" >/dev/null
out=$("$BC_BIN/bc-controller" doctor --config "$STACK_DIR/ctl-1.conf" 2>&1)
is "$?" 0 'a stale report is a warning (exit 0)'
like "$out" "warn vps.volumes.storage-stale $other: its volume store report is 1[0-9][0-9] minutes old" \
	'... vps.volumes.storage-stale names the host'
q "DELETE FROM host_volume_storage WHERE node_id = '$other'" >/dev/null
out=$(adm "$T" doctor/run '{}')
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '[.findings[] | .severity + " " + .check + " " + .nodeId] | join(",")')" \
	"warn vps.volumes.storage-unreported $other" 'POST /api/admin/doctor/run: storage-unreported for a host with the capability and no store'
out=$(adm "$A" doctor/run '{}')
is "$(printf '%s\n' "$out" | tail -n 1)" 403 '... refused to a tenant identity (operators only)'

done_testing
