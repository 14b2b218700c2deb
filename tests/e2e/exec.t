# exec.t: run code inside real sandboxes (libvirt, the real guest image)
# through the whole path: Sandboxes.Exec, the tunnel gateway on a replica,
# bcd's Agent.Tunnel, the guest's sshd, with stock OpenSSH and scp.
#
#   - `bcctl sandbox exec SBX -- uname -a` prints the guest's kernel, as
#     the sandbox account; stdin is piped through; the exit status is ssh's;
#   - `bcctl sandbox cp` round-trips a 10 MiB file and a directory byte for
#     byte;
#   - the guest trusts only what it should: sandbox A's certificate is
#     refused by sandbox B's sshd, an expired certificate and one from
#     another CA are refused, and with the host certificate checked a guest
#     presenting another guest's host key is refused;
#   - the grant on one replica, the tunnel on the other (ssh with the
#     independent @grpc/grpc-js client as its ProxyCommand);
#   - a replayed ticket is refused;
#   - a policy withdrawn during a session closes it within 70 s, and
#     deleting the sandbox closes a session.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/sshd.sh"

e2e_need
e2e_up --controllers 2 --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }

W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
CA=$STACK_DIR/pki/sandbox-ssh-ca

# alice may exec; her token is the one bcctl uses below
bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}' >"$W/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$W/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null
abc() { BC_TOKEN=$A bcctl "$@"; }
abc2() { BC_TOKEN=$A bcctl_n 2 "$@"; }

