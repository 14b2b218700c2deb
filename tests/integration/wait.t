# wait.t: creates that wait for their instance hold a worker each, but never
# all of them: with the agent stopped (nothing ever runs), six creates
# waiting 20 s on a controller with 4 workers leave the API answering.
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="workers = 4"
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,50 || bail_out "stack_up failed"
img=$(stack_image_create wait-img) || bail_out "no image"
pid=$(awk '$1 == "bcd-1" {print $2}' "$STACK_DIR/pids")
kill -STOP "$pid"

pids=()
for i in 1 2 3 4 5 6; do
	bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
		--wait 20s >"$STACK_DIR/w$i.json" 2>&1 &
	pids+=($!)
done
sleep 1
bcctl --timeout 10s pool list >/dev/null 2>&1
is "$?" 0 'the API answers while six creates wait'
bcctl --timeout 10s --format json instance list >"$STACK_DIR/list.json" 2>&1
is "$?" 0 'and instance list too'
wait "${pids[0]}" "${pids[1]}" "${pids[2]}" "${pids[3]}" "${pids[4]}" "${pids[5]}"
n=0
for i in 1 2 3 4 5 6; do
	[ "$(json_get "$(cat "$STACK_DIR/w$i.json")" state)" = provisioning ] && n=$((n + 1))
done
is "$n" 6 'every create answered with the last read (provisioning), not an error'
kill -CONT "$pid"
all_running() { [ "$(psql -d bc -XAtq -c "SELECT count(*) FROM instances WHERE state = 'running'")" = 6 ]; }
eventually 30 all_running
ok $? 'the agent, resumed, runs all six'

done_testing
