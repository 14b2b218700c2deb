/* warm.c: warm pools. A template with warm.min > 0 keeps that many warm
 * instances of its current instance_version booted and paused, so a
 * sandbox create can claim one instead of booting.
 *
 * A warm instance is an ordinary instance (instance_create_tx: admitted,
 * placed, charged to the tenant's quota, addressed) owned by the
 * template's author, with warm_template_id and warm_instance_version set
 * and ssh_from_host_only like any sandbox instance. It boots desired
 * running; the host's report that it runs flips it to desired paused in
 * the same transaction (a trigger of migrations/0006_warm.sql), and its
 * spec says pause_after_ready (node_spec.c): the host keeps it running
 * until its guest reported up, then pauses it. It is claimable once the
 * host reports it paused with its guest up (guest_ready_at set); one whose
 * guest has not reported up warm_boot_timeout_seconds after its creation
 * is drained (guest-never-ready) and replaced.
 *
 * The claim (WARM_CLAIM_CTE, warm.h) runs inside Sandboxes.Create's transaction;
 * the pool pass (warm_pass) runs on the sandbox reconciler's leader:
 * drains first, then at most WARM_REFILL_PER_PASS refills per template,
 * each in its own transaction that re-reads the template FOR SHARE (not
 * deleted, same instance_version). Refills are best effort: the first
 * refusal stops the template's refill for the pass with one log line.
 * Where the pool checks budgets the pass asks quota_billing_check, at most
 * once a minute per tenant: a spent budget skips refills, a drain offer
 * drains the pool to 0, a failed check leaves the pool as it is. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "authz.h"
#include "db.h"
#include "event_data.h"
#include "instances.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "outbox.h"
#include "quota.h"
#include "sandboxes.h"
#include "secrets.h"
#include "util.h"
#include "warm.h"

/* ------------------------------------------------------------------ claim */

void warm_claim_params(struct dbp *q, const struct warm_claim *w)
{
	/* the bind check: with identity, only a host advertising it */
	static const char *const caps[2][2] = {
		{CAP_SSH_HOST_ONLY, CAP_SSH_HOST_ONLY "\n" CAP_NETWORK_POLICY},
		{CAP_SSH_HOST_ONLY "\n" CAP_IDENTITY,
		 CAP_SSH_HOST_ONLY "\n" CAP_NETWORK_POLICY "\n" CAP_IDENTITY},
	};
	const struct principal *p = w->caller;

	dbp_str(q, w->template_id);
	dbp_i64(q, w->instance_version);
	dbp_str(q, caps[w->identity][strcmp(w->network, "egress") != 0]);
	dbp_i64(q, w->ttl_seconds);
	dbp_str(q, w->sandbox_id);
	dbp_str(q, *p->user_id ? p->user_id : p->id);
	dbp_nstr(q, *p->user_id ? p->id : NULL);
}

/* ----------------------------------------------------------------- budget */

/* The leader's answers, a minute per tenant (only its thread uses it). */
static struct {
	char tenant[64];
	enum quota_budget_state state;
	int64_t at_ms;
} budget_cache[64];

static const char *const budget_state_names[] = {
	[QUOTA_BUDGET_OK] = "ok", [QUOTA_BUDGET_SPENT] = "spent",
	[QUOTA_BUDGET_STOP_NEW] = "stop-new", [QUOTA_BUDGET_DRAIN] = "drain",
};

static int budget_state(struct db *d, const char *tenant, enum quota_budget_state *ret)
{
	size_t i, slot = 0;
	int rc;

	for (i = 0; i < ARRAY_SIZE(budget_cache); i++) {
		if (strcmp(budget_cache[i].tenant, tenant) == 0 &&
		    mono_ms() - budget_cache[i].at_ms < WARM_BUDGET_CACHE_MS) {
			*ret = budget_cache[i].state;
			return 0;
		}
		if (budget_cache[i].at_ms < budget_cache[slot].at_ms)
			slot = i;
	}
	if ((rc = quota_billing_check(d, tenant, ret)) < 0)
		return rc;
	snprintf(budget_cache[slot].tenant, sizeof(budget_cache[slot].tenant), "%s", tenant);
	budget_cache[slot].state = *ret;
	budget_cache[slot].at_ms = mono_ms();
	log_debug("warm: tenant %s: budget %s, kept %d s", tenant, budget_state_names[*ret],
		  WARM_BUDGET_CACHE_MS / 1000);
	return 0;
}