out=$(bcctl --format json sandbox-template create --tenant acme --name e2e-exec --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID") || bail_out "template: $out"
tmpl=$(jid "$out")
mk() { jid "$(abc --format json sandbox create --template "$tmpl" --ttl 1h)"; }
sa=$(mk)
sb=$(mk)
like "$sa $sb" '^sbx_[0-9a-z]+ sbx_[0-9a-z]+$' "two sandboxes ($sa, $sb)"
ia=$(q "SELECT instance_id FROM sandboxes WHERE id = '$sa'")
ib=$(q "SELECT instance_id FROM sandboxes WHERE id = '$sb'")
ready() { [ "$(q "SELECT state FROM sandboxes WHERE id = '$1'")" = ready ]; }
eventually "$E2E_BOOT_TIMEOUT" ready "$sa" && eventually "$E2E_BOOT_TIMEOUT" ready "$sb"
ok $? 'both are ready'
guest_ip() { q "SELECT host(address) FROM ip_leases WHERE instance_id = '$1' LIMIT 1"; }
ipa=$(guest_ip "$ia")
ipb=$(guest_ip "$ib")
like "$ipa $ipb" '^10\.214\.[0-9.]+ 10\.214\.[0-9.]+$' "their guest addresses ($ipa, $ipb)"

EX=(exec --key "$W/key")
# the guest is up once its sshd answers with our certificate and cloud-init
# is done (its last stage reloads sshd, which drops new connections for a
# moment)
up() { abc sandbox "${EX[@]}" "$1" -- cloud-init status --wait 2>>"$W/up.err" </dev/null >/dev/null; }
eventually "$E2E_BOOT_TIMEOUT" up "$sa"
ok $? 'bcctl sandbox exec reaches sandbox A (its sshd trusts the sandbox CA)'
if ! up "$sa"; then
	diag "$(tail -n 5 "$W/up.err")"
	diag_file "$(e2e_console "$ia")" 40
fi
eventually "$E2E_BOOT_TIMEOUT" up "$sb"
ok $? 'and sandbox B'

out=$(abc sandbox "${EX[@]}" "$sa" -- uname -a </dev/null)
like "$out" '^Linux ' "uname -a prints the guest's kernel ($out)"
is "$(abc sandbox "${EX[@]}" "$sa" -- id -un </dev/null)" sandbox 'as the sandbox account'
# the seed's gateway4 becomes ifupdown's own gateway line in the guest (a
# 0.0.0.0/0 route needed net-tools, which the image lacks: no default route)
like "$(abc sandbox "${EX[@]}" "$sa" -- ip -4 route show default </dev/null)" \
	"^default via $BC_POOL_GATEWAY " "the guest's default route is the pool's gateway"
is "$(abc sandbox "${EX[@]}" "$sa" -- hostname </dev/null)" "$(abc sandbox "${EX[@]}" "$sa" -- hostname </dev/null)" \
	'twice the same guest'
is "$(printf 'hello\nfrom stdin\n' | abc sandbox "${EX[@]}" "$sa" -- tr a-z A-Z)" "$(printf 'HELLO\nFROM STDIN')" \
	'stdin is piped through'
abc sandbox "${EX[@]}" "$sa" -- 'exit 7' </dev/null
is $? 7 "bcctl exits with the command's status"
out=$(abc sandbox "${EX[@]}" "$sa" -- -oProxyCommand=touch\ /tmp/bc-e2e-pwned </dev/null 2>&1)
ok "[ ! -e /tmp/bc-e2e-pwned ]" 'a command word like -oProxyCommand=... never runs here'
cert_state=$(q "SELECT host_certified FROM instances WHERE id = '$ia'")
is "$cert_state" t 'the guest has a host certificate (certifyHostKey)'

# -- files both ways
head -c 10485760 /dev/urandom >"$W/big"
mkdir -p "$W/tree/sub" && printf 'a' >"$W/tree/one" && head -c 70000 /dev/urandom >"$W/tree/sub/two"
abc sandbox cp --key "$W/key" "$W/big" "$sa:/tmp/big" </dev/null
ok $? 'cp uploads a 10 MiB file'
abc sandbox cp --key "$W/key" "$sa:/tmp/big" "$W/big.back" </dev/null
cmp -s "$W/big" "$W/big.back"
ok $? 'and it comes back byte for byte'
abc sandbox cp --key "$W/key" --recursive "$W/tree" "$sa:/tmp/" </dev/null &&
	abc sandbox cp --key "$W/key" --recursive "$sa:/tmp/tree" "$W/tree.back" </dev/null
diff -r "$W/tree" "$W/tree.back" >/dev/null
ok $? 'a directory round-trips'

# -- what the guest trusts (from the host, which may reach port 22)
grant() { # SBX: a grant for our key, through the independent client
	BC_TOKEN=$A node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url 1)" "$BC_CA_FILE" - - \
		bc/compute/v1/sandboxes.proto bc.compute.v1.Sandboxes Exec \
		"{\"sandbox_id\": \"$1\", \"public_key\": \"$(cat "$W/key.pub")\"}"
}
ga=$(grant "$sa")
printf '%s' "$ga" | jq -r .certificate >"$W/a-cert.pub"
direct() { # IP CERT: ssh from the host straight to the guest's sshd
	ssh -F none -i "$W/key" -o CertificateFile="$2" -o IdentitiesOnly=yes -o BatchMode=yes \
		-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
		-o ConnectTimeout=10 "sandbox@$1" true </dev/null 2>>"$W/direct.err"
}
direct "$ipa" "$W/a-cert.pub"
ok $? "control: A's certificate opens A's sshd from the host"
direct "$ipb" "$W/a-cert.pub"
isnt $? 0 "A's certificate is refused by B's sshd"
ssh-keygen -q -t ed25519 -N '' -f "$W/otherca" && cp "$W/key.pub" "$W/o.pub" &&
	ssh-keygen -q -s "$W/otherca" -I other -n "sandbox@$ia" -V -1m:+5m "$W/o.pub"
direct "$ipa" "$W/o-cert.pub"
isnt $? 0 'a certificate from another CA is refused'
sandbox_ca_openssh "$W/ca" &&
	cp "$W/key.pub" "$W/x.pub" && ssh-keygen -q -s "$W/ca" -I expired -n "sandbox@$ia" -V -10m:-5m "$W/x.pub"
direct "$ipa" "$W/x-cert.pub"
isnt $? 0 'an expired certificate is refused'
printf '@cert-authority %s %s\n' "$ia" "$(cut -d' ' -f1-2 "$CA.pub")" >"$W/kh"
pinned() { # IP ALIAS
	ssh -F none -i "$W/key" -o CertificateFile="$W/a-cert.pub" -o IdentitiesOnly=yes -o BatchMode=yes \
		-o StrictHostKeyChecking=yes -o UserKnownHostsFile="$W/kh" -o GlobalKnownHostsFile="$W/kh" \
		-o HostKeyAlias="$2" -o LogLevel=ERROR -o ConnectTimeout=10 "sandbox@$1" true </dev/null 2>>"$W/pin.err"
}
pinned "$ipa" "$ia"
ok $? "A's host certificate is accepted for A (@cert-authority $ia)"
pinned "$ipb" "$ia"
isnt $? 0 "B's host key is refused where A is expected"

# -- the grant on replica 1, the tunnel on replica 2, through grpc-js
ga=$(grant "$sa")
printf '%s' "$ga" | jq -r .certificate >"$W/a-cert.pub"
printf '@cert-authority %s %s\n' "$ia" "$(printf '%s' "$ga" | jq -r .ca_public_key | cut -d' ' -f1-2)" >"$W/kh2"
PC="node $BC_SRC/tests/integration/tunnel_connect.js $(ctl_url 2) $BC_CA_FILE '{\"ticket\":\"$(printf '%s' "$ga" | jq -r .ticket)\"}' stdin"
out=$(ssh -F none -i "$W/key" -o CertificateFile="$W/a-cert.pub" -o IdentitiesOnly=yes -o BatchMode=yes \
	-o StrictHostKeyChecking=yes -o UserKnownHostsFile="$W/kh2" -o HostKeyAlias="$ia" \
	-o ProxyCommand="$PC" -o LogLevel=ERROR sandbox@tunnel hostname </dev/null 2>"$W/r2.err")
ok "[ -n '$out' ]" "the grant from replica 1 opens a tunnel on replica 2 ($out)"
out=$(ssh -F none -i "$W/key" -o CertificateFile="$W/a-cert.pub" -o IdentitiesOnly=yes -o BatchMode=yes \
	-o StrictHostKeyChecking=yes -o UserKnownHostsFile="$W/kh2" -o HostKeyAlias="$ia" \
	-o ProxyCommand="$PC" -o LogLevel=ERROR sandbox@tunnel hostname </dev/null 2>&1)
isnt $? 0 'the same ticket again is refused'
like "$(tail -n 2 "$W/r2.err" 2>/dev/null; printf '%s' "$out")" '"code":16' '(UNAUTHENTICATED)'

# -- revocation: a withdrawn policy closes an open session within 70 s
abc sandbox "${EX[@]}" "$sa" -- sleep 600 </dev/null >/dev/null 2>&1 &
sess=$!
eventually 30 eval "[ \"\$(q \"SELECT count(*) FROM tunnels WHERE sandbox_id = '$sa' AND opened_at IS NOT NULL AND closed_at IS NULL\")\" -ge 1 ]"
ok $? 'a long session is open'
bcctl policy detach "$pol" --identity "$alice" >/dev/null
t0=$(date +%s)
gone_pid() { ! kill -0 "$sess" 2>/dev/null; }
eventually 75 gone_pid
rc=$?
took=$(($(date +%s) - t0))
ok $rc "withdrawing the policy ended the session in $took s (within 70 s)"
is "$(q "SELECT close_reason LIKE 're-check refused%' FROM tunnels WHERE sandbox_id = '$sa' AND closed_at IS NOT NULL ORDER BY closed_at DESC LIMIT 1")" t \
	'the tunnel says the re-check refused it'
bcctl policy attach "$pol" --identity "$alice" >/dev/null

# -- deleting the sandbox closes a session
abc sandbox "${EX[@]}" "$sb" -- sleep 600 </dev/null >/dev/null 2>&1 &
sess=$!
eventually 30 eval "[ \"\$(q \"SELECT count(*) FROM tunnels WHERE sandbox_id = '$sb' AND opened_at IS NOT NULL AND closed_at IS NULL\")\" -ge 1 ]"
ok $? 'a session into B'
abc sandbox delete "$sb" >/dev/null
eventually 30 gone_pid
ok $? 'deleting B ended it'
kill "$sess" 2>/dev/null

abc sandbox delete "$sa" >/dev/null
done_testing
