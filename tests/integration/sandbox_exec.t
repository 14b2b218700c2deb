# sandbox_exec.t: Sandboxes.Exec on a real controller (fake runtime), from
# an independent gRPC client (@grpc/grpc-js) and bcctl: every field of the
# grant; the user certificate as ssh-keygen -L reads it (type, principal
# <account>@<instance>, key id bc:<identity>:<sandbox>:ssh_<id>, serial,
# validity at most the minutes asked and never past the sandbox's expiry,
# permit-pty alone, signed by the deployment's sandbox CA); tunnel.issued
# and sandbox.exec.issued with their keys; the refusals (a malformed key,
# minutes outside 1..15, another tenant's sandbox, no exec permission, a
# sandbox being deleted, a deployment without the CA) each leave no
# tunnels row; and the ticket: a ticket nobody issued is refused, and one
# already presented is refused the second time, on either replica.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 2 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create exec-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
bcctl tenant create other >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
bob=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name bob)")
B=$(json_get "$(bcctl --format json token create --identity "$bob")" token)
eve=$(jid "$(bcctl --format json identity create --tenant other --kind user --name eve)")
E=$(json_get "$(bcctl --format json token create --identity "$eve")" token)
pol() { printf '%s' "$3" >"$STACK_DIR/p.json"; jid "$(bcctl --format json policy create --tenant "$1" --name "$2" --file "$STACK_DIR/p.json")"; }
p=$(pol acme all '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}')
bcctl policy attach "$p" --identity "$alice" >/dev/null
p=$(pol acme tunnels '{"effect":"allow","actions":["compute:tunnels:*"],"resources":["compute-sandbox/*"]}')
bcctl policy attach "$p" --identity "$alice" >/dev/null
p=$(pol acme noexec '{"effect":"allow","actions":["compute:sandboxes:read","compute:sandboxes:create"],"resources":["*"]}')
bcctl policy attach "$p" --identity "$bob" >/dev/null
p=$(pol other all '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}')
bcctl policy attach "$p" --identity "$eve" >/dev/null

tmpl=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox-template create --name x --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"
s=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox create --template "$tmpl" --ttl 30m --wait 20s)")
like "$s" '^sbx_' 'a sandbox'
inst=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s'")
eventually 30 eval "[ \"\$(q \"SELECT state FROM sandboxes WHERE id = '$s'\")\" = ready ]"
ok $? 'it is ready'

ssh-keygen -q -t ed25519 -N '' -C 'alice@laptop' -f "$STACK_DIR/id" || bail_out "ssh-keygen"
pub=$(cat "$STACK_DIR/id.pub")
# exec_call TOKEN REPLICA JSON: Sandboxes.Exec from @grpc/grpc-js
exec_call() {
	BC_TOKEN=$1 node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url "$2")" "$BC_CA_FILE" - - \
		bc/compute/v1/sandboxes.proto bc.compute.v1.Sandboxes Exec "$3"
}
tunnels() { q "SELECT count(*) FROM tunnels"; }

# -- the grant
before=$(date +%s)
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\", \"minutes\": 5}")
ok $? "alice's exec is granted"
f() { printf '%s' "$g" | jq -r ".$1"; }
is "$(f sandbox_id) $(f instance_id) $(f node_id)" "$s $inst $(agent_node_id 1)" 'it names the sandbox, its instance and node'
like "$(f tunnel_id)" '^tun_[0-9a-z]+$' 'a tunnel id'
like "$(f ticket)" '^bctk_[0-9a-f]{64}$' 'a ticket'
is "$(f path)" "tunnels/connect?tunnel=$(f tunnel_id)&ticket=$(f ticket)" 'the WebSocket path names the ticket'
exp=$(f expires_at)
ok "[ $exp -ge $((before * 1000 + 59000)) ] && [ $exp -le $(( $(date +%s) * 1000 + 61000)) ]" 'the ticket lives 60 s'
is "$(f account) $(f principal)" "sandbox sandbox@$inst" 'account sandbox, principal sandbox@<instance>'
like "$(f key_id)" "^bc:$alice:$s:ssh_[0-9a-z]+\$" 'key id bc:<identity>:<sandbox>:ssh_<id>'
is "$(f host_principal) $(f host_certificate) $(f host_certified)" "$inst valid true" \
	'the guest has a host certificate for its instance: valid, hostCertified'
