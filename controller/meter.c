/* meter.c: metered usage. The leader's metering pass (every
 * metering_interval_seconds, and `bc-controller meter`) turns every booking
 * (an allocation, whoever owns it: an instance or a volume) into usage
 * lines per hourly window: vps.vcpu.hours, vps.memory.gib.hours and
 * vps.gpu.hours for an instance, vps.volume.gib.hours for a volume, each
 * attributed to the booking's tenant and its resource's owner, and priced
 * at the tenant offer's price for the meter. A warm instance's booking is
 * vps.sandbox.warm (its vCPUs per hour, the tenant's, no identity) until
 * its claimed_at, and the ordinary lines for the sandbox's owner (the
 * owner of its authorization row, moved by the claim) from then on. A booking counts from its own
 * start to its release, so an instance re-placed after a lost host is
 * never counted twice.
 *
 * Idempotent by construction: a pass recomputes each open window's line
 * from the bookings and overwrites it (one row per resource, meter and
 * window), it never adds to it. Passes take the metering row's lock, so
 * two replicas, or a pass beside `bc-controller meter`, run one after the
 * other and write the same numbers. Windows that ended more than
 * METER_GRACE before a pass are closed: later passes leave them (and their
 * prices) alone.
 *
 * Usage.List (bc.compute.v1) reads the lines, decided as
 * compute:usage:read on compute-usage/<tenant>. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/usage.pb-c.h"
#include "db.h"
#include "log.h"
#include "meter.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

/* a booking written by a transaction that began up to this long before it
 * committed still lands in an open window */
#define METER_GRACE "interval '5 minutes'"
#define USAGE_PAGE_MAX 1000

/* One statement: lock the watermark, recompute the open windows' lines,
 * move the watermark. Returns the number of lines written (changed). */
static const char meter_sql[] =
	"WITH m AS (SELECT coalesce(closed_before, date_trunc('hour', (SELECT min(created_at) "
	"FROM allocations)), date_trunc('hour', now())) AS since FROM metering WHERE id FOR "
	"UPDATE), "
	"w AS (SELECT generate_series(m.since, date_trunc('hour', now()), interval '1 hour') AS ws "
	"FROM m), "
	/* a booking's spans: a warm instance's (warm_template_id, or claimed_at)
	 * is warm until claimed_at and ordinary from then on (from the
	 * booking's own start when it began later); any other is ordinary */
	"span AS (SELECT a.*, p.warm, p.s, p.e FROM allocations a LEFT JOIN instances wi ON "
	"a.owner_kind = 'instance' AND wi.id = a.owner_id AND (wi.warm_template_id IS NOT NULL "
	"OR wi.claimed_at IS NOT NULL) CROSS JOIN LATERAL (VALUES (false, CASE WHEN wi.id IS "
	"NULL THEN a.created_at ELSE greatest(a.created_at, coalesce(wi.claimed_at, "
	"'infinity')) END, coalesce(a.released_at, now())), (true, a.created_at, "
	"least(coalesce(a.released_at, now()), coalesce(wi.claimed_at, 'infinity')))) p(warm, s, "
	"e) WHERE (NOT p.warm OR wi.id IS NOT NULL) AND p.s < p.e), "
	"seg AS (SELECT a.tenant_id, a.owner_kind, a.owner_id, a.vcpus, a.memory_mib, a.disk_gib, "
	"a.gpus, a.warm, w.ws, extract(epoch FROM least(a.e, w.ws + interval '1 hour') - "
	"greatest(a.s, w.ws))::float8 / 3600 AS h FROM span a JOIN w ON a.s < w.ws + interval "
	"'1 hour' AND a.e > w.ws), "
	"lines AS (SELECT s.tenant_id, s.owner_kind, s.owner_id, s.ws, x.meter, sum(s.h * x.per) "
	"AS qty FROM seg s CROSS JOIN LATERAL (VALUES ('vps.vcpu.hours', CASE WHEN s.owner_kind = "
	"'instance' AND NOT s.warm THEN s.vcpus::float8 END), ('vps.memory.gib.hours', CASE WHEN "
	"s.owner_kind = 'instance' AND NOT s.warm THEN s.memory_mib::float8 / 1024 END), "
	"('vps.gpu.hours', CASE WHEN s.owner_kind = 'instance' AND NOT s.warm AND s.gpus > 0 THEN "
	"s.gpus::float8 END), ('vps.sandbox.warm', CASE WHEN s.warm THEN s.vcpus::float8 END), "
	"('vps.volume.gib.hours', CASE WHEN s.owner_kind = 'volume' THEN s.disk_gib::float8 END)) "
	"x(meter, per) WHERE x.per IS NOT NULL AND s.h > 0 GROUP BY 1, 2, 3, 4, 5), "
	"up AS (INSERT INTO usage (tenant_id, identity_id, resource_id, meter, window_start, "
	"quantity, cost_cents) SELECT l.tenant_id, CASE WHEN l.meter <> 'vps.sandbox.warm' THEN "
	"coalesce(ar.owner_id, i.created_by) END, "
	"l.owner_id, l.meter, l.ws, l.qty, l.qty::numeric * coalesce((o.prices ->> "
	"l.meter)::numeric, 0) FROM lines l LEFT JOIN offers o ON o.tenant_id = l.tenant_id "
	"LEFT JOIN instances i ON l.owner_kind = 'instance' AND i.id = l.owner_id LEFT JOIN "
	"LATERAL (SELECT owner_id FROM authz_resources WHERE type IN ('compute-instance', "
	"'compute-sandbox-volume') AND id = l.owner_id AND owner_id <> '' ORDER BY type LIMIT 1) "
	"ar ON true ON CONFLICT (resource_id, meter, window_start) WHERE "
	"resource_id IS NOT NULL DO UPDATE SET quantity = EXCLUDED.quantity, cost_cents = "
	"EXCLUDED.cost_cents, updated_at = now() WHERE usage.quantity IS DISTINCT FROM "
	"EXCLUDED.quantity OR usage.cost_cents IS DISTINCT FROM EXCLUDED.cost_cents RETURNING 1), "
	"done AS (UPDATE metering SET closed_before = greatest(m.since, date_trunc('hour', now() - "
	METER_GRACE ")), last_pass_at = now() FROM m WHERE metering.id RETURNING 1) "
	"SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM done)";
