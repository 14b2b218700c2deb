#!/bin/bash
# snapshot_host.t: snapshots on the host (issue 16 items 4-5, bcd's side;
# agent/snapshot.c, agent/xfer.c) with a real bcd on the fake runtime and a
# real S3-compatible server that checks signatures (tests/lib/s3.sh: s3rver
# over http on loopback, allowed by the test-only switch of both sides).
# - instance.snapshot, queued with `bc-controller command enqueue` and a
#   URL presigned by `bc-controller snapshot-store presign`: the fake
#   captures, bcd uploads; the result's sha256 and sizeBytes are those of
#   the object the store then serves; cpuModel is the node's cpu.model;
#   no capture is left in data_dir/snapshots;
# - a PUT URL with one signature character changed: failed
#   SnapshotUploadFailed (HTTP 403), tried once;
# - bcd killed (SIGKILL) during an upload: after its restart the command is
#   failed "agent restarted during the command" and the capture is gone;
# - restores, with bcd watching a stand-in controller that serves specs
#   with InstanceSpec.restore_from (tests/integration/spec_controller.js,
#   until the controller sends them): a flipped byte in the store fails
#   the instance with SnapshotDigestMismatch, nothing created and no file
#   kept; another runtime's and another CPU model's memory snapshot are
#   SnapshotRefused; the good object is downloaded, verified and restored
#   running (memory, two instances from it) or stopped (disk only, on
#   another CPU model); the object goes once no spec restores from it; bcd
#   killed mid-download leaves a .part that its restart removes, then the
#   whole object is downloaded and verified before the runtime sees it.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/s3.sh"

