# pg.sh: throwaway PostgreSQL 15 clusters for tests, benchmarks and the demo.
#
#   . tests/lib/pg.sh
#   pg_start "$dir"          # initdb (first time) + start; exports PGHOST PGPORT PGUSER
#   pg_createdb bc           # or: pg_createdb test1 bc_template
#   psql -d bc -c 'select 1'
#   pg_stop "$dir"           # fast shutdown; also done at exit (see below)
#
# Layout: DIR/data is the cluster, DIR itself the unix socket directory,
# DIR/postgres.log the server log. DIR is owned by postgres (initdb refuses
# to run as root), and readable by everyone so root's clients can reach the
# socket. The server listens on 127.0.0.1 too, on a private free port.
# Authentication is trust for the socket and loopback: never use this for
# anything but throwaway data.
#
# pg_start is idempotent (a running cluster in DIR is reused, a stopped one
# restarted, on its old port when that is still free). It registers pg_stop
# to run at exit through tap_on_exit (or its own EXIT trap when tap.sh is not
# loaded), unless PG_KEEP_RUNNING=1 (the demo). pg_stop leaves DIR in place:
# its owner removes it.

if [ -n "${PG_SH_LOADED:-}" ]; then
	return 0
fi
PG_SH_LOADED=1

: "${PG_BIN:=/usr/lib/postgresql/15/bin}"
PG_STARTED_DIRS=()

# free_tcp_port: print a TCP port on 127.0.0.1 that nothing listens on, from
# a random spot of 20000-59999, never one this shell handed out before.
# (A race with another process remains possible: callers retry on a bind
# failure.)
FREE_PORTS_GIVEN=' '
free_tcp_port() {
	local p tries=0 used
	used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed -n 's/.*:\([0-9][0-9]*\)$/\1/p' | sort -u)
	while [ $tries -lt 500 ]; do
		tries=$((tries + 1))
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		case "$FREE_PORTS_GIVEN" in *" $p "*) continue ;; esac
		if printf '%s\n' "$used" | grep -qx "$p"; then
			continue
		fi
		# a connect that succeeds means someone listens after all
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			continue
		fi
		FREE_PORTS_GIVEN+="$p "
		echo "$p"
		return 0
	done
	echo "free_tcp_port: no free port found" >&2
	return 1
}

_pg_log() { echo "pg: $*" >&2; }

# _pg_as_postgres CMD...: run CMD as the postgres user (as is when we are it).
_pg_as_postgres() {
	if [ "$(id -un)" = postgres ]; then
		"$@"
	else
		runuser -u postgres -- "$@"
	fi
}

# _pg_running DIR: the postmaster of DIR's pid file is alive (a zombie left
# by a kill, which pg_ctl status would count as running, is not).
_pg_running() {
	local dir=$1 pid st
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] || return 1
	st=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
	case "$st" in Z*) return 1 ;; esac
	_pg_as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

# _pg_port DIR: the port the cluster in DIR is configured for (empty: none).
_pg_port() {
	sed -n "s/^port = \([0-9]*\).*/\1/p" "$1/data/bc.conf" 2>/dev/null | tail -n 1
}

_pg_export() {
	export PGHOST=$1 PGPORT=$2 PGUSER=postgres
	export PG_DIR=$1
	unset PGDATABASE PGPASSWORD PGSERVICE PGHOSTADDR
}

_pg_initdb() {
	local dir=$1
	_pg_as_postgres "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
		--locale=C --no-sync >"$dir/initdb.log" 2>&1 || {
		_pg_log "initdb failed:"
		cat "$dir/initdb.log" >&2
		return 1
	}
	{
		echo
		echo "# bc test harness"
		echo "include_if_exists = 'bc.conf'"
	} >>"$dir/data/postgresql.conf"
}

# _pg_write_conf DIR PORT: the harness' settings, rewritten on every start.
_pg_write_conf() {
	local dir=$1 port=$2
	cat >"$dir/data/bc.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
unix_socket_permissions = 0777
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 64MB
max_wal_size = 1GB
logging_collector = off
log_min_messages = warning
log_line_prefix = '%m [%p] %d '
${BC_PG_EXTRA_CONF:-}
EOF
	chown postgres: "$dir/data/bc.conf"
}

