/* sandbox_reconcile.c: the sandbox reconciler. One worker at a time across
 * all replicas (the holder of a session advisory lock) runs a pass every
 * sandbox_reconcile_seconds and whenever NOTIFY bc_sandboxes wakes it (a
 * sandbox delete, an instance of a sandbox that finished deleting). A pass:
 *   1. expiring: sandbox.expiring once per expiry, ahead by five minutes,
 *      or a quarter of the lifetime when shorter, never under two passes,
 *      never more than the lifetime;
 *   2. expiry: up to 100 sandboxes past expiresAt, claimed with SKIP
 *      LOCKED, get expiredAt and sandbox.expired, then an ordinary delete;
 *   3. ready (the instance runs and its guest reported up) and failed
 *      fallback for the stamp of the instance's own transaction; a ready
 *      sandbox whose instance is being recreated goes back to starting;
 *   4. deleted: a sandbox whose instance is deleted is marked deleted,
 *      leaves the authorization projection, sandbox.deleted (expired);
 *   5. warm pools: drains and refills (warm.c);
 *   and the snapshots' settling, lifetime and purge (snapshots_pass.c),
 *   woken by NOTIFY bc_command_settled too.
 * Also the sandbox figures of the controller's /metrics, read from the
 * database so every replica shows the same. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "db.h"
#include "event_data.h"
#include "identity.h"
#include "log.h"
#include "metrics.h"
#include "sandbox_reconcile.h"
#include "sandboxes.h"
#include "secrets.h"
#include "node_commands.h"
#include "snapshots.h"
#include "util.h"
#include "warm.h"

#define SBX_LEADER_LOCK "7164930317812343"
#define EXPIRE_BATCH 100

static int expiring_tx(struct db *d, void *arg, bc_error *err)
{
	const int *min_lead = arg;
	struct dbp p = {0};
	int rc;

	dbp_i64(&p, *min_lead);
	rc = db_exec(d, NULL, "WITH s AS (UPDATE sandboxes s SET expiring_at = s.expires_at, "
		     "updated_at = now() WHERE s.deleting_at IS NULL AND s.expires_at > now() AND "
		     "s.expiring_at IS DISTINCT FROM s.expires_at AND s.expires_at - make_interval("
		     "secs => least(extract(epoch FROM s.expires_at - s.created_at), greatest($1, "
		     "least(300, extract(epoch FROM s.expires_at - "
		     "s.created_at) / 4)))) <= now() AND NOT EXISTS (SELECT 1 FROM instances i "
		     "WHERE i.id = s.instance_id AND i.desired_state = 'deleted') RETURNING s.id, "
		     "s.tenant_id, s.template_id, s.instance_id, s.pool_id, s.expires_at) INSERT "
		     "INTO events (type, subject, tenant_id, data) SELECT 'sandbox.expiring', "
		     "'sandbox/' || id, tenant_id, " EVD_SANDBOX_SQL(", 'expiresAt', (extract(epoch FROM "
		     "expires_at) * 1000)::bigint") " FROM s", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int expire_tx(struct db *d, void *arg, bc_error *err)
{
	enum { EXP_SANDBOX_ID };
	int *count = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	*count = 0;
	dbp_i64(&p, EXPIRE_BATCH);
	rc = db_exec(d, &r, "WITH c AS (SELECT id FROM sandboxes WHERE deleting_at IS NULL AND "
		     "identity_revoked_at IS NULL AND expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED), s AS "
		     "(UPDATE sandboxes s SET expired_at = now(), updated_at = now() FROM c WHERE "
		     "s.id = c.id RETURNING s.id, s.tenant_id, s.template_id, s.instance_id, "
		     "s.pool_id, s.expires_at), e AS (INSERT INTO events (type, subject, tenant_id, "
		     "data) SELECT 'sandbox.expired', 'sandbox/' || id, tenant_id, "
		     EVD_SANDBOX_SQL(", 'expiresAt', (extract(epoch FROM expires_at) * 1000)::bigint")
		     " FROM s) SELECT id FROM s", &p);
	if (rc < 0)
		return db_fail(err, rc);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++)
		rc = sbx_delete_locked(d, db_val(r, i, EXP_SANDBOX_ID), true);
	*count = PQntuples(r);
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* settle_tx's statements, in this order. */
static const char *const settle_sql[] = {
	/* ready: the fallback for the instance's own transaction (running, its
	 * guest reported up) */
	"WITH s AS (UPDATE sandboxes s SET state = 'ready', ready_at = now(), ready_source = "
	"'reconciler', updated_at = now() FROM instances i WHERE i.id = s.instance_id AND s.state "
	"= 'starting' AND i.state = 'running' AND i.guest_ready_at IS NOT NULL RETURNING s.id, "
	"s.tenant_id, s.template_id, s.instance_id, s.pool_id, s.warm) INSERT INTO events (type, "
	"subject, tenant_id, data) "
	"SELECT 'sandbox.ready', 'sandbox/' || id, tenant_id, " EVD_SANDBOX_SQL(", 'warm', warm")
	" FROM s",
	"WITH s AS (UPDATE sandboxes s SET state = 'failed', updated_at = now() FROM instances i "
	"WHERE i.id = s.instance_id AND s.state IN ('starting', 'ready') AND i.state = 'error' "
	"RETURNING s.id, s.tenant_id, s.template_id, s.instance_id, s.pool_id, i.reason) INSERT "
	"INTO events (type, subject, tenant_id, data) SELECT 'sandbox.failed', 'sandbox/' || id, "
	"tenant_id, " EVD_SANDBOX_SQL(", 'reason', reason") " FROM s",
	/* a recreate after host loss takes a ready sandbox back to starting
	 * (the trigger does it in the instance's transaction when the
	 * instance passed through lost; this catches a direct re-placement) */
	"UPDATE sandboxes s SET state = 'starting', updated_at = now() FROM instances i WHERE i.id "
	"= s.instance_id AND s.state = 'ready' AND i.state IN ('provisioning', 'starting') AND "
	"i.desired_state <> 'deleted'",
	/* deleted: right after the instance, which woke us */
	"WITH s AS (UPDATE sandboxes s SET state = 'deleted', deleted_at = now(), updated_at = "
	"now() FROM instances i WHERE i.id = s.instance_id AND s.state <> 'deleted' AND i.state = "
	"'deleted' RETURNING s.id, s.tenant_id, s.template_id, s.instance_id, s.pool_id, "
	"s.expired_at IS NOT NULL expired), z AS (DELETE FROM authz_resources a USING s WHERE "
	"a.type = 'compute-sandbox' AND a.id = s.id) INSERT INTO events (type, subject, tenant_id, "
	"data) SELECT 'sandbox.deleted', 'sandbox/' || id, tenant_id, "
	EVD_SANDBOX_SQL(", 'expired', expired") " FROM s",
};

