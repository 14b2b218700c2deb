#!/usr/bin/env bash
# guest_ready.sh: the warm-versus-cold rows of `make bench` on real guests
# (called by bench/run.sh, which prints them in its table). Needs root, a
# libvirtd and the guest image (build/guest/guest.qcow2, `make guest`);
# prints nothing (and says why on stderr) otherwise, or while another bcd
# enforces nftables in this network namespace.
#
#   warm: `bcctl sandbox create --wait 20s` of a template whose pool holds
#     one booted, paused guest, from the call's start until the guest's
#     port 22 answers from the host (and, the second row, until
#     `bcctl sandbox exec -- true` exits 0)
#   peer: the same for a template without a warm pool (a cold create: the
#     guest boots)
#
#   clock: a warm guest's clock skew at its first exec after a 10-minute
#     pause (BENCH_GUEST_CLOCK_PAUSE), beside the pause itself
#
# The target is warm <= 1/20 of cold. Each figure is the median of
# BENCH_GUEST_N (default 5) sandboxes, one at a time; between warm claims
# the pool boots its next guest, which is not timed.
#
# Output: one tab-separated row per line: name, metric, bc value, peer
# name, peer value.
set -u

here=$(cd "$(dirname "$0")" && pwd)
unset BC_STACK_DIR BC_STACK_PERSIST STACK_SH_LOADED TAP_SH_LOADED HTTPS_SH_LOADED
# run.sh's stack holds the ports its extra config names (metrics_listen,
# http_listen): this stack is another, with its own
unset BC_CTL_EXTRA_CONF BC_AGENT_EXTRA_CONF
. "$here/../tests/lib/stack.sh"
. "$here/../tests/lib/https.sh"
. "$here/../tests/lib/libvirt.sh"
TAP_DONE=1 # not a TAP file

: "${BENCH_GUEST_N:=5}"
: "${BENCH_GUEST_DIR:=$BC_SRC/build/guest}"
: "${BENCH_GUEST_TIMEOUT:=600}"
say() { echo "bench/guest_ready.sh: $*" >&2; }

if [ "$(id -u)" -ne 0 ] || ! libvirt_up; then
	say "skipped: needs root and libvirtd (${LIBVIRT_WHY:-not root})"
	exit 0
fi
if [ ! -s "$BENCH_GUEST_DIR/guest.qcow2" ]; then
	say "skipped: no guest image in $BENCH_GUEST_DIR (make guest)"
	exit 0
fi
if _stack_nft_agents; then
	say "skipped: another bcd enforces nftables in this network namespace"
	exit 0
fi

export BC_LOG_LEVEL=warn
https_up "$BENCH_GUEST_DIR" >/dev/null || { say "https_up failed"; exit 0; }
export BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
export BC_POOL_BRIDGE=bcbg$$ BC_POOL_SUBNET=10.217.$(($$ % 250)).0/24
export BC_POOL_GATEWAY=10.217.$(($$ % 250)).1
stack_up --runtime libvirt --controllers 1 --agents 1 --agent-capacity 8,8192,50 >&2 ||
	{ say "stack_up failed"; exit 0; }
q() { psql -d bc -XAtq -c "$1"; }
ms() { date +%s%3N; }
sha=$(cut -d' ' -f1 "$BENCH_GUEST_DIR/guest.qcow2.sha256")
size=$(stat -c%s "$BENCH_GUEST_DIR/guest.qcow2")
img=$(json_get "$(bcctl --format json image create --name guest --format qcow2 \
	--url "$HTTPS_URL/guest.qcow2" --sha256 "$sha" --size "$size")" id)
