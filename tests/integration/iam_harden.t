# iam_harden.t: attacks on the decision layer (issue 12, items 6, 7, 15),
# each with a control showing the attacked call really was allowed before.
# - an agent whose delegating user leaves `active` is cut off: through the
#   API its delegations are revoked in the same transaction; a user row
#   made inactive behind the API's back is refused at authentication with
#   reason delegation-user-inactive;
# - every attached document is evaluated: a deny past the 256th attached
#   policy holds, a stored document that no longer parses denies, and
#   attaching past the cap is refused;
# - one attribute vocabulary: networkPolicy (canonical) and network (its
#   alias) name the same attribute on instances and sandboxes; a deny whose
#   condition names an attribute the request lacks fires (fails closed);
#   ...IfExists operators hold when the attribute is missing.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,400 || bail_out "stack_up failed"
img=$(stack_image_create harden-img) || bail_out "no image"

policy() { # NAME JSON: create a policy in acme, print its id
	printf '%s' "$2" >"$STACK_DIR/pol.json"
	jid "$(bcctl --format json policy create --tenant acme --name "$1" --file "$STACK_DIR/pol.json")"
}
create_as() { # TOKEN [ARGS...]: create an instance, print its id
	local tok=$1
	shift
	jid "$(as "$tok" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" "$@")"
}
ICREATE=(instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")

bcctl tenant create acme >/dev/null || bail_out "tenant"
all=$(policy All '{"effect": "allow", "actions": "*", "resources": "*"}')

# -- item 6: an agent keeps a departed user's rights
alice=$(tenant_identity acme user alice); bob=$(tenant_identity acme user bob)
agent=$(tenant_identity acme agent helper)
for i in "$alice" "$bob" "$agent"; do bcctl policy attach "$all" --identity "$i" >/dev/null; done
A=$(tenant_token "$alice"); B=$(tenant_token "$bob"); G=$(tenant_token "$agent")
dlg=$(jid "$(bcctl --format json delegation create --agent "$agent" --user "$alice")")
like "$(create_as "$G")" '^inst_' 'control: the agent creates for alice while she is active'
bcctl identity set-state "$alice" suspended >/dev/null || bail_out "suspend alice"
refused "$G" 5 'delegation-(revoked|user-inactive)' "alice suspended: her agent's token creates nothing" -- "${ICREATE[@]}"
ok "[ -n \"\$(q \"SELECT revoked_at FROM delegations WHERE id = '$dlg'\")\" ]" \
	'suspending alice revoked her delegation in the same transaction'
is "$(q "SELECT count(*) FROM events WHERE type = 'delegation.revoked' AND subject = 'delegation/$dlg'")" 1 \
	'and published delegation.revoked for it'
like "$(create_as "$B")" '^inst_' 'control: bob, still active, creates'
bcctl identity set-state "$alice" active >/dev/null || bail_out "reactivate alice"
refused "$G" 5 'delegation-revoked' 'reactivating alice does not revive the revoked delegation' -- "${ICREATE[@]}"
dlg2=$(jid "$(bcctl --format json delegation create --agent "$agent" --user "$alice")")
like "$(create_as "$G")" '^inst_' 'control: a new delegation works again'
for st in suspended deleted; do
	q "UPDATE identities SET state = '$st' WHERE id = '$alice'" >/dev/null
	refused "$G" 5 'reason: delegation-user-inactive' "alice $st behind the API's back: the agent is refused" -- "${ICREATE[@]}"
	refused "$G" 5 'delegation-user-inactive' "alice $st: the agent reads nothing either" -- instance list
done
q "UPDATE identities SET state = 'active' WHERE id = '$alice'" >/dev/null
like "$(create_as "$G")" '^inst_' 'control: alice active again, the live delegation works'
bcctl identity set-state "$alice" deleted >/dev/null || bail_out "delete alice"
is "$(q "SELECT count(*) FROM delegations WHERE user_id = '$alice' AND revoked_at IS NULL")" 0 \
	'deleting alice revoked every delegation to her'
refused "$G" 5 'delegation-(revoked|user-inactive)' 'alice deleted: her agent is refused' -- "${ICREATE[@]}"

# -- item 7: authorization fails open
carol=$(tenant_identity acme user carol); C=$(tenant_token "$carol")
q "INSERT INTO policies (id, tenant_id, name, document) SELECT 'pol_f' || lpad(g::text, 4, '0'),
	'acme', 'filler' || g, '{\"effect\": \"allow\", \"actions\": \"compute:instances:*\", \"resources\": \"*\"}'
	FROM generate_series(1, 300) g" >/dev/null
q "INSERT INTO policy_attachments (policy_id, target_kind, target_id) SELECT id, 'identity', '$carol'
	FROM policies WHERE name LIKE 'filler%'" >/dev/null
is "$(q "SELECT count(*) FROM policy_attachments WHERE target_id = '$carol'")" 300 \
	'carol has 300 policies attached (written before any cap existed)'
like "$(create_as "$C")" '^inst_' 'control: carol creates with them'
q "INSERT INTO policies (id, tenant_id, name, document) VALUES ('pol_zzzz', 'acme', 'late-deny',
	'{\"sid\": \"LateDeny\", \"effect\": \"deny\", \"actions\": \"compute:instances:create\", \"resources\": \"*\"}')" >/dev/null
