/* teardown.c: tenants in `deleting` are torn down by the reconciler's
 * leader, one transaction per tenant per pass (the spec's tenancy
 * reconciler calling tenantDeleted until it answers DONE):
 *
 *   - its sandboxes' identity epochs are revoked (sandbox.identity.revoked);
 *   - its API tokens and delegations are revoked (token.revoked,
 *     delegation.revoked with reason "tenant deleted"; every event's
 *     data is built by event_data.c, as the API's are);
 *   - its sandbox templates are deleted (no event, as for
 *     sandboxTemplates.delete), its open sandboxes marked deleting
 *     (sandbox.deleting, reason "tenant deleted"), its drafts dropped from
 *     the projection;
 *   - up to TEARDOWN_BATCH live instances (sandboxes' and warm ones
 *     included) are set to desired deleted, each publishing
 *     instance.deleting with reason "tenant deleted"; their hosts hear
 *     of it by the spec bump; unplaced ones finish at once;
 *   - once no instance of the tenant is left undeleted, its ready volumes
 *     become deleting (sandbox.volume.deleting; volumes.c finishes each
 *     once its host applied a spec without it);
 *   - once no instance and no volume is left undeleted ("DONE"): its
 *     identities become deleted (identity.state-changed), its policies
 *     are deleted (policy.deleted; attachments removed), its quota row
 *     goes, and the tenant becomes deleted (tenant.state-changed with
 *     reason "teardown"); its secrets are deleted with their sealed
 *     values (secret.deleted). The offer and the
 *     usage stay: they are the tenant's bill.
 *
 * Each step only touches rows not yet in their end state and the tenant
 * row is locked (SKIP LOCKED) for the transaction, so passes repeat
 * safely and two replicas never tear one tenant down at once. Snapshots
 * join the steps with their issue. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "event_data.h"
#include "log.h"
#include "node.h"
#include "secrets.h"
#include "teardown.h"
#include "util.h"
#include "volumes.h"
#include "snapshots.h"

#define TEARDOWN_BATCH 100
#define TEARDOWN_TENANTS 10

struct td {
	const char *tenant;
	int instances;     /* set to deleted in this pass */
	bool locked, done;
};

/* A statement over the tenant's rows ($1) that publishes event type ($3)
 * about each row it changes, with the data ($2) event_data.c builds for
 * the type from state and reason (a sandbox's ids are the row's: the
 * statement merges EVD_SANDBOX_SQL over them). */
struct td_step {
	const char *sql;
	const char *type, *state, *reason;
};

static const struct td_step access_steps[] = {
	/* tokens and delegations */
	{"WITH k AS (UPDATE api_tokens k SET revoked_at = now() FROM identities i WHERE i.id = "
	 "k.identity_id AND i.tenant_id = $1 AND k.revoked_at IS NULL RETURNING k.id) INSERT INTO "
	 "events (type, subject, tenant_id, data) SELECT $3, 'token/' || id, $1, $2::jsonb FROM k",
	 "token.revoked", NULL, "tenant deleted"},
	{"WITH g AS (UPDATE delegations SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at "
	 "IS NULL RETURNING id) INSERT INTO events (type, subject, tenant_id, data) SELECT $3, "
	 "'delegation/' || id, $1, $2::jsonb FROM g",
	 "delegation.revoked", NULL, "tenant deleted"},
	/* workload identity revoked before anything of the tenant goes (identity.c) */
	{"WITH e AS (UPDATE identity_epochs SET state = 'revoked', revoked_at = now(), "
	 "revoke_reason = 'tenant-deleted' WHERE tenant_id = $1 AND state <> 'revoked' RETURNING "
	 "*) INSERT INTO events (type, subject, tenant_id, data) SELECT "
	 "'sandbox.identity.revoked', 'sandbox/' || sandbox_id, $1, jsonb_build_object('epochId', "
	 "id, 'instanceId', instance_id, 'address', host(address), 'wasLive', live_at IS NOT "
	 "NULL) FROM e", NULL, NULL, NULL},
	/* templates (their warm pools drain), drafts, open sandboxes */
	{"WITH t AS (UPDATE sandbox_templates SET deleted_at = now(), updated_at = now() WHERE "
	 "tenant_id = $1 AND deleted_at IS NULL RETURNING id) DELETE FROM authz_resources WHERE "
	 "type = 'compute-sandbox-template' AND id IN (SELECT id FROM t)", NULL, NULL, NULL},
	{"DELETE FROM authz_resources WHERE tenant_id = $1 AND draft", NULL, NULL, NULL},
	{"WITH s AS (UPDATE sandboxes SET state = 'deleting', deleting_at = now(), updated_at = "
	 "now() WHERE tenant_id = $1 AND deleting_at IS NULL RETURNING id, template_id, "
	 "instance_id, pool_id) INSERT INTO events (type, subject, tenant_id, data) SELECT $3, "
	 "'sandbox/' || id, $1, $2::jsonb || " EVD_SANDBOX_SQL("") " FROM s",
	 "sandbox.deleting", NULL, "tenant deleted"},
};

