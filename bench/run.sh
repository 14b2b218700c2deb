#!/usr/bin/env bash
# bench/run.sh: `make bench`. Speed as ratios against a peer measured in the
# same run on the same machine, never as pass/fail thresholds.
#
# Starts a stack (PostgreSQL, one bc-controller, one fake-runtime bcd), the
# grpc-js peer (bench/grpcjs_server.js) and the C rpc layer's own plaintext
# Health server (bc_bench serve), then measures with bench/bc_bench.c:
#
#   Health.Check round trip   bc-controller (TLS + token)   vs grpc-js (plaintext)
#                             bc_bench serve (C, plaintext) vs grpc-js (plaintext)
#   Instances.Create          creates/s and latency         vs a bare PostgreSQL
#                                                              INSERT transaction
#   spec push                 create -> agent reports running vs NOTIFY -> LISTEN
#   nftables full load        10..5,000 instances            vs nft -f of the same text
#   per-packet cost           ping -f, 5,000 guarded taps    vs 10 (bench/net.sh; root)
#   policy decision           10 and 1,000 statements        vs the Instances.Create
#                             (bench/bench_policy.c)            it guards (p50, conc 1)
#   seal + unseal 64 KiB      envelope (bench/seal.sh,        vs openssl speed -evp
#                             bench/bench_seal.c)               aes-256-gcm, 16 KiB blocks
#   Warm claim -> ready      1/8/32/64 clients (bench/warm.sh) vs bare PostgreSQL
#                            transactions doing the same row updates
#   Warm claim, 3 secrets    1/8 clients (bench/warm.sh)      vs the same claim of a
#                                                              template naming none
#   Sandbox create -> ready   1/8/32 clients (bench/sandboxes.sh) vs a bare PostgreSQL
#                                                              transaction of the same rows
#   sandbox reconciler pass   10,000 live sandboxes          vs one scan of them
#   Instances.Create ->       a real domain (bench/libvirt.sh; vs virsh create of the
#     running, libvirt        root, libvirtd)                   same domain XML
#   warm claim -> port 22 /   real guests, median of 5       vs a cold create of the
#     exec -- true            (bench/guest_ready.sh; root,       same guest (target
#                             libvirtd, the guest image)        warm <= 1/20 of cold)
#   sandbox volume dd         guest dd write/read on its     vs dd on the host on a raw
#     write/read, create ->   volume (bench/volumes.sh; root,   file beside the volume's;
#     file on the host        libvirtd, the guest image)        truncate -s 1G
#   Sandboxes.Exec, exec      p50/p99; bcctl sandbox exec    vs Health.Check; ssh to the
#     start to exit, 256 MiB  -- true; MiB/s; RSS per tunnel    same sshd; sshd's memory
#     throughput, 100 tunnels with 100 open (bench/exec.sh;      per connection
#                             root, sshd)
#   API under attack          Health.Check, Instances.List   vs the same calls on the
#                             while a stranger holds calls,     idle stack; nodes declared
#                             streams and idle connections      lost meanwhile
#                             (bench/attack.sh)
#   Identity.Recognize        an address's live identity, no    Health.Check on the same
#                             cache and the 2 s cache           channel
#                             (bench/identity.sh)
#   attestation -> identity   Node.Attest as the node, per    Health.Check on the same
#     live                    call over 20 sandboxes            node mTLS channel
#                             (bench/identity.sh)
#   warm claim -> identity    claim, GetBootData of its value,  the plain warm claim ->
#     live, 32 clients        Attest (bench/identity.sh)        ready at 32 clients
#
# and prints one table: each bc figure, its peer's, and bc / peer.
#
#   spec push is measured on an empty node and again once the create rows
#   left hundreds of instances on it (the whole NodeSpec is rebuilt and sent).
#
# Knobs: BENCH_SECONDS (rpc rows, default 3), BENCH_CONCURRENCY ("1 16"),
# BENCH_CREATES (200), BENCH_CREATE_CONCURRENCY ("1 8 32"), BENCH_PUSHES (50),
# BENCH_ONLY=warm (only the warm claim rows), BENCH_ONLY=push (only the
# spec push rows and the Instances.Create rows between them),
# BENCH_ONLY=attack (only the API under attack rows; their knobs in
# bench/attack.sh), BENCH_ONLY=seal (only the sealed store's rows),
# BENCH_ONLY=volumes (only the sandbox volume rows, bench/volumes.sh),
# BENCH_ONLY=exec (only the exec rows), BENCH_ONLY=identity (only the
# workload identity rows, bench/identity.sh), BENCH_ONLY=guest (only the real-guest
# warm/cold rows, bench/guest_ready.sh; BENCH_GUEST_N), BENCH_ONLY=snapshots
# (only the snapshot rows, bench/snapshots.sh; BENCH_SNAP_MIB, BENCH_SNAP_N),
# BC_BENCH (the C client; default $BC_SRC/build/bench/bc_bench), BC_BIN, BC_SRC.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../tests/lib/stack.sh
. "$here/../tests/lib/stack.sh"
TAP_DONE=1 # not a TAP file: no "ended early" diagnostics at exit

