/* node_replace.c: placing an instance again, away from the host it was on. Run
 * by the reconciler's leader (reconcile.c), each instance in a transaction
 * of its own, so one that cannot move now never holds up the others.
 *
 * Host admission (the spec's "hosts that cannot start an instance"): a host
 * that cannot fit an instance reports it stopped with "ResourcesExhausted:
 * ...", and the report stamps refused_at (node_report.c). Once that refusal has
 * stood replace_after_seconds and the instance has never run, its booking
 * and address are released, the host joins refused_nodes, replacements
 * grows by one, and the instance is placed away from every host in
 * refused_nodes (node_place.c excludes them; with none left it waits
 * Unschedulable). After REPLACE_MAX re-placements the next standing refusal
 * fails it: state error, reason naming every host that refused it. It
 * keeps its id and created_at throughout.
 *
 * recreateOnHostLoss: an instance of such a pool on a node declared lost
 * (or retired), not being deleted, releases its booking and address and
 * goes back to provisioning, to be placed elsewhere; running_at is cleared
 * since it boots again, and the lost node's spec moves on without it (its
 * host, back or fenced, destroys its copy). Without the flag it stays
 * lost. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "db.h"
#include "event_data.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "rebind.h"
#include "util.h"

#define BATCH 50

struct move {
	char id[64];
	int after;            /* replace_after_seconds */
	const struct ctl_app *app;
};

/* A new address for the instance's MAC (another MAC on a collision), and
 * a placement. */
static int lease_and_place(struct db *d, const char *id, const char *pool, const char *mac,
			   bc_error *err)
{
	_cleanup_free_ char *node = NULL;
	char m[18];
	int rc;

	snprintf(m, sizeof(m), "%s", mac ? mac : "");
	if (mac && (rc = lease_nic(d, pool, id, m, err)) < 0)
		return rc;
	rc = place_pending(d, id, &node, err);
	if (rc == 0 && node)
		log_info("instance %s: placed again on %s", id, node);
	return rc;
}

static int publish(struct db *d, const char *type, const char *id, const char *tenant,
		   const char *data)
{
	char subject[96];

	snprintf(subject, sizeof(subject), "instance/%s", id);
	return event_publish(d, type, subject, tenant, data);
}

/* The columns of refused_tx's SELECT (r), of the UPDATE's RETURNING of
 * fail_refused and move_refused (u: the first two in both), and of
 * lost_tx's RETURNING. */
enum { RF_ID, RF_NODE, RF_TENANT, RF_REPLACEMENTS, RF_POOL };
enum { RU_REASON, RU_DATA, RU_REPLACEMENTS, RU_MAC };
enum { LO_NODE, LO_TENANT, LO_POOL, LO_MAC, LO_DATA };

/* Run sql, an UPDATE of the instance of refused_tx()'s row r ($1 its id,
 * $2 its host) returning the reason and the event's data first; publish
 * type with that data and bump the host's spec. The UPDATE's row into
 * *ret_u (caller clears) on success. */
static int refused_update(struct db *d, const PGresult *r, const char *sql, const char *type,
			  PGresult **ret_u, bc_error *err)
{
	const char *id = db_val(r, 0, RF_ID), *node = db_val(r, 0, RF_NODE);
	struct dbp p = {0};
	PGresult *u = NULL;
	int rc;

	dbp_str(&p, id);
	dbp_str(&p, node);
	rc = db_exec(d, &u, sql, &p);
	if (rc == 0)
		rc = publish(d, type, id, db_val(r, 0, RF_TENANT), db_val(u, 0, RU_DATA));
	if (rc == 0)
		rc = spec_bump_instance(d, node, id);
	if (rc < 0) {
		PQclear(u);
		return db_fail(err, rc);
	}
	*ret_u = u;
	return 0;
}

/* The refusal stood its time and REPLACE_MAX re-placements are used up. */
static int fail_refused(struct db *d, const PGresult *r, bc_error *err)
{
	PGresult *u = NULL;
	int rc = refused_update(d, r, "UPDATE instances SET refused_nodes = array_append("
		"refused_nodes, node_id), state = 'error', reason = format('ResourcesExhausted: "
		"refused by %s hosts (%s); the last said: %s', cardinality(refused_nodes) + 1, "
		"array_to_string(array_append(refused_nodes, node_id), ', '), reason), node_id = "
		"NULL, refused_at = NULL, updated_at = now() WHERE id = $1 RETURNING reason, "
		"(jsonb_build_object('nodeId', $2::text, 'reason', reason, 'refusedNodes', "
		"to_jsonb(refused_nodes), 'replacements', replacements) || "
		EVD_INSTANCE_OWNER_SQL("instances") ")::text", "instance.error",
		&u, err);

	if (rc < 0)
		return rc;
	log_warn("instance %s: %s", db_val(r, 0, RF_ID), db_val(u, 0, RU_REASON));
	PQclear(u);
	return 0;
}

