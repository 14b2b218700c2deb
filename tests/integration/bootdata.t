# bootdata.t: an instance's user data is rendered, sealed and handed only to
# its own node. Two fake agents over mTLS; Node.GetBootData is called with
# each node's own client certificate by an independent gRPC client
# (grpc_call.js, @grpc/grpc-js):
# - the create renders a MIME multipart (the platform's cloud-config with
#   the hostname and SSH keys, then the caller's script, byte for byte),
#   seals it in sealed_blobs (an envelope: the clear text is not stored),
#   and instances.user_data stays empty;
# - the instance's node gets it; the other node, a wrong ref, a malformed
#   request, a caller without a node certificate, and the instance once
#   deleted get nothing (NOT_FOUND / INVALID_ARGUMENT / UNAUTHENTICATED);
# - a sandbox template's user data is checked the same way;
# - the deletion removes the sealed blob;
# - user data of an unknown type or over 64 KiB is INVALID_INPUT and leaves
#   no row behind.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 2 || bail_out "stack_up failed"
img=$(stack_image_create boot-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }

# boot N INSTANCE REF: GetBootData as agent N; sets OUT and RC
boot() {
	local dir=$STACK_DIR/agent-$1
	OUT=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$2\", \"ref\": \"$3\"}" 2>"$STACK_DIR/node.err")
	RC=$?
	[ -s "$STACK_DIR/node.err" ] && diag "$(cat "$STACK_DIR/node.err")"
}

key='ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6CbootdataKey alice "laptop"'
printf '#!/bin/sh\necho bc-boot-marker > /var/tmp/marker\n' >"$STACK_DIR/ud.sh"
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--ssh-key "$key" --user-data-file "$STACK_DIR/ud.sh") || bail_out "create failed: $out"
id=$(json_get "$out" id)
node=$(json_get "$out" node_id)
[ -n "$node" ]
ok $? 'the instance is placed'
if [ "$node" = "$(agent_node_id 1)" ]; then own=1 other=2; else own=2 other=1; fi
eventually 30 instance_state_is "$id" running
ok $? 'it runs'

ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$id'")
like "$ref" '^sealed_' 'the instance names its sealed user data'
is "$(q "SELECT user_data FROM instances WHERE id = '$id'")" '' 'instances.user_data is not written'
is "$(q "SELECT owner_kind || ' ' || owner_id || ' ' || tenant_id FROM sealed_blobs WHERE ref = '$ref'")" \
	"instance $id root" 'the blob belongs to the instance and its tenant'

# -- its own node gets it
boot "$own" "$id" "$ref"
is "$RC" 0 'the instance'\''s node gets its boot data'
printf '%s' "$OUT" | jq -r .user_data | base64 -d >"$STACK_DIR/mime"
is "$(q "SELECT scheme FROM sealed_blobs WHERE ref = '$ref'")" envelope-v1 'the blob is stored as an envelope'
q "SELECT encode(data, 'base64') FROM sealed_blobs WHERE ref = '$ref'" | base64 -d >"$STACK_DIR/stored"
ok "! grep -q bc-boot-marker '$STACK_DIR/stored'" '... which does not hold the user data in the clear'
ok "grep -q bc-boot-marker '$STACK_DIR/mime'" '... while what the node gets does'
parts=$(python3 - "$STACK_DIR/mime" <<'EOF'
import email, sys
m = email.message_from_bytes(open(sys.argv[1], 'rb').read())
print(m.get_content_type())
for p in m.get_payload():
    print('--', p.get_content_type())
    sys.stdout.write(p.get_payload(decode=True).decode())
EOF
)
like "$parts" '^multipart/mixed' 'a MIME multipart'
like "$parts" "-- text/cloud-config
#cloud-config" 'first the platform'\''s cloud-config'
like "$parts" "hostname: \"${id/_/-}\"" 'hostname: the instance id'
like "$parts" 'ssh_authorized_keys:
  - "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6CbootdataKey alice \\"laptop\\""' \
	'the SSH key, quotes escaped'
like "$parts" "-- text/x-shellscript
#!/bin/sh
echo bc-boot-marker > /var/tmp/marker" 'then the caller'\''s script, typed by its first line'

