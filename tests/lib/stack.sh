# stack.sh: a whole bc deployment on loopback, for integration tests, the
# interop suite, benchmarks and the demo: a throwaway PostgreSQL cluster, N
# bc-controller replicas on one database, M bcd agents with the fake runtime.
#
#   . tests/lib/tap.sh
#   . tests/lib/stack.sh
#   stack_up --controllers 2 --agents 3 --agent-capacity 8,16384,100 || bail_out "no stack"
#   bcctl --format json pool get "$POOL_ID"        # replica 1
#   bcctl_n 2 instance list "${TENANT_ARGS[@]}"    # replica 2
#   agent_kill 1; agent_start 1; ctl_kill 2; ctl_start 2
#   event_keys instance.lost "instance/$id"       # its data's keys: nodeId,reason
#   done_testing                                   # stack_down runs at exit
#
# After stack_up these are set and exported:
#   STACK_DIR               the temp dir: configs, pki/, logs, agent state
#   BC_URL_1..N, BC_URL     replica addresses host:port (BC_URL = replica 1)
#   BC_TOKEN, BC_CA_FILE    the admin token from `init` and pki/api-ca.pem
#   BC_TENANT, TENANT_ARGS  tenant for instances: empty (the token's own
#                           tenant, TENANT_ARGS=()) unless BC_TENANT is set
#                           (TENANT_ARGS=(--tenant "$BC_TENANT"))
#   POOL_ID                 pool p1 (runtime fake, 10.77.0.0/24, bridge bcbr0;
#                           BC_POOL_SUBNET / BC_POOL_GATEWAY / BC_POOL_BRIDGE
#                           choose another range or bridge)
#   FLAVOR_ID, FLAVOR_NAME  flavor sbx.small (1 vCPU, 512 MiB, 1 GiB)
#   STACK_CONTROLLERS, STACK_AGENTS
#
# Environment knobs: BC_BIN (binaries; default $BC_SRC/build/bin), BC_SRC
# (default: this checkout), BC_NODE_LOST_SECONDS (60), BC_LOG_LEVEL (debug),
# BC_REPORT_INTERVAL_SECONDS (agents' report_interval_seconds, default 2),
# BC_CTL_EXTRA_CONF / BC_AGENT_EXTRA_CONF (extra "key = value" lines for
# every controller / agent config), BC_KEEP_STACK=1 (keep STACK_DIR after
# the test), BC_STACK_DIR + BC_STACK_PERSIST=1 (the demo: a fixed dir,
# daemons detached with setsid/nohup, nothing stopped at exit).
#
# `stack_up --runtime libvirt` runs real VMs: the pool's runtime is libvirt,
# every agent gets `runtime = libvirt`, `network = nftables` (it makes the
# pool's bridge, the taps and their guards), `data_dir = STACK_DIR/data-N`,
# `image_ca_file = $BC_IMAGE_CA_FILE` and `domain_type = $BC_DOMAIN_TYPE`
# (default auto). libvirtd must answer (tests/lib/libvirt.sh: libvirt_up).
# Stopping bcd never stops a VM, so stack_down also destroys and undefines
# the domains of this stack's nodes, deletes their taps, the bridge, and the
# agents' nftables tables when no other bcd is left running.
#
# Every daemon's pid is in STACK_DIR/pids ("name pid" lines: ctl-1, bcd-1),
# its output in STACK_DIR/<name>.log. stack_down stops them (TERM, then KILL
# after 10 s), stops PostgreSQL, prints log tails as diag lines when the test
# failed, and fails the file when a daemon log holds a sanitizer report.

if [ -n "${STACK_SH_LOADED:-}" ]; then
	return 0
fi
STACK_SH_LOADED=1

_stack_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tap.sh
. "$_stack_lib/tap.sh"
# shellcheck source=pg.sh
. "$_stack_lib/pg.sh"

: "${BC_SRC:=$(cd "$_stack_lib/../.." && pwd)}"
: "${BC_BIN:=$BC_SRC/build/bin}"
export BC_SRC BC_BIN

STACK_CONTROLLERS=0
STACK_AGENTS=0
STACK_UP=0
STACK_RUNTIME=fake
TENANT_ARGS=()

