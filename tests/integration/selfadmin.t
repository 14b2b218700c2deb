# selfadmin.t: a tenant's own administrators manage its identities,
# tokens, delegations and policies through the admin API (docs/iam.md,
# "Self-service"), decided as IAM actions:
# - an administrator of acme creates, reads, lists, changes identities,
#   tokens, delegations and policies of acme; another tenant's are
#   NOT_FOUND; the operator-only services stay ACCESS_DENIED;
# - a plain user is refused each action (no-allow, naming it) and lists
#   nothing; a user granted iam:identities:* and iam:tokens:* manages
#   users but never makes, changes or hands a token to an administrator
#   (admin-required); no identity changes its own state.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"

pol() { # TOKEN NAME JSON [TENANT]
	printf '%s' "$3" >"$STACK_DIR/p.json"
	jid "$(as "$1" --format json policy create ${4:+--tenant "$4"} --name "$2" --file "$STACK_DIR/p.json")"
}

bcctl tenant create acme >/dev/null && bcctl tenant create beta >/dev/null || bail_out "tenants"
adm=$(tenant_identity acme user adm --admin); usr=$(tenant_identity acme user usr)
mgr=$(tenant_identity acme user mgr); bx=$(tenant_identity beta user bx --admin)
D=$(tenant_token "$adm"); U=$(tenant_token "$usr"); M=$(tenant_token "$mgr"); X=$(tenant_token "$bx")
bcctl policy attach "$(pol "$BC_TOKEN" managers '{"effect":"allow","actions":["iam:identities:*","iam:tokens:*"],"resources":"*"}' acme)" \
	--identity "$mgr" >/dev/null || bail_out "manager policy"

# -- an administrator of acme, in acme
out=$(as "$D" --format json identity create --kind user --name carol)
is "$?" 0 "acme's administrator creates an identity"
carol=$(jid "$out")
is "$(json_get "$out" tenant_id)" acme '... in its own tenant by default'
is "$(q "SELECT count(*) FROM events WHERE type = 'identity.created' AND subject = 'identity/$carol' AND tenant_id = 'acme'")" 1 \
	'... publishing identity.created'
ok "as '$D' identity get '$carol' >/dev/null" '... reads it'
ids=$(as "$D" --format json identity list | jq -r '.items[].tenantId' | sort -u)
is "$ids" acme '... lists only its tenant'
C=$(json_get "$(as "$D" --format json token create --identity "$carol")" token)
like "$C" '^bct_' '... mints a token for it'
tid=$(as "$D" --format json token list --identity "$carol" | jq -r '.items[0].id')
like "$tid" '^tok_' '... lists its tokens'
ok "as '$D' token revoke '$tid' >/dev/null" '... revokes it'
refused "$C" 14 '' '... and the revoked token is refused' -- identity get "$carol"
ok "as '$D' identity set-state '$carol' suspended >/dev/null" "... suspends the identity"
bot=$(jid "$(as "$D" --format json identity create --kind agent --name bot)")
dlg=$(jid "$(as "$D" --format json delegation create --agent "$bot" --user "$usr")")
like "$dlg" '^dlg_' '... delegates an agent to a user'
is "$(as "$D" --format json delegation list | jq -r '.items[].id')" "$dlg" '... lists its delegations only'
ok "as '$D' delegation revoke '$dlg' >/dev/null" '... revokes it'
p1=$(pol "$D" readers '{"effect":"allow","actions":"compute:instances:read","resources":"*"}')
like "$p1" '^pol_' '... creates a policy in its tenant'
ok "as '$D' policy attach '$p1' --identity '$usr' >/dev/null" '... attaches it'
is "$(as "$D" --format json policy get "$p1" | jq -r '.identityIds[0]')" "$usr" '... reads it'
ok "as '$D' policy detach '$p1' --identity '$usr' >/dev/null" '... detaches it'
ok "as '$D' policy delete '$p1' >/dev/null" '... deletes it'
refused "$D" 6 'reason: self' 'no identity changes its own state' -- identity set-state "$adm" suspended

# -- never another tenant's
refused "$D" 3 '' "another tenant's identity is NOT_FOUND" -- identity get "$bx"
refused "$D" 3 '' '... so is creating in another tenant' -- identity create --tenant beta --kind user --name z
refused "$D" 3 '' "... listing another tenant's identities" -- identity list --tenant beta
refused "$D" 3 '' "... its tokens" -- token create --identity "$bx"
refused "$D" 3 '' "... its delegations" -- delegation list --tenant beta
bp=$(pol "$X" beta-pol '{"effect":"allow","actions":"*","resources":"*"}')
refused "$D" 3 '' "... its policies" -- policy get "$bp"
refused "$D" 3 '' "... attaching its policy" -- policy attach "$bp" --identity "$usr"
p2=$(pol "$D" p2 '{"effect":"allow","actions":"*","resources":"*"}')
refused "$D" 3 '' "... attaching to its identity" -- policy attach "$p2" --identity "$bx"
is "$(q "SELECT count(*) FROM policy_attachments WHERE target_id = '$bx'")" 0 '... nothing attached'

