# snapshots.t: sandbox snapshots on the fake runtime (controller/snapshots.c,
# snapshots_pass.c; docs/snapshots.md) with a real S3-compatible store
# (tests/lib/s3.sh: s3rver, which checks signatures).
# - every refusal of Sandboxes.Snapshot with its code and reason, leaving no
#   snapshot, authorization row, command or event: a malformed or unknown
#   sandbox, a sandbox being deleted, a memory snapshot of a sandbox with a
#   read-write volume attached (read-write-volume), a runtime not in
#   snapshot_runtimes (UNSUPPORTED), a memory snapshot on a runtime not in
#   snapshot_memory_runtimes (UNSUPPORTED memory-snapshot; libvirt is in it by
#   default), no store (INVALID_CONFIG no-snapshot-store);
# - a take: pending, sandbox.snapshot.created, one instance.snapshot command
#   (lane bulk, not retry-safe, key sandboxes:<id>:snapshot) carrying a
#   presigned PUT the store accepts, includeMemory; the answer never holds a
#   URL;
# - the host's side is the stack's real bcd (agent/snapshot.c, xfer.c; the
#   fake runtime captures a real object, its config lets it use http on
#   loopback and names its cpu.model TestCPU): it uploads to the presigned
#   PUT and reports; ready with the sha256/sizeBytes of the object the store
#   then serves, cpuModel TestCPU, and sandbox.snapshot.ready; a PUT URL
#   presigned with a wrong secret (set-secret of another key for that take)
#   is refused by the store and the snapshot fails with bcd's reason
#   (SnapshotUploadFailed, HTTP 403) and sandbox.snapshot.failed; a result
#   without a valid sha256, which bcd never sends, is played by the test:
#   bcd is stopped (SIGSTOP) while it settles the command the way a report
#   does (state, result, NOTIFY bc_command_settled);
# - idempotency: the same key returns the same snapshot; with another keep,
#   includeMemory or sandbox it is CONFLICT idempotency-key-reused;
# - Sandboxes.Get lists the sandbox's snapshots; SandboxSnapshots List
#   (mine/all, sandboxId, limit, cursor), Get, Delete (JSON/HTTP too);
#   another identity of the tenant without a policy sees nothing;
# - lifetime: Delete marks it deleted (sandbox.snapshot.deleted), the
#   reconciler then purges it: the object is gone from the store, purged_at
#   set, its authorization row gone; deleting the sandbox deletes its
#   snapshots that were not kept, a kept one stays ready;
# - restore (fromSnapshot): every refusal (malformed, unknown, deleted,
#   failed, another template, another user's) leaving no sandbox or
#   instance; a kept snapshot of a deleted sandbox restores for real (bcd
#   downloads, verifies, the fake restores it from the source's capture),
#   placed on the node of its cpu.model (the label bcd joined with), never
#   warm, and the host's spec (spec.pb) carries restore_from with a
#   presigned GET that downloads the object and its sha256, which no answer
#   shows; "taken on another CPU model" is a real snapshot whose row's
#   cpu_model the test sets to OtherCPU (the stack has one host model): a
#   memory one waits Unschedulable, a disk-only one is placed anyway and
#   bcd, which refuses only memory snapshots of another model, restores it
#   ready; a deleted snapshot's object stays while a restore of it lives,
#   and is purged once it is deleted;
# - exec: refused restore-shares-identity into a memory restore while a
#   sibling lives and into the source while a memory restore of it lives;
#   granted otherwise and for a disk-only restore;
# - lineage: an agent cannot restore its user's snapshot of a sandbox it did
#   not create, nor another user; an owner who is gone loses all their
#   snapshots, kept ones too; a tenant teardown deletes every snapshot.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"
. "$(dirname "$0")/../lib/s3.sh"

