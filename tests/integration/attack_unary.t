# attack_unary.t: unary calls held open without their message do not hold
# the controller's workers. An unauthenticated client opens TLS connections
# and sends many HEADERS frames for Node.Join and Health.Check (which need
# no credential) with no DATA, and holds them. While they are held, an
# authenticated call answers and the agent's reports keep arriving (no node
# is lost). Control: the helper saw the server's SETTINGS and the ack of a
# PING sent after every HEADERS frame (the server read them all), and the
# held streams are neither reset nor answered while the checks run. Then a
# connection opening more streams than the server's per-connection limit
# (grpc_max_streams_per_connection, announced in its SETTINGS) is closed by
# the server.
. "$(dirname "$0")/../lib/stack.sh"

export BC_NODE_LOST_SECONDS=10 BC_REPORT_INTERVAL_SECONDS=1
export BC_CTL_EXTRA_CONF="workers = 4
grpc_max_streams_per_connection = 32"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
q() { psql -d bc -XAtq -c "$1"; }
node1=$(agent_node_id 1)
port=${BC_URL##*:}
helper=$BC_SRC/tests/integration/attack_unary.py
# Debian's interpreter: python3-h2 (contrib/install-deps.sh) is installed for it
PY=/usr/bin/python3
st=$STACK_DIR/attack.json
field() { jq -r ".$1" "$st" 2>/dev/null; }

"$PY" "$helper" 127.0.0.1 "$port" "$BC_CA_FILE" 3 12 "$st" \
	/bc.node.v1.Node/Join /grpc.health.v1.Health/Check >"$STACK_DIR/attack.log" 2>&1 &
apid=$!
started() { [ -s "$st" ]; }
eventually 60 started
ok $? 'the attacker is holding its streams' || diag_file "$STACK_DIR/attack.log" 20
is "$(field opened)" 36 '36 message-less unary calls opened (3 connections x 12)'
is "$(field settings)" 3 'control: every connection got the server SETTINGS and the ack of ours'
is "$(field acked)" 3 'control: the PING after the HEADERS came back on every connection'
is "$(field held)" 36 'control: no held stream was reset or answered'
diag "server max_concurrent_streams: $(field max_streams)"

# an authenticated call answers while they are held (generous bound)
seen=$(q "SELECT last_report_at FROM nodes WHERE id = '$node1'")
ok "timeout 60 env HOME=$STACK_DIR/home BC_TOKEN=$BC_TOKEN $BC_BIN/bcctl --url $BC_URL \
	--ca-file $BC_CA_FILE --format json pool list >/dev/null" \
	'an authenticated call answers while the calls are held'
reported() { [ "$(q "SELECT last_report_at > '$seen' FROM nodes WHERE id = '$node1'")" = t ]; }
eventually 60 reported
ok $? 'the agent reports reach the controller while the calls are held'
# past node_lost_seconds with the attack still on: the node is not lost
sleep 12
is "$(q "SELECT state FROM nodes WHERE id = '$node1'")" ready 'the node is still ready'
seen=$(q "SELECT last_report_at FROM nodes WHERE id = '$node1'")
eventually 60 reported
ok $? '... and still reporting'
is "$(field held)" 36 'control: the 36 calls were held open all along'
is "$(field closed)" 0 'control: no attacking connection was closed'
kill -TERM "$apid"
wait "$apid"
is "$?" 0 'the attacker exits cleanly'

# the per-connection stream limit: 40 streams on one connection, 32 allowed
rm -f "$st"
"$PY" "$helper" 127.0.0.1 "$port" "$BC_CA_FILE" 1 40 "$st" \
	/grpc.health.v1.Health/Check >"$STACK_DIR/attack2.log" 2>&1 &
apid=$!
eventually 60 started
ok $? 'a second attacker opens 40 streams on one connection'
is "$(field max_streams)" 32 'the server announces SETTINGS_MAX_CONCURRENT_STREAMS 32'
closed() { [ "$(field closed)" = 1 ]; }
eventually 30 closed
ok $? 'the server closes the connection that opened more streams than it allows' ||
	diag_file "$STACK_DIR/attack2.log" 20
diag "of its 40 streams $(field answered) answered, $(field reset) reset"
kill -TERM "$apid"
wait "$apid"
ok "timeout 60 env HOME=$STACK_DIR/home BC_TOKEN=$BC_TOKEN $BC_BIN/bcctl --url $BC_URL \
	--ca-file $BC_CA_FILE pool list >/dev/null" 'the controller answers afterwards'
done_testing
