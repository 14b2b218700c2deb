/* snapshots.h: sandbox snapshots (snapshots.c: Sandboxes.Snapshot and the
 * SandboxSnapshots service; snapshots_pass.c: settling, lifetime and purge
 * in the sandbox reconciler). docs/snapshots.md. */
#ifndef BC_CTL_SNAPSHOTS_H
#define BC_CTL_SNAPSHOTS_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define SNAP_TYPE "compute-sandbox-snapshot"   /* its IAM resource type */
#define SNAP_CMD_KIND "instance.snapshot"       /* the host command */

/* The data of every sandbox.snapshot.* event, over a sandbox_snapshots row
 * (SELECT ... FROM n): snapshotId, sandboxId, includeMemory, keep. */
#define SNAP_EVD_SQL                                                                     \
	"jsonb_build_object('snapshotId', id, 'sandboxId', sandbox_id, 'includeMemory', " \
	"include_memory, 'keep', keep)"

/* Sandboxes.Snapshot (sandboxes.c's handler table). */
int snap_take(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret, bc_error *err);

/* The handlers of the SandboxSnapshots service (server.c's table). */
const struct rpc_handler *snap_handlers(size_t *ret_n);

/* A sandbox's snapshots, deleted ones included, oldest first, allocated
 * from the call (Sandboxes.Get's field 20). 0 or a db_exec failure. */
int snap_list_of_sandbox(rpc_call *c, const char *sandbox_id, size_t *ret_n,
			 Bc__Compute__V1__SandboxSnapshot ***ret);

/* Whether runtime is in list (snapshot_runtimes: comma-separated). */
bool snap_runtime_capable(const char *list, const char *runtime);

/* The id a snapshot taken with idempotency key by caller in tenant gets. */
void snap_derive_id(const char *tenant, const char *caller, const char *key, char out[32]);

/* In the caller's transaction: mark deleted the live snapshots matching
 * the condition `where` over sandbox_snapshots p (parameters p), each
 * publishing sandbox.snapshot.deleted; their objects are purged later.
 * `where` must be a string literal: the statement is one literal per call
 * site (db_exec keys its prepared statements by the text's address). */
#define SNAP_DELETE_SQL(where)                                                             \
	"WITH n AS (UPDATE sandbox_snapshots p SET deleted_at = now() WHERE "                \
	"p.deleted_at IS NULL AND (" where ") RETURNING *) INSERT INTO events (type, "       \
	"subject, tenant_id, data) SELECT 'sandbox.snapshot.deleted', 'sandbox/' || "        \
	"sandbox_id, tenant_id, " SNAP_EVD_SQL " FROM n"
#define snap_delete_where(d, where, p) db_exec((d), NULL, SNAP_DELETE_SQL(where), (p))

/* The sandbox reconciler's snapshot work (snapshots_pass.c): settle pending
 * snapshots whose command settled (or is gone), delete the unkept
 * snapshots of deleted sandboxes, and purge deleted ones whose upload
 * settled and that no live instance restores from (the store's DELETE,
 * outside any transaction). Logs once per failure. */
void snap_pass(const struct ctl_app *app, struct db *d);

#endif
