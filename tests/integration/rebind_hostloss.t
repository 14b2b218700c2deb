# rebind_hostloss.t: a memory restore whose host is lost (controller/
# rebind.c rebind_reseal, controller/node_replace.c; docs/rebind.md). Two
# fake agents in a recreateOnHostLoss pool, node_lost_seconds = 10, a real
# S3-compatible store (s3rver). The restore, rebound on its first host, is
# recreated on the other one from its snapshot's memory, so it answers to
# its source's identity again, at a new address: the controller seals it a
# new bundle in the recreating transaction (the old one is deleted with its
# secret_refs row), identityRebound is false until the new host's guest
# acknowledges it, then true again; the new archive carries the new
# address. Before rebind_reseal the bundle was dropped and the recreated
# restore stayed on its source's identity for good.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/s3.sh"

S3D=$(mktemp -d /tmp/bc-rebind-loss.XXXXXX) || bail_out "no temp dir"
[ "${BC_KEEP_STACK:-0}" = 1 ] || tap_on_exit rm -rf "$S3D"
s3_up "$S3D" snaps || bail_out "s3rver did not start"
BC_CTL_EXTRA_CONF=$(s3_store_conf)
export BC_CTL_EXTRA_CONF
export BC_NODE_LOST_SECONDS=10
export BC_AGENT_LABELS=cpu.model=TestCPU
export BC_AGENT_EXTRA_CONF='snapshot_store_allow_http_loopback_for_tests = 1'
stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$STACK_DIR/ctl-1.conf" \
	<"$S3_SECRET_FILE" >/dev/null 2>&1 || bail_out "set-secret"
img=$(stack_image_create loss-img) || bail_out "no image"
out=$(bcctl --format json pool create --name p2 --runtime fake --subnet 10.79.0.0/24 \
	--gateway 10.79.0.1 --bridge bcbr2 --recreate-on-host-loss) || bail_out "pool p2: $out"
POOL_ID=$(json_get "$out" id)
for n in 1 2; do
	STACK_AGENTS=$n
	agent_start $n && stack_wait_nodes_ready $n 60 || bail_out "agent $n"
done

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
col() { q "SELECT $2 FROM instances WHERE id = '$1'"; }
rebound() { bcctl --format json sandbox get "$1" | jq -r 'if has("identityRebound") then .identityRebound else "absent" end'; }
rebound_is() { [ "$(rebound "$1")" = "$2" ]; }

tmpl=$(jid "$(bcctl --format json sandbox-template create --name rl --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"
s1=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --wait 20s)")
[ -n "$s1" ] || bail_out "no sandbox"
snap_ready() { [ "$(q "SELECT state FROM sandbox_snapshots WHERE id = '$1'")" = ready ]; }
pm=$(jid "$(bcctl --format json sandbox snapshot "$s1" --keep)")
eventually 60 snap_ready "$pm"
ok $? 'a memory snapshot of the source'
out=$(bcctl --format json sandbox create --template "$tmpl" --from-snapshot "$pm" --wait 20s)
r1=$(jid "$out")
ri=$(json_get "$out" instance_id)
[ -n "$ri" ] || bail_out "no restore: $out"
eventually 60 rebound_is "$r1" true
ok $? 'the memory restore is rebound on its first host'
ref1=$(col "$ri" identity_rebind_ref)
n1=$(col "$ri" node_id)
if [ "$n1" = "$(agent_node_id 1)" ]; then lost=1 other=2; else lost=2 other=1; fi
other_node=$(agent_node_id $other)
like "$ref1" '^sealed_' "its bundle ($ref1)"

# its host goes silent for good (frozen, then killed)
kill -STOP "$(_stack_get_pid "bcd-$lost")"
agent_kill $lost
moved() { [ "$(col "$ri" "state || ' ' || node_id")" = "running $other_node" ]; }
eventually 120 moved
ok $? "the restore is recreated on the other host ($(col "$ri" "state || ' ' || coalesce(node_id, '-')"))"
ref2=$(col "$ri" identity_rebind_ref)
like "$ref2" '^sealed_' "it has a new bundle ($ref2)"
isnt "$ref2" "$ref1" '... not the old one'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$ref1'")" 0 '... the old bundle is deleted'
is "$(q "SELECT count(*) FROM secret_refs WHERE name = 'identity-rebind.$ri'")" 1 \
	'... one secret_refs row names the bundle'
eventually 90 rebound_is "$r1" true
ok $? 'identityRebound true again once the new host rebinds it'
ledger=$STACK_DIR/agent-$other/fake/ledger.log
like "$(grep "op=rebind id=$ri " "$ledger")" 'op=rebind' "the new host's runtime rebound it"
mkdir "$S3D/tar"
tar -xf "$STACK_DIR/agent-$other/fake/$ri.rebind.tar" -C "$S3D/tar" || fail 'untar'
ip=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$ri'")
like "$(cat "$S3D/tar/network")" "ipv4 $ip/" "the new archive carries its new address ($ip)"
is "$(cat "$S3D/tar/principals")" "sandbox@$ri" '... and its own principal'
done_testing
