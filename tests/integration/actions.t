# actions.t: Instances.Start, Stop, Pause and Resume through bcctl, with a
# fake-runtime agent converging each desired state:
# - each call answers the new desired state at once, publishes its event
#   (instance.pausing, .resuming, .stopping, .starting) and pushes the spec;
#   the host converges and its reports move the state (paused, running,
#   stopped; a start shows starting until the host runs it);
# - asking again for what is already desired changes nothing and publishes
#   nothing;
# - transitions that make no sense, an instance being deleted or deleted,
#   and a sandbox's or warm pool's instance are INVALID_STATE with
#   details.reason, and change nothing;
# - each is decided as compute:instances:<verb>: a user allowed only to
#   read is ACCESS_DENIED; another tenant's instance is NOT_FOUND.
. "$(dirname "$0")/../lib/stack.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create act-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
# act VERB ID [ARGS]: bcctl instance VERB ID; sets OUT, ERR, RC
act() {
	OUT=$(bcctl --format json instance "$@" 2>"$STACK_DIR/err")
	RC=$?
	ERR=$(cat "$STACK_DIR/err")
}
# refused EXIT REASON MSG -- VERB ID
refused() {
	local want=$1 reason=$2 msg=$3 before
	shift 4
	before=$(state_row "$2")
	act "$@"
	is "$RC" "$want" "$msg: exit $want"
	[ -z "$reason" ] || like "$ERR" "reason: $reason" "$msg: reason $reason"
	is "$(state_row "$2")" "$before" "$msg: nothing changed"
}
state_row() { q "SELECT state || ' ' || desired_state || ' ' || (SELECT count(*) FROM events WHERE subject = 'instance/$1') FROM instances WHERE id = '$1'"; }
events_of() { q "SELECT string_agg(type, ' ' ORDER BY id) FROM events WHERE subject = 'instance/$1' AND type <> 'instance.created'"; }
fake_state() { sed -n 's/^state=\([a-z]*\).*/\1/p' "$STACK_DIR/agent-1/fake/$1.inst" 2>/dev/null; }
fake_is() { [ "$(fake_state "$1")" = "$2" ]; }

id=$(json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")" id)
eventually 30 instance_state_is "$id" running
ok $? 'an instance runs'

# -- pause / resume
act pause "$id"
is "$RC" 0 'pause: accepted'
is "$(json_get "$OUT" desired_state)" paused '... the answer says desired paused'
eventually 30 instance_state_is "$id" paused
ok $? '... the host pauses it and reports paused'
is "$(fake_state "$id")" paused '... the runtime holds it paused'
n=$(state_row "$id")
act pause "$id"
is "$RC" 0 'pause again: accepted'
is "$(state_row "$id")" "$n" '... nothing changed, no event'
refused 6 paused 'start a paused instance' -- start "$id"
act resume "$id"
is "$(json_get "$OUT" desired_state)" running 'resume: desired running'
eventually 30 instance_state_is "$id" running
ok $? '... it runs again'
n=$(state_row "$id")
act resume "$id"
is "$RC" 0 'resume a running instance: accepted'
is "$(state_row "$id")" "$n" '... unchanged'

# -- stop / start
act stop "$id"
is "$(json_get "$OUT" desired_state)" stopped 'stop: desired stopped'
eventually 30 instance_state_is "$id" stopped
ok $? '... the host stops it'
eventually 10 fake_is "$id" stopped
ok $? '... the runtime holds it stopped'
refused 6 not-running 'pause a stopped instance' -- pause "$id"
refused 6 not-paused 'resume a stopped instance' -- resume "$id"
act stop "$id"
is "$RC" 0 'stop again: accepted, unchanged'
act start "$id"
is "$RC" 0 'start: accepted'
is "$(json_get "$OUT" state)" starting '... it shows starting until the host runs it'
is "$(json_get "$OUT" desired_state)" running '... desired running'
eventually 30 instance_state_is "$id" running
ok $? '... then running'
is "$(events_of "$id")" \
	"instance.running instance.pausing instance.paused instance.resuming instance.running instance.stopping instance.stopped instance.starting instance.running" \
	'one event per change, in order'
