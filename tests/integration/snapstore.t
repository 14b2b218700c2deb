#!/bin/bash
# snapstore.t: the snapshot store (controller/snapstore.c, snapstore_cmd.c,
# common/sigv4.c) against a real S3-compatible server that checks
# signatures (tests/lib/s3.sh: s3rver):
# - without the secret, `snapshot-store check` says to run set-secret; the
#   secret is never taken from the command line; set-secret seals it (a
#   secret_refs row of kind snapshot-store-key in the root tenant, hidden
#   from the Secrets API) and check then round-trips a probe object;
# - a presigned PUT uploads with curl and the presigned GET reads the same
#   bytes back; the server refuses the URL with any one character of its
#   signature changed (all 64 tried), with its date, expiry or credential
#   changed, for another key (an object that exists), and once it expired;
# - the signed DELETE removes the object; a DELETE of an object already
#   gone counts as done;
# - a wrong secret: check fails saying the key is refused; the right one
#   again: it passes;
# - an http endpoint is INVALID_CONFIG (snapshot-store-insecure) without
#   the test-only switch, and with it on a host that is not loopback; serve
#   refuses to start with it; no endpoint: no-snapshot-store;
# - over https (s3rver with a test CA): check passes with
#   snapshot_store_ca_file and no test switch, and fails without the CA;
# - the secret is in no log, no config file, no command output, and not in
#   sealed_blobs in the clear (the access key id, grepped the same way, is
#   found: the grep can fail).
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/s3.sh"

stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
s3_up "$STACK_DIR/s3" snaps || bail_out "s3rver did not start"
secret=$(cat "$S3_SECRET_FILE")

q() { psql -d bc -XAtq -c "$1"; }
conf=$STACK_DIR/store.conf
cp "$STACK_DIR/ctl-1.conf" "$conf" || bail_out "no controller config"
{
	echo "snapshot_store_endpoint = $S3_ENDPOINT"
	echo "snapshot_store_bucket = $S3_BUCKET"
	echo "snapshot_store_path_style = 1"
	echo "snapshot_store_prefix = bc/sandboxes/"
	echo "snapshot_store_access_key_id = $S3_ACCESS_KEY_ID"
	echo "snapshot_store_allow_http_loopback_for_tests = 1"
} >>"$conf"
out_dir=$STACK_DIR/out
mkdir -p "$out_dir"
n_out=0
# st ARGS...: bc-controller snapshot-store ARGS with the store's config;
# stdout+stderr in $out (kept under out/ for the final grep), status in $rc
st() {
	n_out=$((n_out + 1))
	out=$("$BC_BIN/bc-controller" snapshot-store "$@" --config "$conf" 2>&1)
	rc=$?
	printf '%s\n' "$out" >"$out_dir/$n_out.txt"
}
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# ---------------------------------------------------------------- secret
st check
isnt "$rc" 0 'check fails before the secret is set'
like "$out" 'run bc-controller snapshot-store set-secret' '... and says to run set-secret'
st set-secret "$secret" </dev/null
isnt "$rc" 0 'set-secret refuses a secret on the command line'
like "$out" 'never from the command line' '... and says why'
st set-secret </dev/null
is "$rc" 1 'set-secret refuses an empty standard input'
st set-secret <"$S3_SECRET_FILE"
is "$rc" 0 'set-secret reads the secret from standard input'
like "$out" 'version 1' '... version 1'
is "$(q "SELECT count(*) FROM secret_refs WHERE tenant_id = 'root' AND kind = 'snapshot-store-key'")" 1 \
	'the secret is recorded as kind snapshot-store-key in the root tenant'
is "$(q "SELECT count(*) FROM sealed_blobs b JOIN secret_refs s ON s.sealed_ref = b.ref
	WHERE s.kind = 'snapshot-store-key' AND b.scheme = 'envelope-v1'")" 1 '... sealed as an envelope'
out=$(bcctl --format json secret list --tenant root 2>&1)
unlike "$out" 'snapshot-store' 'Secrets.List does not show it'

st check
is "$rc" 0 'check passes against s3rver' || diag "$out"
like "$out" 'head +ok' '... HEAD bucket'
like "$out" 'put +ok' '... presigned PUT'
like "$out" 'get +ok' '... presigned GET of the same bytes'
like "$out" 'delete +ok' '... signed DELETE'
like "$out" 'gone +ok' '... and the probe is gone'
is "$(find "$S3_DIR/data/$S3_BUCKET" -type f -name '*bc-check*' 2>/dev/null | wc -l)" 0 \
	'no probe object is left in the bucket'