# -- never the operator's calls
refused "$D" 5 'operator credential' 'Tenants stay operator-only' -- tenant list
refused "$D" 5 'operator credential' 'Quotas too' -- tenant quota acme --vcpus 100
refused "$D" 5 'operator credential' 'Offers too' -- tenant offer acme --spend-limit-cents 1
refused "$D" 5 'operator credential' 'pools too' -- pool list

# -- a plain user: each action decided
refused "$U" 5 'action: iam:identities:create' 'a plain user may not create identities' -- \
	identity create --kind user --name eve
like "$(cat "$STACK_DIR/err")" 'reason: no-allow' '... no-allow'
is "$(as "$U" --format json identity list | jq '.items | length')" 0 '... and lists none'
refused "$U" 5 'action: iam:tokens:create' '... nor mint tokens, even its own' -- token create --identity "$usr"
refused "$U" 5 'action: iam:policies:create' '... nor create policies' -- policy create --name x --file "$STACK_DIR/p.json"
refused "$U" 5 'action: iam:policies:attach' '... nor attach one to itself' -- policy attach "$p2" --identity "$usr"

# -- a user granted iam:identities:* and iam:tokens:*
eve=$(jid "$(as "$M" --format json identity create --kind user --name eve)")
like "$eve" '^idn_' 'a manager creates a user'
E=$(json_get "$(as "$M" --format json token create --identity "$eve")" token)
like "$E" '^bct_' '... and mints its token'
is "$(as "$M" --format json identity list | jq '.items | length')" \
	"$(q "SELECT count(*) FROM identities WHERE tenant_id = 'acme'")" '... lists every identity of acme'
refused "$M" 5 'reason: admin-required' 'but never makes an administrator' -- identity create --kind user --name boss --admin
is "$(q "SELECT count(*) FROM identities WHERE name = 'boss'")" 0 '... nothing written'
refused "$M" 5 'reason: admin-required' "... nor mints an administrator's token" -- token create --identity "$adm"
refused "$M" 5 'reason: admin-required' '... nor suspends one' -- identity set-state "$adm" suspended
refused "$M" 5 'action: iam:policies:create' '... and has no policy rights' -- policy create --name y --file "$STACK_DIR/p.json"
refused "$M" 5 'action: iam:delegations:create' '... nor delegation rights' -- delegation create --agent "$bot" --user "$eve"

# -- the same over JSON/HTTP
post() { # TOKEN PATH BODY: the body, then the status on a line of its own
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
		-w '\n%{http_code}' --data-binary "$3" "https://127.0.0.1:$HTTP_PORT$2"
}
out=$(post "$D" /api/admin/identities/create '{"kind": "user", "name": "http-made"}')
is "$(printf '%s\n' "$out" | tail -n 1)" 200 'POST /api/admin/identities/create by an administrator: 200'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .tenantId)" acme '... in its tenant'
out=$(post "$D" /api/admin/identities/get "{\"identityId\": \"$bx\"}")
is "$(printf '%s\n' "$out" | tail -n 1)" 404 "... another tenant's identity: 404"
is "$(printf '%s\n' "$out" | sed '$d' | jq -r .error.code)" NOT_FOUND '... NOT_FOUND'
out=$(post "$U" /api/admin/identities/create '{"kind": "user", "name": "nope"}')
is "$(printf '%s\n' "$out" | tail -n 1)" 403 'a plain user: 403'
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '.error.details.action + " " + .error.details.reason')" \
	'iam:identities:create no-allow' '... naming the action and the reason'
out=$(post "$M" /api/admin/apitokens/create "{\"identityId\": \"$adm\"}")
is "$(printf '%s\n' "$out" | sed '$d' | jq -r '.error.code + " " + .error.details.reason')" \
	'ACCESS_DENIED admin-required' "a manager minting an administrator's token: admin-required"
out=$(post "$D" /api/admin/tenants/list '{}')
is "$(printf '%s\n' "$out" | tail -n 1)" 403 'Tenants over JSON/HTTP stay the operator'"'"'s: 403'

done_testing
