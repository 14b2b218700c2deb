# node_join.t: Join is idempotent for a short window (issue 12, item 17).
# A bcd whose Join answer was lost (a timeout, a crash before it wrote
# node.pem) calls again with the same token and the same key: it gets the
# same node and the same certificate, not a refusal and not a second node.
# Another key with the same token is refused as before.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
join() { # TOKEN CSR_FILE
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" - - bc/node/v1/node.proto \
		bc.node.v1.Node Join "$(jq -n --arg t "$1" --rawfile c "$2" '{token: $t, csr_pem: $c,
		hostname: "agent-1", address: "127.0.0.1", capacity: {vcpus: 2, memory_mib: "4096",
		disk_gib: "20"}}')"
}
csr() { # NAME: a key and CSR in STACK_DIR/NAME.key, NAME.csr
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bcd \
		-keyout "$STACK_DIR/$1.key" -out "$STACK_DIR/$1.csr" 2>/dev/null
}

token=$(agent_join_token) || bail_out "no join token"
csr k1 && csr k2
first=$(join "$token" "$STACK_DIR/k1.csr")
node1=$(printf '%s' "$first" | jq -r .node_id)
like "$node1" '^node_' "a first Join makes node $node1"
again=$(join "$token" "$STACK_DIR/k1.csr")
ok $? 'the same Join again (the answer was lost) is answered'
is "$(printf '%s' "$again" | jq -r .node_id)" "$node1" 'with the same node'
is "$(printf '%s' "$again" | jq -r .certificate_pem)" "$(printf '%s' "$first" | jq -r .certificate_pem)" \
	'and the same certificate'
is "$(q "SELECT count(*) FROM nodes")" 1 'no second node'
ok "grep -q \"node $node1: join retried with the same token and key\" '$STACK_DIR/ctl-1.log'" \
	'the controller logs the retry'
other=$(join "$token" "$STACK_DIR/k2.csr")
is "$(printf '%s' "$other" | jq -r .code)" 7 'another key with the used token: PERMISSION_DENIED'
like "$(printf '%s' "$other" | jq -r .details)" 'already used' 'join-token-used'
is "$(q "SELECT count(*) FROM nodes")" 1 'still one node'

# -- bcd itself: its key is on disk before it calls, so a bcd that lost
# the answer joins as the same node when it starts again with the token
token2=$(agent_join_token) || bail_out "no join token"
mkdir -p "$STACK_DIR/agent-1"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bcd \
	-keyout "$STACK_DIR/agent-1/node.key" -out "$STACK_DIR/lost.csr" 2>/dev/null
chmod 600 "$STACK_DIR/agent-1/node.key"
lost=$(join "$token2" "$STACK_DIR/lost.csr")
node2=$(printf '%s' "$lost" | jq -r .node_id)
like "$node2" '^node_' "a Join whose answer bcd never saw made node $node2"
STACK_CAP_VCPUS=2 STACK_CAP_MEM=4096 STACK_CAP_DISK=20 _agent_write_conf 1 "$token2"
_stack_launch bcd-1 "$BC_BIN/bcd" --config "$STACK_DIR/bcd-1.conf"
eventually 30 grep -q 'joined as node' "$STACK_DIR/bcd-1.log"
ok $? 'bcd starts and joins with the used token'
is "$(agent_node_id 1)" "$node2" 'as the node the lost answer named'
ready() { [ "$(q "SELECT state FROM nodes WHERE id = '$node2' AND last_report_at > joined_at")" = ready ]; }
eventually 30 ready
ok $? 'which reports and is ready'
is "$(q "SELECT count(*) FROM nodes")" 2 'two nodes in all, one per token'

done_testing
