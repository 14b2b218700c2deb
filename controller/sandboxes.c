/* sandboxes.c: the Sandboxes API (Create, Get, List, Extend, Delete). A
 * sandbox is one instance made from a template, with a lifetime. Create is
 * draft-then-decide like an instance: in one transaction the sandbox's
 * authorization row is staged with the requested shape and lifetime,
 * compute:sandboxes:create is decided on it, and the instance goes through
 * the same create path as Instances.Create (quota, budget, lease,
 * placement; ssh_from_host_only set, so it lands only on nodes that
 * enforce it). Readiness comes from the instance's own transaction (a
 * trigger of migrations/0005_sandboxes.sql), expiry and deleted marking
 * from the sandbox reconciler (sandbox_reconcile.c).
 *
 * Extend decides compute:sandboxes:update with a pending ttlSeconds equal
 * to the whole lifetime after the change; one extend at a time holds the
 * pending value (a server-minted hold), and only the absolute expiry that
 * was decided is applied. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "idem.h"
#include "identity.h"
#include "jsonw.h"
#include "instances.h"
#include "ipam.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "quota.h"
#include "rowmsg.h"
#include "sandbox_exec.h"
#include "sandbox_restore.h"
#include "sandbox_ca.h"
#include "sandboxes.h"
#include "snapshots.h"
#include "volume_attach.h"
#include "secrets.h"
#include "sshcert.h"
#include "util.h"
#include "validate.h"
#include "waiter.h"
#include "warm.h"
#include "watch.h"

#define WAIT_MAX_MS 30000

#define SBX_COLS                                                                           \
	"s.id, s.tenant_id, s.template_id, s.pool_id, s.instance_id, s.state, s.warm, "       \
	"s.ttl_seconds, " MS("s.expires_at") ", " MS("s.created_at") ", " MS("s.updated_at")  \
	", coalesce(" MS("s.ready_at") ", 0), coalesce(" MS("s.expired_at") ", 0), coalesce(" \
	MS("s.deleted_at") ", 0), s.created_by, s.owner_id, coalesce(i.node_id, ''), "       \
	"i.state, i.reason, coalesce(s.agent_id, ''), i.flavor_name, i.image_id, "            \
	"i.network_policy, i.vcpus, i.memory_mib, i.disk_gib, i.gpus, coalesce(i.mac::text, " \
	"''), coalesce((SELECT host(l.address) FROM ip_leases l WHERE l.instance_id = i.id "  \
	"LIMIT 1), ''), coalesce(" MS("i.guest_ready_at") ", 0), coalesce((SELECT CASE WHEN " \
	"rs.include_memory THEN (i.identity_rebound_at IS NOT NULL)::text END FROM "            \
	"sandbox_snapshots rs WHERE rs.id = i.restore_snapshot_id), '')" WID_SBX_COLS
#define SBX_FROM " FROM sandboxes s JOIN instances i ON i.id = s.instance_id "

/* The columns of SBX_COLS, in its order: the two must stay in step. */
enum {
	SBX_ID, SBX_TENANT_ID, SBX_TEMPLATE_ID, SBX_POOL_ID, SBX_INSTANCE_ID, SBX_STATE, SBX_WARM,
	SBX_TTL_SECONDS, SBX_EXPIRES_AT, SBX_CREATED_AT, SBX_UPDATED_AT, SBX_READY_AT,
	SBX_EXPIRED_AT, SBX_DELETED_AT, SBX_CREATED_BY, SBX_OWNER_ID, SBX_NODE_ID,
	SBX_INSTANCE_STATE, SBX_REASON, SBX_AGENT, SBX_FLAVOR, SBX_IMAGE, SBX_NET, SBX_VCPUS,
	SBX_MEM, SBX_DISK, SBX_GPUS, SBX_MAC, SBX_IPV4, SBX_GUEST_READY_AT, SBX_REBOUND, SBX_IDN,
	SBX_NCOLS = SBX_IDN + WID_SBX_NCOLS
};
COLS_CHECK(SBX_COLS, SBX_NCOLS)

struct sbx_row {
	Bc__Compute__V1__Sandbox *x;
	char agent[64];
	char flavor[64], image[64], network[16];
	int64_t vcpus, memory_mib, disk_gib, gpus;
};

static void sbx_from_row(rpc_call *c, const PGresult *r, int i, struct sbx_row *o)
{
	Bc__Compute__V1__Sandbox *x = rpc_new(c, &bc__compute__v1__sandbox__descriptor);

	x->id = row_str(c, r, i, SBX_ID);
	x->tenant_id = row_str(c, r, i, SBX_TENANT_ID);
	x->template_id = row_str(c, r, i, SBX_TEMPLATE_ID);
	x->pool_id = row_str(c, r, i, SBX_POOL_ID);
	x->instance_id = row_str(c, r, i, SBX_INSTANCE_ID);
	x->state = row_str(c, r, i, SBX_STATE);
	x->warm = db_bool(r, i, SBX_WARM);
	x->ttl_seconds = db_i64(r, i, SBX_TTL_SECONDS);
	x->expires_at = db_i64(r, i, SBX_EXPIRES_AT);
	x->created_at = db_i64(r, i, SBX_CREATED_AT);
	x->updated_at = db_i64(r, i, SBX_UPDATED_AT);
	x->ready_at = db_i64(r, i, SBX_READY_AT);
	x->expired_at = db_i64(r, i, SBX_EXPIRED_AT);
	x->deleted_at = db_i64(r, i, SBX_DELETED_AT);
	x->created_by = row_str(c, r, i, SBX_CREATED_BY);
	x->owner_id = row_str(c, r, i, SBX_OWNER_ID);
	x->node_id = row_str(c, r, i, SBX_NODE_ID);
	x->instance_state = row_str(c, r, i, SBX_INSTANCE_STATE);
	x->reason = row_str(c, r, i, SBX_REASON);
	x->guest_ready_at = db_i64(r, i, SBX_GUEST_READY_AT);
	if (*db_val(r, i, SBX_REBOUND)) {  /* a memory restore: its identity rebind */
		x->identity_rebound_set_case = BC__COMPUTE__V1__SANDBOX__IDENTITY_REBOUND_SET_IDENTITY_REBOUND;
		x->identity_rebound = db_bool(r, i, SBX_REBOUND);
	}
	wid_sbx_fill(c, r, i, SBX_IDN, x);
	if (*db_val(r, i, SBX_MAC) || *db_val(r, i, SBX_IPV4)) {
		Bc__Compute__V1__Nic *n = rpc_new(c, &bc__compute__v1__nic__descriptor);
		char tap[16];
		ipam_tap_name(x->instance_id, 0, tap);
		n->name = rpc_strdup(c, tap);
		n->mac = row_str(c, r, i, SBX_MAC);
		n->ipv4 = row_str(c, r, i, SBX_IPV4);
		x->nics = rpc_alloc(c, sizeof(*x->nics));
		x->nics[0] = n;
		x->n_nics = 1;
	}
	o->x = x;
	snprintf(o->agent, sizeof(o->agent), "%s", db_val(r, i, SBX_AGENT));
	snprintf(o->flavor, sizeof(o->flavor), "%s", db_val(r, i, SBX_FLAVOR));
	snprintf(o->image, sizeof(o->image), "%s", db_val(r, i, SBX_IMAGE));
	snprintf(o->network, sizeof(o->network), "%s", db_val(r, i, SBX_NET));
	o->vcpus = db_i64(r, i, SBX_VCPUS);
	o->memory_mib = db_i64(r, i, SBX_MEM);
	o->disk_gib = db_i64(r, i, SBX_DISK);
	o->gpus = db_i64(r, i, SBX_GPUS);
}

