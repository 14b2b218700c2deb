/* sandbox_restore.c: a sandbox started from a snapshot (docs/snapshots.md,
 * "Restore"). Sandboxes.Create with fromSnapshot (sandboxes.c calls in)
 * reads the snapshot FOR SHARE (a delete waits for the create, and a
 * deleted one is never restored), checks it belongs to the caller's own
 * lineage (its owner, or the agent that created its sandbox), is ready,
 * was taken under the same template and on the template's runtime; the
 * create then never claims a warm instance, places a memory restore only
 * on nodes whose cpu.model label is the snapshot's (node_place.c), and
 * records instances.restore_snapshot_id. The node's spec carries
 * restore_from: the snapshot, its sha256 and size, whether it holds
 * memory, and a presigned GET URL rendered at each build (restore_render),
 * never stored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "db.h"
#include "log.h"
#include "rebind.h"
#include "rowmsg.h"
#include "sandbox_restore.h"
#include "sandboxes.h"
#include "secrets.h"
#include "snapstore.h"
#include "util.h"
#include "validate.h"

enum {
	RS_OWNER, RS_AGENT, RS_STATE, RS_TEMPLATE, RS_RUNTIME, RS_TEMPLATE_RUNTIME, RS_MEMORY,
	RS_CPU, RS_DELETED
};

static int not_found(bc_error *err, const char *id)
{
	bc_error_set(err, BC_NOT_FOUND, "sandbox snapshot %s not found", id);
	return bc_error_detail(err, "field", "fromSnapshot");
}

/* Only the owner's own lineage: the owner (a person, or the identity that
 * owns it) and, for an agent acting for the owner, its own sandboxes'. */
static bool lineage(const struct principal *p, const PGresult *r)
{
	const char *owner = *p->user_id ? p->user_id : p->id;

	if (strcmp(db_val(r, 0, RS_OWNER), owner) != 0)
		return false;
	return !*p->user_id || strcmp(db_val(r, 0, RS_AGENT), p->id) == 0;
}

int restore_check(rpc_call *c, struct db *d, const char *tenant, const char *snapshot_id,
		  const char *template_id, struct restore_src *ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc = 0;

	dbp_str(&p, snapshot_id);
	dbp_str(&p, tenant);
	dbp_str(&p, template_id);
	if ((rc = db_exec(d, &r, "SELECT s.owner_id, coalesce(s.agent_id, ''), s.state, "
			  "s.template_id, s.runtime, coalesce((SELECT t.runtime FROM "
			  "sandbox_templates t WHERE t.id = $3), ''), s.include_memory, s.cpu_model, "
			  "s.deleted_at IS NOT NULL FROM sandbox_snapshots s WHERE s.id = $1 AND "
			  "s.tenant_id = $2 FOR SHARE", &p)) < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1 || db_bool(r, 0, RS_DELETED) || !lineage(ctl_principal(c), r)) {
		rc = not_found(err, snapshot_id);
	} else if (strcmp(db_val(r, 0, RS_STATE), "ready") != 0) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox snapshot %s is %s, not ready",
			     snapshot_id, db_val(r, 0, RS_STATE));
		rc = bc_error_detail(err, "state", "%s", db_val(r, 0, RS_STATE));
	} else if (strcmp(db_val(r, 0, RS_TEMPLATE), template_id) != 0) {
		rc = invalid(err, "templateId", "sandbox snapshot %s was taken under template %s: "
			     "a restore runs under its snapshot's template", snapshot_id,
			     db_val(r, 0, RS_TEMPLATE));
	} else if (strcmp(db_val(r, 0, RS_RUNTIME), db_val(r, 0, RS_TEMPLATE_RUNTIME)) != 0) {
		invalid(err, "fromSnapshot", "sandbox snapshot %s was taken on the %s runtime, the "
			"template runs %s", snapshot_id, db_val(r, 0, RS_RUNTIME),
			db_val(r, 0, RS_TEMPLATE_RUNTIME));
		rc = bc_error_detail(err, "reason", "runtime");
	} else {
		snprintf(ret->id, sizeof(ret->id), "%s", snapshot_id);
		snprintf(ret->cpu_model, sizeof(ret->cpu_model), "%s", db_val(r, 0, RS_CPU));
		ret->memory = db_bool(r, 0, RS_MEMORY);
	}
	PQclear(r);
	return rc;
}

