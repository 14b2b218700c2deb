# smoke.t: one controller, one fake-runtime agent, one instance through its
# life: pool, flavor and image exist, the instance is placed and runs, and
# deleting it ends in deleted.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 4,8192,50 || bail_out "stack_up failed"

# -- the objects stack_up created, read back
out=$(bcctl --format json pool get "$POOL_ID")
is "$?" 0 'pool get exits 0'
is "$(json_get "$out" id)" "$POOL_ID" 'pool get returns the pool'
is "$(json_get "$out" runtime)" fake 'pool runtime is fake'
is "$(json_get "$out" ipam_subnet)" 10.77.0.0/24 'pool subnet as created'

out=$(bcctl --format json flavor get "$FLAVOR_NAME")
is "$(json_get "$out" id)" "$FLAVOR_ID" 'flavor get by name returns the flavor'
is "$(json_get "$out" vcpus)" 1 'flavor vcpus'
is "$(json_get "$out" memory_mib)" 512 'flavor memory'

out=$(bcctl --format json node list --pool "$POOL_ID")
node=$(json_items "$out" | jq -r 'select(.state == "ready") | .id')
like "$node" '^node_[^ ]+$' 'one ready node in the pool'
is "$node" "$(agent_node_id 1)" 'it is the node the agent joined as'

# -- an image
sha=$(printf 'smoke-image' | sha256sum | cut -d' ' -f1)
out=$(bcctl --format json image create --name smoke-img --format qcow2 \
	--url https://images.bc.invalid/smoke.qcow2 --sha256 "$sha" --size 1073741824)
is "$?" 0 'image create exits 0'
img=$(json_get "$out" id)
like "$img" '^img_' 'image id'
is "$(json_get "$out" sha256)" "$sha" 'image sha256 as given'
out=$(bcctl --format json image list)
ok "$(json_items "$out" | jq -r .id | grep -qx "$img"; echo $?)" 'image list shows the image'

# -- an instance
out=$(bcctl --format json instance create "${TENANT_ARGS[@]}" --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")
is "$?" 0 'instance create exits 0'
id=$(json_get "$out" id)
like "$id" '^inst_' 'instance id'
is "$(json_get "$out" pool_id)" "$POOL_ID" 'instance in the pool'
is "$(json_get "$out" flavor)" "$FLAVOR_NAME" 'instance flavor by name'
is "$(json_get "$out" image_id)" "$img" 'instance image'

eventually 30 instance_state_is "$id" running
ok $? 'instance reaches running'
out=$(bcctl --format json instance get "$id" "${TENANT_ARGS[@]}")
is "$(json_get "$out" state)" running 'instance get: running'
is "$(json_get "$out" node_id)" "$node" 'placed on the only node'
is "$(json_get "$out" vcpus)" 1 'shape from the flavor: vcpus'
is "$(json_get "$out" memory_mib)" 512 'shape from the flavor: memory'
ipv4=$(printf '%s' "$out" | jq -r '(.nics // [])[0] | .ipv4 // empty')
like "$ipv4" '^10\.77\.0\.([2-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-4])$' \
	'NIC address leased from the pool subnet, not the gateway'

out=$(bcctl --format json instance list "${TENANT_ARGS[@]}" --pool "$POOL_ID")
ok "$(json_items "$out" | jq -r .id | grep -qx "$id"; echo $?)" 'instance list shows it'

out=$(bcctl --format json node get "$node")
is "$(json_get "$out" instances)" 1 'the node counts one live instance'

# -- refusals have the documented exit codes
bcctl instance get inst_00000000000000000000000000 "${TENANT_ARGS[@]}" >/dev/null 2>&1
is "$?" 3 'a well-formed unknown instance id: NOT_FOUND exit code'
bcctl instance get not-an-id "${TENANT_ARGS[@]}" >/dev/null 2>&1
is "$?" 2 'a malformed instance id: INVALID_INPUT exit code'
BC_TOKEN='' HOME=$STACK_DIR/home "$BC_BIN/bcctl" --url "$BC_URL" --ca-file "$BC_CA_FILE" pool list >/dev/null 2>&1
is "$?" 14 'no token: UNAUTHENTICATED exit code'

# -- delete
bcctl --format json instance delete "$id" "${TENANT_ARGS[@]}" >/dev/null
is "$?" 0 'instance delete exits 0'

gone() {
	local st rc
	st=$(instance_state "$id")
	rc=$?
	[ "$st" = deleted ] && return 0
	# a deleted instance may also be NOT_FOUND for get
	bcctl instance get "$id" "${TENANT_ARGS[@]}" >/dev/null 2>&1
	[ $? = 3 ] && [ $rc != 0 ]
}
eventually 30 gone
ok $? 'instance ends deleted'
out=$(bcctl --format json instance list "${TENANT_ARGS[@]}" --pool "$POOL_ID")
ok "$(json_items "$out" | jq -r .id | grep -qx "$id" && echo 1 || echo 0)" \
	'instance list without --deleted no longer shows it'
out=$(bcctl --format json instance list "${TENANT_ARGS[@]}" --pool "$POOL_ID" --deleted)
ok "$(json_items "$out" | jq -r .id | grep -qx "$id"; echo $?)" 'instance list --deleted shows it'
node_free() {
	local o
	o=$(bcctl --format json node get "$node") || return 1
	[ "$(json_get "$o" instances)" = 0 ] || [ -z "$(json_get "$o" instances)" ]
}
eventually 30 node_free
ok $? 'the node no longer counts it'
# once the deletion finishes the host gets a spec that no longer names the
# instance (so it drops its tap and guards); bcd persists what it accepted
spec_clean() { [ -f "$STACK_DIR/agent-1/spec.pb" ] && ! grep -qa "$id" "$STACK_DIR/agent-1/spec.pb"; }
eventually 30 spec_clean
ok $? "the host's applied spec no longer names the deleted instance"

# -- every daemon stops cleanly, with no sanitizer report in its log
stack_down
ok $? 'stack stops cleanly, no sanitizer reports'

done_testing