static void attr_i64(struct authz_target *t, const char *name, int64_t v)
{
	char num[32];

	snprintf(num, sizeof(num), "%" PRId64, v);
	authz_attr(t, name, num);
}

/* What a decision sees of a sandbox: the shape of its instance (not of its
 * template's current flavor, which may have changed or gone), its
 * template, pool, lifetime and creator. */
struct sbx_shape {
	const char *id, *tenant, *pool, *template_id, *flavor, *image, *network, *created_by;
	const char *agent, *run;
	int64_t ttl, vcpus, memory_mib, disk_gib, gpus;
};

static void sbx_target(const struct sbx_shape *s, struct authz_target *t, char parent[128])
{
	*t = (struct authz_target){.type = "compute-sandbox", .id = s->id, .tenant_id = s->tenant,
				   .parent = parent,
				   .agent_id = s->agent && *s->agent ? s->agent : NULL};
	snprintf(parent, 128, "compute-pool/%s", s->pool);
	authz_attr(t, "poolId", s->pool);
	authz_attr(t, "templateId", s->template_id);
	authz_attr(t, "flavor", s->flavor);
	authz_attr(t, "imageId", s->image);
	authz_attr(t, "networkPolicy", s->network);
	authz_attr(t, "createdBy", s->created_by);
	if (s->run && *s->run)
		authz_attr(t, "run", s->run);
	attr_i64(t, "ttlSeconds", s->ttl);
	attr_i64(t, "vcpus", s->vcpus);
	attr_i64(t, "memoryMib", s->memory_mib);
	attr_i64(t, "diskGiB", s->disk_gib);
	attr_i64(t, "gpus", s->gpus);
}

static int sbx_decide(rpc_call *c, const char *action, const struct sbx_row *o, bc_error *err)
{
	const Bc__Compute__V1__Sandbox *x = o->x;
	struct sbx_shape s = {.id = x->id, .tenant = x->tenant_id, .pool = x->pool_id,
			      .template_id = x->template_id, .flavor = o->flavor,
			      .image = o->image, .network = o->network,
			      .created_by = x->created_by, .agent = o->agent, .run = x->run,
			      .ttl = x->ttl_seconds, .vcpus = o->vcpus,
			      .memory_mib = o->memory_mib, .disk_gib = o->disk_gib, .gpus = o->gpus};
	struct authz_target t;
	char parent[128];

	sbx_target(&s, &t, parent);
	return authz_decide(c, ctl_db(c), action, &t, err);
}

/* The SBX_COLS row of one sandbox of tenant, deleted ones included. */
static int sbx_read(rpc_call *c, const char *tenant, const char *id, PGresult **ret,
		    bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	return db_one(ctl_db(c), ret, "SELECT " SBX_COLS SBX_FROM "WHERE s.id = $1 AND "
		      "s.tenant_id = $2", &p, err, "sandbox %s not found", id);
}

/* Read one sandbox of tenant, deleted ones included. */
static int sbx_fetch(rpc_call *c, const char *tenant, const char *id, struct sbx_row *o,
		     bc_error *err)
{
	PGresult *r = NULL;
	int rc;

	if ((rc = sbx_read(c, tenant, id, &r, err)) < 0)
		return rc;
	sbx_from_row(c, r, 0, o);
	PQclear(r);
	return 0;
}

int sbx_decide_brief(rpc_call *c, const char *tenant, const char *id, const char *action,
		     struct sbx_brief *b, bc_error *err)
{
	PGresult *r = NULL;
	struct sbx_shape s;
	struct authz_target t;
	char parent[128];
	int rc;

	if ((rc = sbx_read(c, tenant, id, &r, err)) < 0)
		return rc;
	s = (struct sbx_shape){.id = id, .tenant = tenant, .pool = db_val(r, 0, SBX_POOL_ID),
			       .template_id = db_val(r, 0, SBX_TEMPLATE_ID),
			       .flavor = db_val(r, 0, SBX_FLAVOR), .image = db_val(r, 0, SBX_IMAGE),
			       .network = db_val(r, 0, SBX_NET),
			       .created_by = db_val(r, 0, SBX_CREATED_BY),
			       .agent = db_val(r, 0, SBX_AGENT),
			       .run = db_val(r, 0, SBX_IDN + WID_SBX_RUN),
			       .ttl = db_i64(r, 0, SBX_TTL_SECONDS), .vcpus = db_i64(r, 0, SBX_VCPUS),
			       .memory_mib = db_i64(r, 0, SBX_MEM), .disk_gib = db_i64(r, 0, SBX_DISK),
			       .gpus = db_i64(r, 0, SBX_GPUS)};
	sbx_target(&s, &t, parent);
	rc = authz_decide(c, ctl_db(c), action, &t, err);
	if (rc == 0) {
		snprintf(b->state, sizeof(b->state), "%s", db_val(r, 0, SBX_STATE));
		snprintf(b->instance_id, sizeof(b->instance_id), "%s", db_val(r, 0, SBX_INSTANCE_ID));
		snprintf(b->instance_state, sizeof(b->instance_state), "%s",
			 db_val(r, 0, SBX_INSTANCE_STATE));
		snprintf(b->node_id, sizeof(b->node_id), "%s", db_val(r, 0, SBX_NODE_ID));
		b->expires_at = db_i64(r, 0, SBX_EXPIRES_AT);
	}
	PQclear(r);
	return rc;
}

static void *sbx_answer(struct sbx_row *o)
{
	o->x->snapshots = NULL; /* Get fills them (snap_list_of_sandbox) */
	o->x->n_snapshots = 0;
	return &o->x->base;
}

/* ----------------------------------------------------------------- create */

struct screate {
	rpc_call *call;
	const Bc__Compute__V1__CreateSandboxRequest *q;
	const char *tenant;
	struct idem k;
	char id[64];
	char instance[64];
	bool reused;
	bool warm;               /* claimed from the template's warm pool */
	struct restore_src src;  /* fromSnapshot: what it restores (sandbox_restore.c) */
	struct wid_mint mint;    /* identity.h: the bootstrap value or the token */
	PGresult *row;           /* the new sandbox (SBX_COLS), once inserted */
};