/* Away from every host that refused it. */
static int move_refused(struct db *d, const struct ctl_app *app, const PGresult *r,
			bc_error *err)
{
	PGresult *u = NULL;
	int rc = refused_update(d, r, "UPDATE instances SET refused_nodes = array_append("
		"refused_nodes, node_id), replacements = replacements + 1, state = 'provisioning', "
		"reason = 'Rescheduling: node ' || node_id || ' refused it (' || reason || ')', "
		"node_id = NULL, refused_at = NULL, updated_at = now() WHERE id = $1 RETURNING "
		"reason, (jsonb_build_object('fromNodeId', $2::text, 'reason', reason, "
		"'refusedNodes', to_jsonb(refused_nodes), 'replacements', replacements) || "
		EVD_INSTANCE_OWNER_SQL("instances") ")::text, "
		"replacements, mac::text", "instance.rescheduling", &u, err);

	if (rc < 0)
		return rc;
	log_info("instance %s: %s; placing it elsewhere (re-placement %s of %d)",
		 db_val(r, 0, RF_ID), db_val(u, 0, RU_REASON), db_val(u, 0, RU_REPLACEMENTS),
		 REPLACE_MAX);
	rc = lease_and_place(d, db_val(r, 0, RF_ID), db_val(r, 0, RF_POOL), db_val(u, 0, RU_MAC),
			     err);
	/* a memory restore: a bundle for its new address */
	if (rc == 0)
		rc = rebind_reseal(d, app, db_val(r, 0, RF_ID), err);
	PQclear(u);
	return rc;
}

static int refused_tx(struct db *d, void *arg, bc_error *err)
{
	struct move *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	dbp_i64(&p, a->after);
	rc = db_exec(d, &r, "SELECT id, node_id, tenant_id, replacements, pool_id FROM instances "
		     "WHERE id = $1 AND refused_at < now() - make_interval(secs => $2) AND node_id "
		     "IS NOT NULL AND running_at IS NULL AND desired_state = 'running' FOR UPDATE "
		     "SKIP LOCKED", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1) {
		bool last = db_i64(r, 0, RF_REPLACEMENTS) >= REPLACE_MAX;
		rc = release_placement(d, a->id, !last);
		if (rc < 0)
			rc = db_fail(err, rc);
		else
			rc = last ? fail_refused(d, r, err) : move_refused(d, a->app, r, err);
	}
	PQclear(r);
	return rc;
}

static int lost_tx(struct db *d, void *arg, bc_error *err)
{
	struct move *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	rc = db_exec(d, &r, "UPDATE instances i SET state = 'provisioning', reason = 'Recreating: "
		     "node ' || i.node_id || ' was lost', node_id = NULL, running_at = NULL, "
		     "refused_at = NULL, guest_ready_at = NULL, identity_rebound_at = NULL, updated_at = "
		     "now() FROM (SELECT o.id, "
		     "o.node_id FROM instances o JOIN pools p ON p.id = o.pool_id JOIN nodes n ON n.id = "
		     "o.node_id "
		     "WHERE o.id = $1 AND o.state = 'lost' AND o.desired_state <> 'deleted' AND "
		     "p.recreate_on_host_loss AND n.state <> 'ready' FOR UPDATE OF o SKIP LOCKED) old "
		     "WHERE i.id = old.id RETURNING old.node_id, i.tenant_id, i.pool_id, i.mac::text, "
		     "(jsonb_build_object('fromNodeId', old.node_id, 'reason', i.reason) || "
		     EVD_INSTANCE_OWNER_SQL("i") ")::text", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1) {
		rc = release_placement(d, a->id, true);
		/* the lost node's spec no longer names it: back (or fenced), its
		 * host destroys its copy instead of resuming it */
		if (rc == 0)
			rc = spec_bump_instance(d, db_val(r, 0, LO_NODE), a->id);
		if (rc == 0)
			rc = publish(d, "instance.recreating", a->id, db_val(r, 0, LO_TENANT),
				     db_val(r, 0, LO_DATA));
		if (rc < 0)
			rc = db_fail(err, rc);
		else
			rc = lease_and_place(d, a->id, db_val(r, 0, LO_POOL), db_val(r, 0, LO_MAC),
					     err);
		/* a memory restore: a bundle for its new address */
		if (rc == 0)
			rc = rebind_reseal(d, a->app, a->id, err);
		if (rc == 0)
			log_info("instance %s: node %s was lost: recreating it", a->id,
				 db_val(r, 0, LO_NODE));
	}
	PQclear(r);
	return rc;
}

/* Run fn for each id the query (one parameter: the batch size) returns. */
static void each(struct db *d, const struct ctl_app *app, const char *sql, db_tx_fn fn, int after,
		 const char *what)
{
	enum { MOVE_ID }; /* the query's one column */
	PGresult *r = NULL;
	struct dbp p = {0};
	bc_error err;

	dbp_i64(&p, BATCH);
	if (after)
		dbp_i64(&p, after);
	if (db_exec(d, &r, sql, &p) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++) {
		struct move a = {.after = after, .app = app};
		snprintf(a.id, sizeof(a.id), "%s", db_val(r, i, MOVE_ID));
		bc_error_clear(&err);
		if (db_tx(d, "READ COMMITTED", fn, &a, &err) < 0)
			log_warn("instance %s: %s failed: %s", a.id, what, err.message);
	}
	PQclear(r);
}

void replace_refused(struct db *d, const struct ctl_app *app, int after_seconds)
{
	each(d, app, "SELECT id FROM instances WHERE refused_at < now() - make_interval(secs => $2) "
	     "AND node_id IS NOT NULL AND running_at IS NULL AND desired_state = 'running' ORDER BY "
	     "refused_at LIMIT $1", refused_tx, after_seconds, "re-placement");
}

void recreate_lost(struct db *d, const struct ctl_app *app)
{
	each(d, app, "SELECT i.id FROM instances i JOIN pools p ON p.id = i.pool_id JOIN nodes n ON "
	     "n.id = i.node_id WHERE i.state = 'lost' AND i.desired_state <> 'deleted' AND "
	     "p.recreate_on_host_loss AND n.state <> 'ready' ORDER BY i.id LIMIT $1", lost_tx, 0,
	     "recreate");
}
