/* snapshots.c: sandbox snapshots (issue 16; docs/snapshots.md).
 *
 *   Sandboxes.Snapshot ──one tx──> sandbox_snapshots row (pending)
 *                                  + authz row compute-sandbox-snapshot/<id>
 *                                  + sandbox.snapshot.created
 *                                  + command instance.snapshot (presigned PUT)
 *   host report settles the command ── NOTIFY bc_command_settled ──>
 *   sandbox reconciler: snap_pass() settles it (ready | failed + event),
 *   deletes the snapshots of deleted sandboxes that are not kept, and purges
 *   deleted ones (store DELETE outside any transaction) once their upload
 *   settled and no live instance restores from them.
 *
 * A snapshot belongs to its sandbox's owner (and the agent that created the
 * sandbox), whoever took it. SandboxSnapshots List/Get/Delete decide
 * compute:sandboxes:read / :delete on the snapshot. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "db.h"
#include "idem.h"
#include "jsonw.h"
#include "log.h"
#include "node_commands.h"
#include "outbox.h"
#include "rowmsg.h"
#include "sandbox_restore.h"
#include "sandboxes.h"
#include "snapshots.h"
#include "snapstore.h"
#include "util.h"
#include "validate.h"
#include "volumes.h"

#define SNAP_CMD_TIMEOUT_MS (3600 * 1000LL)  /* the spec's 1 h */
#define SNAP_URL_TTL 7200                     /* the upload URL outlives the command */
#define SNAP_PURGE_BATCH 50

#define SNAP_COLS                                                                          \
	"p.id, p.tenant_id, p.sandbox_id, p.template_id, CASE WHEN p.deleted_at IS NULL THEN " \
	"p.state ELSE 'deleted' END, p.include_memory, p.keep, p.runtime, p.sha256, "        \
	"p.size_bytes, p.cpu_model, p.reason, " MS("p.created_at") ", coalesce("             \
	MS("p.ready_at") ", 0), coalesce(" MS("p.deleted_at") ", 0), p.owner_id, "           \
	"coalesce(p.agent_id, ''), p.created_by, p.idempotency_key"
enum {
	SN_ID, SN_TENANT, SN_SANDBOX, SN_TEMPLATE, SN_STATE, SN_MEMORY, SN_KEEP, SN_RUNTIME,
	SN_SHA, SN_SIZE, SN_CPU, SN_REASON, SN_CREATED, SN_READY, SN_DELETED, SN_OWNER,
	SN_AGENT, SN_CREATED_BY, SN_KEY, SN_NCOLS
};
COLS_CHECK(SNAP_COLS, SN_NCOLS)

static Bc__Compute__V1__SandboxSnapshot *snap_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__SandboxSnapshot *x =
		rpc_new(c, &bc__compute__v1__sandbox_snapshot__descriptor);

	x->id = row_str(c, r, i, SN_ID);
	x->tenant_id = row_str(c, r, i, SN_TENANT);
	x->sandbox_id = row_str(c, r, i, SN_SANDBOX);
	x->template_id = row_str(c, r, i, SN_TEMPLATE);
	x->state = row_str(c, r, i, SN_STATE);
	x->include_memory = db_bool(r, i, SN_MEMORY);
	x->keep = db_bool(r, i, SN_KEEP);
	x->runtime = row_str(c, r, i, SN_RUNTIME);
	x->sha256 = row_str(c, r, i, SN_SHA);
	x->size_bytes = (uint64_t)db_i64(r, i, SN_SIZE);
	x->cpu_model = row_str(c, r, i, SN_CPU);
	x->reason = row_str(c, r, i, SN_REASON);
	x->created_at = db_i64(r, i, SN_CREATED);
	x->ready_at = db_i64(r, i, SN_READY);
	x->deleted_at = db_i64(r, i, SN_DELETED);
	x->owner_identity_id = row_str(c, r, i, SN_OWNER);
	return x;
}

/* The snapshot as a decision sees it: its own resource, owned by its
 * sandbox's owner, with the agent of its sandbox. */
static void snap_target(struct authz_target *t, const PGresult *r, int i)
{
	*t = (struct authz_target){.type = SNAP_TYPE, .id = db_val(r, i, SN_ID),
				   .tenant_id = db_val(r, i, SN_TENANT), .parent = "",
				   .agent_id = *db_val(r, i, SN_AGENT) ? db_val(r, i, SN_AGENT) : NULL};
	authz_attr(t, "sandboxId", db_val(r, i, SN_SANDBOX));
	authz_attr(t, "templateId", db_val(r, i, SN_TEMPLATE));
	authz_attr(t, "includeMemory", db_bool(r, i, SN_MEMORY) ? "true" : "false");
	authz_attr(t, "createdBy", db_val(r, i, SN_CREATED_BY));
}

