# refusals.t: bad input gets the spec's code and details, and leaves no
# trace. Every refusal below is checked for its bcctl exit code (see
# docs/cli.md) and the database is compared before and after.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 4,8192,50 || bail_out "stack_up failed"
img=$(stack_image_create ref-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
snapshot() {
	q "SELECT (SELECT count(*) FROM pools), (SELECT count(*) FROM flavors),
		(SELECT count(*) FROM images), (SELECT count(*) FROM instances),
		(SELECT count(*) FROM nodes), (SELECT count(*) FROM ip_leases),
		(SELECT count(*) FROM allocations), (SELECT count(*) FROM events),
		(SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM join_tokens WHERE used_at IS NOT NULL)"
}

# refused EXIT FIELD_OR_REASON MSG -- ARGS: bcctl ARGS exits EXIT and its
# stderr names FIELD_OR_REASON.
refused() {
	local want=$1 detail=$2 msg=$3 rc
	shift 4
	bcctl "$@" >/dev/null 2>"$STACK_DIR/err"
	rc=$?
	is "$rc" "$want" "$msg: exit $want"
	[ -z "$detail" ] || like "$(cat "$STACK_DIR/err")" "$detail" "$msg: names $detail"
}

before=$(snapshot)

# -- pools: CIDRs, gateways, names, runtimes, bridges
refused 2 'field: ipamSubnet' 'subnet with host bits' -- pool create --name x1 --runtime fake --subnet 10.9.0.1/24 --bridge br0
refused 2 'field: ipamSubnet' 'prefix 33' -- pool create --name x1 --runtime fake --subnet 10.9.0.0/33 --bridge br0
refused 2 'field: ipamSubnet' 'not an address' -- pool create --name x1 --runtime fake --subnet banana/24 --bridge br0
refused 2 'field: ipamSubnet' 'a /31 has no hosts' -- pool create --name x1 --runtime fake --subnet 10.9.0.0/31 --bridge br0
refused 2 'field: ipamGateway' 'gateway outside the subnet' -- pool create --name x1 --runtime fake --subnet 10.9.0.0/24 --gateway 10.8.0.1 --bridge br0
refused 2 'field: ipamGateway' 'gateway is the network address' -- pool create --name x1 --runtime fake --subnet 10.9.0.0/24 --gateway 10.9.0.0 --bridge br0
refused 2 'field: ipamSubnet6' 'IPv6 not a /64' -- pool create --name x1 --runtime fake --subnet6 fd00::/48 --bridge br0
refused 2 'field: runtime' 'unknown runtime' -- pool create --name x1 --runtime qemu-old --bridge br0
refused 2 'field: bridge' 'bridge name too long' -- pool create --name x1 --runtime fake --bridge abcdefghijklmnop
refused 2 'field: name' 'bad pool name' -- pool create --name 'No Spaces' --runtime fake --bridge br0
refused 4 'name-taken' 'duplicate pool name' -- pool create --name p1 --runtime fake --bridge br0

# -- flavors and images
refused 2 'field: vcpus' 'zero vCPUs' -- flavor create --name f0 --vcpus 0 --memory-mib 512 --disk-gib 1
refused 2 'field: hugePages' 'bad huge page size' -- flavor create --name f0 --vcpus 1 --memory-mib 512 --disk-gib 1 --huge-pages 4K
refused 2 'field: url' 'image URL not https' -- image create --name i0 --format qcow2 --url http://x/y --sha256 "$(printf '%064d' 0)" --size 1
refused 2 'field: sha256' 'image digest not hex' -- image create --name i0 --format qcow2 --url https://x/y --sha256 XYZ --size 1
refused 2 'field: format' 'image format' -- image create --name i0 --format vmdk --url https://x/y --sha256 "$(printf '%064d' 0)" --size 1

# -- ids
refused 2 'field: instanceId' 'malformed instance id' -- instance get inst_nope
refused 2 'field: instanceId' 'instance id with another prefix' -- instance get "$POOL_ID"
refused 3 '' 'unknown but well-formed instance id' -- instance get inst_01m8nxsfky1w22javd32rmmqqn
refused 2 'field: poolId' 'malformed pool id' -- pool get pool-1
refused 2 'field: nodeId' 'malformed node id' -- node get node_x
refused 2 'field: cursor' 'malformed cursor' -- instance list --cursor "'; DROP TABLE instances; --"

# -- instance creates
refused 2 'field: flavor' 'unknown flavor' -- instance create --pool "$POOL_ID" --flavor no-such --image "$img"
refused 2 'field: imageId' 'unknown image' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image no-such
refused 3 '' 'unknown pool' -- instance create --pool pool_01m8nxsfky1w22javd32rmmqqn --flavor "$FLAVOR_NAME" --image "$img"
refused 2 'field: networkPolicy' 'unknown network policy' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --network open
refused 2 'field: sshKeys' 'not an ssh key' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --ssh-key 'hello'
refused 2 'field: wait.timeoutMs' 'wait beyond 30 s' -- instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --wait 31s
refused 3 '' 'an unknown tenant is NOT_FOUND' -- instance list --tenant acme

# (an oversized request, over the 1 MiB message cap, is tested by the
# interop suite: bcctl itself refuses that many values)

# -- credentials
BC_TOKEN= bcctl pool list >/dev/null 2>&1
is "$?" 14 'no token: UNAUTHENTICATED (exit 14)'
BC_TOKEN=bct_0000 bcctl pool list >/dev/null 2>&1
is "$?" 14 'a wrong token: UNAUTHENTICATED (exit 14)'

# -- join tokens: malformed, replayed, expired
fresh=$(agent_join_token)
join_with() { # TOKEN DIR: run a bcd that joins with TOKEN, print its exit code
	timeout 20 "$BC_BIN/bcd" --controller "$BC_URL" --ca-file "$BC_CA_FILE" --join-token "$1" \
		--state-dir "$2" --runtime fake >"$2.log" 2>&1
	echo $?
}
rc=$(join_with "bcjt_nonsense" "$STACK_DIR/j0")
isnt "$rc" 0 'a malformed join token is refused'
like "$(cat "$STACK_DIR/j0.log")" 'INVALID_INPUT' 'it is INVALID_INPUT'
# the harness's agent spent its token at start: replay it
spent=$(sed -n 's/^join_token = //p' "$STACK_DIR/bcd-1.conf")
like "$spent" '^bcjt_' 'the agent joined with a token'
rc=$(join_with "$spent" "$STACK_DIR/j1")
isnt "$rc" 0 'a replayed join token is refused'
like "$(cat "$STACK_DIR/j1.log")" 'join-token-used' 'details.reason join-token-used'
# spend a fresh one, then replay it
rc=$(join_with "$fresh" "$STACK_DIR/j2")
is "$rc" 124 'a fresh token joins (the agent then runs until timeout)'
rc=$(join_with "$fresh" "$STACK_DIR/j3")
isnt "$rc" 0 'the same token a second time is refused'
like "$(cat "$STACK_DIR/j3.log")" 'join-token-used' 'details.reason join-token-used'
ok "[ ! -f '$STACK_DIR/j3/node.pem' ]" 'the refused agent wrote no certificate'
expired=$(agent_join_token)
q "UPDATE join_tokens SET expires_at = now() - interval '1 second' WHERE used_at IS NULL" >/dev/null
rc=$(join_with "$expired" "$STACK_DIR/j4")
isnt "$rc" 0 'an expired join token is refused'
like "$(cat "$STACK_DIR/j4.log")" 'join-token-expired' 'details.reason join-token-expired'
forged="${expired%.*}.$(printf '%048d' 0)"
rc=$(join_with "$forged" "$STACK_DIR/j5")
like "$(cat "$STACK_DIR/j5.log")" 'join-token-invalid' 'a token with a wrong secret is join-token-invalid'

# the one successful join above added one node and spent one token; nothing else changed
after=$(snapshot)
expect=$(echo "$before" | awk -F'|' -v OFS='|' '{ $5 = $5 + 1; $8 = $8 + 1; $10 = $10 + 1; print }')
is "$after" "$expect" 'refused calls left nothing behind (only the one join is recorded)'

# -- a schema this binary does not know is refused by serve
q "INSERT INTO schema_migrations (version, name, checksum) VALUES (999, '0999_future.sql', 'x')" >/dev/null
timeout 10 "$BC_BIN/bc-controller" serve --config "$STACK_DIR/ctl-1.conf" --listen 127.0.0.1:1 \
	>"$STACK_DIR/future.log" 2>&1
isnt "$?" 0 'serve refuses a newer schema'
like "$(cat "$STACK_DIR/future.log")" 'schema version 999' 'and says which'
q "DELETE FROM schema_migrations WHERE version = 999" >/dev/null

# -- migrations: an applied file that was edited is refused; two migrations
#    racing on a fresh database apply each file once
mkdir -p "$STACK_DIR/mig"
cp "$BC_SRC"/migrations/*.sql "$STACK_DIR/mig/"
echo '-- edited after release' >>"$STACK_DIR/mig/0001_core.sql"
"$BC_BIN/bc-controller" migrate --config "$STACK_DIR/ctl-1.conf" --migrations-dir "$STACK_DIR/mig" \
	>"$STACK_DIR/mig.log" 2>&1
isnt "$?" 0 'migrate refuses an applied migration whose text changed'
like "$(cat "$STACK_DIR/mig.log")" 'changed after it was applied' 'and says so'
pg_createdb bc_race >/dev/null 2>&1
conninfo="host=$PGHOST port=$PGPORT dbname=bc_race user=postgres"
pids=()
for i in 1 2 3; do
	"$BC_BIN/bc-controller" migrate --database "$conninfo" --migrations-dir "$BC_SRC/migrations" \
		>"$STACK_DIR/race-$i.log" 2>&1 &
	pids+=($!)
done
wait "${pids[@]}"
is "$(psql -d bc_race -XAtq -c 'SELECT count(*) FROM schema_migrations')" \
	"$(ls "$BC_SRC"/migrations/*.sql | wc -l)" 'three concurrent migrates apply each file exactly once'
is "$(grep -h 'applied 0001' "$STACK_DIR"/race-*.log | wc -l)" 1 'only one of them applied it'

done_testing
