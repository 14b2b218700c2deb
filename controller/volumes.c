/* volumes.c: the SandboxVolumes API (Create, Get, List, Resize, Delete) and
 * the finishing of volume deletions. A volume is a persistent disk on one
 * host of a pool (docs/volumes.md). Every decision is taken on the volume
 * itself, the IAM resource compute-sandbox-volume/<id> under its pool with
 * the attribute sizeGiB: compute:sandboxes:manage for create, resize and
 * delete, compute:sandboxes:read for get and list.
 *
 * Create runs in one transaction: the idempotency key (a reused key
 * returns its volume without a new decision, another request with it is
 * CONFLICT), the volume's id derived from tenant, caller and key, its
 * authorization row staged and decided on, the name checked, the size
 * booked on a host of the pool whose volume store has the headroom (the
 * host rows locked, so concurrent bookings on a host are decided one after
 * the other), the tenant's diskGiB quota charged, the row, the event. Any
 * refusal rolls all of it back: nothing is left behind.
 *
 * Resize stages the new size as the pending sizeGiB under a server-minted
 * hold (one resize at a time, a hold older than 60 s taken over), decides,
 * and applies on the volume's own host; a refusal clears the pending value.
 *
 * Delete is refused while a live template names the volume or a live
 * instance attaches it; otherwise the volume is deleting, its host's spec
 * no longer lists it from the next generation on, and its booking is
 * released (sandbox.volume.deleted) once the host applied that generation
 * or is gone (vol_finish_deletions: the host's report, in its transaction,
 * and the reconciler's periodic pass). Tenant teardown deletes a tenant's
 * volumes after its instances (vol_tenant_teardown). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/volumes.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "idem.h"
#include "jsonw.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "quota.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"
#include "volumes.h"

#define VOL_NAME_MAX 64
#define VOL_TYPE "compute-sandbox-volume"
#define GIB (1024LL * 1024 * 1024)

#define VOL_COLS                                                                           \
	"v.id, v.tenant_id, v.pool_id, v.node_id, v.name, v.size_gib, v.serial, v.state, "    \
	"v.created_by, v.owner_id, " MS("v.created_at") ", " MS("v.updated_at") ", "          \
	"coalesce(" MS("v.deleted_at") ", 0)"
enum {
	VOL_ID, VOL_TENANT_ID, VOL_POOL_ID, VOL_NODE_ID, VOL_NAME, VOL_SIZE, VOL_SERIAL,
	VOL_STATE, VOL_CREATED_BY, VOL_OWNER_ID, VOL_CREATED_AT, VOL_UPDATED_AT, VOL_DELETED_AT,
	VOL_NCOLS
};
COLS_CHECK(VOL_COLS, VOL_NCOLS)

#define HEADROOM_SQL VOL_HEADROOM_SQL

static Bc__Compute__V1__SandboxVolume *vol_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__SandboxVolume *v = rpc_new(c, &bc__compute__v1__sandbox_volume__descriptor);

	v->id = row_str(c, r, i, VOL_ID);
	v->tenant_id = row_str(c, r, i, VOL_TENANT_ID);
	v->pool_id = row_str(c, r, i, VOL_POOL_ID);
	v->node_id = row_str(c, r, i, VOL_NODE_ID);
	v->name = row_str(c, r, i, VOL_NAME);
	v->size_gib = db_i64(r, i, VOL_SIZE);
	v->serial = row_str(c, r, i, VOL_SERIAL);
	v->state = row_str(c, r, i, VOL_STATE);
	v->created_by = row_str(c, r, i, VOL_CREATED_BY);
	v->owner_id = row_str(c, r, i, VOL_OWNER_ID);
	v->created_at = db_i64(r, i, VOL_CREATED_AT);
	v->updated_at = db_i64(r, i, VOL_UPDATED_AT);
	v->deleted_at = db_i64(r, i, VOL_DELETED_AT);
	return v;
}

static void vol_target(struct authz_target *t, char parent[128], const char *id,
		       const char *tenant, const char *pool, const char *name,
		       const char *created_by, int64_t size_gib)
{
	char num[24];

	*t = (struct authz_target){.type = VOL_TYPE, .id = id, .tenant_id = tenant,
				   .parent = parent};
	snprintf(parent, 128, "compute-pool/%s", pool);
	snprintf(num, sizeof(num), "%" PRId64, size_gib);
	authz_attr(t, "poolId", pool);
	authz_attr(t, "name", name);
	authz_attr(t, "createdBy", created_by);
	authz_attr(t, "sizeGiB", num);
}

static int vol_decide(rpc_call *c, const char *action, const Bc__Compute__V1__SandboxVolume *v,
		      bc_error *err)
{
	struct authz_target t;
	char parent[128];

	vol_target(&t, parent, v->id, v->tenant_id, v->pool_id, v->name, v->created_by,
		   v->size_gib);
	return authz_decide(c, ctl_db(c), action, &t, err);
}

int vol_decide_on(rpc_call *c, const char *action, const Bc__Compute__V1__SandboxVolume *v,
		  bc_error *err)
{
	return vol_decide(c, action, v, err);
}

int vol_lookup(rpc_call *c, const char *tenant, const char *id, const char *name,
	       Bc__Compute__V1__SandboxVolume **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	dbp_str(&p, id);
	dbp_str(&p, name);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " VOL_COLS " FROM volumes v WHERE v.tenant_id = $1 "
			 "AND v.state <> 'deleted' AND (v.id = $2 OR ($2 = '' AND v.name = $3))", &p,
			 err, "sandbox volume %s not found", *id ? id : name)) < 0)
		return rc;
	*ret = vol_from_row(c, r, 0);
	PQclear(r);
	return 0;
}

/* One volume of tenant, deleted ones included (NOT_FOUND otherwise). */
static int vol_fetch(rpc_call *c, const char *tenant, const char *id,
		     Bc__Compute__V1__SandboxVolume **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " VOL_COLS " FROM volumes v WHERE v.id = $1 AND "
			 "v.tenant_id = $2", &p, err, "sandbox volume %s not found", id)) < 0)
		return rc;
	*ret = vol_from_row(c, r, 0);
	PQclear(r);
	return 0;
}