/* ------------------------------------------------------------------ drain */

struct pool {
	char id[64], tenant[64];
	int version, min, max;
	bool deleted, needs_netpol, checks_budget;
	bool names_secrets;   /* stale warm instances are drained first */
	bool broker;          /* a secret broker is configured */
	int64_t default_ttl;  /* the template's default lifetime, s */
	int64_t boot_timeout; /* warm_boot_timeout_seconds */
	const struct ctl_app *app;   /* the sandbox SSH CA, certifyHostKey */
	int64_t live, good;
};

/* A warm instance whose host certificate no longer covers the template's
 * default lifetime ($6, seconds): nothing renews a certificate, so it is
 * recycled (a claim of the default lifetime would pass it by). */
#define WARM_CERT_SHORT                                                                    \
	"coalesce(i.host_cert_valid_before < now() + make_interval(secs => $6::int), false)"

/* A warm instance whose guest has not reported up $7 seconds after its
 * creation: it never will, or too late (a paused one from before 0018
 * was paused before its guest booted). */
#define WARM_NEVER_READY                                                                   \
	"(i.guest_ready_at IS NULL AND i.created_at < now() - make_interval(secs => "        \
	"$7::int))"

/* Warm instances that are not claimable any more (older instance_version,
 * error or lost, whose guest never reported up (WARM_NEVER_READY), on a
 * host without the network-policy capability the
 * template needs, for a template naming secrets stale or made without
 * recorded versions, with a host certificate that no longer covers the
 * template's default lifetime) and, among the rest, those beyond max, newest first
 * (claims take the oldest). The UPDATE re-checks warm_template_id, so an
 * instance claimed meanwhile is never drained. */
#define DRAIN_SQL                                                                          \
	"WITH live AS (SELECT i.id, i.created_at, (i.warm_instance_version IS DISTINCT FROM "  \
	"$2::int OR i.state IN ('error', 'lost') OR ($3 AND i.node_id IS NOT NULL AND NOT "    \
	"coalesce(n.labels ? '" CAP_NETWORK_POLICY "', false)) OR ($5 AND (i."                \
	"warm_secret_versions IS NULL OR " WARM_SECRETS_STALE("i") ")) OR " WARM_CERT_SHORT     \
	" OR " WARM_NEVER_READY ") AS bad, " WARM_CERT_SHORT " AS cert_short, "                 \
	WARM_NEVER_READY " AS never_ready FROM instances i LEFT "                              \
	"JOIN nodes n ON n.id = i.node_id WHERE i.warm_template_id = $1 AND i.desired_state "  \
	"<> 'deleted'), r AS (SELECT id, bad, row_number() OVER (PARTITION BY bad ORDER BY "   \
	"created_at, id) rn, cert_short, never_ready FROM live), u AS (UPDATE instances i "   \
	"SET "                                                                                 \
	"desired_state = 'deleted', state = 'deleting', updated_at = now() FROM r WHERE "     \
	"i.id = r.id AND "                                                                     \
	"(r.bad OR r.rn > $4::int) AND i.warm_template_id = $1 AND i.desired_state <> "        \
	"'deleted' RETURNING i.id, i.node_id, i.tenant_id, r.bad, r.cert_short, "              \
	"r.never_ready) SELECT u.id, u.node_id, u.tenant_id, u.bad, coalesce(n.state, ''), "   \
	"u.cert_short, u.never_ready FROM u LEFT JOIN "                                        \
	"nodes n ON n.id = u.node_id ORDER BY u.id"
