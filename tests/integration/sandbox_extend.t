# sandbox_extend.t: Sandboxes.Extend, every rule, through two replicas:
# exactly one of until/by and the by formats; decided as
# compute:sandboxes:update with a pending ttlSeconds equal to the whole
# lifetime from createdAt (a policy capping ttlSeconds caps extensions);
# the template's maxTtlSeconds refused before anything is staged, even for
# a template deleted since; an until not later than the expiry answers
# unchanged without a decision; the budget checked after an allow; one
# extend in flight (CONFLICT extend-in-flight with retryAfterSeconds), a
# hold older than 60 s taken over (by the database clock; the old hold is
# aged in the database to stand for an extend that crashed a minute ago);
# every failure clears only its own pending value; a refused extend leaves
# nothing in any table; a sandbox being deleted is INVALID_STATE; 20
# concurrent extends across both replicas never give a lifetime that no
# decision covered.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 2 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create ext-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
# every table's row count; not usage, which the metering pass writes on its
# own clock (a refused call never writes it)
all_rows() {
	local t
	for t in $(q "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'usage' ORDER BY 1"); do
		echo "$t $(q "SELECT count(*) FROM \"$t\"")"
	done
}
# ext N TOKEN ID ARGS...: extend through replica N as TOKEN; JSON (answer or error) on stdout
ext() {
	local n=$1 tok=$2
	shift 2
	BC_TOKEN=$tok bcctl_n "$n" --format json sandbox extend "$@" 2>/dev/null
}
# refused_ext TOKEN CODE KEY=VALUE MSG -- ARGS
refused_ext() {
	local tok=$1 code=$2 k=${3%%=*} v=${3#*=} msg=$4 out
	shift 5
	out=$(ext 1 "$tok" "$@")
	is "$(printf '%s' "$out" | jq -r ".error.code + \" \" + (.error.details.\"$k\" // \"-\")")" \
		"$code $v" "$msg: $code with $k=$v"
}
expires() { q "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM sandboxes WHERE id = '$1'"; }
lifetime() { q "SELECT ttl_seconds FROM sandboxes WHERE id = '$1'"; }
pending() { q "SELECT coalesce(pending::text, '-') || ' ' || coalesce(pending_hold, '-') FROM authz_resources WHERE id = '$1'"; }

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
pol() { printf '%s' "$2" >"$STACK_DIR/p.json"; jid "$(bcctl --format json policy create --tenant acme --name "$1" --file "$STACK_DIR/p.json")"; }
p=$(pol all '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}')
bcctl policy attach "$p" --identity "$alice" >/dev/null
p=$(pol bounded '{"sid":"BoundedExtend","effect":"deny","actions":["compute:sandboxes:update"],"resources":["compute-sandbox/*"],"conditions":{"NumericGreaterThan":{"resource.ttlSeconds":7200}}}')
bcctl policy attach "$p" --identity "$alice" >/dev/null
tmpl=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox-template create --name e --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 4h)") || bail_out "template"
s=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox create --template "$tmpl" --ttl 15m --wait 20s)")
like "$s" '^sbx_' 'a 15-minute sandbox'

# -- input
BC_TOKEN=$A bcctl --format json sandbox extend "$s" >/dev/null 2>&1
is $? 1 'bcctl: neither --by nor --until is a usage error (the server refuses too: sandboxes.t)'
BC_TOKEN=$A bcctl --format json sandbox extend "$s" --by 30m --until +1h >/dev/null 2>&1
is $? 1 'bcctl: --by and --until together are a usage error'
refused_ext "$A" INVALID_INPUT field=by 'by 30x' -- "$s" --by 30x
refused_ext "$A" INVALID_INPUT field=by 'by above 30 days' -- "$s" --by 31d
refused_ext "$A" INVALID_INPUT field=by 'by in seconds (30m, 8h, 7d or ms only)' -- "$s" --by 45s