static int settle_tx(struct db *d, void *arg, bc_error *err)
{
	(void)arg;
	for (size_t i = 0; i < ARRAY_SIZE(settle_sql); i++) {
		int rc = db_exec(d, NULL, settle_sql[i], NULL);

		if (rc < 0)
			return db_fail(err, rc);
	}
	return 0;
}

/* The leader's last pass, for /metrics (this replica's own figures). */
static int64_t last_pass_us, passes;

static void pass(const struct ctl_app *app, struct db *d, int period)
{
	int64_t t0 = mono_us();
	int min_lead = 2 * period, expired = 0;
	bc_error err = {0};

	if (db_tx(d, "READ COMMITTED", expiring_tx, &min_lead, &err) < 0)
		log_warn("sandboxes: expiring pass failed: %s", err.message);
	bc_error_clear(&err);
	if (db_tx(d, "READ COMMITTED", expire_tx, &expired, &err) < 0)
		log_warn("sandboxes: expiry pass failed: %s", err.message);
	bc_error_clear(&err);
	if (db_tx(d, "READ COMMITTED", settle_tx, NULL, &err) < 0)
		log_warn("sandboxes: settle pass failed: %s", err.message);
	if (expired)
		log_info("sandboxes: %d expired", expired);
	snap_pass(app, d);
	wid_pass(d, app); /* held deletions, task age, lapsed leases (identity.c) */
	warm_pass(d, app);
	__atomic_store_n(&last_pass_us, mono_us() - t0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
	log_debug("sandboxes: pass took %lld us", (long long)(mono_us() - t0));
}

/* Session lock and LISTEN on this thread's own connection. */
static bool take_lead(struct db *d)
{
	_cleanup_free_ char *v = NULL;
	PGresult *r;

	if (db_scalar(d, "SELECT pg_try_advisory_lock(" SBX_LEADER_LOCK ")", NULL, &v) < 0 ||
	    !v || v[0] != 't')
		return false;
	/* a settled command may settle a snapshot */
	r = PQexec(d->conn, "LISTEN " SBX_WAKE_CHANNEL "; LISTEN " CMD_SETTLED_CHANNEL);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		return false;
	}
	PQclear(r);
	return true;
}

