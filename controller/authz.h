/* authz.h: decisions (see authz.c). */
#ifndef BC_CTL_AUTHZ_H
#define BC_CTL_AUTHZ_H

#include "app.h"
#include "db.h"
#include "err.h"
#include "rpc.h"
#include "policy.h"

#define AUTHZ_MAX_ATTRS 32
/* the principal attribute telling a spent budget (authz.c) */
#define AUTHZ_BUDGET_ATTR "budgetSpent"

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
/* The same for principal p (periodic work creating for someone). */
int authz_stage_as(const struct principal *p, struct db *d, const struct authz_target *t,
		   bc_error *err);

/* The staging INSERT as a statement to send with others (db_pipe):
 * AUTHZ_STAGE_SQL with q->p; authz_stage_q_free after. */
struct authz_stage_q {
	struct dbp p;
	char *json;
};
extern const char *const AUTHZ_STAGE_SQL;
void authz_stage_q(struct authz_stage_q *q, const struct principal *p,
		   const struct authz_target *t);
void authz_stage_q_free(struct authz_stage_q *q);
/* Decide on the row staged for (type, id): its attributes with any pending
 * value merged over them. NOT_FOUND when there is no row. */
int authz_decide_staged(rpc_call *c, struct db *d, const char *action, const char *type,
			const char *id, bc_error *err);
/* The staged row becomes a real one (draft false), in the same transaction. */
int authz_commit(struct db *d, const char *type, const char *id, bc_error *err);

/* Pending values (issue 5; implemented in authz.c). A change that needs a
 * decision (sandbox extend, resize) stages ONE pending attribute set on the
 * resource's projection row, which authz_decide_staged merges over the row's
 * attributes. The hold is a server-minted nonce naming who staged it.
 *
 * authz_pending_stage: in the caller's transaction, set pending = attrs
 * (a JSON object text, e.g. {"ttlSeconds":"7200"}) with hold, when the row
 * has no pending value, or its pending value is older than takeover_seconds
 * (measured by the database clock). Otherwise CONFLICT with details
 * reason (e.g. "extend-in-flight", passed in) and retryAfterSeconds.
 * NOT_FOUND when there is no row. */
int authz_pending_stage(struct db *d, const char *type, const char *id, const char *attrs_json,
			const char *hold, int takeover_seconds, const char *conflict_reason,
			bc_error *err);
/* Clear the pending value only if it is still held by hold (0 either way;
 * an error only for a database failure). Runs in its own transaction when
 * d is not inside one. */
int authz_pending_clear(struct db *d, const char *type, const char *id, const char *hold,
			bc_error *err);
/* True (1) if the pending value of (type, id) is still held by hold, 0 if
 * not, negative on error. Use it before applying a decided change. */
int authz_pending_owned(struct db *d, const char *type, const char *id, const char *hold,
			bc_error *err);

/* Add an attribute to t under its canonical name (policy_attr_canonical;
 * copied; past AUTHZ_MAX_ATTRS dropped). */
void authz_attr(struct authz_target *t, const char *name, const char *value);

#endif