export BC_REPORT_INTERVAL_SECONDS=2 BC_NODE_LOST_SECONDS=600
export BC_AGENT_LABELS=cpu.model=TestCPU
export BC_AGENT_EXTRA_CONF='snapshot_store_allow_http_loopback_for_tests = 1'
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,100 || bail_out "stack_up failed"
s3_up "$STACK_DIR/s3" snaps || bail_out "s3rver did not start"
img=$(stack_image_create snap-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
ad=$STACK_DIR/agent-1
snapdir=$ad/data/snapshots
log1=$STACK_DIR/bcd-1.log
ledger=$ad/fake/ledger.log

conf=$STACK_DIR/store.conf
cp "$STACK_DIR/ctl-1.conf" "$conf" || bail_out "no controller config"
{
	echo "snapshot_store_endpoint = $S3_ENDPOINT"
	echo "snapshot_store_bucket = $S3_BUCKET"
	echo "snapshot_store_path_style = 1"
	echo "snapshot_store_prefix = bc/"
	echo "snapshot_store_access_key_id = $S3_ACCESS_KEY_ID"
	echo "snapshot_store_allow_http_loopback_for_tests = 1"
} >>"$conf"
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$conf" <"$S3_SECRET_FILE" >/dev/null 2>&1 ||
	bail_out "set-secret failed"
presign() { "$BC_BIN/bc-controller" snapshot-store presign "$1" "$2" --ttl 3600 --config "$conf"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
enqueue() { "$BC_BIN/bc-controller" command enqueue --config "$STACK_DIR/ctl-1.conf" "$@" 2>>"$STACK_DIR/enqueue.err"; }
cmd_id() { printf '%s' "$1" | jq -r .id; }
cstate_is() { [ "$(q "SELECT state FROM commands WHERE id = '$1'")" = "$2" ]; }
cshow() { "$BC_BIN/bc-controller" command show --config "$STACK_DIR/ctl-1.conf" --id "$1"; }
captures() { find "$snapdir" -maxdepth 1 -name '.capture.*' 2>/dev/null | wc -l; }
parts() { find "$snapdir" -maxdepth 1 -name '*.part.*' 2>/dev/null | wc -l; }
snapshot() { # INSTANCE PUT_URL [includeMemory]: enqueue instance.snapshot, print its id
	cmd_id "$(enqueue --node "$node" --kind instance.snapshot --lane bulk --instance "$1" \
		--timeout 10m --args "{\"putUrl\": \"$2\", \"includeMemory\": ${3:-true}}")"
}

# ------------------------------------------------------------ take one
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
inst=$(json_get "$out" id)
eventually 30 instance_state_is "$inst" running
ok $? "instance $inst runs"
node=$(q "SELECT node_id FROM instances WHERE id = '$inst'")

put=$(presign put tenant/snap_one) || bail_out "presign put failed"
get=$(presign get tenant/snap_one) || bail_out "presign get failed"
c1=$(snapshot "$inst" "$put")
eventually 60 cstate_is "$c1" succeeded
ok $? "instance.snapshot ($c1) succeeded" || diag "$(cshow "$c1")"
res=$(cshow "$c1")
curl -sf -o "$STACK_DIR/obj1" "$get"
ok $? '... the store serves the object'
is "$(printf '%s' "$res" | jq -r .result.sha256)" "$(sha256sum <"$STACK_DIR/obj1" | cut -d' ' -f1)" \
	"... the result's sha256 is the stored object's"
is "$(printf '%s' "$res" | jq -r .result.sizeBytes)" "$(stat -c %s "$STACK_DIR/obj1")" \
	"... sizeBytes is its size"
is "$(printf '%s' "$res" | jq -r '.result.cpuModel + " " + .result.runtime + " " + (.result.includeMemory|tostring)')" \
	'TestCPU fake true' '... cpuModel (the node label), runtime, includeMemory'
ok "[ \"\$(printf '%s' '$res' | jq -r .result.pausedMs)\" -ge 0 ]" '... pausedMs reported'
ok "grep -q 'op=capture id=$inst memory=1' '$ledger'" '... the fake runtime captured memory and disk'
ok "grep -q \"command $c1 (instance.snapshot, $inst, lane bulk): run 1 started\" '$log1'" \
	'... run on the bulk lane'
is "$(captures)" 0 '... no capture left in data_dir/snapshots'
sha1=$(sha256sum <"$STACK_DIR/obj1" | cut -d' ' -f1)
size1=$(stat -c %s "$STACK_DIR/obj1")

# disk only
putd=$(presign put tenant/snap_disk)
getd=$(presign get tenant/snap_disk)
cd1=$(snapshot "$inst" "$putd" false)
eventually 60 cstate_is "$cd1" succeeded
ok $? 'a disk-only snapshot succeeded'
curl -sf -o "$STACK_DIR/objd" "$getd"
is "$(cshow "$cd1" | jq -r .result.sha256)" "$(sha256sum <"$STACK_DIR/objd" | cut -d' ' -f1)" \
	"... its sha256 is the stored object's"
ok "grep -q 'op=capture id=$inst memory=0' '$ledger'" '... captured without memory'
shad=$(sha256sum <"$STACK_DIR/objd" | cut -d' ' -f1)

# a PUT URL the store refuses
sig=${put##*X-Amz-Signature=}
c=${sig:0:1}
[ "$c" = 0 ] && c=1 || c=0
bad="${put%X-Amz-Signature=*}X-Amz-Signature=$c${sig:1}"
c2=$(snapshot "$inst" "$bad")
eventually 60 cstate_is "$c2" failed
ok $? 'a PUT URL with a changed signature: the command failed'
like "$(cshow "$c2" | jq -r .error)" '^SnapshotUploadFailed: the store refused the upload: HTTP 403' \
	'... SnapshotUploadFailed, HTTP 403'
like "$(cshow "$c2" | jq -r .error)" '\(attempt 1 of 3\)$' '... after one attempt (a refused URL is not retried)'
is "$(captures)" 0 '... no capture left'

# bcd killed during an upload (to a server that reads slowly, so the kill
# lands mid-body; tests/integration/slow_http.py)
dd if=/dev/urandom of="$STACK_DIR/big" bs=1M count=64 2>/dev/null
python3 "$BC_SRC/tests/integration/slow_http.py" "$STACK_DIR/slow.port" "$STACK_DIR/big" \
	2>"$STACK_DIR/slow.log" &
slow_pid=$!
eventually 10 test -s "$STACK_DIR/slow.port"
slow=http://127.0.0.1:$(cat "$STACK_DIR/slow.port")
printf '%s\n' $((32 * 1024 * 1024)) >"$ad/fake/$inst.snapbytes"
c3=$(snapshot "$inst" "$slow/put/killed")
receiving() { grep -q 'PUT /put/killed' "$STACK_DIR/slow.log" ||
	grep -q "captured memory and disk for command $c3 .*: uploading" "$log1"; }
eventually 60 receiving
ok $? "a 32 MiB snapshot ($c3) is uploading"
sleep 1
agent_kill 1 KILL
ok "[ -f '$snapdir/.capture.$c3' ]" 'bcd killed during the upload: its capture is still there'
rm -f "$ad/fake/$inst.snapbytes"
agent_start 1 || bail_out 'bcd 1 did not start again'
eventually 30 cstate_is "$c3" failed
ok $? 'after the restart the command failed'
is "$(cshow "$c3" | jq -r .error)" 'agent restarted during the command' '... "agent restarted during the command"'
eventually 10 grep -q "removed $snapdir/.capture.$c3, left by an earlier bcd" "$log1"
ok $? '... the capture was removed at start'
is "$(captures)" 0 '... none left'

# ------------------------------------------------------------ restores
# the stand-in controller: bcd 1 watches it instead of bc-controller
agent_kill 1 TERM
port=$(free_tcp_port)
specf=$STACK_DIR/standin-spec.json
events=$STACK_DIR/standin-events
node "$BC_SRC/tests/integration/spec_controller.js" "$port" "$STACK_DIR/pki/server.pem" \
	"$STACK_DIR/pki/server.key" "$specf" "$events" >"$STACK_DIR/standin.log" 2>&1 &
standin=$!
eventually 10 grep -q listening "$STACK_DIR/standin.log"
ok $? 'the stand-in controller listens'
gen=1000000
# spec_set 'INSTANCE_JSON,...': the next generation with these instances
spec_set() {
	gen=$((gen + 1))
	printf '{"generation": "%s", "node_id": "%s", "instances": [%s]}' "$gen" "$node" "$1" >"$specf.tmp"
	mv "$specf.tmp" "$specf"
}
# inst_json ID URL SHA SIZE MEMORY RUNTIME CPU [DESIRED]
inst_json() {
	printf '{"id": "%s", "runtime": "fake", "desired_state": "%s", "vcpus": 1, "memory_mib": 64, "disk_gib": 1, "numa_node": -1, "restore_from": {"snapshot_id": "snap_%s", "url": "%s", "sha256": "%s", "size_bytes": "%s", "include_memory": %s, "runtime": "%s", "cpu_model": "%s"}}' \
		"$1" "${8:-DESIRED_RUNNING}" "$1" "$2" "$3" "$4" "$5" "$6" "$7"
}
reported() { grep -q "^$1 $2" "$events"; }
spec_set ""
sed "s/^controller = .*/controller = 127.0.0.1:$port/" "$STACK_DIR/bcd-1.conf" >"$STACK_DIR/bcd-standin.conf"
start_standin_bcd() {
	"$BC_BIN/bcd" --config "$STACK_DIR/bcd-standin.conf" >>"$STACK_DIR/bcd-standin.log" 2>&1 &
	bcd_pid=$!
}
start_standin_bcd
applied() { grep -q "generation $1 accepted" "$STACK_DIR/bcd-standin.log"; }
eventually 30 applied "$gen"
ok $? 'bcd applies the stand-in spec'

# one byte flipped in the store: the object under another key, its name the
# good object's digest
cp "$STACK_DIR/obj1" "$STACK_DIR/obj1.bad"
printf '\x58' | dd of="$STACK_DIR/obj1.bad" bs=1 seek=$((size1 / 2)) conv=notrunc 2>/dev/null
cmp -s "$STACK_DIR/obj1" "$STACK_DIR/obj1.bad" && printf '\x59' |
	dd of="$STACK_DIR/obj1.bad" bs=1 seek=$((size1 / 2)) conv=notrunc 2>/dev/null
is "$(code -X PUT -T "$STACK_DIR/obj1.bad" "$(presign put tenant/snap_bad)")" 200 \
	'an object with one byte flipped is in the store'
getbad=$(presign get tenant/snap_bad)
spec_set "$(inst_json inst_rbad "$getbad" "$sha1" "$size1" true fake TestCPU)"
eventually 30 reported inst_rbad 'error SnapshotDigestMismatch'
ok $? 'a flipped byte: the instance fails with SnapshotDigestMismatch'
ok "! grep -q 'id=inst_rbad ' '$ledger'" '... nothing created'
ok "[ ! -e '$snapdir/$sha1' ]" '... no file under the digest'
is "$(parts)" 0 '... no partial file'

spec_set "$(inst_json inst_rrt "$get" "$sha1" "$size1" true libvirt TestCPU),$(inst_json inst_rcpu "$get" "$sha1" "$size1" true fake OtherCPU)"
eventually 30 reported inst_rrt 'error SnapshotRefused: taken on another runtime'
ok $? "another runtime's snapshot: SnapshotRefused"
eventually 30 reported inst_rcpu 'error SnapshotRefused: a memory snapshot of another CPU model'
ok $? "a memory snapshot of another CPU model: SnapshotRefused"
ok "! grep -qE 'id=inst_r(rt|cpu) ' '$ledger'" '... neither created'
ok "[ ! -e '$snapdir/$sha1' ]" '... nothing downloaded for them'

spec_set "$(inst_json inst_r1 "$get" "$sha1" "$size1" true fake TestCPU),$(inst_json inst_r2 "$get" "$sha1" "$size1" true fake TestCPU),$(inst_json inst_rd "$getd" "$shad" "$(stat -c %s "$STACK_DIR/objd")" false fake OtherCPU DESIRED_STOPPED)"
eventually 30 reported inst_r1 running
ok $? 'the good object: restored, running'
eventually 30 reported inst_r2 running
ok $? '... a second restore of it runs too'
ok "grep -q 'op=restored id=inst_r1 from=$inst memory=1' '$ledger'" '... from the source, with its memory'
ok "[ -f '$snapdir/$sha1' ] && [ \"\$(sha256sum <'$snapdir/$sha1' | cut -d' ' -f1)\" = '$sha1' ]" \
	'... data_dir/snapshots/<sha256> holds the verified object'
eventually 30 reported inst_rd stopped
ok $? 'a disk-only snapshot on another CPU model: restored, stopped (boots fresh)'
ok "grep -q 'op=restored id=inst_rd from=$inst memory=0' '$ledger'" '... without memory'

# no spec restores from the memory object any more: it goes
spec_set "$(inst_json inst_rd "$getd" "$shad" "$(stat -c %s "$STACK_DIR/objd")" false fake OtherCPU DESIRED_STOPPED)"
gone() { [ ! -e "$snapdir/$sha1" ]; }
eventually 30 gone
ok $? 'no spec restores from it: data_dir/snapshots/<sha256> removed'
ok "[ -e '$snapdir/$shad' ]" '... the one still restored from stays'

# bcd killed during a download (the slow server's first GET trickles)
shab=$(sha256sum <"$STACK_DIR/big" | cut -d' ' -f1)
spec_set "$(inst_json inst_rbig "$slow/big" "$shab" $((64 * 1024 * 1024)) false fake TestCPU DESIRED_STOPPED)"
partial() { [ "$(parts)" -ge 1 ]; }
eventually 60 partial
ok $? 'a download runs (a .part file in data_dir/snapshots)'
kill -KILL "$bcd_pid"
wait "$bcd_pid" 2>/dev/null
ok "[ \"\$(parts)\" -ge 1 ] && [ ! -e '$snapdir/$shab' ]" 'bcd killed mid-download: a .part, no object'
ok "! grep -q 'id=inst_rbig ' '$ledger'" '... nothing created from it'
start_standin_bcd
eventually 30 grep -q "snapshots: removed $snapdir/.$shab.part" "$STACK_DIR/bcd-standin.log"
ok $? '... its restart removes the partial file'
eventually 120 reported inst_rbig error
ok $? '... then downloads it whole and hands it to the runtime'
like "$(grep '^inst_rbig error' "$events" | tail -1)" 'SnapshotRefused: not a fake runtime snapshot' \
	'... which refuses bytes that are not its snapshot (the digest matched: random bytes)'
ok "[ -f '$snapdir/$shab' ] && [ \"\$(sha256sum <'$snapdir/$shab' | cut -d' ' -f1)\" = '$shab' ]" \
	'... the object under its digest is whole'
is "$(parts)" 0 '... no partial file left'

kill "$slow_pid" 2>/dev/null
kill "$bcd_pid" "$standin" 2>/dev/null
wait "$bcd_pid" "$standin" 2>/dev/null
done_testing
