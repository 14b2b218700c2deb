# idem.t: two controller replicas racing one idempotency key 100 times
# create exactly one instance (one authorization row, one event, one key),
# decided once; the same key with another request is CONFLICT; keys are
# scoped to the caller, so another identity's same key is its own. A quota
# holds under 30 creates racing through both replicas.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 2 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create idem-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }

bcctl tenant create race >/dev/null || bail_out "tenant"
u1=$(jid "$(bcctl --format json identity create --tenant race --kind user --name u1)")
u2=$(jid "$(bcctl --format json identity create --tenant race --kind user --name u2)")
printf '%s' '[{"effect": "allow", "actions": "compute:instances:*", "resources": "*"}]' >"$STACK_DIR/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant race --name all --file "$STACK_DIR/p.json")")
bcctl policy attach "$pol" --tenant >/dev/null
T1=$(json_get "$(bcctl --format json token create --identity "$u1")" token)
T2=$(json_get "$(bcctl --format json token create --identity "$u2")" token)

race() { # N: create with key k1 through replica (N % 2) + 1, print the id
	BC_TOKEN=$T1 bcctl_n $(($1 % 2 + 1)) --format json instance create --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --key k1 | jq -r .id
}
export -f race bcctl_n ctl_url
export BC_URL_1 BC_URL_2 BC_CA_FILE T1 img POOL_ID FLAVOR_NAME

seq 1 100 | xargs -P 20 -I{} bash -c 'race {}' >"$STACK_DIR/ids" 2>"$STACK_DIR/race.err"
is "$(grep -c '^inst_' "$STACK_DIR/ids")" 100 '100 racing creates all answered'
is "$(sort -u "$STACK_DIR/ids" | wc -l)" 1 'with one and the same instance'
is "$(wc -c <"$STACK_DIR/race.err")" 0 'none failed'
id=$(head -n 1 "$STACK_DIR/ids")
is "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'race'")" 1 'exactly one instance row'
is "$(q "SELECT count(*) FROM authz_resources WHERE tenant_id = 'race'")" 1 'one authorization row'
is "$(q "SELECT count(*) FROM idempotency_keys WHERE tenant_id = 'race'")" 1 'one key'
is "$(q "SELECT count(*) FROM events WHERE subject = 'instance/$id' AND type = 'instance.created'")" 1 \
	'one instance.created'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$id'")" 1 'one booking'

BC_TOKEN=$T1 bcctl_n 2 instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" \
	--key k1 --network private >/dev/null 2>"$STACK_DIR/err"
is "$?" 4 'the key with another request is CONFLICT'
like "$(cat "$STACK_DIR/err")" 'idempotency-key-reused' 'reason idempotency-key-reused'
other=$(BC_TOKEN=$T2 bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --key k1 | jq -r .id)
ok "[ '$other' != '$id' ] && [ -n '$other' ]" "another caller's key k1 is its own ($other)"

# -- a quota under racing creates: exactly what it allows, never more
live=$(q "SELECT count(*) FROM instances WHERE tenant_id = 'race' AND state <> 'deleted'")
bcctl tenant quota race --instances $((live + 5)) >/dev/null
quota_one() { # N: create through replica (N % 2) + 1; print the exit code
	BC_TOKEN=$T1 bcctl_n $(($1 % 2 + 1)) instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" >/dev/null 2>&1
	echo $?
}
export -f quota_one
seq 1 30 | xargs -P 15 -I{} bash -c 'quota_one {}' >"$STACK_DIR/codes"
is "$(grep -c '^0$' "$STACK_DIR/codes")" 5 '30 racing creates: 5 allowed by the quota'
is "$(grep -c '^9$' "$STACK_DIR/codes")" 25 '... and 25 QUOTA_EXCEEDED'
is "$(q "SELECT count(*) FROM instances WHERE tenant_id = 'race' AND state <> 'deleted'")" \
	$((live + 5)) 'the tenant holds exactly its quota'

done_testing