is "$(q "SELECT host_certified FROM instances WHERE id = '$inst'")" t 'instances.host_certified'
is "$(f ca_public_key | cut -d' ' -f1-2)" "$(cut -d' ' -f1-2 "$STACK_DIR/pki/sandbox-ssh-ca.pub")" \
	"the CA key is the deployment's sandbox CA"
f certificate | sed "/^$/d" >"$STACK_DIR/id-cert.pub"
L=$(ssh-keygen -L -f "$STACK_DIR/id-cert.pub")
like "$L" 'Type: ssh-ed25519-cert-v01@openssh.com user certificate' 'ssh-keygen reads a user certificate'
like "$L" "Key ID: \"$(f key_id)\"" 'with the key id'
like "$L" "Serial: $(f serial)" 'and the serial'
like "$L" "Principals:[[:space:]]+sandbox@$inst[[:space:]]" 'for the principal'
ext=$(printf '%s\n' "$L" | sed -n '/Extensions:/,$p' | sed 1d | awk 'NF { print $1 }' | tr '\n' ' ')
is "$ext" 'permit-pty ' 'permit-pty and nothing else'
printf '%s\n' "$L" | grep -qF "Signing CA: ED25519 $(ssh-keygen -lf "$STACK_DIR/pki/sandbox-ssh-ca.pub" | awk '{ print $2 }')"
ok $? 'signed by the sandbox CA'
vb=$(f valid_before)
ok "[ $vb -le $(( $(date +%s) * 1000 + 300000)) ] && [ $vb -ge $((before * 1000 + 290000)) ]" \
	'valid for the 5 minutes asked'
is "$(q "SELECT count(*) FROM tunnels WHERE id = '$(f tunnel_id)' AND identity_id = '$alice' AND opened_at IS NULL")" 1 \
	'the tunnels row records the grant, not yet opened'
ok "! q 'SELECT ticket_hash FROM tunnels' | grep -q '$(f ticket | cut -c6-)'" 'the ticket itself is not stored'
is "$(event_keys tunnel.issued "instance/$inst")" 'nodeId,sandboxId,tunnelId' 'tunnel.issued: its keys, about the instance'
is "$(event_keys sandbox.exec.issued "sandbox/$s")" 'instanceId,keyId,principal,sandboxId,serial,tunnelId,validBefore' \
	'sandbox.exec.issued: its keys, about the sandbox'
out=$(bcctl --format json events list --tenant acme --type sandbox.exec)
is "$(printf '%s' "$out" | jq -r '.items[0].data' | jq -r .keyId)" "$(f key_id)" 'the tenant sees sandbox.exec.issued in its events'

# default lifetime 10 minutes, and never past the sandbox's expiry
g=$(exec_call "$A" 2 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
vb=$(f valid_before)
ok "[ $vb -gt $(( $(date +%s) * 1000 + 590000)) ] && [ $vb -le $(( $(date +%s) * 1000 + 600000)) ]" \
	'no minutes: 10 (through the other replica)'
q "UPDATE sandboxes SET expires_at = now() + interval '3 minutes' WHERE id = '$s'" >/dev/null
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\", \"minutes\": 15}")
sx=$(q "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM sandboxes WHERE id = '$s'")
ok "[ $(f valid_before) -le $sx ]" 'a certificate never outlives its sandbox'
q "UPDATE sandboxes SET expires_at = now() + interval '30 minutes' WHERE id = '$s'" >/dev/null

