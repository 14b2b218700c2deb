# tenancy.t: suspended and deleting tenants (docs/iam.md, "Tenants").
# - a suspended tenant gets no new work, not even from the operator
#   (INVALID_STATE tenant-inactive), its tokens are refused, the broker
#   (Node.GetBootData) releases nothing for it, its instances run on;
#   reactivated it works again;
# - a deleting tenant is torn down by the reconciler's leader: tokens and
#   delegations revoked, its template deleted, its sandbox and every
#   instance (placed, unplaced, the sandbox's) set to deleted with one
#   instance.deleting each (reason "tenant deleted"); while its host is
#   away it stays deleting (and cannot be reactivated: tenant-deleting);
#   the leader is killed meanwhile and the teardown goes on; once the host
#   confirms, identities and policies are deleted, the quota removed, the
#   offer and usage kept, and the tenant becomes deleted, all exactly once;
# - an instance whose host was retired is finished by the teardown at once.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

# the host is away on purpose for a while: it must not be declared lost meanwhile
export BC_NODE_LOST_SECONDS=600

stack_up --controllers 2 --agents 1 --agent-capacity 4,8192,100 || bail_out "stack_up failed"
img=$(stack_image_create ten-img) || bail_out "no image"

tstate() { q "SELECT state FROM tenants WHERE id = 'acme'"; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
adm=$(tenant_identity acme user adm --admin)
agent=$(tenant_identity acme agent bot)
A=$(tenant_token "$adm")
G=$(tenant_token "$agent")
bcctl delegation create --agent "$agent" --user "$adm" >/dev/null
printf '{"effect":"allow","actions":"compute:*","resources":"*"}' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --identity "$agent" >/dev/null
bcctl tenant quota acme --instances 10 >/dev/null
bcctl tenant offer acme --spend-limit-cents 100000 --price vps.vcpu.hours=1 >/dev/null
huge=$(jid "$(bcctl --format json flavor create --name huge --vcpus 64 --memory-mib 1024 --disk-gib 1)")

i1=$(jid "$(as "$A" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
i2=$(jid "$(as "$G" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
i3=$(jid "$(as "$A" --format json instance create --pool "$POOL_ID" --flavor huge --image "$img")")
tmpl=$(jid "$(as "$A" --format json sandbox-template create --name t1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)")
sbx=$(jid "$(as "$A" --format json sandbox create --template "$tmpl" --wait 20s)")
like "$i1 $i2 $i3 $sbx" '^inst_.* inst_.* inst_.* sbx_' 'two placed instances, an unplaced one and a sandbox'
is "$(q "SELECT node_id IS NULL FROM instances WHERE id = '$i3'")" t "... $i3 waits for room"
running() { [ "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state = 'running'")" = 3 ]; }
eventually 30 running
ok $? '... the two and the sandbox run'

# -- suspended: no new work, whoever asks; what runs keeps running
bcctl tenant set-state acme suspended >/dev/null
refused "$BC_TOKEN" 6 'reason: tenant-inactive' 'the operator cannot create in a suspended tenant' -- \
	instance create --tenant acme --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'state: suspended' '... details.state suspended'
refused "$A" 5 'reason: tenant-inactive' "the tenant's own token is refused" -- instance list
boot() { # INSTANCE: Node.GetBootData as agent 1 (its node's certificate); sets RC
	local dir=$STACK_DIR/agent-1 ref
	ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$1'")
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$ref\"}" >"$STACK_DIR/boot.out" 2>"$STACK_DIR/boot.err"
	RC=$?
}
boot "$i1"
is "$RC" 1 "the broker releases nothing for a suspended tenant's instance"
is "$(jq -r .code "$STACK_DIR/boot.out")" 7 '... PERMISSION_DENIED (ACCESS_DENIED)'
like "$(jq -r .details "$STACK_DIR/boot.out")" 'not active' '... saying its tenant is not active'
sleep 2 # a few reconciler passes
is "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state = 'running'")" 3 \
	'its instances keep running'
bcctl tenant set-state acme active >/dev/null
ok "as '$A' instance list >/dev/null" 'reactivated, its tokens work again'
boot "$i1"
is "$RC" 0 '... and the broker releases its boot data again'

# -- deleting, with the host away: the teardown starts and waits for it
agent_kill 1
bcctl tenant set-state acme deleting >/dev/null
revoked() { [ "$(q "SELECT count(*) FROM api_tokens k JOIN identities i ON i.id = k.identity_id WHERE i.tenant_id = 'acme' AND k.revoked_at IS NULL")" = 0 ]; }
eventually 30 revoked
ok $? "the teardown revokes the tenant's tokens"
is "$(q "SELECT count(*) FROM delegations WHERE tenant_id = 'acme' AND revoked_at IS NULL")" 0 \
	'... and its delegation'
deleting() { [ "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND desired_state <> 'deleted'")" = 0 ]; }
eventually 30 deleting
ok $? '... and sets every instance to deleted'
is "$(q "SELECT state FROM instances WHERE id = '$i3'")" deleted '... the unplaced one is deleted at once'
is "$(q "SELECT state FROM sandboxes WHERE id = '$sbx'")" deleting '... the sandbox is deleting'
ok "[ -n \"\$(q \"SELECT deleted_at FROM sandbox_templates WHERE id = '$tmpl'\")\" ]" '... the template deleted'
refused "$BC_TOKEN" 6 'reason: tenant-deleting' 'a deleting tenant cannot be reactivated' -- tenant set-state acme active
sleep 2
is "$(tstate)" deleting 'the tenant stays deleting while its host has not confirmed'

# the leader dies; whoever leads next goes on
ctl_kill 1
ctl_start 1 || bail_out "ctl-1 restart"
agent_start 1 || bail_out "agent restart"
done_() { [ "$(tstate)" = deleted ]; }
eventually 60 done_
ok $? 'once the host confirms, the tenant becomes deleted'
is "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'acme' AND state <> 'deleted'")" 0 \
	'... with every instance deleted'
sbx_gone() { [ "$(q "SELECT state FROM sandboxes WHERE id = '$sbx'")" = deleted ]; }
eventually 30 sbx_gone
ok $? '... and its sandbox'
is "$(q "SELECT count(*) FROM identities WHERE tenant_id = 'acme' AND state <> 'deleted'")" 0 \
	'its identities are deleted'
is "$(q "SELECT count(*) FROM policies WHERE tenant_id = 'acme' AND deleted_at IS NULL")" 0 \
	'its policies are deleted'
is "$(q "SELECT count(*) FROM policy_attachments WHERE policy_id = '$pol'")" 0 '... and detached'
is "$(q "SELECT count(*) FROM quotas WHERE tenant_id = 'acme'")" 0 'its quota is removed'
is "$(q "SELECT count(*) FROM offers WHERE tenant_id = 'acme'")" 1 'its offer stays (the bill)'

# -- events, each exactly once
ev() { q "SELECT count(*) FROM events WHERE tenant_id = 'acme' AND type = '$1' AND $2"; }
for i in "$i1" "$i2" "$i3"; do
	is "$(ev instance.deleting "subject = 'instance/$i' AND data->>'reason' = 'tenant deleted'")" 1 \
		"instance.deleting (tenant deleted) once for $i"
done
is "$(ev instance.deleting "data->>'reason' = 'tenant deleted' AND data->>'sandboxId' = '$sbx'")" 1 \
	"... and once for the sandbox's instance, naming the sandbox"
is "$(ev sandbox.deleting "subject = 'sandbox/$sbx' AND data->>'reason' = 'tenant deleted'")" 1 \
	'sandbox.deleting once'
is "$(ev token.revoked "data->>'reason' = 'tenant deleted'")" 2 'token.revoked for each token, once'
is "$(ev delegation.revoked "data->>'reason' = 'tenant deleted'")" 1 'delegation.revoked once'
is "$(ev tenant.state-changed "data->>'reason' = 'teardown'")" 1 'tenant.state-changed (teardown) once'
is "$(ev policy.deleted "subject = 'policy/$pol'")" 1 'policy.deleted once'
refused "$BC_TOKEN" 3 '' 'a deleted tenant stays deleted' -- tenant set-state acme active

# -- an instance on a host that is gone (retired) never gets a confirmation:
# the teardown finishes it at once
bcctl tenant create gone >/dev/null
gi=$(jid "$(bcctl --format json instance create --tenant gone --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
gone_runs() { [ "$(q "SELECT state FROM instances WHERE id = '$gi'")" = running ]; }
eventually 30 gone_runs
ok $? "tenant gone's instance runs"
bcctl node retire "$(agent_node_id 1)" >/dev/null
is "$(q "SELECT state FROM instances WHERE id = '$gi'")" lost '... its host retired, it is lost'
bcctl tenant set-state gone deleting >/dev/null
gone_done() { [ "$(q "SELECT state FROM tenants WHERE id = 'gone'")" = deleted ]; }
eventually 30 gone_done
ok $? 'the teardown finishes the lost instance at once and the tenant is deleted'
is "$(q "SELECT state FROM instances WHERE id = '$gi'")" deleted '... the instance deleted'

done_testing
