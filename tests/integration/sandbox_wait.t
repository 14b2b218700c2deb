# sandbox_wait.t: Sandboxes.Create with wait holds no RPC worker. With the
# agent stopped, eight creates wait on a controller with 2 workers while
# other calls are served; once the agent runs again every one is answered
# ready by its single Create call (bcctl does not poll). A controller
# stopped while creates wait answers each with its last read (starting),
# exits within the grace and leaves no sanitizer report. Over JSON/HTTP
# (no detaching) a create still waits inline and answers ready.
. "$(dirname "$0")/../lib/stack.sh"

command -v curl >/dev/null || skip_all "curl is not installed"
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="workers = 2
http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 1 --agent-capacity 32,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create sw-img) || bail_out "no image"
tmpl=$(json_get "$(bcctl --format json sandbox-template create --name sw --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")" id) || bail_out "template"
agent_pid() { awk '$1 == "bcd-1" {print $2}' "$STACK_DIR/pids"; }
q() { psql -d bc -XAtq -c "$1"; }

# start N creates waiting W; their answers in $STACK_DIR/$prefix$i.json
creates() {
	local prefix=$1 n=$2 w=$3 i
	pids=()
	for i in $(seq 1 "$n"); do
		bcctl --timeout 40s --format json sandbox create --template "$tmpl" --wait "$w" \
			>"$STACK_DIR/$prefix$i.json" 2>&1 &
		pids+=($!)
	done
}
count_state() {
	local prefix=$1 n=$2 want=$3 i c=0
	for i in $(seq 1 "$n"); do
		[ "$(json_get "$(cat "$STACK_DIR/$prefix$i.json")" state)" = "$want" ] && c=$((c + 1))
	done
	echo "$c"
}

# -- more waiting creates than workers, all answered ready server-side
kill -STOP "$(agent_pid)"
creates w 8 30s
n_starting() { [ "$(q "SELECT count(*) FROM sandboxes WHERE state = 'starting'")" = 8 ]; }
eventually 20 n_starting
ok $? 'eight creates committed and waiting (agent stopped)'
sleep 1
alive=0
for i in $(seq 1 8); do kill -0 "${pids[$((i - 1))]}" 2>/dev/null && alive=$((alive + 1)); done
is "$alive" 8 'none of them answered yet on a controller with 2 workers'
t0=$SECONDS
bcctl --timeout 5s --format json sandbox list >"$STACK_DIR/list.json" 2>&1
is "$?" 0 'sandbox list is served while they wait'
is "$(json_items "$(cat "$STACK_DIR/list.json")" | jq -s 'length')" 8 '... and lists the eight'
bcctl --timeout 5s pool list >/dev/null 2>&1
is "$?" 0 'pool list too'
sid=$(json_get "$(json_items "$(cat "$STACK_DIR/list.json")" | head -1)" id)
bcctl --timeout 5s --format json sandbox get "$sid" >/dev/null 2>&1
is "$?" 0 'sandbox get too'
ok "[ $((SECONDS - t0)) -lt 10 ]" 'those calls answered promptly'
kill -CONT "$(agent_pid)"
wait "${pids[@]}"
is "$(count_state w 8 ready)" 8 'every waiting create answered ready by its one Create call'

# -- JSON/HTTP: the create waits on its worker, as before
kill -STOP "$(agent_pid)"
curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
	-H 'Content-Type: application/json' \
	--data-binary "{\"templateId\": \"$tmpl\", \"wait\": {\"timeoutMs\": 30000}}" \
	"https://127.0.0.1:$HTTP_PORT/api/compute/sandboxes/create" >"$STACK_DIR/http.json" 2>&1 &
hpid=$!
sleep 2
kill -0 "$hpid" 2>/dev/null
ok $? 'over JSON/HTTP the create waits too'
kill -CONT "$(agent_pid)"
wait "$hpid"
is "$(jq -r .state "$STACK_DIR/http.json")" ready '... and answers ready'

# -- a controller stopped with creates waiting answers them
kill -STOP "$(agent_pid)"
creates s 3 30s
n_start2() { [ "$(q "SELECT count(*) FROM sandboxes WHERE state = 'starting'")" = 3 ]; }
eventually 20 n_start2
ok $? 'three more creates waiting'
sleep 1
t0=$SECONDS
ctl_kill 1 TERM
ok "[ $((SECONDS - t0)) -lt 10 ]" 'the controller stops within its grace'
wait "${pids[@]}"
is "$(count_state s 3 starting)" 3 'each waiting create answered with its last read (starting)'
if grep -q 'survived SIGTERM' "$STACK_DIR/ctl-1.log"; then fail 'controller needed SIGKILL'; else pass 'controller exited on SIGTERM'; fi
kill -CONT "$(agent_pid)"

done_testing