static int check_create(const Bc__Compute__V1__CreateSandboxRequest *q, bc_error *err)
{
	int r;

	if (q->base.n_unknown_fields)
		return invalid(err, "request", "the request has unknown fields");
	if ((r = check_id(err, "templateId", "sbxt", q->template_id)) < 0)
		return r;
	if (q->ttl_seconds < 0 || q->ttl_seconds > SBX_TTL_MAX)
		return invalid(err, "ttlSeconds", "ttlSeconds must be between 1 and %d",
			       SBX_TTL_MAX);
	if (q->wait && (q->wait->timeout_ms < 0 || q->wait->timeout_ms > WAIT_MAX_MS))
		return invalid(err, "wait.timeoutMs", "wait.timeoutMs must be between 0 and %d",
			       WAIT_MAX_MS);
	if (*q->from_snapshot && (r = check_id(err, "fromSnapshot", "snap", q->from_snapshot)) < 0)
		return r;
	if ((r = wid_check_labels(q->task, q->run, q->agent, err)) < 0)
		return r;
	return idem_check_key(q->idempotency_key, err);
}

/* The template a create uses, read FOR SHARE so it cannot change under us. */
enum {
	TQ_POOL_ID, TQ_FLAVOR, TQ_IMAGE_ID, TQ_NETWORK, TQ_DEFAULT_TTL, TQ_MAX_TTL, TQ_USER_DATA,
	TQ_VCPUS, TQ_MEMORY_MIB, TQ_DISK_GIB, TQ_GPUS, TQ_WARM_MAX, TQ_INSTANCE_VERSION,
	TQ_ENV, TQ_NAMES_SECRETS
}; /* load_template's columns, in its SELECT's order */
static int load_template(struct db *d, struct screate *a, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, a->q->template_id);
	dbp_str(&p, a->tenant);
	return db_one(d, ret, "SELECT t.pool_id, f.name, t.image_id, t.network, "
		      "t.default_ttl_seconds, t.max_ttl_seconds, t.user_data, f.vcpus, "
		      "f.memory_mib, f.disk_gib, f.gpus, t.warm_max, t.instance_version, t.env::text, "
		      "t.names_secrets FROM "
		      "sandbox_templates t JOIN flavors f ON "
		      "f.id = t.flavor_id WHERE t.id = $1 AND t.tenant_id = $2 AND t.deleted_at IS "
		      "NULL FOR SHARE OF t", &p, err, "sandbox template %s not found",
		      a->q->template_id);
}

static int ttl_too_long(bc_error *err, int64_t ttl, int64_t max)
{
	invalid(err, "ttlSeconds", "a lifetime of %" PRId64 " s is above the template's "
		"maxTtlSeconds (%" PRId64 ")", ttl, max);
	return bc_error_detail(err, "maxTtlSeconds", "%" PRId64, max);
}

/* The sandbox's row, its authorization row made live (staged by
 * stage_and_claim) and sandbox.created, in one statement that returns the
 * answer's row (SBX_COLS) into a->row. */