q "INSERT INTO policy_attachments (policy_id, target_kind, target_id) VALUES ('pol_zzzz', 'identity', '$carol')" >/dev/null
refused "$C" 5 'sid: LateDeny' 'a deny attached as the 301st policy still holds' -- "${ICREATE[@]}"
ok "as '$C' instance list >/dev/null" 'control: carol still lists (the deny is only on create)'
extra=$(policy Extra '{"effect": "allow", "actions": "compute:instances:read", "resources": "*"}')
refused "$BC_TOKEN" 9 'resource: attachedPolicies' 'attaching past the cap is QUOTA_EXCEEDED' -- policy attach "$extra" --identity "$carol"
ok "bcctl policy attach '$extra' --identity '$bob' >/dev/null" 'control: attaching to bob (one policy) works'

dave=$(tenant_identity acme user dave); D=$(tenant_token "$dave")
bcctl policy attach "$all" --identity "$dave" >/dev/null
di=$(create_as "$D")
like "$di" '^inst_' 'control: dave creates'
q "INSERT INTO policies (id, tenant_id, name, document) VALUES ('pol_broken', 'acme', 'broken',
	'{\"effect\": \"deny\", \"actions\": \"compute:instances:create\", \"resources\": \"*\", \"conditions\": {\"StringEqualsSomeday\": {\"resource.flavor\": \"x\"}}}')" >/dev/null
q "INSERT INTO policy_attachments (policy_id, target_kind, target_id) VALUES ('pol_broken', 'identity', '$dave')" >/dev/null
refused "$D" 5 'reason: policy-unreadable' 'a stored document that no longer parses denies' -- "${ICREATE[@]}"
like "$(cat "$STACK_DIR/err")" 'pol_broken' 'the refusal names the unreadable policy'
refused "$D" 5 'policy-unreadable' 'reads are refused too' -- instance get "$di"
is "$(json_items "$(as "$D" --format json instance list)" | wc -l)" 0 'and a list leaves out what dave may not read'
q "DELETE FROM policy_attachments WHERE policy_id = 'pol_broken'" >/dev/null
like "$(create_as "$D")" '^inst_' 'control: detached, dave creates again'