ssh-keygen -q -t ed25519 -N '' -f "$STACK_DIR/bench-key"
tmpl() {
	json_get "$(bcctl --format json sandbox-template create --name "$1" --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" "${@:2}")" id
}
port22() { timeout 1 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }
guest_ip() { q "SELECT host(address) FROM ip_leases WHERE instance_id = (SELECT instance_id FROM sandboxes WHERE id = '$1') LIMIT 1"; }
exec_true() { bcctl sandbox exec "$1" --key "$STACK_DIR/bench-key" -- true </dev/null >/dev/null 2>&1; }
# until SBX's port 22 answers, then until exec -- true exits 0: both times
# (ms since T0) on one line; empty if the guest never gets there
reach() {
	local sbx=$1 t0=$2 ip='' tp='' te=''
	while [ $(($(ms) - t0)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ]; do
		[ -n "$ip" ] || ip=$(guest_ip "$sbx")
		if [ -z "$tp" ] && [ -n "$ip" ] && port22 "$ip"; then
			tp=$(($(ms) - t0))
		fi
		if [ -n "$tp" ] && exec_true "$sbx"; then
			te=$(($(ms) - t0))
			echo "$tp $te"
			return 0
		fi
		sleep 0.05
	done
	return 1
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

tw=$(tmpl bench-warm --warm-min 1 --warm-max 1)
tc=$(tmpl bench-cold)
[ -n "$tw" ] && [ -n "$tc" ] || { say "templates not created"; exit 0; }
booted() {
	[ -n "$(q "SELECT id FROM instances WHERE warm_template_id = '$tw' AND state = 'paused' AND guest_ready_at IS NOT NULL AND desired_state <> 'deleted' LIMIT 1")" ]
}
: >"$STACK_DIR/warm.times"
: >"$STACK_DIR/cold.times"
for ((i = 0; i < BENCH_GUEST_N; i++)); do
	s=$(ms)
	until booted; do
		[ $(($(ms) - s)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ] || { say "no booted warm guest"; exit 0; }
		sleep 1
	done
	t0=$(ms)
	sbx=$(json_get "$(bcctl --format json sandbox create --template "$tw" --ttl 1h --wait 20s)" id)
	r=$(reach "$sbx" "$t0") || { say "warm sandbox $sbx never reachable"; exit 0; }
	echo "$r" >>"$STACK_DIR/warm.times"
	bcctl sandbox delete "$sbx" >/dev/null
done
# the MCP row: one more warm guest, reachable; `run_command true` through
# `bcctl mcp` (stdio, one session, the MCP SDK as the client: bench/
# mcp_calls.mjs) beside `bcctl sandbox exec -- true`, BENCH_GUEST_MCP_N
# (default 20) calls each, one at a time, alternating in blocks of 5
: "${BENCH_GUEST_MCP_N:=20}"
mcp_row=
nm=$BC_SRC/tests/interop/node_modules
if [ "$BENCH_GUEST_MCP_N" -gt 0 ] && command -v node >/dev/null && [ -d "$nm/@modelcontextprotocol/sdk" ]; then
	s=$(ms)
	until booted; do
		[ $(($(ms) - s)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ] || { say "no booted warm guest"; exit 0; }
		sleep 1
	done
	sbx=$(json_get "$(bcctl --format json sandbox create --template "$tw" --ttl 1h --wait 20s)" id)
	reach "$sbx" "$(ms)" >/dev/null || { say "MCP sandbox $sbx never reachable"; exit 0; }
	: >"$STACK_DIR/mcp.times"
	: >"$STACK_DIR/mcpexec.times"
	mkdir -p "$STACK_DIR/mcp-home"
	for ((b = 0; b < BENCH_GUEST_MCP_N; b += 5)); do
		for ((i = 0; i < 5; i++)); do
			t0=$(ms)
			exec_true "$sbx" && echo $(($(ms) - t0)) >>"$STACK_DIR/mcpexec.times"
		done
		MCP_HOME=$STACK_DIR/mcp-home BC_TOKEN=$BC_TOKEN node "$here/mcp_calls.mjs" "$nm" "$BC_BIN/bcctl" \
			"$BC_URL" "$BC_CA_FILE" "$STACK_DIR/bench-key" "$sbx" 5 >>"$STACK_DIR/mcp.times" 2>>"$STACK_DIR/mcp.err"
	done
	say "MCP run_command ms: $(tr '\n' ';' <"$STACK_DIR/mcp.times")"
	say "bcctl sandbox exec ms: $(tr '\n' ';' <"$STACK_DIR/mcpexec.times")"
	m=$(median <"$STACK_DIR/mcp.times")
	e=$(median <"$STACK_DIR/mcpexec.times")
	if [ -n "$m" ] && [ -n "$e" ]; then
		mcp_row=$(printf 'run_command true through MCP (stdio)\tp50_us\t%s\tbcctl sandbox exec -- true\t%s' \
			"$(awk -v v="$m" 'BEGIN {printf "%d", v * 1000}')" "$((e * 1000))")
	else
		say "MCP row: no times ($(tail -n 3 "$STACK_DIR/mcp.err" 2>/dev/null))"
	fi
	bcctl sandbox delete "$sbx" >/dev/null
fi
# the clock row: one more warm guest, left paused BENCH_GUEST_CLOCK_PAUSE
# seconds (default 600; 0: no row), claimed, and its clock read through
# exec as soon as exec answers, against the host's clock before and after
# that exec (the skew is how far outside that window the guest's reading
# lies). An uncorrected clock would lag by the whole pause: that is the peer.
: "${BENCH_GUEST_CLOCK_PAUSE:=600}"
clock_row=
if [ "$BENCH_GUEST_CLOCK_PAUSE" -gt 0 ]; then
	s=$(ms)
	until booted; do
		[ $(($(ms) - s)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ] || { say "no booted warm guest"; exit 0; }
		sleep 1
	done
	say "clock row: the warm guest stays paused ${BENCH_GUEST_CLOCK_PAUSE} s"
	sleep "$BENCH_GUEST_CLOCK_PAUSE"
	sbx=$(json_get "$(bcctl --format json sandbox create --template "$tw" --ttl 1h --wait 20s)" id)
	reach "$sbx" "$(ms)" >/dev/null || { say "clock sandbox $sbx never reachable"; exit 0; }
	hb=$(ms)
	g=$(bcctl sandbox exec "$sbx" --key "$STACK_DIR/bench-key" -- date +%s%3N </dev/null 2>/dev/null)
	ha=$(ms)
	if [ -n "$g" ]; then
		skew=$((g < hb ? hb - g : g > ha ? g - ha : 0))
		say "clock row: guest $g ms, host window [$hb, $ha] ms, skew $skew ms"
		clock_row=$(printf 'warm guest clock after a %s s pause (first exec)\tskew_us\t%s\tno correction: the pause\t%s' \
			"$BENCH_GUEST_CLOCK_PAUSE" "$((skew * 1000))" "$((BENCH_GUEST_CLOCK_PAUSE * 1000000))")
	else
		say "clock row: the guest's clock could not be read"
	fi
	bcctl sandbox delete "$sbx" >/dev/null
fi
bcctl sandbox-template update "$tw" --warm-min 0 --warm-max 0 >/dev/null 2>&1
for ((i = 0; i < BENCH_GUEST_N; i++)); do
	t0=$(ms)
	sbx=$(json_get "$(bcctl --format json sandbox create --template "$tc" --ttl 1h)" id)
	r=$(reach "$sbx" "$t0") || { say "cold sandbox $sbx never reachable"; exit 0; }
	echo "$r" >>"$STACK_DIR/cold.times"
	bcctl sandbox delete "$sbx" >/dev/null
	# its guest's CPU is not the next one's
	until [ -z "$(q "SELECT id FROM instances WHERE id = (SELECT instance_id FROM sandboxes WHERE id = '$sbx') AND state <> 'deleted'")" ]; do sleep 1; done
done
say "warm (port 22, exec) ms: $(tr '\n' ';' <"$STACK_DIR/warm.times")"
say "cold (port 22, exec) ms: $(tr '\n' ';' <"$STACK_DIR/cold.times")"
for col in 1 2; do
	name=$([ "$col" = 1 ] && echo "port 22 answers" || echo "exec -- true exits 0")
	w=$(cut -d' ' -f"$col" "$STACK_DIR/warm.times" | median)
	c=$(cut -d' ' -f"$col" "$STACK_DIR/cold.times" | median)
	printf 'warm sandbox create -> %s\tp50_us\t%s\tcold create, same guest\t%s\n' \
		"$name" "$((w * 1000))" "$((c * 1000))"
done
[ -z "$clock_row" ] || echo "$clock_row"
[ -z "$mcp_row" ] || echo "$mcp_row"
exit 0