static int insert_sandbox(struct db *d, struct screate *a, const char *pool, int64_t ttl,
			  bc_error *err)
{
	const struct principal *pr = ctl_principal(a->call);
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	int rc;

	rc = evd_sandbox("sandbox.created", &(struct evd_sandbox){.template_id = a->q->template_id,
			 .instance_id = a->instance, .pool_id = pool, .warm = a->warm}, &data);
	if (rc < 0)
		return db_fail(err, rc);
	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	dbp_str(&p, a->q->template_id);
	dbp_str(&p, pool);
	dbp_str(&p, a->instance);
	dbp_i64(&p, ttl);
	dbp_str(&p, pr->id);
	dbp_str(&p, *pr->user_id ? pr->user_id : pr->id);
	dbp_nstr(&p, *pr->user_id ? pr->id : NULL);
	dbp_bool(&p, a->warm);
	dbp_str(&p, data);
	PQclear(a->row); /* a retried transaction starts over */
	a->row = NULL;
	rc = db_exec(d, &a->row, "WITH z AS (UPDATE authz_resources SET draft = false WHERE type = "
		     "'compute-sandbox' AND id = $1), e AS (INSERT INTO events (type, subject, "
		     "tenant_id, data) VALUES ('sandbox.created', 'sandbox/' || $1, $2, "
		     "$11::jsonb)), s AS (INSERT INTO sandboxes (id, tenant_id, template_id, pool_id, "
		     "instance_id, ttl_seconds, expires_at, created_by, owner_id, agent_id, warm) "
		     "SELECT $1, $2, $3, $4, $5, least($6::int, floor(extract(epoch FROM c.valid_before - "
		     "now()))::int), least(now() + make_interval(secs => $6::int), c.valid_before), $7, "
		     "$8, $9, $10 FROM (SELECT (SELECT host_cert_valid_before FROM instances WHERE id = "
		     "$5) AS valid_before) c RETURNING *) SELECT " SBX_COLS " FROM s JOIN instances i "
		     "ON i.id = s.instance_id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(a->row) != 1)
		return bc_error_set(err, BC_INTERNAL, "sandbox %s: its instance %s is gone", a->id,
				    a->instance);
	return 0;
}

/* Publish sandbox event type of sandbox id with the data of row s. */
static int publish(struct db *d, const char *type, const char *id, const char *tenant,
		   const struct evd_sandbox *s)
{
	_cleanup_free_ char *data = NULL;
	char subject[96];
	int rc;

	snprintf(subject, sizeof(subject), "sandbox/%s", id);
	if ((rc = evd_sandbox(type, s, &data)) < 0)
		return rc;
	return event_publish(d, type, subject, tenant, data);
}

/* The warm path's statement: the claim (warm.h) and, on the instance it
 * took, what insert_sandbox writes for a cold create (the sandbox, its
 * authorization row made live; sandbox.created follows through publish,
 * in the same transaction), returning the answer's row (SBX_COLS, the
 * instance as claimed); no row when nothing was claimable. $8 tenant, $9
 * pool, $10 creator after the claim's. */
#define SBX_CLAIM_SQL                                                                      \
	WARM_CLAIM_CTE ", y AS (UPDATE authz_resources SET draft = false WHERE type = "       \
	"'compute-sandbox' AND id = $5 AND EXISTS (SELECT 1 FROM u)), s AS (INSERT INTO "     \
	"sandboxes (id, tenant_id, template_id, pool_id, instance_id, ttl_seconds, "          \
	"expires_at, created_by, owner_id, agent_id, warm) SELECT $5, $8, $1, $9, u.id, "      \
	"$4::int, now() + make_interval(secs => $4::int), $10, $6, $7, true FROM u RETURNING " \
	"*) SELECT " SBX_COLS ", pg_notify('" NODE_SPEC_CHANNEL "', i.node_id), pg_notify('"  \
	SBX_WAKE_CHANNEL "', 'warm') FROM s JOIN u i ON i.id = s.instance_id"

/* Stage the sandbox's authorization row and, for a template that keeps a
 * warm pool, check the budget and claim, all in one round trip (db_pipe:
 * none needs another's answer; a refusal rolls the claim back with the
 * rest), then decide compute:sandboxes:create over the staged row. A
 * refusal wins over a spent budget (SPEND_LIMIT_REACHED: a claim is new
 * work, as a cold create); claimed, a->warm and a->row say so; nothing
 * claimable (none settled yet, all taken, none of the current shape)
 * leaves a->warm false: a cold create. */
static int stage_and_claim(struct db *d, struct screate *a, const PGresult *t, int64_t ttl,
			   bc_error *err)
{
	const struct principal *p = ctl_principal(a->call);
	struct sbx_shape s = {.id = a->id, .tenant = a->tenant, .pool = db_val(t, 0, TQ_POOL_ID),
			      .template_id = a->q->template_id,
			      .flavor = db_val(t, 0, TQ_FLAVOR),
			      .image = db_val(t, 0, TQ_IMAGE_ID),
			      .network = db_val(t, 0, TQ_NETWORK),
			      .created_by = p->id, .run = a->q->run, .ttl = ttl,
			      .vcpus = db_i64(t, 0, TQ_VCPUS),
			      .memory_mib = db_i64(t, 0, TQ_MEMORY_MIB),
			      .disk_gib = db_i64(t, 0, TQ_DISK_GIB),
			      .gpus = db_i64(t, 0, TQ_GPUS)};
	struct warm_claim w = {.template_id = a->q->template_id, .sandbox_id = a->id,
			       .network = db_val(t, 0, TQ_NETWORK),
			       .instance_version = (int)db_i64(t, 0, TQ_INSTANCE_VERSION),
			       .ttl_seconds = ttl, .caller = p, .identity = a->mint.identity};
	bool pool = db_i64(t, 0, TQ_WARM_MAX) > 0 && !*a->q->from_snapshot; /* never a claim */
	struct dbp bp = {0}, cp = {0};
	struct authz_stage_q sq;
	struct authz_target at;
	struct db_q q[3];
	char parent[128];
	int rc;

	a->warm = false;
	sbx_target(&s, &at, parent);
	if (*a->q->from_snapshot)
		authz_attr(&at, "fromSnapshot", a->q->from_snapshot);
	authz_stage_q(&sq, p, &at);
	q[0] = (struct db_q){.sql = AUTHZ_STAGE_SQL, .p = &sq.p};
	dbp_str(&bp, a->tenant);
	dbp_str(&bp, s.pool);
	q[1] = (struct db_q){.sql = QUOTA_BUDGET_SQL, .p = &bp};
	warm_claim_params(&cp, &w);
	dbp_str(&cp, a->tenant);
	dbp_str(&cp, s.pool);
	dbp_str(&cp, p->id);
	q[2] = (struct db_q){.sql = SBX_CLAIM_SQL, .p = &cp};
	rc = db_pipe(d, q, pool ? 3 : 1);
	authz_stage_q_free(&sq);
	if (rc < 0)
		return db_fail(err, rc);
	rc = authz_decide_staged(a->call, d, "compute:sandboxes:create", at.type, at.id, err);
	if (rc == 0 && pool)
		rc = quota_budget_judge(q[1].r, err);
	if (rc == 0 && pool && PQntuples(q[2].r) == 1 &&
	    (rc = publish(d, "sandbox.created", a->id, a->tenant, &(struct evd_sandbox){
			  .template_id = a->q->template_id,
			  .instance_id = db_val(q[2].r, 0, SBX_INSTANCE_ID), .pool_id = s.pool,
			  .warm = true})) < 0)
		rc = db_fail(err, rc);
	if (rc == 0 && pool && PQntuples(q[2].r) == 1) {
		a->warm = true;
		snprintf(a->instance, sizeof(a->instance), "%s",
			 db_val(q[2].r, 0, SBX_INSTANCE_ID));
		PQclear(a->row); /* a retried transaction starts over */
		a->row = q[2].r;
		q[2].r = NULL;
	}
	PQclear(q[0].r);
	if (pool) {
		PQclear(q[1].r);
		PQclear(q[2].r);
	}
	return rc;
}

/* A template naming secrets: a claim first retires stale warm instances
 * (WARM_CLAIM_RETIRE_MAX; the claim itself skips any other stale one), and
 * only with a broker configured (INVALID_CONFIG, as a cold create's). */
static int before_claim(struct db *d, struct screate *a, const PGresult *t, bc_error *err)
{
	struct secrets_resolved none;
	int n = 0, rc;

	if (!db_bool(t, 0, TQ_NAMES_SECRETS))
		return 0;
	if (!secrets_broker(ctl_app(a->call)))
		return secrets_resolve(false, d, a->tenant, db_val(t, 0, TQ_ENV),
				       db_val(t, 0, TQ_USER_DATA), &none, err);
	if (db_i64(t, 0, TQ_WARM_MAX) == 0)
		return 0;
	rc = warm_retire_stale(d, a->q->template_id, WARM_CLAIM_RETIRE_MAX, &n, err);
	if (rc == 0 && n > 0)
		log_info("sandbox %s: %d stale warm instances of template %s retired", a->id, n,
			 a->q->template_id);
	return rc;
}

static int host_key_needs_broker(bc_error *err);

/* A cold create: the template's secrets resolved for the new instance. */
static int create_cold(struct db *d, struct screate *a, const PGresult *t, struct inst_new *n,
		       bc_error *err)
{
	struct secrets_resolved sec = {0};
	struct bootdata_ssh_ca ca;
	int rc;

	if ((rc = sbx_guest_trust(ctl_app(a->call), n, &ca, err)) < 0)
		return rc;
	if (db_bool(t, 0, TQ_NAMES_SECRETS) &&
	    (rc = secrets_resolve(secrets_broker(ctl_app(a->call)), d, a->tenant,
				  db_val(t, 0, TQ_ENV), db_val(t, 0, TQ_USER_DATA), &sec, err)) < 0)
		return rc;
	if (sec.user_data)
		n->user_data = sec.user_data;
	n->env = sec.env;
	n->n_env = sec.n_env;
	rc = instance_create_tx(a->call, d, n, err);
	if (rc == 0 && n->host_cert_valid_before)
		log_info("sandbox %s: instance %s has a host certificate until %" PRId64, a->id,
			 n->id, n->host_cert_valid_before);
	n->user_data = NULL;
	n->env = NULL;
	secrets_resolved_free(&sec);
	return rc;
}

static int screate_tx(struct db *d, void *arg, bc_error *err)
{
	struct screate *a = arg;
	_cleanup_free_ char *existing = NULL;
	struct inst_new n = {0};
	struct va_attach va;
	PGresult *t = NULL;
	int64_t ttl;
	int rc;

	a->reused = false;
	if ((rc = idem_lookup(d, &a->k, &existing, err)) < 0)
		return rc;
	if (existing) {
		snprintf(a->id, sizeof(a->id), "%s", existing);
		a->reused = true;
		return 0;
	}
	if ((rc = quota_sandboxes(d, a->tenant, err)) < 0 ||
	    (rc = load_template(d, a, &t, err)) < 0)
		return rc;
	ttl = a->q->ttl_seconds ? a->q->ttl_seconds : db_i64(t, 0, TQ_DEFAULT_TTL);
	if (ttl > db_i64(t, 0, TQ_MAX_TTL)) {
		rc = ttl_too_long(err, ttl, db_i64(t, 0, TQ_MAX_TTL));
		goto out;
	}
	id_new("sbx", a->id, sizeof(a->id));
	/* certifyHostKey without a broker refuses before any claim: a warm
	 * claim would hand out a guest its configuration cannot make again */
	if (sbx_certify_host_key(ctl_app(a->call)) && !secrets_broker(ctl_app(a->call))) {
		rc = host_key_needs_broker(err);
		goto out;
	}
	if (*a->q->from_snapshot && (rc = restore_check(a->call, d, a->tenant, a->q->from_snapshot,
							  a->q->template_id, &a->src, err)) < 0)
		goto out;
	if ((rc = wid_prepare(d, ctl_app(a->call), a->q->template_id, ctl_principal(a->call),
			      &a->mint, err)) < 0 || (rc = before_claim(d, a, t, err)) < 0 ||
	    (rc = stage_and_claim(d, a, t, ttl, err)) < 0)
		goto out;
	n = (struct inst_new){.tenant = a->tenant, .pool_id = db_val(t, 0, TQ_POOL_ID),
			      .flavor = db_val(t, 0, TQ_FLAVOR),
			      .image_id = db_val(t, 0, TQ_IMAGE_ID),
			      .policy = db_val(t, 0, TQ_NETWORK),
			      .user_data = db_val(t, 0, TQ_USER_DATA),
			      .sandbox_id = a->id, .ssh_from_host_only = true,
			      .restore_cpu_model = a->src.memory ? a->src.cpu_model : NULL,
			      .identity_bootstrap = a->mint.bootstrap, .sandbox_token = a->mint.token};
	if (!a->warm && (rc = va_prepare_tx(d, a->q->template_id, &va, err)) < 0)
		goto out;
	n.volumes = a->warm ? NULL : &va;   /* attached before placement (volume_attach.c) */
	if (!a->warm && (rc = create_cold(d, a, t, &n, err)) < 0)
		goto out;
	if (!a->warm)
		snprintf(a->instance, sizeof(a->instance), "%s", n.id);
	if (*a->q->from_snapshot &&
	    (rc = restore_bind(d, ctl_app(a->call), a->tenant, n.id, &a->src, err)) < 0)
		goto out;
	if (!a->warm && (rc = insert_sandbox(d, a, n.pool_id, ttl, err)) < 0)
		goto out;
	if ((rc = wid_bind(d, ctl_app(a->call), &a->mint, &(struct wid_bind_in){.sandbox_id = a->id,
			   .instance_id = a->instance, .tenant_id = a->tenant, .task = a->q->task,
			   .run = a->q->run, .agent = a->q->agent, .warm = a->warm,
			   .creator = ctl_principal(a->call)}, err)) < 0)
		goto out;
	rc = idem_record(d, &a->k, a->id, err);
out:
	free(n.node);
	PQclear(t);
	return rc;
}

/* Re-read until the sandbox leaves starting or time is up; the last read
 * is the answer either way. A waiting create sleeps on its instance's key
 * in the watch registry: the host report that changes the instance's state
 * (and stamps readiness in its transaction) wakes it once committed, when
 * the report reached this controller (node_report.c); a report through another
 * replica, or readiness stamped by the reconciler, is seen at the next
 * re-read, every WAIT_REREAD_MS. Nothing else wakes it, so waiting creates
 * cost no reads while other claims' events go by.
 *
 * Over gRPC the create is detached and waits in the waiter thread
 * (waiter.c, sbx_waiter_kind below), which holds no worker; at most
 * max_waiting_creates wait there, past that a create answers with its
 * first read. Where a call cannot be detached (the JSON/HTTP transport)
 * it waits inline on its worker, at most half the workers at once (as for
 * instances). */
#define WAIT_REREAD_MS 20

static bool sbx_settled(const char *state)
{
	return strcmp(state, "starting") != 0;
}

static ProtobufCMessage *sbx_wait_answer(rpc_call *c, const PGresult *r, int i)
{
	struct sbx_row o;

	sbx_from_row(c, r, i, &o);
	return sbx_answer(&o);
}

/* See sandboxes.h. */
const struct waiter_kind sbx_waiter_kind = {
	.noun = "sandbox",
	.sql = "SELECT " SBX_COLS SBX_FROM "WHERE s.id = ANY($1::text[])",
	.state_col = SBX_STATE,
	.settled = sbx_settled,
	.answer = sbx_wait_answer,
};

static int wait_settled(rpc_call *c, const char *tenant, const char *id, int timeout_ms,
			struct sbx_row *o, bc_error *err)
{
	struct ctl_app *app = ctl_app(c);
	int64_t end = deadline_in(timeout_ms);
	int cap = app->cfg.workers > 1 ? app->cfg.workers / 2 : 1, r = 0;
	struct watch_entry *e;
	uint64_t seen = 0;

	if (__atomic_add_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST) > cap) {
		__atomic_sub_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	e = watch_add(app->watches, o->x->instance_id);
	/* re-read once registered: readiness committed before it is seen */
	if ((r = sbx_fetch(c, tenant, id, o, err)) < 0)
		goto out;
	while (!deadline_passed(end) && strcmp(o->x->state, "starting") == 0) {
		int64_t left = deadline_left(end);
		seen = watch_wait(app->watches, e, seen,
				  (int)(left < WAIT_REREAD_MS ? left : WAIT_REREAD_MS));
		if ((r = sbx_fetch(c, tenant, id, o, err)) < 0)
			break;
	}
out:
	watch_remove(app->watches, e);
	__atomic_sub_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST);
	return r;
}

