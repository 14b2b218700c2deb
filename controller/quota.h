/* quota.h: tenant quotas and budgets (quota.c), charged inside a create's
 * transaction. */
#ifndef BC_CTL_QUOTA_H
#define BC_CTL_QUOTA_H

#include <stdint.h>

#include "config.h"
#include "db.h"
#include "err.h"

/* The default per-tenant limits from the config (default_quota_*): set
 * once at start, before any thread. */
void quota_configure(const struct ctl_config *c);

/* Check the tenant's quota for one more instance of this shape, inside the
 * create's transaction (the quota row is locked until commit). 0, or
 * QUOTA_EXCEEDED with details resource, requested, remaining, limit. */
int quota_check(struct db *d, const char *tenant, int vcpus, int64_t memory_mib,
		int64_t disk_gib, int gpus, bc_error *err);
/* The same for a volume's booking of disk_gib (already inserted): only
 * diskGiB is charged, the instance count is not. */
int quota_check_disk(struct db *d, const char *tenant, int64_t disk_gib, bc_error *err);
/* The defaults for a tenant whose quota does not set a limit (config keys
 * default_quota_*, 0: none). The instance count's default applies when
 * the tenant has no quota row or its row leaves instances unset; the
 * unplaced instances' and open sandboxes' limits have no per-tenant
 * column and always apply. Counted without a lock, so concurrent creates
 * of one tenant may pass a limit by at most their number. */
/* quota_unplaced: after placement left the new instance unplaced (it
 * waits for room), QUOTA_EXCEEDED (resource unplacedInstances) when the
 * tenant's waiting instances, with it, pass the limit. */
int quota_unplaced(struct db *d, const char *tenant, bc_error *err);
/* quota_sandboxes: before a sandbox is created, QUOTA_EXCEEDED (resource
 * sandboxes) when the tenant's open sandboxes (any state but deleted)
 * are at the limit. */
int quota_sandboxes(struct db *d, const char *tenant, bc_error *err);

/* SPEND_LIMIT_REACHED when new work in pool must stop for a spent budget:
 * the pool checks budgets (budget_check meter) or the tenant's offer says
 * stop-new or drain, and metered spend reached the offer's limit. */
int quota_budget(struct db *d, const char *tenant, const char *pool, bc_error *err);
/* The same as a statement to send with others: QUOTA_BUDGET_SQL with
 * ($1 tenant, $2 pool), its answer judged by quota_budget_judge. */
extern const char *const QUOTA_BUDGET_SQL;
int quota_budget_judge(const PGresult *r, bc_error *err);

/* The tenant's budget as periodic work sees it (the spec's billingCheck,
 * asked with no caller): OK (no limit, or not spent), SPENT (spent, offer
 * none: only pools with budget_check meter refuse new work), STOP_NEW
 * (spent: no new work anywhere), DRAIN (spent: no new work anywhere, and
 * warm pools drain to 0; running instances and sandboxes run on). The warm
 * pool reconciler asks it before a refill or a drain. 0, or -errno. */
enum quota_budget_state {
	QUOTA_BUDGET_OK, QUOTA_BUDGET_SPENT, QUOTA_BUDGET_STOP_NEW, QUOTA_BUDGET_DRAIN
};
int quota_billing_check(struct db *d, const char *tenant, enum quota_budget_state *ret);

#endif