static int publish(struct db *d, const char *type, const char *id, const char *tenant,
		   const struct evd_volume *v)
{
	_cleanup_free_ char *data = NULL;
	char subject[96];
	int rc;

	snprintf(subject, sizeof(subject), "volume/%s", id);
	if ((rc = evd_volume(type, v, &data)) < 0)
		return rc;
	return event_publish(d, type, subject, tenant, data);
}

/* ------------------------------------------------------------------ id */

void vol_derive_id(const char *tenant, const char *caller, const char *key, char out[32])
{
	static const char b32[] = "0123456789abcdefghjkmnpqrstvwxyz";
	_cleanup_free_ char *s = xasprintf("%s\n%s\n%s", tenant, caller, key);
	char hex[65];

	sha256_hex(s, strlen(s), hex);
	memcpy(out, "vol_", 4);
	for (int i = 0; i < 26; i++) {
		char byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
		out[4 + i] = b32[strtoul(byte, NULL, 16) & 31];
	}
	out[30] = '\0';
}

void vol_serial(const char *id, char out[24])
{
	size_t n = strlen(id), k = n > 16 ? 16 : n;

	memcpy(out, "bcv-", 4);
	memcpy(out + 4, id + n - k, k);
	out[4 + k] = '\0';
}

/* -------------------------------------------------------------- booking */

static int capacity_refused(bc_error *err, const char *reason, int64_t free_gib,
			    int64_t needed_gib, const char *what)
{
	bc_error_set(err, BC_CAPACITY_UNAVAILABLE, "%s", what);
	bc_error_detail(err, "reason", "%s", reason);
	if (free_gib >= 0)
		bc_error_detail(err, "freeGiB", "%" PRId64, free_gib);
	return bc_error_detail(err, "neededGiB", "%" PRId64, needed_gib);
}

/* Lock node (FOR UPDATE), then read its headroom in a statement of its
 * own (a statement that waited for the lock would still read from the
 * snapshot it started with). 1 and *ret_bytes, 0 for a host that never
 * reported its store (or is not ready), <0 db error. */
static int lock_headroom(struct db *d, const char *node, int64_t *ret_bytes)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, node);
	if ((rc = db_exec(d, NULL, "SELECT 1 FROM nodes WHERE id = $1 FOR UPDATE", &p)) < 0)
		return rc;
	rc = db_exec(d, &r, "SELECT " HEADROOM_SQL " FROM nodes n WHERE n.id = $1 AND n.state = "
		     "'ready'", &p);
	if (rc < 0)
		return rc;
	rc = PQntuples(r) == 1 && db_val(r, 0, COL_ONLY) ? 1 : 0;
	if (rc == 1)
		*ret_bytes = db_i64(r, 0, COL_ONLY);
	PQclear(r);
	return rc;
}

static int book(struct db *d, const char *node, const char *id, const char *tenant,
		int64_t size_gib)
{
	struct dbp p = {0};

	dbp_str(&p, node);
	dbp_str(&p, id);
	dbp_str(&p, tenant);
	dbp_i64(&p, size_gib);
	return db_exec(d, NULL, "INSERT INTO allocations (node_id, owner_kind, owner_id, "
		       "tenant_id, vcpus, memory_mib, disk_gib, gpus) VALUES ($1, 'volume', $2, "
		       "$3, 0, 0, $4, 0)", &p);
}

