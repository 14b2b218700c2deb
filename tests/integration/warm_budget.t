# warm_budget.t: warm pools follow the tenant's budget. A pool that checks
# no budget refills without asking; with a spent budget and an offer that
# stops new work, refills are skipped and the pool is left as it is; a
# drain offer drains it to 0 and keeps it there; the pass's answer is kept
# a minute per tenant (a changed offer is seen only once it expires); a
# failed check leaves the pool as it is and is not kept.
. "$(dirname "$0")/../lib/stack.sh"

export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 64,65536,500 || bail_out "stack_up failed"
img=$(stack_image_create budget-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
live_n() { q "SELECT count(*) FROM instances WHERE warm_template_id = '$tmpl' AND desired_state <> 'deleted'"; }
paused_n() { q "SELECT count(*) FROM instances WHERE warm_template_id = '$tmpl' AND desired_state <> 'deleted'
	AND state = 'paused'"; }

tmpl=$(json_get "$(bcctl --format json sandbox-template create --name b1 --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 2 --warm-max 4)" id) || bail_out "template"
eventually 60 eval '[ "$(paused_n)" = 2 ]'
ok $? 'a pool that checks no budget fills'

# spent, stop-new: refills skipped, nothing drained
bcctl tenant offer root --spend-limit-cents 100 --on-budget-exceeded stop-new >/dev/null || bail_out "offer"
q "INSERT INTO usage (tenant_id, meter, quantity, cost_cents) VALUES ('root', 'test', 1, 500)" >/dev/null
ctl_kill 1 && ctl_start 1 || bail_out "controller restart" # a fresh leader: nothing cached
bcctl sandbox-template update "$tmpl" --warm-min 3 --warm-max 4 >/dev/null
eventually 30 eval 'grep -q "sandboxes: replica .* runs the sandbox reconciler" "$STACK_DIR/ctl-1.log"'
sleep 4
is "$(live_n)" 2 'a spent budget skips refills (warm.min 3, still 2)'
is "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '$tmpl' AND desired_state = 'deleted'")" 0 \
	'and stop-new drains nothing'

# a claim is new work: with the budget spent it is refused, and refused
# whole (the claim runs in the same round trip as the check and is rolled
# back with it): both paused instances still claimable, no sandbox, no event
bcctl sandbox create --template "$tmpl" >"$STACK_DIR/out" 2>"$STACK_DIR/err"
is $? 11 'a create from the pool with the budget spent exits 11 (SPEND_LIMIT_REACHED)'
like "$(cat "$STACK_DIR/err")" "SPEND_LIMIT_REACHED" '... and says SPEND_LIMIT_REACHED'
is "$(paused_n)" 2 'both warm instances are still in the pool'
is "$(q "SELECT count(*) FROM instances WHERE sandbox_id IS NOT NULL OR claimed_at IS NOT NULL")" 0 \
	'none was handed over'
is "$(q "SELECT count(*) FROM sandboxes")/$(q "SELECT count(*) FROM events WHERE type = 'sandbox.created'")/$(q "SELECT count(*) FROM authz_resources WHERE type = 'compute-sandbox'")" \
	0/0/0 'no sandbox row, no sandbox.created, no authorization row'

# drain: seen once the cached answer (a minute) expires, then the pool goes to 0.
# The leader logs each answer it takes (debug): "tenant root: budget X".
ts_of() { date -d "$(sed -n 's/^ts=\([^ ]*\) .*/\1/p' <<<"$1")" +%s.%N; }
bcctl tenant offer root --spend-limit-cents 100 --on-budget-exceeded drain >/dev/null || bail_out "offer"
sleep 3
n=$(live_n)
fresh=$(grep -c "warm: tenant root: budget drain" "$STACK_DIR/ctl-1.log")
ok "$([ "$n" = 2 ] || [ "$fresh" -gt 0 ] && echo 0 || echo 1)" \
	"a kept answer stands: the pool is left as it was until the drain answer is taken ($n live, $fresh drain answers)"
eventually 90 eval '[ "$(live_n)" = 0 ]'
ok $? 'a drain offer drains the pool to 0'
first_drain=$(grep -m1 "warm: tenant root: budget drain" "$STACK_DIR/ctl-1.log")
last_stop=$(sed -n '/warm: tenant root: budget drain/q;/warm: tenant root: budget stop-new/p' \
	"$STACK_DIR/ctl-1.log" | tail -n 1)
[ -n "$first_drain" ] && [ -n "$last_stop" ] || bail_out "no budget answers logged"
kept=$(awk -v a="$(ts_of "$last_stop")" -v b="$(ts_of "$first_drain")" 'BEGIN { printf "%.1f", b - a }')
ok "$(awk -v k="$kept" 'BEGIN { print (k >= 59) ? 0 : 1 }')" \
	"the changed offer was taken only once the stop-new answer was a minute old (${kept}s)"
is "$(q "SELECT count(*) FROM events e JOIN instances i ON e.subject = 'instance/' || i.id
	WHERE i.warm_template_id = '$tmpl' AND e.type = 'instance.deleting'
	AND e.data->>'warmTemplateId' = '$tmpl'")" 2 'each drained instance published instance.deleting'
sleep 3
is "$(live_n)" 0 'and none is refilled while the budget is spent'

# a failed check (the spend unreadable) leaves the pool as it is, even with
# the budget no longer spent; it is not cached: the next readable pass refills
q "DELETE FROM usage WHERE meter = 'test'; ALTER TABLE usage RENAME TO usage_unreadable" >/dev/null
ctl_kill 1 && ctl_start 1 || bail_out "controller restart"
eventually 30 eval 'grep -q "template $tmpl: warm pool budget check failed" "$STACK_DIR/ctl-1.log"'
ok $? 'a failed budget check is logged'
sleep 3
is "$(live_n)" 0 '... and leaves the pool as it is (no refill, though nothing is spent now)'
q "ALTER TABLE usage_unreadable RENAME TO usage" >/dev/null
eventually 60 eval '[ "$(paused_n)" = 3 ]'
ok $? 'once the check answers again (not spent), the pool refills to warm.min'

done_testing
