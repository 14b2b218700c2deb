# bench/identity.sh: the workload identity rows of `make bench`, sourced by
# bench/run.sh after its stack is up (it needs run.sh's run, field, row,
# tls, img, POOL_ID and FLAVOR_NAME, and the stack's agent 1 directory).
#
#   Identity.Recognize   an enforcement point asking who an address is, for
#                        BENCH_SECONDS at 1 client: every call asking the
#                        controller (no cache), and through the recognition
#                        cache of common/identity_client.c with its default
#                        2 s life (a miss every 2 s, the rest hits), each
#                        beside Health.Check on the same TLS channel in the
#                        same run
#
# The address is a real live epoch: a sandbox of a template with identity
# on, whose bootstrap value is read from its sealed boot data as its node
# gets it (Node.GetBootData) and attested as its node would (Node.Attest,
# over the node's mTLS identity; @grpc/grpc-js in
# tests/integration/grpc_call.js). The fake runtime's instance has no
# guest: the bench stands in for bcd's endpoint here, not for the broker.

idn_call() { # METHOD JSON: a bc.node.v1.Node call as agent 1
	node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" "$STACK_DIR/agent-1/ca.pem" \
		"$STACK_DIR/agent-1/node.pem" "$STACK_DIR/agent-1/node.key" bc/node/v1/node.proto \
		bc.node.v1.Node "$1" "$2" 2>>"$STACK_DIR/bench-client.log"
}
idn_rows() {
	local t s i a ref b out
	t=$(bcctl --format json sandbox-template create --name bench-idn --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --identity on | jq -r .id)
	s=$(bcctl --format json sandbox create --template "$t" --task bench --run bench-1 --agent bench)
	i=$(json_get "$s" instance_id)
	s=$(json_get "$s" id)
	eventually 30 eval '[ -n "$(psql -d bc -XAtq -c "SELECT 1 FROM instances WHERE id = '"'$i'"' AND node_id IS NOT NULL")" ]' ||
		{ log "identity: instance $i never placed"; return; }
	a=$(psql -d bc -XAtq -c "SELECT host(address) FROM ip_leases WHERE instance_id = '$i'")
	ref=$(psql -d bc -XAtq -c "SELECT user_data_ref FROM instances WHERE id = '$i'")
	b=$(idn_call GetBootData "{\"instance_id\": \"$i\", \"ref\": \"$ref\"}" | jq -r .user_data |
		base64 -d | grep -oE 'bcb_[0-9a-f]{64}' | head -n 1)
	[ -n "$b" ] || { log "identity: no bootstrap value in $s's boot data"; return; }
	out=$(idn_call Attest "{\"bootstrap\": \"$b\", \"instance_id\": \"$i\", \"address\": \"$a\"}")
	[ -n "$(printf '%s' "$out" | jq -r '.epoch_id // empty')" ] ||
		{ log "identity: the attestation failed: $out"; return; }
	log "identity: Recognize($a) uncached and cached vs Health.Check, ${BENCH_SECONDS:-3} s each"
	local hc rn rc
	hc=$(run health-tls rpc --target "$BC_URL" "${tls[@]}" --seconds "${BENCH_SECONDS:-3}")
	rn=$(run recognize rpc --target "$BC_URL" "${tls[@]}" --seconds "${BENCH_SECONDS:-3}" \
		--call recognize --address "$a" --cache 0)
	rc=$(run recognize-cached rpc --target "$BC_URL" "${tls[@]}" --seconds "${BENCH_SECONDS:-3}" \
		--call recognize --address "$a" --cache 2)
	for m in p50_us p99_us; do
		row "Identity.Recognize, no cache" "$m" "$(field "$rn" "$m")" "Health.Check, TLS" \
			"$(field "$hc" "$m")"
	done
	for m in p50_us p99_us; do
		row "Identity.Recognize, 2 s cache" "$m" "$(field "$rc" "$m")" "Health.Check, TLS" \
			"$(field "$hc" "$m")"
	done
	bcctl sandbox delete "$s" >/dev/null
}
idn_rows