/* Book size_gib for volume id on a ready host of pool whose store has the
 * headroom for all of it: a few candidates, tried from a random one (so
 * concurrent creates do not all queue on one host's lock), each locked and
 * judged again under its lock. node (64 bytes) names the host. */
static int book_on_pool(struct db *d, const char *pool, const char *id, const char *tenant,
			int64_t size_gib, char node[64], bc_error *err)
{
	_cleanup_free_ char *best = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	unsigned int start = 0;
	int rc = 0, n;

	dbp_str(&p, pool);
	dbp_i64(&p, size_gib);
	rc = db_exec(d, &r, "SELECT n.id FROM nodes n, LATERAL (SELECT " HEADROOM_SQL " h) x "
		     "WHERE n.pool_id = $1 AND n.state = 'ready' AND x.h >= $2::bigint * "
		     "1073741824 ORDER BY x.h DESC, n.id LIMIT 4", &p);
	if (rc < 0)
		return db_fail(err, rc);
	n = PQntuples(r);
	random_bytes(&start, sizeof(start));
	for (int k = 0; k < n; k++) {
		const char *cand = db_val(r, (int)((start + (unsigned)k) % (unsigned)n), 0);
		int64_t h = 0;
		if ((rc = lock_headroom(d, cand, &h)) < 0)
			break;
		if (rc == 1 && h >= size_gib * GIB) {
			snprintf(node, 64, "%s", cand);
			rc = book(d, node, id, tenant, size_gib);
			PQclear(r);
			return rc < 0 ? db_fail(err, rc) : 0;
		}
		rc = 0;
	}
	PQclear(r);
	if (rc < 0)
		return db_fail(err, rc);
	p.n = 0;
	dbp_str(&p, pool);
	if ((rc = db_scalar(d, "SELECT coalesce(greatest(0, max(" HEADROOM_SQL ")) / 1073741824, "
			    "0) FROM nodes n WHERE n.pool_id = $1 AND n.state = 'ready'", &p,
			    &best)) < 0)
		return db_fail(err, rc);
	return capacity_refused(err, "volume-storage", strtoll(best, NULL, 10), size_gib,
				"no host of the pool has room for the volume in its volume store");
}

/* ----------------------------------------------------------------- create */

static int unknown_fields(const ProtobufCMessage *m, bc_error *err)
{
	if (m->n_unknown_fields == 0)
		return 0;
	return invalid(err, "request", "the request has %u unknown field(s)", m->n_unknown_fields);
}

static int check_size(int64_t size, bc_error *err)
{
	if (size < 1 || size > VOL_SIZE_MAX_GIB)
		return invalid(err, "sizeGib", "sizeGib must be between 1 and %d", VOL_SIZE_MAX_GIB);
	return 0;
}

static int check_create(const Bc__Compute__V1__CreateSandboxVolumeRequest *q, bc_error *err)
{
	size_t n = strlen(q->name);
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 ||
	    (r = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return r;
	if (n == 0 || n > VOL_NAME_MAX || strspn(q->name, "abcdefghijklmnopqrstuvwxyz"
						 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return invalid(err, "name", "name must be 1 to %d letters, digits, '.', '_' or '-'",
			       VOL_NAME_MAX);
	if ((r = check_size(q->size_gib, err)) < 0)
		return r;
	return idem_check_key(q->idempotency_key, err);
}

static int name_taken(bc_error *err, const char *name)
{
	bc_error_set(err, BC_CONFLICT, "a sandbox volume named %s exists", name);
	return bc_error_detail(err, "reason", "name-taken");
}

struct vcreate {
	rpc_call *call;
	const Bc__Compute__V1__CreateSandboxVolumeRequest *q;
	const char *tenant;
	struct idem k;
	char id[32], node[64];
	bool reused;
};

/* The pool, visible to the tenant (NOT_FOUND otherwise). */
static int check_pool(struct db *d, const char *pool, const char *tenant, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, pool);
	dbp_str(&p, tenant);
	rc = db_one(d, &r, "SELECT id FROM pools WHERE id = $1 AND deleted_at IS NULL AND "
		    "(cardinality(tenant_ids) = 0 OR $2 = ANY (tenant_ids))", &p, err,
		    "pool %s not found", pool);
	PQclear(r);
	return rc;
}

static int name_live(struct db *d, const char *tenant, const char *name, bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, tenant);
	dbp_str(&p, name);
	rc = db_scalar(d, "SELECT count(*) FROM volumes WHERE tenant_id = $1 AND name = $2 AND "
		       "state <> 'deleted'", &p, &v);
	if (rc < 0)
		return db_fail(err, rc);
	return strcmp(v, "0") != 0 ? name_taken(err, name) : 0;
}

/* A key whose record was purged (idem_purge) derives the id of the volume
 * it made: CONFLICT, never a second volume under one id. */
static int id_unused(struct db *d, const char *id, bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, id);
	rc = db_scalar(d, "SELECT count(*) FROM volumes WHERE id = $1", &p, &v);
	if (rc < 0)
		return db_fail(err, rc);
	if (strcmp(v, "0") == 0)
		return 0;
	bc_error_set(err, BC_CONFLICT, "idempotency key already used for sandbox volume %s", id);
	return bc_error_detail(err, "reason", "idempotency-key-reused");
}

