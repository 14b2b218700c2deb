# tap.sh: TAP producer for bash tests, run by `prove --exec bash`.
#
# Source it first in every .t file:
#
#   . "$(dirname "$0")/../lib/tap.sh"
#   plan 3                      # or no plan and done_testing at the end
#   ok 'test -d /tmp' 'tmp exists'       # COND: a shell expression (eval'd) ...
#   grep -q x f; ok $? 'f has an x'      # ... or an exit status (0 = pass)
#   is "$(cat f)" "x" 'f is x'
#   like "$out" '^inst_[0-9a-z]+$' 'an instance id'
#   eventually 30 instance_is_running "$id"; ok $? 'instance running'
#   done_testing
#
# Failures never stop the script unless fail_fast is on; done_testing prints
# the plan if none was given and exits non-zero when anything failed or the
# count does not match the plan. Other libraries (pg.sh, stack.sh) register
# their clean-up with tap_on_exit; one EXIT trap runs them in reverse order,
# and INT/TERM/HUP turn into an exit so the clean-up runs then too.
#
# Do not `set -e` in a .t file: a failed check is a "not ok" line, not an
# abort. Diagnostics go to stderr as "# ..." lines (prove shows them).

if [ -n "${TAP_SH_LOADED:-}" ]; then
	return 0
fi
TAP_SH_LOADED=1

TAP_N=0          # tests run
TAP_FAILED=0     # tests failed
TAP_PLANNED=''   # the plan, if given up front
TAP_FAIL_FAST=0
TAP_DONE=0
TAP_EXIT_HOOKS=()
: "${TAP_POLL_INTERVAL:=0.1}" # eventually's first pause, seconds
: "${TAP_POLL_MAX:=1}"         # ... and its longest

# plan N: announce N tests up front. plan skip_all REASON: skip the file.
plan() {
	if [ "${1:-}" = skip_all ]; then
		shift
		skip_all "$*"
	fi
	case "${1:-}" in
	'' | *[!0-9]*) bail_out "plan: not a number: '${1:-}'" ;;
	esac
	TAP_PLANNED=$1
	echo "1..$1"
}

# skip_all REASON: the whole file is skipped (counts as skipped, not passed).
skip_all() {
	echo "1..0 # SKIP $*"
	TAP_DONE=1
	exit 0
}

# diag MSG...: one "# " line per line of MSG, on stderr.
diag() {
	local line
	printf '%s\n' "$*" | while IFS= read -r line; do
		printf '# %s\n' "$line" >&2
	done
}

# note MSG...: like diag, on stdout (shown by prove -v only).
note() {
	local line
	printf '%s\n' "$*" | while IFS= read -r line; do
		printf '# %s\n' "$line"
	done
}

# diag_file FILE [N]: the last N (default 30) lines of FILE as diag lines.
diag_file() {
	local f=$1 n=${2:-30}
	if [ -r "$f" ]; then
		diag "---- last $n lines of $f ----"
		diag "$(tail -n "$n" "$f")"
	else
		diag "---- $f: not readable ----"
	fi
}

# fail_fast [on|off]: with on (the default argument), the first failure ends
# the file at once (the exit hooks still run), since later checks would only
# fail for the same cause.
fail_fast() {
	case "${1:-on}" in
	on | 1 | yes) TAP_FAIL_FAST=1 ;;
	*) TAP_FAIL_FAST=0 ;;
	esac
}