# -- item 15: one attribute vocabulary, explicit IfExists, deny fails closed
eve=$(tenant_identity acme user eve); E=$(tenant_token "$eve")
bcctl policy attach "$all" --identity "$eve" >/dev/null
tmpl=$(jid "$(as "$E" --format json sandbox-template create --name t1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)") || bail_out "template"
like "$(jid "$(as "$E" --format json sandbox create --template "$tmpl")")" '^sbx_' 'control: eve creates a sandbox'
like "$(create_as "$E")" '^inst_' 'control: eve creates an instance'
noegress=$(policy NoEgress '{"sid": "NoEgress", "effect": "deny", "actions": ["compute:instances:create", "compute:sandboxes:create"], "resources": "*", "conditions": {"StringEquals": {"resource.networkPolicy": "egress"}}}')
bcctl policy attach "$noegress" --identity "$eve" >/dev/null
refused "$E" 5 'sid: NoEgress' 'networkPolicy denies an egress instance' -- "${ICREATE[@]}"
refused "$E" 5 'sid: NoEgress' 'networkPolicy denies an egress sandbox too' -- sandbox create --template "$tmpl"
like "$(create_as "$E" --network private)" '^inst_' 'control: a private instance is not denied'
bcctl policy detach "$noegress" --identity "$eve" >/dev/null
alias=$(policy NoEgressAlias '{"sid": "NoEgressAlias", "effect": "deny", "actions": "compute:*:create", "resources": "*", "conditions": {"StringEquals": {"resource.network": "egress"}}}')
bcctl policy attach "$alias" --identity "$eve" >/dev/null
refused "$E" 5 'sid: NoEgressAlias' 'the alias network denies an egress instance' -- "${ICREATE[@]}"
refused "$E" 5 'sid: NoEgressAlias' 'and an egress sandbox' -- sandbox create --template "$tmpl"
bcctl policy detach "$alias" --identity "$eve" >/dev/null

longdeny=$(policy NoLongLived '{"sid": "NoLongLived", "effect": "deny", "actions": "compute:*:create", "resources": "*", "conditions": {"NumericGreaterThan": {"resource.ttlSeconds": 3600}}}')
bcctl policy attach "$longdeny" --identity "$eve" >/dev/null
refused "$E" 5 'sid: NoLongLived' 'a deny on a missing attribute fails closed: an instance has no ttlSeconds' -- "${ICREATE[@]}"
like "$(jid "$(as "$E" --format json sandbox create --template "$tmpl" --ttl 30m)")" '^sbx_' \
	'control: a 30-minute sandbox is not denied'
refused "$E" 5 'sid: NoLongLived' 'a 2-hour sandbox is denied' -- sandbox create --template "$tmpl" --ttl 2h
bcctl policy detach "$longdeny" --identity "$eve" >/dev/null
bcctl policy detach "$all" --identity "$eve" >/dev/null

frank=$(tenant_identity acme user frank); F=$(tenant_token "$frank")
printf '%s' '{"sid": "ShortOrNone", "effect": "allow", "actions": "compute:*", "resources": "*", "conditions": {"NumericLessThanEqualsIfExists": {"resource.ttlSeconds": 3600}}}' >"$STACK_DIR/ifx.json"
out=$(bcctl --format json policy create --tenant acme --name IfExists --file "$STACK_DIR/ifx.json" 2>&1)
ifx=$(jid "$out")
like "$ifx" '^pol_' 'an ...IfExists operator is accepted'
bcctl policy attach "$ifx" --identity "$frank" >/dev/null
ftmpl=$(jid "$(as "$F" --format json sandbox-template create --name t2 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 2h)")
ok "[ -n '$ftmpl' ]" 'IfExists: a template (decided on the tenant, no ttlSeconds) is allowed'
like "$(create_as "$F")" '^inst_' 'IfExists: an instance (no ttlSeconds) is allowed'
like "$(jid "$(as "$F" --format json sandbox create --template "$tmpl" --ttl 30m)")" '^sbx_' \
	'IfExists: a 30-minute sandbox is allowed'
refused "$F" 5 'no-allow' 'IfExists: a 2-hour sandbox is not' -- sandbox create --template "$tmpl" --ttl 2h
printf '%s' '{"effect": "allow", "actions": "*", "resources": "*", "conditions": {"StringEqualsIfExists": {"resource.networkPolicy": 3}}}' >"$STACK_DIR/bad.json"
refused "$BC_TOKEN" 2 'field: document.statement.conditions.StringEqualsIfExists' 'an IfExists operator checks its values like its base' -- policy create --tenant acme --name bad --file "$STACK_DIR/bad.json"

done_testing