: "${BENCH_SECONDS:=3}"
: "${BENCH_CONCURRENCY:=1 16}"
: "${BENCH_CREATES:=200}"
: "${BENCH_CREATE_CONCURRENCY:=1 8 32}"
: "${BENCH_PUSHES:=50}"
: "${BC_BENCH:=$BC_SRC/build/bench/bc_bench}"

log() { echo "bench: $*" >&2; }

# ------------------------------------------------------------ set-up

if [ ! -x "$BC_BENCH" ]; then
	log "no bench client at $BC_BENCH (make bench-bins, or set BC_BENCH)"
	exit 1
fi
if [ ! -d "$BC_SRC/tests/interop/node_modules/@grpc/grpc-js" ]; then
	log "npm ci in tests/interop (the grpc-js peer's packages)"
	(cd "$BC_SRC/tests/interop" && npm ci --no-audit --no-fund --silent) || exit 1
fi

export BC_LOG_LEVEL=${BC_LOG_LEVEL:-warn}
# a /16: the create and push rows lease an address per instance
export BC_POOL_SUBNET=10.64.0.0/16 BC_POOL_GATEWAY=10.64.0.1
# the sandbox rows (bench/sandboxes.sh) read the reconciler's pass time here
SBX_METRICS_PORT=$(free_tcp_port) || exit 1
# the attack rows (bench/attack.sh) hold idle connections to the JSON/HTTP port
BENCH_HTTP_PORT=$(free_tcp_port) || exit 1
export BC_CTL_EXTRA_CONF="${BC_CTL_EXTRA_CONF:+$BC_CTL_EXTRA_CONF
}metrics_listen = 127.0.0.1:$SBX_METRICS_PORT
http_listen = 127.0.0.1:$BENCH_HTTP_PORT
sandbox_reconcile_seconds = 1
default_quota_instances = 0
default_quota_unplaced_instances = 0
default_quota_sandboxes = 0
sandbox_account = root"
# the identity rows (bench/identity.sh): a sandbox with identity goes only
# to a host whose attestation endpoint runs (instance.identity); its
# listener on 10.64.0.1 is never reached here (the bench attests as the node)
BENCH_IDENTITY_PORT=$(free_tcp_port) || exit 1
export BC_AGENT_EXTRA_CONF="${BC_AGENT_EXTRA_CONF:+$BC_AGENT_EXTRA_CONF
}identity_endpoint = on
identity_port = $BENCH_IDENTITY_PORT"
# room for every instance the create and push rows make
stack_up --controllers 1 --agents 1 --agent-capacity 4096,4194304,100000 ||
	{ log "stack_up failed"; exit 1; }
img=$(stack_image_create bench-img) || { log "image create failed"; exit 1; }

# start_peer NAME READY_REGEX CMD...: a peer daemon, logged to STACK_DIR/NAME.log
start_peer() {
	local name=$1 re=$2 pid
	shift 2
	"$@" >"$STACK_DIR/$name.log" 2>&1 </dev/null &
	pid=$!
	tap_on_exit kill "$pid"
	peer_ready() { grep -q "$re" "$STACK_DIR/$name.log"; }
	if ! eventually 15 peer_ready; then
		log "$name did not start:"
		cat "$STACK_DIR/$name.log" >&2
		exit 1
	fi
}

js_port=$(free_tcp_port) || exit 1
start_peer grpcjs '^listening ' node "$here/grpcjs_server.js" "$js_port"
c_port=$(free_tcp_port) || exit 1
start_peer cserve '^listening ' "$BC_BENCH" serve --listen "127.0.0.1:$c_port"

pg_createdb bench_peer || exit 1
conninfo="host=$PGHOST port=$PGPORT dbname=bench_peer user=postgres"

log "bc-controller $BC_URL (TLS), grpc-js 127.0.0.1:$js_port, C plaintext 127.0.0.1:$c_port"

# ------------------------------------------------------------ measuring