_stack_log() { diag "stack: $*"; }

# ------------------------------------------------------------ processes

# _proc_alive PID: true while PID runs (a zombie counts as gone).
_proc_alive() {
	local st
	[ -n "${1:-}" ] || return 1
	kill -0 "$1" 2>/dev/null || return 1
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	case "$st" in Z*) return 1 ;; esac
	return 0
}

# _proc_wait_gone PID TIMEOUT_S: wait for PID to end (reaps our children).
_proc_wait_gone() {
	local pid=$1 n=$(($2 * 10))
	while [ $n -gt 0 ] && _proc_alive "$pid"; do
		sleep 0.1
		n=$((n - 1))
	done
	wait "$pid" 2>/dev/null
	! _proc_alive "$pid"
}

# _stack_set_pid NAME PID / _stack_get_pid NAME: STACK_DIR/pids bookkeeping.
_stack_set_pid() {
	local f=$STACK_DIR/pids
	touch "$f"
	grep -v "^$1 " "$f" >"$f.new" || true
	[ -n "${2:-}" ] && echo "$1 $2" >>"$f.new"
	mv "$f.new" "$f"
}
_stack_get_pid() {
	[ -f "$STACK_DIR/pids" ] || return 1
	awk -v n="$1" '$1 == n { print $2 }' "$STACK_DIR/pids"
}

# _stack_launch NAME CMD...: start a daemon, output to STACK_DIR/NAME.log.
_stack_launch() {
	local name=$1 pid
	shift
	echo "==== $(date '+%F %T') start: $*" >>"$STACK_DIR/$name.log"
	if [ "${BC_STACK_PERSIST:-0}" = 1 ]; then
		setsid nohup "$@" >>"$STACK_DIR/$name.log" 2>&1 </dev/null &
	else
		"$@" >>"$STACK_DIR/$name.log" 2>&1 </dev/null &
	fi
	pid=$!
	_stack_set_pid "$name" "$pid"
}

# _stack_signal NAME SIG WAIT_S: signal a daemon and wait for it to end.
_stack_signal() {
	local name=$1 sig=$2 wait_s=$3 pid
	pid=$(_stack_get_pid "$name")
	[ -n "$pid" ] || return 0
	if _proc_alive "$pid"; then
		kill "-$sig" "$pid" 2>/dev/null
		if ! _proc_wait_gone "$pid" "$wait_s"; then
			_stack_log "$name ($pid) survived SIG$sig for ${wait_s}s: killing it"
			kill -KILL "$pid" 2>/dev/null
			_proc_wait_gone "$pid" 5
		fi
	else
		wait "$pid" 2>/dev/null
	fi
	_stack_set_pid "$name" ""
	echo "==== $(date '+%F %T') stopped (SIG$sig)" >>"$STACK_DIR/$name.log"
}

# ------------------------------------------------------------ bcctl

# ctl_url N: address of replica N.
ctl_url() {
	local v="BC_URL_$1"
	echo "${!v:-}"
}

# bcctl_n N ARGS...: bcctl against replica N with the admin token, the API
# CA and an empty HOME (no ~/.config/bc/config of the person running tests).
bcctl_n() {
	local n=$1
	shift
	HOME=$STACK_DIR/home BC_TOKEN=$BC_TOKEN "$BC_BIN/bcctl" \
		--url "$(ctl_url "$n")" --ca-file "$BC_CA_FILE" "$@"
}

# bcctl ARGS...: bcctl_n 1.
bcctl() { bcctl_n 1 "$@"; }

# bcctl_load N ARGS...: bcctl_n with BC_LOAD_BIN's bcctl when it is set
# (make check: the optimized build beside the sanitized one). For a test's
# bulk clients only (hundreds of calls that load the stack): every process
# of a sanitized bcctl costs a second of CPU, and the servers under test
# stay sanitized.
bcctl_load() {
	BC_BIN=${BC_LOAD_BIN:-$BC_BIN} bcctl_n "$@"
}

