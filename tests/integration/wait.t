# wait.t: creates that wait for their instance hold no worker (over gRPC
# they are handed to the instances' waiter thread): with the agent stopped
# (nothing runs), six creates waiting 30 s on a controller with 4 workers
# leave the API answering; a create whose time runs out answers with its
# last read (provisioning), not an error; once the agent is resumed, each of
# the six is answered running by its one Create call (before, at most half
# the workers waited and the other four creates answered provisioning at
# once).
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="workers = 4"
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,50 || bail_out "stack_up failed"
img=$(stack_image_create wait-img) || bail_out "no image"
pid=$(awk '$1 == "bcd-1" {print $2}' "$STACK_DIR/pids")
kill -STOP "$pid"

# each waiting create writes its answer, then the second it came (bcctl's
# own start-up under ASan on a loaded machine can take seconds: what counts
# is whether a create answered before its 30 s wait ran out while nothing
# could run)
pids=()
t_start=$(date +%s)
for i in 1 2 3 4 5 6; do
	(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
		--wait 30s >"$STACK_DIR/w$i.json" 2>&1; date +%s >"$STACK_DIR/w$i.at") &
	pids+=($!)
done
sleep 1
bcctl --timeout 10s pool list >/dev/null 2>&1
is "$?" 0 'the API answers while six creates wait'
bcctl --timeout 10s --format json instance list >"$STACK_DIR/list.json" 2>&1
is "$?" 0 'and instance list too'
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--wait 2s 2>&1)
is "$?" 0 'a seventh create whose wait runs out answers without an error'
is "$(json_get "$out" state)" provisioning '... with its last read (provisioning)'
early=0
for i in 1 2 3 4 5 6; do
	[ -s "$STACK_DIR/w$i.at" ] && [ $(($(cat "$STACK_DIR/w$i.at") - t_start)) -lt 29 ] && early=$((early + 1))
done
is "$early" 0 'none of the six waiting creates answered before its wait ran out'
# on a machine so loaded that the checks above took the whole wait, the
# creates answered provisioning at its end; that is the behaviour, but the
# resumed agent cannot answer them any more
late=$(($(date +%s) - t_start))
kill -CONT "$pid"
wait "${pids[0]}" "${pids[1]}" "${pids[2]}" "${pids[3]}" "${pids[4]}" "${pids[5]}"
n=0
for i in 1 2 3 4 5 6; do
	[ "$(json_get "$(cat "$STACK_DIR/w$i.json")" state)" = running ] && n=$((n + 1))
done
if [ "$late" -lt 25 ]; then
	is "$n" 6 'the agent resumed: each of the six creates answered running'
else
	np=0
	for i in 1 2 3 4 5 6; do
		[ "$(json_get "$(cat "$STACK_DIR/w$i.json")" state)" = provisioning ] && np=$((np + 1))
	done
	is "$((n + np))" 6 "the agent resumed ${late} s after the creates (over their wait): each answered running or, at the wait's end, provisioning ($n running)"
fi
all_running() { [ "$(psql -d bc -XAtq -c "SELECT count(*) FROM instances WHERE state = 'running'")" = 7 ]; }
eventually 30 all_running
ok $? 'all seven run'

done_testing