# -- refusals: the code, and no row left
n0=$(tunnels)
refused() { # TOKEN JSON CODE_NUM MSG
	local out
	out=$(exec_call "$1" 1 "$2")
	is "$(printf '%s' "$out" | jq -r .code)" "$3" "$4"
}
refused "$A" "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\", \"minutes\": 16}" 3 'minutes 16: INVALID_INPUT'
refused "$A" "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\", \"minutes\": -1}" 3 'minutes -1: INVALID_INPUT'
refused "$A" "{\"sandbox_id\": \"$s\", \"public_key\": \"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ x\"}" 3 \
	'an RSA key: INVALID_INPUT'
refused "$A" "{\"sandbox_id\": \"$s\", \"public_key\": \"ssh-ed25519 AAAA\"}" 3 'a truncated key: INVALID_INPUT'
refused "$A" "{\"sandbox_id\": \"$s\"}" 3 'no key: INVALID_INPUT'
refused "$A" "{\"sandbox_id\": \"sbx_00000000000000000000000000\", \"public_key\": \"$pub\"}" 5 'an unknown sandbox: NOT_FOUND'
refused "$E" "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}" 5 "another tenant's sandbox: NOT_FOUND"
refused "$B" "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}" 7 'without compute:sandboxes:exec: PERMISSION_DENIED'
out=$(BC_TOKEN=$A bcctl --format json sandbox exec "$s" --key "$STACK_DIR/id" --minutes 16 -- true 2>&1)
like "$out" 'minutes' 'bcctl refuses --minutes 16 before calling'
out=$(BC_TOKEN=$B bcctl --format json sandbox exec "$s" --key "$STACK_DIR/id" -- true 2>/dev/null)
is "$(printf '%s' "$out" | jq -r .error.code)" ACCESS_DENIED 'bcctl shows the refusal'
# a certificate within a minute of its end is expired; a guest never
# certified (made before certifyHostKey) has none, and bcctl refuses it
hcv=$(q "SELECT host_cert_valid_before FROM instances WHERE id = '$inst'")
q "UPDATE instances SET host_cert_valid_before = now() + interval '50 seconds' WHERE id = '$inst'" >/dev/null
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
is "$(f host_certificate) $(f host_certified)" 'expired false' 'a host certificate 50 s from its end: expired'
q "UPDATE instances SET host_certified = false WHERE id = '$inst'" >/dev/null
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
is "$(f host_certificate) $(f host_certified)" 'none false' 'a guest never certified: none'
out=$(BC_TOKEN=$A bcctl --format json sandbox exec "$s" --key "$STACK_DIR/id" -- true 2>/dev/null)
is "$(printf '%s' "$out" | jq -r .error.code) $(printf '%s' "$out" | jq -r .error.message | grep -c accept-host-key)" \
	'INVALID_STATE 1' 'bcctl refuses a guest without a host certificate, naming --accept-host-key'
q "UPDATE instances SET host_certified = true, host_cert_valid_before = '$hcv' WHERE id = '$inst'" >/dev/null
is "$(tunnels)" "$((n0 + 3))" 'the refused calls left no tunnels row (the grants above made three)'

# -- the ticket
frame() { printf '{"ticket": "%s"}' "$1"; }
out=$(node "$BC_SRC/tests/integration/tunnel_connect.js" "$(ctl_url 1)" "$BC_CA_FILE" "$(frame bctk_0000)" 2>&1)
like "$out" '"code":16' 'a ticket nobody issued: UNAUTHENTICATED'
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
t=$(f ticket)
out=$(node "$BC_SRC/tests/integration/tunnel_connect.js" "$(ctl_url 2)" "$BC_CA_FILE" "$(frame "$t")" 2>&1)
unlike "$out" '"code":16' "the ticket is taken on the other replica ($out)"
is "$(q "SELECT opened_at IS NOT NULL FROM tunnels WHERE id = '$(f tunnel_id)'")" t 'and spent'
is "$(event_keys tunnel.opened "instance/$inst")" 'replica,sandboxId,tunnelId' 'tunnel.opened keys'
eventually 10 eval "[ \"\$(event_keys tunnel.closed instance/$inst)\" != '(none)' ]"
is "$(event_keys tunnel.closed "instance/$inst")" 'reason,sandboxId,tunnelId' 'tunnel.closed keys'
out=$(node "$BC_SRC/tests/integration/tunnel_connect.js" "$(ctl_url 1)" "$BC_CA_FILE" "$(frame "$t")" 2>&1)
like "$out" '"code":16' 'presented again: UNAUTHENTICATED'
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
q "UPDATE tunnels SET ticket_expires_at = now() - interval '1 second' WHERE id = '$(f tunnel_id)'" >/dev/null
out=$(node "$BC_SRC/tests/integration/tunnel_connect.js" "$(ctl_url 1)" "$BC_CA_FILE" "$(frame "$(f ticket)")" 2>&1)
like "$out" '"code":16' 'an expired ticket: UNAUTHENTICATED'

