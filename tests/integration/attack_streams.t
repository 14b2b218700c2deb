# attack_streams.t: streams cannot take the controller's database away from
# everyone else. An attacker holds 300 uncredentialed Health/Watch streams
# and 300 Events.Watch streams of one tenant (gRPC; both reopening what
# ends, as an attacker keeping up the pressure would) plus 60 Events.Watch
# streams of that tenant over JSON/HTTP. Control: streams of both kinds
# really are open (they received a message). Then: PostgreSQL's connection
# count stays bounded, the excess streams are refused RESOURCE_EXHAUSTED,
# a restarted node (a new WatchSpec stream) gets its spec pushed (an
# instance created now reaches the agent's runtime), and authenticated calls
# answer. On the old code every stream took a database connection before
# authentication: PostgreSQL ran out of connections and the node's new spec
# stream failed.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"
. "$(dirname "$0")/../lib/streams.sh"

HTTP_PORT=$(free_tcp_port)
# 60 TLS handshakes at once on a loaded machine can outlast the default 5 s
# handshake deadline (attack_http.t tests the deadlines): generous ones
# here, so that every connection reaches the stream limits this file tests
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
http_handshake_timeout_seconds = 120
http_header_timeout_seconds = 120"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create attack-img) || bail_out "no image"
bcctl tenant create mallory >/dev/null || bail_out "tenant create"
eve=$(tenant_identity mallory user eve --admin) || bail_out "identity"
M=$(tenant_token "$eve") || bail_out "token"
# the JSON/HTTP streams come from another identity of the same tenant
M2=$(tenant_token "$(tenant_identity mallory user eve2 --admin)") || bail_out "token 2"
js=$(dirname "$0")/attack_streams.js
conns() { q "SELECT count(*) FROM pg_stat_activity WHERE datname = 'bc'"; }
diag "database connections before the attack: $(conns)"

node "$js" "$BC_URL" "$BC_CA_FILE" health 300 "$STACK_DIR/health.status" reopen &
health_pid=$!
BC_TOKEN=$M node "$js" "$BC_URL" "$BC_CA_FILE" events 300 "$STACK_DIR/events.status" reopen &
events_pid=$!
# JSON/HTTP: one stream per connection, each curl holding it open
for i in $(seq 1 60); do
	curl -sN --cacert "$BC_CA_FILE" -H "Authorization: Bearer $M2" \
		-H 'Content-Type: application/json' -d '{}' -o "$STACK_DIR/http-$i.out" \
		-w '%{http_code}\n' "https://127.0.0.1:$HTTP_PORT/api/compute/events/watch" \
		>"$STACK_DIR/http-$i.code" 2>/dev/null &
	echo $! >>"$STACK_DIR/curl.pids"
done
cleanup() {
	kill "$health_pid" "$events_pid" 2>/dev/null
	xargs kill <"$STACK_DIR/curl.pids" 2>/dev/null
}
tap_on_exit cleanup

eventually 120 stream_settled health 300
ok $? "all 300 Health/Watch streams answered ($(cat "$STACK_DIR/health.status"))"
eventually 120 stream_settled events 300
ok $? "all 300 Events.Watch streams answered ($(cat "$STACK_DIR/events.status"))"
http_open() { grep -l '"id"' "$STACK_DIR"/http-*.out 2>/dev/null | wc -l; }
http_done() { [ "$(($(http_open) + $(cat "$STACK_DIR"/http-*.code 2>/dev/null | grep -c .)))" -ge 60 ]; }
eventually 60 http_done
ok $? "all 60 JSON/HTTP Events.Watch streams answered ($(http_open) open)"

# one reading of each tally for the checks below (they keep moving)
cp "$STACK_DIR/health.status" "$STACK_DIR/h.status"
cp "$STACK_DIR/events.status" "$STACK_DIR/e.status"
# control: the attack really holds streams open
ok "[ '$(stream_field h open)' -ge 16 ]" "uncredentialed Health/Watch streams are held open ($(stream_field h open))"
ok "[ '$(stream_field e open)' -ge 16 ]" "one tenant's Events.Watch streams are held open ($(stream_field e open))"
ok "[ '$(http_open)' -ge 1 ]" "JSON/HTTP Events.Watch streams are held open ($(http_open))"

# the excess is refused RESOURCE_EXHAUSTED (8), nothing else
is "$(stream_field h codes)" "8:$(stream_field h refused)" 'excess Health/Watch streams: RESOURCE_EXHAUSTED'
is "$(stream_field e codes)" "8:$(stream_field e refused)" 'excess Events.Watch streams: RESOURCE_EXHAUSTED'
is "$(cat "$STACK_DIR"/http-*.code 2>/dev/null | sort -u | tr '\n' ' ')" '429 ' \
	'excess JSON/HTTP streams: 429'

n=$(conns)
diag "database connections under attack: $n"
ok "[ '$n' -le 60 ]" "PostgreSQL connections stay bounded under attack ($n <= 60)"

# the victim: its node reconnects (a new spec stream) and gets a new spec
stream_node_respawned 'the restarted node opened a new spec stream'
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
inst=$(json_get "$out" id)
like "$inst" '^inst_' 'authenticated Instances.Create answers under attack'
eventually 90 instance_state_is "$inst" running
ok $? "the node got its spec pushed: $inst reached the agent and runs"
ok "[ -e '$STACK_DIR/agent-1/fake/$inst.inst' ]" 'the fake runtime holds the instance'
ok "bcctl pool list >/dev/null" 'authenticated Pools.List answers under attack'
n=$(conns)
ok "[ '$n' -le 60 ]" "PostgreSQL connections still bounded ($n <= 60)"

# control at the end: the attacker's streams were still open all along
ok "[ '$(stream_field health open)' -ge 16 ] && [ '$(stream_field events open)' -ge 16 ]" \
	"the attack streams are still open ($(stream_field health open) health, $(stream_field events open) events)"
cleanup
done_testing