# event_keys TYPE SUBJECT: the keys of the data of the newest TYPE event
# about SUBJECT, sorted and comma-separated ("(none)" without such an event):
# is "$(event_keys instance.lost "instance/$id")" nodeId,reason "..."
event_keys() {
	psql -d bc -XAtq -v type="$1" -v subject="$2" <<'SQL'
SELECT CASE WHEN count(e.id) = 0 THEN '(none)' ELSE coalesce(string_agg(k, ',' ORDER BY k), '')
	END FROM (SELECT id, data FROM events WHERE type = :'type' AND subject = :'subject'
	ORDER BY id DESC LIMIT 1) e LEFT JOIN LATERAL jsonb_object_keys(e.data) k ON true
SQL
}

# events_list FILE ARGS...: append every event `bcctl events list ARGS`
# pages through (oldest first) to FILE, one JSON object a line; 1 when a
# page fails.
events_list() {
	local file=$1 after=0 out
	shift
	while :; do
		out=$(bcctl --format json events list "$@" --after "$after" --limit 1000) || return 1
		json_items "$out" >>"$file"
		after=$(json_get "$out" cursor)
		[ -n "$after" ] && [ "$after" != 0 ] || return 0
	done
}

# event_kinds_check FILE CLASSIFY: each event of FILE (one JSON object a
# line, its data as text) that `CLASSIFY ID TYPE SUBJECT DATA` prints a kind
# for must have exactly the keys the caller's associative array want gives
# "TYPE KIND" (sorted, comma-separated), and no other pair may appear; then
# every pair of want must have been seen. One test line per pair, and one
# per event that is wrong.
event_kinds_check() {
	local file=$1 classify=$2 eid type subject data keys kind k
	local -A seen=()
	while IFS=$'\t' read -r eid type subject data keys; do
		kind=$("$classify" "$eid" "$type" "$subject" "$data")
		[ -n "$kind" ] || continue
		k="$type $kind"
		if [ -z "${want[$k]+x}" ]; then
			fail "$k ($subject, event $eid): a type this test does not expect: $data"
		elif [ "${want[$k]}" != "$keys" ]; then
			is "$keys" "${want[$k]}" "$k ($subject, event $eid): its data's keys"
		fi
		seen[$k]=$((${seen[$k]:-0} + 1))
	done < <(jq -r '[(.id | tostring), .type, .subject, .data,
		(.data | fromjson | keys | join(","))] | join("\t")' "$file")
	for k in $(printf '%s\n' "${!want[@]}" | tr ' ' '|' | LC_ALL=C sort); do
		k=${k/|/ }
		ok "[ ${seen[$k]:-0} -gt 0 ]" "$k: {${want[$k]}} (${seen[$k]:-0} seen)"
	done
}

# json_get JSON FIELD: the value of a top-level snake_case FIELD, accepting
# the proto3 JSON lowerCamelCase spelling too; empty when absent.
json_get() {
	printf '%s' "$1" | jq -r --arg f "$2" '
		($f | split("_") | .[0] + ([.[1:][] | (.[0:1] | ascii_upcase) + .[1:]] | join(""))) as $c
		| if type == "object" then (if has($f) then .[$f] elif has($c) then .[$c] else null end) else null end
		| if . == null then empty else . end' 2>/dev/null
}

# json_items JSON: the items of a list answer, whether bcctl prints an
# array or a {"items": [...]} object, one JSON object per line.
json_items() {
	printf '%s' "$1" | jq -c 'if type == "array" then .[] else (.items // [])[] end' 2>/dev/null
}

# ------------------------------------------------------------ controllers

_ctl_write_conf() {
	local n=$1 port=$2
	cat >"$STACK_DIR/ctl-$n.conf" <<EOF
# bc-controller replica $n (written by tests/lib/stack.sh)
database = host=$STACK_PG_DIR port=$PGPORT dbname=bc user=postgres
listen = 127.0.0.1:$port
pki_dir = $STACK_DIR/pki
migrations_dir = $BC_SRC/migrations
node_lost_seconds = ${BC_NODE_LOST_SECONDS:-60}
replica = ctl-$n
log_level = ${BC_LOG_LEVEL:-debug}
EOF
	if [ -n "${BC_CTL_EXTRA_CONF:-}" ]; then
		printf '%s\n' "$BC_CTL_EXTRA_CONF" >>"$STACK_DIR/ctl-$n.conf"
	fi
	export "BC_URL_$n=127.0.0.1:$port"
	[ "$n" = 1 ] && export BC_URL="127.0.0.1:$port"
	return 0
}

