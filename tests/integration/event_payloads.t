# event_payloads.t: the data of every instance.* and sandbox.* event the
# platform publishes, read back through Events.List (bcctl events list),
# has exactly the keys the docs promise for its type: a plain instance
# walked through create, pause, resume, stop, start and delete; a cold
# sandbox created, extended and deleted; a warm pool's instance refilled,
# booted and paused, claimed by a sandbox, and another drained by its
# template's delete; a sandbox whose instance fails on its host. Every instance.* event of a sandbox's instance names
# sandboxId, and of a warm instance warmTemplateId (instance.running and
# instance.paused carried only nodeId and reason before issue 13). Each
# (type, kind of instance) pair expected must be seen at least once, and
# none unexpected.
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create evp-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
sbx_state() { json_get "$(bcctl --format json sandbox get "$1" 2>/dev/null)" state; }
inst_is() { [ "$(q "SELECT state FROM instances WHERE id = '$1'")" = "$2" ]; }
# the id of the newest event (a List numbers every committed event first)
last_id() {
	bcctl events list --limit 1 >/dev/null 2>&1 || return 1
	q "SELECT coalesce(max(seq), 0) FROM events"
}

# -- a plain instance through every action
id=$(jid "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img")") || bail_out "instance create"
eventually 30 inst_is "$id" running || bail_out "the instance never ran"
for step in pause:paused resume:running stop:stopped start:running; do
	bcctl instance "${step%%:*}" "$id" >/dev/null || fail "instance ${step%%:*}"
	eventually 30 inst_is "$id" "${step#*:}"
	ok $? "the plain instance: ${step%%:*} -> ${step#*:}"
done
bcctl instance delete "$id" >/dev/null || fail 'instance delete'
eventually 30 inst_is "$id" deleted
ok $? 'the plain instance: deleted'

# -- a cold sandbox: created, extended, deleted
cold=$(jid "$(bcctl --format json sandbox-template create --name evp-cold --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 4h)") || bail_out "template"
s1=$(jid "$(bcctl --format json sandbox create --template "$cold" --wait 20s)") || bail_out "sandbox"
eventually 30 eval '[ "$(sbx_state "$s1")" = ready ]'
ok $? 'a cold sandbox is ready'
i1=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s1'")
bcctl sandbox extend "$s1" --by 30m >/dev/null
ok $? 'and extended'
bcctl sandbox delete "$s1" >/dev/null || fail 'sandbox delete'
eventually 30 eval '[ "$(sbx_state "$s1")" = deleted ]'
ok $? 'and deleted'