int restore_bind(struct db *d, const struct ctl_app *app, const char *tenant,
		 const char *instance_id, const struct restore_src *src, bc_error *err)
{
	struct dbp p = {0};
	int rc;

	dbp_str(&p, instance_id);
	dbp_str(&p, src->id);
	rc = db_exec(d, NULL, "UPDATE instances SET restore_snapshot_id = $2 WHERE id = $1", &p);
	if (rc < 0)
		return db_fail(err, rc);
	/* a memory restore gets its own identity where exec can use one */
	if (!src->memory || !app->sandbox_ca || !secrets_broker(app))
		return 0;
	return rebind_seal(d, &(struct rebind_in){.instance_id = instance_id, .tenant_id = tenant,
			   .account = app->cfg.sandbox_account,
			   .host_ca = sbx_certify_host_key(app) ? app->sandbox_ca : NULL}, err);
}

char *restore_object_key(const char *tenant, const char *snapshot_id)
{
	return xasprintf("sandboxes/%s/%s", tenant, snapshot_id);
}

void restore_render(const struct ctl_app *app, struct db *d, Bc__Node__V1__NodeSpec *spec)
{
	struct snapstore *store = NULL;
	bc_error err = {0};

	for (size_t i = 0; i < spec->n_instances; i++) {
		Bc__Node__V1__InstanceSpec *s = spec->instances[i];
		_cleanup_free_ char *key = NULL;
		char *url = NULL;

		if (!s->restore_from || *s->restore_from->url)
			continue;
		if (!store && snapstore_open(&app->cfg, d, &store, &err) < 0) {
			log_warn("node %s: restores without a download URL: the snapshot store does "
				 "not open: %s", spec->node_id, err.message);
			return;
		}
		key = restore_object_key(s->tenant_id, s->restore_from->snapshot_id);
		if (snapstore_presign_get(store, key, RESTORE_URL_TTL, &url) < 0)
			continue;
		free(s->restore_from->url);
		s->restore_from->url = url;
	}
	snapstore_free(store);
}

/* Whose sshd identity the instance answers to: the principal its memory
 * snapshot recorded, or itself (also once rebound: rebind.c); then any
 * other live instance of the tenant with the same one (the source, a
 * sibling or a restore of it not yet rebound). */
#define SHARES_IDENTITY_SQL                                                                \
	"WITH a AS (SELECT CASE WHEN i.identity_rebound_at IS NULL THEN coalesce((SELECT "     \
	"s.principal_instance_id FROM sandbox_snapshots s WHERE s.id = i.restore_snapshot_id " \
	"AND s.include_memory), i.id) ELSE i.id END p, i.tenant_id t FROM instances i WHERE "   \
	"i.id = $1) SELECT b.id FROM instances b, a WHERE b.id <> $1 AND b.tenant_id = a.t AND " \
	"b.state NOT IN ('deleting', 'deleted') AND b.desired_state <> 'deleted' AND (b.id = " \
	"a.p OR (b.identity_rebound_at IS NULL AND b.restore_snapshot_id IN (SELECT s.id FROM " \
	"sandbox_snapshots s WHERE s.principal_instance_id = a.p AND s.include_memory))) "      \
	"ORDER BY b.id LIMIT 1"

int restore_shares_identity(struct db *d, const char *sandbox_id, const char *instance_id,
			    bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, instance_id);
	if ((rc = db_exec(d, &r, SHARES_IDENTITY_SQL, &p)) < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return 0;
	}
	bc_error_set(err, BC_INVALID_STATE, "sandbox %s shares its SSH identity with the live "
		     "instance %s (a memory restore, its source or a sibling): delete the other "
		     "sandbox first", sandbox_id, db_val(r, 0, COL_ONLY));
	PQclear(r);
	return bc_error_detail(err, "reason", "restore-shares-identity");
}