# ------------------------------------------------------ presigned URLs
head -c 300000 /dev/urandom >"$STACK_DIR/obj"
st presign put "acme/snap_one" --ttl 120
is "$rc" 0 'presign put'
put=$out
like "$put" "^$S3_ENDPOINT/$S3_BUCKET/bc/sandboxes/acme/snap_one\\?X-Amz-Algorithm=AWS4-HMAC-SHA256&" \
	'... path-style, the prefix before the key'
is "$(code -X PUT -T "$STACK_DIR/obj" "$put")" 200 'curl uploads with the presigned PUT'
st presign get "acme/snap_one" --ttl 120
get=$out
curl -s -o "$STACK_DIR/obj.back" "$get"
cmp -s "$STACK_DIR/obj" "$STACK_DIR/obj.back"
ok $? 'the presigned GET reads the same bytes back'
is "$(code "$get")" 200 'the untampered URL works (control)'

# every character of the signature changed in turn
sig=${get##*X-Amz-Signature=}
base=${get%X-Amz-Signature=*}
refused=0
for ((i = 0; i < ${#sig}; i++)); do
	c=${sig:i:1}
	d=0
	[ "$c" = 0 ] && d=1
	[ "$(code "${base}X-Amz-Signature=${sig:0:i}$d${sig:i+1}")" = 403 ] && refused=$((refused + 1))
done
is "$refused" 64 'a URL with any one character of its signature changed is refused (64 of 64)'
is "$(code "${get/X-Amz-Date=2/X-Amz-Date=1}")" 403 'a URL with its date changed is refused'
is "$(code "${get/X-Amz-Expires=120/X-Amz-Expires=121}")" 403 'a URL with its expiry changed is refused'
is "$(code "${get/X-Amz-Credential=$S3_ACCESS_KEY_ID/X-Amz-Credential=${S3_ACCESS_KEY_ID}X}")" 403 \
	'a URL with its credential changed is refused'

# another key: an object that exists
st presign put "acme/snap_two"
is "$(code -X PUT -T "$STACK_DIR/obj" "$out")" 200 'a second object is uploaded'
is "$(code "${get/snap_one/snap_two}")" 403 "a URL for another key is refused"
is "$(code -X PUT -T "$STACK_DIR/obj" "${put/snap_one/snap_two}")" 403 \
	"an upload URL for another key is refused"

# expiry: a 1 s URL, tried once the clock is past its end
st presign get "acme/snap_one" --ttl 1
short=$out
d=${short##*X-Amz-Date=}
d=${d%%&*}
end=$(($(date -u -d "${d:0:4}-${d:4:2}-${d:6:2}T${d:9:2}:${d:11:2}:${d:13:2}Z" +%s) + 1))
past_end() { [ "$(date +%s)" -gt $((end + 1)) ]; }
eventually 30 past_end
ok $? 'the clock passed the 1 s URL'"'"'s end'
is "$(code "$short")" 403 'an expired URL is refused'
curl -s "$short" | grep -q 'Request has expired'
ok $? '... as expired'

# ---------------------------------------------------------------- DELETE
st delete "acme/snap_one"
is "$rc" 0 'the signed DELETE succeeds'
st presign get "acme/snap_one"
is "$(code "$out")" 404 'the object is gone'
st delete "acme/snap_one"
is "$rc" 0 'a DELETE of an object already gone counts as done'
st delete "../escape"
isnt "$rc" 0 'a key with a .. segment is refused'

# ---------------------------------------------------------- wrong secret
printf 'not-the-secret\n' >"$STACK_DIR/wrong"
st set-secret <"$STACK_DIR/wrong"
like "$out" 'version 2' 'set-secret again rotates (version 2)'
is "$(q "SELECT count(*) FROM sealed_blobs b WHERE b.owner_kind = 'secret' AND b.tenant_id = 'root'")" 1 \
	'... and the old sealed blob is gone'
st check
is "$rc" 1 'check fails with a wrong secret'
like "$out" 'head +FAILED: HTTP 403, refused: the access key id or secret access key is wrong' \
	'... saying the store refused the key'
st set-secret <"$S3_SECRET_FILE"
st check
is "$rc" 0 'the right secret again: check passes'

# ---------------------------------------------------------------- config
sed 's/^snapshot_store_allow_http_loopback_for_tests = 1$/snapshot_store_allow_http_loopback_for_tests = 0/' \
	"$conf" >"$STACK_DIR/insecure.conf"
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$STACK_DIR/insecure.conf" 2>&1)
isnt $? 0 'an http endpoint without the test switch: check fails'
like "$out" 'must be https' '... saying it must be https'
sed "s|^snapshot_store_endpoint = .*|snapshot_store_endpoint = http://10.1.2.3:$S3_PORT|" \
	"$conf" >"$STACK_DIR/remote.conf"
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$STACK_DIR/remote.conf" 2>&1)
isnt $? 0 'an http endpoint on a host that is not loopback: refused even with the switch'
like "$out" 'must be https' '... saying it must be https'
sed "s|^listen = .*|listen = 127.0.0.1:$(free_tcp_port)|" "$STACK_DIR/insecure.conf" \
	>"$STACK_DIR/serve.conf"
out=$(timeout 60 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/serve.conf" 2>&1)
isnt $? 0 'serve refuses to start with an insecure store'
like "$out" 'snapshot_store_endpoint must be https' '... naming the key'
grep -v '^snapshot_store_endpoint' "$conf" >"$STACK_DIR/none.conf"
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$STACK_DIR/none.conf" 2>&1)
like "$out" 'no snapshot store is configured' 'no endpoint: no snapshot store'
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$conf" \
	--snapshot-store-bucket 'b.dotted' --snapshot-store-path-style 0 2>&1)
like "$out" 'has a dot' 'a dotted bucket needs path-style'

# ------------------------------------------------------------- https
# the same over https, as deployed: no test switch, the server's CA given
# by snapshot_store_ca_file, and refused without it
s3_down
http_secret_file=$S3_SECRET_FILE http_data=$S3_DIR/data
s3_up "$STACK_DIR/s3tls" snaps --tls || bail_out "s3rver over https did not start"
secret2=$(cat "$S3_SECRET_FILE")
tls=$STACK_DIR/tls.conf
grep -v '^snapshot_store_' "$conf" >"$tls"
{
	echo "snapshot_store_endpoint = $S3_ENDPOINT"
	echo "snapshot_store_bucket = $S3_BUCKET"
	echo "snapshot_store_path_style = 1"
	echo "snapshot_store_access_key_id = $S3_ACCESS_KEY_ID"
	echo "snapshot_store_ca_file = $S3_CA_FILE"
} >>"$tls"
out=$("$BC_BIN/bc-controller" snapshot-store set-secret --config "$tls" <"$S3_SECRET_FILE" 2>&1)
ok $? 'the https store'"'"'s secret is set'
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$tls" 2>&1)
is $? 0 'check passes against s3rver over https with its CA file, no test switch' || diag "$out"
out=$("$BC_BIN/bc-controller" snapshot-store presign put "tls/obj" --config "$tls" 2>&1)
is "$(code --cacert "$S3_CA_FILE" -X PUT -T "$STACK_DIR/obj" "$out")" 200 'an https presigned PUT uploads'
grep -v '^snapshot_store_ca_file' "$tls" >"$STACK_DIR/tls-noca.conf"
out=$("$BC_BIN/bc-controller" snapshot-store check --config "$STACK_DIR/tls-noca.conf" 2>&1)
isnt $? 0 'without the CA file the store'"'"'s certificate is not trusted: check fails'
like "$out" 'head +FAILED: the store did not answer' '... saying the store did not answer'

# ------------------------------------------------------------ no leaks
# every file of the stack and of PostgreSQL (heap and WAL, written out),
# but the server's own copy of the secret and its stored objects
pgdir=$(cat "$STACK_DIR/pgdir" 2>/dev/null || echo "$STACK_DIR/pg")
q 'CHECKPOINT' >/dev/null && q 'SELECT pg_switch_wal()' >/dev/null && q 'CHECKPOINT' >/dev/null
holders() {
	grep -rlaF -- "$1" "$STACK_DIR" "$pgdir" 2>/dev/null |
		grep -v -e "^$http_secret_file\$" -e "^$http_data/" -e "^$S3_SECRET_FILE\$" \
			-e "^$S3_DIR/data/" | sort -u
}
{ holders "$secret"; holders "$secret2"; } >"$STACK_DIR/leaks"
is "$(wc -l <"$STACK_DIR/leaks")" 0 \
	'the secret is in no log, config, output or PostgreSQL file (heap, WAL)' ||
	diag_file "$STACK_DIR/leaks" 10
holders "$S3_ACCESS_KEY_ID" | grep -q 'tls.conf$'
ok $? '... where the access key id is found the same way (control)'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE position(convert_to('$secret', 'UTF8') in data) > 0
	OR position(convert_to('$secret2', 'UTF8') in data) > 0")" 0 \
	'sealed_blobs does not hold the secrets in the clear'
done_testing