# pg_start DIR: see the top of the file. Returns non-zero (with the server
# log on stderr) when the cluster cannot be started.
pg_start() {
	local dir=${1:?pg_start DIR}
	local port attempt
	mkdir -p "$dir" || return 1
	dir=$(cd "$dir" && pwd -P) || return 1
	if [ ${#dir} -gt 90 ]; then
		_pg_log "$dir: path too long for a unix socket directory (at most 90 characters)"
		return 1
	fi
	if [ ! -x "$PG_BIN/initdb" ]; then
		_pg_log "no PostgreSQL 15 in $PG_BIN (run contrib/install-deps.sh)"
		return 1
	fi
	chown postgres: "$dir" && chmod 0755 "$dir" || return 1
	if ! _pg_as_postgres test -w "$dir"; then
		local up=$dir
		while [ "$up" != / ] && [ -n "$up" ]; do
			up=$(dirname "$up")
			_pg_as_postgres test -x "$up" || break
		done
		_pg_log "$dir: the postgres user cannot reach it ($up is not searchable by others)"
		return 1
	fi
	_pg_register_stop "$dir"
	if _pg_running "$dir"; then
		port=$(_pg_port "$dir")
		_pg_export "$dir" "$port"
		_pg_wait_ready "$dir" "$port" 30
		return
	fi
	if [ ! -f "$dir/data/PG_VERSION" ]; then
		rm -rf "$dir/data"
		_pg_initdb "$dir" || return 1
	fi
	# a killed server's pid file and socket lock would make a start refuse
	rm -f "$dir/data/postmaster.pid" "$dir"/.s.PGSQL.*
	port=$(_pg_port "$dir")
	for attempt in 1 2 3 4 5; do
		if [ -z "$port" ] || (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			port=$(free_tcp_port) || return 1
		fi
		_pg_write_conf "$dir" "$port"
		if _pg_as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" \
			-w -t 60 start >/dev/null 2>&1; then
			_pg_export "$dir" "$port"
			_pg_wait_ready "$dir" "$port" 30 || return 1
			return 0
		fi
		if grep -q 'could not bind\|Address already in use' "$dir/postgres.log" 2>/dev/null; then
			port=
			continue
		fi
		break
	done
	_pg_log "could not start PostgreSQL in $dir:"
	tail -n 30 "$dir/postgres.log" >&2 2>/dev/null
	return 1
}

# _pg_wait_ready DIR PORT TIMEOUT_S
_pg_wait_ready() {
	local dir=$1 port=$2 n=$(($3 * 10))
	while [ $n -gt 0 ]; do
		if "$PG_BIN/pg_isready" -q -h "$dir" -p "$port" -U postgres -d postgres; then
			return 0
		fi
		sleep 0.1
		n=$((n - 1))
	done
	_pg_log "PostgreSQL in $dir not ready after $3 s"
	return 1
}

_pg_register_stop() {
	local dir=$1 d
	[ "${PG_KEEP_RUNNING:-0}" = 1 ] && return 0
	for d in "${PG_STARTED_DIRS[@]}"; do
		[ "$d" = "$dir" ] && return 0
	done
	PG_STARTED_DIRS+=("$dir")
	if declare -F tap_on_exit >/dev/null; then
		tap_on_exit pg_stop "$dir"
	elif [ ${#PG_STARTED_DIRS[@]} -eq 1 ]; then
		trap '_pg_stop_all' EXIT
	fi
}

_pg_stop_all() {
	local d
	for d in "${PG_STARTED_DIRS[@]}"; do
		pg_stop "$d"
	done
}

# pg_createdb NAME [TEMPLATE]: create database NAME (owner postgres) in the
# cluster PGHOST/PGPORT point at, optionally as a copy of TEMPLATE (no one
# may be connected to it). An existing NAME is left alone.
pg_createdb() {
	local name=${1:?pg_createdb NAME [TEMPLATE]} tmpl=${2:-}
	local exists
	exists=$("$PG_BIN/psql" -X -At -d postgres -v ON_ERROR_STOP=1 \
		-c "select 1 from pg_database where datname = '${name//\'/\'\'}'") || return 1
	[ "$exists" = 1 ] && return 0
	if [ -n "$tmpl" ]; then
		"$PG_BIN/createdb" -T "$tmpl" "$name"
	else
		"$PG_BIN/createdb" "$name"
	fi
}

# pg_stop DIR: fast shutdown of the cluster in DIR; a server that does not
# stop within 30 s is killed. Nothing happens when none runs there.
pg_stop() {
	local dir=${1:?pg_stop DIR} pid
	[ -d "$dir" ] || return 0
	dir=$(cd "$dir" && pwd -P) || return 0
	[ -f "$dir/data/postmaster.pid" ] || return 0
	if ! _pg_running "$dir"; then
		rm -f "$dir/data/postmaster.pid"
		return 0
	fi
	if _pg_as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1; then
		return 0
	fi
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		_pg_log "PostgreSQL in $dir did not stop: killing $pid"
		kill -KILL "$pid" 2>/dev/null
		# its children exit when the postmaster is gone
		local n=50
		while [ $n -gt 0 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; n=$((n - 1)); done
	fi
	rm -f "$dir/data/postmaster.pid"
	return 0
}

# pg_destroy DIR: pg_stop and remove DIR.
pg_destroy() {
	pg_stop "$1"
	rm -rf "$1"
}