/* A wake-up for the warm pools alone (a claim took a warm instance) waits
 * until claims have paused for REFILL_SETTLE_MS (each claim restarts the
 * wait), at most REFILL_DEFER_MAX_MS after the first: a burst of claims gets
 * one refill pass after it instead of refills competing with it for the
 * CPU, and a steady stream of claims still refills every second. Any other
 * wake-up (a delete, a finished deletion) runs the pass at once. */
#define REFILL_SETTLE_MS 100
#define REFILL_DEFER_MAX_MS 1000

/* The deadline after a warm wake-up at now: the period's own deadline, or
 * sooner once claims pause, but never later than the cap. */
static int64_t refill_deadline(int64_t period_end, int64_t first, int64_t now)
{
	int64_t at = now + REFILL_SETTLE_MS, cap = first + REFILL_DEFER_MAX_MS;

	if (at > cap)
		at = cap;
	return at < period_end ? at : period_end;
}

/* Wait until the deadline or a wake-up; false when the connection broke. */
static bool wait_wake(struct ctl_app *app, struct db *d, int64_t period_end)
{
	int64_t deadline = period_end, first = 0;
	bool woken = false;

	while (!woken && !app->stopping && !deadline_passed(deadline)) {
		int64_t left = deadline_left(deadline);
		struct pollfd pfd = {.fd = PQsocket(d->conn), .events = POLLIN};
		PGnotify *n;

		if (poll(&pfd, 1, (int)(left < 250 ? left : 250)) < 0 && errno != EINTR)
			return false;
		if (!PQconsumeInput(d->conn))
			return false;
		while ((n = PQnotifies(d->conn))) {
			if (strcmp(n->extra, "warm") == 0) {
				int64_t now = mono_ms();
				if (!first)
					first = now;
				deadline = refill_deadline(period_end, first, now);
			} else {
				woken = true;
			}
			PQfreemem(n);
		}
	}
	return true;
}

void *sbx_reconcile_thread(void *arg)
{
	struct ctl_app *app = arg;
	int period = app->cfg.sandbox_reconcile_seconds;
	struct db *d = NULL;
	bool leader = false, was_leader = false;

	while (!app->stopping) {
		if (!d || PQstatus(d->conn) != CONNECTION_OK) {
			db_close(d);
			leader = was_leader = false;
			if (!(d = db_open(app->cfg.database))) {
				usleep(1000 * 1000);
				continue;
			}
		}
		if (!leader && !(leader = take_lead(d))) {
			usleep(1000 * 1000);
			continue;
		}
		if (!was_leader)
			log_info("sandboxes: replica %s runs the sandbox reconciler", app->cfg.replica);
		was_leader = true;
		pass(app, d, period);
		if (!wait_wake(app, d, deadline_in(period * 1000LL))) {
			db_close(d);
			d = NULL;
			leader = was_leader = false;
		}
	}
	db_close(d);
	return NULL;
}

/* ---------------------------------------------------------------- metrics */

#define READY_BUCKETS 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300
#define LAG_BUCKETS 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300

static const double ready_b[] = {READY_BUCKETS};
static const double lag_b[] = {LAG_BUCKETS};

/* One histogram from rows (label value, count, sum, bucket counts...). */
enum { H_LABEL, H_COUNT, H_SUM, H_BUCKETS };
static void histogram(FILE *out, const char *name, const char *label, const PGresult *r,
		      const double *b, size_t nb)
{
	_cleanup_free_ char *bucket = xasprintf("%s_bucket", name);
	_cleanup_free_ char *sum = xasprintf("%s_sum", name);
	_cleanup_free_ char *count = xasprintf("%s_count", name);

	for (int i = 0; i < PQntuples(r); i++) {
		char labels[160], own[96] = "";
		if (label)
			snprintf(own, sizeof(own), "%s=\"%s\"", label, db_val(r, i, H_LABEL));
		for (size_t k = 0; k <= nb; k++) {
			char le[32];
			if (k < nb)
				snprintf(le, sizeof(le), "%g", b[k]);
			else
				snprintf(le, sizeof(le), "+Inf");
			snprintf(labels, sizeof(labels), "%s%sle=\"%s\"", own, *own ? "," : "", le);
			metrics_line(out, bucket, labels,
				     (double)db_i64(r, i, k < nb ? H_BUCKETS + (int)k : H_COUNT));
		}
		metrics_line(out, sum, *own ? own : NULL, strtod(db_val(r, i, H_SUM), NULL));
		metrics_line(out, count, *own ? own : NULL, (double)db_i64(r, i, H_COUNT));
	}
}

