# bench/exec.sh: the exec rows of `make bench`, sourced by bench/run.sh on
# its stack (fake runtime, sandbox_account = root). A real sshd stands for
# the sandbox guest's (tests/lib/sshd.sh: it trusts the sandbox CA, its
# host key is certified), so each row compares the whole exec path with
# the same sshd reached directly:
#
#   Sandboxes.Exec            p50/p99 of 200 calls (bench/exec_calls.js)  vs Health.Check on the
#                                                                          same grpc-js channel
#   bcctl sandbox exec -- true   start to exit, median of 10           vs ssh straight to the
#                                                                          sshd, same certificate
#   256 MiB `cat > /dev/null`    through the tunnel, MiB/s               vs the same over direct ssh
#                             (bcctl over the WebSocket route when the stack has http_listen,
#                             BENCH_HTTP_PORT; a second row with bcctl over gRPC Tunnels.Connect)
#   100 open tunnels          controller and bcd RSS growth per tunnel   vs sshd's own memory per
#                             (bench/tunnels_hold.js)                       connection (its children)
#
# Needs root and openssh-server; says why and adds no row otherwise.
# BENCH_EXEC_ROWS=throughput: only the 256 MiB rows, BENCH_EXEC_RUNS times
# (default 1) each, for the figures in docs/benchmarks.md; each run logs
# its ratio and the CPU the controller, bcd and the client (bcctl and its
# ssh, or the direct ssh) spent on it. BENCH_EXEC_TRACE=DIR: the 256 MiB
# runs also record `perf record -g` of the controller, bcd and the client
# into DIR (NAME-RUN.{ctl,bcd,client}.data; perf must be installed).

if [ "$(id -u)" -ne 0 ] || [ ! -x /usr/sbin/sshd ]; then
	log "exec rows skipped: need root and /usr/sbin/sshd"
	return 0 2>/dev/null || exit 0
fi
# shellcheck source=../tests/lib/sshd.sh
. "$BC_SRC/tests/lib/sshd.sh"

xw=$STACK_DIR/exec-bench
mkdir -p "$xw"
xt=$(json_get "$(bcctl --format json sandbox-template create --name exec-bench --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --network private)" id)
xs=$(json_get "$(bcctl --format json sandbox create --template "$xt" --ttl 2h --wait 20s)" id)
xi=$(psql -d bc -XAtq -c "SELECT instance_id FROM sandboxes WHERE id = '$xs'")
xg=$(psql -d bc -XAtq -c "SELECT host(address) FROM ip_leases WHERE instance_id = '$xi' LIMIT 1")
if [ -z "$xg" ] || ! guest_sshd_up "$xi" "$xg" "$xw/sshd"; then
	log "exec rows skipped: no sandbox guest address or sshd ($xs, $xg)"
	return 0 2>/dev/null || exit 0
fi
ssh-keygen -q -t ed25519 -N '' -f "$xw/id"
xpub=$(cat "$xw/id.pub")

if [ "${BENCH_EXEC_ROWS:-}" != throughput ]; then
log "Sandboxes.Exec vs Health.Check, 200 calls each (grpc-js)"
xc=$(node "$BC_SRC/bench/exec_calls.js" "$BC_URL" "$BC_CA_FILE" "$BC_TOKEN" "$xs" "$xpub" 200 \
	2>>"$STACK_DIR/bench-client.log")
for m in p50 p99; do
	row "Sandboxes.Exec (grpc-js)" "${m}_us" "$(field "$xc" "exec_${m}_us")" \
		"Health.Check same channel" "$(field "$xc" "health_${m}_us")"
done
fi