# run NAME ARGS...: one bc_bench run; its key=value line goes to stdout,
# its stderr to STACK_DIR/bench-client.log; a failed run prints nothing.
run() {
	local name=$1 out rc e
	shift
	out=$("$BC_BENCH" "$@" 2>>"$STACK_DIR/bench-client.log")
	rc=$?
	if [ $rc -ne 0 ]; then
		log "$name: bc_bench $1 exited $rc: $out (see below)"
		tail -n 5 "$STACK_DIR/bench-client.log" >&2
	fi
	e=$(field "$out" errors)
	# run is called in $(...): notes go to a file the end of the script prints
	[ -n "$e" ] && [ "$e" != 0 ] &&
		echo "note: $name had $e failed calls (see $STACK_DIR/bench-client.log)" >>"$STACK_DIR/bench-notes"
	echo "$out"
}

# field LINE KEY: the value of KEY=value in LINE (empty when absent).
field() {
	local kv
	for kv in $1; do
		[ "${kv%%=*}" = "$2" ] && { echo "${kv#*=}"; return; }
	done
}

# ratio A B: A / B with two decimals; "-" without both numbers.
ratio() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ]; then
		echo -
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
	fi
}

rows=()
# row WHAT METRIC BC_VALUE PEER PEER_VALUE
row() {
	rows+=("$(printf '%-40s %-12s %12s  %-24s %12s %8s' "$1" "$2" "${3:--}" "$4" "${5:--}" "$(ratio "$3" "$5")")")
}

tls=(--ca "$BC_CA_FILE" --token "$BC_TOKEN")
print_rows() {
	printf '%-40s %-12s %12s  %-24s %12s %8s\n' benchmark metric bc peer "peer value" "bc/peer"
	printf '%s\n' "${rows[@]}"
}
if [ "${BENCH_ONLY:-}" = attack ]; then # just the API under attack rows
	# shellcheck source=attack.sh
	. "$here/attack.sh"
	print_rows
	cat "$STACK_DIR/bench-notes" 2>/dev/null
	exit 0
fi
if [ "${BENCH_ONLY:-}" = exec ]; then # just the exec rows
	# shellcheck source=exec.sh
	. "$here/exec.sh"
	print_rows
	exit 0
