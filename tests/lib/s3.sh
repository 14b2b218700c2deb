# s3.sh: an S3-compatible server for the snapshot store's tests: npm
# @20minutes/s3rver (tests/interop/package.json; `make node-deps` installs
# it), which checks AWS Signature Version 4 (headers and presigned URLs,
# expiry included), run by tests/lib/s3rver.js on 127.0.0.1.
#
#   . tests/lib/tap.sh
#   . tests/lib/s3.sh
#   s3_up DIR BUCKET [--tls] || bail_out "no s3rver"
#   curl "$S3_ENDPOINT/..."             # http(s)://127.0.0.1:PORT (S3_HOST, S3_PORT)
#   "$S3_SECRET_FILE"                   # the secret access key, one line
#   done_testing                        # s3_down runs at exit
#
# After s3_up: S3_DIR (its data and log, s3rver.log), S3_BUCKET,
# S3_ACCESS_KEY_ID, S3_SECRET_FILE (mode 0600; a fresh random secret), S3_PID,
# and with --tls S3_CA_FILE: the server then speaks https with a certificate
# of a fresh test CA (https.sh's https_make_pki, in DIR/tls). One server per
# shell.

if [ -n "${S3_SH_LOADED:-}" ]; then
	return 0
fi
S3_SH_LOADED=1

_s3_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tap.sh
. "$_s3_lib/tap.sh"
# shellcheck source=https.sh
. "$_s3_lib/https.sh"
: "${BC_SRC:=$(cd "$_s3_lib/../.." && pwd)}"
export BC_SRC

# s3_up DIR BUCKET [--tls]: start the server with one bucket and one key pair.
s3_up() {
	local dir=$1 bucket=$2 t scheme=http tls=()
	S3_DIR=$dir
	S3_BUCKET=$bucket
	S3_ACCESS_KEY_ID=BCTEST$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
	S3_SECRET_FILE=$dir/s3-secret
	mkdir -p "$dir" || return 1
	if [ ! -d "$BC_SRC/tests/interop/node_modules/@20minutes/s3rver" ]; then
		diag "s3: @20minutes/s3rver is not installed: make node-deps"
		return 1
	fi
	(umask 077 && head -c 30 /dev/urandom | base64 | tr -d '\n' >"$S3_SECRET_FILE") || return 1
	echo >>"$S3_SECRET_FILE"
	if [ "${3:-}" = --tls ]; then
		mkdir -p "$dir/tls" && https_make_pki "$dir/tls" || return 1
		tls=("$dir/tls/server.pem" "$dir/tls/server.key")
		scheme=https
		S3_CA_FILE=$dir/tls/ca.pem
		export S3_CA_FILE
	fi
	rm -f "$dir/s3.port"
	node "$_s3_lib/s3rver.js" "$dir/data" "$dir/s3.port" "$bucket" "$S3_ACCESS_KEY_ID" \
		"$S3_SECRET_FILE" "${tls[@]}" >"$dir/s3rver.log" 2>&1 &
	S3_PID=$!
	tap_on_exit s3_down
	t=$((SECONDS + 60))
	while [ ! -s "$dir/s3.port" ] && [ $SECONDS -lt $t ] && kill -0 "$S3_PID" 2>/dev/null; do
		sleep 0.2
	done
	if [ ! -s "$dir/s3.port" ]; then
		diag "s3: s3rver did not start"
		diag_file "$dir/s3rver.log" 20
		return 1
	fi
	S3_PORT=$(cat "$dir/s3.port")
	S3_HOST=127.0.0.1:$S3_PORT
	S3_ENDPOINT=$scheme://$S3_HOST
	export S3_DIR S3_BUCKET S3_ACCESS_KEY_ID S3_SECRET_FILE S3_PID S3_PORT S3_HOST S3_ENDPOINT
}

# s3_store_conf: the controller's config lines for this server as its
# snapshot store (path-style, this key pair; over http, with the test-only
# loopback switch). The secret is set with `bc-controller snapshot-store
# set-secret <"$S3_SECRET_FILE"`.
s3_store_conf() {
	printf '%s\n' "snapshot_store_endpoint = $S3_ENDPOINT" "snapshot_store_bucket = $S3_BUCKET" \
		'snapshot_store_path_style = 1' "snapshot_store_access_key_id = $S3_ACCESS_KEY_ID" \
		'snapshot_store_allow_http_loopback_for_tests = 1'
}

# s3_down: stop the server (by its pid).
s3_down() {
	[ -n "${S3_PID:-}" ] || return 0
	kill "$S3_PID" 2>/dev/null
	wait "$S3_PID" 2>/dev/null
	S3_PID=
}
