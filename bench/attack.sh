# bench/attack.sh: the "API under attack" rows of `make bench`, sourced by
# bench/run.sh (its stack, run, field, row, tls; BENCH_ONLY=attack runs only
# these). Authenticated Health.Check and Instances.List (one client,
# BENCH_SECONDS each) on the idle stack, then again while a stranger holds
# open, without any credential:
#
#   BENCH_ATTACK_HELD (200)   unary calls sent as HTTP/2 HEADERS with no DATA
#                             (bench/attack.py, python3-h2), reopened when
#                             the server ends them
#   BENCH_ATTACK_WATCH (300)  grpc.health.v1.Health/Watch streams
#                             (tests/integration/attack_streams.js)
#   BENCH_ATTACK_IDLE (500)   TCP connections to the JSON/HTTP port that
#                             never send a byte, made again when closed
#
# The attack lasts BENCH_ATTACK_HOLD seconds (default node_lost_seconds + 5,
# so a node whose reports the attack stopped would be declared lost within
# it), and the row says how many nodes were declared lost meanwhile
# (node.lost events) and how much of the attack the server let stand when
# the calls were measured (what it refused or closed is not held).

: "${BENCH_ATTACK_HELD:=200}"
: "${BENCH_ATTACK_WATCH:=300}"
: "${BENCH_ATTACK_IDLE:=500}"
: "${BENCH_ATTACK_HOLD:=$((${BC_NODE_LOST_SECONDS:-60} + 5))}"
: "${BENCH_PYTHON:=/usr/bin/python3}" # Debian's, where python3-h2 lives

attack_calls() { # TAG: Health.Check and Instances.List figures into ah_TAG, al_TAG
	printf -v "ah_$1" '%s' "$(run "attack-health-$1" rpc --target "$BC_URL" "${tls[@]}" \
		--seconds "$BENCH_SECONDS")"
	printf -v "al_$1" '%s' "$(run "attack-list-$1" rpc --target "$BC_URL" "${tls[@]}" \
		--seconds "$BENCH_SECONDS" --call list)"
}
attack_field() { # STATUS KEY: a figure of an attacker's status file, 0 before it has one
	local v
	v=$(sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" "$STACK_DIR/$1.status" 2>/dev/null)
	echo "${v:-0}"
}
lost_events() { psql -d bc -XAtq -c "SELECT count(*) FROM events WHERE type = 'node.lost'"; }

log "API under attack: the calls on the idle stack"
attack_calls idle
lost0=$(lost_events)
attack_t0=$SECONDS
log "API under attack: $BENCH_ATTACK_HELD held calls, $BENCH_ATTACK_WATCH Watch streams," \
	"$BENCH_ATTACK_IDLE idle connections for ${BENCH_ATTACK_HOLD}s"
"$BENCH_PYTHON" "$here/attack.py" --grpc "$BC_URL" --held "$BENCH_ATTACK_HELD" \
	--http "127.0.0.1:$BENCH_HTTP_PORT" --idle "$BENCH_ATTACK_IDLE" \
	--status "$STACK_DIR/attack.status" 2>>"$STACK_DIR/bench-client.log" &
attack_pids=($!)
node "$BC_SRC/tests/integration/attack_streams.js" "$BC_URL" "$BC_CA_FILE" health \
	"$BENCH_ATTACK_WATCH" "$STACK_DIR/attack-watch.status" 2>>"$STACK_DIR/bench-client.log" &
attack_pids+=($!)
attack_stop() { kill "${attack_pids[@]}" 2>/dev/null; }
tap_on_exit attack_stop
attack_up() {
	[ "$(attack_field attack held)" = "$BENCH_ATTACK_HELD" ] &&
		[ "$(attack_field attack idle)" = "$BENCH_ATTACK_IDLE" ] &&
		[ "$(attack_field attack-watch answered)" = "$BENCH_ATTACK_WATCH" ]
}
eventually 30 attack_up ||
	echo "note: the attack was not all up after 30 s: $(cat "$STACK_DIR/attack.status" \
		"$STACK_DIR/attack-watch.status" 2>/dev/null | tr '\n' ' ')" >>"$STACK_DIR/bench-notes"
attack_calls attack
held=$(attack_field attack held) idle=$(attack_field attack idle)
watching=$(attack_field attack-watch open)
left=$((attack_t0 + BENCH_ATTACK_HOLD - SECONDS))
[ "$left" -gt 0 ] && sleep "$left"
lost=$(($(lost_events) - lost0))
attack_stop

# lat OUT METRIC: a latency of the answered calls, empty when none answered
# (a failed call waits out its 5 s deadline and counts in "failed")
lat() { [ "$(field "$1" calls)" != 0 ] && field "$1" "$2"; }
for call in Health.Check Instances.List; do
	[ "$call" = Health.Check ] && a=$ah_attack i=$ah_idle || a=$al_attack i=$al_idle
	for m in p50_us p99_us; do
		row "API under attack: $call" "$m" "$(lat "$a" "$m")" "the same, idle stack" "$(lat "$i" "$m")"
	done
	row "API under attack: $call" "failed" "$(field "$a" errors)" \
		"the same, idle stack" "$(field "$i" errors)"
done
row "API under attack: held calls standing" count "$held" "attempted" "$BENCH_ATTACK_HELD"
row "API under attack: Watch streams open" count "$watching" "attempted" "$BENCH_ATTACK_WATCH"
row "API under attack: idle conns standing" count "$idle" "attempted" "$BENCH_ATTACK_IDLE"
row "API under attack: nodes declared lost" count "$lost" "in ${BENCH_ATTACK_HOLD}s, must be" 0