/* meter_sql's columns, in its order */
enum { PASS_LINES, PASS_DONE };

struct pass {
	int64_t lines;
};

static int pass_tx(struct db *d, void *arg, bc_error *err)
{
	struct pass *a = arg;
	PGresult *r = NULL;
	/* the planner cannot know how few windows a pass covers; its estimate
	 * would JIT-compile a statement that runs in milliseconds */
	int rc = db_exec(d, NULL, "SET LOCAL jit = off", NULL);

	if (rc == 0)
		rc = db_exec(d, &r, meter_sql, NULL);
	if (rc < 0)
		return db_fail(err, rc);
	a->lines = db_i64(r, 0, PASS_LINES);
	PQclear(r);
	return 0;
}

int meter_pass(struct db *d, int64_t *ret_lines, bc_error *err)
{
	struct pass a = {0};
	int rc = db_tx(d, "READ COMMITTED", pass_tx, &a, err);

	if (rc == 0 && ret_lines)
		*ret_lines = a.lines;
	return rc;
}

void meter_tick(struct db *d, int interval_seconds)
{
	static int64_t next_ms;
	int64_t lines = 0;
	bc_error err;

	if (mono_ms() < next_ms)
		return;
	next_ms = mono_ms() + (int64_t)interval_seconds * 1000;
	bc_error_clear(&err);
	if (meter_pass(d, &lines, &err) < 0)
		log_warn("meter: pass failed: %s", err.message);
	else if (lines > 0)
		log_debug("meter: %" PRId64 " usage lines written", lines);
}

/* ------------------------------------------------------------ Usage.List */

#define USAGE_FILTER                                                                      \
	" FROM usage u WHERE u.tenant_id = $1 AND ($2::bigint = 0 OR u.window_start >= "       \
	"to_timestamp($2::bigint / 1000.0)) AND ($3::bigint = 0 OR u.window_start < "           \
	"to_timestamp($3::bigint / 1000.0)) AND ($4 = '' OR u.meter = $4) AND ($5 = '' OR "     \
	"u.identity_id = $5)"

/* The columns of usage_list's SELECT, in its order. */
enum {
	USE_ID, USE_TENANT_ID, USE_IDENTITY_ID, USE_RESOURCE, USE_METER, USE_WINDOW_START,
	USE_QUANTITY, USE_COST_CENTS, USE_UPDATED_AT
};

