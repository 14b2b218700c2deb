/* quota.c: tenant quotas and budgets, checked inside a create's
 * transaction after the new instance's row is written. Quotas are charged
 * from the tenant's bookings (QUOTA_CHARGED: open allocations, and live
 * instances admitted but not booked, so one that waits for room cannot
 * later be placed past the quota);
 * the tenant's quota row is locked until commit, so concurrent creates of
 * one tenant are charged one after the other. Budgets compare the spend
 * metered into usage with the tenant offer's limit. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "db.h"
#include "quota.h"
#include "util.h"

/* What a tenant (q.tenant_id) is charged with: its open bookings (the
 * allocations of its instances and volumes), plus the shape of each live
 * instance admitted but not booked right now (waiting for room, or between
 * a lost host and its re-placement), which will be booked without asking
 * the quota again. A deleting instance is charged until its host confirms
 * and its booking is released. */
#define QUOTA_CHARGED                                                                       \
	"SELECT vcpus, memory_mib, disk_gib, gpus FROM allocations WHERE tenant_id = "       \
	"q.tenant_id AND released_at IS NULL UNION ALL SELECT i.vcpus, i.memory_mib, "       \
	"i.disk_gib, i.gpus FROM instances i WHERE i.tenant_id = q.tenant_id AND i.state <> " \
	"'deleted' AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.owner_kind = "        \
	"'instance' AND a.owner_id = i.id AND a.released_at IS NULL)"

/* the tenant o.tenant_id's metered spend in whole cents */
#define QUOTA_SPENT_SQL "(SELECT floor(coalesce(sum(cost_cents), 0))::bigint FROM usage WHERE " \
	"tenant_id = o.tenant_id)"

/* the config's defaults (quota_configure); 0: no limit */
static int def_instances, def_unplaced, def_sandboxes;

void quota_configure(const struct ctl_config *c)
{
	def_instances = c->default_quota_instances;
	def_unplaced = c->default_quota_unplaced_instances;
	def_sandboxes = c->default_quota_sandboxes;
}

struct charge {
	const char *name;
	int col;         /* of the limit and of the usage in the query */
	int64_t want, scale;
};

static int exceeded(bc_error *err, const struct charge *ch, int64_t limit, int64_t used)
{
	int64_t before = used - ch->want, left = limit - before;

	bc_error_set(err, BC_QUOTA_EXCEEDED, "quota exceeded: %s: asked %" PRId64 ", %" PRId64
		     " left of %" PRId64, ch->name, ch->want / ch->scale,
		     (left < 0 ? 0 : left) / ch->scale, limit / ch->scale);
	bc_error_detail(err, "resource", "%s", ch->name);
	bc_error_detail(err, "requested", "%" PRId64, ch->want / ch->scale);
	bc_error_detail(err, "remaining", "%" PRId64, (left < 0 ? 0 : left) / ch->scale);
	return bc_error_detail(err, "limit", "%" PRId64, limit / ch->scale);
}

static int quota_count(struct db *d, const char *resource, const char *count_sql,
		       const char *tenant, int limit, int extra, bc_error *err);

/* The columns of quota_check's read: the five limits, then what is used
 * of each, in the same order (the usage of limit c is column QC_USED + c). */
enum { QC_VCPUS, QC_MEMORY_MIB, QC_DISK_GIB, QC_GPUS, QC_INSTANCES, QC_USED };

static int quota_check_n(struct db *d, const char *tenant, int vcpus, int64_t memory_mib,
			 int64_t disk_gib, int gpus, int instances, bc_error *err)
{
	const struct charge ch[] = {
		/* memory is limited in GiB but told in MiB, so half a GiB is not 0 */
		{"vcpus", QC_VCPUS, vcpus, 1}, {"memoryMib", QC_MEMORY_MIB, memory_mib, 1},
		{"diskGiB", QC_DISK_GIB, disk_gib, 1}, {"gpus", QC_GPUS, gpus, 1},
		{"instances", QC_INSTANCES, instances, 1},
	};
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	/* Lock first, count in a statement of its own: under READ COMMITTED a
	 * statement that waited for the lock would still count from the
	 * snapshot it started with, missing the create that held the lock. */
	rc = db_exec(d, &r, "SELECT 1 FROM quotas WHERE tenant_id = $1 FOR UPDATE", &p);
	if (rc < 0)
		return db_fail(err, rc);
	rc = PQntuples(r);
	PQclear(r);
	r = NULL;
	if (rc == 0 && instances == 0)
		return 0; /* no quota row: no limit but the instance count's */
	if (rc == 0)
		return quota_count(d, "instances", "SELECT count(*) FROM instances WHERE tenant_id = $1 "
				   "AND state <> 'deleted'", tenant, def_instances, 0, err);
	rc = db_exec(d, &r, "SELECT q.vcpus, q.memory_gib * 1024, q.disk_gib, q.gpus, q.instances, "
		     "u.vcpus, u.mem, u.disk, u.gpus, (SELECT count(*) FROM instances WHERE "
		     "tenant_id = q.tenant_id AND state <> 'deleted') FROM quotas q, LATERAL (SELECT "
		     "coalesce(sum(vcpus), 0) vcpus, coalesce(sum(memory_mib), 0) mem, "
		     "coalesce(sum(disk_gib), 0) disk, coalesce(sum(gpus), 0) gpus FROM (" QUOTA_CHARGED
		     ") b) u WHERE q.tenant_id = $1", &p);
	if (rc < 0)
		return db_fail(err, rc);
	for (size_t i = 0; PQntuples(r) == 1 && i < ARRAY_SIZE(ch); i++) {
		int64_t limit, used;
		bool unset = !db_val(r, 0, ch[i].col);
		/* the instance count's default stands in for an unset limit */
		if (unset && (ch[i].col != QC_INSTANCES || def_instances <= 0))
			continue;
		limit = unset ? def_instances : db_i64(r, 0, ch[i].col);
		used = db_i64(r, 0, QC_USED + ch[i].col);
		if (ch[i].want > 0 && used > limit) {
			PQclear(r);
			return exceeded(err, &ch[i], limit, used);
		}
	}
	PQclear(r);
	return 0;
}

