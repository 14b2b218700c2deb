# cli_usage.t: bcctl's own contract, without a controller: usage errors exit
# 1 with a usage line, --help, local file limits, where settings come from
# (flag > env > config file), and that an unreachable controller is
# UNAVAILABLE (exit 16), printed as JSON too with --format json. The verbs
# against a live controller are exercised by the other integration tests.

. "$(dirname "$0")/../lib/tap.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
if [ -z "${BC_BIN:-}" ]; then
	BC_BIN=$BC_SRC/build/asan/bin
	[ -x "$BC_BIN/bcctl" ] || BC_BIN=$BC_SRC/build/bin
fi
BCCTL=$BC_BIN/bcctl
[ -x "$BCCTL" ] || bail_out "no bcctl in $BC_BIN (run make or make asan)"
command -v jq >/dev/null || bail_out "jq is needed"

TMP=$(mktemp -d)
tap_on_exit rm -rf "$TMP"
# An empty HOME and no BC_* from the person running the tests.
export HOME=$TMP/home
mkdir -p "$HOME"
unset BC_URL BC_TOKEN BC_CA_FILE BC_CONFIG

# A loopback port nobody listens on: bind, note, close.
CLOSED=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
DEAD=127.0.0.1:$CLOSED

# run ARGS...: bcctl with a hard limit; sets RC, OUT, ERR.
run() {
	timeout 60 "$BCCTL" "$@" >"$TMP/out" 2>"$TMP/err"
	RC=$?
	OUT=$(cat "$TMP/out")
	ERR=$(cat "$TMP/err")
}

# usage_err DESC PATTERN ARGS...: exit 1, PATTERN and a usage line on stderr.
usage_err() {
	local desc=$1 pat=$2
	shift 2
	run "$@"
	is "$RC" 1 "$desc: exit 1"
	like "$ERR" "$pat" "$desc: says why"
	like "$ERR" "usage: bcctl" "$desc: prints a usage line"
}

# ------------------------------------------------------------ help

run --help
is "$RC" 0 "--help exits 0"
for verb in "pool create" "pool list" "pool get" "pool delete" "flavor create" \
	"flavor list" "flavor get" "flavor delete" "image create" "image list" \
	"image get" "image delete" "node join-token" "node list" "node get" \
	"node retire" "instance create" "instance list" "instance get" \
	"instance delete" "version"; do
	like "$OUT" "bcctl $verb" "--help lists '$verb'"
done
like "$OUT" "--insecure" "--help lists the global flags"

run pool create --help
is "$RC" 0 "pool create --help exits 0"
like "$OUT" "--recreate-on-host-loss" "pool create --help lists its flags"
like "$OUT" "--url HOST:PORT" "verb help lists the global flags"

run instance --help
is "$RC" 0 "instance --help exits 0"
like "$OUT" "instance create" "instance --help lists the instance verbs"

run version
is "$RC" 0 "version exits 0"
like "$OUT" "^bcctl [0-9]" "version prints the version"
run --format json version
like "$(printf '%s' "$OUT" | jq -r .version)" "^[0-9]" "version --format json has .version"

# ------------------------------------------------------------ usage errors

usage_err "no arguments" "missing command"
usage_err "unknown command" "unknown command 'frobnicate'" frobnicate
run pool
is "$RC" 1 "a noun without a verb exits 1"
like "$ERR" "bcctl pool list" "... and lists the noun's verbs"
run pool frob
is "$RC" 1 "an unknown verb exits 1"
like "$ERR" "unknown verb 'frob'" "... and says so"
usage_err "unknown flag" "unknown flag --bogus" pool create --name p --runtime fake --bogus
usage_err "unknown global flag" "unknown flag --colour" --colour pool list
usage_err "missing required flag" "--runtime is required" pool create --name p
usage_err "flag given twice" "--name given more than once" pool create --name a --name b --runtime fake
usage_err "flag without a value" "--pool needs a value" node list --pool
usage_err "bool flag with a value" "--deleted takes no value" instance list --deleted=yes
usage_err "not a number" "--vcpus: 'two' is not a whole number" \
	flavor create --name f --vcpus two --memory-mib 512 --disk-gib 1
usage_err "number out of range" "--limit: 500 is out of range" instance list --limit 500
usage_err "bad duration" "--wait: 'soon' is not a duration" \
	instance create --pool p --flavor f --image i --wait soon
usage_err "ttl not in whole seconds" "--ttl: whole seconds only" node join-token --pool p --ttl 1500ms
usage_err "bad --format" "--format: 'yaml' is not one of" --format yaml pool list
usage_err "bad --timeout" "--timeout" --timeout never pool list
usage_err "missing ID" "missing ID" pool get
usage_err "missing ID (tenant, id verbs)" "missing ID" instance pause
usage_err "extra argument (tenant, id verbs)" "unexpected argument 'b'" sandbox get a b
run sandbox-template get --help
is "$RC" 0 "sandbox-template get --help exits 0"
like "$OUT" "ID +template id" "... names what its ID is"
like "$OUT" "--tenant T" "... and lists --tenant"
usage_err "--warm-max alone (create)" "--warm-max needs --warm-min" \
	sandbox-template create --name t --pool p --flavor f --image i --warm-max 2
