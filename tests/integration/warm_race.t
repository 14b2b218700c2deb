# warm_race.t: the warm claim under load, through two controller replicas
# on one database.
#
# 0. The pool fills at most 4 per pass.
# 1. 200 concurrent Sandboxes.Create against a template holding 20 paused
#    warm instances, half through each replica: no instance claimed twice,
#    exactly 20 answers warm: true (the 20 pooled instances), the rest
#    cold, and the pool back at 20 afterwards. The host is stopped for the
#    storm so that refills made meanwhile cannot settle and be claimed too
#    (the node stays ready: it is declared lost only after a minute), which
#    makes "exactly 20" a fact rather than a race; it comes back after.
# 2. Changing the template's image while creates run drains every older
#    warm instance, and no create that started after the change committed
#    ever claims one.
. "$(dirname "$0")/../lib/stack.sh"

export BC_POOL_SUBNET=10.79.0.0/22 BC_POOL_GATEWAY=10.79.0.1
export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1
workers = 16"
export BC_LOG_LEVEL=info
stack_up --controllers 2 --agents 1 --agent-capacity 1000,1000000,10000 || bail_out "stack_up failed"
img=$(stack_image_create race-img) || bail_out "no image"
img2=$(stack_image_create race-img2) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
paused_n() { q "SELECT count(*) FROM instances WHERE warm_template_id = '$1' AND desired_state <> 'deleted'
	AND state = 'paused' AND warm_instance_version = $2"; }
# create N OUT_DIR: N concurrent creates, alternating replicas, answers in OUT_DIR/<i>.json
create_many() {
	mkdir -p "$2"
	seq "$1" | xargs -P 32 -I{} sh -c '
		n=$(( {} % 2 + 1 )); eval "url=\$BC_URL_$n"
		HOME=$STACK_DIR/home "$BC_BIN/bcctl" --url "$url" --ca-file "$BC_CA_FILE" --format json \
			sandbox create --template "$TMPL" >"$OUT/{}.json" 2>"$OUT/{}.err"'
}
export STACK_DIR BC_BIN BC_CA_FILE BC_TOKEN BC_URL_1 BC_URL_2

TMPL=$(json_get "$(bcctl --format json sandbox-template create --name race --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 20 --warm-max 20)" id) || bail_out "template"
export TMPL
eventually 120 eval '[ "$(paused_n "$TMPL" 1)" = 20 ]'
ok $? 'the pool holds 20 paused warm instances'
q "SELECT id FROM instances WHERE warm_template_id = '$TMPL' AND state = 'paused' ORDER BY id" >"$STACK_DIR/pooled"
# the fill ran as passes a second apart (no claim woke them): split the
# creations where more than half a second passed, at most 4 a pass
waves=$(q "SELECT count(*) || ' ' || max(n) FROM (SELECT count(*) n FROM (SELECT sum(gap) OVER (ORDER BY
	created_at, id) wave FROM (SELECT id, created_at, CASE WHEN created_at - lag(created_at) OVER (ORDER BY
	created_at, id) > interval '0.5 s' THEN 1 ELSE 0 END gap FROM instances WHERE warm_template_id =
	'$TMPL') g) w GROUP BY wave) c")
ok "$([ "${waves#* }" -le 4 ] && [ "${waves%% *}" -ge 5 ] && echo 0 || echo 1)" \
	"refills: at most 4 per template per pass (20 made in ${waves%% *} passes, at most ${waves#* } in one)"

# -- 1: 200 concurrent creates through two replicas
agent_kill 1
OUT=$STACK_DIR/storm; export OUT
create_many 200 "$OUT"
is "$(cat "$OUT"/*.json | jq -s 'length')" 200 'all 200 creates answered'
is "$(cat "$OUT"/*.json | jq -s '[.[] | select(.warm == true)] | length')" 20 'exactly 20 answers warm: true'
is "$(cat "$OUT"/*.json | jq -s '[.[] | select(.warm != true)] | length')" 180 'the other 180 cold'
cat "$OUT"/*.json | jq -r 'select(.warm == true) | .instanceId' | sort >"$STACK_DIR/claimed"
is "$(diff "$STACK_DIR/pooled" "$STACK_DIR/claimed" && echo same)" same 'the warm ones are the 20 pooled instances'
is "$(cat "$OUT"/*.json | jq -r .instanceId | sort | uniq -d | wc -l)" 0 'no instance in two answers'
is "$(q "SELECT count(*) FROM (SELECT instance_id FROM sandboxes GROUP BY 1 HAVING count(*) > 1) x")" 0 \
	'no instance behind two sandboxes'
is "$(q "SELECT count(*) FROM instances i JOIN sandboxes s ON s.id = i.sandbox_id WHERE s.instance_id = i.id
	AND s.warm = (i.claimed_at IS NOT NULL) AND i.warm_template_id IS NULL")" 200 \
	'each sandbox drives its own instance; claimed_at exactly on the warm ones'
is "$(grep -l . "$OUT"/*.err 2>/dev/null | wc -l)" 0 'no create failed'
agent_start 1 || bail_out "agent restart"
eventually 120 eval '[ "$(paused_n "$TMPL" 1)" = 20 ]'
ok $? 'the pool is back at 20 afterwards'
eventually 120 eval '[ "$(q "SELECT count(*) FROM sandboxes WHERE state = '"'ready'"'")" = 200 ]'
ok $? 'and every sandbox became ready'
is "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '$TMPL' AND desired_state <> 'deleted'")" 20 \
	'no more than warm.max were made'

# -- 2: an image change while creates run
OUT=$STACK_DIR/change; export OUT
create_many 40 "$OUT" &
storm=$!
sleep 0.5
bcctl sandbox-template update "$TMPL" --image "$img2" >/dev/null || bail_out "update"
changed=$(q "SELECT clock_timestamp()")
wait "$storm"
is "$(q "SELECT count(*) FROM sandboxes s JOIN instances i ON i.id = s.instance_id WHERE s.warm
	AND i.warm_instance_version = 1 AND s.created_at > '$changed'")" 0 \
	'no create that began after the change claimed an older warm instance'
eventually 60 eval '[ "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '"'$TMPL'"'
	AND warm_instance_version = 1 AND desired_state <> '"'deleted'"'")" = 0 ]'
ok $? 'every older warm instance is drained'
eventually 120 eval '[ "$(paused_n "$TMPL" 2)" = 20 ]'
ok $? 'and the pool refills with the new image'
is "$(q "SELECT count(*) FROM instances WHERE warm_template_id = '$TMPL' AND desired_state <> 'deleted'
	AND image_id <> '$img2'")" 0 'all of the new shape'
out=$(bcctl --format json sandbox create --template "$TMPL")
is "$(q "SELECT warm_instance_version || ' ' || image_id FROM instances WHERE id = '$(json_get "$out" instance_id)'")" \
	"2 $img2" 'a claim after the change takes the new shape'
is "$(q "SELECT count(*) FROM sandboxes s JOIN instances i ON i.id = s.instance_id WHERE s.warm
	AND i.warm_instance_version = 1 AND i.claimed_at > '$changed'")" 0 'and none of the old ones is ever claimed'

done_testing