fi
# script_rows NAME SCRIPT WHAT: the rows a bench script prints (tab-separated:
# name, metric, bc value, peer name, peer value). A run that adds no row
# says why (the script's own lines: skipped, or where it stopped), here and
# not only in the stack's log.
script_rows() {
	local name=$1 script=$2 before=${#rows[@]} slog=$STACK_DIR/bench-${2%.sh}.log
	log "$name: $3 (bench/$script)"
	while IFS=$'\t' read -r n m v pn pv; do
		row "$n" "$m" "$v" "$pn" "$pv"
	done < <(bash "$BC_SRC/bench/$script" 2>"$slog")
	cat "$slog" >>"$STACK_DIR/bench-client.log"
	if [ "${#rows[@]}" = "$before" ]; then
		log "$name: no rows; bench/$script said:"
		tail -n 15 "$slog" >&2
	fi
}
# real guests: warm claim vs cold create until port 22 / exec answers
guest_rows() {
	script_rows "real guests" guest_ready.sh "warm claim vs cold create until port 22 / exec answers"
}
# The sandbox volume rows (real guests): dd in a guest on its volume beside
# dd on the host's raw file, create -> file made.
volume_rows() {
	script_rows volumes volumes.sh "guest dd on a volume vs host dd; create -> ready"
}
snapshot_rows() {
	script_rows snapshots snapshots.sh \
		"xfer.c upload vs curl -T to s3rver; memory restore vs cold create -> ready"
}
if [ "${BENCH_ONLY:-}" = snapshots ]; then # just the snapshot rows
	snapshot_rows
	print_rows
	exit 0
fi
if [ "${BENCH_ONLY:-}" = volumes ]; then # just the sandbox volume rows
	volume_rows
	print_rows
	exit 0
fi
if [ "${BENCH_ONLY:-}" = guest ]; then # just the real-guest warm/cold rows
	guest_rows
	print_rows
	exit 0
fi
if [ "${BENCH_ONLY:-}" = identity ]; then # just the workload identity rows
	# shellcheck source=identity.sh
	. "$here/identity.sh"
	print_rows
	exit 0
fi
if [ "${BENCH_ONLY:-}" = seal ]; then # just the sealed store's rows
	# shellcheck source=seal.sh
	. "$here/seal.sh"
	print_rows
	exit 0
fi
if [ "${BENCH_ONLY:-}" = warm ]; then # just the warm claim rows
	# shellcheck source=warm.sh
	. "$here/warm.sh"
	print_rows
	exit 0
fi
[ "${BENCH_ONLY:-}" = push ] && BENCH_CONCURRENCY= # no Health rows
for c in $BENCH_CONCURRENCY; do
	log "Health.Check round trips, concurrency $c"
	bc=$(run rpc-bc rpc --target "$BC_URL" "${tls[@]}" --seconds "$BENCH_SECONDS" --concurrency "$c")
	cs=$(run rpc-c rpc --target "127.0.0.1:$c_port" --seconds "$BENCH_SECONDS" --concurrency "$c")
	js=$(run rpc-js rpc --target "127.0.0.1:$js_port" --seconds "$BENCH_SECONDS" --concurrency "$c")
	for m in p50_us p99_us calls_per_s; do
		row "Health.Check bc-controller TLS, conc $c" "$m" "$(field "$bc" "$m")" \
			"grpc-js plaintext" "$(field "$js" "$m")"
	done
	for m in p50_us calls_per_s; do
		row "Health.Check C rpc plaintext, conc $c" "$m" "$(field "$cs" "$m")" \
			"grpc-js plaintext" "$(field "$js" "$m")"
	done
done

push_row() { # LABEL: create -> running, next to NOTIFY -> LISTEN
	local pu np n
	n=$(bcctl --format json node list | jq '[.items[].instances // 0] | add')
	log "create -> running x $BENCH_PUSHES ($1, $n instances on the node)"
	pu=$(run push push --target "$BC_URL" "${tls[@]}" --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" --count "$BENCH_PUSHES")
	np=$(run notifypeer notifypeer --conninfo "$conninfo" --count "$BENCH_PUSHES")
	for m in p50_us p99_us; do
		row "spec push, $1 node ($n inst)" "$m" "$(field "$pu" "$m")" \
			"NOTIFY -> LISTEN" "$(field "$np" "$m")"
	done
}
push_row empty

for c in $BENCH_CREATE_CONCURRENCY; do
	log "Instances.Create x $BENCH_CREATES, concurrency $c"
	cr=$(run create create --target "$BC_URL" "${tls[@]}" --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" --concurrency "$c" --count "$BENCH_CREATES")
	pp=$(run pgpeer pgpeer --conninfo "$conninfo" --concurrency "$c" --count "$BENCH_CREATES")
	for m in per_s p50_us p99_us; do
		row "Instances.Create, conc $c" "$m" "$(field "$cr" "$m")" \
			"PostgreSQL INSERT txn" "$(field "$pp" "$m")"
	done
	[ -z "${create_p50:-}" ] && create_p50=$(field "$cr" p50_us)
done

if [ "${BENCH_ONLY:-}" = push ]; then # just the spec push and create rows
	push_row loaded
	print_rows
	exit 0
fi

log "policy decisions, 10 and 1000 statements"
pd=$("$BC_SRC/build/bench/bench_policy" 2>>"$STACK_DIR/bench-client.log")
for n in 10 1000; do
	row "policy decision, $n statements" decide_us "$(field "$pd" "decide${n}_us")" \
		"Instances.Create p50" "${create_p50:-}"
	row "policy parse+decide, $n statements" load_us "$(field "$pd" "load${n}_us")" \
		"Instances.Create p50" "${create_p50:-}"
done

# shellcheck source=seal.sh
. "$here/seal.sh"

push_row loaded

# shellcheck source=warm.sh
. "$here/warm.sh"
# shellcheck source=sandboxes.sh
. "$here/sandboxes.sh"
# shellcheck source=identity.sh
. "$here/identity.sh"

log "nftables: full ruleset loads and per-packet cost (bench/net.sh)"
while IFS=$'\t' read -r n m v pn pv; do
	row "$n" "$m" "$v" "$pn" "$pv"
done < <(bash "$BC_SRC/bench/net.sh" 2>>"$STACK_DIR/bench-client.log")

log "libvirt: Instances.Create -> running vs virsh create of the same XML (bench/libvirt.sh)"
while IFS=$'\t' read -r n m v pn pv; do
	row "$n" "$m" "$v" "$pn" "$pv"
done < <(bash "$BC_SRC/bench/libvirt.sh" 2>>"$STACK_DIR/bench-client.log")
guest_rows
volume_rows
snapshot_rows

# shellcheck source=exec.sh
. "$here/exec.sh"

# shellcheck source=attack.sh
. "$here/attack.sh"

print_rows
echo
echo "bc/peer: for *_us lower is better, for calls_per_s and per_s higher is better."
cat "$STACK_DIR/bench-notes" 2>/dev/null
exit 0
