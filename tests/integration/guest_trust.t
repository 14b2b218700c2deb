# guest_trust.t: every sandbox guest trusts the sandbox SSH CA, and with
# certifyHostKey presents a host key the CA certifies (docs/sandboxes.md,
# "How the guest trusts it"). One controller, one fake agent; the sealed
# user data is read back as the node gets it (Node.GetBootData with the
# node's own certificate, @grpc/grpc-js) and checked with real ssh-keygen:
# - a sandbox instance's user data holds the CA part (the deployment's CA
#   line, the principal sandbox@<instance>, the drop-in) and a host key with
#   its host certificate (principal: the instance id, 30 days, signed by
#   the CA, certifying that very key); instances.host_certified and
#   host_cert_valid_before are written; an ordinary instance gets neither;
# - the private key appears nowhere in the clear: not in a dump of the
#   whole database (the sealed blob is an envelope), not in any log or file
#   of the stack;
# - a warm instance gets the same; a claim takes only one whose certificate
#   covers the new lifetime; the reconciler recycles one whose certificate
#   no longer covers the template's default lifetime (instance.deleting,
#   reason warm-host-certificate);
# - a fresh sandbox's expiry is capped at its certificate (a test trigger
#   ages the certificate as the instance row is written);
# - an extend past the certificate is INVALID_INPUT naming the time left,
#   INVALID_STATE under a minute, and leaves nothing behind;
# - without the secret broker a sandbox create is INVALID_CONFIG (how to
#   fix it in the message), with sandbox_certify_host_key = 0 it works
#   without a host key; without a sandbox CA sandboxes have no CA part.
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create gt-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
# test files live outside STACK_DIR, which the leak check greps
T=$(mktemp -d) || bail_out "mktemp"
tap_on_exit rm -rf "$T"

# bootdata INSTANCE: its user data as its node gets it, the platform's
# part in $T/cc-INSTANCE (its YAML), 0 when read
bootdata() {
	local dir=$STACK_DIR/agent-1 ref out
	ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$1'")
	out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$ref\"}" 2>"$T/node.err") || {
		diag "$(cat "$T/node.err")"
		return 1
	}
	printf '%s' "$out" | jq -r .user_data | base64 -d >"$T/mime-$1"
	python3 - "$T/mime-$1" >"$T/cc-$1" <<'EOF'
import email, sys
m = email.message_from_bytes(open(sys.argv[1], 'rb').read())
sys.stdout.write(m.get_payload()[0].get_payload(decode=True).decode())
EOF
}
# file INSTANCE PATH: the content of write_files entry PATH of its part
file() {
	python3 - "$T/cc-$1" "$2" <<'EOF'
import sys, yaml
for f in yaml.safe_load(open(sys.argv[1])).get("write_files", []):
    if f["path"] == sys.argv[2]:
        sys.stdout.write(f["content"])
EOF
}
# perm INSTANCE PATH: its permissions
perm() {
	python3 - "$T/cc-$1" "$2" <<'EOF'
import sys, yaml
for f in yaml.safe_load(open(sys.argv[1])).get("write_files", []):
    if f["path"] == sys.argv[2]:
        print(f["permissions"])
EOF
}
certified() { q "SELECT host_certified FROM instances WHERE id = '$1'"; }
# seconds from now to the instance's host_cert_valid_before
cert_left() { q "SELECT round(extract(epoch FROM host_cert_valid_before - now()))::bigint FROM instances WHERE id = '$1'"; }
sbx_inst() { q "SELECT instance_id FROM sandboxes WHERE id = '$1'"; }

ca_pub=$(cat "$STACK_DIR/pki/sandbox-ssh-ca.pub") || bail_out "no sandbox CA public line"
ca_fp=$(printf '%s\n' "$ca_pub" | ssh-keygen -lf - | cut -d' ' -f2)

tmpl=$(jid "$(bcctl --format json sandbox-template create --name gt --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 4h)") || bail_out "template"

# -- a cold sandbox: the CA part and a certified host key
s1=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h --wait 20s)")
like "$s1" '^sbx_' 'a sandbox'
i1=$(sbx_inst "$s1")
is "$(certified "$i1")" t 'instances.host_certified is set'
left=$(cert_left "$i1")
ok "$([ "$left" -gt $((30 * 86400 - 120)) ] && [ "$left" -le $((30 * 86400)) ] && echo 0 || echo 1)" \
	"host_cert_valid_before is 30 days ahead ($left s)"