static int snap_read(struct db *d, const char *tenant, const char *id, PGresult **ret,
		     bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	return db_one(d, ret, "SELECT " SNAP_COLS " FROM sandbox_snapshots p WHERE p.id = $1 AND "
		      "p.tenant_id = $2", &p, err, "sandbox snapshot %s not found", id);
}

int snap_list_of_sandbox(rpc_call *c, const char *sandbox_id, size_t *ret_n,
			 Bc__Compute__V1__SandboxSnapshot ***ret)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, sandbox_id);
	rc = db_exec(ctl_db(c), &r, "SELECT " SNAP_COLS " FROM sandbox_snapshots p WHERE "
		     "p.sandbox_id = $1 ORDER BY p.created_at, p.id", &p);
	if (rc < 0)
		return rc;
	*ret = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(**ret));
	for (int i = 0; i < PQntuples(r); i++)
		(*ret)[i] = snap_from_row(c, r, i);
	*ret_n = (size_t)PQntuples(r);
	PQclear(r);
	return 0;
}

/* ------------------------------------------------------------------- take */

bool snap_runtime_capable(const char *list, const char *runtime)
{
	size_t n = strlen(runtime);

	for (const char *s = list; s && *s;) {
		const char *e = strchr(s, ',');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		while (len && *s == ' ')
			s++, len--;
		while (len && s[len - 1] == ' ')
			len--;
		if (n && len == n && memcmp(s, runtime, n) == 0)
			return true;
		s = e ? e + 1 : NULL;
	}
	return false;
}

void snap_derive_id(const char *tenant, const char *caller, const char *key, char out[32])
{
	char v[32];

	vol_derive_id(tenant, caller, key, v); /* "vol_" + 26 */
	memcpy(out, "snap_", 5);
	memcpy(out + 5, v + 4, 26);
	out[31] = '\0';
}

struct stake {
	rpc_call *call;
	const Bc__Compute__V1__SnapshotSandboxRequest *q;
	const char *tenant;
	bool memory;
	char id[32];
	bool reused;
};

/* The sandbox as the take sees it, locked. */
enum {
	ST_DELETING, ST_STATE, ST_INSTANCE, ST_ISTATE, ST_NODE, ST_RUNTIME, ST_OWNER, ST_AGENT,
	ST_TEMPLATE, ST_RW_VOLUME
};

static int take_refusals(struct stake *a, const PGresult *s, bc_error *err)
{
	const struct ctl_config *cfg = &ctl_app(a->call)->cfg;
	const char *ist = db_val(s, 0, ST_ISTATE);

	if (db_bool(s, 0, ST_DELETING) || strcmp(db_val(s, 0, ST_STATE), "deleted") == 0) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s is being deleted", a->q->sandbox_id);
		return bc_error_detail(err, "state", "%s", db_val(s, 0, ST_STATE));
	}
	if (!db_val(s, 0, ST_NODE) || (strcmp(ist, "running") != 0 && strcmp(ist, "paused") != 0)) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s: its instance is %s, not running or "
			     "paused on a node", a->q->sandbox_id, ist);
		return bc_error_detail(err, "instanceState", "%s", ist);
	}
	if (!snap_runtime_capable(cfg->snapshot_runtimes, db_val(s, 0, ST_RUNTIME))) {
		bc_error_set(err, BC_UNSUPPORTED, "the %s runtime cannot snapshot an instance",
			     db_val(s, 0, ST_RUNTIME));
		return bc_error_detail(err, "runtime", "%s", db_val(s, 0, ST_RUNTIME));
	}
	if (a->memory && !snap_runtime_capable(cfg->snapshot_memory_runtimes, db_val(s, 0, ST_RUNTIME))) {
		bc_error_set(err, BC_UNSUPPORTED, "the %s runtime cannot restore memory snapshots: "
			     "take a disk-only snapshot (includeMemory false)", db_val(s, 0, ST_RUNTIME));
		bc_error_detail(err, "reason", "memory-snapshot");
		return bc_error_detail(err, "runtime", "%s", db_val(s, 0, ST_RUNTIME));
	}
	if (a->memory && db_bool(s, 0, ST_RW_VOLUME)) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s has a read-write volume attached: "
			     "take a disk-only snapshot (includeMemory false)", a->q->sandbox_id);
		return bc_error_detail(err, "reason", "read-write-volume");
	}
	return snapstore_require(cfg, err);
}