usage_err "--warm-max alone (update)" "--warm-max needs --warm-min" \
	sandbox-template update tmpl_x --warm-max 2
usage_err "--warm-min out of range" "--warm-min: 65 is out of range" \
	sandbox-template update tmpl_x --warm-min 65
usage_err "extra argument" "unexpected argument 'b'" node get a b
usage_err "missing user data file" "--user-data-file $TMP/none: No such file" \
	instance create --pool p --flavor f --image i --user-data-file "$TMP/none"
head -c 65537 /dev/zero | tr '\0' 'a' >"$TMP/big"
usage_err "user data over 64 KiB" "larger than 65536 bytes" \
	instance create --pool p --flavor f --image i --user-data-file "$TMP/big"
printf 'a\0b' >"$TMP/nul"
usage_err "user data with NUL" "contains NUL bytes" \
	instance create --pool p --flavor f --image i --user-data-file "$TMP/nul"
printf '\xff\xfe' >"$TMP/latin"
usage_err "user data not UTF-8" "not UTF-8" \
	instance create --pool p --flavor f --image i --user-data-file "$TMP/latin"

run --format json pool get
is "$RC" 1 "a usage error with --format json still exits 1"

# ------------------------------------------------------------ unreachable

run --insecure --url "$DEAD" --timeout 5s pool list
is "$RC" 16 "closed port (plaintext): UNAVAILABLE, exit 16"
like "$ERR" "error: UNAVAILABLE: " "... printed as 'error: UNAVAILABLE: ...'"
is "$OUT" "" "... nothing on stdout in table format"

run --url "$DEAD" --timeout 5s instance get inst_x
is "$RC" 16 "closed port (TLS): exit 16"

run --format json --insecure --url "$DEAD" --timeout 5s node list
is "$RC" 16 "closed port with --format json: exit 16"
is "$(printf '%s' "$OUT" | jq -r .error.code)" UNAVAILABLE "... stdout is a JSON error object"
is "$(printf '%s' "$OUT" | jq -r '.error.message | type')" string "... with a message"
is "$(printf '%s' "$OUT" | jq -r '.error.details | type')" object "... and a details object"
like "$ERR" "error: UNAVAILABLE: " "... and the text error on stderr"

# A full 64 KiB of user data is allowed: the call is made (and fails here).
head -c 65536 /dev/zero | tr '\0' 'a' >"$TMP/max"
run --insecure --url "$DEAD" --timeout 5s instance create --pool p --flavor f --image i \
	--user-data-file "$TMP/max" --wait 1s
is "$RC" 16 "exactly 64 KiB of user data passes the local checks"

# Global flags are accepted after the verb too.
run pool list --insecure --url "$DEAD" --timeout 5s --format json
is "$RC" 16 "global flags after the verb"
is "$(printf '%s' "$OUT" | jq -r .error.code)" UNAVAILABLE "... including --format"

# ------------------------------------------------------------ settings

run --ca-file "$TMP/none.pem" --url "$DEAD" pool list
is "$RC" 1 "an unreadable --ca-file exits 1"
like "$ERR" "none.pem" "... naming the file"

BC_URL=$DEAD run --insecure --timeout 5s pool list
is "$RC" 16 "BC_URL is used"
BC_URL=http://nowhere run --insecure --url "$DEAD" --timeout 5s pool list
is "$RC" 16 "--url wins over BC_URL"

mkdir -p "$HOME/.config/bc"
printf '# test config\nurl = %s   # a closed port\ntoken = "bct_test"\n' "$DEAD" >"$HOME/.config/bc/config"
chmod 600 "$HOME/.config/bc/config"
run --insecure --timeout 5s pool list
is "$RC" 16 "url from ~/.config/bc/config is used"
unlike "$ERR" "warning" "no warning for a 0600 config"
chmod 644 "$HOME/.config/bc/config"
run --insecure --timeout 5s pool list
like "$ERR" "readable by others" "a world-readable config with a token is warned about"
rm -f "$HOME/.config/bc/config"

printf 'colour = blue\n' >"$TMP/bad.conf"
BC_CONFIG=$TMP/bad.conf run --insecure --url "$DEAD" pool list
is "$RC" 1 "an unknown config key exits 1"
like "$ERR" "bad.conf:1: unknown key 'colour'" "... naming file, line and key"
BC_CONFIG=$TMP/missing.conf run --insecure --url "$DEAD" pool list
is "$RC" 1 "a missing \$BC_CONFIG exits 1"
printf 'url = %s\n' "$DEAD" >"$TMP/ok.conf"
BC_CONFIG=$TMP/ok.conf run --insecure --timeout 5s pool list
is "$RC" 16 "\$BC_CONFIG is read"

done_testing
