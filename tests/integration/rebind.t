# rebind.t: a memory restore's own identity (controller/rebind.c,
# agent/rebind.c; docs/snapshots.md "A restore's own SSH identity",
# docs/rebind.md) on the fake runtime, with a real
# S3-compatible store (s3rver) for the snapshots.
# - a memory restore gets a sealed bundle (instances.identity_rebind_ref,
#   rebind_cert_valid_before) and its host's spec names it; while its
#   guest refuses the bundle (the fake's all.fail hook) it shows
#   identityRebound false, its instance reports the reason, exec into it
#   is refused restore-shares-identity and so is exec into its source;
# - once the guest acknowledges (the hook gone, bcd's retry), bcd records
#   it in data_dir/instances-rebound.json and reports it, and the sandbox
#   shows identityRebound true (get, list, the CLI's table); the archive
#   bcd handed the runtime holds the restore's own principal, network (its
#   MAC and address) and a host certificate for it signed by the sandbox
#   CA; exec into it is granted for principal sandbox@<its instance>,
#   hostPrincipal itself; exec into the source is granted again;
# - bcd killed while the guest has not yet answered (all.slow) and
#   started again completes the rebind exactly once, and a later restart
#   does not repeat it;
# - a disk-only restore and a plain sandbox show no identityRebound.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"
. "$(dirname "$0")/../lib/s3.sh"

S3D=$(mktemp -d /tmp/bc-rebind-s3.XXXXXX) || bail_out "no temp dir"
[ "${BC_KEEP_STACK:-0}" = 1 ] || tap_on_exit rm -rf "$S3D"
s3_up "$S3D" snaps || bail_out "s3rver did not start"
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
$(s3_store_conf)"
export BC_NODE_LOST_SECONDS=600
export BC_AGENT_LABELS=cpu.model=TestCPU
export BC_AGENT_EXTRA_CONF='snapshot_store_allow_http_loopback_for_tests = 1'
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
CONF=$STACK_DIR/ctl-1.conf
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$CONF" <"$S3_SECRET_FILE" >/dev/null 2>&1 ||
	bail_out "set-secret"
