/* snapshots_pass.c: the sandbox reconciler's snapshot work (snapshots.h,
 * docs/snapshots.md, "Lifetime"), run at each pass and woken by a settled
 * command (NOTIFY bc_command_settled, sandbox_reconcile.c):
 *   1. settle: a pending snapshot whose instance.snapshot command settled
 *      becomes ready (the host's sha256, sizeBytes, cpuModel, pausedMs,
 *      checked) or failed (the command's error, or what was wrong with its
 *      result), publishing sandbox.snapshot.ready / .failed; one whose
 *      command is gone (purged) fails;
 *   2. lifetime: the snapshots of a deleted sandbox that were not kept are
 *      deleted (sandbox.snapshot.deleted);
 *   3. purge: a deleted snapshot whose upload settled and that no live
 *      instance restores from has its object removed with the store's
 *      DELETE, outside any transaction, then purged_at and its
 *      authorization row go. A store that fails leaves it for the next
 *      pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "db.h"
#include "log.h"
#include "snapshots.h"
#include "snapstore.h"
#include "util.h"

/* The purge read's columns (p.id, p.object_key), and the settle pass's
 * answer (the snapshot, what became of it). */
enum { PG_ID, PG_OBJECT_KEY };
enum { SE_SNAPSHOT, SE_WHAT };


/* The result's checks, in order; '' when it is a usable snapshot. */
#define SETTLE_WHY                                                                          \
	"CASE WHEN cstate IS NULL THEN 'the snapshot command was lost' "                       \
	"WHEN cstate = 'failed' THEN left(coalesce(nullif(error, ''), 'the host failed it'), 512) " \
	"WHEN coalesce(result->>'sha256', '') !~ '^[0-9a-f]{64}$' THEN 'the host reported no "  \
	"valid sha256' WHEN coalesce(result->>'sizeBytes', '') !~ '^[1-9][0-9]{0,17}$' THEN "    \
	"'the host reported no valid sizeBytes' WHEN coalesce(result->>'runtime', rt) <> rt "   \
	"THEN 'the host captured it with another runtime' WHEN include_memory AND "             \
	"coalesce(result->>'cpuModel', '') = '' THEN 'the host reported no cpuModel for a "     \
	"memory snapshot' ELSE '' END"

static const char settle_sql[] =
	"WITH c AS (SELECT p.id, c.state cstate, c.error, c.result, p.runtime rt, "
	"p.include_memory FROM sandbox_snapshots p LEFT JOIN commands c ON c.id = p.command_id "
	"WHERE p.state = 'pending' AND (c.id IS NULL OR c.state IN ('succeeded', 'failed')) FOR "
	"UPDATE OF p SKIP LOCKED), v AS (SELECT id, result, " SETTLE_WHY " why FROM c), u AS "
	"(UPDATE sandbox_snapshots p SET state = CASE WHEN v.why = '' THEN 'ready' ELSE 'failed' "
	"END, reason = v.why, settled_at = now(), ready_at = CASE WHEN v.why = '' THEN now() END, "
	"sha256 = CASE WHEN v.why = '' THEN v.result->>'sha256' ELSE '' END, size_bytes = CASE "
	"WHEN v.why = '' THEN (v.result->>'sizeBytes')::bigint ELSE 0 END, cpu_model = CASE WHEN "
	"v.why = '' THEN left(coalesce(v.result->>'cpuModel', ''), 256) ELSE '' END, paused_ms = "
	"CASE WHEN v.why = '' AND coalesce(v.result->>'pausedMs', '') ~ '^[0-9]{1,15}$' THEN "
	"(v.result->>'pausedMs')::bigint END FROM v WHERE p.id = v.id RETURNING p.*) INSERT INTO "
	"events (type, subject, tenant_id, data) SELECT CASE WHEN state = 'ready' THEN "
	"'sandbox.snapshot.ready' ELSE 'sandbox.snapshot.failed' END, 'sandbox/' || sandbox_id, "
	"tenant_id, " SNAP_EVD_SQL " || CASE WHEN state = 'ready' THEN jsonb_build_object("
	"'sha256', sha256, 'sizeBytes', size_bytes, 'cpuModel', cpu_model) ELSE "
	"jsonb_build_object('reason', reason) END FROM u RETURNING subject, type";

static int settle_tx(struct db *d, void *arg, bc_error *err)
{
	PGresult **r = arg;
	int rc;

	PQclear(*r);
	*r = NULL;
	if ((rc = db_exec(d, r, settle_sql, NULL)) < 0 ||
	    (rc = snap_delete_where(d, "NOT p.keep AND EXISTS (SELECT 1 FROM sandboxes s WHERE "
				    "s.id = p.sandbox_id AND s.state = 'deleted')", NULL)) < 0)
		return db_fail(err, rc);
	return 0;
}

static int purge_one(struct db *d, const char *id)
{
	struct dbp p = {0};

	dbp_str(&p, id);
	return db_exec(d, NULL, "WITH u AS (UPDATE sandbox_snapshots SET purged_at = now() WHERE "
		       "id = $1 AND purged_at IS NULL RETURNING id) DELETE FROM authz_resources a "
		       "USING u WHERE a.type = '" SNAP_TYPE "' AND a.id = u.id", &p);
}

static void purge(const struct ctl_app *app, struct db *d)
{
	struct snapstore *store = NULL;
	PGresult *r = NULL;
	bc_error err = {0};
	int n = 0;

	if (db_exec(d, &r, "SELECT p.id, p.object_key FROM sandbox_snapshots p WHERE p.deleted_at "
		    "IS NOT NULL AND p.purged_at IS NULL AND p.state <> 'pending' AND NOT EXISTS "
		    "(SELECT 1 FROM instances i WHERE i.restore_snapshot_id = p.id AND i.state <> "
		    "'deleted') ORDER BY p.deleted_at LIMIT 50", NULL) < 0) {
		log_warn("sandbox snapshots: purge read failed");
		return;
	}
	if (PQntuples(r) > 0 && snapstore_open(&app->cfg, d, &store, &err) < 0)
		log_warn("sandbox snapshots: %d to purge, the store does not open: %s",
			 PQntuples(r), err.message);
	for (int i = 0; store && i < PQntuples(r); i++) {
		bc_error e = {0};
		if (snapstore_delete(store, db_val(r, i, PG_OBJECT_KEY), &e) < 0) {
			log_warn("sandbox snapshot %s: the store's delete failed: %s",
				 db_val(r, i, PG_ID), e.message);
			continue;
		}
		if (purge_one(d, db_val(r, i, PG_ID)) < 0)
			log_warn("sandbox snapshot %s: purged from the store, not marked",
				 db_val(r, i, PG_ID));
		else
			n++;
	}
	if (n)
		log_info("sandbox snapshots: %d purged", n);
	snapstore_free(store);
	PQclear(r);
}

void snap_pass(const struct ctl_app *app, struct db *d)
{
	PGresult *r = NULL;
	bc_error err = {0};

	if (db_tx(d, "READ COMMITTED", settle_tx, &r, &err) < 0)
		log_warn("sandbox snapshots: settle pass failed: %s", err.message);
	for (int i = 0; r && i < PQntuples(r); i++)
		log_info("%s: %s", db_val(r, i, SE_SNAPSHOT), db_val(r, i, SE_WHAT));
	PQclear(r);
	purge(app, d);
}
