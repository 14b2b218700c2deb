# node_renew.t: certificates are renewed before they expire (issue 12,
# item 8). Node certificates live node_cert_lifetime_seconds (120 s here);
# bcd calls Node.RenewCertificate once cert_renew_percent (50 here) of the
# life has passed, keeps its node id, and restarts on the new key and
# certificate; the controller refuses the old serial from the new one's
# first use. While the controller cannot be reached bcd warns as expiry
# nears, and every report carries a cert-expiring warning from
# cert_warn_seconds (110 here) before expiry until the renewal: the
# controller logs it and `bcctl node get` shows it. The controller's own
# server certificate is reissued from the API
# CA at start when it nears expiry (server_cert_renew_days).
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF='node_cert_lifetime_seconds = 120'
export BC_AGENT_EXTRA_CONF='cert_renew_percent = 50
cert_warn_seconds = 110'
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
d1=$STACK_DIR/agent-1
node1=$(agent_node_id 1)
serial0=$(q "SELECT cert_serial FROM nodes WHERE id = '$node1'")
cp "$d1/node.pem" "$STACK_DIR/old.pem"
cp "$d1/node.key" "$STACK_DIR/old.key"
report='{"applied_generation": "0", "complete": false, "instances": []}'
call() { # CERT KEY: a Report with that certificate
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" "$1" "$2" \
		bc/node/v1/node.proto bc.node.v1.Node Report "$report"
}
call "$STACK_DIR/old.pem" "$STACK_DIR/old.key" >/dev/null
ok $? 'control: the first certificate is taken'
bad='{"applied_generation": "0", "complete": false, "instances": [], "warnings": [{"code": "Not A Code", "message": "x"}]}'
out=$(report="$bad" call "$STACK_DIR/old.pem" "$STACK_DIR/old.key")
is "$(printf '%s' "$out" | jq -r .code)" 3 'a report with a malformed warning is refused: INVALID_ARGUMENT'
ok "printf '%s' '$out' | grep -q 'warnings\[0\].code'" 'naming the field'

# -- the certificate nears expiry: every report warns until it is renewed
warned() { bcctl --format json node get "$node1" | jq -e '.warnings[]? | select(startswith("cert-expiring: the node certificate expires in"))' >/dev/null; }
eventually 60 warned
ok $? 'node get shows the cert-expiring warning of the host report'
ok "grep -q 'node $node1: cert-expiring: the node certificate expires in .* and is not renewed yet' '$STACK_DIR/ctl-1.log'" \
	'the controller logs it as a warning'

# -- renewal
eventually 90 grep -q "node $node1: renewed certificate .* in use" "$STACK_DIR/ctl-1.log"
ok $? 'bcd renewed its certificate and uses the new one'
ok "grep -q 'certificate: renewed; bcd restarts' '$STACK_DIR/bcd-1.log'" 'bcd logs the renewal'
eventually 30 grep -q "node $node1: no warnings any more" "$STACK_DIR/ctl-1.log"
ok $? 'the renewed certificate is far from expiry: the warning ends, and the controller says so'
serial1=$(q "SELECT cert_serial FROM nodes WHERE id = '$node1'")
ok "[ -n '$serial1' ] && [ '$serial1' != '$serial0' ]" 'the controller records the new serial'
is "$(agent_node_id 1)" "$node1" 'the node id is the same'
is "$(openssl x509 -in "$d1/node.pem" -noout -subject -nameopt RFC2253)" "subject=CN=$node1" \
	'the new certificate names the same node'
out=$(call "$STACK_DIR/old.pem" "$STACK_DIR/old.key")
is "$(printf '%s' "$out" | jq -r .code)" 16 'the old certificate is refused from then on: UNAUTHENTICATED'
ready() { [ "$(q "SELECT state FROM nodes WHERE id = '$node1' AND last_report_at > now() - interval '10 s'")" = ready ]; }
eventually 30 ready
ok $? 'the node keeps reporting on its new certificate'
img=$(stack_image_create renew-img) || bail_out "no image"
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
id=$(json_get "$out" id)
eventually 60 instance_state_is "$id" running
ok $? 'and runs what it is sent'
out=$(bcctl --format json node get "$node1")
ok "[ \"\$(printf '%s' '$out' | jq -r '.certExpiresAt // .cert_expires_at')\" -gt 0 ]" 'node get shows when the certificate expires'

# -- the controller away: bcd warns as expiry nears
ctl_kill 1 TERM
eventually 90 grep -q 'certificate: renewal failed .* expires in' "$STACK_DIR/bcd-1.log"
ok $? 'with the controller away bcd warns how long its certificate has left'
ctl_start 1 || bail_out "the controller did not restart"
n=$(grep -c "node $node1: renewed certificate .* in use" "$STACK_DIR/ctl-1.log")
more() { [ "$(grep -c "node $node1: renewed certificate .* in use" "$STACK_DIR/ctl-1.log")" -gt "$n" ]; }
eventually 90 more
ok $? 'the controller back, the renewal goes through'

# -- the controller's server certificate, near expiry, is reissued at start
ctl_kill 1 TERM
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bc-controller \
	-keyout "$STACK_DIR/pki/server.key" -out "$STACK_DIR/srv.csr" 2>/dev/null
printf 'extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$STACK_DIR/srv.ext"
openssl x509 -req -in "$STACK_DIR/srv.csr" -CA "$STACK_DIR/pki/api-ca.pem" -CAkey "$STACK_DIR/pki/api-ca.key" \
	-days 2 -extfile "$STACK_DIR/srv.ext" -out "$STACK_DIR/pki/server.pem" 2>/dev/null
short=$(openssl x509 -in "$STACK_DIR/pki/server.pem" -noout -enddate)
ctl_start 1 || bail_out "the controller did not restart"
ok "grep -q 'pki: wrote a new server.pem' '$STACK_DIR/ctl-1.log'" 'serve reissued a server certificate that expires within 30 days'
ok "openssl x509 -in '$STACK_DIR/pki/server.pem' -noout -checkend $((800 * 86400))" 'the new one is valid for 825 days'
ok "[ \"\$(openssl x509 -in '$STACK_DIR/pki/server.pem' -noout -enddate)\" != '$short' ]" 'it replaced the short one'
ok "openssl verify -CAfile '$STACK_DIR/pki/api-ca.pem' '$STACK_DIR/pki/server.pem' >/dev/null" 'signed by the API CA'
ready() { [ "$(q "SELECT state FROM nodes WHERE id = '$node1' AND last_report_at > now() - interval '10 s'")" = ready ]; }
eventually 30 ready
ok $? 'bcd trusts it: the node reports again'

done_testing