is "$(q "SELECT data->>'desiredState' FROM events WHERE subject = 'instance/$id' AND type = 'instance.pausing'")" \
	paused 'the event names the desired state'

# -- the same over JSON/HTTP
http() { # VERB ID: POST /api/compute/instances/VERB; the body, then the status
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
		-H 'Content-Type: application/json' -w '\n%{http_code}' \
		--data-binary "{\"instanceId\":\"$2\"}" "https://127.0.0.1:$HTTP_PORT/api/compute/instances/$1"
}
out=$(http pause "$id")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/compute/instances/pause: 200'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .desiredState)" paused '... desiredState paused'
eventually 30 instance_state_is "$id" paused
ok $? '... paused'
out=$(http start "$id")
is "$(printf '%s\n' "$out" | tail -n 1)" 409 'start a paused instance over JSON/HTTP: 409'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '.error.code + " " + .error.details.reason + " " + .error.details.desiredState')" \
	'INVALID_STATE paused paused' '... INVALID_STATE, reason and desiredState in the details'
out=$(http resume "$id")
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/compute/instances/resume: 200'
eventually 30 instance_state_is "$id" running
ok $? '... running'

# -- the policy decides each verb
bcctl tenant create acme >/dev/null || bail_out "tenant create"
reader=$(json_get "$(bcctl --format json identity create --tenant acme --kind user --name reader)" id)
printf '{"effect":"allow","actions":["compute:instances:read","compute:instances:create","compute:instances:pause"],"resources":["*"]}' >"$STACK_DIR/pol.json"
pol=$(json_get "$(bcctl --format json policy create --tenant acme --name rp --file "$STACK_DIR/pol.json")" id)
bcctl policy attach "$pol" --identity "$reader" >/dev/null
tok=$(json_get "$(bcctl --format json token create --identity "$reader")" token)
mine=$(json_get "$(BC_TOKEN=$tok bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")" id)
like "$mine" '^inst_' 'the reader creates an instance'
running_db() { [ "$(q "SELECT state FROM instances WHERE id = '$1'")" = running ]; }
eventually 30 running_db "$mine"
ok $? '... and it runs'
before=$(state_row "$mine")
BC_TOKEN=$tok bcctl instance stop "$mine" >/dev/null 2>"$STACK_DIR/err"
is "$?" 5 'stop without compute:instances:stop: ACCESS_DENIED (exit 5)'
like "$(cat "$STACK_DIR/err")" 'action: compute:instances:stop' '... naming the action'
is "$(state_row "$mine")" "$before" '... nothing changed'
BC_TOKEN=$tok bcctl instance stop "$id" --tenant root >/dev/null 2>"$STACK_DIR/err"
is "$?" 3 'another tenant'\''s instance: NOT_FOUND (exit 3)'
BC_TOKEN=$tok bcctl instance stop "$id" >/dev/null 2>"$STACK_DIR/err"
is "$?" 3 '... also when named without a tenant'
bcctl instance stop inst_x >/dev/null 2>"$STACK_DIR/err"
is "$?" 2 'a malformed id: INVALID_INPUT (exit 2)'
like "$(cat "$STACK_DIR/err")" 'field: instanceId' '... naming instanceId'

# -- instances that belong to a sandbox or a warm pool
q "UPDATE instances SET warm_template_id = 'sbxt_01jdzq3m5n8p9r7s6t5v4w3x2y' WHERE id = '$mine'" >/dev/null
refused 6 sandbox-managed 'a warm pool'\''s instance' -- stop "$mine" --tenant acme
like "$ERR" 'warm instance of sandbox template' '... saying whose'
q "UPDATE instances SET warm_template_id = NULL WHERE id = '$mine'" >/dev/null

# -- deletion ends it
bcctl instance delete "$id" >/dev/null
refused 6 'deleting|deleted' 'start an instance being deleted' -- start "$id"
eventually 30 instance_state_is "$id" deleted
refused 6 deleted 'stop a deleted instance' -- stop "$id"
refused 6 deleted 'resume a deleted instance' -- resume "$id"

done_testing