/* DRAIN_SQL's columns, in its order */
enum {
	DRAIN_ID, DRAIN_NODE_ID, DRAIN_TENANT_ID, DRAIN_BAD, DRAIN_NODE_STATE, DRAIN_CERT_SHORT,
	DRAIN_NEVER_READY
};

static int drained_one(struct db *d, const struct pool *pl, const PGresult *r, int i)
{
	_cleanup_free_ char *data = NULL;
	const char *why;
	char subject[96];
	int rc;

	snprintf(subject, sizeof(subject), "instance/%s", db_val(r, i, DRAIN_ID));
	why = pl->deleted ? "template-deleted"
	      : PQnfields(r) > DRAIN_NEVER_READY && db_bool(r, i, DRAIN_NEVER_READY)
		      ? "guest-never-ready"
	      : PQnfields(r) > DRAIN_CERT_SHORT && db_bool(r, i, DRAIN_CERT_SHORT)
		      ? "warm-host-certificate"
	      : db_bool(r, i, DRAIN_BAD) ? "warm-stale" : "warm-beyond-max";
	rc = evd_instance("instance.deleting", &(struct evd_instance){.warm_template_id = pl->id,
			  .reason = why}, &data);
	if (rc == 0)
		rc = event_publish(d, "instance.deleting", subject, db_val(r, i, DRAIN_TENANT_ID), data);
	if (rc < 0)
		return rc;
	if (strcmp(why, "guest-never-ready") == 0)
		log_warn("warm: template %s: warm instance %s drained: its guest did not report "
			 "up within %" PRId64 " s of its creation (guest-never-ready)", pl->id,
			 db_val(r, i, DRAIN_ID), pl->boot_timeout);
	/* unplaced, or on a host that will never confirm (lost, retired):
	 * finished at once, its booking and address released */
	if (!db_val(r, i, DRAIN_NODE_ID) || strcmp(db_val(r, i, DRAIN_NODE_STATE), "lost") == 0 ||
	    strcmp(db_val(r, i, DRAIN_NODE_STATE), "retired") == 0)
		return finish_deletions(d, NULL, db_val(r, i, DRAIN_ID)) < 0 ? -EIO : 0;
	return spec_bump_instance(d, db_val(r, i, DRAIN_NODE_ID), db_val(r, i, DRAIN_ID));
}

/* warm_retire_stale's statement: DRAIN_SQL's columns, stale ones only. */
#define RETIRE_SQL                                                                         \
	"WITH c AS (SELECT i.id FROM instances i WHERE i.warm_template_id = $1 AND "          \
	"i.desired_state <> 'deleted' AND i.warm_secret_versions IS NOT NULL AND "            \
	WARM_SECRETS_STALE("i") " ORDER BY i.created_at, i.id LIMIT $2::int FOR UPDATE OF i " \
	"SKIP LOCKED), u AS (UPDATE instances i SET desired_state = 'deleted', state = "      \
	"'deleting', updated_at = now() FROM c WHERE i.id = c.id AND i.warm_template_id = $1 " \
	"RETURNING i.id, i.node_id, i.tenant_id, true AS bad) SELECT u.id, u.node_id, "       \
	"u.tenant_id, u.bad, coalesce(n.state, '') FROM u LEFT JOIN nodes n ON n.id = "       \
	"u.node_id ORDER BY u.id"

int warm_retire_stale(struct db *d, const char *template_id, int limit, int *ret_n,
		      bc_error *err)
{
	struct pool pl = {0};
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	snprintf(pl.id, sizeof(pl.id), "%s", template_id);
	dbp_str(&p, template_id);
	dbp_i64(&p, limit);
	if ((rc = db_exec(d, &r, RETIRE_SQL, &p)) < 0)
		return db_fail(err, rc);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++)
		rc = drained_one(d, &pl, r, i);
	if (rc == 0)
		*ret_n = PQntuples(r);
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

