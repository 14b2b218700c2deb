# sandbox_expiry.t: the sandbox reconciler with two replicas, both running
# it (one leads by advisory lock; the leader is killed half-way, so the
# other takes over), sandbox_reconcile_seconds = 5: eleven sandboxes with a
# 60 s lifetime and one of 120 s each get sandbox.expiring once (lead: a
# quarter of the lifetime, 15 s and 30 s), are expired within one period of
# expiresAt, each exactly once (sandbox.expired, then the instance is
# deleted and sandbox.deleted says expired). The 120 s one, extended after
# its warning (30 s leave room for the extend on a loaded machine), is
# warned again; the
# reconciler's ready stamp is the fallback for the instance's own; a
# recreated instance takes its ready sandbox back to starting.
. "$(dirname "$0")/../lib/stack.sh"

PERIOD=5
export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = $PERIOD"
stack_up --controllers 2 --agents 1 --agent-capacity 32,65536,200 || bail_out "stack_up failed"
img=$(stack_image_create exp-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
tmpl=$(jid "$(bcctl --format json sandbox-template create --name x --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"

for i in $(seq 1 12); do
	ttl=60s
	[ "$i" != 1 ] || ttl=120s
	jid "$(bcctl_n $((i % 2 + 1)) --format json sandbox create --template "$tmpl" --ttl $ttl)"
done >"$STACK_DIR/ids"
is "$(grep -c '^sbx_' "$STACK_DIR/ids")" 12 'twelve sandboxes (eleven of 60 s, one of 120 s) through both replicas'
keep=$(head -n 1 "$STACK_DIR/ids")

# the first is warned, then extended: warned again for its new expiry
warned() { [ "$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$keep' AND type = 'sandbox.expiring'")" = "$1" ]; }
eventually 150 warned 1
ok $? 'sandbox.expiring is published ahead of expiry'
bcctl sandbox extend "$keep" --by 30000 >/dev/null || fail 'extend'
eventually 90 warned 2
ok $? 'after an extend, the new expiry is warned again'

# kill whichever replica leads the sandbox reconciler: the other takes over
leader=$(grep -l 'runs the sandbox reconciler' "$STACK_DIR"/ctl-*.log | head -n 1 | sed 's/.*ctl-\([0-9]\).log/\1/')
ok "[ -n '$leader' ]" "replica $leader leads the sandbox reconciler"
ctl_kill "$leader"

all_deleted() { [ "$(q "SELECT count(*) FROM sandboxes WHERE state = 'deleted'")" = 12 ]; }
eventually 180 all_deleted
ok $? 'every sandbox expired and was deleted'
other=$((3 - leader))
like "$(cat "$STACK_DIR/ctl-$other.log")" 'runs the sandbox reconciler' "replica $other took over"
for t in sandbox.expired sandbox.deleted; do
	is "$(q "SELECT count(*) FROM (SELECT subject FROM events WHERE type = '$t' GROUP BY subject HAVING count(*) = 1) x")" \
		12 "$t exactly once for each of the 12"
done
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.expiring'")" 13 \
	'sandbox.expiring once per expiry (12, and again for the extended one)'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.deleted' AND data->>'expired' = 'true'")" 12 \
	'sandbox.deleted says expiry ended them'
# the data of each type (docs/sandboxes.md, "Events")
for te in "sandbox.expiring expiresAt,instanceId,poolId,templateId" \
	"sandbox.expired expiresAt,instanceId,poolId,templateId" "sandbox.deleting expired,instanceId,poolId,templateId" \
	"sandbox.deleted expired,instanceId,poolId,templateId"; do
	is "$(event_keys "${te%% *}" "sandbox/$keep")" "${te#* }" "${te%% *}: its data's keys"
done
is "$(q "SELECT count(*) FROM sandboxes s JOIN LATERAL (SELECT max(created_at) t FROM events e WHERE
	e.subject = 'sandbox/' || s.id AND e.type = 'sandbox.expiring') e ON true WHERE e.t < s.expires_at AND
	e.t >= s.expires_at - make_interval(secs => least(300, extract(epoch FROM s.expires_at - s.created_at) / 4)
	+ $PERIOD + 1)")" 12 'each last warning came within its lead (a quarter of the lifetime) plus a period'
lag=$(q "SELECT max(extract(epoch FROM expired_at - expires_at)) FROM sandboxes")
diag "largest expiry lag: $lag s (period $PERIOD s, one replica killed on the way)"
ok "awk 'BEGIN { exit !($lag <= $PERIOD + 1) }'" "expired within one period of expiresAt (largest lag $lag s)"
is "$(q "SELECT count(*) FROM sandboxes WHERE expired_at >= expires_at")" 12 'never before expiresAt'
is "$(q "SELECT count(*) FROM instances WHERE sandbox_id IS NOT NULL AND state = 'deleted'")" 12 \
	'their instances went through an ordinary delete'
is "$(q "SELECT count(*) FROM allocations WHERE released_at IS NULL")" 0 'bookings released'

# the reconciler's ready stamp is the fallback: without the instance's own
# (trigger disabled, as for a path that missed it) the pass still readies it
ctl_start "$leader" || bail_out "restart of replica $leader" # the agent's replica
q "ALTER TABLE instances DISABLE TRIGGER instances_sandbox" >/dev/null
f=$(jid "$(bcctl_n "$other" --format json sandbox create --template "$tmpl")")
ran() { [ "$(q "SELECT count(*) FROM instances WHERE sandbox_id = '$f' AND state = 'running'")" = 1 ]; }
eventually 60 ran
ok $? 'its instance runs'
rdy() { [ "$(q "SELECT state || ' ' || ready_source FROM sandboxes WHERE id = '$f'")" = 'ready reconciler' ]; }
eventually $((PERIOD * 3)) rdy
ok $? 'the reconciler pass readies it (ready_source reconciler)'
is "$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$f' AND type = 'sandbox.ready'")" 1 \
	'sandbox.ready once'
q "ALTER TABLE instances ENABLE TRIGGER instances_sandbox" >/dev/null

# a recreate (host loss with recreateOnHostLoss, done here by hand with the
# agent down: booking released, unplaced, provisioning) takes the ready
# sandbox back to starting; placed and running again, it is ready again
agent_kill 1
q "UPDATE allocations SET released_at = now() WHERE owner_id = (SELECT instance_id FROM sandboxes
	WHERE id = '$f') AND released_at IS NULL;
	UPDATE instances SET state = 'provisioning', node_id = NULL WHERE sandbox_id = '$f'" >/dev/null
st() { [ "$(q "SELECT state FROM sandboxes WHERE id = '$f'")" = "$1" ]; }
eventually $((PERIOD * 3)) st starting
ok $? 'a ready sandbox whose instance is recreated goes back to starting'
agent_start 1
eventually 60 st ready
ok $? 'placed again and running, it is ready again'
is "$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$f' AND type = 'sandbox.ready'")" 2 \
	'sandbox.ready again, from the instance report'
done_testing