S3D=$(mktemp -d /tmp/bc-snapshots-s3.XXXXXX) || bail_out "no temp dir"
[ "${BC_KEEP_STACK:-0}" = 1 ] || tap_on_exit rm -rf "$S3D" # after s3_down (hooks run in reverse)
s3_up "$S3D" snaps || bail_out "s3rver did not start"
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
STORE_CONF="snapshot_store_endpoint = $S3_ENDPOINT
snapshot_store_bucket = $S3_BUCKET
snapshot_store_path_style = 1
snapshot_store_access_key_id = $S3_ACCESS_KEY_ID
snapshot_store_allow_http_loopback_for_tests = 1"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
$STORE_CONF"
export BC_NODE_LOST_SECONDS=600
export BC_AGENT_LABELS=cpu.model=TestCPU
export BC_AGENT_EXTRA_CONF='snapshot_store_allow_http_loopback_for_tests = 1'
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
CONF=$STACK_DIR/ctl-1.conf
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$CONF" <"$S3_SECRET_FILE" >/dev/null 2>&1 ||
	bail_out "set-secret"
img=$(stack_image_create snap-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
T=$BC_TOKEN
body() { printf '%s\n' "$1" | sed '$d'; }
rows() {
	q "SELECT (SELECT count(*) FROM sandbox_snapshots) || ' ' || (SELECT count(*) FROM
		authz_resources WHERE type = 'compute-sandbox-snapshot') || ' ' || (SELECT count(*)
		FROM commands) || ' ' || (SELECT count(*) FROM events WHERE type LIKE 'sandbox.snapshot.%')"
}
restart_ctl() { # restart_ctl EXTRA_LINES: replica 1 with its config plus these lines
	ctl_kill 1 TERM
	grep -v '^snapshot_' "$CONF.base" >"$CONF"
	printf '%s\n' "$1" >>"$CONF"
	ctl_start 1 || bail_out "the controller did not restart"
}
cp "$CONF" "$CONF.base"
bcd_pid=$(_stack_get_pid bcd-1)
snap_state() { q "SELECT state FROM sandbox_snapshots WHERE id = '$1'"; }
snap_state_is() { [ "$(snap_state "$1")" = "$2" ]; }
cmd_of() { q "SELECT command_id FROM sandbox_snapshots WHERE id = '$1'"; }
# settle CMD STATE RESULT_JSON ERROR: what a report's CommandResult does
settle() {
	q "UPDATE commands SET state = '$2', result = $3, error = '$4', settled_at = now()
		WHERE id = '$1'; SELECT pg_notify('bc_command_settled', '$1')" >/dev/null
}
object_code() { # HTTP status of a presigned GET of the snapshot's object
	local url
	url=$("$BC_BIN/bc-controller" snapshot-store presign get "sandboxes/root/$1" --config "$CONF" 2>/dev/null)
	curl -s -o /dev/null -w '%{http_code}' "$url"
}
object_sum() { # "sha256 size" of the snapshot's object in the store
	local url
	url=$("$BC_BIN/bc-controller" snapshot-store presign get "sandboxes/root/$1" --config "$CONF" 2>/dev/null)
	curl -sf -o "$S3D/obj" "$url" || return 1
	echo "$(sha256sum "$S3D/obj" | cut -d' ' -f1) $(stat -c %s "$S3D/obj")"
}
snap_col() { q "SELECT $2 FROM sandbox_snapshots WHERE id = '$1'"; }
ledger=$STACK_DIR/agent-1/fake/ledger.log
# the fake's guests refuse every identity rebind here, so memory restores
# keep their source's identity (restore-shares-identity); rebind.t tests
# the rebind itself
mkdir -p "$STACK_DIR/agent-1/fake" && echo rebind >"$STACK_DIR/agent-1/fake/all.fail"