struct drain {
	const struct pool *pl;
	int max;
	int drained;
	int64_t good;      /* out: claimable or booting instances left */
};

static int drain_tx(struct db *d, void *arg, bc_error *err)
{
	struct drain *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	_cleanup_free_ char *left = NULL;
	int rc;

	dbp_str(&p, a->pl->id);
	dbp_i64(&p, a->pl->deleted ? -1 : a->pl->version);
	dbp_bool(&p, a->pl->needs_netpol);
	dbp_i64(&p, a->max);
	dbp_bool(&p, a->pl->names_secrets);
	dbp_i64(&p, a->pl->default_ttl);
	dbp_i64(&p, a->pl->boot_timeout);
	if ((rc = db_exec(d, &r, DRAIN_SQL, &p)) < 0)
		return db_fail(err, rc);
	a->drained = PQntuples(r);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++)
		rc = drained_one(d, a->pl, r, i);
	PQclear(r);
	if (rc < 0)
		return db_fail(err, rc);
	p.n = 1;
	if ((rc = db_scalar(d, "SELECT count(*) FROM instances WHERE warm_template_id = $1 AND "
			    "desired_state <> 'deleted'", &p, &left)) < 0)
		return db_fail(err, rc);
	a->good = left ? strtoll(left, NULL, 10) : 0;
	return 0;
}

/* ----------------------------------------------------------------- refill */

struct refill {
	const struct pool *pl;
	char instance[64];
	char node[64];
};

/* The template again, in this transaction: FOR SHARE, not deleted, the
 * same instance_version as the pass saw. */
enum {
	RT_TENANT_ID, RT_POOL_ID, RT_FLAVOR, RT_IMAGE_ID, RT_NETWORK, RT_USER_DATA,
	RT_CREATED_BY, RT_CREATOR_KIND, RT_ENV, RT_NAMES_SECRETS, RT_IDENTITY
}; /* refill_template's columns, in its SELECT's order */
static int refill_template(struct db *d, const struct pool *pl, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, pl->id);
	dbp_i64(&p, pl->version);
	return db_one(d, ret, "SELECT t.tenant_id, t.pool_id, f.name, t.image_id, t.network, "
		      "t.user_data, t.created_by, coalesce(idn.kind, 'user'), t.env::text, "
		      "t.names_secrets, t.identity FROM sandbox_templates t "
		      "JOIN flavors f ON f.id = t.flavor_id LEFT JOIN identities idn ON idn.id = "
		      "t.created_by WHERE t.id = $1 AND t.deleted_at IS NULL AND t.instance_version = "
		      "$2::int FOR SHARE OF t", &p, err, "template %s was deleted or changed since the "
		      "pass began", pl->id);
}