# -- nobody else does
boot "$other" "$id" "$ref"
is "$RC" 1 'another node is refused'
is "$(printf '%s' "$OUT" | jq -r .code)" 5 '... NOT_FOUND'
boot "$own" "$id" "sealed_01jdzq3m5n8p9r7s6t5v4w3x2y"
is "$(printf '%s' "$OUT" | jq -r .code)" 5 'a wrong ref: NOT_FOUND'
boot "$own" "$id" ""
is "$(printf '%s' "$OUT" | jq -r .code)" 3 'an empty ref: INVALID_ARGUMENT'
boot "$own" "inst_x" "$ref"
is "$(printf '%s' "$OUT" | jq -r .code)" 3 'a malformed instance id: INVALID_ARGUMENT'
OUT=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" - - \
	bc/node/v1/node.proto bc.node.v1.Node GetBootData "{\"instance_id\": \"$id\", \"ref\": \"$ref\"}")
is "$(printf '%s' "$OUT" | jq -r .code)" 16 'without a node certificate: UNAUTHENTICATED'

# a second instance on the other node: its ref does not open the first one
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
id2=$(json_get "$out" id)
ref2=$(q "SELECT user_data_ref FROM instances WHERE id = '$id2'")
like "$ref2" '^sealed_' 'an instance without user data still has boot data (the platform part)'
isnt "$ref2" "$ref" '... of its own'
boot "$own" "$id" "$ref2"
is "$(printf '%s' "$OUT" | jq -r .code)" 5 'another instance'\''s ref: NOT_FOUND'

# -- deleted: gone, and nobody gets it
bcctl instance delete "$id" >/dev/null
boot "$own" "$id" "$ref"
is "$(printf '%s' "$OUT" | jq -r .code)" 5 'an instance being deleted: NOT_FOUND'
eventually 30 instance_state_is "$id" deleted
ok $? 'the deletion finishes'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$ref'")" 0 'its sealed user data is deleted with it'
boot "$own" "$id" "$ref"
is "$(printf '%s' "$OUT" | jq -r .code)" 5 'a deleted instance: NOT_FOUND'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$ref2'")" 1 'the other instance keeps its own'

# -- refusals leave nothing behind
snapshot() {
	q "SELECT (SELECT count(*) FROM instances), (SELECT count(*) FROM sealed_blobs),
		(SELECT count(*) FROM ip_leases), (SELECT count(*) FROM allocations),
		(SELECT count(*) FROM events), (SELECT count(*) FROM authz_resources)"
}
before=$(snapshot)
printf 'echo no type\n' >"$STACK_DIR/untyped"
bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--user-data-file "$STACK_DIR/untyped" >/dev/null 2>"$STACK_DIR/err"
is "$?" 2 'user data of no known type: INVALID_INPUT (exit 2)'
like "$(cat "$STACK_DIR/err")" 'field: userData' '... details.field userData'
like "$(cat "$STACK_DIR/err")" 'reason: user-data-type' '... details.reason user-data-type'
bcctl sandbox-template create --name tpl --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--user-data-file "$STACK_DIR/untyped" >/dev/null 2>"$STACK_DIR/err"
is "$?" 2 'a sandbox template with such user data: INVALID_INPUT (exit 2)'
like "$(cat "$STACK_DIR/err")" 'reason: user-data-type' '... the same check as an instance'\''s'
# past bcctl's own check: straight over gRPC
{ printf '#cloud-config\n#'; head -c 65522 /dev/zero | tr '\0' 'a'; } >"$STACK_DIR/big"
is "$(wc -c <"$STACK_DIR/big")" 65537 'user data of 65,537 bytes'
OUT=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" - - \
	bc/compute/v1/instances.proto bc.compute.v1.Instances Create \
	"$(jq -n --rawfile u "$STACK_DIR/big" --arg p "$POOL_ID" --arg f "$FLAVOR_NAME" --arg i "$img" \
		'{pool_id: $p, flavor: $f, image_id: $i, user_data: $u}')")
is "$(printf '%s' "$OUT" | jq -r .code)" 3 'over 64 KiB: INVALID_ARGUMENT'
like "$(printf '%s' "$OUT" | jq -r .details)" 'larger than 65536 bytes' '... saying why'
bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--ssh-key "ssh-ed25519 $(head -c 9000 /dev/zero | tr '\0' 'A')" >/dev/null 2>"$STACK_DIR/err"
is "$?" 2 'an SSH key line over 8 KiB: INVALID_INPUT'
is "$(snapshot)" "$before" 'refused creates leave no row in any table'

done_testing
