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
#   attestation -> live  Node.Attest as the node (its mTLS identity, what
#                        bcd holds), timed per call over BENCH_IDN_ATTEST_N
#                        (20) cold sandboxes with a pending epoch, each
#                        after a Health.Check on the same channel, timed too
#                        (bench/sbx_bench.c attest; the bootstrap values
#                        from their sealed boot data, untimed)
#   warm claim -> live   at BENCH_IDN_WARM_CONCURRENCY (32) clients,
#                        BENCH_IDN_WARM_POOL (32) claims of a template with
#                        identity on: Sandboxes.Create, then as bcd and its
#                        guest the claim's bootstrap reference, Node.
#                        GetBootData of it and Node.Attest (sbx_bench
#                        warm-attest), beside the plain warm claim -> ready
#                        of a template without identity at as many clients
#                        (sbx_bench warm, as bench/warm.sh)
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
SBX_BENCH=${SBX_BENCH:-$BC_SRC/build/bench/sbx_bench}
: "${BENCH_IDN_ATTEST_N:=20}"
: "${BENCH_IDN_WARM_POOL:=32}"
: "${BENCH_IDN_WARM_CONCURRENCY:=32}"
idn_node=(--cert "$STACK_DIR/agent-1/node.pem" --key "$STACK_DIR/agent-1/node.key"
	--conninfo "host=$PGHOST port=$PGPORT dbname=bc user=postgres")
idn_pending() { # TEMPLATE N: N sandboxes of it placed with a pending epoch
	[ "$(psql -d bc -XAtq -c "SELECT count(*) FROM sandboxes s JOIN instances i ON i.id =
		s.instance_id JOIN identity_epochs e ON e.sandbox_id = s.id AND e.state = 'pending'
		WHERE s.template_id = '$1' AND i.node_id IS NOT NULL")" -ge "$2" ]
}
idn_attest_rows() {
	local t k out ids=()
	t=$(bcctl --format json sandbox-template create --name bench-idn-attest --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --identity on | jq -r .id)
	for k in $(seq 1 "$BENCH_IDN_ATTEST_N"); do
		ids+=("$(bcctl --format json sandbox create --template "$t" --task "bench-$k" | jq -r .id)")
	done
	eventually 120 idn_pending "$t" "$BENCH_IDN_ATTEST_N" ||
		log "identity: not all $BENCH_IDN_ATTEST_N sandboxes placed"
	log "identity: Node.Attest over $BENCH_IDN_ATTEST_N sandboxes vs Health.Check, node mTLS"
	out=$(BC_BENCH=$SBX_BENCH run attest attest --target "$BC_URL" --ca "$STACK_DIR/agent-1/ca.pem" \
		"${idn_node[@]}" --template "$t" --count "$BENCH_IDN_ATTEST_N")
	row "Attestation -> identity live" p50_us "$(field "$out" p50_us)" "Health.Check, node mTLS" \
		"$(field "$out" health_p50_us)"
	row "Attestation -> identity live" p99_us "$(field "$out" p99_us)" "Health.Check, node mTLS" \
		"$(field "$out" health_p99_us)"
	row "Attestation -> identity live" n "$(field "$out" n)" "" ""
	for k in "${ids[@]}"; do
		bcctl sandbox delete "$k" >/dev/null
	done
}
idn_warm_full() { # TEMPLATE: BENCH_IDN_WARM_POOL claimable instances
	[ "$(psql -d bc -XAtq -c "SELECT count(*) FROM instances i JOIN sandbox_templates t ON
		t.id = i.warm_template_id WHERE t.id = '$1' AND i.state = 'paused' AND
		i.desired_state = 'paused' AND i.warm_instance_version = t.instance_version")" \
		-ge "$BENCH_IDN_WARM_POOL" ]
}
idn_warm_rows() {
	local ti tp c=$BENCH_IDN_WARM_CONCURRENCY wi wp m
	ti=$(bcctl --format json sandbox-template create --name bench-idn-warm --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --identity on --warm-min "$BENCH_IDN_WARM_POOL" \
		--warm-max "$BENCH_IDN_WARM_POOL" | jq -r .id)
	tp=$(bcctl --format json sandbox-template create --name bench-idn-plain --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --identity off --warm-min "$BENCH_IDN_WARM_POOL" \
		--warm-max "$BENCH_IDN_WARM_POOL" | jq -r .id)
	log "identity: warm claim -> identity live vs warm claim -> ready, $c clients (waiting for full pools)"
	eventually 600 idn_warm_full "$ti" || log "identity: the identity template's pool did not fill up"
	eventually 600 idn_warm_full "$tp" || log "identity: the plain template's pool did not fill up"
	wp=$(BC_BENCH=$SBX_BENCH run warm-claim warm --target "$BC_URL" "${tls[@]}" \
		--template "$tp" --concurrency "$c" --count "$BENCH_IDN_WARM_POOL")
	wi=$(BC_BENCH=$SBX_BENCH run warm-attest warm-attest --target "$BC_URL" "${tls[@]}" \
		"${idn_node[@]}" --template "$ti" --concurrency "$c" --count "$BENCH_IDN_WARM_POOL")
	for m in per_s p50_us p99_us; do
		row "Warm claim -> identity live, conc $c" "$m" "$(field "$wi" "$m")" \
			"warm claim -> ready" "$(field "$wp" "$m")"
	done
	row "Warm claim -> identity live, conc $c" warm_answers "$(field "$wi" warm)" "plain" \
		"$(field "$wp" warm)"
	bcctl sandbox-template delete "$ti" >/dev/null
	bcctl sandbox-template delete "$tp" >/dev/null
}
idn_rows
idn_attest_rows
idn_warm_rows