/* An idempotency key naming an existing snapshot: the same one back, or
 * CONFLICT for another sandbox, includeMemory or keep. 1 when it exists. */
static int take_existing(struct db *d, struct stake *a, bc_error *err)
{
	PGresult *r = NULL;
	int rc;

	if ((rc = snap_read(d, a->tenant, a->id, &r, err)) < 0) {
		if (rc != -BC_EDOMAIN || err->code != BC_NOT_FOUND)
			return rc; /* a database failure */
		bc_error_clear(err);
		return 0;
	}
	if (strcmp(db_val(r, 0, SN_SANDBOX), a->q->sandbox_id) != 0 ||
	    db_bool(r, 0, SN_MEMORY) != a->memory || db_bool(r, 0, SN_KEEP) != a->q->keep) {
		PQclear(r);
		bc_error_set(err, BC_CONFLICT, "idempotency key %s was used for another snapshot "
			     "request", a->q->idempotency_key);
		return bc_error_detail(err, "reason", "idempotency-key-reused");
	}
	PQclear(r);
	a->reused = true;
	return 1;
}

static int take_lock(struct db *d, struct stake *a, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, a->q->sandbox_id);
	dbp_str(&p, a->tenant);
	return db_one(d, ret, "SELECT s.deleting_at IS NOT NULL, s.state, s.instance_id, i.state, "
		      "i.node_id, pl.runtime, s.owner_id, s.agent_id, s.template_id, EXISTS (SELECT "
		      "1 FROM instance_volumes v WHERE v.instance_id = i.id AND NOT v.read_only) FROM "
		      "sandboxes s JOIN instances i ON i.id = s.instance_id JOIN pools pl ON pl.id = "
		      "s.pool_id WHERE s.id = $1 AND s.tenant_id = $2 FOR UPDATE OF s", &p, err,
		      "sandbox %s not found", a->q->sandbox_id);
}

/* The row, its authorization row, sandbox.snapshot.created and the
 * command, in the caller's transaction. */