_ctl_port() {
	sed -n 's/^listen = 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$STACK_DIR/ctl-$1.conf" 2>/dev/null
}

# ctl_ready N: replica N answers an authenticated call.
ctl_ready() {
	bcctl_n "$1" pool list >/dev/null 2>&1
}

# ctl_start N: start replica N (again) and wait until it answers; a bind
# failure at the first start moves it to another port.
ctl_start() {
	local n=$1 attempt pid deadline
	pid=$(_stack_get_pid "ctl-$n")
	if _proc_alive "$pid"; then
		return 0
	fi
	for attempt in 1 2 3; do
		_stack_launch "ctl-$n" "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-$n.conf"
		pid=$(_stack_get_pid "ctl-$n")
		deadline=$((SECONDS + ${BC_CTL_START_TIMEOUT:-60}))
		while [ $SECONDS -lt $deadline ] && _proc_alive "$pid"; do
			if ctl_ready "$n"; then
				return 0
			fi
			sleep 0.2
		done
		if _proc_alive "$pid"; then
			_stack_log "ctl-$n (pid $pid) did not answer within ${BC_CTL_START_TIMEOUT:-60}s"
			break
		fi
		wait "$pid" 2>/dev/null
		if tail -n 20 "$STACK_DIR/ctl-$n.log" | grep -qi 'address already in use\|bind'; then
			_ctl_write_conf "$n" "$(free_tcp_port)"
			continue
		fi
		_stack_log "ctl-$n exited during start-up"
		break
	done
	diag_file "$STACK_DIR/ctl-$n.log" 40
	return 1
}

# ctl_kill N [SIG]: stop replica N (default SIGKILL).
ctl_kill() {
	_stack_signal "ctl-$1" "${2:-KILL}" 10
}

# ------------------------------------------------------------ agents

_agent_write_conf() {
	local n=$1 token=${2:-} ctl
	ctl=$(((n - 1) % STACK_CONTROLLERS + 1))
	mkdir -p "$STACK_DIR/agent-$n"
	{
		echo "# bcd $n (written by tests/lib/stack.sh)"
		echo "controller = $(ctl_url "$ctl")"
		echo "ca_file = $BC_CA_FILE"
		[ -n "$token" ] && echo "join_token = $token"
		echo "state_dir = $STACK_DIR/agent-$n"
		echo "runtime = $STACK_RUNTIME"
		if [ "$STACK_RUNTIME" = libvirt ]; then
			echo "network = nftables"
			echo "data_dir = $STACK_DIR/data-$n"
			[ -n "${BC_IMAGE_CA_FILE:-}" ] && echo "image_ca_file = $BC_IMAGE_CA_FILE"
			echo "domain_type = ${BC_DOMAIN_TYPE:-auto}"
		fi
		echo "hostname = agent-$n"
		echo "address = 127.0.0.1"
		echo "tunnel_listen = 127.0.0.1:$(free_tcp_port)"
		[ -n "${BC_AGENT_LABELS:-}" ] && echo "labels = $BC_AGENT_LABELS"
		echo "capacity_vcpus = $STACK_CAP_VCPUS"
		echo "capacity_memory_mib = $STACK_CAP_MEM"
		echo "capacity_disk_gib = $STACK_CAP_DISK"
		echo "report_interval_seconds = ${BC_REPORT_INTERVAL_SECONDS:-2}"
		echo "log_level = ${BC_LOG_LEVEL:-debug}"
		[ -n "${BC_AGENT_EXTRA_CONF:-}" ] && printf '%s\n' "$BC_AGENT_EXTRA_CONF"
	} >"$STACK_DIR/bcd-$n.conf"
	return 0
}

# agent_join_token: mint a join token for POOL_ID, print it.
agent_join_token() {
	local out
	out=$(bcctl --format json node join-token --pool "$POOL_ID") || return 1
	printf '%s' "$out" | jq -re '.token'
}

