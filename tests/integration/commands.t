# commands.t: host commands (issue 16 item 1) on the fake runtime, queued
# with `bc-controller command enqueue`: delivered on the node's WatchSpec
# stream in order and settled by its reports (instance.probe answers the
# runtime's state; an unknown kind UNSUPPORTED); an idempotent key; a
# command for an instance no spec of the node names is never sent; a report
# from another node cannot settle a command; the sweeper fails one past its
# deadline ("timeout"). bcd killed (SIGKILL) during a fake.sleep that is not
# retry-safe: failed "agent restarted during the command" after its restart,
# never run again; during a retry-safe one: run again, once. The controller
# restarted during one: delivered again on the new stream, not run again.
. "$(dirname "$0")/../lib/stack.sh"

export BC_REPORT_INTERVAL_SECONDS=600 BC_NODE_LOST_SECONDS=600
stack_up --controllers 1 --agents 2 --agent-capacity 8,16384,100 || bail_out "stack_up failed"
img=$(stack_image_create commands-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
node1=$(agent_node_id 1)
node2=$(agent_node_id 2)
log1=$STACK_DIR/bcd-1.log
enqueue() { "$BC_BIN/bc-controller" command enqueue --config "$STACK_DIR/ctl-1.conf" "$@" 2>>"$STACK_DIR/enqueue.err"; }
cmd_id() { printf '%s' "$1" | jq -r .id; }
cstate() { q "SELECT state FROM commands WHERE id = '$1'"; }
cstate_is() { [ "$(cstate "$1")" = "$2" ]; }
cshow() { "$BC_BIN/bc-controller" command show --config "$STACK_DIR/ctl-1.conf" --id "$1"; }

# -- a probe of an instance: delivered after the spec naming it, settled
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")
inst=$(json_get "$out" id)
eventually 30 instance_state_is "$inst" running
ok $? "instance $inst runs"
inode=$(q "SELECT node_id FROM instances WHERE id = '$inst'")
out=$(enqueue --node "$inode" --kind instance.probe --instance "$inst")
probe=$(cmd_id "$out")
ok "[[ '$probe' == cmd_* ]]" "instance.probe enqueued ($probe)"
is "$(printf '%s' "$out" | jq -r .created)" true '... created'
eventually 20 cstate_is "$probe" succeeded
ok $? '... succeeded'
is "$(cshow "$probe" | jq -r '.result.state + " " + .result.instance')" "running $inst" \
	"... its result is the runtime's state of the instance"
is "$(q "SELECT delivered_at IS NOT NULL AND settled_at >= delivered_at FROM commands WHERE id = '$probe'")" t \
	'... delivered, then settled'

# -- a settled command is announced: NOTIFY bc_command_settled '<id>'
psql -d bc -Xq -c 'LISTEN bc_command_settled' -c 'SELECT pg_sleep(4)' >"$STACK_DIR/listen.out" 2>&1 &
lpid=$!
sleep 1
p2=$(cmd_id "$(enqueue --node "$inode" --kind instance.probe --instance "$inst")")
wait "$lpid"
ok "grep -q 'bc_command_settled\" with payload \"$p2\"' '$STACK_DIR/listen.out'" \
	"its settlement was announced on bc_command_settled"

# -- an unknown kind: UNSUPPORTED
unk=$(cmd_id "$(enqueue --node "$node1" --kind no.such-kind)")
eventually 20 cstate_is "$unk" failed
ok $? 'an unknown kind fails'
is "$(cshow "$unk" | jq -r .error)" 'UNSUPPORTED: no.such-kind' '... UNSUPPORTED: <kind>'

# -- in order: three on the bulk lane (one worker) run in the order queued
a=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --lane bulk --args '{"ms":1500}')")
b=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --lane bulk --args '{"ms":1500}')")
c=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --lane bulk --args '{"ms":1500}')")
all3() { cstate_is "$a" succeeded && cstate_is "$b" succeeded && cstate_is "$c" succeeded; }
eventually 30 all3
ok $? 'three fake.sleep on the bulk lane succeeded'
order=$(grep -oE "command (cmd_[a-z0-9]+) \(fake.sleep, lane bulk\) received" "$log1" | awk '{print $2}' | tr '\n' ' ')
is "$order" "$a $b $c " '... received by bcd in the order queued'
order=$(grep -oE "command (cmd_[a-z0-9]+) \(fake.sleep, lane bulk\): run 1 started" "$log1" | awk '{print $2}' | tr '\n' ' ')
is "$order" "$a $b $c " '... and run in that order'
line_of() { grep -n "$1" "$log1" | head -n 1 | cut -d: -f1; }
la=$(line_of "command $a (fake.sleep): succeeded")
lb=$(line_of "command $b (fake.sleep, lane bulk): run 1 started")
ok "[ -n '$la' ] && [ -n '$lb' ] && [ '$la' -lt '$lb' ]" '... one at a time: the second started after the first ended'
# a long bulk command holds no control command back
long=$(cmd_id "$(enqueue --node "$inode" --kind fake.sleep --lane bulk --args '{"ms":10000}')")
p3=$(cmd_id "$(enqueue --node "$inode" --kind instance.probe --instance "$inst")")
eventually 5 cstate_is "$p3" succeeded
ok $? 'a probe queued behind a 10 s bulk command succeeds first'
is "$(cstate "$long")" delivered '... while the bulk one still runs'
is "$(q "SELECT count(*) FROM commands WHERE id IN ('$a', '$b', '$c') AND settled_at IS NOT NULL")" 3 \
	'... all three settled'