tmpl=$(jid "$(bcctl --format json sandbox-template create --name snap --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"
mk() { jid "$(bcctl --format json sandbox create --template "$tmpl" --wait 20s)"; }
s1=$(mk)
s2=$(mk)
s3=$(mk)
[ -n "$s3" ] || bail_out "sandboxes"
eventually 30 bash -c "[ \"\$(psql -d bc -XAtq -c \"SELECT count(*) FROM sandboxes WHERE state = 'ready'\")\" = 3 ]"
ok $? 'three sandboxes ready'

# ------------------------------------------------------------------ refusals
before=$(rows)
api_refused "$T" sandboxes/snapshot '{"sandboxId":"sbx_1"}' 400 INVALID_INPUT field=sandboxId \
	'a malformed sandbox id'
api_refused "$T" sandboxes/snapshot '{"sandboxId":"sbx_00000000000000000000000000"}' 404 NOT_FOUND - \
	'an unknown sandbox'
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\",\"bogus\":1}" 400 INVALID_INPUT - \
	'an unknown field'
# a read-write volume attached to s2's instance (attach's row, written here)
vol=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name rw --size 1)")
i2=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s2'")
q "INSERT INTO instance_volumes (instance_id, volume_id, read_only) VALUES ('$i2', '$vol', false)"
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s2\"}" 409 INVALID_STATE reason=read-write-volume \
	'a memory snapshot of a sandbox with a read-write volume'
q "UPDATE instance_volumes SET read_only = true WHERE instance_id = '$i2'"
# a sandbox being deleted
s4=$(mk)
bcctl sandbox delete "$s4" >/dev/null || fail 'delete s4'
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s4\"}" 409 INVALID_STATE - 'a sandbox being deleted'
is "$(rows)" "$before" 'the refusals left no snapshot, authorization row, command or event'

restart_ctl "$STORE_CONF
snapshot_runtimes = libvirt"
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\"}" 501 UNSUPPORTED runtime=fake \
	'a runtime without the snapshot trait (snapshot_runtimes = libvirt)'
restart_ctl "$STORE_CONF
snapshot_memory_runtimes = libvirt"
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\"}" 501 UNSUPPORTED reason=memory-snapshot \
	'a memory snapshot on a runtime whose memory snapshots do not restore (snapshot_memory_runtimes)'
restart_ctl ""
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\"}" 500 INVALID_CONFIG reason=no-snapshot-store \
	'no snapshot store'
# the default snapshot_memory_runtimes has libvirt: a memory snapshot of a
# sandbox of a libvirt pool passes both runtime checks (the store is next)
q "UPDATE pools SET runtime = 'libvirt' WHERE id = '$POOL_ID'"
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\"}" 500 INVALID_CONFIG reason=no-snapshot-store \
	'a memory snapshot on libvirt is not refused memory-snapshot by default'
q "UPDATE pools SET runtime = 'fake' WHERE id = '$POOL_ID'"
restart_ctl "$STORE_CONF"
is "$(rows)" "$before" '... nothing left behind either'

# ------------------------------------------------------------------ a take
out=$(bcctl --format json sandbox snapshot "$s1" --key nightly-1) || fail 'snapshot'
p1=$(jid "$out")
like "$p1" '^snap_[0-9a-z]{26}$' 'a snapshot id is snap_...'
is "$(json_get "$out" state)" pending 'pending'
is "$(json_get "$out" include_memory)" true 'includeMemory defaults to true'
is "$(json_get "$out" keep)" '' 'keep defaults to false'
is "$(json_get "$out" runtime)" fake 'runtime fake'
is "$(json_get "$out" owner_identity_id)" "$(q "SELECT owner_id FROM sandboxes WHERE id = '$s1'")" \
	"ownerIdentityId is the sandbox's owner"
unlike "$out" 'X-Amz|http://' 'the answer holds no URL'
c1=$(cmd_of "$p1")
i1=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s1'")
is "$(q "SELECT kind || ' ' || lane || ' ' || retry_safe || ' ' || key || ' ' || instance_id || ' ' ||
	(args->>'includeMemory') || ' ' || (args->>'snapshotId') FROM commands WHERE id = '$c1'")" \
	"instance.snapshot bulk false sandboxes:$p1:snapshot $i1 true $p1" \
	'one instance.snapshot command: bulk, not retry-safe, keyed, for the instance'
is "$(q "SELECT extract(epoch FROM deadline - created_at)::int FROM commands WHERE id = '$c1'")" 3600 \
	'... with a timeout of one hour'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.snapshot.created' AND subject = 'sandbox/$s1'")" 1 \
	'sandbox.snapshot.created'
is "$(event_keys sandbox.snapshot.created "sandbox/$s1")" 'includeMemory,keep,sandboxId,snapshotId' \
	'sandbox.snapshot.created keys'