# agent_start N: start agent N; the first time with a fresh join token,
# afterwards with its state dir only (no join token), as after a reboot.
agent_start() {
	local n=$1 pid token=''
	pid=$(_stack_get_pid "bcd-$n")
	if _proc_alive "$pid"; then
		return 0
	fi
	# node.pem is written last at join: without it the agent joins (again)
	if [ ! -f "$STACK_DIR/agent-$n/node.pem" ]; then
		token=$(agent_join_token) || {
			_stack_log "no join token for agent $n"
			return 1
		}
	fi
	_agent_write_conf "$n" "$token"
	_stack_launch "bcd-$n" "$BC_BIN/bcd" --config "$STACK_DIR/bcd-$n.conf"
}

# agent_kill N [SIG]: stop agent N (default SIGKILL).
agent_kill() {
	_stack_signal "bcd-$1" "${2:-KILL}" 10
}

# agent_node_id N: the node id agent N was given at join.
agent_node_id() {
	cat "$STACK_DIR/agent-$1/node.id" 2>/dev/null
}

# stack_ready_nodes: how many nodes `node list` shows ready.
stack_ready_nodes() {
	local out
	out=$(bcctl --format json node list 2>/dev/null) || return 1
	json_items "$out" | jq -s '[.[] | select(.state == "ready")] | length'
}

# stack_wait_nodes_ready M [TIMEOUT_S]: until `node list` shows M ready
# nodes; gives up early when an agent process has exited.
stack_wait_nodes_ready() {
	local want=$1 deadline=$((SECONDS + ${2:-60})) i pid
	while :; do
		[ "$(stack_ready_nodes)" = "$want" ] && return 0
		for ((i = 1; i <= STACK_AGENTS; i++)); do
			pid=$(_stack_get_pid "bcd-$i")
			if [ -n "$pid" ] && ! _proc_alive "$pid"; then
				_stack_log "bcd-$i (pid $pid) exited"
				return 1
			fi
		done
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.3
	done
}

# ------------------------------------------------------------ objects

# stack_image_create NAME: register an image (https URL that is never
# fetched by the fake runtime, the sha256 of NAME), print its id.
stack_image_create() {
	local name=$1 out sha
	sha=$(printf '%s' "$name" | sha256sum | cut -d' ' -f1)
	out=$(bcctl --format json image create --name "$name" --format qcow2 \
		--url "https://images.bc.invalid/$name.qcow2" --sha256 "$sha" --size 1073741824) || return 1
	json_get "$out" id
}

# instance_state ID [N]: the state of an instance as bcctl (replica N) shows it.
instance_state() {
	local out
	out=$(bcctl_n "${2:-1}" --format json instance get "$1" "${TENANT_ARGS[@]}" 2>/dev/null) || return 1
	json_get "$out" state
}

# instance_state_is ID STATE...: true when the instance is in one of STATE.
instance_state_is() {
	local id=$1 st s
	shift
	st=$(instance_state "$id") || return 1
	for s in "$@"; do
		[ "$st" = "$s" ] && return 0
	done
	return 1
}

# ------------------------------------------------------------ up / down

_stack_need_bins() {
	local b
	for b in bc-controller bcd bcctl; do
		if [ ! -x "$BC_BIN/$b" ]; then
			_stack_log "$BC_BIN/$b is missing: run make first (or set BC_BIN)"
			return 1
		fi
	done
	for b in jq ss setsid runuser; do
		command -v "$b" >/dev/null || {
			_stack_log "$b is missing: run contrib/install-deps.sh"
			return 1
		}
	done
}