static int take_insert(struct db *d, struct stake *a, const PGresult *s, const char *url,
		       const char *object_key, bc_error *err)
{
	const struct principal *pr = ctl_principal(a->call);
	_cleanup_free_ char *args = NULL, *ckey = NULL;
	char cmd[CMD_ID_LEN];
	struct dbp p = {0};
	struct jsonw w;
	int rc;

	jsonw_begin(&w);
	jsonw_str(&w, "snapshotId", a->id);
	jsonw_str(&w, "putUrl", url);
	jsonw_bool(&w, "includeMemory", a->memory);
	jsonw_str(&w, "runtime", db_val(s, 0, ST_RUNTIME));
	if ((rc = jsonw_end(&w, &args)) < 0)
		return db_fail(err, rc);
	ckey = xasprintf("sandboxes:%s:snapshot", a->id);
	rc = cmd_enqueue(d, &(struct cmd_new){.node_id = db_val(s, 0, ST_NODE),
			 .instance_id = db_val(s, 0, ST_INSTANCE), .kind = SNAP_CMD_KIND,
			 .lane = "bulk", .retry_safe = false, .timeout_ms = SNAP_CMD_TIMEOUT_MS,
			 .key = ckey, .args_json = args}, cmd, NULL);
	if (rc < 0)
		return db_fail(err, rc);
	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	dbp_str(&p, a->q->sandbox_id);
	dbp_str(&p, db_val(s, 0, ST_TEMPLATE));
	dbp_str(&p, db_val(s, 0, ST_INSTANCE));
	dbp_str(&p, db_val(s, 0, ST_RUNTIME));
	dbp_bool(&p, a->memory);
	dbp_bool(&p, a->q->keep);
	dbp_str(&p, db_val(s, 0, ST_OWNER));
	dbp_nstr(&p, db_val(s, 0, ST_AGENT));
	dbp_str(&p, pr->id);
	dbp_nstr(&p, a->q->idempotency_key);
	dbp_str(&p, cmd);
	dbp_str(&p, object_key);
	/* a restore's memory answers to the principal it inherited, until rebound */
	rc = db_exec(d, NULL, "WITH n AS (INSERT INTO sandbox_snapshots (id, tenant_id, sandbox_id, "
		     "template_id, instance_id, principal_instance_id, runtime, include_memory, keep, "
		     "owner_id, agent_id, created_by, idempotency_key, command_id, object_key) SELECT "
		     "$1, $2, $3, $4, $5, coalesce((SELECT r.principal_instance_id FROM instances i "
		     "JOIN sandbox_snapshots r ON r.id = i.restore_snapshot_id WHERE i.id = $5 AND "
		     "r.include_memory AND i.identity_rebound_at IS NULL), $5), $6, $7, $8, $9, $10, $11, $12, $13, $14 RETURNING *), "
		     "z AS (INSERT INTO authz_resources (type, id, tenant_id, parent, owner_id, "
		     "agent_id, attrs) SELECT '" SNAP_TYPE "', id, tenant_id, '', owner_id, agent_id, "
		     "jsonb_build_object('sandboxId', sandbox_id, 'templateId', template_id, "
		     "'includeMemory', include_memory::text, 'createdBy', created_by) FROM n) "
		     "INSERT INTO events (type, subject, tenant_id, data) SELECT "
		     "'sandbox.snapshot.created', 'sandbox/' || sandbox_id, tenant_id, "
		     SNAP_EVD_SQL " FROM n", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int stake_tx(struct db *d, void *arg, bc_error *err)
{
	struct stake *a = arg;
	const struct ctl_config *cfg = &ctl_app(a->call)->cfg;
	_cleanup_free_ char *url = NULL, *object_key = NULL;
	struct snapstore *store = NULL;
	PGresult *s = NULL;
	int rc;

	a->reused = false;
	if (*a->q->idempotency_key) {
		snap_derive_id(a->tenant, ctl_principal(a->call)->id, a->q->idempotency_key, a->id);
		if ((rc = take_existing(d, a, err)) != 0)
			return rc < 0 ? rc : 0;
	} else
		id_new("snap", a->id, sizeof(a->id));
	if ((rc = take_lock(d, a, &s, err)) < 0)
		return rc;
	if ((rc = take_refusals(a, s, err)) < 0 || (rc = snapstore_open(cfg, d, &store, err)) < 0)
		goto out;
	object_key = restore_object_key(a->tenant, a->id);
	if ((rc = snapstore_presign_put(store, object_key, SNAP_URL_TTL, &url)) < 0) {
		rc = bc_error_set(err, BC_INTERNAL, "cannot presign the upload of %s", a->id);
		goto out;
	}
	rc = take_insert(d, a, s, url, object_key, err);
out:
	snapstore_free(store);
	PQclear(s);
	return rc;
}

static int check_take(const Bc__Compute__V1__SnapshotSandboxRequest *q, bc_error *err)
{
	int r;

	if (q->base.n_unknown_fields)
		return invalid(err, "request", "the request has unknown fields");
	if ((r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0)
		return r;
	return *q->idempotency_key ? idem_check_key(q->idempotency_key, err) : 0;
}

int snap_take(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret, bc_error *err)
{
	const Bc__Compute__V1__SnapshotSandboxRequest *q = (const void *)m;
	struct stake a = {.call = c, .q = q};
	struct sbx_brief b;
	PGresult *r = NULL;
	int rc;

	a.memory = q->include_memory_set_case !=
			   BC__COMPUTE__V1__SNAPSHOT_SANDBOX_REQUEST__INCLUDE_MEMORY_SET_INCLUDE_MEMORY ||
		   q->include_memory;
	if ((rc = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (rc = check_take(q, err)) < 0 ||
	    (rc = sbx_decide_brief(c, a.tenant, q->sandbox_id, "compute:sandboxes:update", &b,
				   err)) < 0 ||
	    (rc = db_tx(ctl_db(c), "READ COMMITTED", stake_tx, &a, err)) < 0 ||
	    (rc = snap_read(ctl_db(c), a.tenant, a.id, &r, err)) < 0)
		return rc;
	if (!a.reused)
		log_info("sandbox %s: snapshot %s requested (%s%s)", q->sandbox_id, a.id,
			 a.memory ? "memory and disk" : "disk only", q->keep ? ", kept" : "");
	*ret = &snap_from_row(c, r, 0)->base;
	PQclear(r);
	return 0;
}

/* ------------------------------------------------------- list, get, delete */

static int snap_decide(rpc_call *c, const char *action, const PGresult *r, int i,
		       bc_error *err)
{
	struct authz_target t;

	snap_target(&t, r, i);
	return authz_decide(c, ctl_db(c), action, &t, err);
}

static int snap_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__GetSandboxSnapshotRequest *q = (const void *)m;
	const char *tenant;
	PGresult *r = NULL;
	int rc;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (rc = check_id(err, "snapshotId", "snap", q->snapshot_id)) < 0 ||
	    (rc = snap_read(ctl_db(c), tenant, q->snapshot_id, &r, err)) < 0)
		return rc;
	if ((rc = snap_decide(c, "compute:sandboxes:read", r, 0, err)) == 0)
		*ret = &snap_from_row(c, r, 0)->base;
	PQclear(r);
	return rc;
}

static int check_list(const Bc__Compute__V1__ListSandboxSnapshotsRequest *q, int *ret_limit,
		      bool *ret_all, bc_error *err)
{
	int r;

	if (q->base.n_unknown_fields)
		return invalid(err, "request", "the request has unknown fields");
	if ((r = check_page(err, q->limit, q->cursor, "snap", q->scope, ret_limit, ret_all)) < 0)
		return r;
	if (*q->sandbox_id && (r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0)
		return r;
	return 0;
}

static int snap_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Compute__V1__ListSandboxSnapshotsRequest *q = (const void *)m;
	Bc__Compute__V1__ListSandboxSnapshotsResponse *resp;
	int limit = 0, rc;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	bool all = false;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (rc = check_list(q, &limit, &all, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->sandbox_id);
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	dbp_bool(&p, all);
	dbp_str(&p, ctl_principal(c)->id);
	/* mine: what the caller took or owns; newest first (ids of keyed
	 * snapshots derive from their keys, so the order is created_at's) */
	rc = db_exec(ctl_db(c), &r, "SELECT " SNAP_COLS " FROM sandbox_snapshots p WHERE "
		     "p.tenant_id = $1 AND p.deleted_at IS NULL AND ($2 = '' OR p.sandbox_id = $2) "
		     "AND ($3 = '' OR (p.created_at, p.id) < (SELECT created_at, id FROM "
		     "sandbox_snapshots WHERE id = $3)) AND ($5 OR p.created_by = $6 OR p.owner_id = "
		     "$6 OR p.agent_id = $6) ORDER BY p.created_at DESC, p.id DESC LIMIT $4", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_sandbox_snapshots_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		bc_error skip = {0};
		if (snap_decide(c, "compute:sandboxes:read", r, i, &skip) < 0) {
			if ((rc = list_left_out(&skip, err)) < 0) {
				PQclear(r);
				return rc;
			}
			continue; /* one the caller may not read is left out */
		}
		resp->items[resp->n_items++] = snap_from_row(c, r, i);
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, SN_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

struct sdel {
	const char *tenant, *id;
};

static int sdel_tx(struct db *d, void *arg, bc_error *err)
{
	struct sdel *a = arg;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	rc = snap_delete_where(d, "p.id = $1 AND p.tenant_id = $2", &p);
	if (rc == 0)
		rc = db_exec(d, NULL, "SELECT pg_notify('" SBX_WAKE_CHANNEL "', 'snapshot')", NULL);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int snap_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__DeleteSandboxSnapshotRequest *q = (const void *)m;
	struct sdel a = {.id = q->snapshot_id};
	PGresult *r = NULL;
	int rc;

	if ((rc = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (rc = check_id(err, "snapshotId", "snap", q->snapshot_id)) < 0 ||
	    (rc = snap_read(ctl_db(c), a.tenant, q->snapshot_id, &r, err)) < 0)
		return rc;
	rc = snap_decide(c, "compute:sandboxes:delete", r, 0, err);
	PQclear(r);
	r = NULL;
	if (rc < 0 || (rc = db_tx(ctl_db(c), "READ COMMITTED", sdel_tx, &a, err)) < 0 ||
	    (rc = snap_read(ctl_db(c), a.tenant, q->snapshot_id, &r, err)) < 0)
		return rc;
	log_info("sandbox snapshot %s: deleted", q->snapshot_id);
	*ret = &snap_from_row(c, r, 0)->base;
	PQclear(r);
	return 0;
}

const struct rpc_handler *snap_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"List", RPC_UNARY, {.unary = snap_list}},
		{"Get", RPC_UNARY, {.unary = snap_get}},
		{"Delete", RPC_UNARY, {.unary = snap_delete}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
