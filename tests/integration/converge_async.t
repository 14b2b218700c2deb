# converge_async.t: one slow runtime call never holds the host (issue 20
# item 4). bcd runs creates (with their first start) and destroys on its
# runtime workers (runtime_concurrency, default 2), off the converge pass:
# - while instance A's create takes 10 s (the fake runtime's <id>.slow hook),
#   instance B, already running on the same host, is paused and then resumed
#   through the API, each within 2 s; A meanwhile shows provisioning, then
#   ends running;
# - an instance deleted while its create runs is destroyed once the create
#   ended (never two calls for it at once), and reported deleted.
# Under the ASan build the stack fails the file on any sanitizer report,
# bcd's shutdown (workers joined) included.
#
# With `BC_ASYNC_CONCURRENCY=0` (runtime_concurrency = 0: the calls inline
# in the pass, as bcd did before) the pause and resume checks fail: they
# wait for A's create.
. "$(dirname "$0")/../lib/stack.sh"

export BC_AGENT_EXTRA_CONF="runtime_concurrency = ${BC_ASYNC_CONCURRENCY:-2}"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create async-img) || bail_out "no image"
FAKE="$STACK_DIR/agent-1/fake"
PID=$(awk '$1 == "bcd-1" {print $2}' "$STACK_DIR/pids")

q() { psql -d bc -XAtq -c "$1"; }
state_of() { q "SELECT state FROM instances WHERE id = '$1'"; }
ms() { date +%s%3N; }
# wait_state ID STATE SECONDS: poll the database every 50 ms; print the
# milliseconds it took, return 1 on timeout.
wait_state() {
	local t0 dl
	t0=$(ms)
	dl=$((t0 + $3 * 1000))
	while [ "$(ms)" -lt "$dl" ]; do
		if [ "$(state_of "$1")" = "$2" ]; then
			echo $(($(ms) - t0))
			return 0
		fi
		sleep 0.05
	done
	echo $(($(ms) - t0))
	return 1
}
creates_of() { grep -c "op=create id=$1 " "$FAKE/ledger.log" 2>/dev/null; }
new_instance() {
	json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img")" id
}

b=$(new_instance) || bail_out "instance B"
eventually 30 instance_state_is "$b" running
ok $? 'instance B runs'

# -- A's create takes 10 s: its hook is written while bcd is frozen, before
# it sees the instance
kill -STOP "$PID"
a=$(new_instance) || { kill -CONT "$PID"; bail_out "instance A"; }
echo create=10000 >"$FAKE/$a.slow"
kill -CONT "$PID"
eventually 10 eval 'grep -q "op=slow id=$a wait=create:" "$FAKE/ledger.log"'
ok $? "A's create is under way"
is "$(state_of "$a")" provisioning '... A shows provisioning'
is "$(creates_of "$a")" 0 '... the fake has not created it yet'

bcctl instance pause "$b" >/dev/null || fail 'pause B'
t=$(wait_state "$b" paused 20)
ok $? "B is paused while A's create runs"
ok "[ $t -lt 2000 ]" "... within 2 s (${t} ms)"
bcctl instance resume "$b" >/dev/null || fail 'resume B'
t=$(wait_state "$b" running 20)
ok $? 'B is resumed'
ok "[ $t -lt 2000 ]" "... within 2 s (${t} ms)"
is "$(creates_of "$a")" 0 "... both while A's create was still under way"

t=$(wait_state "$a" running 30)
ok $? "A runs once its create ended (${t} ms later)"
is "$(creates_of "$a")" 1 '... created once'

# -- C deleted while its create runs: destroyed once the create ended
kill -STOP "$PID"
c=$(new_instance) || { kill -CONT "$PID"; bail_out "instance C"; }
echo create=3000 >"$FAKE/$c.slow"
kill -CONT "$PID"
eventually 10 eval 'grep -q "op=slow id=$c wait=create:" "$FAKE/ledger.log"'
ok $? "C's create is under way"
bcctl instance delete "$c" >/dev/null || fail 'delete C'
t=$(wait_state "$c" deleted 30)
ok $? "C, deleted while it was being created, ends deleted (${t} ms)"
is "$(grep -o "op=[a-z]* id=$c " "$FAKE/ledger.log" | cut -d' ' -f1 | tr '\n' ' ')" \
	'op=slow op=create op=start op=destroy ' '... its create ran to its end, then it was destroyed'
ok "[ ! -e '$FAKE/$c.inst' ]" '... and the fake holds it no more'

done_testing