# _stack_pg_dir: STACK_DIR/pg, or a dir under /var/tmp when the postgres
# user cannot reach STACK_DIR (a checkout under /root) or the socket path
# would be too long. Remembered in STACK_DIR/pgdir.
_stack_pg_dir() {
	local d
	if [ -s "$STACK_DIR/pgdir" ]; then
		cat "$STACK_DIR/pgdir"
		return
	fi
	d=$STACK_DIR/pg
	if [ ${#d} -gt 90 ] || ! runuser -u postgres -- test -x "$STACK_DIR"; then
		d=$(mktemp -d /var/tmp/bc-pg.XXXXXX) && chmod 0755 "$d" || return 1
	fi
	echo "$d" >"$STACK_DIR/pgdir"
	echo "$d"
}

_stack_write_env() {
	{
		echo "export BC_URL=$BC_URL"
		echo "export BC_TOKEN=$BC_TOKEN"
		echo "export BC_CA_FILE=$BC_CA_FILE"
		echo "export BC_TENANT=$BC_TENANT"
		echo "export POOL_ID=$POOL_ID"
		echo "export FLAVOR_NAME=$FLAVOR_NAME"
		echo "export STACK_RUNTIME=$STACK_RUNTIME"
		echo "export STACK_BRIDGE=$STACK_BRIDGE"
		local i
		for ((i = 1; i <= STACK_CONTROLLERS; i++)); do
			echo "export BC_URL_$i=$(ctl_url "$i")"
		done
	} >"$STACK_DIR/env"
}

# stack_up [--controllers N] [--agents M] [--agent-capacity VCPUS,MEM_MIB,DISK_GIB]
#          [--runtime fake|libvirt]
stack_up() {
	local ctls=1 agents=1 cap=16,32768,200 i out
	while [ $# -gt 0 ]; do
		case "$1" in
		--controllers) ctls=$2; shift 2 ;;
		--agents) agents=$2; shift 2 ;;
		--agent-capacity) cap=$2; shift 2 ;;
		--runtime) STACK_RUNTIME=$2; shift 2 ;;
		*) _stack_log "stack_up: unknown option $1"; return 1 ;;
		esac
	done
	IFS=, read -r STACK_CAP_VCPUS STACK_CAP_MEM STACK_CAP_DISK <<<"$cap"
	_stack_need_bins || return 1

	if [ -n "${BC_STACK_DIR:-}" ]; then
		STACK_DIR=$BC_STACK_DIR
		mkdir -p "$STACK_DIR" || return 1
		STACK_DIR=$(cd "$STACK_DIR" && pwd -P)
	else
		STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/bc-stack.XXXXXX") || return 1
	fi
	chmod 0755 "$STACK_DIR"
	mkdir -p "$STACK_DIR/home"
	export STACK_DIR
	STACK_UP=1
	STACK_CONTROLLERS=$ctls
	STACK_AGENTS=$agents
	export STACK_CONTROLLERS STACK_AGENTS
	if [ "${BC_STACK_PERSIST:-0}" = 1 ]; then
		export PG_KEEP_RUNNING=1
	else
		tap_on_exit stack_down
	fi

	STACK_PG_DIR=$(_stack_pg_dir) || return 1
	pg_start "$STACK_PG_DIR" || return 1
	pg_createdb bc || return 1

	for ((i = 1; i <= ctls; i++)); do
		_ctl_write_conf "$i" "$(free_tcp_port)" || return 1
	done
	if ! "$BC_BIN/bc-controller" init --config "$STACK_DIR/ctl-1.conf" >"$STACK_DIR/init.log" 2>&1; then
		_stack_log "bc-controller init failed"
		diag_file "$STACK_DIR/init.log" 40
		return 1
	fi
	BC_CA_FILE=$STACK_DIR/pki/api-ca.pem
	BC_TOKEN=$(tr -d '[:space:]' <"$STACK_DIR/pki/admin.token" 2>/dev/null)
	if [ -z "$BC_TOKEN" ] || [ ! -f "$BC_CA_FILE" ]; then
		_stack_log "init left no admin token or no api-ca.pem in $STACK_DIR/pki"
		return 1
	fi
	export BC_CA_FILE BC_TOKEN
	# an empty tenant means the caller's own (the admin token's root tenant)
	export BC_TENANT=${BC_TENANT:-}
	TENANT_ARGS=()
	[ -n "$BC_TENANT" ] && TENANT_ARGS=(--tenant "$BC_TENANT")

	for ((i = 1; i <= ctls; i++)); do
		ctl_start "$i" || return 1
	done

	STACK_BRIDGE=${BC_POOL_BRIDGE:-bcbr0}
	export STACK_RUNTIME STACK_BRIDGE
	out=$(bcctl --format json pool create --name p1 --runtime "$STACK_RUNTIME" \
		--subnet "${BC_POOL_SUBNET:-10.77.0.0/24}" --gateway "${BC_POOL_GATEWAY:-10.77.0.1}" \
		--bridge "$STACK_BRIDGE") || { _stack_log "pool create failed: $out"; return 1; }
	POOL_ID=$(json_get "$out" id)
	FLAVOR_NAME=sbx.small
	out=$(bcctl --format json flavor create --name "$FLAVOR_NAME" --vcpus 1 --memory-mib 512 \
		--disk-gib 1) || { _stack_log "flavor create failed: $out"; return 1; }
	FLAVOR_ID=$(json_get "$out" id)
	export POOL_ID FLAVOR_NAME FLAVOR_ID
	if [ -z "$POOL_ID" ] || [ -z "$FLAVOR_ID" ]; then
		_stack_log "pool or flavor without an id"
		return 1
	fi

	for ((i = 1; i <= agents; i++)); do
		agent_start "$i" || return 1
	done
	_stack_write_env
	if [ "$agents" -gt 0 ] && ! stack_wait_nodes_ready "$agents" "${BC_NODES_READY_TIMEOUT:-60}"; then
		_stack_log "only $(stack_ready_nodes) of $agents nodes ready"
		return 1
	fi
	return 0
}

