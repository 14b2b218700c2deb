# usage.t: metering and budgets from real bookings (docs/iam.md).
# - an instance running on a fake agent accrues vps.vcpu.hours and
#   vps.memory.gib.hours lines for its tenant and owner, priced at the
#   offer, readable with Usage.List (bcctl usage list) and its totals;
# - the spend metered that way reaches the offer's limit and the next
#   create is SPEND_LIMIT_REACHED (stop-new) with spentCents and limitCents;
# - after the instance is gone its lines equal the booking's length (read
#   from allocations) and stay so across passes of the leader, two
#   concurrent `bc-controller meter` runs and two replicas: never twice;
# - a booking over several hours is split into hourly windows; a closed
#   window keeps its price when the offer changes, an open one follows it;
# - a StopWhenOverBudget deny on principal.budgetSpent refuses a create
#   over budget and allows it within;
# - refusals: Usage.List's limit, to, identityId, another tenant,
#   no compute:usage:read; the offer's prices.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

export BC_CTL_EXTRA_CONF="metering_interval_seconds = 1"
stack_up --controllers 2 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create usage-img) || bail_out "no image"

meter() { "$BC_BIN/bc-controller" meter --config "$STACK_DIR/ctl-1.conf" 2>>"$STACK_DIR/meter.log"; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
TENANT_ARGS=(--tenant acme)
owner=$(tenant_identity acme user owner --admin)
reader=$(tenant_identity acme user reader)
O=$(tenant_token "$owner")
R=$(tenant_token "$reader")
like "$O" '^bct_' 'a tenant administrator and a plain user with tokens'

# 1,000 cents a second per vCPU: a running instance spends 3,000 in seconds
out=$(bcctl --format json tenant offer acme --spend-limit-cents 3000 --on-budget-exceeded stop-new \
	--price vps.vcpu.hours=3600000 --price vps.memory.gib.hours=0.5)
is "$(printf '%s' "$out" | jq -r '.prices["vps.vcpu.hours"]')" 3600000 'the offer holds its prices'
is "$(printf '%s' "$out" | jq -r '.prices["vps.memory.gib.hours"]')" 0.5 '... fractional cents too'

id=$(jid "$(as "$O" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
like "$id" '^inst_' 'the owner creates an instance'
eventually 30 instance_state_is "$id" running
ok $? '... it runs on the fake agent'

lines() { as "$O" --format json usage list "$@"; }
vcpu_line() { lines --meter vps.vcpu.hours | jq -r ".items[]? | select(.resource == \"instance/$id\") | $1"; }
has_vcpu_line() { [ -n "$(vcpu_line .id)" ]; }
eventually 30 has_vcpu_line
ok $? 'the metering pass writes a vps.vcpu.hours line for the instance'
is "$(vcpu_line .identityId)" "$owner" '... attributed to its owner'
is "$(vcpu_line .tenantId)" acme '... and its tenant'
ws=$(vcpu_line .windowStart)
is "$((ws % 3600000))" 0 '... in an hourly window'
is "$(lines --meter vps.memory.gib.hours | jq "[.items[] | select(.resource == \"instance/$id\")] | length")" 1 \
	'... beside one vps.memory.gib.hours line'

spent() { json_get "$(bcctl --format json tenant offer acme)" spent_cents; }
spend_reached() { [ "$(q "SELECT floor(sum(cost_cents)) >= 3000 FROM usage WHERE tenant_id = 'acme'")" = t ]; }
eventually 30 spend_reached
ok $? 'the metered spend reaches the limit while the instance runs'
refused "$O" 11 'reason: budget-spent' 'a create past the metered budget is SPEND_LIMIT_REACHED' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'limitCents: 3000' '... with limitCents'
s=$(sed -n 's/.*spentCents: \([0-9]*\).*/\1/p' "$STACK_DIR/err")
ok "[ '${s:-0}' -ge 3000 ]" "... and spentCents ($s)"
ok "[ '$(spent)' -ge 3000 ]" "the offer shows the spend ($(spent) cents)"
is "$(json_get "$(bcctl --format json tenant offer acme)" budget)" stop-new '... and its budget state: stop-new'
bcctl tenant offer acme --spend-limit-cents 3000 --on-budget-exceeded drain \
	--price vps.vcpu.hours=3600000 --price vps.memory.gib.hours=0.5 >/dev/null
is "$(json_get "$(bcctl --format json tenant offer acme)" budget)" drain \
	'a drain offer over budget: drain (warm pools drain to 0)'
refused "$O" 11 'reason: budget-spent' '... and new work is refused as with stop-new' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
is "$(q "SELECT count(*) FROM instances WHERE id = '$id' AND state = 'running'")" 1 \
	'... while the running instance runs on (no offer stops running work)'
bcctl tenant offer acme --spend-limit-cents 3000 --price vps.vcpu.hours=3600000 >/dev/null
is "$(json_get "$(bcctl --format json tenant offer acme)" budget)" spent \
	'offer none over budget: spent (only budget-checking pools refuse)'
id2=$(jid "$(as "$O" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
like "$id2" '^inst_' '... so a pool that checks no budget still creates'
as "$O" instance delete "$id2" >/dev/null # lines of open windows stop growing once all is deleted
bcctl pool budget-check "$POOL_ID" meter >/dev/null
refused "$O" 11 'reason: budget-spent' '... and one that checks budgets refuses' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
bcctl pool budget-check "$POOL_ID" none >/dev/null
bcctl tenant offer acme --spend-limit-cents 999999999999 --price vps.vcpu.hours=3600000 >/dev/null
is "$(json_get "$(bcctl --format json tenant offer acme)" budget)" ok 'a limit not reached: ok'

# -- the instance ends; its lines equal its booking, whatever runs the pass
as "$O" instance delete "$id" >/dev/null
eventually 30 instance_state_is "$id" deleted
ok $? 'the instance is deleted'
eventually 30 instance_state_is "$id2" deleted
ok $? '... and the second one'
booked() { q "SELECT sum(extract(epoch FROM released_at - created_at) / 3600 * vcpus) FROM allocations WHERE owner_id = '$id'"; }
metered() { q "SELECT sum(quantity) FROM usage WHERE resource_id = '$id' AND meter = 'vps.vcpu.hours'"; }
close_to() { q "SELECT abs(($1)::float8 - ($2)::float8) < 1e-9"; }
like "$(meter)" '^usage lines written: [0-9]+ in [0-9]+ ms$' 'bc-controller meter runs a pass'
is "$(close_to "$(metered)" "$(booked)")" t 'vCPU hours metered = the booking, to the nanohour'
before=$(metered)
meter >/dev/null & m1=$!
meter >/dev/null & m2=$!
wait "$m1"; r1=$?; wait "$m2"; r2=$?
is "$r1$r2" 00 'two passes at once both succeed'
sleep 2 # the replicas' own passes (every second) run too
is "$(metered)" "$before" '... and nothing is counted twice'
is "$(q "SELECT count(*) FROM usage WHERE resource_id = '$id' GROUP BY meter, window_start HAVING count(*) > 1")" '' \
	'one line per meter and window'
mem=$(q "SELECT sum(quantity) FROM usage WHERE resource_id = '$id' AND meter = 'vps.memory.gib.hours'")
is "$(close_to "$mem" "$(q "SELECT sum(extract(epoch FROM released_at - created_at) / 3600 * memory_mib / 1024.0) FROM allocations WHERE owner_id = '$id'")")" t \
	'memory GiB hours likewise'

# -- a booking across hours, metered from the start (the watermark reset)
node=$(q "SELECT id FROM nodes LIMIT 1")
q "INSERT INTO allocations (node_id, owner_kind, owner_id, tenant_id, vcpus, memory_mib, disk_gib, created_at, released_at) VALUES ('$node', 'instance', 'inst_0000000000000000000000hist', 'acme', 2, 1024, 1, now() - interval '150 minutes', now() - interval '20 minutes')" >/dev/null
q "UPDATE metering SET closed_before = NULL" >/dev/null
meter >/dev/null
hist() { q "SELECT $1 FROM usage WHERE resource_id = 'inst_0000000000000000000000hist' AND meter = 'vps.vcpu.hours'"; }
n=$(hist 'count(*)')
ok "[ '$n' -ge 3 ] && [ '$n' -le 4 ]" "130 minutes of booking fall into 3 or 4 hourly windows ($n)"
is "$(close_to "$(hist 'sum(quantity)')" "130.0 / 60 * 2")" t '... summing to 2 vCPUs x 130 minutes'
is "$(close_to "$(hist 'max(quantity)')" 2)" t '... a whole hour inside is 2 vCPU hours'
is "$(close_to "$(metered)" "$before")" t 'the earlier instance is recomputed to the same numbers'
closed="window_start < (SELECT closed_before FROM metering)"
old_cost=$(q "SELECT sum(cost_cents) FROM usage WHERE resource_id = 'inst_0000000000000000000000hist' AND $closed")
ok "[ -n '$old_cost' ]" 'the old booking has closed windows'
bcctl tenant offer acme --spend-limit-cents 3000 --on-budget-exceeded stop-new --price vps.vcpu.hours=1 >/dev/null
meter >/dev/null
is "$(q "SELECT sum(cost_cents) FROM usage WHERE resource_id = 'inst_0000000000000000000000hist' AND $closed")" \
	"$old_cost" 'closed windows keep the price they were metered at'
is "$(q "SELECT bool_and(cost_cents = quantity::numeric) FROM usage WHERE resource_id = '$id' AND meter = 'vps.vcpu.hours' AND NOT ($closed)")" \
	t "the open window follows the new price (1 cent a vCPU hour)"

# -- paging and refusals
out=$(lines --limit 1)
is "$(printf '%s' "$out" | jq '.items | length')" 1 'usage list --limit 1: one line'
c=$(printf '%s' "$out" | jq -r .cursor)
out2=$(lines --limit 1 --cursor "$c")
ok "[ \"\$(printf '%s' '$out2' | jq -r '.items[0].id')\" -gt '$c' ]" '... the cursor reads on'
is "$(printf '%s' "$out" | jq -r .totalCostCents)" "$(printf '%s' "$out2" | jq -r .totalCostCents)" \
	'... totals cover every page'
refused "$O" 2 'field: to' 'to before from' -- usage list --from 10 --to 5
refused "$O" 2 'field: identityId' 'a malformed identity' -- usage list --identity nobody
refused "$O" 3 '' "another tenant's usage is NOT_FOUND" -- usage list --tenant root
refused "$R" 5 'action: compute:usage:read' 'a user without compute:usage:read' -- usage list
refused "$BC_TOKEN" 2 'field: prices' 'a malformed meter name' -- tenant offer acme --price 'VPS!=1'
refused "$BC_TOKEN" 2 'field: prices' 'a negative price' -- tenant offer acme --price vps.vcpu.hours=-1
refused "$BC_TOKEN" 1 '--price' 'a price that is no number is a usage error' -- tenant offer acme --price vps.vcpu.hours=x

# -- the spec's StopWhenOverBudget statement: principal.budgetSpent
printf '%s' '{"statements": [{"effect": "allow", "actions": "compute:instances:*", "resources": "*"}, {"sid": "StopWhenOverBudget", "effect": "deny", "actions": ["compute:instances:create"], "resources": "*", "conditions": {"Bool": {"principal.budgetSpent": true}}}]}' >"$STACK_DIR/sob.json"
sob=$(jid "$(bcctl --format json policy create --tenant acme --name sob --file "$STACK_DIR/sob.json")")
bcctl policy attach "$sob" --identity "$reader" >/dev/null
bcctl tenant offer acme --spend-limit-cents 3000 >/dev/null # none: no pool refuses by itself
refused "$R" 5 'sid: StopWhenOverBudget' 'over budget, a StopWhenOverBudget deny refuses the create' -- \
	instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img"
like "$(cat "$STACK_DIR/err")" 'reason: explicit-deny' '... as an explicit deny'
bcctl tenant offer acme --spend-limit-cents 999999999999 >/dev/null
id3=$(jid "$(as "$R" --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img")")
like "$id3" '^inst_' '... and within budget the same policy allows it'
as "$R" instance delete "$id3" >/dev/null

done_testing
