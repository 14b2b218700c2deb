# converge_async.t: one slow runtime call never holds the host (issue 20
# item 4). bcd runs creates (with their first start) and destroys on its
# runtime workers (runtime_concurrency, default 2), off the converge pass:
# - while instance A's create takes 30 s (the fake runtime's <id>.slow hook),
#   instance B, already running on the same host, is paused and then resumed
#   through the API, each within its usual time (3x what it took with
#   nothing in flight, at least 2 s) and before A's create ended; A
#   meanwhile shows provisioning, then
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

# gap ID REQ DONE: ms from the latest instance.REQ event of ID (the API's
# request, committed) to the first instance.DONE after it (the host's
# report of the new state): the time the platform took, without bcctl's
# and psql's own start-up, which a loaded machine stretches to seconds
gap() {
	q "SELECT (extract(epoch FROM b.created_at - a.created_at) * 1000)::int FROM events a
		JOIN events b ON b.subject = a.subject AND b.type = 'instance.$3' AND b.id > a.id
		WHERE a.subject = 'instance/$1' AND a.type = 'instance.$2' ORDER BY a.id DESC, b.id LIMIT 1"
}

# -- B's pause and resume with nothing else in flight: their usual time on
# this machine now (a loaded machine makes both slower; the bound below is
# relative to it, never a fixed figure alone)
bcctl instance pause "$b" >/dev/null || fail 'pause B'
wait_state "$b" paused 30 >/dev/null
ok $? "B pauses with nothing else in flight ($(gap "$b" pausing paused) ms)"
tp0=$(gap "$b" pausing paused)
bcctl instance resume "$b" >/dev/null || fail 'resume B'
wait_state "$b" running 30 >/dev/null
ok $? "and resumes ($(gap "$b" resuming running) ms)"
tr0=$(gap "$b" resuming running)
# within their usual time: 3x the idle figure, and at least 2 s
usual() { local u=$(($1 * 3)); echo $((u < 2000 ? 2000 : u)); }

# -- A's create takes 30 s (inline in the pass, B would wait that long):
# its hook is written while bcd is frozen, before it sees the instance
kill -STOP "$PID"
a=$(new_instance) || { kill -CONT "$PID"; bail_out "instance A"; }
echo create=30000 >"$FAKE/$a.slow"
kill -CONT "$PID"
eventually 10 eval 'grep -q "op=slow id=$a wait=create:" "$FAKE/ledger.log"'
ok $? "A's create is under way"
is "$(state_of "$a")" provisioning '... A shows provisioning'
is "$(creates_of "$a")" 0 '... the fake has not created it yet'

bcctl instance pause "$b" >/dev/null || fail 'pause B'
wait_state "$b" paused 25 >/dev/null
ok $? "B is paused while A's create runs"
t=$(gap "$b" pausing paused)
ok "[ ${t:-99999} -lt $(usual "${tp0:-0}") ]" "... within its usual time (${t} ms, bound $(usual "${tp0:-0}") ms)"
bcctl instance resume "$b" >/dev/null || fail 'resume B'
wait_state "$b" running 25 >/dev/null
ok $? 'B is resumed'
t=$(gap "$b" resuming running)
ok "[ ${t:-99999} -lt $(usual "${tr0:-0}") ]" "... within its usual time (${t} ms, bound $(usual "${tr0:-0}") ms)"
is "$(creates_of "$a")" 0 "... both while A's create was still under way"

t=$(wait_state "$a" running 60)
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
