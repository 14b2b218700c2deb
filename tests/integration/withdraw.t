# withdraw.t: the IAM reactions on sandboxes (docs/iam.md, "Withdrawn
# agents and departing owners"):
# - revoking an agent's delegation withdraws the open sandboxes it created
#   under it (sandbox.withdrawn, reason delegation-revoked, then deleted);
#   its user's own sandbox stays; a new delegation does not revive them;
# - suspending the agent withdraws what it created since (agent-suspended);
# - deleting an owner deletes its open sandboxes;
# each exactly once.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create wd-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
as() { local tok=$1; shift; BC_TOKEN=$tok bcctl "$@"; }
sstate() { q "SELECT state FROM sandboxes WHERE id = '$1'"; }
gone() { case "$(sstate "$1")" in deleting|deleted) return 0 ;; esac; return 1; }
withdrawn() { q "SELECT count(*) FROM events WHERE type = 'sandbox.withdrawn' AND subject = 'sandbox/$1' AND data->>'reason' = '$2'"; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
usr=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name u --admin)")
bot=$(jid "$(bcctl --format json identity create --tenant acme --kind agent --name bot)")
vic=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name v --admin)")
U=$(json_get "$(bcctl --format json token create --identity "$usr")" token)
G=$(json_get "$(bcctl --format json token create --identity "$bot")" token)
V=$(json_get "$(bcctl --format json token create --identity "$vic")" token)
printf '{"effect":"allow","actions":"compute:*","resources":"*"}' >"$STACK_DIR/p.json"
bcctl policy attach "$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/p.json")")" \
	--identity "$bot" >/dev/null
d1=$(jid "$(bcctl --format json delegation create --agent "$bot" --user "$usr")")
tmpl=$(jid "$(as "$U" --format json sandbox-template create --name t --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)")
sbx() { jid "$(as "$1" --format json sandbox create --template "$tmpl")"; }
s1=$(sbx "$G"); s2=$(sbx "$U")
like "$s1 $s2" '^sbx_.* sbx_' "the agent and its user each create a sandbox"
is "$(q "SELECT agent_id || ' ' || owner_id FROM sandboxes WHERE id = '$s1'")" "$bot $usr" \
	"... the agent's is owned by the user and records the agent"

bcctl delegation revoke "$d1" >/dev/null
eventually 30 gone "$s1"
ok $? "revoking the delegation withdraws the agent's sandbox"
is "$(withdrawn "$s1" delegation-revoked)" 1 '... sandbox.withdrawn (delegation-revoked) once'
is "$(q "SELECT data->>'agentId' FROM events WHERE type = 'sandbox.withdrawn' AND subject = 'sandbox/$s1'")" "$bot" \
	'... naming the agent'
is "$(event_keys sandbox.withdrawn "sandbox/$s1")" agentId,instanceId,poolId,reason,templateId \
	"... its data's keys"
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.deleting' AND subject = 'sandbox/$s1'")" 1 \
	'... then an ordinary delete'
ok "! gone '$s2'" "the user's own sandbox stays"

bcctl delegation create --agent "$bot" --user "$usr" >/dev/null
s3=$(sbx "$G")
sleep 2 # reconciler passes
ok "! gone '$s3'" 'a sandbox made under a new delegation lives'
is "$(withdrawn "$s1" delegation-revoked)" 1 '... and the old one was withdrawn once only'
bcctl identity set-state "$bot" suspended >/dev/null
eventually 30 gone "$s3"
ok $? "suspending the agent withdraws what it created"
is "$(withdrawn "$s3" agent-suspended)" 1 '... sandbox.withdrawn (agent-suspended) once'

s4=$(sbx "$V")
bcctl identity set-state "$vic" deleted >/dev/null
eventually 30 gone "$s4"
ok $? "deleting an owner deletes its open sandboxes"
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.deleting' AND subject = 'sandbox/$s4'")" 1 \
	'... once'
ok "! gone '$s2'" "another owner's sandbox stays"

done_testing
