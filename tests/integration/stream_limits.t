# stream_limits.t: the stream limits of a replica (controller/streams.c).
# Replica 1: max_streams 24 with 4 slots kept for nodes, 4 streams per
# principal, 6 per tenant. Two users of one tenant and one of another each
# try 10 Events.Watch streams: 4, 2 (their tenant is full) and 4 open, the
# rest refused RESOURCE_EXHAUSTED. Uncredentialed Health/Watch streams then
# fill what is left for non-node streams, and a restarted node still gets
# its spec stream from the reserve (an instance created now reaches it).
# Replica 2: Events.Watch ends after events_watch_max_seconds with
# watch-max-duration and the id to resume after, and resuming from it
# misses nothing. Start-up: a replica whose connections do not fit the
# database's max_connections refuses to start.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"
. "$(dirname "$0")/../lib/streams.sh"

export BC_CTL_EXTRA_CONF="max_streams = 24
stream_reserve_nodes = 4
max_streams_per_principal = 4
max_streams_per_tenant = 6
max_unauthenticated_streams = 100"
stack_up --controllers 2 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create limits-img) || bail_out "no image"
js=$(dirname "$0")/attack_streams.js
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
tap_on_exit cleanup

bcctl tenant create acme >/dev/null && bcctl tenant create globex >/dev/null || bail_out "tenants"
A1=$(tenant_token "$(tenant_identity acme user a1 --admin)") || bail_out "a1"
A2=$(tenant_token "$(tenant_identity acme user a2 --admin)") || bail_out "a2"
G1=$(tenant_token "$(tenant_identity globex user g1 --admin)") || bail_out "g1"

attack() { # NAME TOKEN MODE N: N streams, until every one answered
	BC_TOKEN=$2 node "$js" "$BC_URL_1" "$BC_CA_FILE" "$3" "$4" "$STACK_DIR/$1.status" &
	pids+=($!)
	eventually 60 stream_settled "$1" "$4"
	ok $? "$1: all $4 streams answered ($(cat "$STACK_DIR/$1.status"))"
}
attack a1 "$A1" events 10
is "$(stream_field a1 open)/$(stream_field a1 codes)" '4/8:6' 'a1: 4 open (per principal), 6 RESOURCE_EXHAUSTED'
attack a2 "$A2" events 10
is "$(stream_field a2 open)/$(stream_field a2 codes)" '2/8:8' 'a2: 2 open (its tenant holds 6), 8 RESOURCE_EXHAUSTED'
attack g1 "$G1" events 10
is "$(stream_field g1 open)/$(stream_field g1 codes)" '4/8:6' 'g1, another tenant: 4 open'
# 1 node stream + 10 events streams: 10 more non-node streams fit (24 - 4)
attack anon '' health 20
is "$(stream_field anon open)/$(stream_field anon codes)" '10/8:10' \
	'uncredentialed: 10 open, the rest of max_streams is kept for nodes'
ok "grep -q 'stream-limit-\|too many streams' '$STACK_DIR/ctl-1.log'" 'refusals are logged'

# the reserve: the node reconnects to a full replica
stream_node_respawned 'the restarted node got a spec stream from the reserve'
inst=$(json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img")" id)
eventually 90 instance_state_is "$inst" running
ok $? 'an instance created now reaches the node and runs'
ok "[ '$(stream_field a1 open)' = 4 ] && [ '$(stream_field anon open)' = 10 ]" 'the other streams stayed open'
cleanup
pids=()

# -- Events.Watch's maximum duration, on replica 2
printf 'events_watch_max_seconds = 3\n' >>"$STACK_DIR/ctl-2.conf"
ctl_kill 2
ctl_start 2 || bail_out "ctl-2 restart"
BC_TOKEN=$A1 bcctl_n 2 events watch >"$STACK_DIR/w1" 2>"$STACK_DIR/w1.err" &
w=$!
pids+=($w)
eventually 30 eval '! kill -0 $w 2>/dev/null'
ok $? 'the watch ended by itself'
wait "$w"
isnt "$?" 0 '... not as a success'
like "$(cat "$STACK_DIR/w1.err")" 'UNAVAILABLE.*maximum duration' '... UNAVAILABLE, naming the maximum duration'
like "$(cat "$STACK_DIR/w1.err")" 'reason: watch-max-duration' '... reason watch-max-duration'
after=$(sed -n 's/^ *afterId: //p' "$STACK_DIR/w1.err")
last=$(tail -n 1 "$STACK_DIR/w1" | cut -f1)
is "$after" "$last" "afterId is the last event id sent ($last)"
bcctl tenant quota acme --vcpus 7 >/dev/null
BC_TOKEN=$A1 bcctl_n 2 events watch --after "$after" --count 1 >"$STACK_DIR/w2" 2>/dev/null
is "$(cut -f2 "$STACK_DIR/w2")" 'quota.set' 'resuming from afterId gets the next event'

# -- start-up refuses a replica whose connections do not fit max_connections
"$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-2.conf" --listen 127.0.0.1:0 \
	--stream-db-connections 1000 >"$STACK_DIR/big.log" 2>&1 &
big=$!
pids+=($big)
eventually 30 eval '! kill -0 $big 2>/dev/null'
ok $? 'a replica that could open more connections than the database allows exits'
wait "$big"
isnt "$?" 0 '... with a failure'
like "$(cat "$STACK_DIR/big.log")" 'the database allows' '... saying why'
timeout 60 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-2.conf" --listen 127.0.0.1:0 \
	--max-streams 4 --stream-reserve-nodes 4 >"$STACK_DIR/res.log" 2>&1
rc=$?
ok "[ $rc != 0 ] && [ $rc != 124 ]" "a reserve not below max_streams is refused at start (exit $rc)"
cleanup
done_testing
