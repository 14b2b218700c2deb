# node_identity.t: a node cannot pose as the controller, nor as itself
# with a certificate the controller did not issue last (issue 12, item 4).
#
# A compromised host holds its own node certificate and key. It serves the
# Node API with them (tests/integration/rogue_controller.js) and another
# node's bcd is pointed at it: bcd must refuse the TLS handshake (node
# certificates are clientAuth only and bcd trusts only the API CA for the
# controller), so the rogue's spec never reaches it. A certificate for a
# node signed by the node CA but with a serial the controller did not issue
# is refused. An agent state dir from before the fix (ca.pem holding the
# node CA beside the API CA) is repaired at start.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 2 --agent-capacity 4,8192,50 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
d1=$STACK_DIR/agent-1
d2=$STACK_DIR/agent-2
node1=$(agent_node_id 1)
node2=$(agent_node_id 2)

# -- what a node certificate says
ext=$(openssl x509 -in "$d1/node.pem" -noout -ext extendedKeyUsage,subjectAltName 2>/dev/null)
like "$ext" 'TLS Web Client Authentication' 'the node certificate is for TLS clients'
ok "! printf '%s' \"\$ext\" | grep -q 'Server Authentication'" 'and not for TLS servers'
ok "! printf '%s' \"\$ext\" | grep -q 'Alternative Name'" 'it names no host (no subjectAltName)'
is "$(openssl x509 -in "$d1/node.pem" -noout -subject -nameopt RFC2253)" "subject=CN=$node1" \
	'its subject is the node id alone'
ok "! openssl verify -CAfile '$d2/ca.pem' '$d1/node.pem' >/dev/null 2>&1" \
	"agent 2's trust anchors do not include the node CA"

# -- control: agent 2 applies specs from the real controller
applied2() { [ "$(q "SELECT applied_generation >= 1 AND state = 'ready' FROM nodes WHERE id = '$node2'")" = t ]; }
eventually 30 applied2
ok $? 'agent 2 applies its spec from the real controller'

# -- the rogue controller: node 1's certificate as its server certificate
port=$(free_tcp_port)
rogue_inst=inst_01roguerogueroguerogueroguer
node "$BC_SRC/tests/integration/rogue_controller.js" "$port" "$node2" "$rogue_inst" \
	"$d1/node.pem" "$d1/node.key" "$STACK_DIR/pki/node-ca.pem" "$STACK_DIR/rogue-events" \
	>"$STACK_DIR/rogue.log" 2>&1 &
rogue_pid=$!
eventually 10 grep -q listening "$STACK_DIR/rogue.log"
ok $? 'the rogue controller listens'
agent_kill 2 TERM
sed "s/^controller = .*/controller = 127.0.0.1:$port/" "$STACK_DIR/bcd-2.conf" >"$STACK_DIR/bcd-rogue.conf"
"$BC_BIN/bcd" --config "$STACK_DIR/bcd-rogue.conf" >"$STACK_DIR/bcd-rogue.log" 2>&1 &
bcd_pid=$!
# bcd dials the rogue: either the handshake fails (the watch logs its
# failure, then its retries) or the rogue sees a WatchSpec
dialled() { grep -q 'watch: stream failed' "$STACK_DIR/bcd-rogue.log" ||
	grep -q watch "$STACK_DIR/rogue-events" 2>/dev/null; }
eventually 30 dialled
ok $? 'bcd dialled the rogue controller'
ok "! grep -q watch '$STACK_DIR/rogue-events' 2>/dev/null" 'no WatchSpec reached the rogue: bcd refused the handshake'
ok "! grep -q '$rogue_inst' '$d2/fake/ledger.log'" "the rogue's instance was not created"
ok "! grep -q 'generation 1000000 accepted' '$STACK_DIR/bcd-rogue.log'" "the rogue's spec was not accepted"
kill "$bcd_pid" "$rogue_pid" 2>/dev/null
wait "$bcd_pid" "$rogue_pid" 2>/dev/null
agent_start 2 || bail_out "agent 2 did not restart"

# -- a certificate for node 2 that the controller did not issue
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$node2" \
	-keyout "$STACK_DIR/forged.key" -out "$STACK_DIR/forged.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\nbasicConstraints=critical,CA:FALSE\n' >"$STACK_DIR/forged.ext"
openssl x509 -req -in "$STACK_DIR/forged.csr" -CA "$STACK_DIR/pki/node-ca.pem" \
	-CAkey "$STACK_DIR/pki/node-ca.key" -set_serial 0x5eed -days 1 \
	-extfile "$STACK_DIR/forged.ext" -out "$STACK_DIR/forged.pem" 2>/dev/null
ok $? 'a node-CA certificate for node 2 with a serial the controller never issued'
report='{"applied_generation": "0", "complete": false, "instances": []}'
out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" "$d2/node.pem" "$d2/node.key" \
	bc/node/v1/node.proto bc.node.v1.Node Report "$report")
ok $? "control: node 2's issued certificate is taken ($out)"
out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" "$STACK_DIR/forged.pem" \
	"$STACK_DIR/forged.key" bc/node/v1/node.proto bc.node.v1.Node Report "$report")
is "$(printf '%s' "$out" | jq -r .code 2>/dev/null)" 16 'the forged certificate is refused: UNAUTHENTICATED'
eventually 10 grep -q "node $node2: certificate serial 5eed refused" "$STACK_DIR/ctl-1.log"
ok $? 'the controller logs the refusal with the serial'

# -- an agent state dir from before: ca.pem holds the node CA too
agent_kill 1 TERM
cat "$STACK_DIR/pki/api-ca.pem" "$STACK_DIR/pki/node-ca.pem" >"$d1/ca.pem"
agent_start 1 || bail_out "agent 1 did not restart"
eventually 20 grep -q 'ca.pem: removed 1 certificate' "$STACK_DIR/bcd-1.log"
ok $? 'bcd removes the node CA from an old ca.pem at start (and says so)'
ok "! openssl verify -CAfile '$d1/ca.pem' '$d1/node.pem' >/dev/null 2>&1" 'ca.pem no longer trusts the node CA'
cmp -s <(openssl x509 -in "$d1/ca.pem" -noout -fingerprint) \
	<(openssl x509 -in "$STACK_DIR/pki/api-ca.pem" -noout -fingerprint)
ok $? 'ca.pem holds the API CA'
back() { [ "$(q "SELECT state FROM nodes WHERE id = '$node1'")" = ready ] &&
	grep -q 'watch: watching spec' "$STACK_DIR/bcd-1.log"; }
eventually 30 back
ok $? 'the repaired agent works with the real controller'
# a ca.pem with nothing but the node CA: bcd refuses to start
agent_kill 1 TERM
cp "$STACK_DIR/pki/node-ca.pem" "$d1/ca.pem"
timeout 60 "$BC_BIN/bcd" --config "$STACK_DIR/bcd-1.conf" >"$STACK_DIR/bcd-nodeca.log" 2>&1
is $? 1 'bcd refuses to start when ca.pem trusts only the node CA'
like "$(cat "$STACK_DIR/bcd-nodeca.log")" 'holds no CA but the node CA' 'and says why'

done_testing