bootdata "$i1"
ok $? 'its node gets its user data'
is "$(file "$i1" /etc/ssh/bc_sandbox_ca.pub)" "$ca_pub" 'the guest trusts the deployment'\''s sandbox CA'
is "$(file "$i1" /etc/ssh/bc_sandbox_principals/sandbox)" "sandbox@$i1" \
	'and accepts the principal sandbox@<instance id>'
is "$(file "$i1" /etc/ssh/sshd_config.d/10-bc-sandbox.conf)" "TrustedUserCAKeys /etc/ssh/bc_sandbox_ca.pub
AuthorizedPrincipalsFile /etc/ssh/bc_sandbox_principals/%u
HostKey /etc/ssh/bc_sandbox_host_key
HostCertificate /etc/ssh/bc_sandbox_host_key-cert.pub" 'the drop-in, with HostKey and HostCertificate'
is "$(perm "$i1" /etc/ssh/bc_sandbox_host_key)" 0600 'the host key is written 0600'
file "$i1" /etc/ssh/bc_sandbox_host_key >"$T/hk" && chmod 600 "$T/hk"
file "$i1" /etc/ssh/bc_sandbox_host_key-cert.pub >"$T/hk-cert.pub"
like "$(head -n 1 "$T/hk")" '^-----BEGIN EC PRIVATE KEY-----$' 'a PEM EC private key'
L=$(ssh-keygen -L -f "$T/hk-cert.pub")
like "$L" 'Type: ecdsa-sha2-nistp256-cert-v01@openssh.com host certificate' 'its host certificate (ssh-keygen -L)'
like "$L" "Principals: 
                $i1
        Critical" '... naming the instance id alone'
has() { printf '%s\n' "$1" | grep -qF -- "$2"; }
ok "has \"\$L\" 'Signing CA: ED25519 $ca_fp '" '... signed by the sandbox CA'
hk_fp=$(ssh-keygen -y -f "$T/hk" | ssh-keygen -lf - | cut -d' ' -f2)
ok "[ -n '$hk_fp' ] && has \"\$L\" 'Public key: ECDSA-CERT $hk_fp'" '... certifying the key beside it'
is "$(q "SELECT (extract(epoch FROM host_cert_valid_before))::bigint FROM instances WHERE id = '$i1'")" \
	"$(date -d "$(printf '%s\n' "$L" | sed -n 's/^ *Valid: from [^ ]* to //p')" +%s)" \
	'host_cert_valid_before is the certificate'\''s end'