/* The versions of the secrets warm instance id was given. */
static int record_versions(struct db *d, const char *id, const char *versions, bc_error *err)
{
	struct dbp p = {0};
	int rc;

	dbp_str(&p, id);
	dbp_str(&p, versions);
	rc = db_exec(d, NULL, "UPDATE instances SET warm_secret_versions = $2::jsonb WHERE id = $1",
		     &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int refill_tx(struct db *d, void *arg, bc_error *err)
{
	struct refill *a = arg;
	struct principal owner = {.kind = PRINCIPAL_IDENTITY};
	struct secrets_resolved sec = {0};
	struct bootdata_ssh_ca ca;
	struct inst_new n;
	PGresult *t = NULL;
	int rc;

	if ((rc = refill_template(d, a->pl, &t, err)) < 0)
		return rc;
	if (db_bool(t, 0, RT_NAMES_SECRETS) &&
	    (rc = secrets_resolve(a->pl->broker, d, db_val(t, 0, RT_TENANT_ID),
				  db_val(t, 0, RT_ENV), db_val(t, 0, RT_USER_DATA), &sec, err)) < 0) {
		PQclear(t);
		return rc;
	}
	snprintf(owner.id, sizeof(owner.id), "%s", db_val(t, 0, RT_CREATED_BY));
	snprintf(owner.tenant_id, sizeof(owner.tenant_id), "%s", db_val(t, 0, RT_TENANT_ID));
	snprintf(owner.identity_kind, sizeof(owner.identity_kind), "%s",
		 db_val(t, 0, RT_CREATOR_KIND));
	n = (struct inst_new){.tenant = db_val(t, 0, RT_TENANT_ID),
			      .pool_id = db_val(t, 0, RT_POOL_ID),
			      .flavor = db_val(t, 0, RT_FLAVOR),
			      .image_id = db_val(t, 0, RT_IMAGE_ID),
			      .policy = db_val(t, 0, RT_NETWORK),
			      .user_data = sec.user_data ? sec.user_data : db_val(t, 0, RT_USER_DATA),
			      .env = sec.env, .n_env = sec.n_env,
			      .ssh_from_host_only = true, .warm_template_id = a->pl->id,
			      .warm_instance_version = a->pl->version, .owner = &owner,
			      /* a claim with identity delivers its value through the host */
			      .identity_host = !strcmp(db_val(t, 0, RT_IDENTITY), "on") ||
					       (!strcmp(db_val(t, 0, RT_IDENTITY), "default") &&
						a->pl->app->cfg.identity_enabled)};
	if ((rc = sbx_guest_trust(a->pl->app, &n, &ca, err)) == 0)
		rc = instance_create_tx(NULL, d, &n, err);
	if (rc == 0 && sec.versions)
		rc = record_versions(d, n.id, sec.versions, err);
	if (rc == 0 && !n.node)
		rc = bc_error_set(err, BC_CAPACITY_UNAVAILABLE, "no host of pool %s with room "
				  "carries the capabilities a sandbox needs", n.pool_id);
	if (rc == 0) {
		snprintf(a->instance, sizeof(a->instance), "%s", n.id);
		snprintf(a->node, sizeof(a->node), "%s", n.node);
	}
	free(n.node);
	secrets_resolved_free(&sec);
	PQclear(t);
	return rc;
}

static void refill(struct db *d, const struct pool *pl, int64_t good)
{
	int64_t want = pl->min - good;
	int made = 0;

	for (; want > 0 && made < WARM_REFILL_PER_PASS; want--) {
		struct refill a = {.pl = pl};
		bc_error err = {0};
		if (db_tx(d, "READ COMMITTED", refill_tx, &a, &err) < 0) {
			log_warn("warm: template %s: warm sandbox instance not created: %s "
				 "(next pass tries again)", pl->id, err.message);
			break;
		}
		log_info("warm: template %s: warm instance %s created on %s", pl->id, a.instance,
			 a.node);
		made++;
	}
}

/* ------------------------------------------------------------------- pass */

#define POOLS_SQL                                                                          \
	"SELECT t.id, t.tenant_id, t.instance_version, t.warm_min, t.warm_max, t.deleted_at "  \
	"IS NOT NULL, t.network <> 'egress', p.budget_check = 'meter' OR EXISTS (SELECT 1 "     \
	"FROM offers o WHERE o.tenant_id = t.tenant_id AND o.spend_limit_cents IS NOT NULL "    \
	"AND o.on_budget_exceeded IN ('stop-new', 'drain')), t.names_secrets, "               \
	"t.default_ttl_seconds FROM "                                                          \
	"sandbox_templates t JOIN "                                                            \
	"pools p ON p.id = t.pool_id WHERE (t.deleted_at IS NULL AND t.warm_min > 0) OR "       \
	"EXISTS (SELECT 1 FROM instances i WHERE i.warm_template_id = t.id AND "                \
	"i.desired_state <> 'deleted') ORDER BY t.id"
/* POOLS_SQL's columns, in its order */
enum {
	POOL_ID, POOL_TENANT_ID, POOL_VERSION, POOL_MIN, POOL_MAX, POOL_DELETED,
	POOL_NEEDS_NETPOL, POOL_CHECKS_BUDGET, POOL_NAMES_SECRETS, POOL_DEFAULT_TTL
};

static void pool_from_row(const PGresult *r, int i, struct pool *pl)
{
	snprintf(pl->id, sizeof(pl->id), "%s", db_val(r, i, POOL_ID));
	snprintf(pl->tenant, sizeof(pl->tenant), "%s", db_val(r, i, POOL_TENANT_ID));
	pl->version = (int)db_i64(r, i, POOL_VERSION);
	pl->min = (int)db_i64(r, i, POOL_MIN);
	pl->max = (int)db_i64(r, i, POOL_MAX);
	pl->deleted = db_bool(r, i, POOL_DELETED);
	pl->needs_netpol = db_bool(r, i, POOL_NEEDS_NETPOL);
	pl->checks_budget = db_bool(r, i, POOL_CHECKS_BUDGET);
	pl->names_secrets = db_bool(r, i, POOL_NAMES_SECRETS);
	pl->default_ttl = db_i64(r, i, POOL_DEFAULT_TTL);
}

static void pool_pass(struct db *d, struct pool *pl)
{
	enum quota_budget_state b = QUOTA_BUDGET_OK;
	struct drain a = {.pl = pl, .max = pl->deleted ? 0 : pl->max};
	bc_error err = {0};

	if (!pl->deleted && pl->checks_budget) {
		if (budget_state(d, pl->tenant, &b) < 0) {
			log_warn("warm: template %s: warm pool budget check failed; the pool is left "
				 "as it is", pl->id);
			return;
		}
		if (b == QUOTA_BUDGET_DRAIN)
			a.max = 0;
	}
	if (db_tx(d, "READ COMMITTED", drain_tx, &a, &err) < 0) {
		log_warn("warm: template %s: drain failed: %s", pl->id, err.message);
		return;
	}
	if (a.drained)
		log_info("warm: template %s: %d warm instances drained", pl->id, a.drained);
	if (pl->deleted || b != QUOTA_BUDGET_OK)
		return; /* a spent budget skips refills */
	refill(d, pl, a.good);
}

void warm_pass(struct db *d, const struct ctl_app *app)
{
	PGresult *r = NULL;
	int rc = db_exec(d, &r, POOLS_SQL, NULL);

	if (rc < 0) {
		log_warn("warm: reading the pools failed (%d)", rc);
		return;
	}
	for (int i = 0; i < PQntuples(r); i++) {
		struct pool pl;
		pool_from_row(r, i, &pl);
		pl.broker = secrets_broker(app);
		pl.app = app;
		pl.boot_timeout = app->cfg.warm_boot_timeout_seconds;
		pool_pass(d, &pl);
	}
	PQclear(r);
}

/* ---------------------------------------------------------------- metrics */

void warm_metrics_render(FILE *out, struct db *d)
{
	enum { M_TEMPLATE, M_STATE, M_COUNT };
	PGresult *r = NULL;

	metrics_head(out, "better_compute_sandbox_warm_instances", "gauge",
		     "Warm instances per template and state (deleting: being drained; booting: "
		     "running or paused, its guest not reported up yet).");
	if (db_exec(d, &r, "SELECT warm_template_id, CASE WHEN desired_state = 'deleted' THEN "
		    "'deleting' WHEN state IN ('running', 'paused') AND guest_ready_at IS NULL THEN "
		    "'booting' ELSE state END, count(*) FROM instances WHERE warm_template_id IS "
		    "NOT NULL AND state <> 'deleted' GROUP BY 1, 2 ORDER BY 1, 2", NULL) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++) {
		char labels[160];
		snprintf(labels, sizeof(labels), "template=\"%s\",state=\"%s\"",
			 db_val(r, i, M_TEMPLATE), db_val(r, i, M_STATE));
		metrics_line(out, "better_compute_sandbox_warm_instances", labels,
			     (double)db_i64(r, i, M_COUNT));
	}
	PQclear(r);
}
