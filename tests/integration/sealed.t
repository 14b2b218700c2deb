# sealed.t: encryption at rest of the sealed store (controller/sealed.c,
# common/envelope.c, controller/kek.c), through the real stack:
# - init made the key-encryption key file, mode 0600;
# - the canary: user data carrying a random canary is rendered and sealed
#   for an instance; after a CHECKPOINT and a WAL switch the canary is in
#   none of PostgreSQL's data directory files (heap and WAL) and in no log
#   of the stack, while the same grep finds it where it legitimately is (the
#   file we wrote, what the instance's node receives) and finds a control
#   value written in the clear to a table (so the bytes really were flushed
#   and the grep can fail);
# - an envelope copied to another row, or its row's tenant changed, does
#   not open, and the refusal is logged by ref without the bytes;
# - a key appended to the file is picked up by both running replicas for
#   new blobs while the old key id still opens the old ones; `secrets
#   rotate-kek` rewraps every data key online (creates on both replicas
#   keep succeeding meanwhile) and every instance's boot data is still the
#   same bytes;
# - a lost key file: the blob's key id is named in the log; restoring the
#   file makes it open again without a restart; a file made readable by
#   others while serve runs is not read (the keys read before are kept,
#   said once);
# - serve refuses a key file readable by others, a missing file (naming
#   `secrets init-kek`) and plain rows (naming `secrets migrate`); migrate
#   seals them in place (the boot data is the same bytes, the table's files
#   no longer hold them) and serve starts again.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 2 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create sealed-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
# blobs uncompressed in this test's database (PostgreSQL compresses a
# value over ~2 KB, as every instance's user data now is): a string
# stored plain must be findable in the files, or the canary checks below
# could pass because of compression alone
q "ALTER TABLE sealed_blobs ALTER COLUMN data SET STORAGE EXTERNAL" >/dev/null ||
	bail_out "sealed_blobs storage"
ctl() { "$BC_BIN/bc-controller" "$@" --config "$STACK_DIR/ctl-1.conf"; }
kek=$STACK_DIR/pki/kek.keys
pgdir=$(cat "$STACK_DIR/pgdir" 2>/dev/null || echo "$STACK_DIR/pg")