#define BUCKETS_11(d)                                                                      \
	"count(*) FILTER (WHERE " d " <= 0.1), count(*) FILTER (WHERE " d " <= 0.25), "       \
	"count(*) FILTER (WHERE " d " <= 0.5), count(*) FILTER (WHERE " d " <= 1), count(*) " \
	"FILTER (WHERE " d " <= 2.5), count(*) FILTER (WHERE " d " <= 5), count(*) FILTER "   \
	"(WHERE " d " <= 10), count(*) FILTER (WHERE " d " <= 30), count(*) FILTER (WHERE " d \
	" <= 60), count(*) FILTER (WHERE " d " <= 120), count(*) FILTER (WHERE " d " <= 300)"
#define BUCKETS_10(d)                                                                      \
	"count(*) FILTER (WHERE " d " <= 0.5), count(*) FILTER (WHERE " d " <= 1), count(*) " \
	"FILTER (WHERE " d " <= 2), count(*) FILTER (WHERE " d " <= 5), count(*) FILTER "     \
	"(WHERE " d " <= 10), count(*) FILTER (WHERE " d " <= 15), count(*) FILTER (WHERE " d \
	" <= 30), count(*) FILTER (WHERE " d " <= 60), count(*) FILTER (WHERE " d " <= 120), " \
	"count(*) FILTER (WHERE " d " <= 300)"

void sbx_metrics_render(FILE *out, struct db *d)
{
	int64_t n = __atomic_load_n(&passes, __ATOMIC_RELAXED);
	PGresult *r = NULL;

	metrics_head(out, "better_compute_sandbox_reconcile_passes_total", "counter",
		     "Sandbox reconciler passes this replica ran as the leader.");
	metrics_line(out, "better_compute_sandbox_reconcile_passes_total", NULL, (double)n);
	metrics_head(out, "better_compute_sandbox_reconcile_pass_seconds", "gauge",
		     "Duration of this replica's last sandbox reconciler pass.");
	metrics_line(out, "better_compute_sandbox_reconcile_pass_seconds", NULL,
		     (double)__atomic_load_n(&last_pass_us, __ATOMIC_RELAXED) / 1e6);

	metrics_head(out, "better_compute_sandbox_ready_seconds", "histogram",
		     "Seconds from a sandbox's create to its readiness, by source (warm|cold).");
	if (db_exec(d, &r, "SELECT CASE WHEN warm THEN 'warm' ELSE 'cold' END src, count(*), "
		    "coalesce(sum(x), 0), " BUCKETS_11("x") " FROM (SELECT warm, extract(epoch FROM "
		    "ready_at - created_at) x FROM sandboxes WHERE ready_at IS NOT NULL) s GROUP BY "
		    "1 ORDER BY 1", NULL) == 0) {
		histogram(out, "better_compute_sandbox_ready_seconds", "source", r, ready_b,
			  ARRAY_SIZE(ready_b));
		PQclear(r);
	}
	metrics_head(out, "better_compute_sandbox_expiry_lag_seconds", "histogram",
		     "Seconds from a sandbox's expiresAt to its expiry by the reconciler.");
	if (db_exec(d, &r, "SELECT '', count(*), coalesce(sum(x), 0), " BUCKETS_10("x") " FROM "
		    "(SELECT greatest(0, extract(epoch FROM expired_at - expires_at)) x FROM "
		    "sandboxes WHERE expired_at IS NOT NULL) s", NULL) == 0) {
		histogram(out, "better_compute_sandbox_expiry_lag_seconds", NULL, r, lag_b,
			  ARRAY_SIZE(lag_b));
		PQclear(r);
	}
	warm_metrics_render(out, d);
}
