# bench/warm.sh: the warm claim rows of `make bench`, sourced by
# bench/run.sh after its stack is up (it needs run.sh's run, field, row,
# tls, img and conninfo, and a controller with sandbox_reconcile_seconds =
# 1 so the pool refills between rows).
#
#   warm claim -> ready   Sandboxes.Create with wait against a template
#                         holding BENCH_WARM_POOL (64) paused warm
#                         instances, fake runtime, at 1/8/32/64 clients
#                         (BENCH_WARM_CONCURRENCY): the create's answer
#                         (or a Get every 2 ms after it) ready; p50/p99 and
#                         claims per second, and how many answers said
#                         warm, next to a bare PostgreSQL pair of
#                         transactions doing the same row updates (claim
#                         FOR UPDATE SKIP LOCKED, authorization rows,
#                         sandbox, node generation, event; then the
#                         report's instance running, sandbox ready, event)
#
#   warm claim, 3 secrets Sandboxes.Create with wait against a template whose
#                         env names 3 secrets (the claim retires stale
#                         instances first and skips stale ones), beside
#                         the same claim against the template above that
#                         names none, at BENCH_WARM_SECRETS_CONCURRENCY
#                         (1 8) clients, BENCH_WARM_SECRETS_POOL (32)
#                         claims each: a template without secrets pays for
#                         no check, so its row is the one above within noise
#
# Each row waits until the pool is full again, so every claim of a row can
# find a paused instance; the template is deleted afterwards (its pool
# drains) so later rows do not carry it.

: "${BENCH_WARM_CONCURRENCY:=1 8 32 64}"
: "${BENCH_WARM_POOL:=64}"
SBX_BENCH=${SBX_BENCH:-$BC_SRC/build/bench/sbx_bench}

warm_tmpl=$(bcctl --format json sandbox-template create --name bench-warm --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min "$BENCH_WARM_POOL" \
	--warm-max "$BENCH_WARM_POOL" | jq -r .id)