# -- nothing secret in the clear anywhere: the whole database, every file
# of the stack (logs, agent state, NodeSpec copies)
body=$(sed -n 2p "$T/hk")
[ ${#body} -ge 40 ] || bail_out "no key body"
pg_dump -d bc --data-only >"$T/dump.sql" 2>/dev/null
ok "grep -q '$i1' '$T/dump.sql'" 'the database dump is readable (control)'
ok "! grep -qF -- '$body' '$T/dump.sql'" 'the host key is nowhere in the database in the clear'
ok "! grep -q 'PRIVATE KEY' '$T/dump.sql'" '... nor any PEM private key'
ok "! grep -rqF -- '$body' '$STACK_DIR'" 'nor in any log or file of the stack'
is "$(q "SELECT count(*) FROM events WHERE data::text LIKE '%PRIVATE%' OR data::text LIKE '%cert-v01%'")" 0 \
	'no event carries a key or certificate'

# -- an ordinary instance: unaffected
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img") ||
	bail_out "instance create: $out"
iplain=$(jid "$out")
is "$(certified "$iplain") $(q "SELECT coalesce(host_cert_valid_before::text, '-') FROM instances WHERE id = '$iplain'")" \
	'f -' 'an ordinary instance has no host certificate'
bootdata "$iplain"
ok "! grep -q bc_sandbox '$T/cc-$iplain'" '... and no sandbox CA part'
ok "grep -q '^hostname:' '$T/cc-$iplain'" '(its part read back: control)'

# -- extend: never past the certificate
q "UPDATE instances SET host_cert_valid_before = now() + interval '2 hours' WHERE id = '$i1'" >/dev/null
exp0=$(q "SELECT expires_at FROM sandboxes WHERE id = '$s1'")
out=$(bcctl --format json sandbox extend "$s1" --by 2h 2>/dev/null)
is "$(printf '%s' "$out" | jq -r '.error.code + " " + .error.details.reason')" 'INVALID_INPUT host-certificate' \
	'an extend past the host certificate: INVALID_INPUT'
like "$(printf '%s' "$out" | jq -r .error.message)" 'cannot outlive its guest.s host certificate: [12]h[0-9][0-9]m[0-9][0-9]s left' \
	'... naming the time left'
left=$(printf '%s' "$out" | jq -r .error.details.secondsLeft)
ok "$([ "$left" -gt 7000 ] && [ "$left" -le 7200 ] && echo 0 || echo 1)" "... secondsLeft ($left)"
is "$(q "SELECT expires_at FROM sandboxes WHERE id = '$s1'") $(q "SELECT coalesce(pending::text, '-') FROM authz_resources WHERE id = '$s1'")" \
	"$exp0 -" '... leaving the expiry and no pending lifetime behind'
out=$(bcctl --format json sandbox extend "$s1" --by 30m 2>/dev/null)
is "$(printf '%s' "$out" | jq -r '.error.code // "ok"')" ok 'an extend within it is applied'
q "UPDATE instances SET host_cert_valid_before = now() + interval '30 seconds' WHERE id = '$i1'" >/dev/null
out=$(bcctl --format json sandbox extend "$s1" --by 30m 2>/dev/null)
is "$(printf '%s' "$out" | jq -r '.error.code + " " + .error.details.reason')" 'INVALID_STATE host-certificate' \
	'under a minute left: INVALID_STATE'

# -- a fresh sandbox's expiry is capped at its certificate: a test trigger
# ages the certificate as the instance row is written
q "CREATE FUNCTION gt_age_cert() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
	IF NEW.host_certified THEN NEW.host_cert_valid_before := now() + interval '10 minutes'; END IF;
	RETURN NEW; END \$\$;
	CREATE TRIGGER gt_age_cert BEFORE INSERT ON instances FOR EACH ROW EXECUTE FUNCTION gt_age_cert()" >/dev/null
s2=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h)")
q "DROP TRIGGER gt_age_cert ON instances; DROP FUNCTION gt_age_cert()" >/dev/null
like "$s2" '^sbx_' 'a sandbox asking 1 h'
is "$(q "SELECT s.expires_at = i.host_cert_valid_before FROM sandboxes s JOIN instances i ON i.id = s.instance_id WHERE s.id = '$s2'")" t \
	'its expiry is its certificate'\''s end'
ttl=$(q "SELECT ttl_seconds FROM sandboxes WHERE id = '$s2'")
ok "$([ "$ttl" -ge 590 ] && [ "$ttl" -le 600 ] && echo 0 || echo 1)" "and its lifetime says so ($ttl s)"

# -- warm instances: the same part; the claim and the recycling
wt=$(jid "$(bcctl --format json sandbox-template create --name gtw --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 4h --warm-min 1 --warm-max 1)") || bail_out "warm template"
warm_paused() { q "SELECT id FROM instances WHERE warm_template_id = '$wt' AND desired_state <> 'deleted' AND state = 'paused' LIMIT 1"; }
eventually 60 eval '[ -n "$(warm_paused)" ]'
ok $? 'a warm instance is paused'
w1=$(warm_paused)
is "$(certified "$w1")" t 'a warm instance is host-certified'
bootdata "$w1"
is "$(file "$w1" /etc/ssh/bc_sandbox_principals/sandbox)" "sandbox@$w1" '... its guest trusts the CA for its own principal'
ok "grep -q 'BEGIN EC PRIVATE KEY' '$T/cc-$w1'" '... and gets its host key'
q "UPDATE instances SET host_cert_valid_before = now() + interval '2 hours' WHERE id = '$w1'" >/dev/null
out=$(bcctl --format json sandbox create --template "$wt" --ttl 3h)
is "$(json_get "$out" warm) $(json_get "$out" instance_id)" " $(json_get "$out" instance_id)" \
	'a lifetime past the warm certificate: not claimed (cold)'
ok "$([ "$(json_get "$out" instance_id)" != "$w1" ] && echo 0 || echo 1)" '... another instance'
out=$(bcctl --format json sandbox create --template "$wt" --ttl 1h)
is "$(json_get "$out" warm) $(json_get "$out" instance_id)" "true $w1" 'one within it: claimed'
eventually 60 eval '[ -n "$(warm_paused)" ]'
ok $? 'the pool refills'
w2=$(warm_paused)
q "UPDATE instances SET host_cert_valid_before = now() + interval '10 minutes' WHERE id = '$w2'" >/dev/null
recycled() { [ "$(q "SELECT count(*) FROM events WHERE type = 'instance.deleting' AND subject = 'instance/$w2' AND data->>'reason' = 'warm-host-certificate'")" = 1 ]; }
eventually 30 recycled
ok $? 'a warm instance whose certificate does not cover the default lifetime (1 h) is recycled (warm-host-certificate)'
is "$(q "SELECT desired_state FROM instances WHERE id = '$w2'")" deleted '... desired deleted'
eventually 60 eval '[ -n "$(warm_paused)" ] && [ "$(warm_paused)" != "$w2" ]'
ok $? '... and replaced'
bcctl sandbox-template update "$wt" --warm-min 0 >/dev/null 2>&1 ||
	q "UPDATE sandbox_templates SET warm_min = 0, warm_max = 0 WHERE id = '$wt'" >/dev/null

# -- without the secret broker: INVALID_CONFIG, nothing left behind
ctl_kill 1 TERM
printf 'secret_broker = 0\n' >>"$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart"
n0=$(q "SELECT count(*) FROM sandboxes")
out=$(bcctl --format json sandbox create --template "$tmpl" 2>/dev/null)
is "$(printf '%s' "$out" | jq -r '.error.code + " " + .error.details.reason')" 'INVALID_CONFIG host-key-needs-broker' \
	'certifyHostKey without a secret broker: INVALID_CONFIG'
like "$(printf '%s' "$out" | jq -r .error.message)" 'secret_broker = 1.*sandbox_certify_host_key = 0' \
	'... saying how to fix it'
is "$(q "SELECT count(*) FROM sandboxes")" "$n0" '... and no sandbox row'
ctl_kill 1 TERM
printf 'sandbox_certify_host_key = 0\n' >>"$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart"
s3=$(jid "$(bcctl --format json sandbox create --template "$tmpl")")
like "$s3" '^sbx_' 'with sandbox_certify_host_key = 0 a sandbox is made'
i3=$(sbx_inst "$s3")
is "$(certified "$i3") $(q "SELECT coalesce(host_cert_valid_before::text, '-') FROM instances WHERE id = '$i3'")" \
	'f -' '... without a host certificate'
bootdata "$i3"
is "$(file "$i3" /etc/ssh/bc_sandbox_ca.pub)" "$ca_pub" '... its guest still trusts the CA'
ok "! grep -q 'path: /etc/ssh/bc_sandbox_host_key\|PRIVATE KEY' '$T/cc-$i3'" '... and gets no host key'

# -- without a sandbox CA: no CA part
ctl_kill 1 TERM
mv "$STACK_DIR/pki/sandbox-ssh-ca.key" "$STACK_DIR/pki/sandbox-ssh-ca.key.away"
sed -i '/^sandbox_certify_host_key/d; /^secret_broker/d' "$STACK_DIR/ctl-1.conf"
ctl_start 1 || bail_out "restart"
like "$(cat "$STACK_DIR/ctl-1.log")" 'no sandbox SSH CA' 'serve says it has no sandbox CA'
s4=$(jid "$(bcctl --format json sandbox create --template "$tmpl")")
like "$s4" '^sbx_' 'a deployment without a sandbox CA still makes sandboxes'
i4=$(sbx_inst "$s4")
is "$(certified "$i4")" f '... not host-certified'
bootdata "$i4"
ok "! grep -q 'bc_sandbox' '$T/cc-$i4'" '... without the CA part'
ok "grep -q '^hostname:' '$T/cc-$i4'" '(its part read back: control)'
mv "$STACK_DIR/pki/sandbox-ssh-ca.key.away" "$STACK_DIR/pki/sandbox-ssh-ca.key"

done_testing
