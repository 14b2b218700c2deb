/* sandbox_restore.h: Sandboxes.Create with fromSnapshot (sandbox_restore.c;
 * docs/snapshots.md, "Restore"). */
#ifndef BC_CTL_SANDBOX_RESTORE_H
#define BC_CTL_SANDBOX_RESTORE_H

#include <stdbool.h>

#include "app.h"
#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define RESTORE_URL_TTL 21600   /* a spec's download URL: 6 h (a restart renders it again) */

/* What a restore takes from its snapshot. */
struct restore_src {
	char id[32];
	char cpu_model[257];     /* the host label a memory restore must be placed on */
	bool memory;
};

/* Inside Sandboxes.Create's transaction, the template read FOR SHARE: read
 * snapshot_id FOR SHARE and check it is one the caller may restore under
 * template_id. 0 with *ret filled; NOT_FOUND (another owner's, another
 * agent's, another tenant's, a deleted one), INVALID_STATE (pending or
 * failed; details state), INVALID_INPUT (field templateId: another
 * template; field fromSnapshot reason runtime: another runtime than the
 * template's). */
int restore_check(rpc_call *c, struct db *d, const char *tenant, const char *snapshot_id,
		  const char *template_id, struct restore_src *ret, bc_error *err);

/* In the same transaction: the new instance restores from the snapshot
 * src; a memory restore on a deployment with the sandbox SSH CA and the
 * secret broker gets its identity rebind bundle (rebind.h). 0 or the error
 * to roll back with. */
int restore_bind(struct db *d, const struct ctl_app *app, const char *tenant,
		 const char *instance_id, const struct restore_src *src, bc_error *err);

/* The object key of a snapshot in the store (its prefix aside). */
char *restore_object_key(const char *tenant, const char *snapshot_id);

/* After a NodeSpec build, outside its transaction: give each instance that
 * restores and has no URL yet a presigned GET of its object (never stored,
 * never shown to tenants). A store that does not open leaves them without
 * (logged once per build; bcd then fails the restore). */
void restore_render(const struct ctl_app *app, struct db *d, Bc__Node__V1__NodeSpec *spec);

/* Sandboxes.Exec: INVALID_STATE reason restore-shares-identity while
 * another live instance of the tenant answers to the same sshd identity as
 * instance_id (a memory restore and its source or siblings); 0 otherwise. */
int restore_shares_identity(struct db *d, const char *sandbox_id, const char *instance_id,
			    bc_error *err);

#endif
