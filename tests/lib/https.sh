# https.sh: a test CA and a static https file server on loopback, for the
# images bcd fetches (and anything else a test serves over https).
#
#   . tests/lib/https.sh
#   https_up DIR [WORK]       # serve DIR; certificates and logs in WORK
#   curl --cacert "$HTTPS_CA_FILE" "$HTTPS_URL/guest.qcow2"
#   https_down                # also registered with tap_on_exit
#
# After https_up: HTTPS_URL (https://127.0.0.1:PORT, no trailing slash),
# HTTPS_CA_FILE (the test CA, PEM: the agent's image_ca_file), HTTPS_PID,
# HTTPS_DIR (WORK). The CA and the server certificate (ECDSA P-256, SAN
# IP:127.0.0.1 and DNS:localhost, valid 2 days) are made fresh with the
# openssl CLI in WORK (default: a temp dir removed by https_down). The
# server is tests/lib/https_server.py (python3's http.server behind TLS,
# GET/HEAD with Content-Length and ranges, no listings); its requests are
# logged to WORK/https.log. With BC_STACK_PERSIST=1 (the demo) it is
# detached and left running; https_down (or `make stop`) ends it.

if [ -n "${HTTPS_SH_LOADED:-}" ]; then
	return 0
fi
HTTPS_SH_LOADED=1

_https_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HTTPS_URL=''
HTTPS_CA_FILE=''
HTTPS_PID=''
HTTPS_DIR=''
_HTTPS_OWN_DIR=0

_https_log() { echo "https: $*" >&2; }

# https_make_pki WORK: ca.pem/ca.key and server.pem/server.key in WORK.
https_make_pki() {
	local w=$1
	openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
		-keyout "$w/ca.key" -out "$w/ca.pem" -days 2 -subj "/CN=bc test image CA" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
		2>/dev/null || return 1
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
		-keyout "$w/server.key" -out "$w/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null || return 1
	printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature' \
		'extendedKeyUsage=serverAuth' 'subjectAltName=IP:127.0.0.1,DNS:localhost' >"$w/server.ext"
	openssl x509 -req -in "$w/server.csr" -CA "$w/ca.pem" -CAkey "$w/ca.key" -CAcreateserial \
		-days 2 -extfile "$w/server.ext" -out "$w/server.pem" 2>/dev/null || return 1
	chmod 0644 "$w/ca.pem" "$w/server.pem"
}

# https_up DIR [WORK]: serve DIR over https on 127.0.0.1 until https_down.
https_up() {
	local dir=$1 w=${2:-} n
	[ -d "$dir" ] || { _https_log "no folder $dir"; return 1; }
	command -v python3 >/dev/null && command -v openssl >/dev/null ||
		{ _https_log "python3 and openssl are needed (contrib/install-deps.sh)"; return 1; }
	if [ -z "$w" ]; then
		w=$(mktemp -d "${TMPDIR:-/tmp}/bc-https.XXXXXX") || return 1
		_HTTPS_OWN_DIR=1
	fi
	mkdir -p "$w" && chmod 0755 "$w"
	HTTPS_DIR=$(cd "$w" && pwd -P)
	https_make_pki "$HTTPS_DIR" || { _https_log "making the test CA failed"; return 1; }
	rm -f "$HTTPS_DIR/port"
	if [ "${BC_STACK_PERSIST:-0}" = 1 ]; then
		setsid nohup python3 "$_https_lib/https_server.py" --dir "$dir" --cert "$HTTPS_DIR/server.pem" \
			--key "$HTTPS_DIR/server.key" --port-file "$HTTPS_DIR/port" \
			>>"$HTTPS_DIR/https.log" 2>&1 </dev/null &
	else
		python3 "$_https_lib/https_server.py" --dir "$dir" --cert "$HTTPS_DIR/server.pem" \
			--key "$HTTPS_DIR/server.key" --port-file "$HTTPS_DIR/port" \
			>>"$HTTPS_DIR/https.log" 2>&1 </dev/null &
		declare -F tap_on_exit >/dev/null && tap_on_exit https_down
	fi
	HTTPS_PID=$!
	echo "$HTTPS_PID" >"$HTTPS_DIR/pid"
	for ((n = 0; n < 300; n++)); do
		if [ -s "$HTTPS_DIR/port" ]; then
			HTTPS_URL="https://127.0.0.1:$(tr -d '[:space:]' <"$HTTPS_DIR/port")"
			HTTPS_CA_FILE=$HTTPS_DIR/ca.pem
			export HTTPS_URL HTTPS_CA_FILE HTTPS_PID HTTPS_DIR
			return 0
		fi
		kill -0 "$HTTPS_PID" 2>/dev/null || break
		sleep 0.1
	done
	_https_log "the server did not start; its log:"
	sed 's/^/# /' "$HTTPS_DIR/https.log" >&2
	https_down
	return 1
}

# https_down [WORK]: stop the server (this shell's, or the one whose WORK
# is given, as `make stop` does for the demo's); safe to call twice.
https_down() {
	local w=${1:-$HTTPS_DIR} pid n
	[ -n "$w" ] || return 0
	pid=$(cat "$w/pid" 2>/dev/null)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for ((n = 0; n < 50; n++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -f "$w/pid"
	if [ "$w" = "$HTTPS_DIR" ]; then
		[ "$_HTTPS_OWN_DIR" = 1 ] && rm -rf "$HTTPS_DIR"
		HTTPS_URL='' HTTPS_PID='' HTTPS_DIR='' _HTTPS_OWN_DIR=0
	fi
	return 0
}