static int vcreate_tx(struct db *d, void *arg, bc_error *err)
{
	struct vcreate *a = arg;
	const Bc__Compute__V1__CreateSandboxVolumeRequest *q = a->q;
	const struct principal *pr = ctl_principal(a->call);
	_cleanup_free_ char *existing = NULL;
	struct authz_target t;
	char parent[128], serial[24];
	struct dbp p = {0};
	int rc;

	a->reused = false;
	if (*q->idempotency_key) {
		if ((rc = idem_lookup(d, &a->k, &existing, err)) < 0)
			return rc;
		if (existing) {
			snprintf(a->id, sizeof(a->id), "%s", existing);
			a->reused = true;
			return 0;
		}
		vol_derive_id(a->tenant, pr->id, q->idempotency_key, a->id);
	} else
		id_new("vol", a->id, sizeof(a->id));
	if ((rc = check_pool(d, q->pool_id, a->tenant, err)) < 0)
		return rc;
	vol_target(&t, parent, a->id, a->tenant, q->pool_id, q->name, pr->id, q->size_gib);
	if ((rc = id_unused(d, a->id, err)) < 0 || (rc = authz_stage(a->call, d, &t, err)) < 0)
		return rc;
	if ((rc = authz_decide_staged(a->call, d, "compute:sandboxes:manage", VOL_TYPE, a->id,
				      err)) < 0 ||
	    (rc = name_live(d, a->tenant, q->name, err)) < 0 ||
	    (rc = book_on_pool(d, q->pool_id, a->id, a->tenant, q->size_gib, a->node, err)) < 0 ||
	    (rc = quota_check_disk(d, a->tenant, q->size_gib, err)) < 0)
		return rc;
	vol_serial(a->id, serial);
	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	dbp_str(&p, q->pool_id);
	dbp_str(&p, a->node);
	dbp_str(&p, q->name);
	dbp_i64(&p, q->size_gib);
	dbp_str(&p, serial);
	dbp_str(&p, pr->id);
	dbp_str(&p, *pr->user_id ? pr->user_id : pr->id);
	rc = db_exec(d, NULL, "INSERT INTO volumes (id, tenant_id, pool_id, node_id, name, size_gib, "
		     "serial, created_by, owner_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", &p);
	if (rc == -EEXIST)
		return name_taken(err, q->name);
	if (rc < 0)
		return db_fail(err, rc);
	if ((rc = authz_commit(d, VOL_TYPE, a->id, err)) < 0)
		return rc;
	if ((rc = spec_bump(d, a->node)) < 0) /* its host's spec lists it */
		return db_fail(err, rc);
	rc = publish(d, "sandbox.volume.created", a->id, a->tenant, &(struct evd_volume){
		     .pool_id = q->pool_id, .node_id = a->node, .name = q->name,
		     .size_gib = q->size_gib});
	if (rc < 0)
		return db_fail(err, rc);
	return *q->idempotency_key ? idem_record(d, &a->k, a->id, err) : 0;
}

static int vol_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__CreateSandboxVolumeRequest *q = (const void *)m;
	Bc__Compute__V1__CreateSandboxVolumeRequest h = *q;
	Bc__Compute__V1__SandboxVolume *v = NULL;
	struct vcreate a = {.call = c, .q = q};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_create(q, err)) < 0)
		return r;
	h.idempotency_key = (char *)"";
	h.tenant_id = (char *)a.tenant;
	a.k = (struct idem){.tenant_id = a.tenant, .caller_id = ctl_principal(c)->id,
			    .scope = "sandboxvolumes.create", .key = q->idempotency_key};
	idem_hash(&h.base, a.k.request_hash);
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", vcreate_tx, &a, err)) < 0 ||
	    (r = vol_fetch(c, a.tenant, a.id, &v, err)) < 0)
		return r;
	if (!a.reused)
		log_info("sandbox volume %s: created (%s, %" PRId64 " GiB on %s) for tenant %s",
			 a.id, q->name, q->size_gib, a.node, a.tenant);
	*ret = &v->base;
	return 0;
}