img=$(stack_image_create rebind-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
T=$BC_TOKEN
FAKE=$STACK_DIR/agent-1/fake
ledger=$FAKE/ledger.log
RECORD=$STACK_DIR/agent-1/data/instances-rebound.json
mkdir -p "$FAKE"

tmpl=$(jid "$(bcctl --format json sandbox-template create --name rb --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"
s1=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --wait 20s)")
[ -n "$s1" ] || bail_out "no sandbox"
i1=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s1'")
snap_ready() { [ "$(q "SELECT state FROM sandbox_snapshots WHERE id = '$1'")" = ready ]; }
pm=$(jid "$(bcctl --format json sandbox snapshot "$s1" --keep)")
eventually 60 snap_ready "$pm"
ok $? 'a memory snapshot of the source'

ssh-keygen -q -t ed25519 -N '' -f "$S3D/id" || bail_out "ssh-keygen"
pub=$(cat "$S3D/id.pub")
ex() { echo "{\"sandboxId\":\"$1\",\"publicKey\":\"$pub\"}"; }
get() { api "$T" sandboxes/get "{\"sandboxId\":\"$1\"}" | sed '$d'; }
rebound() { get "$1" | jq -r 'if has("identityRebound") then .identityRebound else "absent" end'; }
rebound_is() { [ "$(rebound "$1")" = "$2" ]; }
rebinds_of() { grep -c "op=rebind id=$1 " "$ledger" 2>/dev/null; }
restore() { bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$1" --wait 20s; }

# ------------------------------------------------ a guest refusing the bundle
echo rebind >"$FAKE/all.fail"
out=$(restore "$pm") || fail 'restore'
r1=$(jid "$out")
ri1=$(json_get "$out" instance_id)
is "$(json_get "$out" state)" ready 'a memory restore: ready'
ref1=$(q "SELECT identity_rebind_ref FROM instances WHERE id = '$ri1'")
like "$ref1" '^sealed_' 'its identity bundle is sealed (identity_rebind_ref)'
is "$(q "SELECT rebind_cert_valid_before > now() + interval '1 hour' FROM instances WHERE id = '$ri1'")" t \
	'... with a host certificate (rebind_cert_valid_before)'
is "$(q "SELECT owner_kind || ' ' || owner_id FROM sealed_blobs WHERE ref = '$ref1'")" "instance $ri1" \
	"... in the sealed store, owned by the restore's instance"
spec_has_ref() { grep -qa "$ref1" "$STACK_DIR/agent-1/spec.pb"; }
eventually 20 spec_has_ref
ok $? "the host's spec names the bundle (InstanceSpec.identity_rebind_ref)"
unlike "$(get "$r1")" "$ref1" 'no answer shows the ref'
refused_reason() { q "SELECT reason FROM instances WHERE id = '$ri1'" | grep -q '^IdentityRebind: '; }
eventually 30 refused_reason
ok $? "the refusal is reported with the instance: $(q "SELECT reason FROM instances WHERE id = '$ri1'")"
is "$(q "SELECT state FROM instances WHERE id = '$ri1'")" running '... which stays running'
is "$(rebound "$r1")" false 'identityRebound false while its guest refuses the bundle'
is "$(rebinds_of "$ri1")" 0 '... no rebind acknowledged'
ok "! grep -q '$ri1' '$RECORD' 2>/dev/null" '... and none recorded'
api_refused "$T" sandboxes/exec "$(ex "$r1")" 409 INVALID_STATE reason=restore-shares-identity \
	'exec into the restore: refused while its source lives'
api_refused "$T" sandboxes/exec "$(ex "$s1")" 409 INVALID_STATE reason=restore-shares-identity \
	'exec into the source: refused while the restore shares its identity'
hint=$(bcctl sandbox exec "$r1" --key "$S3D/id" -- true 2>&1)
like "$hint" 'identityRebound: true' "bcctl sandbox exec's hint on restore-shares-identity"

# ------------------------------------------------ acknowledged
rm -f "$FAKE/all.fail"
eventually 90 rebound_is "$r1" true
ok $? 'bcd tries again: identityRebound true once the guest acknowledges'
is "$(rebinds_of "$ri1")" 1 '... one rebind on the fake runtime'
ok "grep -q '\"$ri1\": \"$ref1\"' '$RECORD'" "... recorded in instances-rebound.json"
is "$(q "SELECT identity_rebound_at IS NOT NULL AND host_certified AND host_cert_valid_before =
	rebind_cert_valid_before FROM instances WHERE id = '$ri1'")" t \
	"the controller set identity_rebound_at and the bundle's host certificate"
no_reason() { [ -z "$(q "SELECT reason FROM instances WHERE id = '$ri1'")" ]; }
eventually 20 no_reason
ok $? '... and the reason is gone'
mkdir "$S3D/tar"
tar -xf "$FAKE/$ri1.rebind.tar" -C "$S3D/tar" || fail 'untar'
is "$(cat "$S3D/tar/principals")" "sandbox@$ri1" "the archive's principals name the restore"
is "$(cat "$S3D/tar/account")" sandbox '... the account'
mac=$(q "SELECT mac::text FROM instances WHERE id = '$ri1'")
ip=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$ri1'")
gw=$(q "SELECT host(ipam_gateway) FROM pools WHERE id = '$POOL_ID'")
like "$(cat "$S3D/tar/network")" "^mac $mac
ipv4 $ip/[0-9]+
gateway4 $gw" "... its own network: its MAC, address and gateway"
cert=$(ssh-keygen -L -f "$S3D/tar/host_key-cert.pub" 2>&1)
like "$cert" "Type: .*host certificate" '... a host certificate'
like "$cert" "Principals: *
 *$ri1" '... naming the restore'
ssh-keygen -y -f "$S3D/tar/host_key" >"$S3D/k.pub" 2>/dev/null
kfp=$(ssh-keygen -lf "$S3D/k.pub" | awk '{print $2}')
is "$(printf '%s\n' "$cert" | sed -n 's/^ *Public key: ECDSA-CERT //p')" "$kfp" '... for the private key beside it'
out=$(api "$T" sandboxes/exec "$(ex "$r1")")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'exec into the rebound restore: granted'
g=$(printf '%s\n' "$out" | sed '$d')
is "$(printf '%s' "$g" | jq -r '.principal + " " + .hostPrincipal + " " + (.hostCertified | tostring)')" \
	"sandbox@$ri1 $ri1 true" "... for the restore's own principal, its host certified"
out=$(api "$T" sandboxes/exec "$(ex "$s1")")
printf '%s\n' "$g" | jq -r .caPublicKey >"$S3D/ca.pub"
ca_fp=$(ssh-keygen -lf "$S3D/ca.pub" | awk '{print $2}')
is "$(printf '%s\n' "$cert" | sed -n 's/^ *Signing CA: [A-Z0-9]* \([^ ]*\) .*/\1/p')" "$ca_fp" \
	"the archive's host certificate is signed by the sandbox CA"
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'exec into the source: granted again'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .principal)" "sandbox@$i1" '... for its own principal'
is "$(bcctl --format json sandbox list | jq -r ".items[] | select(.id == \"$r1\") | .identityRebound // .identity_rebound")" true \
	'list shows it too'
like "$(bcctl sandbox list | grep "$r1")" ' yes *$' "the CLI's table: REBOUND yes"
like "$(bcctl sandbox get "$r1")" 'identity_rebound: *true' "bcctl sandbox get shows it"

# ------------------------------------------------ bcd killed before the answer
echo 'rebind=600000' >"$FAKE/all.slow"
slows() { grep -c 'op=slow id=all wait=rebind' "$ledger" 2>/dev/null; }
n0=$(slows)
out=$(restore "$pm") || fail 'restore 2'
r2=$(jid "$out")
ri2=$(json_get "$out" instance_id)
slow_begun() { [ "$(slows)" -gt "$n0" ]; }
eventually 30 slow_begun
ok $? "the second restore's rebind is under way (its guest has not answered)"
is "$(rebound "$r2")" false '... identityRebound false meanwhile'
api_refused "$T" sandboxes/exec "$(ex "$r2")" 409 INVALID_STATE reason=restore-shares-identity \
	'... and exec refused restore-shares-identity (its source lives)'
agent_kill 1 KILL
rm -f "$FAKE/all.slow"
agent_start 1 || bail_out "bcd did not start again"
eventually 60 rebound_is "$r2" true
ok $? 'a restarted bcd completes the rebind'
is "$(rebinds_of "$ri2")" 1 '... once'
agent_kill 1 TERM
agent_start 1 || bail_out "bcd did not start again"
stack_wait_nodes_ready 1 >/dev/null 2>&1
sleep 3
is "$(rebinds_of "$ri2") $(rebinds_of "$ri1")" '1 1' 'another restart repeats no finished rebind'
is "$(rebound "$r2") $(rebound "$r1")" 'true true' '... both stay rebound'

# ------------------------------------------------ no identityRebound
pd=$(jid "$(bcctl --format json sandbox snapshot "$s1" --keep --no-memory)")
eventually 60 snap_ready "$pd"
ok $? 'a disk-only snapshot'
out=$(restore "$pd") || fail 'restore disk-only'
r3=$(jid "$out")
is "$(rebound "$r3")" absent 'a disk-only restore has no identityRebound'
is "$(q "SELECT identity_rebind_ref IS NULL FROM instances WHERE id = '$(json_get "$out" instance_id)'")" t \
	'... and no bundle'
is "$(rebound "$s1")" absent '... nor a plain sandbox'
unlike "$(bcctl sandbox get "$s1")" 'identity_rebound' "... (bcctl sandbox get shows none)"
like "$(bcctl sandbox list | grep "$r3")" ' - *$' "the CLI's table: REBOUND -"

# the bundle goes with its instance
bcctl sandbox delete "$r1" >/dev/null
gone() { [ "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$ref1'")" = 0 ]; }
eventually 60 gone
ok $? "deleting the restore deletes its sealed bundle"

done_testing