ok "[ ! -e '$STACK_DIR/agent-1/commands.d/$a' ]" "... the settled command's file is gone from bcd's state dir"

# -- an idempotent key
k1=$(enqueue --node "$node1" --kind fake.sleep --args '{"ms":1}' --key 'test:k1')
k2=$(enqueue --node "$node1" --kind fake.sleep --args '{"ms":1}' --key 'test:k1')
is "$(cmd_id "$k2")" "$(cmd_id "$k1")" 'the same key twice: the same command'
is "$(printf '%s' "$k2" | jq -r .created)" false '... not created again'
is "$(q "SELECT count(*) FROM commands WHERE key = 'test:k1'")" 1 '... one row'

# -- a command for an instance the node's spec never names: never sent; a
# report from another node cannot settle it; the sweeper fails it
ghost=inst_00000000000000000000000000
w=$(cmd_id "$(enqueue --node "$node1" --kind instance.probe --instance "$ghost" --timeout 15s)")
sleep 2
is "$(cstate "$w")" queued 'a command whose instance no spec of the node names stays queued'
ok "! grep -q '$w' '$log1'" '... bcd never received it'
ad=$STACK_DIR/agent-2
out=$(node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$ad/ca.pem" "$ad/node.pem" "$ad/node.key" \
	bc/node/v1/node.proto bc.node.v1.Node Report \
	"{\"applied_generation\": \"0\", \"complete\": false, \"instances\": [], \"results\": [{\"id\": \"$w\", \"ok\": true, \"result_json\": \"$(printf '{}' | base64)\"}]}")
is "$(printf '%s' "$out" | jq -r '.settled[0]')" "$w" "node 2's report of node 1's command: acked (ignored)"
is "$(cstate "$w")" queued '... and the command is not settled by it'
ok "grep -q 'node $node2: 1 command result(s) ignored' '$STACK_DIR/ctl-1.log'" '... the controller counted it ignored'
eventually 30 cstate_is "$w" failed
ok $? 'past its deadline the sweeper fails it'
is "$(cshow "$w" | jq -r .error)" timeout '... error "timeout"'

# -- bcd killed during a command that is not retry-safe
started() { grep -q "command $1 (fake.sleep, lane control): run $2 started" "$log1"; }
runs() { grep -c "command $1 (fake.sleep, lane control): run [0-9]* started" "$log1"; }
ns=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --args '{"ms":60000}')")
eventually 20 started "$ns" 1
ok $? "a 60 s fake.sleep ($ns) started"
ok "[ -f '$STACK_DIR/agent-1/commands.d/$ns' ]" '... persisted in commands.d'
agent_kill 1 KILL
agent_start 1 || bail_out 'bcd 1 did not start again'
eventually 30 cstate_is "$ns" failed
ok $? 'bcd killed during it and started again: it failed'
is "$(cshow "$ns" | jq -r .error)" 'agent restarted during the command' '... "agent restarted during the command"'
sleep 1
is "$(runs "$ns")" 1 '... and it never ran again'

# -- bcd killed during a retry-safe command
# (10 s: the kill must land during the first run; on a loaded machine with
# the ASan build 2 s had passed before it, and the first run succeeded)
rs=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --retry-safe --args '{"ms":10000}')")
eventually 20 started "$rs" 1
ok $? "a retry-safe fake.sleep ($rs) started"
agent_kill 1 KILL
agent_start 1 || bail_out 'bcd 1 did not start again'
eventually 60 cstate_is "$rs" succeeded
ok $? 'bcd killed during it and started again: it succeeded'
is "$(cshow "$rs" | jq -r .result.run)" 2 '... in its second run'
is "$(runs "$rs")" 2 '... run again once'

# -- the controller restarted during a command: delivered again, not run again
cr=$(cmd_id "$(enqueue --node "$node1" --kind fake.sleep --args '{"ms":5000}')")
eventually 20 started "$cr" 1
ok $? "a 5 s fake.sleep ($cr) started"
ctl_kill 1 KILL
ctl_start 1 || bail_out 'controller did not start again'
resent() { [ "$(grep -c "command $cr (fake.sleep) sent" "$STACK_DIR/ctl-1.log")" -ge 2 ]; }
eventually 20 resent
ok $? '... the new stream sent it again'
eventually 60 cstate_is "$cr" succeeded
ok $? '... it succeeded'
is "$(cshow "$cr" | jq -r .result.run)" 1 '... in its first run'
is "$(runs "$cr")" 1 '... bcd ran it once'
is "$(grep -c "command $cr (fake.sleep, lane control) received" "$log1")" 1 '... and took it once'

# -- retention: a command settled longer ago than command_retention_seconds
# (7 days) is purged by the reconciler's pass (every 30 s); others stay
q "UPDATE commands SET settled_at = now() - interval '8 days' WHERE id = '$unk'" >/dev/null
purged() { [ "$(q "SELECT count(*) FROM commands WHERE id = '$unk'")" = 0 ]; }
eventually 40 purged
ok $? 'a command settled 8 days ago is purged'
is "$(q "SELECT count(*) FROM commands WHERE id IN ('$probe', '$w', '$cr')")" 3 '... the recent ones stay'

done_testing