# -- by: the decided absolute expiry, lifetime from createdAt
e0=$(expires "$s")
out=$(ext 1 "$A" "$s" --by 30m)
is "$(json_get "$out" expires_at)" $((e0 + 1800000)) 'by 30m moves expiresAt 30 minutes later'
is "$(json_get "$out" ttl_seconds)" 2700 'ttlSeconds is the whole lifetime: 45 minutes'
is "$(pending "$s")" '- -' 'the pending value is cleared after the extend'
is "$(q "SELECT attrs->>'ttlSeconds' FROM authz_resources WHERE id = '$s'")" 2700 \
	'the authorization row holds the new lifetime'
is "$(q "SELECT data->>'ttlSeconds' FROM events WHERE subject = 'sandbox/$s' AND type = 'sandbox.extended'")" \
	2700 'sandbox.extended with ttlSeconds'
out=$(ext 2 "$A" "$s" --by 600000)
is "$(json_get "$out" expires_at)" $((e0 + 2400000)) 'by 600000 (milliseconds), through replica 2'

# -- until not later: unchanged, no decision (bob may not update at all)
bob=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name bob)")
B=$(json_get "$(bcctl --format json token create --identity "$bob")" token)
p=$(pol readonly '{"effect":"allow","actions":["compute:sandboxes:read"],"resources":["*"]}')
bcctl policy attach "$p" --identity "$bob" >/dev/null
n_ev=$(q "SELECT count(*) FROM events")
out=$(ext 1 "$B" "$s" --until 2020-01-01T00:00:00Z)
is "$(json_get "$out" expires_at)" $((e0 + 2400000)) 'an earlier until answers the sandbox unchanged'
is "$(q "SELECT count(*) FROM events")" "$n_ev" '... with no event'
refused_ext "$B" ACCESS_DENIED action=compute:sandboxes:update 'a later until is decided' -- \
	"$s" --until +3h
is "$(pending "$s")" '- -' 'a refusal clears its pending value'

# -- a policy capping ttlSeconds caps extensions; the template's max before staging
before=$(all_rows)
refused_ext "$A" ACCESS_DENIED sid=BoundedExtend 'a lifetime above the policy cap (7200)' -- \
	"$s" --by 2h
refused_ext "$A" INVALID_INPUT maxTtlSeconds=14400 "a lifetime above the template's maxTtlSeconds" \
	-- "$s" --by 4h
is "$(all_rows)" "$before" 'refused extends leave every table as it was'
is "$(pending "$s")" '- -' '... and nothing pending'
is "$(expires "$s")" $((e0 + 2400000)) 'the expiry did not move'
BC_TOKEN=$A bcctl sandbox-template delete "$tmpl" >/dev/null || fail 'template delete'
refused_ext "$A" INVALID_INPUT maxTtlSeconds=14400 "maxTtlSeconds holds for a deleted template" \
	-- "$s" --by 4h

# -- the budget is checked after an allow
bcctl tenant offer acme --spend-limit-cents 10 --on-budget-exceeded stop-new >/dev/null || fail offer
q "INSERT INTO usage (tenant_id, meter, quantity, cost_cents) VALUES ('acme', 'test', 1, 10)" >/dev/null
refused_ext "$A" SPEND_LIMIT_REACHED reason=budget-spent 'a spent budget' -- "$s" --by 1m
is "$(pending "$s")" '- -' 'the budget refusal cleared its pending value'
bcctl tenant offer acme --spend-limit-cents 1000000 --on-budget-exceeded stop-new >/dev/null

# -- one extend in flight: another hold is CONFLICT, a hold over 60 s is taken over
# (the hold's age grows while the call runs: a loaded machine may take a
# few seconds from the UPDATE to the answer, so the floor moves with it)
t_hold=$(date +%s)
q "UPDATE authz_resources SET pending = '{\"ttlSeconds\": \"3000\"}', pending_hold = 'hold_other',
	pending_at = now() - interval '20 seconds' WHERE id = '$s'" >/dev/null
out=$(ext 2 "$A" "$s" --by 1m)
ra_lo=$((39 - ($(date +%s) - t_hold)))
is "$(printf '%s' "$out" | jq -r '.error.code + " " + .error.details.reason')" \
	'CONFLICT extend-in-flight' 'an extend while another holds the sandbox: CONFLICT extend-in-flight'