/* -------------------------------------------------------------- get, list */

static int vol_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		   bc_error *err)
{
	const Bc__Compute__V1__GetSandboxVolumeRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxVolume *v = NULL;
	const char *tenant;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (r = check_id(err, "volumeId", "vol", q->volume_id)) < 0 ||
	    (r = vol_fetch(c, tenant, q->volume_id, &v, err)) < 0 ||
	    (r = vol_decide(c, "compute:sandboxes:read", v, err)) < 0)
		return r;
	*ret = &v->base;
	return 0;
}

static int vol_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__ListSandboxVolumesRequest *q = (const void *)m;
	Bc__Compute__V1__ListSandboxVolumesResponse *resp;
	int limit = 0, rc;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	bool all = false;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	if ((rc = check_page(err, q->limit, q->cursor, "vol", q->scope, &limit, &all)) < 0)
		return rc;
	if (*q->pool_id && (rc = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->pool_id);
	dbp_str(&p, q->cursor);
	dbp_bool(&p, q->deleted);
	dbp_i64(&p, limit);
	dbp_bool(&p, all);
	dbp_str(&p, ctl_principal(c)->id);
	/* mine: what the caller created, or (a user) what its agents created;
	 * newest first (ids derive from keys, so they say nothing of time) */
	rc = db_exec(ctl_db(c), &r, "SELECT " VOL_COLS " FROM volumes v WHERE v.tenant_id = $1 AND "
		     "($2 = '' OR v.pool_id = $2) AND ($3 = '' OR (v.created_at, v.id) < (SELECT "
		     "c.created_at, c.id FROM volumes c WHERE c.id = $3 AND c.tenant_id = $1)) AND "
		     "($4 OR v.state <> 'deleted') AND ($6 OR ($7 <> '' AND (v.created_by = $7 OR "
		     "v.owner_id = $7))) ORDER BY v.created_at DESC, v.id DESC LIMIT $5", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_sandbox_volumes_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		Bc__Compute__V1__SandboxVolume *v = vol_from_row(c, r, i);
		bc_error skip = {0};
		if (vol_decide(c, "compute:sandboxes:read", v, &skip) < 0) {
			if ((rc = list_left_out(&skip, err)) < 0) {
				PQclear(r);
				return rc;
			}
			continue; /* one the caller may not read is left out */
		}
		resp->items[resp->n_items++] = v;
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, VOL_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

/* ----------------------------------------------------------------- resize */

struct vresize {
	const Bc__Compute__V1__ResizeSandboxVolumeRequest *q;
	const char *tenant;
	char hold[64];
	bool unchanged;
	int64_t old_gib;
};

static int not_ready(bc_error *err, const char *id, const char *state)
{
	bc_error_set(err, BC_INVALID_STATE, "sandbox volume %s is %s", id, state);
	return bc_error_detail(err, "state", "%s", state);
}

static int shrink_refused(bc_error *err, int64_t want, int64_t have)
{
	invalid(err, "sizeGib", "a volume only grows: %" PRId64 " GiB is below its %" PRId64
		" GiB", want, have);
	return bc_error_detail(err, "reason", "shrink");
}

/* The volume's row, locked. */
enum { RS_STATE, RS_SIZE, RS_NODE, RS_POOL, RS_NAME };
static int resize_read(struct db *d, const struct vresize *a, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};

	dbp_str(&p, a->q->volume_id);
	dbp_str(&p, a->tenant);
	return db_one(d, ret, "SELECT state, size_gib, node_id, pool_id, name FROM volumes WHERE "
		      "id = $1 AND tenant_id = $2 FOR UPDATE", &p, err,
		      "sandbox volume %s not found", a->q->volume_id);
}

/* The refusals that come first (not ready, a shrink); the current size is
 * unchanged. 0 to go on. */
static int resize_judge(const struct vresize *a, const PGresult *r, bc_error *err)
{
	if (strcmp(db_val(r, 0, RS_STATE), "ready") != 0)
		return not_ready(err, a->q->volume_id, db_val(r, 0, RS_STATE));
	if (a->q->size_gib < db_i64(r, 0, RS_SIZE))
		return shrink_refused(err, a->q->size_gib, db_i64(r, 0, RS_SIZE));
	return 0;
}

static int rstage_tx(struct db *d, void *arg, bc_error *err)
{
	struct vresize *a = arg;
	PGresult *r = NULL;
	char json[64];
	int rc;

	if ((rc = resize_read(d, a, &r, err)) < 0)
		return rc;
	rc = resize_judge(a, r, err);
	a->unchanged = rc == 0 && a->q->size_gib == db_i64(r, 0, RS_SIZE);
	PQclear(r);
	if (rc < 0 || a->unchanged)
		return rc;
	snprintf(json, sizeof(json), "{\"sizeGiB\": \"%" PRId64 "\"}", a->q->size_gib);
	return authz_pending_stage(d, VOL_TYPE, a->q->volume_id, json, a->hold,
				   VOL_HOLD_TAKEOVER_SECONDS, "resize-in-flight", err);
}

/* Apply the decided size on the volume's own host, while our hold still
 * owns the pending value: the booking is reopened at the new size (the old
 * one released, so metering counts each size for its own time), the growth
 * charged to the quota. */
static int rapply_tx(struct db *d, void *arg, bc_error *err)
{
	struct vresize *a = arg;
	_cleanup_free_ char *node = NULL, *pool = NULL, *name = NULL;
	int64_t old, grow, h = 0;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = resize_read(d, a, &r, err)) < 0)
		return rc;
	if ((rc = resize_judge(a, r, err)) < 0) {
		PQclear(r);
		return rc;
	}
	old = db_i64(r, 0, RS_SIZE);
	node = xstrdup(db_val(r, 0, RS_NODE));
	pool = xstrdup(db_val(r, 0, RS_POOL));
	name = xstrdup(db_val(r, 0, RS_NAME));
	PQclear(r);
	if ((rc = authz_pending_owned(d, VOL_TYPE, a->q->volume_id, a->hold, err)) < 0)
		return rc;
	if (rc == 0) {
		bc_error_set(err, BC_CONFLICT, "another resize of sandbox volume %s took over",
			     a->q->volume_id);
		bc_error_detail(err, "reason", "resize-in-flight");
		return bc_error_detail(err, "retryAfterSeconds", "1");
	}
	grow = a->q->size_gib - old;
	if (grow <= 0) /* grown to this size meanwhile: our pending value goes */
		return authz_pending_clear(d, VOL_TYPE, a->q->volume_id, a->hold, err);
	if ((rc = lock_headroom(d, node, &h)) < 0)
		return db_fail(err, rc);
	if (rc == 0)
		return capacity_refused(err, "volume-storage-unknown", -1, grow,
					"the volume's host has not reported its volume store");
	if (h < grow * GIB)
		return capacity_refused(err, "volume-storage", h < 0 ? 0 : h / GIB, grow,
					"the volume's host has no room to grow it");
	dbp_str(&p, a->q->volume_id);
	if ((rc = db_exec(d, NULL, "UPDATE allocations SET released_at = now() WHERE owner_kind = "
			  "'volume' AND owner_id = $1 AND released_at IS NULL", &p)) < 0 ||
	    (rc = book(d, node, a->q->volume_id, a->tenant, a->q->size_gib)) < 0)
		return db_fail(err, rc);
	if ((rc = quota_check_disk(d, a->tenant, grow, err)) < 0)
		return rc;
	p.n = 0;
	dbp_str(&p, a->q->volume_id);
	dbp_i64(&p, a->q->size_gib);
	rc = db_exec(d, NULL, "WITH v AS (UPDATE volumes SET size_gib = $2, updated_at = now() "
		     "WHERE id = $1) UPDATE authz_resources SET attrs = attrs || "
		     "jsonb_build_object('sizeGiB', $2::text), pending = NULL, pending_hold = NULL, "
		     "pending_at = NULL WHERE type = '" VOL_TYPE "' AND id = $1", &p);
	if (rc == 0)
		rc = spec_bump(d, node); /* its host's spec carries the new size */
	if (rc < 0)
		return db_fail(err, rc);
	a->old_gib = old;
	rc = publish(d, "sandbox.volume.resized", a->q->volume_id, a->tenant, &(struct evd_volume){
		     .pool_id = pool, .node_id = node, .name = name, .size_gib = a->q->size_gib,
		     .previous_size_gib = old});
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int vol_resize(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__ResizeSandboxVolumeRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxVolume *v = NULL;
	struct vresize a = {.q = q};
	struct db *d = ctl_db(c);
	bc_error e = {0};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = unknown_fields(&q->base, err)) < 0 ||
	    (r = check_id(err, "volumeId", "vol", q->volume_id)) < 0 ||
	    (r = check_size(q->size_gib, err)) < 0 ||
	    (r = vol_fetch(c, a.tenant, q->volume_id, &v, err)) < 0)
		return r;
	/* NOT_FOUND for what the caller may not see, before anything is staged */
	if ((r = vol_decide(c, "compute:sandboxes:read", v, err)) < 0 && err->code == BC_NOT_FOUND)
		return r;
	bc_error_clear(err);
	id_new("hold", a.hold, sizeof(a.hold)); /* server-minted: callers cannot share one */
	if ((r = db_tx(d, "READ COMMITTED", rstage_tx, &a, err)) < 0)
		return r;
	if (!a.unchanged &&
	    ((r = authz_decide_staged(c, d, "compute:sandboxes:manage", VOL_TYPE, q->volume_id,
				      err)) < 0 ||
	     (r = db_tx(d, "READ COMMITTED", rapply_tx, &a, err)) < 0)) {
		log_info("sandbox volume %s: resize refused: %s", q->volume_id, err->message);
		if (authz_pending_clear(d, VOL_TYPE, q->volume_id, a.hold, &e) < 0)
			log_warn("sandbox volume %s: pending size not cleared: %s", q->volume_id,
				 e.message);
		return r;
	}
	if ((r = vol_fetch(c, a.tenant, q->volume_id, &v, err)) < 0)
		return r;
	if (!a.unchanged && a.old_gib)
		log_info("sandbox volume %s: resized from %" PRId64 " to %" PRId64 " GiB",
			 q->volume_id, a.old_gib, q->size_gib);
	*ret = &v->base;
	return 0;
}