/* Run s for tenant; <0 on failure. */
static int step(struct db *d, const char *tenant, const struct td_step *s)
{
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	int rc = 0;

	dbp_str(&p, tenant);
	if (!s->type)
		return db_exec(d, NULL, s->sql, &p);
	if (strncmp(s->type, "sandbox.", 8) == 0)
		rc = evd_sandbox(s->type, &(struct evd_sandbox){.reason = s->reason}, &data);
	else
		rc = evd_iam(s->type, &(struct evd_iam){.state = s->state, .reason = s->reason},
			     &data);
	if (rc < 0)
		return rc;
	dbp_str(&p, data);
	dbp_str(&p, s->type);
	return db_exec(d, NULL, s->sql, &p);
}

/* Up to TEARDOWN_BATCH live instances to desired deleted; their nodes'
 * specs bumped; unplaced ones, and those of a lost or retired host (which
 * will never confirm), finished at once. */
static int instances_step(struct db *d, struct td *a)
{
	enum { STEP_INSTANCE_ID, STEP_NODE_ID };
	_cleanup_free_ char *unplaced = NULL;
	size_t len = 1, used = 0;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->tenant);
	dbp_i64(&p, TEARDOWN_BATCH);
	rc = db_exec(d, &r, "WITH i AS (SELECT id FROM instances WHERE tenant_id = $1 AND "
		     "desired_state <> 'deleted' AND state <> 'deleted' ORDER BY id LIMIT $2 FOR "
		     "UPDATE), u AS (UPDATE instances x SET desired_state = 'deleted', state = "
		     "'deleting', updated_at = now() FROM i WHERE x.id = i.id RETURNING x.id, "
		     "x.node_id, x.sandbox_id, x.warm_template_id), ev AS (INSERT INTO events (type, "
		     "subject, tenant_id, data) SELECT 'instance.deleting', 'instance/' || id, $1, "
		     "jsonb_build_object('reason', 'tenant deleted') || " EVD_INSTANCE_OWNER_SQL("u")
		     " FROM u) SELECT u.id, CASE WHEN "
		     "n.state IN ('lost', 'retired') THEN '' ELSE coalesce(u.node_id, '') END FROM u "
		     "LEFT JOIN nodes n ON n.id = u.node_id ORDER BY 2, 1", &p);
	if (rc < 0)
		return rc;
	a->instances = PQntuples(r);
	len += (size_t)PQntuples(r) * 64;
	unplaced = xcalloc(1, len);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		const char *node = db_val(r, i, STEP_NODE_ID);
		if (!*node)
			used += (size_t)snprintf(unplaced + used, len - used, "%s%s", used ? "\n" : "",
						 db_val(r, i, STEP_INSTANCE_ID));
		else if (i == 0 || strcmp(node, db_val(r, i - 1, STEP_NODE_ID)) != 0)
			rc = spec_bump(d, node);
	}
	PQclear(r);
	if (rc == 0 && used && finish_deletions(d, NULL, unplaced) < 0)
		rc = -EIO;
	return rc;
}

