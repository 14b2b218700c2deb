/* volume_attach.h: the volumes a sandbox template names and the sandboxes
 * that attach them (volume_attach.c; docs/volumes.md, "Attach"). */
#ifndef BC_CTL_VOLUME_ATTACH_H
#define BC_CTL_VOLUME_ATTACH_H

#include <stdbool.h>
#include <stddef.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bootdata.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define VA_MAX BOOTDATA_VOLUMES_MAX
#define CAP_INSTANCE_VOLUMES "bc.dev/cap.instance.volumes"

/* A template's volumes as decided: what the request named (id or name),
 * the id it resolved to, the mount path and the mode. */
struct va_item {
	char asked_id[40], asked_name[72];
	char id[40];
	char mount[BOOTDATA_MOUNT_PATH_MAX + 1];
	bool read_only;
};
struct va_set {
	size_t n;
	struct va_item v[VA_MAX];
};

/* The template's volumes as one text column of a query over template t
 * (alias): "id\tname\tmount\tro" lines in order; va_fill reads it. */
#define VA_TEMPLATE_SQL(t)                                                                 \
	"coalesce((SELECT string_agg(tv.volume_id || E'\\t' || v.name || E'\\t' || "          \
	"tv.mount_path || E'\\t' || tv.read_only::text, E'\\n' ORDER BY tv.position) FROM "    \
	"template_volumes tv JOIN volumes v ON v.id = tv.volume_id WHERE tv.template_id = " t \
	".id), '')"

/* The request's volumes, before anything is read: at most VA_MAX, each by
 * volumeId or name (not both), every mount path absolute without . or ..,
 * no system path or one inside /proc /sys /dev /boot, none shared or
 * nested. INVALID_INPUT with field and reason otherwise. */
int va_check(Bc__Compute__V1__TemplateVolume *const *v, size_t n, bc_error *err);

/* Resolve each volume of tenant (the tenant's own, in pool, ready) and
 * decide on it with the caller's own credential (ACCESS_DENIED reason
 * credential-required without one): compute:sandboxes:manage for a
 * read-write mount, compute:sandboxes:read for a read-only one. Outside
 * any transaction; *ret is what was decided. */
int va_decide(rpc_call *c, const char *tenant, const char *pool,
	      Bc__Compute__V1__TemplateVolume *const *v, size_t n, struct va_set *ret,
	      bc_error *err);

/* In the template's write transaction: every volume of s still resolves
 * to the id decided (CONFLICT reason volumes-changed otherwise) and is
 * ready; the template's rows become s. */
int va_write_tx(struct db *d, const char *tenant, const char *template_id,
		const struct va_set *s, bc_error *err);

/* In the template's write transaction: its current volumes are still
 * those decided (s; same ids, none made writable), else CONFLICT reason
 * volumes-changed. */
int va_same_tx(struct db *d, const char *template_id, const struct va_set *s, bc_error *err);

/* t->volumes from VA_TEMPLATE_SQL's text (split in place, in the arena). */
void va_fill(rpc_call *c, Bc__Compute__V1__SandboxTemplate *t, char *text);

/* The volumes a new instance of a template attaches, as read (and locked)
 * by va_prepare_tx. */
struct va_attach {
	size_t n;
	char node[64];                    /* their host */
	char ids[VA_MAX][40];
	char serials[VA_MAX][24];
	char mounts[VA_MAX][BOOTDATA_MOUNT_PATH_MAX + 1];
	struct bootdata_volume boot[VA_MAX];  /* for the cloud-config */
};

/* In a sandbox create's transaction, before its instance exists: lock the
 * template's volumes and check that this instance may attach them: each
 * ready (INVALID_STATE reason volume-not-ready), all on one host
 * (INVALID_STATE reason volumes-on-different-hosts), and one read-write
 * attachment alone or any number of read-only ones (CONFLICT reason
 * volume-in-use, with volumeId and the live instance that holds it).
 * a->n is 0 for a template without volumes. */
int va_prepare_tx(struct db *d, const char *template_id, struct va_attach *a, bc_error *err);

/* Record instance_id's attachments (instance_volumes) from a. */
int va_attach_tx(struct db *d, const char *instance_id, const struct va_attach *a,
		 bc_error *err);

#endif