static int sbx_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__CreateSandboxRequest *q = (const void *)m;
	Bc__Compute__V1__CreateSandboxRequest h = *q;
	struct screate a = {.call = c, .q = q};
	struct sbx_row o;
	bool labelled;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 || (r = check_create(q, err)) < 0)
		return r;
	h.idempotency_key = (char *)"";
	h.wait = NULL;
	h.tenant_id = (char *)a.tenant;
	a.k = (struct idem){.tenant_id = a.tenant, .caller_id = ctl_principal(c)->id,
			    .scope = "sandboxes.create", .key = q->idempotency_key};
	idem_hash(&h.base, a.k.request_hash);
	r = db_tx(ctl_db(c), "READ COMMITTED", screate_tx, &a, err);
	labelled = a.mint.identity || *q->task; /* wid_bind changed the row after */
	wid_mint_clear(&a.mint);
	if (r == 0 && !a.reused && !labelled)
		sbx_from_row(c, a.row, 0, &o); /* as committed */
	else if (r == 0)
		r = sbx_fetch(c, a.tenant, a.id, &o, err);
	PQclear(a.row);
	if (r < 0)
		return r;
	if (!a.reused)
		log_info("sandbox %s: created from %s for tenant %s (instance %s, %s)", a.id,
			 q->template_id, a.tenant, a.instance, a.warm ? "warm" : "cold");
	if (q->wait && q->wait->timeout_ms > 0 && strcmp(o.x->state, "starting") == 0) {
		r = waiter_add(ctl_app(c)->waiter, c, a.tenant, o.x->id, o.x->instance_id,
			       q->wait->timeout_ms);
		if (r == RPC_DETACHED)
			return r; /* the waiter answers; c is no longer ours */
		if (r == -EOPNOTSUPP &&
		    (r = wait_settled(c, a.tenant, a.id, q->wait->timeout_ms, &o, err)) < 0)
			return r;
	}
	*ret = sbx_answer(&o);
	return 0;
}