# the direct peer: the same key with a certificate from a grant, the same
# sshd, pinned the same way bcctl pins it
xgrant=$(BC_TOKEN=$BC_TOKEN node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$BC_CA_FILE" - - \
	bc/compute/v1/sandboxes.proto bc.compute.v1.Sandboxes Exec \
	"{\"sandbox_id\": \"$xs\", \"public_key\": \"$xpub\", \"minutes\": 15}")
printf '%s' "$xgrant" | jq -r .certificate >"$xw/id-cert.pub"
printf '@cert-authority %s %s\n' "$xi" "$(cut -d' ' -f1-2 "$STACK_DIR/pki/sandbox-ssh-ca.pub")" >"$xw/kh"
# (xpre: perf record in front of the client when tracing; xtracebin: a
# bcctl that runs under it)
xpre=() xtracebin=
if [ -n "${BENCH_EXEC_TRACE:-}" ]; then
	mkdir -p "$BENCH_EXEC_TRACE" "$xw/tracebin"
	printf '#!/bin/sh\nexec perf record -q -g -o "$XTRACE_OUT.client.data" -- %q "$@"\n' \
		"$BC_BIN/bcctl" >"$xw/tracebin/bcctl"
	chmod +x "$xw/tracebin/bcctl"
	xtracebin=$xw/tracebin
fi
direct() {
	"${xpre[@]}" ssh -F none -p "$GUEST_SSHD_PORT" -i "$xw/id" -o CertificateFile="$xw/id-cert.pub" \
		-o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
		-o UserKnownHostsFile="$xw/kh" -o HostKeyAlias="$xi" -o LogLevel=ERROR root@127.0.0.1 "$@"
}
# the tunnel as bcctl takes it: the WebSocket route on the JSON/HTTP port
# when the stack has one (bcctl's tunnel_url), else gRPC Tunnels.Connect
xbin() { if [ -n "${xpre[0]:-}" ]; then echo "$xtracebin"; else echo "$BC_BIN"; fi; }
viagrpc() {
	BC_BIN=$(xbin) BC_TUNNEL_URL= bcctl sandbox exec "$xs" --key "$xw/id" -- "$@"
}
viabc() {
	BC_BIN=$(xbin) BC_TUNNEL_URL=${BENCH_HTTP_PORT:+127.0.0.1:$BENCH_HTTP_PORT} \
		bcctl sandbox exec "$xs" --key "$xw/id" -- "$@"
}
# median_ms CMD...: the median wall time of 10 runs of CMD, in ms
median_ms() {
	local i t0 v=()
	for i in 1 2 3 4 5 6 7 8 9 10; do
		t0=$(date +%s%N)
		"$@" </dev/null >/dev/null 2>>"$STACK_DIR/bench-client.log" || return 1
		v+=($(( ($(date +%s%N) - t0) / 1000000 )))
	done
	printf '%s\n' "${v[@]}" | sort -n | sed -n 5p
}
if [ "${BENCH_EXEC_ROWS:-}" != throughput ]; then
log "bcctl sandbox exec -- true vs ssh to the same sshd, 10 each"
row "bcctl sandbox exec -- true" p50_ms "$(median_ms viabc true)" \
	"ssh straight to the sshd" "$(median_ms direct true)"
fi

# mib_s CMD...: MiB/s of 256 MiB piped into CMD; CMD's own CPU (with its
# children's) goes to $xw/client-cpu
mib_s() {
	local t0 t1
	t0=$(date +%s%N)
	head -c 268435456 /dev/zero | client_timed "$@" 'cat > /dev/null' 2>>"$STACK_DIR/bench-client.log" || return 1
	t1=$(date +%s%N)
	awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", 256 / (ns / 1e9) }'
}
# client_timed CMD...: run CMD; the user + system CPU of it and what it
# waited for (perf too, when tracing) into $xw/client-cpu
client_timed() {
	local rc
	"$@"
	rc=$?
	times >"$xw/client-times" # not in a pipeline: its own children
	awk 'NR == 2 {
		n = split($1 " " $2, t, " "); s = 0
		for (i = 1; i <= n; i++) { split(t[i], a, "m"); s += a[1] * 60 + a[2] }
		printf "%.2f", s }' "$xw/client-times" >"$xw/client-cpu"
	return $rc
}
# cpu_s PID: user + system CPU seconds of a process so far
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
# trace_start / trace_stop: perf record of the controller and bcd around a run
xtrace_pids=()
trace_start() {
	[ -n "${BENCH_EXEC_TRACE:-}" ] || return 0
	perf record -q -g -o "$xtrace_out.ctl.data" -p "$(_stack_get_pid ctl-1)" 2>/dev/null &
	xtrace_pids=($!)
	perf record -q -g -o "$xtrace_out.bcd.data" -p "$(_stack_get_pid bcd-1)" 2>/dev/null &
	xtrace_pids+=($!)
	# perf writes its file's header once it has attached
	eventually 10 test -s "$xtrace_out.ctl.data" && eventually 10 test -s "$xtrace_out.bcd.data"
}
trace_stop() {
	local p
	for p in "${xtrace_pids[@]}"; do
		kill -INT "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	xtrace_pids=()
}
# cpu_of NAME CMD...: run mib_s CMD, log the controller's, bcd's and the
# client's CPU for it
cpu_of() {
	local n=$1 c0 b0 v
	shift
	xtrace_out=${BENCH_EXEC_TRACE:+$BENCH_EXEC_TRACE/${n//[^a-zA-Z]/_}-$xrun}
	[ -n "$xtrace_out" ] && xpre=(perf record -q -g -o "$xtrace_out.client.data" --)
	export XTRACE_OUT=$xtrace_out
	trace_start
	c0=$(cpu_s "$(_stack_get_pid ctl-1)") b0=$(cpu_s "$(_stack_get_pid bcd-1)")
	v=$(mib_s "$@")
	log "$n: $v MiB/s, CPU for 256 MiB: controller $(awk -v a="$c0" -v b="$(cpu_s "$(_stack_get_pid ctl-1)")" 'BEGIN { printf "%.2f", b - a }') s, bcd $(awk -v a="$b0" -v b="$(cpu_s "$(_stack_get_pid bcd-1)")" 'BEGIN { printf "%.2f", b - a }') s, client $(cat "$xw/client-cpu" 2>/dev/null) s, load $(cut -d' ' -f1 /proc/loadavg)"
	trace_stop
	printf '%s' "$v"
}
# pair ROW NAME VIA: one tunnel run and the direct run after it, as a
# row; the ratio logged too
pair() {
	local t d
	t=$(cpu_of "$2" "$3")
	d=$(cpu_of direct direct)
	log "$2, run $xrun: $t / $d MiB/s = $(ratio "$t" "$d")"
	row "$1" MiB_per_s "$t" "direct ssh, same sshd" "$d"
}
log "256 MiB through the tunnel vs direct ssh${BENCH_HTTP_PORT:+ (bcctl over the WebSocket route)}"
for xrun in $(seq "${BENCH_EXEC_RUNS:-1}"); do
	pair "256 MiB cat > /dev/null, tunnel" tunnel viabc
	[ -n "${BENCH_HTTP_PORT:-}" ] &&
		pair "256 MiB, tunnel, bcctl over gRPC" "tunnel, gRPC" viagrpc
done
[ "${BENCH_EXEC_ROWS:-}" = throughput ] && return 0 2>/dev/null

log "100 open tunnels: controller and bcd memory"
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
sshd_kib() { # RSS of the sshd's children (one per connection)
	local p s=0
	for p in $(pgrep -P "$GUEST_SSHD_PID"); do s=$((s + $(rss_kib "$p"))); done
	echo "$s"
}
xctl=$(_stack_get_pid ctl-1)
xbcd=$(_stack_get_pid bcd-1)
c0=$(rss_kib "$xctl") b0=$(rss_kib "$xbcd") s0=$(sshd_kib)
exec {xhold}> >(node "$BC_SRC/bench/tunnels_hold.js" "$BC_URL" "$BC_CA_FILE" "$BC_TOKEN" "$xs" "$xpub" 100 \
	>"$xw/hold.out" 2>>"$STACK_DIR/bench-client.log")
held() { grep -q '^open 100' "$xw/hold.out"; }
if eventually 120 held; then
	sleep 1
	c1=$(rss_kib "$xctl") b1=$(rss_kib "$xbcd") s1=$(sshd_kib)
	per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 100 }'; }
	row "100 tunnels: controller RSS / tunnel" KiB "$(per "$c0" "$c1")" \
		"sshd memory / connection" "$(per "$s0" "$s1")"
	row "100 tunnels: bcd RSS / tunnel" KiB "$(per "$b0" "$b1")" \
		"sshd memory / connection" "$(per "$s0" "$s1")"
else
	log "100 tunnels did not open: $(cat "$xw/hold.out")"
fi
exec {xhold}>&-