is "$(q "SELECT owner_id || ' ' || (attrs->>'sandboxId') FROM authz_resources WHERE
	type = 'compute-sandbox-snapshot' AND id = '$p1'")" "$(q "SELECT owner_id FROM sandboxes WHERE id = '$s1'") $s1" \
	'its IAM resource compute-sandbox-snapshot/<id>, owned by the sandbox owner'

# idempotency
out=$(bcctl --format json sandbox snapshot "$s1" --key nightly-1)
is "$(jid "$out")" "$p1" 'the same key: the same snapshot'
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\",\"idempotencyKey\":\"nightly-1\",\"keep\":true}" \
	409 CONFLICT reason=idempotency-key-reused 'the key with another keep'
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s1\",\"idempotencyKey\":\"nightly-1\",\"includeMemory\":false}" \
	409 CONFLICT reason=idempotency-key-reused 'the key with another includeMemory'
api_refused "$T" sandboxes/snapshot "{\"sandboxId\":\"$s3\",\"idempotencyKey\":\"nightly-1\"}" \
	409 CONFLICT reason=idempotency-key-reused 'the key for another sandbox'
is "$(q "SELECT count(*) FROM sandbox_snapshots")" 1 '... one snapshot in all'

# bcd captures, uploads to the presigned URL and reports
like "$(q "SELECT args->>'putUrl' FROM commands WHERE id = '$c1'")" \
	"^http://127.0.0.1:$S3_PORT/$S3_BUCKET/sandboxes/root/$p1\\?.*X-Amz-Signature=" \
	"the command's putUrl is a presigned PUT of the snapshot's object"
eventually 60 snap_state_is "$p1" ready
ok $? "bcd's report makes it ready" || diag "$(q "SELECT state, error, result FROM commands WHERE id = '$c1'")"
is "$(q "SELECT state FROM commands WHERE id = '$c1'")" succeeded '... its command succeeded'
ok "grep -q 'op=capture id=$i1 memory=1' '$ledger'" '... the fake runtime captured memory and disk'
out=$(bcctl --format json sandbox-snapshot get "$p1")
sum1=$(object_sum "$p1")
like "$sum1" '^[0-9a-f]{64} [1-9][0-9]*$' 'the store accepted the presigned PUT: it serves the object'
is "$(json_get "$out" sha256) $(json_get "$out" size_bytes) $(json_get "$out" cpu_model)" "$sum1 TestCPU" \
	"get: the host's sha256 and sizeBytes (the stored object's), cpuModel (its node's label)"
ok "[ $(json_get "$out" ready_at) -ge $(json_get "$out" created_at) ]" 'readyAt set'
is "$(q "SELECT paused_ms FROM sandbox_snapshots WHERE id = '$p1'")" \
	"$(q "SELECT result->>'pausedMs' FROM commands WHERE id = '$c1'")" "pausedMs recorded (the host's)"
is "$(event_keys sandbox.snapshot.ready "sandbox/$s1")" 'cpuModel,includeMemory,keep,sandboxId,sha256,sizeBytes,snapshotId' \
	'sandbox.snapshot.ready keys'
is "$(object_code "$p1")" 200 'the object is in the store'

# failures: the store refused the upload (a URL presigned with another
# secret); a result without a sha256
head -c 30 /dev/urandom | base64 | "$BC_BIN/bc-controller" snapshot-store set-secret --config "$CONF" \
	>/dev/null 2>&1 || bail_out "set-secret (wrong)"
out=$(bcctl --format json sandbox snapshot "$s1" --no-memory --keep) || fail 'snapshot 2'
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$CONF" <"$S3_SECRET_FILE" >/dev/null 2>&1 ||
	bail_out "set-secret (right)"
p2=$(jid "$out")
is "$(json_get "$out" include_memory)" '' '--no-memory: includeMemory false'
is "$(json_get "$out" keep)" true '--keep: keep true'
eventually 60 snap_state_is "$p2" failed
ok $? 'a failed command (the store refused the upload) fails the snapshot'
is "$(q "SELECT state FROM commands WHERE id = '$(cmd_of "$p2")'")" failed '... its command failed'
like "$(json_get "$(bcctl --format json sandbox-snapshot get "$p2")" reason)" \
	'^SnapshotUploadFailed: the store refused the upload: HTTP 403' "... with the host's reason"