# boot INSTANCE: Node.GetBootData as agent 1; the user data into
# STACK_DIR/boot.INSTANCE (empty when refused),
# the gRPC code (0 = answered) into CODE
boot() {
	local dir=$STACK_DIR/agent-1 ref out
	ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$1'")
	if out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$dir/ca.pem" \
		"$dir/node.pem" "$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$ref\"}" 2>"$STACK_DIR/node.err"); then
		CODE=0
		printf '%s' "$out" | jq -r .user_data | base64 -d >"$STACK_DIR/boot.$1"
	else
		CODE=$(printf '%s' "$out" | jq -r .code)
		: >"$STACK_DIR/boot.$1"
	fi
}
create() { # [USER_DATA_FILE]: an instance id, made through replica ${REPLICA:-1}
	local out
	out=$(bcctl_n "${REPLICA:-1}" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" ${1:+--user-data-file "$1"}) || return 1
	json_get "$out" id
}
# on_disk: flush everything PostgreSQL holds to its files
on_disk() {
	q "CHECKPOINT" && q "SELECT pg_switch_wal()" >/dev/null && q "CHECKPOINT"
}
# holders STRING: the files of the stack (its dir, PostgreSQL's data
# directory, WAL and log) that contain STRING, one a line, sorted
holders() {
	grep -rlaF -- "$1" "$STACK_DIR" "$pgdir" 2>/dev/null | sort -u
}

# -- the key file
is "$(stat -c %a "$kek")" 600 'init made the key-encryption key file, mode 0600'
kek0=$(awk '/^kek_/ { print $1 }' "$kek")
like "$kek0" '^kek_[0-9a-z]{26}$' '... with one key id'
is "$(grep -c '^kek_' "$kek")" 1 '... one key'

# -- the canary
canary="bc-canary-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
control="bc-control-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
printf '#!/bin/sh\necho %s > /var/tmp/canary\n' "$canary" >"$STACK_DIR/ud-canary.sh"
i1=$(create "$STACK_DIR/ud-canary.sh")
like "$i1" '^inst_' 'an instance with the canary in its user data'
eventually 30 instance_state_is "$i1" running
ok $? '... runs'
boot "$i1"
is "$CODE" 0 'its node gets its boot data'
ok "grep -qF '$canary' '$STACK_DIR/boot.$i1'" '... which carries the canary'
cp "$STACK_DIR/boot.$i1" "$STACK_DIR/canary.mime"
is "$(q "SELECT scheme || ' ' || kek_id FROM sealed_blobs b JOIN instances i ON i.user_data_ref = b.ref WHERE i.id = '$i1'")" \
	"envelope-v1 $kek0" 'the blob is an envelope under the current key'
q "CREATE TABLE canary_control (v text); INSERT INTO canary_control VALUES ('$control')"
on_disk
ok $? 'CHECKPOINT, WAL switch, CHECKPOINT'
h=$(holders "$control")
like "$h" "$pgdir/data/base/" 'control: a value stored in the clear is found in the data directory'
like "$h" "$pgdir/data/pg_wal/" '... and in the WAL'
h=$(holders "$canary")
is "$h" "$(printf '%s\n' "$STACK_DIR/boot.$i1" "$STACK_DIR/canary.mime" "$STACK_DIR/ud-canary.sh" | sort)" \
	'the canary is only in the file we wrote and what the node received: no table, WAL segment or log'
[ -n "$h" ] && diag "files holding the canary: ${h//$'\n'/ }"

# -- an envelope moved to another row, or to another tenant, does not open
i2=$(create)
eventually 30 instance_state_is "$i2" running
ok $? 'a second instance runs'
boot "$i2"
is "$CODE" 0 '... its node gets its boot data'
cp "$STACK_DIR/boot.$i2" "$STACK_DIR/i2.mime"
r1=$(q "SELECT user_data_ref FROM instances WHERE id = '$i1'")
r2=$(q "SELECT user_data_ref FROM instances WHERE id = '$i2'")
saved=$(q "SELECT encode(data, 'hex') FROM sealed_blobs WHERE ref = '$r2'")
q "UPDATE sealed_blobs SET data = (SELECT data FROM sealed_blobs WHERE ref = '$r1') WHERE ref = '$r2'"
boot "$i2"
is "$CODE" 13 "the first instance's envelope copied into the second's row: refused (INTERNAL)"
ok "! grep -qF '$canary' '$STACK_DIR/boot.$i2'" '... nothing of it is handed out'
ok "grep -q 'sealed $r2: refused: the envelope does not open' '$STACK_DIR/ctl-1.log'" \
	'... and the controller logs the refusal by ref'
q "UPDATE sealed_blobs SET data = decode('$saved', 'hex') WHERE ref = '$r2'"
q "UPDATE sealed_blobs SET tenant_id = 'acme' WHERE ref = '$r1'"
boot "$i1"
is "$CODE" 13 'a blob whose row names another tenant: refused'
q "UPDATE sealed_blobs SET tenant_id = 'root' WHERE ref = '$r1'"
boot "$i1"
is "$CODE" 0 'control: back in its own tenant, it opens'
cmp -s "$STACK_DIR/boot.$i1" "$STACK_DIR/canary.mime"
ok $? '... to the same bytes'
boot "$i2"
is "$CODE" 0 '... and so does the second, its own envelope restored'

# -- a key appended by hand is used for new blobs; the old id still opens
printf 'kek_manual %s\n' "$(openssl rand -hex 32)" >>"$kek"
i3=$(create)
is "$(q "SELECT b.kek_id FROM sealed_blobs b JOIN instances i ON i.user_data_ref = b.ref WHERE i.id = '$i3'")" \
	kek_manual 'the running serve seals new blobs under the key appended to the file'
ok "grep -q 'key-encryption keys read again from $kek (2 keys, current kek_manual)' '$STACK_DIR/ctl-1.log'" \
	'... logging the reload by key id'
i3b=$(REPLICA=2 create)
is "$(q "SELECT b.kek_id FROM sealed_blobs b JOIN instances i ON i.user_data_ref = b.ref WHERE i.id = '$i3b'")" \
	kek_manual '... and so does the other replica'
ok "grep -q 'key-encryption keys read again from $kek (2 keys, current kek_manual)' '$STACK_DIR/ctl-2.log'" \
	'... which logs its reload too'
boot "$i1"
is "$CODE" 0 'a blob under the old key id still opens before any rewrap'
eventually 30 instance_state_is "$i3" running
boot "$i3"
is "$CODE" 0 '... and so does the new one'

# -- rotate-kek, online: creates go on meanwhile
(
	for n in 1 2 3 4 5 6; do
		REPLICA=$((n % 2 + 1)) create >>"$STACK_DIR/during.ids" ||
			echo FAILED >>"$STACK_DIR/during.ids"
	done
) &
bg=$!
ctl secrets rotate-kek >"$STACK_DIR/rotate.out" 2>"$STACK_DIR/rotate.err"
is "$?" 0 'bc-controller secrets rotate-kek succeeds while serve runs'
wait "$bg"
kek2=$(awk '/^kek_/ { k = $1 } END { print k }' "$kek")
like "$(cat "$STACK_DIR/rotate.out")" "new current key-encryption key: $kek2" '... naming the new key'
like "$(cat "$STACK_DIR/rotate.out")" 'rewrapped [0-9]+ data keys; 0 blobs left under older keys' \
	'... rewrapping every data key'
is "$(grep -c FAILED "$STACK_DIR/during.ids")" 0 'every create made during the rotation succeeded'
is "$(grep -c '^inst_' "$STACK_DIR/during.ids")" 6 '... all six, on both replicas'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE kek_id IS DISTINCT FROM '$kek2'")" 0 \
	'every blob is now under the new key'
is "$(grep -c '^kek_' "$kek")" 3 'the file keeps the old keys (for backups of the database taken before)'
is "$(stat -c %a "$kek")" 600 '... mode 0600'
ok "! grep -qaF '$(sed -n "s/^$kek2 //p" "$kek")' '$STACK_DIR/rotate.out' '$STACK_DIR/rotate.err' '$STACK_DIR/ctl-1.log'" \
	'the new key itself is in no output or log'
bad=0
for id in "$i1" "$i2" "$i3" "$i3b" $(grep '^inst_' "$STACK_DIR/during.ids"); do
	boot "$id"
	[ "$CODE" = 0 ] || { bad=$((bad + 1)); diag "boot data of $id: code $CODE"; }
done
is "$bad" 0 'every instance still gets its boot data after the rotation'
boot "$i1"
cmp -s "$STACK_DIR/boot.$i1" "$STACK_DIR/canary.mime"
ok $? '... the same bytes'
out=$(ctl secrets status)
like "$out" "key $kek2 current" 'secrets status names the current key'
like "$out" "blobs $kek2 [0-9]+" '... and counts its blobs'

# -- a lost key file
mv "$kek" "$STACK_DIR/kek.saved"
ctl secrets init-kek >"$STACK_DIR/initkek.out" 2>&1
like "$(cat "$STACK_DIR/initkek.out")" "created $kek" 'secrets init-kek makes a new file when it is missing'
boot "$i1"
is "$CODE" 13 'a blob whose key is not in the (new) file does not open'
ok "grep -q 'sealed $r1: its data key is wrapped by key id $kek2, which is not in the key-encryption key file' '$STACK_DIR/ctl-1.log'" \
	'... and the log names its key id'
cp -p "$STACK_DIR/kek.saved" "$kek"
boot "$i1"
is "$CODE" 0 'the file restored from a backup: it opens again, without a restart'

chmod 0644 "$kek"
boot "$i1"
boot "$i2"
boot "$i1"
is "$CODE" 0 'a key file made readable by others while serve runs: the keys read before are kept'
is "$(grep -c "sealed: keeping the keys read before from $kek" "$STACK_DIR/ctl-1.log")" 1 \
	'... saying so once, not at every use'
like "$(cat "$STACK_DIR/ctl-1.log")" "$kek is readable by others than its owner" '... and why'
chmod 0600 "$kek"

# -- serve refuses what it cannot keep sealed
ctl_kill 1 TERM
chmod 0644 "$kek"
timeout 60 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-1.conf" >"$STACK_DIR/serve.out" 2>&1
is "$?" 1 'serve refuses a key file readable by others'
like "$(cat "$STACK_DIR/serve.out")" 'readable by others than its owner' '... saying so'
chmod 0600 "$kek"
mv "$kek" "$STACK_DIR/kek.saved"
timeout 60 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-1.conf" >"$STACK_DIR/serve.out" 2>&1
is "$?" 1 'serve refuses to start without the key file'
like "$(cat "$STACK_DIR/serve.out")" 'run bc-controller secrets init-kek' '... naming the command that makes one'
mv "$STACK_DIR/kek.saved" "$kek"
ctl_start 1
ok $? 'with the file back, serve starts'

# a deployment from before: one blob stored plain (what 0003..0012 wrote)
plain="bc-plain-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
printf '#!/bin/sh\necho %s\n' "$plain" >"$STACK_DIR/ud-plain.sh"
i4=$(create "$STACK_DIR/ud-plain.sh")
boot "$i4"
cp "$STACK_DIR/boot.$i4" "$STACK_DIR/plain.mime"
r4=$(q "SELECT user_data_ref FROM instances WHERE id = '$i4'")
q "UPDATE sealed_blobs SET scheme = 'plain', kek_id = NULL, data = decode('$(od -An -tx1 -v "$STACK_DIR/plain.mime" | tr -d ' \n')', 'hex') WHERE ref = '$r4'"
on_disk
like "$(holders "$plain")" "$pgdir/data/base/" 'control: a plain row is found in the data directory'
ctl_kill 1 TERM
timeout 60 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-1.conf" >"$STACK_DIR/serve.out" 2>&1
is "$?" 1 'serve refuses to start while a blob is stored plain'
like "$(cat "$STACK_DIR/serve.out")" '1 sealed blobs are still stored plain: run bc-controller secrets migrate' \
	'... naming the command to run'
out=$(ctl secrets migrate 2>&1)
like "$out" 'sealed 1 plain blobs' 'secrets migrate seals it'
is "$(q "SELECT scheme || ' ' || kek_id FROM sealed_blobs WHERE ref = '$r4'")" "envelope-v1 $kek2" \
	'... in place, under the current key'
on_disk
unlike "$(holders "$plain")" "$pgdir/data/base/" '... and the table'\''s files no longer hold it'
ctl_start 1
ok $? 'serve starts again'
boot "$i4"
cmp -s "$STACK_DIR/boot.$i4" "$STACK_DIR/plain.mime"
ok $? 'the migrated blob opens to the same bytes'

# -- every log, once more
h=$(grep -laF -- "$canary" "$STACK_DIR"/*.log "$pgdir"/*.log 2>/dev/null)
is "$h" '' 'at the end, no log of the stack holds the canary'
done_testing