# -- Tunnels.List / Close
out=$(BC_TOKEN=$A bcctl --format json sandbox tunnels "$s" --all)
ok "[ $(printf '%s' "$out" | jq '.items | length') -ge 4 ]" 'sandbox tunnels --all lists the grants'
out=$(BC_TOKEN=$B bcctl --format json sandbox close-tunnels "$s" 2>/dev/null)
is "$(printf '%s' "$out" | jq -r .error.code)" ACCESS_DENIED 'closing needs compute:tunnels:close'
g=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}")
out=$(BC_TOKEN=$A bcctl --format json sandbox close-tunnels "$s" --tunnel "$(f tunnel_id)")
is "$(printf '%s' "$out" | jq -r '.items[0].state')" closed 'an unused grant closes at once'
out=$(node "$BC_SRC/tests/integration/tunnel_connect.js" "$(ctl_url 1)" "$BC_CA_FILE" "$(frame "$(f ticket)")" 2>&1)
like "$out" '"code":16' 'and its ticket no longer opens'

# -- retention: a tunnel closed longer ago than events_retention_seconds goes
old=$(q "SELECT id FROM tunnels WHERE closed_at IS NOT NULL LIMIT 1")
q "UPDATE tunnels SET closed_at = now() - interval '31 days' WHERE id = '$old'" >/dev/null
n_open=$(q "SELECT count(*) FROM tunnels WHERE closed_at IS NULL")
purged() { [ "$(q "SELECT count(*) FROM tunnels WHERE id = '$old'")" = 0 ]; }
eventually 75 purged
ok $? 'a tunnels row closed 31 days ago is purged by the retention pass'
is "$(q "SELECT count(*) FROM tunnels WHERE closed_at IS NULL")" "$n_open" 'rows still open or young stay'

# -- a sandbox being deleted, then a deployment without the CA
BC_TOKEN=$A bcctl sandbox delete "$s" >/dev/null
n0=$(tunnels)
refused "$A" "{\"sandbox_id\": \"$s\", \"public_key\": \"$pub\"}" 9 'a deleting sandbox: FAILED_PRECONDITION (INVALID_STATE)'
mv "$STACK_DIR/pki/sandbox-ssh-ca.key" "$STACK_DIR/pki/sandbox-ssh-ca.key.off"
ctl_kill 1 TERM
ctl_start 1 || bail_out "controller did not restart"
s2=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox create --template "$tmpl" --wait 20s)")
out=$(exec_call "$A" 1 "{\"sandbox_id\": \"$s2\", \"public_key\": \"$pub\"}")
is "$(printf '%s' "$out" | jq -r .code)" 12 'no sandbox CA: UNIMPLEMENTED (UNSUPPORTED)'
like "$(cat "$STACK_DIR/ctl-1.log")" 'Sandboxes.Exec is unsupported' 'the replica said so at start'
is "$(tunnels)" "$n0" 'and left no row'
mv "$STACK_DIR/pki/sandbox-ssh-ca.key.off" "$STACK_DIR/pki/sandbox-ssh-ca.key"

done_testing
