# spec_delta.t: a node's spec stream re-reads only the instances the change
# rows name (a warm claim, a warm instance's boot-then-pause, an instance's
# placement, action or deletion) and keeps the rest of its last build; any
# other change, a new stream and the periodic resync build it whole
# (controller/node_spec.c). What the host runs must be exactly what the
# database says either way: every instance on the node held by the fake
# runtime in its desired state, nothing more, after claims, a pause, a
# create, a delete, and again after the controller restarts (a new stream:
# whole).
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1
spec_resync_seconds = 3600"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create delta-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
node=$(q "SELECT id FROM nodes LIMIT 1")
fake="$STACK_DIR/agent-1/fake"
# "id state" of every instance the database puts on the node, and of every
# record the fake runtime holds, sorted
db_view() {
	q "SELECT id || ' ' || desired_state FROM instances WHERE node_id = '$node' AND
		state <> 'deleted' AND desired_state <> 'deleted' ORDER BY id"
}
host_view() {
	local f
	for f in "$fake"/inst_*.inst; do
		[ -e "$f" ] || continue
		printf '%s %s\n' "$(basename "$f" .inst)" "$(sed -n 's/^state=\([a-z]*\).*/\1/p' "$f")"
	done | LC_ALL=C sort
}
same_view() { [ "$(db_view | LC_ALL=C sort)" = "$(host_view)" ]; }
fake_state_of() { sed -n 's/^state=\([a-z]*\).*/\1/p' "$fake/$1.inst"; }
deltas() { grep -c 'sent spec generation .*changed ones read again' "$STACK_DIR/ctl-1.log"; }

for i in 1 2 3; do
	bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
		--wait 30s >/dev/null || bail_out "instance $i"
done
tmpl=$(json_get "$(bcctl --format json sandbox-template create --name d1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 4 --warm-max 4)" id) || bail_out "template"
paused_n() { q "SELECT count(*) FROM instances WHERE warm_template_id = '$tmpl' AND state = 'paused'
	AND desired_state = 'paused'"; }
eventually 60 eval '[ "$(paused_n)" = 4 ]'
ok $? 'three plain instances and a pool of four paused ones'
eventually 20 same_view
ok $? 'the host runs what the database says'

d0=$(deltas)
for i in 1 2 3; do
	out=$(bcctl --format json sandbox create --template "$tmpl" --wait 20s) || bail_out "claim $i"
	is "$(json_get "$out" state)/$(json_get "$out" warm)" ready/true "claim $i: warm and ready"
done
d1=$(deltas)
ok "[ '$d1' -gt '${d0:-0}' ]" "claims were pushed re-reading only the claimed instances ($d0 -> $d1 such specs)"
eventually 20 same_view
ok $? 'after the claims the host runs what the database says (claimed running, the rest kept)'
is "$(db_view | grep -c ' running$')" 6 '... three plain and three claimed instances running'

# changes to one instance's entry name it too: a pause, a new instance
# placed on the node; the others stay as they were
plain=$(q "SELECT id FROM instances WHERE node_id = '$node' AND sandbox_id IS NULL AND
	warm_template_id IS NULL AND state = 'running' ORDER BY id LIMIT 1")
d2=$(deltas)
bcctl instance pause "$plain" >/dev/null || bail_out "pause"
bcctl instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--wait 30s >/dev/null || bail_out "instance 4"
eventually 20 same_view
ok $? 'after a pause and a create the host runs what the database says'
is "$(fake_state_of "$plain")" paused '... the paused one paused'
ok "[ '$(deltas)' -gt '$d2' ]" '... pushed by specs that read only the changed instances again'

# a deletion: its entry goes, the rest stays
victim=$(q "SELECT id FROM instances WHERE node_id = '$node' AND sandbox_id IS NULL AND
	warm_template_id IS NULL AND state = 'running' LIMIT 1")
bcctl instance delete "$victim" >/dev/null || bail_out "delete"
eventually 30 eval '[ "$(q "SELECT state FROM instances WHERE id = '"'$victim'"'")" = deleted ]'
ok $? 'a plain instance deleted'
eventually 30 eval '[ "$(paused_n)" = 4 ]'
out=$(bcctl --format json sandbox create --template "$tmpl" --wait 20s) || bail_out "claim 4"
is "$(json_get "$out" warm)" true 'a claim after it'
eventually 20 same_view
ok $? 'the host still runs what the database says'
ok "[ ! -e '$fake/$victim.inst' ]" 'and the deleted instance is gone from it'

# a new stream builds whole, then claims go back to deltas. A claim needs
# the node's spec stream: wait for the restarted controller to see bcd
# watch again (bcd reconnects within its reconnect backoff once the
# controller answers; on a loaded machine the controller's own start
# takes a while) rather than racing it
streams() { grep -c 'node .*: watching its spec from generation' "$STACK_DIR/ctl-1.log"; }
s0=$(streams)
ctl_kill 1 && ctl_start 1 || bail_out "controller restart"
eventually 60 eval '[ "$(streams)" -gt "$s0" ]'
ok $? "bcd watches its spec on the restarted controller"
eventually 30 eval '[ "$(paused_n)" = 4 ]'
out=$(bcctl --format json sandbox create --template "$tmpl" --wait 20s) || bail_out "claim 5"
is "$(json_get "$out" state)/$(json_get "$out" warm)" ready/true 'a claim through the restarted controller'
first=$(awk '/watching its spec from generation/ { n = "" } /sent spec generation/ && n == "" { n = $0 }
	END { print n }' "$STACK_DIR/ctl-1.log")
like "$first" 'built whole' "the new stream's first spec was built whole (it has no build to keep)"
eventually 20 same_view
ok $? 'after the restart the host runs what the database says'

done_testing