is "$(event_keys sandbox.snapshot.failed "sandbox/$s1")" 'includeMemory,keep,reason,sandboxId,snapshotId' \
	'sandbox.snapshot.failed keys'
kill -STOP "$bcd_pid" # the test plays a host that reports no sha256
p3=$(jid "$(bcctl --format json sandbox snapshot "$s3" --keep)")
settle "$(cmd_of "$p3")" succeeded "'{\"sizeBytes\":10}'" ''
eventually 20 snap_state_is "$p3" failed
ok $? 'a result without a sha256 fails it'
kill -CONT "$bcd_pid"
is "$(q "SELECT reason FROM sandbox_snapshots WHERE id = '$p3'")" 'the host reported no valid sha256' '... saying so'
i3=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s3'")
p4=$(jid "$(bcctl --format json sandbox snapshot "$s3" --keep)")
eventually 60 snap_state_is "$p4" ready
p5=$(jid "$(bcctl --format json sandbox snapshot "$s3")")
eventually 60 snap_state_is "$p5" ready
is "$(snap_state "$p4") $(snap_state "$p5")" 'ready ready' 'two more of s3 ready (taken by bcd)'

# ------------------------------------------------------------------ reads
out=$(bcctl --format json sandbox get "$s1")
is "$(printf '%s' "$out" | jq -r '[.snapshots[].id] | join(" ")')" "$p1 $p2" \
	"Sandboxes.Get lists the sandbox's snapshots"
out=$(bcctl --format json sandbox-snapshot list)
is "$(printf '%s' "$out" | jq -r '[.items[].id] | join(" ")')" "$p5 $p4 $p3 $p2 $p1" 'list: mine, newest first'
out=$(bcctl --format json sandbox-snapshot list --sandbox "$s3" --limit 2)
is "$(printf '%s' "$out" | jq -r '[.items[].id] | join(" ")')" "$p5 $p4" '--sandbox and --limit 2'
cur=$(printf '%s' "$out" | jq -r .cursor)
out=$(bcctl --format json sandbox-snapshot list --sandbox "$s3" --limit 2 --cursor "$cur")
is "$(printf '%s' "$out" | jq -r '[.items[].id] | join(" ")')" "$p3" '... the next page'
out=$(api "$T" sandboxsnapshots/list '{"scope":"all"}')
is "$(body "$out" | jq -r '.items | length')" 5 'JSON/HTTP list, scope all'
out=$(api "$T" sandboxsnapshots/get "{\"snapshotId\":\"$p1\"}")
is "$(body "$out" | jq -r .ownerIdentityId)" "$(q "SELECT owner_id FROM sandboxes WHERE id = '$s1'")" \
	'JSON/HTTP get carries ownerIdentityId'
api_refused "$T" sandboxsnapshots/get '{"snapshotId":"snap_00000000000000000000000000"}' 404 NOT_FOUND - \
	'get of an unknown snapshot'
api_refused "$T" sandboxsnapshots/list '{"scope":"everything"}' 400 INVALID_INPUT field=scope 'a bad scope'
# another user of the tenant without a policy
u2=$(jid "$(bcctl --format json identity create --tenant root --name snap-other --kind user)")
t2=$(json_get "$(bcctl --format json token create --identity "$u2")" token)
if [ -n "$t2" ]; then
	out=$(api "$t2" sandboxsnapshots/list '{"scope":"all"}')
	is "$(body "$out" | jq -r '.items | length')" 0 'another user without a policy lists none'
	api_refused "$t2" sandboxsnapshots/delete "{\"snapshotId\":\"$p1\"}" 403 ACCESS_DENIED - \
		'... and cannot delete one'
else
	fail 'a second identity and token'
fi

# ------------------------------------------------------------------ lifetime
out=$(bcctl --format json sandbox-snapshot delete "$p1") || fail 'delete'
is "$(json_get "$out" state)" deleted 'delete: state deleted'
is "$(event_keys sandbox.snapshot.deleted "sandbox/$s1")" 'includeMemory,keep,sandboxId,snapshotId' \
	'sandbox.snapshot.deleted keys'
