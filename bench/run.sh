#!/usr/bin/env bash
# bench/run.sh: `make bench`. Speed as ratios against a peer measured in the
# same run on the same machine, never as absolute pass/fail thresholds.
#
# First benchmark: the unary RPC round trip. The same call,
# grpc.health.v1.Health/Check, is timed against bc-controller (TLS, the real
# gRPC stack of common/rpc*.c) and against a @grpc/grpc-js server
# (bench/grpcjs_server.js, plaintext), by one C bench client, and printed as
# a table: p50, p99 and calls/s of each, and bc's ratio to the peer.
#
# Knobs: BENCH_SECONDS (5 per row), BENCH_CONCURRENCY ("1 16"),
# BC_BENCH (the C bench client; default $BC_BIN/bc-bench), BC_BIN, BC_SRC.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/lib/stack.sh"

: "${BENCH_SECONDS:=5}"
: "${BENCH_CONCURRENCY:=1 16}"
: "${BC_BENCH:=$BC_BIN/bc-bench}"

log() { echo "bench: $*" >&2; }

# ------------------------------------------------------------ set-up

if [ ! -d "$BC_SRC/tests/interop/node_modules/@grpc/grpc-js" ]; then
	log "npm ci in tests/interop (the peer's grpc-js)"
	(cd "$BC_SRC/tests/interop" && npm ci --no-audit --no-fund --silent) || exit 1
fi

BC_LOG_LEVEL=${BC_LOG_LEVEL:-warn}
stack_up --controllers 1 --agents 1 || { log "stack_up failed"; exit 1; }
TAP_DONE=1 # not a TAP file: no "ended early" diagnostics at exit

peer_port=$(free_tcp_port) || exit 1
node "$here/grpcjs_server.js" "$peer_port" >"$STACK_DIR/peer.log" 2>&1 </dev/null &
peer_pid=$!
tap_on_exit kill "$peer_pid"
peer_up() { grep -q '^listening ' "$STACK_DIR/peer.log"; }
if ! eventually 15 peer_up; then
	log "the grpc-js peer did not start:"
	cat "$STACK_DIR/peer.log" >&2
	exit 1
fi
log "bc-controller at $BC_URL (TLS), grpc-js peer at 127.0.0.1:$peer_port (plaintext)"

# ------------------------------------------------------------ measuring

# measure TARGET_ARGS...: one run of the C client; prints its
# "calls=N p50_us=N p99_us=N qps=N" line.
#
# TODO(bench): the C bench client does not exist yet. Expected interface
# (adjust here when it lands):
#   bc-bench rpc --target HOST:PORT (--ca-file F [--token T] | --insecure)
#                --method /grpc.health.v1.Health/Check
#                --seconds N --concurrency C
# printing one line "calls=N p50_us=N p99_us=N qps=N" on stdout.
measure() {
	local c=$1
	shift
	[ -x "$BC_BENCH" ] || return 1
	"$BC_BENCH" rpc "$@" --method /grpc.health.v1.Health/Check \
		--seconds "$BENCH_SECONDS" --concurrency "$c" 2>>"$STACK_DIR/bench-client.log"
}

# field LINE KEY: the value of KEY=value in LINE.
field() {
	local kv
	for kv in $1; do
		[ "${kv%%=*}" = "$2" ] && { echo "${kv#*=}"; return; }
	done
	echo ""
}

# ratio A B: A/B to two decimals, "n/a" without numbers.
ratio() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ]; then
		echo n/a
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
	fi
}

or_na() { echo "${1:-n/a}"; }

row_fmt='%-34s %10s %10s %10s %10s %10s %10s %8s %8s\n'
printf "$row_fmt" "benchmark" "bc p50us" "peer p50us" "bc p99us" "peer p99us" \
	"bc call/s" "peer c/s" "p50 x" "c/s x"

missing=0
[ -x "$BC_BENCH" ] || missing=1
for c in $BENCH_CONCURRENCY; do
	bc_line=$(measure "$c" --target "$BC_URL" --ca-file "$BC_CA_FILE" --token "$BC_TOKEN") || bc_line=
	peer_line=$(measure "$c" --target "127.0.0.1:$peer_port" --insecure) || peer_line=
	b50=$(field "$bc_line" p50_us) p50=$(field "$peer_line" p50_us)
	b99=$(field "$bc_line" p99_us) p99=$(field "$peer_line" p99_us)
	bq=$(field "$bc_line" qps) pq=$(field "$peer_line" qps)
	printf "$row_fmt" "Health/Check round trip, conc $c" "$(or_na "$b50")" "$(or_na "$p50")" \
		"$(or_na "$b99")" "$(or_na "$p99")" "$(or_na "$bq")" "$(or_na "$pq")" \
		"$(ratio "$b50" "$p50")" "$(ratio "$bq" "$pq")"
done
# TODO(bench): more rows, each against its own peer measured here:
#   instance create -> running (fake runtime) vs a bare PostgreSQL transaction
#   NodeSpec push latency (NOTIFY -> agent applied) vs a bare LISTEN/NOTIFY
#   nft batch load (agent) vs `nft -f` of the same rules

echo
echo "p50 x: bc p50 / peer p50 (lower is better); c/s x: bc calls/s / peer calls/s (higher is better)."
echo "bc-controller is measured over TLS with a bearer token, the grpc-js peer in plaintext."
if [ "$missing" = 1 ]; then
	echo "n/a: no C bench client at $BC_BENCH yet (TODO in bench/run.sh); set BC_BENCH to use another."
fi
exit 0