static Bc__Compute__V1__UsageLine *line_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__UsageLine *x = rpc_new(c, &bc__compute__v1__usage_line__descriptor);

	x->id = (uint64_t)db_i64(r, i, USE_ID);
	x->tenant_id = row_str(c, r, i, USE_TENANT_ID);
	x->identity_id = row_str(c, r, i, USE_IDENTITY_ID);
	x->resource = row_str(c, r, i, USE_RESOURCE);
	x->meter = row_str(c, r, i, USE_METER);
	x->window_start = db_i64(r, i, USE_WINDOW_START);
	x->quantity = strtod(db_val(r, i, USE_QUANTITY), NULL);
	x->cost_cents = strtod(db_val(r, i, USE_COST_CENTS), NULL);
	x->updated_at = db_i64(r, i, USE_UPDATED_AT);
	return x;
}

static int check_list(const Bc__Compute__V1__ListUsageRequest *q, bc_error *err)
{
	int r;

	if (q->limit < 0 || q->limit > USAGE_PAGE_MAX)
		return invalid(err, "limit", "limit must be between 1 and %d", USAGE_PAGE_MAX);
	if (q->from < 0)
		return invalid(err, "from", "from must be epoch milliseconds");
	if (q->to < 0 || (q->to && q->to <= q->from))
		return invalid(err, "to", "to must be epoch milliseconds after from");
	if (!str_is_printable(q->meter, 64))
		return invalid(err, "meter", "meter must be at most 64 printable characters");
	if (*q->identity_id && (r = check_id(err, "identityId", "idn", q->identity_id)) < 0)
		return r;
	return 0;
}

static void filter_params(struct dbp *p, const char *tenant,
			  const Bc__Compute__V1__ListUsageRequest *q)
{
	dbp_str(p, tenant);
	dbp_i64(p, q->from);
	dbp_i64(p, q->to);
	dbp_str(p, q->meter);
	dbp_str(p, q->identity_id);
}

/* The totals of every line the filters match, across pages. */
static int list_totals(rpc_call *c, const char *tenant, const Bc__Compute__V1__ListUsageRequest *q,
		       Bc__Compute__V1__ListUsageResponse *resp, bc_error *err)
{
	enum { TOT_QUANTITY, TOT_COST_CENTS };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	filter_params(&p, tenant, q);
	rc = db_exec(ctl_db(c), &r, "SELECT coalesce(sum(u.quantity), 0), coalesce(sum("
		     "u.cost_cents), 0)" USAGE_FILTER, &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp->total_quantity = strtod(db_val(r, 0, TOT_QUANTITY), NULL);
	resp->total_cost_cents = strtod(db_val(r, 0, TOT_COST_CENTS), NULL);
	PQclear(r);
	return 0;
}

static int usage_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__ListUsageRequest *q = (const void *)m;
	struct authz_target t = {.type = "compute-usage"};
	Bc__Compute__V1__ListUsageResponse *resp;
	int limit = q->limit ? q->limit : 100, rc;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 || (rc = check_list(q, err)) < 0)
		return rc;
	t.id = t.tenant_id = tenant;
	if ((rc = authz_decide(c, ctl_db(c), "compute:usage:read", &t, err)) < 0)
		return rc;
	filter_params(&p, tenant, q);
	dbp_u64(&p, q->cursor);
	dbp_i64(&p, limit);
	rc = db_exec(ctl_db(c), &r, "SELECT u.id, u.tenant_id, coalesce(u.identity_id, ''), CASE "
		     "WHEN u.resource_id IS NULL THEN '' WHEN u.resource_id LIKE 'inst\\_%' THEN "
		     "'instance/' || u.resource_id ELSE 'volume/' || u.resource_id END, u.meter, "
		     "coalesce(" MS("u.window_start") ", 0), u.quantity::text, u.cost_cents::text, "
		     MS("u.updated_at") USAGE_FILTER " AND u.id > $6 ORDER BY u.id LIMIT $7", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_usage_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[resp->n_items++] = line_row(c, r, i);
	if ((int)resp->n_items == limit)
		resp->cursor = resp->items[limit - 1]->id;
	PQclear(r);
	if ((rc = list_totals(c, tenant, q, resp, err)) < 0)
		return rc;
	*ret = &resp->base;
	return 0;
}

const struct rpc_handler *usage_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"List", RPC_UNARY, {.unary = usage_list}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