purged() { [ "$(q "SELECT purged_at IS NOT NULL FROM sandbox_snapshots WHERE id = '$1'")" = t ]; }
eventually 30 purged "$p1"
ok $? 'the reconciler purges it'
is "$(object_code "$p1")" 404 '... its object is gone from the store'
is "$(q "SELECT count(*) FROM authz_resources WHERE type = 'compute-sandbox-snapshot' AND id = '$p1'")" 0 \
	'... and its authorization row'
out=$(bcctl --format json sandbox-snapshot list --sandbox "$s1")
is "$(printf '%s' "$out" | jq -r '[.items[].id] | join(" ")')" "$p2" 'list leaves deleted ones out'
is "$(json_get "$(bcctl --format json sandbox-snapshot delete "$p1")" state)" deleted 'delete again: idempotent'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.snapshot.deleted' AND data->>'snapshotId' = '$p1'")" 1 \
	'... one sandbox.snapshot.deleted'

bcctl sandbox delete "$s3" >/dev/null || fail 'delete s3'
del_of() { [ "$(q "SELECT deleted_at IS NOT NULL FROM sandbox_snapshots WHERE id = '$1'")" = t ]; }
eventually 60 del_of "$p5"
ok $? "deleting the sandbox deletes its snapshot that was not kept"
is "$(q "SELECT string_agg(id || '=' || (deleted_at IS NULL), ' ' ORDER BY created_at) FROM sandbox_snapshots
	WHERE sandbox_id = '$s3'")" "$p3=true $p4=true $p5=false" '... the kept ones stay'
is "$(json_get "$(bcctl --format json sandbox-snapshot get "$p4")" state)" ready '... and ready'

# ------------------------------------------------------------------ restore
node=$(agent_node_id 1)
is "$(q "SELECT labels->>'cpu.model' FROM nodes WHERE id = '$node'") $(snap_col "$p4" cpu_model)" 'TestCPU TestCPU' \
	"the node joined with its configured cpu.model, the snapshot's"
sha=$(snap_col "$p4" sha256)
tmpl2=$(jid "$(bcctl --format json sandbox-template create --name snap2 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")")
srows() { q "SELECT (SELECT count(*) FROM sandboxes) || ' ' || (SELECT count(*) FROM instances)"; }
before=$(srows)
rc() { echo "{\"templateId\":\"${2:-$tmpl}\",\"fromSnapshot\":\"$1\"}"; }
api_refused "$T" sandboxes/create "$(rc snap_1)" 400 INVALID_INPUT field=fromSnapshot 'restore: a malformed id'
api_refused "$T" sandboxes/create "$(rc snap_00000000000000000000000000)" 404 NOT_FOUND - 'restore: an unknown snapshot'
api_refused "$T" sandboxes/create "$(rc "$p1")" 404 NOT_FOUND - 'restore: a deleted snapshot'
api_refused "$T" sandboxes/create "$(rc "$p2")" 409 INVALID_STATE state=failed 'restore: a failed snapshot'
api_refused "$T" sandboxes/create "$(rc "$p4" "$tmpl2")" 400 INVALID_INPUT field=templateId \
	"restore: another template than the snapshot's"
if [ -n "$t2" ]; then
	api_refused "$t2" sandboxes/create "$(rc "$p4")" 404 NOT_FOUND - "restore: another user's snapshot"
fi
is "$(srows)" "$before" 'the refused restores left no sandbox or instance'

