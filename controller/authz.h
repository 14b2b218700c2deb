/* authz.h: decisions (see authz.c). */
#ifndef BC_CTL_AUTHZ_H
#define BC_CTL_AUTHZ_H

#include "ctl.h"
#include "policy.h"

#define AUTHZ_MAX_ATTRS 32

/* A resource as a decision sees it: "<type>/<id>", its parent (a pool, or
 * "" for one directly under the tenant), tenant and attributes. */
struct authz_target {
	const char *type, *id, *tenant_id, *parent;
	const char *agent_id;    /* the agent that created it, NULL if none */
	struct policy_attr attrs[AUTHZ_MAX_ATTRS];
	size_t n_attrs;
	char names[AUTHZ_MAX_ATTRS][64], values[AUTHZ_MAX_ATTRS][256];
};

/* Decide action on t for the call's principal, with d (inside or outside a
 * transaction). 0 when allowed; NOT_FOUND for another tenant's resource or,
 * for an agent, one it did not create; ACCESS_DENIED (details action,
 * resource, reason explicit-deny with sid, or no-allow) otherwise. The
 * operator, and an administrator inside its own tenant, are allowed
 * everything. */
int authz_decide(rpc_call *c, struct db *d, const char *action, const struct authz_target *t,
		 bc_error *err);

/* Stage t as a draft row of the authorization projection (owner and agent
 * from the call's principal), in the caller's transaction. */
int authz_stage(rpc_call *c, struct db *d, const struct authz_target *t, bc_error *err);
/* Decide on the row staged for (type, id): its attributes with any pending
 * value merged over them. NOT_FOUND when there is no row. */
int authz_decide_staged(rpc_call *c, struct db *d, const char *action, const char *type,
			const char *id, bc_error *err);
/* The staged row becomes a real one (draft false), in the same transaction. */
int authz_commit(struct db *d, const char *type, const char *id, bc_error *err);

/* quota.c: check the tenant's quota for one more instance of this shape, inside the
 * create's transaction (the quota row is locked until commit). 0, or
 * QUOTA_EXCEEDED with details resource, requested, remaining, limit. */
int quota_check(struct db *d, const char *tenant, int vcpus, int64_t memory_mib,
		int64_t disk_gib, int gpus, bc_error *err);
/* SPEND_LIMIT_REACHED when new work in pool must stop for a spent budget:
 * the pool checks budgets (budget_check meter) or the tenant's offer says
 * stop-new or drain, and metered spend reached the offer's limit. */
int quota_budget(struct db *d, const char *tenant, const char *pool, bc_error *err);

/* Add an attribute to t (copied; past AUTHZ_MAX_ATTRS dropped). */
void authz_attr(struct authz_target *t, const char *name, const char *value);

#endif