/* ----------------------------------------------------------------- delete */

struct vdelete {
	const char *tenant, *id;
};

static int in_use(bc_error *err, const char *id, const char *reason, const char *by,
		  const char *what)
{
	bc_error_set(err, BC_CONFLICT, "sandbox volume %s is %s %s", id, what, by);
	bc_error_detail(err, "reason", "%s", reason);
	return bc_error_detail(err, "by", "%s", by);
}

static int vdelete_tx(struct db *d, void *arg, bc_error *err)
{
	enum { DL_STATE, DL_NODE, DL_POOL, DL_NAME, DL_SIZE, DL_TEMPLATE, DL_INSTANCE };
	struct vdelete *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	if ((rc = db_one(d, &r, "SELECT v.state, v.node_id, v.pool_id, v.name, v.size_gib, "
			 "(SELECT tv.template_id FROM template_volumes tv JOIN sandbox_templates t "
			 "ON t.id = tv.template_id WHERE tv.volume_id = v.id AND t.deleted_at IS NULL "
			 "ORDER BY 1 LIMIT 1), (SELECT iv.instance_id FROM instance_volumes iv JOIN "
			 "instances i ON i.id = iv.instance_id WHERE iv.volume_id = v.id AND i.state "
			 "<> 'deleted' ORDER BY 1 LIMIT 1) FROM volumes v WHERE v.id = $1 AND "
			 "v.tenant_id = $2 FOR UPDATE OF v", &p, err, "sandbox volume %s not found",
			 a->id)) < 0)
		return rc;
	if (strcmp(db_val(r, 0, DL_STATE), "ready") != 0)
		rc = 0; /* idempotent: deleting or deleted already */
	else if (db_val(r, 0, DL_INSTANCE))
		rc = in_use(err, a->id, "volume-attached", db_val(r, 0, DL_INSTANCE),
			    "attached by live instance");
	else if (db_val(r, 0, DL_TEMPLATE))
		rc = in_use(err, a->id, "volume-named", db_val(r, 0, DL_TEMPLATE),
			    "named by sandbox template");
	else
		rc = 1;
	if (rc <= 0) {
		PQclear(r);
		return rc;
	}
	/* the host's spec no longer lists it from the generation that takes
	 * this change (spec_take_changes records it as deleting_generation);
	 * the booking stays until the host applied that one */
	p.n = 0;
	dbp_str(&p, a->id);
	rc = db_exec(d, NULL, "UPDATE volumes SET state = 'deleting', deleting_at = now(), "
		     "updated_at = now() WHERE id = $1", &p);
	if (rc == 0)
		rc = spec_bump(d, db_val(r, 0, DL_NODE));
	if (rc == 0)
		rc = publish(d, "sandbox.volume.deleting", a->id, a->tenant, &(struct evd_volume){
			     .pool_id = db_val(r, 0, DL_POOL), .node_id = db_val(r, 0, DL_NODE),
			     .name = db_val(r, 0, DL_NAME), .size_gib = db_i64(r, 0, DL_SIZE)});
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int vol_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__DeleteSandboxVolumeRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxVolume *v = NULL;
	struct vdelete a = {.id = q->volume_id};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_id(err, "volumeId", "vol", q->volume_id)) < 0 ||
	    (r = vol_fetch(c, a.tenant, q->volume_id, &v, err)) < 0 ||
	    (r = vol_decide(c, "compute:sandboxes:manage", v, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", vdelete_tx, &a, err)) < 0 ||
	    (r = vol_fetch(c, a.tenant, q->volume_id, &v, err)) < 0)
		return r;
	log_info("sandbox volume %s: delete requested", q->volume_id);
	*ret = &v->base;
	return 0;
}