# _stack_sanitizer_reports: name the logs holding ASan/UBSan/LSan reports.
_stack_sanitizer_reports() {
	grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|\.[ch]:[0-9]+:[0-9]+: runtime error:' \
		"$STACK_DIR"/ctl-*.log "$STACK_DIR"/bcd-*.log "$STACK_DIR"/init.log 2>/dev/null
}

# stack_stop_daemons: TERM every agent then every replica (KILL after 10 s).
stack_stop_daemons() {
	local name
	[ -f "$STACK_DIR/pids" ] || return 0
	for name in $(awk '$1 ~ /^bcd-/ { print $1 }' "$STACK_DIR/pids") \
		$(awk '$1 !~ /^bcd-/ { print $1 }' "$STACK_DIR/pids"); do
		_stack_signal "$name" TERM 10
	done
}

# stack_domains: the libvirt domains of this stack's nodes (by the node id
# bcd writes in each domain's metadata), one name per line.
stack_domains() {
	local i node d all n xml
	# a busy libvirtd can fail a call: ask again before concluding "none"
	for ((n = 0; n < 10; n++)); do
		all=$(virsh -q list --all --name 2>/dev/null) && break
		sleep 1
	done
	for ((i = 1; i <= STACK_AGENTS; i++)); do
		node=$(agent_node_id "$i") || continue
		[ -n "$node" ] || continue
		for d in $all; do
			# no `| grep -q`: under pipefail (the demo's scripts) virsh's
			# SIGPIPE would fail the match
			xml=$(virsh -q dumpxml "$d" 2>/dev/null)
			[[ $xml == *">$node</"* ]] && echo "$d"
		done
	done
	return 0
}

# _stack_domain_destroy NAME: destroy (again, while QEMU is slow to exit on
# a loaded host: one destroy can time out), then undefine with its NVRAM.
_stack_domain_destroy() {
	local n st
	for ((n = 0; n < 30; n++)); do
		st=$(virsh -q domstate "$1" 2>/dev/null | head -n1)
		case "$st" in
		'' | 'shut off') break ;;
		esac
		virsh -q destroy "$1" >/dev/null 2>&1 || sleep 1
	done
	virsh -q undefine --nvram "$1" >/dev/null 2>&1
	[ -z "$(virsh -q domstate "$1" 2>/dev/null)" ] || _stack_log "domain $1 could not be removed"
}