# _tap_result PASS MSG [DETAIL]: print one test line, and on failure where
# it failed and DETAIL as diag lines; honours fail_fast.
# todo RC MSG WHY: a check known not to hold yet (TAP's TODO directive):
# printed as ok or not ok with "# TODO WHY", never counted as a failure,
# and shown by prove ("TODO passed" once it holds). For a defect that is
# written down, never for a check that cannot fail.
todo() {
	local rc=$1 msg=$2 why=$3
	TAP_N=$((TAP_N + 1))
	msg=${msg//$'\n'/ }
	msg=${msg//#/\\#}
	if [ "$rc" = 0 ]; then
		echo "ok $TAP_N - $msg # TODO $why"
	else
		echo "not ok $TAP_N - $msg # TODO $why"
	fi
}

_tap_result() {
	local pass=$1 msg=$2 detail=${3-}
	TAP_N=$((TAP_N + 1))
	msg=${msg//$'\n'/ }
	msg=${msg//#/\\#}
	if [ "$pass" = 1 ]; then
		echo "ok $TAP_N${msg:+ - $msg}"
		return 0
	fi
	TAP_FAILED=$((TAP_FAILED + 1))
	echo "not ok $TAP_N${msg:+ - $msg}"
	local i=1
	# caller of ok/is/like: skip this function and the assertion itself
	while [ "${FUNCNAME[$i]:-}" = _tap_result ] || [ "${FUNCNAME[$i]:-}" = ok ] ||
		[ "${FUNCNAME[$i]:-}" = is ] || [ "${FUNCNAME[$i]:-}" = isnt ] ||
		[ "${FUNCNAME[$i]:-}" = like ] || [ "${FUNCNAME[$i]:-}" = unlike ] ||
		[ "${FUNCNAME[$i]:-}" = fail ]; do
		i=$((i + 1))
	done
	diag "  Failed test${msg:+ '$msg'}"
	diag "  at ${BASH_SOURCE[$i]:-?} line ${BASH_LINENO[$((i - 1))]:-?}."
	[ -n "$detail" ] && diag "$detail"
	if [ "$TAP_FAIL_FAST" = 1 ]; then
		diag "fail_fast: stopping after the first failure"
		done_testing
	fi
	return 1
}

# ok COND [MSG]: COND is an exit status (0 passes) or a shell expression
# evaluated with eval (passes when it exits 0). Returns 0 on pass, 1 on fail.
ok() {
	local cond=${1-} msg=${2-} pass=0
	case "$cond" in
	'') pass=0 ;;
	*[!0-9]*) if (eval "$cond") >/dev/null 2>&1; then pass=1; fi ;;
	*) [ "$cond" -eq 0 ] && pass=1 ;;
	esac
	_tap_result "$pass" "$msg"
}

pass() { _tap_result 1 "${1-}"; }
fail() { _tap_result 0 "${1-}"; }

# is GOT WANT [MSG]: string equality.
is() {
	local got=${1-} want=${2-} msg=${3-}
	if [ "$got" == "$want" ]; then
		_tap_result 1 "$msg"
		return 0
	fi
	_tap_result 0 "$msg" "$(printf "         got: '%s'\n    expected: '%s'" "$got" "$want")"
}

# isnt GOT UNWANTED [MSG]
isnt() {
	local got=${1-} want=${2-} msg=${3-}
	if [ "$got" != "$want" ]; then
		_tap_result 1 "$msg"
		return 0
	fi
	_tap_result 0 "$msg" "$(printf "         got: '%s'\n    expected: anything else" "$got")"
}

# like GOT ERE [MSG]: GOT matches the extended regular expression ERE.
like() {
	local got=${1-} re=${2-} msg=${3-}
	if [[ $got =~ $re ]]; then
		_tap_result 1 "$msg"
		return 0
	fi
	_tap_result 0 "$msg" "$(printf "                  '%s'\n    doesn't match '%s'" "$got" "$re")"
}

# unlike GOT ERE [MSG]
unlike() {
	local got=${1-} re=${2-} msg=${3-}
	if ! [[ $got =~ $re ]]; then
		_tap_result 1 "$msg"
		return 0
	fi
	_tap_result 0 "$msg" "$(printf "                  '%s'\n          matches '%s'" "$got" "$re")"
}

# skip REASON [N]: N (default 1) skipped tests.
skip() {
	local why=${1-} n=${2:-1} k
	for ((k = 0; k < n; k++)); do
		TAP_N=$((TAP_N + 1))
		echo "ok $TAP_N # skip $why"
	done
}

# node_results FILE [PREFIX]: one TAP line here for each result line of
# the `node --test --test-reporter=tap` output in FILE ("ok N - name" right
# after PREFIX: "" for the top-level tests, four spaces for the subtests of
# one describe); node's # SKIP / # TODO results keep their directive.
# NODE_RESULTS is how many there were.
node_results() {
	local file=$1 prefix=${2-} line neg name re
	re="^${prefix}(not )?ok [0-9]+ - (.*)\$"
	NODE_RESULTS=0
	while IFS= read -r line; do
		[[ $line =~ $re ]] || continue
		NODE_RESULTS=$((NODE_RESULTS + 1))
		neg=${BASH_REMATCH[1]}
		name=${BASH_REMATCH[2]}
		if [[ $name =~ \ \#\ (SKIP|TODO|skip|todo) ]]; then
			TAP_N=$((TAP_N + 1))
			echo "${neg:+not }ok $TAP_N - $name"
		elif [ -z "$neg" ]; then
			pass "$name"
		else
			fail "$name"
		fi
	done <"$file"
}

# bail_out MSG: stop the whole prove run (broken environment).
bail_out() {
	echo "Bail out! $*"
	TAP_DONE=1
	TAP_FAILED=$((TAP_FAILED + 1))
	exit 255
}

# eventually TIMEOUT_S CMD...: run CMD until it exits 0; returns 0 then, or
# 1 once TIMEOUT_S seconds (may be fractional) have passed, after a last
# try at the deadline. The pause between tries starts at TAP_POLL_INTERVAL
# (0.1 s) and grows by half each time up to TAP_POLL_MAX (1 s): a short
# wait is seen at once, and a long one does not spend the machine's CPU
# on starting psql or bcctl five times a second (three test files share
# two cores). CMD's output is not touched: redirect it if the loop would
# be noisy.
eventually() {
	local timeout=$1
	shift
	local deadline now pause max frac t
	deadline=$(_tap_s_to_ms "$timeout")
	pause=$(_tap_s_to_ms "$TAP_POLL_INTERVAL")
	max=$(_tap_s_to_ms "$TAP_POLL_MAX")
	t=${EPOCHREALTIME/[.,]/}
	deadline=$((t / 1000 + deadline))
	while :; do
		if "$@"; then
			return 0
		fi
		t=${EPOCHREALTIME/[.,]/} # no $(...): a fork is slow on a loaded machine
		now=$((t / 1000))
		if [ "$now" -ge "$deadline" ]; then
			return 1
		fi
		[ $((now + pause)) -le "$deadline" ] || pause=$((deadline - now))
		frac=00$((pause % 1000))
		sleep "$((pause / 1000)).${frac: -3}"
		pause=$((pause * 3 / 2))
		[ "$pause" -le "$max" ] || pause=$max
	done
}

# "2.5" -> 2500
_tap_s_to_ms() {
	local s=$1 int frac
	int=${s%%.*}
	frac=
	[ "$int" != "$s" ] && frac=${s#*.}
	frac=${frac}000
	frac=${frac:0:3}
	echo $((10#${int:-0} * 1000 + 10#$frac))
}

# done_testing [N]: print the plan if none was given, and exit: 0 when every
# test passed and the count matches the plan, non-zero otherwise.
done_testing() {
	local want=${1:-$TAP_PLANNED} rc=0
	TAP_DONE=1
	if [ -z "$TAP_PLANNED" ]; then
		echo "1..$TAP_N"
		want=$TAP_N
	fi
	if [ "$TAP_N" -ne "$want" ]; then
		diag "Looks like you planned $want tests but ran $TAP_N."
		rc=255
	fi
	if [ "$TAP_FAILED" -gt 0 ]; then
		diag "Looks like you failed $TAP_FAILED test(s) of $TAP_N run."
		[ "$rc" -eq 0 ] && rc=$((TAP_FAILED > 254 ? 254 : TAP_FAILED))
	fi
	if [ "$TAP_N" -eq 0 ] && [ -z "$TAP_PLANNED" ]; then
		diag "No tests run!"
		rc=255
	fi
	exit "$rc"
}

# tap_failed: true when some test failed (or the file ends abnormally).
tap_failed() {
	[ "$TAP_FAILED" -gt 0 ]
}

# tap_on_exit CMD...: run CMD (a simple command, words kept) when the script
# exits, hooks in reverse order of registration. The hooks see TAP_EXIT_STATUS.
tap_on_exit() {
	local q
	printf -v q '%q ' "$@"
	TAP_EXIT_HOOKS+=("$q")
}

_tap_exit_trap() {
	TAP_EXIT_STATUS=$?
	trap - EXIT
	if [ "$TAP_DONE" != 1 ] && [ "$TAP_EXIT_STATUS" -ne 0 ]; then
		diag "script ended early with status $TAP_EXIT_STATUS after $TAP_N test(s)"
		TAP_FAILED=$((TAP_FAILED + 1))
	fi
	local i
	for ((i = ${#TAP_EXIT_HOOKS[@]} - 1; i >= 0; i--)); do
		eval "${TAP_EXIT_HOOKS[$i]}" || true
	done
	exit "$TAP_EXIT_STATUS"
}

trap _tap_exit_trap EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