# -- a warm instance: refilled, booted, paused; claimed; another drained
warm=$(jid "$(bcctl --format json sandbox-template create --name evp-warm --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 1 --warm-max 1)") || bail_out "template"
paused_warm() { q "SELECT id FROM instances WHERE warm_template_id = '$warm' AND state = 'paused'
	AND desired_state = 'paused'"; }
eventually 60 eval '[ -n "$(paused_warm)" ]'
ok $? 'the warm pool fills'
w1=$(paused_warm)
claim_mark=$(last_id) || bail_out "events list"
out=$(bcctl --format json sandbox create --template "$warm" --wait 20s) || bail_out "warm sandbox"
s2=$(jid "$out")
is "$(json_get "$out" warm)" true 'a sandbox claims the warm instance'
is "$(q "SELECT instance_id FROM sandboxes WHERE id = '$s2'")" "$w1" '... the one that was paused'
eventually 30 eval '[ "$(sbx_state "$s2")" = ready ]'
ok $? 'and is ready'
eventually 60 eval '[ -n "$(paused_warm)" ]'
ok $? 'the pool refills'
w2=$(paused_warm)
bcctl sandbox-template delete "$warm" >/dev/null || fail 'template delete'
eventually 30 inst_is "$w2" deleted
ok $? "the template's delete drains its warm instance"
bcctl sandbox delete "$s2" >/dev/null || fail 'warm sandbox delete'
eventually 30 eval '[ "$(sbx_state "$s2")" = deleted ]'
ok $? 'the claimed sandbox is deleted'

# -- a sandbox whose instance fails on its host (the fake runtime's create
# hook, written while the host is frozen, before it sees the instance)
pid=$(awk '$1 == "bcd-1" {print $2}' "$STACK_DIR/pids")
kill -STOP "$pid"
s3=$(jid "$(bcctl --format json sandbox create --template "$cold")") || bail_out "sandbox"
i3=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s3'")
echo create >"$STACK_DIR/agent-1/fake/$i3.fail"
kill -CONT "$pid"
eventually 30 eval '[ "$(sbx_state "$s3")" = failed ]'
ok $? 'a sandbox whose instance fails on its host is failed'
bcctl sandbox delete "$s3" >/dev/null || fail 'failed sandbox delete'
eventually 30 eval '[ "$(sbx_state "$s3")" = deleted ]'
ok $? 'and deleted'

# -- every event, through Events.List
: >"$STACK_DIR/events"
for prefix in instance. sandbox.; do
	events_list "$STACK_DIR/events" --type "$prefix" || bail_out "events list"
done
ok "[ $(wc -l <"$STACK_DIR/events") -gt 30 ]" "$(wc -l <"$STACK_DIR/events") events listed"

# The kind of instance an event is about: a sandbox's, a warm one, or a
# plain one; the claimed instance was warm up to the claim.
kind_of() { # ID SUBJECT
	local inst=${2#instance/}
	case $2 in
	sandbox/*) echo sandbox ;;
	"instance/$w1") [ "$1" -le "$claim_mark" ] && echo warm || echo sandbox ;;
	instance/*)
		q "SELECT CASE WHEN sandbox_id IS NOT NULL THEN 'sandbox' WHEN warm_template_id IS NOT
			NULL THEN 'warm' ELSE 'plain' END FROM instances WHERE id = '$inst'" ;;
	esac
}

# The keys each type carries, by kind (sorted, comma-separated).
declare -A want=(
	["instance.created plain"]="nodeId,poolId"
	["instance.created sandbox"]="nodeId,poolId,sandboxId"
	["instance.created warm"]="nodeId,poolId,warmTemplateId"
	["instance.running plain"]="nodeId,reason"
	["instance.running sandbox"]="nodeId,reason,sandboxId"
	["instance.running warm"]="nodeId,reason,warmTemplateId"
	["instance.paused plain"]="nodeId,reason"
	["instance.paused warm"]="nodeId,reason,warmTemplateId"
	["instance.stopped plain"]="nodeId,reason"
	["instance.pausing plain"]="desiredState,nodeId"
	["instance.resuming plain"]="desiredState,nodeId"
	["instance.stopping plain"]="desiredState,nodeId"
	["instance.starting plain"]="desiredState,nodeId"
	["instance.deleting plain"]=""
	["instance.deleting sandbox"]="sandboxId"
	["instance.deleting warm"]="reason,warmTemplateId"
	["instance.deleted plain"]=""
	["instance.deleted sandbox"]="sandboxId"
	["instance.deleted warm"]="warmTemplateId"
	["instance.error sandbox"]="nodeId,reason,sandboxId"
	["sandbox.created sandbox"]="instanceId,poolId,templateId,warm"
	["sandbox.ready sandbox"]="instanceId,poolId,templateId,warm"
	["sandbox.extended sandbox"]="expiresAt,instanceId,poolId,templateId,ttlSeconds"
	["sandbox.deleting sandbox"]="expired,instanceId,poolId,templateId"
	["sandbox.deleted sandbox"]="expired,instanceId,poolId,templateId"
	["sandbox.failed sandbox"]="instanceId,poolId,reason,templateId"
)
ours=" $id $i1 $w1 $w2 $s1 $s2 $i3 $s3 "
# this test's instances and sandboxes, by kind
classify() { # ID TYPE SUBJECT DATA
	case $ours in *" ${3#*/} "*) kind_of "$1" "$3" ;; esac
}
event_kinds_check "$STACK_DIR/events" classify
is "$(q "SELECT count(*) FROM events WHERE type LIKE 'instance.%' AND subject = 'instance/$w1'
	AND seq > $claim_mark AND NOT data ? 'sandboxId'")" 0 \
	'after the claim, each event of the claimed instance names its sandbox'

done_testing