out=$(bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$p4" --wait 20s) || fail 'restore'
r1=$(jid "$out")
is "$(json_get "$out" state)" ready 'a kept snapshot of a deleted sandbox restores: ready'
ri=$(json_get "$out" instance_id)
is "$(q "SELECT restore_snapshot_id || ' ' || node_id FROM instances WHERE id = '$ri'")" "$p4 $node" \
	'its instance restores from the snapshot, on the node of its cpu.model'
is "$(json_get "$out" warm)" '' '... never a warm claim'
ok "grep -q 'op=restored id=$ri from=$i3 memory=1' '$ledger'" \
	"... bcd restored it on the fake runtime from the source's memory capture"
spec_url() { grep -ao "http://127.0.0.1:$S3_PORT/$S3_BUCKET/sandboxes/root/$1?[[:print:]]*X-Amz-Signature=[0-9a-f]\{64\}" \
	"$STACK_DIR/agent-1/spec.pb" | head -n 1; }
spec_has() { [ -n "$(spec_url "$1")" ]; }
eventually 20 spec_has "$p4"
ok $? "the host's spec carries restore_from with a presigned GET of the object"
rurl=$(spec_url "$p4")
curl -s -o "$S3D/got" "$rurl"
is "$(sha256sum "$S3D/got" | cut -d' ' -f1)" "$sha" '... which downloads the bytes of the snapshot'
ok "grep -qa '$sha' '$STACK_DIR/agent-1/spec.pb'" '... and its sha256'
unlike "$(bcctl --format json sandbox get "$r1") $(bcctl --format json sandbox-snapshot get "$p4")" \
	'X-Amz|http://' 'no answer shows a download URL'

# exec while a memory restore shares its source's identity
ssh-keygen -q -t ed25519 -N '' -f "$S3D/id" || bail_out "ssh-keygen"
pub=$(cat "$S3D/id.pub")
ex() { echo "{\"sandboxId\":\"$1\",\"publicKey\":\"$pub\"}"; }
out=$(api "$T" sandboxes/exec "$(ex "$r1")")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'exec into a memory restore whose source is gone: granted'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '.principal + " " + .hostPrincipal')" "sandbox@$i3 $i3" \
	"... for the identity its memory holds, its source's (its guest refuses its own here)"
r2=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$p4" --wait 20s)")
api_refused "$T" sandboxes/exec "$(ex "$r1")" 409 INVALID_STATE reason=restore-shares-identity \
	'exec into a memory restore while a sibling restore is live'
api_refused "$T" sandboxes/exec "$(ex "$r2")" 409 INVALID_STATE reason=restore-shares-identity \
	'... and into the sibling'
bcctl sandbox delete "$r2" >/dev/null
out=$(api "$T" sandboxes/exec "$(ex "$r1")")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 '... granted again once the sibling is deleting'

# a memory snapshot taken on another CPU model waits for a node of that
# model (bcd takes it; its row then says another model: one host model here)
p6=$(jid "$(bcctl --format json sandbox snapshot "$s1" --keep)")
eventually 60 snap_state_is "$p6" ready || diag "p6: $(snap_state "$p6")"
q "UPDATE sandbox_snapshots SET cpu_model = 'OtherCPU' WHERE id = '$p6'" >/dev/null
out=$(bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$p6") || fail 'restore p6'
is "$(json_get "$out" state)" starting 'a memory restore of another cpu.model: starting'
like "$(q "SELECT coalesce(node_id, '') || '|' || reason FROM instances WHERE id = '$(json_get "$out" instance_id)'")" \
	'^\|Unschedulable' '... unplaced, Unschedulable'
api_refused "$T" sandboxes/exec "$(ex "$s1")" 409 INVALID_STATE reason=restore-shares-identity \
	'exec into the source while a memory restore of it is live (even unplaced)'
p7=$(jid "$(bcctl --format json sandbox snapshot "$s1" --keep --no-memory)")
eventually 60 snap_state_is "$p7" ready || diag "p7: $(snap_state "$p7")"
q "UPDATE sandbox_snapshots SET cpu_model = 'OtherCPU' WHERE id = '$p7'" >/dev/null
out=$(bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$p7" --wait 30s) || fail 'restore p7'
is "$(json_get "$out" state)" ready 'a disk-only restore is placed whatever the CPU model (and bcd restores it)'
ok "grep -q 'op=restored id=$(json_get "$out" instance_id) from=$i1 memory=0' '$ledger'" \
	'... from the disk-only capture'
out=$(api "$T" sandboxes/exec "$(ex "$(jid "$out")")")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'exec into a disk-only restore: granted (its own identity)'

# the object stays while a live instance restores from it
bcctl sandbox-snapshot delete "$p2" >/dev/null
bcctl sandbox-snapshot delete "$p4" >/dev/null
eventually 30 purged "$p2"
ok $? 'a deleted snapshot nobody restores from is purged'
is "$(q "SELECT purged_at IS NULL FROM sandbox_snapshots WHERE id = '$p4'")" t \
	'... one a live restore restores from is not'
is "$(object_code "$p4")" 200 '... its object stays'
api_refused "$T" sandboxes/create "$(rc "$p4")" 404 NOT_FOUND - 'a deleted snapshot no longer restores'
bcctl sandbox delete "$r1" >/dev/null
eventually 60 purged "$p4"
ok $? 'once the restore is deleted, it is purged'
is "$(object_code "$p4")" 404 '... its object gone'

# ------------------------------------------------- lineage, departure, teardown
as() { local tok=$1; shift; BC_TOKEN=$tok bcctl "$@"; }
bcctl tenant create acme >/dev/null || bail_out "tenant"
usr=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name u --admin)")
bot=$(jid "$(bcctl --format json identity create --tenant acme --kind agent --name bot)")
vic=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name v --admin)")
U=$(json_get "$(bcctl --format json token create --identity "$usr")" token)
G=$(json_get "$(bcctl --format json token create --identity "$bot")" token)
V=$(json_get "$(bcctl --format json token create --identity "$vic")" token)
printf '{"effect":"allow","actions":"compute:*","resources":"*"}' >"$S3D/p.json"
bcctl policy attach "$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$S3D/p.json")")" \
	--identity "$bot" >/dev/null