# stack_libvirt_cleanup: what a libvirt stack leaves when its agents stop:
# domains (destroyed, undefined with their NVRAM), taps on the bridge, the
# bridge, and the agents' nftables tables when no bcd runs any more.
stack_libvirt_cleanup() {
	local d t
	[ "$STACK_RUNTIME" = libvirt ] || return 0
	for d in $(stack_domains); do
		_stack_domain_destroy "$d"
	done
	if [ -n "${STACK_BRIDGE:-}" ] && ip link show "$STACK_BRIDGE" >/dev/null 2>&1; then
		for t in $(ip -o link show master "$STACK_BRIDGE" 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
			ip link del "$t" 2>/dev/null
		done
		ip link del "$STACK_BRIDGE" 2>/dev/null
	fi
	if ! _stack_nft_agents; then
		nft delete table bridge bcd_instances 2>/dev/null
		nft delete table inet bcd_taps 2>/dev/null
	fi
	return 0
}

# _stack_nft_agents: true while some bcd in this network namespace runs with
# `network = nftables` (its tables are this host's).
_stack_nft_agents() {
	local pid conf ns
	ns=$(readlink /proc/self/ns/net)
	for pid in $(pgrep -x bcd 2>/dev/null); do
		[ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$ns" ] || continue
		conf=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | awk 'p { print; exit } $0 == "--config" { p = 1 }')
		[ -n "$conf" ] && grep -Eq '^[[:space:]]*network[[:space:]]*=[[:space:]]*nftables' "$conf" 2>/dev/null && return 0
	done
	return 1
}

# stack_down: stop everything; see the top of the file. Safe to call twice.
# Returns non-zero when a daemon log holds a sanitizer report.
stack_down() {
	local rc=0 f reports pgdir
	[ "$STACK_UP" = 1 ] || return 0
	STACK_UP=0
	[ -n "${STACK_DIR:-}" ] && [ -d "$STACK_DIR" ] || return 0
	stack_stop_daemons
	stack_libvirt_cleanup
	reports=$(_stack_sanitizer_reports)
	if [ -n "$reports" ]; then
		rc=1
		for f in $reports; do
			_stack_log "sanitizer report in $f:"
			diag "$(grep -E -A 30 -m 1 'ERROR: (Address|Leak)Sanitizer|ThreadSanitizer|: runtime error:' "$f")"
		done
		[ -n "${TAP_EXIT_STATUS:-}" ] && [ "$TAP_EXIT_STATUS" = 0 ] && TAP_EXIT_STATUS=1
	fi
	if [ "${TAP_EXIT_STATUS:-0}" != 0 ] || [ "${TAP_FAILED:-0}" -gt 0 ]; then
		for f in "$STACK_DIR"/init.log "$STACK_DIR"/ctl-*.log "$STACK_DIR"/bcd-*.log; do
			[ -f "$f" ] && diag_file "$f" "${BC_STACK_LOG_LINES:-40}"
		done
		diag_file "$(cat "$STACK_DIR/pgdir" 2>/dev/null)/postgres.log" 20
	fi
	pgdir=$(cat "$STACK_DIR/pgdir" 2>/dev/null)
	[ -n "$pgdir" ] && pg_stop "$pgdir"
	if [ "${BC_KEEP_STACK:-0}" = 1 ] || [ "${BC_STACK_PERSIST:-0}" = 1 ]; then
		[ "${BC_STACK_PERSIST:-0}" = 1 ] || _stack_log "kept $STACK_DIR"
	else
		case "$pgdir" in
		"$STACK_DIR"/*) ;;
		?*) rm -rf "$pgdir" ;;
		esac
		rm -rf "$STACK_DIR"
	fi
	return $rc
}

# stack_attach DIR: adopt a running persistent stack (the demo's) so that
# bcctl, stack_down and friends work on it from another shell.
stack_attach() {
	STACK_DIR=$(cd "$1" && pwd -P) || return 1
	export STACK_DIR
	STACK_UP=1
	STACK_CONTROLLERS=$(ls "$STACK_DIR"/ctl-*.conf 2>/dev/null | wc -l)
	STACK_AGENTS=$(ls "$STACK_DIR"/bcd-*.conf 2>/dev/null | wc -l)
	if [ -f "$STACK_DIR/env" ]; then
		# shellcheck disable=SC1091
		. "$STACK_DIR/env"
	fi
	return 0
}