warm_full() { # [TEMPLATE [N]]: at least N (BENCH_WARM_POOL) claimable instances
	[ "$(psql -d bc -XAtq -c "SELECT count(*) FROM instances i JOIN sandbox_templates t ON
		t.id = i.warm_template_id WHERE t.id = '${1:-$warm_tmpl}' AND i.state = 'paused' AND
		i.desired_state = 'paused' AND i.warm_instance_version = t.instance_version")" \
		-ge "${2:-$BENCH_WARM_POOL}" ]
}
# stack_cpu: "postgres controller bcd" CPU in ms (user + system) so far of
# this stack's daemons (the postmaster and its children, ctl-1, bcd-1)
tick_ms=$((1000 / $(getconf CLK_TCK)))
stack_cpu() {
	local pm pids
	pm=$(head -n 1 "$STACK_PG_DIR/data/postmaster.pid")
	cpu_of() { # PID...: their utime + stime in ms
		local p s=0
		for p in "$@"; do
			[ -r "/proc/$p/stat" ] &&
				s=$((s + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }')))
		done
		echo $((s * tick_ms))
	}
	pids=$(ps -o pid= --ppid "$pm")
	# shellcheck disable=SC2086 # word splitting of the pid list is meant
	echo "$(cpu_of "$pm" $pids) $(cpu_of "$(_stack_get_pid ctl-1)") $(cpu_of "$(_stack_get_pid bcd-1)")"
}
for c in $BENCH_WARM_CONCURRENCY; do
	log "warm claim -> ready x $BENCH_WARM_POOL, concurrency $c (waiting for a full pool)"
	eventually 600 warm_full || log "the warm pool did not fill up"
	since=$(psql -d bc -XAtq -c "SELECT clock_timestamp()")
	read -r pg0 ctl0 bcd0 <<<"$(stack_cpu)"
	wr=$(BC_BENCH=$SBX_BENCH run warm-claim warm --target "$BC_URL" "${tls[@]}" \
		--template "$warm_tmpl" --concurrency "$c" --count "$BENCH_WARM_POOL")
	read -r pg1 ctl1 bcd1 <<<"$(stack_cpu)"
	wp=$(BC_BENCH=$SBX_BENCH run warm-peer warm-peer --conninfo "$conninfo" --concurrency "$c" \
		--count "$BENCH_WARM_POOL")
	for m in per_s p50_us p99_us; do
		row "Warm claim -> ready, conc $c" "$m" "$(field "$wr" "$m")" \
			"PostgreSQL txns, same rows" "$(field "$wp" "$m")"
	done
	row "Warm claim -> ready, conc $c" warm_answers "$(field "$wr" warm)" "of claims" \
		"$(field "$wr" n)"
	# where the time goes: the server's own create -> ready (ready_at is
	# stamped in the host report's transaction), without the client's polls
	srv=$(psql -d bc -XAtq -F ' ' -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY x)),
		round(percentile_cont(0.99) WITHIN GROUP (ORDER BY x)) FROM (SELECT extract(epoch FROM
		ready_at - created_at) * 1e6 x FROM sandboxes WHERE warm AND created_at >= '$since'
		AND ready_at IS NOT NULL) s")
	row "  of which: created_at -> ready_at" p50_us "${srv%% *}" "" ""
	row "  of which: created_at -> ready_at" p99_us "${srv##* }" "" ""
	# what a claim costs in CPU (whole milliseconds of ticks over the row,
	# so read it at 8 clients and up): the daemons and the client; the
	# cores divided by it bound the claims per second, and c clients in a
	# closed loop wait at least c / that bound
	n=$(field "$wr" n)
	if [ -n "$n" ] && [ "$n" -gt 0 ]; then
		cl=$(( $(field "$wr" cpu_us) / 1000 ))
		for part in "postgres $((pg1 - pg0))" "bc-controller $((ctl1 - ctl0))" \
			"bcd $((bcd1 - bcd0))" "client $cl"; do
			row "  CPU per claim: ${part% *}" us $((${part#* } * 1000 / n)) "" ""
		done
		tot=$(( (pg1 - pg0 + ctl1 - ctl0 + bcd1 - bcd0 + cl) * 1000 / n ))
		row "  CPU per claim: all" us "$tot" "" ""
		[ "$tot" -gt 0 ] && row "  CPU-bound p50 floor, $(nproc) cores" us \
			$(( c * tot / $(nproc) )) "" ""
	fi
done

# a template naming 3 secrets beside the one above, which names none
: "${BENCH_WARM_SECRETS_CONCURRENCY:=1 8}"
: "${BENCH_WARM_SECRETS_POOL:=32}"
for i in 1 2 3; do
	printf 'bench-secret-value-%s' "$i" | bcctl secret put "bench-secret-$i" >/dev/null
done
sec_tmpl=$(bcctl --format json sandbox-template create --name bench-warm-secrets --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --env S1=secret://root/bench-secret-1 \
	--env S2=secret://root/bench-secret-2 --env S3=secret://root/bench-secret-3 \
	--warm-min "$BENCH_WARM_SECRETS_POOL" --warm-max "$BENCH_WARM_SECRETS_POOL" | jq -r .id)
for c in $BENCH_WARM_SECRETS_CONCURRENCY; do
	log "warm claim, 3 secrets vs none x $BENCH_WARM_SECRETS_POOL, concurrency $c"
	eventually 600 warm_full "$warm_tmpl" "$BENCH_WARM_SECRETS_POOL" ||
		log "the warm pool did not fill up"
	w0=$(BC_BENCH=$SBX_BENCH run warm-claim-nosec warm --target "$BC_URL" "${tls[@]}" \
		--template "$warm_tmpl" --concurrency "$c" --count "$BENCH_WARM_SECRETS_POOL")
	eventually 600 warm_full "$sec_tmpl" "$BENCH_WARM_SECRETS_POOL" ||
		log "the secrets template's warm pool did not fill up"
	w3=$(BC_BENCH=$SBX_BENCH run warm-claim-3sec warm --target "$BC_URL" "${tls[@]}" \
		--template "$sec_tmpl" --concurrency "$c" --count "$BENCH_WARM_SECRETS_POOL")
	for m in per_s p50_us p99_us; do
		row "Warm claim, 3 secrets, conc $c" "$m" "$(field "$w3" "$m")" \
			"same, template naming none" "$(field "$w0" "$m")"
	done
	row "Warm claim, 3 secrets, conc $c" warm_answers "$(field "$w3" warm)" "vs none" \
		"$(field "$w0" warm)"
done
bcctl sandbox-template delete "$sec_tmpl" >/dev/null
for i in 1 2 3; do
	bcctl secret delete "bench-secret-$i" >/dev/null
done
bcctl sandbox-template delete "$warm_tmpl" >/dev/null