int quota_check(struct db *d, const char *tenant, int vcpus, int64_t memory_mib,
		int64_t disk_gib, int gpus, bc_error *err)
{
	return quota_check_n(d, tenant, vcpus, memory_mib, disk_gib, gpus, 1, err);
}

int quota_check_disk(struct db *d, const char *tenant, int64_t disk_gib, bc_error *err)
{
	return quota_check_n(d, tenant, 0, 0, disk_gib, 0, 0, err);
}

/* QUOTA_EXCEEDED for resource when count_sql ($1 tenant) counts more than
 * limit, plus extra (what is about to be added); a limit of 0 is none. */
static int quota_count(struct db *d, const char *resource, const char *count_sql,
		       const char *tenant, int limit, int extra, bc_error *err)
{
	const struct charge ch = {resource, 0, 1, 1};
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	int rc;

	if (limit <= 0)
		return 0;
	dbp_str(&p, tenant);
	if ((rc = db_scalar(d, count_sql, &p, &v)) < 0)
		return db_fail(err, rc);
	if (strtoll(v, NULL, 10) + extra <= limit)
		return 0;
	return exceeded(err, &ch, limit, strtoll(v, NULL, 10) + extra);
}

int quota_unplaced(struct db *d, const char *tenant, bc_error *err)
{
	return quota_count(d, "unplacedInstances", "SELECT count(*) FROM instances WHERE tenant_id "
			   "= $1 AND node_id IS NULL AND state <> 'deleted'", tenant, def_unplaced, 0,
			   err);
}

int quota_sandboxes(struct db *d, const char *tenant, bc_error *err)
{
	return quota_count(d, "sandboxes", "SELECT count(*) FROM sandboxes WHERE tenant_id = $1 "
			   "AND state <> 'deleted'", tenant, def_sandboxes, 1, err);
}

const char *const QUOTA_BUDGET_SQL =
	"SELECT o.spend_limit_cents, " QUOTA_SPENT_SQL ", o.on_budget_exceeded FROM offers o "
	"WHERE o.tenant_id = $1 AND o.spend_limit_cents IS NOT NULL AND (o.on_budget_exceeded "
	"<> 'none' OR EXISTS (SELECT 1 FROM pools WHERE id = $2 AND budget_check = 'meter'))";
/* QUOTA_BUDGET_SQL's columns, in its order */
enum { BUDGET_LIMIT, BUDGET_SPENT, BUDGET_ON_EXCEEDED };

int quota_budget_judge(const PGresult *r, bc_error *err)
{
	if (PQntuples(r) == 1 && db_i64(r, 0, BUDGET_SPENT) >= db_i64(r, 0, BUDGET_LIMIT)) {
		bc_error_set(err, BC_SPEND_LIMIT_REACHED, "the tenant's budget is spent: %s of %s "
			     "cents", db_val(r, 0, BUDGET_SPENT), db_val(r, 0, BUDGET_LIMIT));
		bc_error_detail(err, "spentCents", "%s", db_val(r, 0, BUDGET_SPENT));
		bc_error_detail(err, "limitCents", "%s", db_val(r, 0, BUDGET_LIMIT));
		return bc_error_detail(err, "reason", "budget-spent");
	}
	return 0;
}

int quota_budget(struct db *d, const char *tenant, const char *pool, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	dbp_str(&p, pool);
	rc = db_exec(d, &r, QUOTA_BUDGET_SQL, &p);
	if (rc < 0)
		return db_fail(err, rc);
	rc = quota_budget_judge(r, err);
	PQclear(r);
	return rc;
}

int quota_billing_check(struct db *d, const char *tenant, enum quota_budget_state *ret)
{
	enum { BILL_ON_EXCEEDED };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	rc = db_exec(d, &r, "SELECT o.on_budget_exceeded FROM offers o WHERE o.tenant_id = $1 AND "
		     "o.spend_limit_cents IS NOT NULL AND " QUOTA_SPENT_SQL " >= o.spend_limit_cents",
		     &p);
	if (rc < 0)
		return rc;
	*ret = PQntuples(r) == 0 ? QUOTA_BUDGET_OK :
	       strcmp(db_val(r, 0, BILL_ON_EXCEEDED), "drain") == 0 ? QUOTA_BUDGET_DRAIN :
	       strcmp(db_val(r, 0, BILL_ON_EXCEEDED), "stop-new") == 0 ? QUOTA_BUDGET_STOP_NEW :
									 QUOTA_BUDGET_SPENT;
	PQclear(r);
	return 0;
}