/* -------------------------------------------------------------- get, list */

static int sbx_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		   bc_error *err)
{
	const Bc__Compute__V1__GetSandboxRequest *q = (const void *)m;
	const char *tenant;
	struct sbx_row o;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0 ||
	    (r = sbx_fetch(c, tenant, q->sandbox_id, &o, err)) < 0 ||
	    (r = sbx_decide(c, "compute:sandboxes:read", &o, err)) < 0)
		return r;
	*ret = sbx_answer(&o);
	if ((r = snap_list_of_sandbox(c, o.x->id, &o.x->n_snapshots, &o.x->snapshots)) < 0)
		return db_fail(err, r);
	return 0;
}

static int check_list(const Bc__Compute__V1__ListSandboxesRequest *q, int *ret_limit,
		      bool *ret_all, bc_error *err)
{
	int r;

	if ((r = check_page(err, q->limit, q->cursor, "sbx", q->scope, ret_limit, ret_all)) < 0)
		return r;
	if (*q->template_id && (r = check_id(err, "templateId", "sbxt", q->template_id)) < 0)
		return r;
	return 0;
}

static int sbx_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__ListSandboxesRequest *q = (const void *)m;
	Bc__Compute__V1__ListSandboxesResponse *resp;
	int limit = 0, rc;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	bool all = false;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (rc = check_list(q, &limit, &all, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->template_id);
	dbp_str(&p, q->cursor);
	dbp_bool(&p, q->deleted);
	dbp_i64(&p, limit);
	dbp_bool(&p, all);
	dbp_str(&p, ctl_principal(c)->id);
	/* mine: what the caller created, or (a user) what its agents created */
	rc = db_exec(ctl_db(c), &r, "SELECT " SBX_COLS SBX_FROM "WHERE s.tenant_id = $1 AND ($2 = "
		     "'' OR s.template_id = $2) AND ($3 = '' OR s.id < $3) AND ($4 OR s.state <> "
		     "'deleted') AND ($6 OR s.created_by = $7 OR s.owner_id = $7) ORDER BY s.id DESC "
		     "LIMIT $5", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_sandboxes_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		struct sbx_row o;
		bc_error skip = {0};
		sbx_from_row(c, r, i, &o);
		if (sbx_decide(c, "compute:sandboxes:read", &o, &skip) < 0) {
			if ((rc = list_left_out(&skip, err)) < 0) {
				PQclear(r);
				return rc;
			}
			continue; /* one the caller may not read is left out */
		}
		resp->items[resp->n_items++] = sbx_answer(&o);
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, SBX_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

/* ----------------------------------------------------------------- delete */

static int wake(struct db *d, const char *id)
{
	struct dbp p = {0};

	dbp_str(&p, id);
	return db_exec(d, NULL, "SELECT pg_notify('" SBX_WAKE_CHANNEL "', $1)", &p);
}

int sbx_delete_locked(struct db *d, const char *id, bool expired)
{
	enum { DEL_INSTANCE_ID, DEL_NODE_ID, DEL_TENANT_ID, DEL_TEMPLATE_ID, DEL_POOL_ID };
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	char subject[96];
	int rc;

	if ((rc = wid_revoke_first(d, id)) != 0) /* revoke before delete */
		return rc < 0 ? rc : wake(d, id);
	dbp_str(&p, id);
	rc = db_exec(d, &r, "WITH s AS (UPDATE sandboxes SET state = 'deleting', deleting_at = now(), "
		     "updated_at = now() WHERE id = $1 AND deleting_at IS NULL RETURNING "
		     "instance_id, tenant_id, template_id, pool_id) UPDATE instances i SET "
		     "desired_state = 'deleted', state = CASE WHEN i.state = 'deleted' THEN "
		     "'deleted' ELSE 'deleting' END, updated_at = now() FROM s WHERE i.id = "
		     "s.instance_id RETURNING i.id, i.node_id, s.tenant_id, s.template_id, s.pool_id", &p);
	if (rc < 0)
		return rc;
	if (PQntuples(r) == 0) {
		PQclear(r);
		return 0; /* already deleting */
	}
	snprintf(subject, sizeof(subject), "instance/%s", db_val(r, 0, DEL_INSTANCE_ID));
	rc = evd_instance("instance.deleting", &(struct evd_instance){.sandbox_id = id,
			  .reason = expired ? "expired" : NULL}, &data);
	if (rc == 0)
		rc = event_publish(d, "instance.deleting", subject, db_val(r, 0, DEL_TENANT_ID), data);
	if (rc == 0)
		rc = publish(d, "sandbox.deleting", id, db_val(r, 0, DEL_TENANT_ID), &(struct evd_sandbox){
			     .template_id = db_val(r, 0, DEL_TEMPLATE_ID), .instance_id = db_val(r, 0, DEL_INSTANCE_ID),
			     .pool_id = db_val(r, 0, DEL_POOL_ID), .expired = expired});
	if (rc == 0 && !db_val(r, 0, DEL_NODE_ID))
		rc = finish_deletions(d, NULL, db_val(r, 0, DEL_INSTANCE_ID)) < 0 ? -EIO : 0;
	else if (rc == 0)
		rc = spec_bump_instance(d, db_val(r, 0, DEL_NODE_ID),
					db_val(r, 0, DEL_INSTANCE_ID));
	PQclear(r);
	return rc < 0 ? rc : wake(d, id);
}

struct sdel {
	const char *tenant, *id;
};

static int sdelete_tx(struct db *d, void *arg, bc_error *err)
{
	struct sdel *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	if ((rc = db_one(d, &r, "SELECT deleting_at IS NOT NULL FROM sandboxes WHERE id = $1 AND "
			 "tenant_id = $2 FOR UPDATE", &p, err, "sandbox %s not found", a->id)) < 0)
		return rc;
	rc = db_bool(r, 0, COL_ONLY) ? 0 : 1;
	PQclear(r);
	if (rc == 0)
		return 0; /* idempotent */
	rc = sbx_delete_locked(d, a->id, false);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int sbx_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__DeleteSandboxRequest *q = (const void *)m;
	struct sdel a = {.id = q->sandbox_id};
	struct sbx_row o;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0 ||
	    (r = sbx_fetch(c, a.tenant, q->sandbox_id, &o, err)) < 0 ||
	    (r = sbx_decide(c, "compute:sandboxes:delete", &o, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", sdelete_tx, &a, err)) < 0 ||
	    (r = sbx_fetch(c, a.tenant, q->sandbox_id, &o, err)) < 0)
		return r;
	log_info("sandbox %s: delete requested", q->sandbox_id);
	*ret = sbx_answer(&o);
	return 0;
}

/* ------------------------------------------------------------ guest trust */

bool sbx_certify_host_key(const struct ctl_app *app)
{
	return app->sandbox_ca && app->cfg.sandbox_certify_host_key;
}

/* certifyHostKey without the secret broker: INVALID_CONFIG, saying how to
 * fix it. */
static int host_key_needs_broker(bc_error *err)
{
	bc_error_set(err, BC_INVALID_CONFIG, "certifyHostKey needs the secret broker: a sandbox "
		     "guest's host key travels only in sealed user data. Configure the broker "
		     "(secret_broker = 1, docs/secrets.md) or turn host certificates off "
		     "(sandbox_certify_host_key = 0)");
	return bc_error_detail(err, "reason", "host-key-needs-broker");
}

int sbx_guest_trust(const struct ctl_app *app, struct inst_new *n, struct bootdata_ssh_ca *ca,
		    bc_error *err)
{
	const char *why = NULL;

	n->ssh_ca = NULL;
	n->host_ca = NULL;
	if (!app->sandbox_ca)
		return 0;
	if (sshcert_ca_line_check(app->sandbox_ca_line, &why) < 0) {
		bc_error_set(err, BC_INVALID_CONFIG, "the sandbox SSH CA's public line cannot be "
			     "given to guests: %s", why);
		return bc_error_detail(err, "reason", "sandbox-ca-line");
	}
	*ca = (struct bootdata_ssh_ca){.account = app->cfg.sandbox_account,
				       .ca_public_key = app->sandbox_ca_line};
	n->ssh_ca = ca;
	if (!sbx_certify_host_key(app))
		return 0;
	if (!secrets_broker(app))
		return host_key_needs_broker(err);
	n->host_ca = app->sandbox_ca;
	return 0;
}

/* ----------------------------------------------------------------- extend */

struct sext {
	const Bc__Compute__V1__ExtendSandboxRequest *q;
	const char *tenant;
	int64_t by_ms;
	char hold[64];
	int64_t new_ms;          /* the absolute expiry decided on (epoch ms) */
	int64_t lifetime;        /* seconds from created_at */
	int64_t cert_ms;         /* the guest's host certificate ends (epoch ms), or 0 */
	bool unchanged;
};

static int check_extend(const Bc__Compute__V1__ExtendSandboxRequest *q, int64_t *ret_by,
			bc_error *err)
{
	int r;

	if ((r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0)
		return r;
	if ((q->until != 0) == (*q->by != '\0'))
		return invalid(err, "until", "give exactly one of until and by");
	if (q->until < 0)
		return invalid(err, "until", "until must be an epoch time in milliseconds");
	if (*q->by && (duration_parse_ms(q->by, ret_by) < 0 || *ret_by <= 0 ||
		       *ret_by > SBX_EXTEND_BY_MAX_MS || strchr(q->by, 's')))
		return invalid(err, "by", "by must be like 30m, 8h, 7d or milliseconds, at most 30 "
			       "days");
	return 0;
}

static int deleting_refused(bc_error *err, const char *id, const char *state)
{
	bc_error_set(err, BC_INVALID_STATE, "sandbox %s is %s", id, state);
	return bc_error_detail(err, "state", "%s", state);
}

/* An extend past the host certificate of the sandbox's guest (nothing
 * renews one): INVALID_INPUT naming the time left, INVALID_STATE once less
 * than a minute is. 0 when cert_ms (epoch ms, 0: no certificate) covers
 * new_ms. */
static int past_host_cert(bc_error *err, const struct sext *a, int64_t cert_ms)
{
	const char *id = a->q->sandbox_id;
	int64_t left = (cert_ms - now_ms()) / 1000;

	if (cert_ms == 0 || a->new_ms <= cert_ms)
		return 0;
	if (left < 60)
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s: its guest's host certificate ends "
			     "in less than a minute, and nothing renews it", id);
	else
		invalid(err, a->q->until ? "until" : "by", "sandbox %s cannot outlive its guest's host certificate: "
			"%" PRId64 "h%02" PRId64 "m%02" PRId64 "s left (until %" PRId64 " ms)", id,
			left / 3600, left / 60 % 60, left % 60, cert_ms);
	bc_error_detail(err, "reason", "host-certificate");
	bc_error_detail(err, "hostCertValidBefore", "%" PRId64, cert_ms);
	return bc_error_detail(err, "secondsLeft", "%" PRId64, left < 0 ? 0 : left);
}

/* The sandbox (locked), its expiry, creation and template bound. */
enum { EXT_STATE, EXT_EXPIRES_AT, EXT_CREATED_AT, EXT_MAX_TTL, EXT_DELETING, EXT_CERT_END };
static int extend_read(struct db *d, struct sext *a, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, a->q->sandbox_id);
	dbp_str(&p, a->tenant);
	/* the template's bound holds even for a template deleted since */
	return db_one(d, ret, "SELECT s.state, " MS("s.expires_at") ", " MS("s.created_at") ", "
		      "t.max_ttl_seconds, s.deleting_at IS NOT NULL, coalesce(" MS("i.host_cert_valid_before")
		      ", 0) FROM sandboxes s JOIN sandbox_templates t ON t.id = s.template_id LEFT "
		      "JOIN instances i ON i.id = s.instance_id WHERE s.id = $1 AND "
		      "s.tenant_id = $2 FOR UPDATE OF s", &p, err, "sandbox %s not found",
		      a->q->sandbox_id);
}

/* Transaction 1: compute the new expiry from the current one, refuse a
 * lifetime above the template's bound before anything is staged, then
 * stage the pending lifetime under our hold. */
static int stage_tx(struct db *d, void *arg, bc_error *err)
{
	struct sext *a = arg;
	_cleanup_free_ char *json = NULL;
	char ttl[24];
	struct jsonw w;
	PGresult *r = NULL;
	int64_t cur, created, max;
	int rc;

	if ((rc = extend_read(d, a, &r, err)) < 0)
		return rc;
	cur = db_i64(r, 0, EXT_EXPIRES_AT);
	created = db_i64(r, 0, EXT_CREATED_AT);
	max = db_i64(r, 0, EXT_MAX_TTL);
	a->cert_ms = db_i64(r, 0, EXT_CERT_END);
	if (db_bool(r, 0, EXT_DELETING) || strcmp(db_val(r, 0, EXT_STATE), "deleted") == 0) {
		rc = deleting_refused(err, a->q->sandbox_id, db_val(r, 0, EXT_STATE));
		PQclear(r);
		return rc;
	}
	PQclear(r);
	a->unchanged = a->q->until && a->q->until <= cur;
	if (a->unchanged)
		return 0;
	a->new_ms = a->q->until ? a->q->until : cur + a->by_ms;
	a->lifetime = (a->new_ms - created + 999) / 1000;
	if (a->lifetime > max)
		return ttl_too_long(err, a->lifetime, max);
	if ((rc = past_host_cert(err, a, a->cert_ms)) < 0)
		return rc;
	snprintf(ttl, sizeof(ttl), "%" PRId64, a->lifetime);
	jsonw_begin(&w);
	jsonw_str(&w, "ttlSeconds", ttl); /* attributes are strings */
	if ((rc = jsonw_end(&w, &json)) < 0)
		return db_fail(err, rc);
	return authz_pending_stage(d, "compute-sandbox", a->q->sandbox_id, json, a->hold,
				   SBX_HOLD_TAKEOVER_SECONDS, "extend-in-flight", err);
}

/* Transaction 2: apply the decided absolute expiry, only while our hold
 * still owns the pending value, and only within the template's bound. */
static int apply_tx(struct db *d, void *arg, bc_error *err)
{
	enum { APPLY_TENANT_ID, APPLY_TEMPLATE_ID, APPLY_INSTANCE_ID, APPLY_POOL_ID };
	struct sext *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = extend_read(d, a, &r, err)) < 0)
		return rc;
	if (db_bool(r, 0, EXT_DELETING))
		rc = deleting_refused(err, a->q->sandbox_id, db_val(r, 0, EXT_STATE));
	else if (a->lifetime > db_i64(r, 0, EXT_MAX_TTL))
		rc = ttl_too_long(err, a->lifetime, db_i64(r, 0, EXT_MAX_TTL));
	else
		rc = past_host_cert(err, a, db_i64(r, 0, EXT_CERT_END));
	PQclear(r);
	if (rc < 0)
		return rc;
	if ((rc = authz_pending_owned(d, "compute-sandbox", a->q->sandbox_id, a->hold, err)) < 0)
		return rc;
	if (rc == 0) {
		bc_error_set(err, BC_CONFLICT, "another extend of sandbox %s took over",
			     a->q->sandbox_id);
		bc_error_detail(err, "reason", "extend-in-flight");
		return bc_error_detail(err, "retryAfterSeconds", "1");
	}
	dbp_str(&p, a->q->sandbox_id);
	dbp_i64(&p, a->new_ms);
	dbp_i64(&p, a->lifetime);
	rc = db_exec(d, &r, "WITH s AS (UPDATE sandboxes SET expires_at = to_timestamp($2::bigint / "
		     "1000.0), ttl_seconds = $3, expiring_at = NULL, updated_at = now() WHERE id = "
		     "$1 RETURNING tenant_id, template_id, instance_id, pool_id), z AS (UPDATE "
		     "authz_resources SET attrs = attrs || jsonb_build_object('ttlSeconds', "
		     "$3::text), pending = NULL, pending_hold = NULL, pending_at = NULL WHERE type = "
		     "'compute-sandbox' AND id = $1) SELECT * FROM s", &p);
	if (rc < 0)
		return db_fail(err, rc);
	rc = publish(d, "sandbox.extended", a->q->sandbox_id, db_val(r, 0, APPLY_TENANT_ID),
		     &(struct evd_sandbox){.template_id = db_val(r, 0, APPLY_TEMPLATE_ID),
		     .instance_id = db_val(r, 0, APPLY_INSTANCE_ID), .pool_id = db_val(r, 0, APPLY_POOL_ID),
		     .expires_at = a->new_ms, .ttl_seconds = a->lifetime});
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Clear our own pending value after a refusal (never another's). */
static void release_hold(struct db *d, struct sext *a)
{
	bc_error e = {0};

	if (authz_pending_clear(d, "compute-sandbox", a->q->sandbox_id, a->hold, &e) < 0)
		log_warn("sandbox %s: pending lifetime not cleared: %s", a->q->sandbox_id,
			 e.message);
}

static int extend_decided(rpc_call *c, struct sext *a, const char *pool, bc_error *err)
{
	struct db *d = ctl_db(c);
	int r;

	if ((r = authz_decide_staged(c, d, "compute:sandboxes:update", "compute-sandbox",
				     a->q->sandbox_id, err)) < 0 ||
	    (r = quota_budget(d, a->tenant, pool, err)) < 0 ||
	    (r = db_tx(d, "READ COMMITTED", apply_tx, a, err)) < 0) {
		log_info("sandbox %s: extend refused: %s", a->q->sandbox_id, err->message);
		release_hold(d, a);
		return r;
	}
	return 0;
}

static int sbx_extend(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__ExtendSandboxRequest *q = (const void *)m;
	struct sext a = {.q = q};
	struct sbx_row o;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_extend(q, &a.by_ms, err)) < 0 ||
	    (r = sbx_fetch(c, a.tenant, q->sandbox_id, &o, err)) < 0)
		return r;
	/* NOT_FOUND for what the caller may not see, before anything is staged */
	if ((r = sbx_decide(c, "compute:sandboxes:read", &o, err)) < 0 && err->code == BC_NOT_FOUND)
		return r;
	bc_error_clear(err);
	id_new("hold", a.hold, sizeof(a.hold)); /* server-minted: callers cannot share one */
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", stage_tx, &a, err)) < 0)
		return r;
	if (!a.unchanged && (r = extend_decided(c, &a, o.x->pool_id, err)) < 0)
		return r;
	if ((r = sbx_fetch(c, a.tenant, q->sandbox_id, &o, err)) < 0)
		return r;
	if (!a.unchanged)
		log_info("sandbox %s: extended to a lifetime of %" PRId64 " s", q->sandbox_id,
			 a.lifetime);
	*ret = sbx_answer(&o);
	return 0;
}

const struct rpc_handler *sbx_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Create", RPC_UNARY, {.unary = sbx_create}},
		{"Get", RPC_UNARY, {.unary = sbx_get}},
		{"List", RPC_UNARY, {.unary = sbx_list}},
		{"Extend", RPC_UNARY, {.unary = sbx_extend}},
		{"Delete", RPC_UNARY, {.unary = sbx_delete}},
		{"Exec", RPC_UNARY, {.unary = sbx_exec}},
		{"Snapshot", RPC_UNARY, {.unary = snap_take}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