ra=$(printf '%s' "$out" | jq -r '.error.details.retryAfterSeconds')
ok "[ '$ra' -ge $ra_lo ] && [ '$ra' -le 41 ]" "retryAfterSeconds is the hold's time left ($ra, at least $ra_lo)"
is "$(pending "$s")" '{"ttlSeconds": "3000"} hold_other' "the refusal left the other extend's value"
q "UPDATE authz_resources SET pending_at = now() - interval '61 seconds' WHERE id = '$s'" >/dev/null
out=$(ext 1 "$A" "$s" --by 1m)
is "$(json_get "$out" expires_at)" $((e0 + 2460000)) 'a hold older than 60 s is taken over'
is "$(pending "$s")" '- -' 'the taker cleared what it staged'

# -- expiring mark cleared by extend
q "UPDATE sandboxes SET expiring_at = expires_at WHERE id = '$s'" >/dev/null
ext 1 "$A" "$s" --by 1m >/dev/null
is "$(q "SELECT expiring_at IS NULL FROM sandboxes WHERE id = '$s'")" t 'extend clears the expiring mark'

# -- 20 concurrent by extends across two replicas, with room for 5 under the cap
ext 1 "$A" "$s" --by $(( (7200 - 300 - $(lifetime "$s")) * 1000 )) >/dev/null
base=$(lifetime "$s")
is "$base" 6900 'five minutes left under the policy cap'
cap_left=$(( (7200 - base) / 60 ))
ext_one() { BC_TOKEN=$A bcctl_n $(($1 % 2 + 1)) --format json sandbox extend "$S" --by 1m 2>/dev/null; }
export -f ext_one bcctl_n ctl_url
export S=$s A BC_URL_1 BC_URL_2
n0=$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$s' AND type = 'sandbox.extended'")
seq 1 20 | xargs -P 20 -I{} bash -c 'ext_one {}; echo' >"$STACK_DIR/conc"
oks=$(jq -r 'select(.id) | .id' "$STACK_DIR/conc" | wc -l)
conflicts=$(jq -r 'select(.error.details.reason == "extend-in-flight") | 1' "$STACK_DIR/conc" | wc -l)
denied=$(jq -r 'select(.error.details.sid == "BoundedExtend") | 1' "$STACK_DIR/conc" | wc -l)
is $((oks + conflicts + denied)) 20 "every answer is a success, extend-in-flight or the cap ($oks ok, $conflicts in flight, $denied over the cap)"
final=$(lifetime "$s")
is "$final" $((base + 60 * oks)) 'each success added exactly its minute: no lifetime counted twice'
ok "[ $final -le 7200 ]" "the lifetime ($final s) never passed the policy cap"
is "$(q "SELECT count(*) FROM events WHERE subject = 'sandbox/$s' AND type = 'sandbox.extended'")" \
	$((n0 + oks)) 'one sandbox.extended per success'
is "$(q "SELECT max((data->>'ttlSeconds')::int) FROM events WHERE subject = 'sandbox/$s' AND type = 'sandbox.extended'")" \
	"$final" 'the final lifetime is one a decision covered'
is "$(q "SELECT (extract(epoch FROM expires_at - created_at))::int <= ttl_seconds FROM sandboxes WHERE id = '$s'")" \
	t 'expiresAt lies within the decided lifetime'
is "$(pending "$s")" '- -' 'nothing is left pending'
diag "20 concurrent extends: $oks applied, $conflicts CONFLICT extend-in-flight, $denied over the cap (cap room $cap_left)"

# -- a sandbox being deleted
BC_TOKEN=$A bcctl sandbox delete "$s" >/dev/null
out=$(ext 1 "$A" "$s" --by 1m)
like "$(printf '%s' "$out" | jq -r '.error.code + " " + .error.details.state')" \
	'^INVALID_STATE (deleting|deleted)$' 'a sandbox being deleted (or deleted) is INVALID_STATE'
done_testing