bcctl delegation create --agent "$bot" --user "$usr" >/dev/null
tmpa=$(jid "$(as "$U" --format json sandbox-template create --name t --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")")
sa=$(jid "$(as "$G" --format json sandbox create --template "$tmpa" --wait 20s)")
su=$(jid "$(as "$U" --format json sandbox create --template "$tmpa" --wait 20s)")
sv=$(jid "$(as "$V" --format json sandbox create --template "$tmpa" --wait 20s)")
pa=$(jid "$(as "$G" --format json sandbox snapshot "$sa" --keep)")
pu=$(jid "$(as "$U" --format json sandbox snapshot "$su" --keep)")
pv=$(jid "$(as "$V" --format json sandbox snapshot "$sv" --keep)")
for x in "$pa" "$pu" "$pv"; do
	eventually 60 snap_state_is "$x" ready || diag "$x: $(snap_state "$x")"
done
is "$(json_get "$(as "$U" --format json sandbox-snapshot get "$pa")" owner_identity_id)" "$usr" \
	"the agent's snapshot is owned by the user it acts for"
ra() { echo "{\"tenantId\":\"acme\",\"templateId\":\"$tmpa\",\"fromSnapshot\":\"$1\"}"; }
before=$(srows)
api_refused "$G" sandboxes/create "$(ra "$pu")" 404 NOT_FOUND - \
	"an agent cannot restore its user's snapshot of a sandbox it did not create"
api_refused "$V" sandboxes/create "$(ra "$pu")" 404 NOT_FOUND - \
	"another user of the tenant cannot restore it (even an administrator)"
is "$(srows)" "$before" '... nothing left behind'
bcctl identity set-state "$vic" deleted >/dev/null
eventually 60 del_of "$pv"
ok $? "an owner who is gone loses its snapshots, kept ones too"
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.snapshot.deleted' AND data->>'snapshotId' = '$pv'")" 1 \
	'... sandbox.snapshot.deleted'
is "$(q "SELECT count(*) FROM sandbox_snapshots WHERE id IN ('$pa', '$pu') AND deleted_at IS NULL")" 2 \
	"... the others' stay"
bcctl tenant set-state acme deleting >/dev/null
torn() { [ "$(q "SELECT count(*) FROM sandbox_snapshots WHERE tenant_id = 'acme' AND deleted_at IS NULL")" = 0 ]; }
eventually 60 torn
ok $? 'a tenant teardown deletes every snapshot of the tenant, kept ones included'

done_testing
