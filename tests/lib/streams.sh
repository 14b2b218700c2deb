# streams.sh: the stream-attack tests' shared steps (attack_streams.t,
# stream_limits.t), sourced after stack.sh. tests/integration/attack_streams.js
# keeps a one-line tally of its streams in a status file
# ($STACK_DIR/NAME.status: `answered=N open=N refused=N codes=C:N ...`).
#
#   stream_field NAME KEY          a value of NAME's tally ("" if none yet)
#   stream_num NAME KEY            the same, 0 if none yet
#   stream_settled NAME N          true once N of NAME's streams answered
#   stream_node_respawned MSG      restart agent 1, then ok MSG once the
#                                  controller saw a new spec stream from it
#                                  (sets node_id)

stream_field() { sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" "$STACK_DIR/$1.status" 2>/dev/null; }
stream_num() { local v; v=$(stream_field "$1" "$2"); echo "${v:-0}"; }
stream_settled() { [ "$(stream_num "$1" answered)" = "$2" ] 2>/dev/null; }

stream_spec_streams() { grep -c "node $node_id: watching its spec" "$STACK_DIR/ctl-1.log"; }
stream_node_respawned() {
	agent_kill 1
	agent_start 1 || bail_out "agent restart"
	node_id=$(agent_node_id 1)
	eventually 60 eval '[ "$(stream_spec_streams)" -ge 2 ]'
	ok $? "$1"
}