/* ------------------------------------------------------ finish deletions */

int vol_finish_deletions(struct db *d, const char *node_id)
{
	enum { FD_ID, FD_TENANT, FD_POOL, FD_NODE, FD_NAME, FD_SIZE };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, n;

	dbp_nstr(&p, node_id);
	/* deleting volumes whose host applied the generation that no longer
	 * lists them, or is gone (lost, retired) */
	rc = db_exec(d, &r, "WITH f AS (SELECT v.id FROM volumes v JOIN nodes n ON n.id = "
		     "v.node_id WHERE v.state = 'deleting' AND ($1::text IS NULL OR v.node_id = $1) "
		     "AND (n.applied_generation >= v.deleting_generation OR n.state <> 'ready') "
		     "ORDER BY v.id LIMIT 500 FOR UPDATE OF v SKIP LOCKED), a AS (UPDATE "
		     "allocations SET released_at = now() WHERE owner_kind = 'volume' AND owner_id "
		     "IN (SELECT id FROM f) AND released_at IS NULL) UPDATE volumes v SET state = "
		     "'deleted', deleted_at = now(), updated_at = now() FROM f WHERE v.id = f.id "
		     "RETURNING v.id, v.tenant_id, v.pool_id, v.node_id, v.name, v.size_gib", &p);
	if (rc < 0)
		return rc;
	n = PQntuples(r);
	for (int i = 0; i < n && rc == 0; i++) {
		rc = publish(d, "sandbox.volume.deleted", db_val(r, i, FD_ID),
			     db_val(r, i, FD_TENANT), &(struct evd_volume){
			     .pool_id = db_val(r, i, FD_POOL), .node_id = db_val(r, i, FD_NODE),
			     .name = db_val(r, i, FD_NAME), .size_gib = db_i64(r, i, FD_SIZE)});
		if (rc == 0)
			log_info("sandbox volume %s: deleted, its booking on %s released",
				 db_val(r, i, FD_ID), db_val(r, i, FD_NODE));
	}
	PQclear(r);
	return rc < 0 ? rc : n;
}

