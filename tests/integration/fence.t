# fence.t: bcd fences itself when it is cut off from every controller
# (docs/operations.md, "What bcd does when cut off"). Agents 1 and 3 in
# pool p1 with node_lost_seconds = 4 and the default fence = pause; agent
# 2 in pool p2 with fence = off (the control: what every bcd did before).
# - the controller is killed: after the fence time agent 1 pauses its
#   running instances (the fake runtime holds them paused), leaves the
#   paused one paused and logs it; agent 2's instance keeps running;
# - the controller comes back: bcd reports the fenced instances (an
#   instance.paused event with a Fenced reason), and once the controller
#   confirmed its spec it resumes them: the host runs what the database
#   says again;
# - cut off again, and while the controller is away one instance moves to
#   node 3 (as the reconciler moves one off a lost node; done in SQL here,
#   the controller being down): back, agent 1 learns from its spec that
#   the instance is no longer its own and destroys its copy without ever
#   resuming it, while node 3 runs it and agent 1 resumes the others.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
img=$(stack_image_create fence-img) || bail_out "no image"
p1=$POOL_ID
out=$(bcctl --format json pool create --name p2 --runtime fake --subnet 10.78.0.0/24 \
	--gateway 10.78.0.1 --bridge bcbr1) || bail_out "pool p2: $out"
p2=$(json_get "$out" id)

q() { psql -d bc -XAtq -c "$1"; }
fake_state() { sed -n 's/^state=\([a-z]*\).*/\1/p' "$STACK_DIR/agent-$1/fake/$2.inst" 2>/dev/null; }
fake_is() { [ "$(fake_state "$1" "$2")" = "$3" ]; }
start_in() { # N POOL FENCE
	POOL_ID=$2
	STACK_AGENTS=$1
	BC_AGENT_EXTRA_CONF="node_lost_seconds = 4
fence = $3"
	agent_start "$1" && stack_wait_nodes_ready "$1" 60
}
mk() {
	json_get "$(bcctl --format json instance create --pool "$1" --flavor "$FLAVOR_NAME" \
		--image "$img" --wait 30s)" id
}
streams() { grep -c 'node .*: watching its spec from generation' "$STACK_DIR/ctl-1.log"; }
restart_ctl() {
	local s0
	s0=$(streams)
	ctl_start 1 || bail_out "controller start"
	eventually 60 eval '[ "$(streams)" -ge "$((s0 + 3))" ]' || bail_out "agents not back"
}

start_in 1 "$p1" pause || bail_out "agent 1"
a=$(mk "$p1")
p=$(mk "$p1")
b=$(mk "$p1")
bcctl instance pause "$p" >/dev/null || bail_out "pause"
start_in 2 "$p2" off || bail_out "agent 2"
start_in 3 "$p1" pause || bail_out "agent 3"
c=$(mk "$p2")
n1=$(agent_node_id 1)
n3=$(agent_node_id 3)
is "$(q "SELECT count(*) FROM instances WHERE node_id = '$n1' AND id IN ('$a', '$p', '$b')")" 3 \
	'three instances on node 1'
eventually 30 eval 'fake_is 1 "$a" running && fake_is 1 "$b" running && fake_is 1 "$p" paused && fake_is 2 "$c" running'
ok $? 'node 1 runs two and holds one paused; node 2 runs its own'

# cut off: the controller dies
ctl_kill 1
ok "! bcctl node list >/dev/null 2>&1" 'the controller is down'
eventually 60 eval 'fake_is 1 "$a" paused && fake_is 1 "$b" paused'
ok $? 'after node_lost_seconds agent 1 paused its running instances'
like "$(cat "$STACK_DIR/bcd-1.log")" 'fence: no contact with a controller for [0-9]+ s: pausing' \
	'... and logged the fence'
is "$(fake_state 1 "$p")" paused '... the paused one stays paused'
eventually 30 eval 'grep -q "fence: no contact" "$STACK_DIR/bcd-3.log"'
ok $? 'agent 3 fenced too'
is "$(fake_state 2 "$c")" running 'with fence = off agent 2 keeps its instance running'
ok "! grep -q 'fence:' '$STACK_DIR/bcd-2.log'" '... and logs no fence'

# back: reported, confirmed, resumed
restart_ctl
eventually 60 eval 'fake_is 1 "$a" running && fake_is 1 "$b" running'
ok $? 'the controller back and its spec unchanged, agent 1 resumed them'
like "$(cat "$STACK_DIR/bcd-1.log")" 'fence: lifted: the controller confirmed spec generation' \
	'... once the controller confirmed its spec'
is "$(q "SELECT count(*) > 0 FROM events WHERE subject = 'instance/$a' AND type = 'instance.paused'
	AND data->>'reason' LIKE 'Fenced: %'")" t 'the fence was reported: instance.paused, reason Fenced'
eventually 30 eval '[ "$(instance_state "$a")/$(instance_state "$b")/$(instance_state "$p")" = running/running/paused ]'
ok $? 'the database says what the host runs again'
is "$(fake_state 1 "$p")" paused 'the paused one still paused'

# cut off again; meanwhile b moves to node 3
lifted() { grep -c 'fence: lifted' "$STACK_DIR/bcd-1.log"; }
l0=$(lifted)
ctl_kill 1
eventually 60 eval 'fake_is 1 "$a" paused && fake_is 1 "$b" paused'
ok $? 'cut off again: fenced again'
eventually 30 eval 'grep -q "fence: no contact" "$STACK_DIR/bcd-3.log"'
q "BEGIN;
UPDATE instances SET node_id = '$n3', state = 'provisioning', reason = 'moved' WHERE id = '$b';
UPDATE allocations SET node_id = '$n3' WHERE owner_kind = 'instance' AND owner_id = '$b' AND released_at IS NULL;
INSERT INTO node_spec_changes (node_id) VALUES ('$n1'), ('$n3');
COMMIT;" >/dev/null || bail_out "move"
resumed_b() { grep -c "instance $b: resume" "$STACK_DIR/bcd-1.log"; }
r0=$(resumed_b)
restart_ctl
gone() { [ ! -e "$STACK_DIR/agent-1/fake/$b.inst" ]; }
eventually 60 gone
ok $? 'back: agent 1 destroyed the instance its spec no longer names'
eventually 60 eval 'fake_is 3 "$b" running'
ok $? '... which runs on node 3'
eventually 60 eval 'fake_is 1 "$a" running'
ok $? '... and resumed the one still its own'
ok "[ '$(lifted)' -gt '$l0' ]" '... after the fence lifted again'
is "$(resumed_b)" "$r0" 'the moved instance was never resumed on node 1'
eventually 30 eval '[ "$(instance_state "$b")" = running ] && [ "$(q "SELECT node_id FROM instances WHERE id = '"'$b'"'")" = "$n3" ]'
ok $? 'the database has it running on node 3'

done_testing
