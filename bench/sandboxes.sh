# bench/sandboxes.sh: the sandbox rows of `make bench`, sourced by
# bench/run.sh after its stack is up (it needs run.sh's run, field, row,
# tls, img, conninfo and a controller started with metrics_listen =
# 127.0.0.1:$SBX_METRICS_PORT).
#
#   Sandboxes.Create -> ready   cold creates with the fake runtime, at
#                               BENCH_CREATE_CONCURRENCY clients: create,
#                               then Get every 2 ms until ready; p50/p99 and
#                               sandboxes made ready per second, next to a
#                               bare PostgreSQL transaction writing the same
#                               rows (instance, two authorization rows,
#                               booking, lease, sandbox, two events)
#   sandbox reconciler pass     over BENCH_SBX_LIVE (10,000) live sandboxes,
#                               each pass woken by NOTIFY bc_sandboxes and
#                               read from /metrics, next to one full scan
#                               of those sandboxes joined with their
#                               instances
#
# Knobs: BENCH_SBX_CREATES (100 per concurrency), BENCH_SBX_LIVE (10000),
# BENCH_SBX_PASSES (10).

: "${BENCH_SBX_CREATES:=100}"
: "${BENCH_SBX_LIVE:=10000}"
: "${BENCH_SBX_PASSES:=10}"
SBX_BENCH=${SBX_BENCH:-$BC_SRC/build/bench/sbx_bench}

sbx_tmpl=$(bcctl --format json sandbox-template create --name bench --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" | jq -r .id)
for c in $BENCH_CREATE_CONCURRENCY; do
	log "Sandboxes.Create -> ready x $BENCH_SBX_CREATES, concurrency $c"
	sr=$(BC_BENCH=$SBX_BENCH run sbx-ready ready --target "$BC_URL" "${tls[@]}" --template "$sbx_tmpl" \
		--concurrency "$c" --count "$BENCH_SBX_CREATES")
	sp=$(BC_BENCH=$SBX_BENCH run sbx-peer peer --conninfo "$conninfo" --concurrency "$c" \
		--count "$BENCH_SBX_CREATES")
	for m in per_s p50_us p99_us; do
		row "Sandbox create -> ready, conc $c" "$m" "$(field "$sr" "$m")" \
			"PostgreSQL txn, same rows" "$(field "$sp" "$m")"
	done
done

# 10,000 live sandboxes (their instances running, expiring in a day)
log "sandbox reconciler: $BENCH_SBX_LIVE live sandboxes"
psql -d bc -XAtq -v ON_ERROR_STOP=1 -c "
INSERT INTO instances (id, tenant_id, pool_id, flavor_id, flavor_name, image_id, vcpus, memory_mib,
	disk_gib, state, sandbox_id, ssh_from_host_only, created_by, running_at)
SELECT 'inst_bench' || g, t.tenant_id, t.pool_id, t.flavor_id, 'bench', t.image_id, 1, 512, 1,
	'running', 'sbx_bench' || g, true, t.created_by, now()
FROM sandbox_templates t, generate_series(1, $BENCH_SBX_LIVE) g WHERE t.id = '$sbx_tmpl';
INSERT INTO sandboxes (id, tenant_id, template_id, pool_id, instance_id, state, ttl_seconds,
	expires_at, created_by, owner_id, ready_at)
SELECT 'sbx_bench' || g, t.tenant_id, t.id, t.pool_id, 'inst_bench' || g, 'ready', 86400,
	now() + interval '1 day', t.created_by, t.created_by, now()
FROM sandbox_templates t, generate_series(1, $BENCH_SBX_LIVE) g WHERE t.id = '$sbx_tmpl';
ANALYZE sandboxes; ANALYZE instances;" >/dev/null || log "could not insert the live sandboxes"

sbx_metric() {
	curl -s "http://127.0.0.1:$SBX_METRICS_PORT/metrics" | sed -n "s/^$1 //p"
}
passes=()
for ((i = 0; i < BENCH_SBX_PASSES; i++)); do
	n0=$(sbx_metric better_compute_sandbox_reconcile_passes_total)
	psql -d bc -XAtq -c "NOTIFY bc_sandboxes" >/dev/null
	sbx_passed() { [ "$(sbx_metric better_compute_sandbox_reconcile_passes_total)" != "$n0" ]; }
	eventually 30 sbx_passed || { log "no reconciler pass after a wake"; break; }
	passes+=("$(sbx_metric better_compute_sandbox_reconcile_pass_seconds)")
done
pass_p50=$(printf '%s\n' "${passes[@]}" | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%d", v[int((NR + 1) / 2)] * 1e6 }')
pass_max=$(printf '%s\n' "${passes[@]}" | sort -g | tail -n 1 | awk '{ printf "%d", $1 * 1e6 }')
scan=$(BC_BENCH=$SBX_BENCH run sbx-scan sql --conninfo "host=$PGHOST port=$PGPORT dbname=bc user=postgres" \
	--count "$BENCH_SBX_PASSES" --sql "SELECT count(*) FROM sandboxes s JOIN instances i ON
	i.id = s.instance_id WHERE s.state <> 'deleted' AND i.state <> 'deleted'")
live=$(psql -d bc -XAtq -c "SELECT count(*) FROM sandboxes WHERE state <> 'deleted'")
row "sandbox reconciler pass, $live live" p50_us "$pass_p50" "one scan of them" "$(field "$scan" p50_us)"
row "sandbox reconciler pass, $live live" max_us "$pass_max" "one scan of them" "$(field "$scan" p99_us)"