int vol_tenant_teardown(struct db *d, const char *tenant, int *ret_left)
{
	enum { TD_ID, TD_POOL, TD_NODE, TD_NAME, TD_SIZE };
	_cleanup_free_ char *left = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	rc = db_exec(d, &r, "UPDATE volumes SET state = 'deleting', deleting_at = now(), updated_at "
		     "= now() WHERE tenant_id = $1 AND state = 'ready' RETURNING id, pool_id, "
		     "node_id, name, size_gib", &p);
	if (rc < 0)
		return rc;
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		rc = publish(d, "sandbox.volume.deleting", db_val(r, i, TD_ID), tenant,
			     &(struct evd_volume){.pool_id = db_val(r, i, TD_POOL),
			     .node_id = db_val(r, i, TD_NODE), .name = db_val(r, i, TD_NAME),
			     .size_gib = db_i64(r, i, TD_SIZE)});
		if (rc == 0)
			rc = spec_bump(d, db_val(r, i, TD_NODE));
	}
	PQclear(r);
	if (rc == 0)
		rc = db_scalar(d, "SELECT count(*) FROM volumes WHERE tenant_id = $1 AND state <> "
			       "'deleted'", &p, &left);
	if (rc == 0)
		*ret_left = atoi(left);
	return rc;
}

static int finish_tx(struct db *d, void *arg, bc_error *err)
{
	int rc = vol_finish_deletions(d, NULL);

	(void)arg;
	return rc < 0 ? db_fail(err, rc) : 0;
}

void vol_reconcile_tick(struct db *d)
{
	static int64_t last;
	bc_error err = {0};

	if (now_ms() - last < VOL_FINISH_PASS_MS)
		return;
	last = now_ms();
	if (db_tx(d, "READ COMMITTED", finish_tx, NULL, &err) < 0)
		log_warn("volumes: the deletion pass failed: %s", err.message);
}

const struct rpc_handler *vol_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Create", RPC_UNARY, {.unary = vol_create}},
		{"Get", RPC_UNARY, {.unary = vol_get}},
		{"List", RPC_UNARY, {.unary = vol_list}},
		{"Resize", RPC_UNARY, {.unary = vol_resize}},
		{"Delete", RPC_UNARY, {.unary = vol_delete}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