static const struct td_step final_steps[] = {
	{"WITH x AS (UPDATE identities SET state = 'deleted', updated_at = now() WHERE tenant_id = "
	 "$1 AND state <> 'deleted' RETURNING id) INSERT INTO events (type, subject, tenant_id, "
	 "data) SELECT $3, 'identity/' || id, $1, $2::jsonb FROM x",
	 "identity.state-changed", "deleted", "tenant deleted"},
	{"DELETE FROM policy_attachments a USING policies p WHERE p.id = a.policy_id AND "
	 "p.tenant_id = $1", NULL, NULL, NULL},
	{"WITH x AS (UPDATE policies SET deleted_at = now() WHERE tenant_id = $1 AND deleted_at IS "
	 "NULL RETURNING id) INSERT INTO events (type, subject, tenant_id, data) SELECT $3, "
	 "'policy/' || id, $1, $2::jsonb FROM x",
	 "policy.deleted", NULL, "tenant deleted"},
	{"DELETE FROM quotas WHERE tenant_id = $1", NULL, NULL, NULL},
	{"WITH x AS (UPDATE tenants SET state = 'deleted', updated_at = now() WHERE id = $1 "
	 "RETURNING id) INSERT INTO events (type, subject, tenant_id, data) SELECT $3, 'tenant/' "
	 "|| id, id, $2::jsonb FROM x",
	 "tenant.state-changed", "deleted", "teardown"},
};

static int teardown_tx(struct db *d, void *arg, bc_error *err)
{
	struct td *a = arg;
	_cleanup_free_ char *left = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, vols = 0;

	a->locked = a->done = false;
	a->instances = 0;
	dbp_str(&p, a->tenant);
	rc = db_exec(d, &r, "SELECT 1 FROM tenants WHERE id = $1 AND state = 'deleting' FOR UPDATE "
		     "SKIP LOCKED", &p);
	if (rc < 0)
		return db_fail(err, rc);
	a->locked = PQntuples(r) == 1;
	PQclear(r);
	if (!a->locked)
		return 0; /* another pass has it, or it is no longer deleting */
	rc = 0;
	for (size_t i = 0; rc == 0 && i < ARRAY_SIZE(access_steps); i++)
		rc = step(d, a->tenant, &access_steps[i]);
	/* every snapshot, kept ones too (purged once no restore lives) */
	if (rc == 0)
		rc = snap_delete_where(d, "p.tenant_id = $1", &p);
	if (rc == 0)
		rc = instances_step(d, a);
	if (rc == 0)
		rc = db_scalar(d, "SELECT count(*) FROM instances WHERE tenant_id = $1 AND state <> "
			       "'deleted'", &p, &left);
	a->done = rc == 0 && strcmp(left, "0") == 0;
	/* volumes after instances: deleting until their hosts applied it */
	if (rc == 0 && a->done && (rc = vol_tenant_teardown(d, a->tenant, &vols)) == 0)
		a->done = vols == 0;
	if (rc == 0 && a->done)
		rc = secrets_tenant_deleted(d, a->tenant);
	for (size_t i = 0; rc == 0 && a->done && i < ARRAY_SIZE(final_steps); i++)
		rc = step(d, a->tenant, &final_steps[i]);
	return rc < 0 ? db_fail(err, rc) : 0;
}

int teardown_tenant(struct db *d, const char *tenant, bool *ret_done, bc_error *err)
{
	struct td a = {.tenant = tenant};
	int rc = db_tx(d, "READ COMMITTED", teardown_tx, &a, err);

	if (rc < 0)
		return rc;
	if (a.instances)
		log_info("tenant %s: teardown: %d instances set to deleted", tenant, a.instances);
	if (a.done)
		log_info("tenant %s: teardown done, tenant deleted", tenant);
	if (ret_done)
		*ret_done = a.done;
	return 0;
}

void teardown_tick(struct db *d)
{
	enum { TICK_TENANT_ID };
	struct dbp p = {0};
	PGresult *r = NULL;

	dbp_i64(&p, TEARDOWN_TENANTS);
	if (db_exec(d, &r, "SELECT id FROM tenants WHERE state = 'deleting' ORDER BY updated_at "
		    "LIMIT $1", &p) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++) {
		bc_error err;

		bc_error_clear(&err);
		if (teardown_tenant(d, db_val(r, i, TICK_TENANT_ID), NULL, &err) < 0)
			log_warn("tenant %s: teardown pass failed: %s", db_val(r, i, TICK_TENANT_ID),
				 err.message);
	}
	PQclear(r);
}
