# guest_trust.t: a real sandbox guest trusts the sandbox SSH CA and
# presents the host certificate the controller made for it. A sandbox is
# created from a template with no user data of its own on the libvirt
# runtime with the real guest image; from the host, with real OpenSSH:
# - a user certificate signed in the test (`ssh-keygen -s` with the
#   deployment's sandbox CA key) for principal sandbox@<instance id> logs in
#   as sandbox and `uname -a` runs;
# - a certificate of the same CA for another instance's principal, and a
#   key without a certificate, are refused;
# - known_hosts holding only "@cert-authority <instance id> <CA key>",
#   HostKeyAlias=<instance id>, StrictHostKeyChecking=yes: the guest's host
#   certificate is accepted, and the same check against another alias or
#   another CA fails (so the acceptance is the certificate's doing).
. "$(dirname "$0")/lib.sh"

e2e_need
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"

W=$STACK_DIR/e2e
mkdir -p "$W"
# the CA key is PKCS#8; this ssh-keygen signs only with an OpenSSH-format key
python3 - "$STACK_DIR/pki/sandbox-ssh-ca.key" "$W/ca" <<'EOF' || bail_out "CA key conversion"
import os, sys
from cryptography.hazmat.primitives import serialization as s
k = s.load_pem_private_key(open(sys.argv[1], "rb").read(), None)
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, k.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))
EOF
ca_pub=$(cat "$STACK_DIR/pki/sandbox-ssh-ca.pub")
ssh-keygen -q -t ed25519 -N '' -C other-ca -f "$W/other-ca" || bail_out "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/user" || bail_out "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/wrong" || bail_out "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/bare" || bail_out "ssh-keygen"

out=$(bcctl --format json sandbox-template create --name e2e-trust --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID") || bail_out "template: $out"
tmpl=$(json_get "$out" id)
out=$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h) || bail_out "sandbox: $out"
sbx=$(json_get "$out" id)
id=$(json_get "$out" instance_id)
like "$sbx" '^sbx_' "a sandbox ($sbx on $id)"
is "$(psql -d bc -XAtq -c "SELECT host_certified FROM instances WHERE id = '$id'")" t \
	'its instance is host-certified'

ssh-keygen -q -s "$W/ca" -I "e2e:$id" -n "sandbox@$id" -V -1m:+30m "$W/user.pub" ||
	bail_out "signing the user certificate"
ssh-keygen -q -s "$W/ca" -I "e2e:wrong" -n "sandbox@inst_0000000000000000000000000a" -V -1m:+30m \
	"$W/wrong.pub" || bail_out "signing the wrong certificate"
printf '@cert-authority %s %s\n' "$id" "$ca_pub" >"$W/known_hosts"
printf '@cert-authority %s %s\n' "$id" "$(cat "$W/other-ca.pub")" >"$W/known_hosts_other"

instance_running() { instance_state_is "$id" running; }
eventually "$E2E_BOOT_TIMEOUT" instance_running
ok $? "its instance runs (state $(instance_state "$id"))"
ip4=$(e2e_instance_json "$id" | jq -r '.nics[0].ipv4 // empty')
like "$ip4" '^10\.214\.' "its address ($ip4)"

# ready: its guest reported up after cloud-init's final stage, whose runcmd
# reloads sshd (a reload re-executes sshd: a connection in that moment is
# refused, so nothing below probes the guest before it)
sbx_ready() { [ "$(json_get "$(bcctl --format json sandbox get "$sbx")" state)" = ready ]; }
eventually "$E2E_BOOT_TIMEOUT" sbx_ready
ok $? 'the sandbox is ready (its guest reported up)'

# ssh_as KEY KNOWN_HOSTS ALIAS CMD...: real OpenSSH, no config file, the
# host checked strictly against KNOWN_HOSTS under ALIAS
ssh_as() {
	local key=$1 kh=$2 alias=$3
	shift 3
	ssh -F none -i "$W/$key" -o IdentitiesOnly=yes -o BatchMode=yes \
		-o UserKnownHostsFile="$kh" -o GlobalKnownHostsFile=/dev/null \
		-o HostKeyAlias="$alias" -o StrictHostKeyChecking=yes -o ConnectTimeout=10 \
		-o LogLevel=ERROR "sandbox@$ip4" "$@"
}
up() { ssh_as user "$W/known_hosts" "$id" 'uname -a' >"$W/uname" 2>"$W/ssh.err"; }
eventually "$E2E_BOOT_TIMEOUT" up
ok $? "ssh with a certificate for sandbox@$id, the host pinned by its certificate: logged in"
if ! up; then
	diag "ssh: $(tail -n 3 "$W/ssh.err")"
	diag "console tail:"
	diag_file "$(e2e_console "$id")" 40
fi
like "$(cat "$W/uname")" '^Linux ' "uname -a runs in the guest ($(cut -c1-60 "$W/uname"))"
is "$(ssh_as user "$W/known_hosts" "$id" 'id -un' 2>/dev/null)" sandbox 'as the sandbox account'

ssh_as wrong "$W/known_hosts" "$id" true 2>"$W/wrong.err"
isnt $? 0 "a certificate of the same CA for another instance's principal is refused"
like "$(cat "$W/wrong.err")" 'Permission denied' '... by the guest (Permission denied)'
ssh_as bare "$W/known_hosts" "$id" true 2>"$W/bare.err"
isnt $? 0 'a key without a certificate is refused'

ssh_as user "$W/known_hosts" inst_0000000000000000000000000a true 2>"$W/alias.err"
isnt $? 0 'the host certificate checked under another alias: refused'
like "$(cat "$W/alias.err")" 'Host key verification failed' '... by the client (Host key verification failed)'
ssh_as user "$W/known_hosts_other" "$id" true 2>"$W/other.err"
isnt $? 0 'against another CA: refused'
like "$(cat "$W/other.err")" 'Host key verification failed' '... by the client'
ssh-keyscan -c -t ecdsa "$ip4" 2>/dev/null >"$W/scan"
like "$(cat "$W/scan")" 'ecdsa-sha2-nistp256-cert-v01@openssh.com' 'the guest offers an ECDSA host certificate'
# (ssh-keyscan -c prints certificates without the host name)
awk '{ for (i = 1; i < NF; i++) if ($i ~ /-cert-v01@openssh\.com$/) { print $i " " $(i + 1); exit } }' \
	"$W/scan" >"$W/scan-cert.pub"
like "$(ssh-keygen -L -f "$W/scan-cert.pub" 2>&1)" "Principals: 
 *$id" '... naming its instance'

bcctl sandbox delete "$sbx" >/dev/null
ok $? "the sandbox is deleted"
gone() {
	local st
	st=$(instance_state "$id")
	[ -z "$st" ] || [ "$st" = deleted ]
}
eventually 180 gone
ok $? "its instance is gone"
done_testing
