/* reconcile.c: the controller's periodic work, done by one replica at a time
 * (the holder of a session advisory lock): nodes silent for
 * node_lost_seconds become lost with their instances (their deletions
 * finish); instances their host refused, and those of recreateOnHostLoss
 * pools on a lost node, are placed again (replace.c); instances that found
 * no node with room are placed when room appears. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "db.h"
#include "iam_react.h"
#include "log.h"
#include "node_commands.h"
#include "meter.h"
#include "node.h"
#include "outbox.h"
#include "reconcile.h"
#include "teardown.h"
#include "volumes.h"
#include "util.h"

#define LEADER_LOCK "7164930317812342"
#define PASS_MS 1000
#define PLACE_BATCH 50

struct lost {
	int seconds;
	int count;
};

static int lost_tx(struct db *d, void *arg, bc_error *err)
{
	enum { LOST_NODE_ID, LOST_POOL_ID };
	struct lost *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_i64(&p, a->seconds);
	rc = db_exec(d, &r, "UPDATE nodes SET state = 'lost' WHERE state = 'ready' AND "
		     "coalesce(last_report_at, joined_at) < now() - make_interval(secs => $1) "
		     "RETURNING id, pool_id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	a->count = PQntuples(r);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		log_warn("node %s: silent for %d s, lost", db_val(r, i, LOST_NODE_ID), a->seconds);
		rc = nodes_abandon(d, db_val(r, i, LOST_NODE_ID), "node lost");
		if (rc == 0)
			rc = node_publish(d, "node.lost", db_val(r, i, LOST_NODE_ID),
					  db_val(r, i, LOST_POOL_ID));
	}
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

struct unplaced {
	char id[64];
	bool placed;
};

static int place_tx(struct db *d, void *arg, bc_error *err)
{
	struct unplaced *a = arg;
	_cleanup_free_ char *node = NULL;
	int rc = place_pending(d, a->id, &node, err);

	a->placed = node != NULL;
	if (node)
		log_info("instance %s: placed on %s", a->id, node);
	return rc;
}

static void place_unplaced(struct db *d)
{
	enum { UNPLACED_ID };
	PGresult *r = NULL;
	struct dbp p = {0};
	bc_error err;

	dbp_i64(&p, PLACE_BATCH);
	if (db_exec(d, &r, "SELECT id FROM instances WHERE node_id IS NULL AND state = "
		    "'provisioning' AND desired_state <> 'deleted' ORDER BY id LIMIT $1", &p) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++) {
		struct unplaced a = {.placed = false};
		snprintf(a.id, sizeof(a.id), "%s", db_val(r, i, UNPLACED_ID));
		bc_error_clear(&err);
		if (db_tx(d, "READ COMMITTED", place_tx, &a, &err) < 0)
			log_warn("instance %s: placement failed: %s", a.id, err.message);
	}
	PQclear(r);
}

static bool take_lead(struct db *d)
{
	_cleanup_free_ char *v = NULL;

	return db_scalar(d, "SELECT pg_try_advisory_lock(" LEADER_LOCK ")", NULL, &v) == 0 && v &&
	       v[0] == 't';
}

void *reconcile_thread(void *arg)
{
	struct ctl_app *app = arg;
	struct db *d = NULL;
	bool leader = false;

	while (!app->stopping) {
		struct lost l = {.seconds = app->cfg.node_lost_seconds};
		bc_error err;

		usleep(PASS_MS * 1000);
		if (!d && !(d = db_open(app->cfg.database)))
			continue;
		if (PQstatus(d->conn) != CONNECTION_OK) {
			db_close(d);
			d = NULL;
			leader = false;
			continue;
		}
		if (!leader && (leader = take_lead(d)))
			log_info("reconcile: replica %s leads", app->cfg.replica);
		if (!leader)
			continue;
		bc_error_clear(&err);
		if (db_tx(d, "READ COMMITTED", lost_tx, &l, &err) < 0)
			log_warn("reconcile: node loss pass failed: %s", err.message);
		replace_refused(d, app, app->cfg.replace_after_seconds);
		recreate_lost(d, app);
		place_unplaced(d);
		meter_tick(d, app->cfg.metering_interval_seconds);
		teardown_tick(d);
		vol_reconcile_tick(d);
		iam_react_tick(d);
		events_retention_tick(d, &app->cfg);
		cmd_tick(d, &app->cfg); /* host commands: timeouts, retention */
	}
	db_close(d);
	return NULL;
}
