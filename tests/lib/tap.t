# tap.t: self-test of tests/lib/tap.sh (prove --exec bash tests/lib/*.t):
# small scripts using it are run and their TAP and exit status checked.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tap.sh"

d=$(mktemp -d "${TMPDIR:-/tmp}/tap-selftest.XXXXXX")
tap_on_exit rm -rf "$d"

# t NAME BODY: run BODY as a script sourcing tap.sh; sets out, err, rc
t() {
	printf '. %q\n%s\n' "$here/tap.sh" "$2" >"$d/$1.t"
	out=$(bash "$d/$1.t" 2>"$d/$1.err")
	rc=$?
	err=$(cat "$d/$1.err")
}

t pass 'ok 0 zero; ok "test -d /" expr; is a a same; isnt a b differ; like abc "^a.c$" re; unlike abc "^z" nore; done_testing'
is "$rc" 0 'all passing: exit 0'
is "$out" "$(printf 'ok 1 - zero\nok 2 - expr\nok 3 - same\nok 4 - differ\nok 5 - re\nok 6 - nore\n1..6')" \
	'all passing: TAP lines and the plan at the end'

t fail 'ok 1 one; is x y two; like abc "^z" three; ok false four; ok 0 five; done_testing'
is "$rc" 4 'four failures: exit 4'
like "$out" $'not ok 1 - one\nnot ok 2 - two\nnot ok 3 - three\nnot ok 4 - four\nok 5 - five\n1..5' \
	'failures are "not ok"'
like "$err" "got: 'x'" 'is prints what it got'
like "$err" "expected: 'y'" 'and what it expected'
like "$err" "at .*fail.t line 2" 'the failing line is named'

t planned 'plan 2; ok 0 a; done_testing'
isnt "$rc" 0 'fewer tests than planned: non-zero exit'
like "$out" '^1\.\.2' 'the plan comes first'

t fast 'fail_fast; ok 0 a; is 1 2 b; ok 0 c; done_testing'
isnt "$rc" 0 'fail_fast: non-zero exit'
is "$out" "$(printf 'ok 1 - a\nnot ok 2 - b\n1..2')" 'fail_fast: stops at the first failure'

t hooks 'tap_on_exit echo first; tap_on_exit echo second; ok 0 a; done_testing'
is "$out" "$(printf 'ok 1 - a\n1..1\nsecond\nfirst')" 'exit hooks run in reverse order'

t early 'tap_on_exit echo hook; ok 0 a; exit 3'
is "$rc" 3 'an early exit keeps its status'
like "$out" 'hook' 'and runs the hooks'

t skipall 'skip_all "no kvm"; ok 1 never'
is "$rc" 0 'skip_all exits 0'
is "$out" '1..0 # SKIP no kvm' 'skip_all prints a skip plan'

t hash 'ok 0 "a # b"; done_testing'
is "$out" "$(printf 'ok 1 - a \\# b\n1..1')" 'a # in a name is escaped'

t ev 'n=0; f() { n=$((n + 1)); [ $n -ge 3 ]; }; eventually 5 f; ok $? "after $n"; eventually 0.3 false; echo "rc=$?"; done_testing'
like "$out" 'ok 1 - after 3' 'eventually polls until the command succeeds'
like "$out" 'rc=1' 'eventually returns 1 on timeout'

start=$EPOCHREALTIME
eventually 0.5 false
r=$?
el=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print (b - a >= 0.5) ? "yes" : "no" }')
is "$r/$el" "1/yes" 'eventually waits the whole timeout before giving up'

# its pauses grow from 0.1 s by half up to 1 s: 3 s of a failing command
# are at most 8 tries (fixed 0.1 s pauses would be 30; a loaded machine
# makes fewer), the first at once and the last at the deadline
n=0
f() { n=$((n + 1)); false; }
eventually 3 f
ok "[ $n -ge 2 ] && [ $n -le 8 ]" "eventually backs off: $n tries in 3 s"

done_testing
