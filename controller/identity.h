/* identity.h: workload identity (identity.c: the lifecycle hooks of a
 * sandbox and the leader's pass; identity_api.c: Node.Attest,
 * Node.RenewIdentity, Node.ReportActivity, Identity.Recognize). See
 * docs/identity.md. */
#ifndef BC_CTL_IDENTITY_H
#define BC_CTL_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define WID_LEASE_SECONDS 600        /* a capability token's lease */
#define WID_RENEW_AFTER_SECONDS 480  /* the client renews about every 8 minutes */
#define WID_TOKEN_SECONDS 86400      /* the token of a sandbox without identity */
#define WID_LABEL_MAX 128            /* bytes of a task, run or agent label */
#define WID_CAPABILITY "instance.identity"   /* what a host advertises */

/* What a create mints before its instance's boot data is sealed: with
 * identity, the single-use bootstrap value; without, the 24 h token (only
 * for a creator that is an identity). Both are wiped by wid_mint_clear. */
struct wid_mint {
	bool identity;
	char bootstrap[80];   /* "" when none */
	char token[80];       /* "" when none */
};

/* A template's switch: on, off or default; "" only when not required (not
 * given: default). INVALID_INPUT, field identity, otherwise. */
int wid_check_switch(const char *v, bool required, bc_error *err);
/* Set template_id's switch to v (checked), in the caller's transaction;
 * with renew (an update), a changed switch also bumps the template's
 * instance_version (a warm instance's boot data depends on it). 0 or a
 * db_exec error. */
int wid_template_set(struct db *d, const char *template_id, const char *v, bool renew);

/* The task labels of a create: INVALID_INPUT (field task, run or agent)
 * for a label that is not printable or longer than WID_LABEL_MAX. */
int wid_check_labels(const char *task, const char *run, const char *agent, bc_error *err);

/* Inside the create's transaction, before the claim: whether template_id
 * takes identity (its switch, else the deployment's identity_enabled), and
 * the value(s) to deliver. 0 or a database failure in err. */
int wid_prepare(struct db *d, const struct ctl_app *app, const char *template_id,
		const struct principal *creator, struct wid_mint *m, bc_error *err);

struct wid_bind_in {
	const char *sandbox_id, *instance_id, *tenant_id;
	const char *task, *run, *agent;    /* "" when not given */
	bool warm;                         /* claimed from the warm pool */
	const struct principal *creator;
};

/* Inside the create's transaction, once the sandbox row exists: its labels
 * and lifecycle (bound for a claim, created-on-demand otherwise), the
 * pending epoch (bootstrap stored as its SHA-256, expiring after
 * identity_bootstrap_seconds) or the 24 h token row, and sandbox.bound /
 * sandbox.created-on-demand for a sandbox given a task or an identity. */
int wid_bind(struct db *d, const struct ctl_app *app, const struct wid_mint *m,
	     const struct wid_bind_in *in, bc_error *err);

/* Wipe m. */
void wid_mint_clear(struct wid_mint *m);

/* Revoke before delete, inside the caller's transaction with the sandbox
 * locked: its open epochs become revoked (sandbox.identity.revoked), its
 * token is revoked. 1 when the instance must not be deleted here (a live
 * epoch was revoked, now or before: identity_revoked_at is set, and the
 * leader's wid_pass deletes it once identity_cache_seconds have passed
 * since), 0 to delete now, <0 a database failure. */
int wid_revoke_first(struct db *d, const char *sandbox_id);

/* The leader's pass (sandbox reconciler): finish the deletions whose hold
 * passed, delete task-bound sandboxes sandbox_task_max_age_seconds after
 * they were bound, revoke epochs whose lease lapsed. Logs; never fails. */
void wid_pass(struct db *d, const struct ctl_app *app);

/* The identity columns of a sandbox row (s), appended to SBX_COLS. */
#define WID_SBX_COLS                                                                       \
	", s.lifecycle, coalesce(s.task_id, ''), coalesce(s.run_id, ''), "                    \
	"coalesce(s.agent_label, ''), s.identity"
enum { WID_SBX_LIFECYCLE, WID_SBX_TASK, WID_SBX_RUN, WID_SBX_AGENT, WID_SBX_IDENTITY,
       WID_SBX_NCOLS };
/* Fill x's identity fields from row i, whose WID_SBX_COLS start at col. */
void wid_sbx_fill(rpc_call *c, const PGresult *r, int i, int col,
		  Bc__Compute__V1__Sandbox *x);

/* Attest, RenewIdentity and ReportActivity of the Node service; Recognize of Identity
 * (server.c's table; identity_api.c). */
const struct rpc_handler *wid_node_handlers(size_t *ret_n);
const struct rpc_handler *wid_handlers(size_t *ret_n);

#endif
