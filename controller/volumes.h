/* volumes.h: the SandboxVolumes API and volume deletions (volumes.c). */
#ifndef BC_CTL_VOLUMES_H
#define BC_CTL_VOLUMES_H

#include <stddef.h>

#include "db.h"
#include "bc/compute/v1/volumes.pb-c.h"
#include "rpc.h"

#define VOL_SIZE_MAX_GIB 16384
/* a resize's pending size older than this is taken over */
#define VOL_HOLD_TAKEOVER_SECONDS 60
/* the reconciler's fallback pass over deleting volumes */
#define VOL_FINISH_PASS_MS 30000

/* A host's volume-store headroom in bytes (bcd's rule): available less
 * reserved less outstanding, less what is booked for volumes on it beyond
 * the committed bytes it reported. NULL for a host that never reported its
 * store; negative when more is booked than the store can hold. Over nodes
 * n. */
#define VOL_HEADROOM_SQL                                                                   \
	"(SELECT h.available_bytes - h.reserved_bytes - h.outstanding_bytes - greatest(0, "   \
	"coalesce((SELECT sum(a.disk_gib) FROM allocations a WHERE a.node_id = n.id AND "     \
	"a.owner_kind = 'volume' AND a.released_at IS NULL), 0) * 1073741824 - "             \
	"h.committed_bytes) FROM host_volume_storage h WHERE h.node_id = n.id)"

/* The handlers of bc.compute.v1.SandboxVolumes (server.c's table). */
const struct rpc_handler *vol_handlers(size_t *ret_n);

/* Decide action on v (read by vol_lookup) as the API decides on a volume:
 * compute-sandbox-volume/<id> under its pool, with its attributes. */
int vol_decide_on(rpc_call *c, const char *action, const Bc__Compute__V1__SandboxVolume *v,
		  bc_error *err);
/* A volume of tenant that is not deleted, by id, or by name when id is "":
 * into the call's arena; NOT_FOUND otherwise. */
int vol_lookup(rpc_call *c, const char *tenant, const char *id, const char *name,
	       Bc__Compute__V1__SandboxVolume **ret, bc_error *err);

/* vol_ + 26 characters derived from tenant, caller and idempotency key. */
void vol_derive_id(const char *tenant, const char *caller, const char *key, char out[32]);
/* bcv- and the id's last 16 characters. */
void vol_serial(const char *id, char out[24]);

/* In the caller's transaction: the deleting volumes of node_id (NULL: of
 * every host) whose host applied the generation that no longer lists them
 * (or is lost or retired) become deleted, their booking released, with
 * sandbox.volume.deleted. How many, or -errno. */
int vol_finish_deletions(struct db *d, const char *node_id);
/* Tenant teardown, once the tenant has no instance left: its ready volumes
 * become deleting (sandbox.volume.deleting, their hosts' specs bumped), and
 * *ret_left is how many are not deleted yet (the teardown is done at 0).
 * 0 or -errno, in the caller's transaction. */
int vol_tenant_teardown(struct db *d, const char *tenant, int *ret_left);
/* The reconciler's periodic pass over vol_finish_deletions (leader). */
void vol_reconcile_tick(struct db *d);

#endif
