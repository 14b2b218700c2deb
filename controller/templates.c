/* templates.c: the SandboxTemplates API (Create, Update, Delete, Get,
 * List). A template belongs to one tenant and fixes what its sandboxes run:
 * pool (and so runtime), flavor, image, user data, network policy, TTL
 * bounds and warm pool. Writes are decided as compute:sandboxes:manage on
 * the tenant, reads as compute:sandboxes:read on the template. The checks
 * are those of an instance create: the pool visible to the tenant, its
 * runtime able to boot the image's format and pass through the flavor's
 * GPUs, the pool's IP range for private and none. Every update raises
 * version; one that changes what the guest runs also raises the internal
 * instance_version (warm instances of an older one are never claimed).
 * Delete hides the template and frees its name; its sandboxes live on.
 * None of these publishes an event. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bootdata.h"
#include "db.h"
#include "log.h"
#include "rowmsg.h"
#include "sandboxes.h"
#include "templates.h"
#include "util.h"
#include "validate.h"

#define NAME_MAX_LEN 64
#define WARM_MAX 64

#define TMPL_COLS                                                                          \
	"t.id, t.tenant_id, t.name, t.pool_id, t.runtime, f.name, t.image_id, t.user_data, "  \
	"t.network, t.default_ttl_seconds, t.max_ttl_seconds, t.warm_min, t.warm_max, "       \
	"t.version, t.created_by, " MS("t.created_at") ", " MS("t.updated_at") ", "           \
	"(SELECT count(*) FILTER (WHERE w.state IN ('paused', 'stopped') AND w.desired_state " \
	"IN ('paused', 'stopped')) || ' ' || count(*) FILTER (WHERE w.state IN ('provisioning', " \
	"'starting', 'running') OR w.desired_state = 'running') FROM instances w WHERE "      \
	"w.warm_template_id = t.id AND w.desired_state <> 'deleted' AND "                    \
	"w.warm_instance_version = t.instance_version)"
/* The columns of TMPL_COLS, in its order: the two must stay in step. */
enum {
	TMPL_ID, TMPL_TENANT_ID, TMPL_NAME, TMPL_POOL_ID, TMPL_RUNTIME, TMPL_FLAVOR, TMPL_IMAGE_ID,
	TMPL_USER_DATA, TMPL_NETWORK, TMPL_DEFAULT_TTL, TMPL_MAX_TTL, TMPL_WARM_MIN, TMPL_WARM_MAX,
	TMPL_VERSION, TMPL_CREATED_BY, TMPL_CREATED_AT, TMPL_UPDATED_AT, TMPL_WARM_COUNTS,
	TMPL_NCOLS
};
COLS_CHECK(TMPL_COLS, TMPL_NCOLS)
#define TMPL_FROM " FROM sandbox_templates t JOIN flavors f ON f.id = t.flavor_id "

/* What each runtime boots and passes through. */
static const struct {
	const char *runtime;
	const char *formats;     /* space-separated image formats */
	bool gpus;
} runtimes[] = {
	{"fake", "qcow2 raw", true},
	{"libvirt", "qcow2 raw", true},
	{"cloud-hypervisor", "raw qcow2", false},
};

static Bc__Compute__V1__SandboxTemplate *tmpl_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__SandboxTemplate *t =
		rpc_new(c, &bc__compute__v1__sandbox_template__descriptor);

	t->id = row_str(c, r, i, TMPL_ID);
	t->tenant_id = row_str(c, r, i, TMPL_TENANT_ID);
	t->name = row_str(c, r, i, TMPL_NAME);
	t->pool_id = row_str(c, r, i, TMPL_POOL_ID);
	t->runtime = row_str(c, r, i, TMPL_RUNTIME);
	t->flavor = row_str(c, r, i, TMPL_FLAVOR);
	t->image_id = row_str(c, r, i, TMPL_IMAGE_ID);
	t->user_data = row_str(c, r, i, TMPL_USER_DATA);
	t->network = row_str(c, r, i, TMPL_NETWORK);
	t->default_ttl_seconds = db_i64(r, i, TMPL_DEFAULT_TTL);
	t->max_ttl_seconds = db_i64(r, i, TMPL_MAX_TTL);
	if (db_i64(r, i, TMPL_WARM_MAX) > 0) {
		t->warm = rpc_new(c, &bc__compute__v1__warm_pool__descriptor);
		t->warm->min = (uint32_t)db_i64(r, i, TMPL_WARM_MIN);
		t->warm->max = (uint32_t)db_i64(r, i, TMPL_WARM_MAX);
	}
	t->version = db_i64(r, i, TMPL_VERSION);
	t->created_by = row_str(c, r, i, TMPL_CREATED_BY);
	t->created_at = db_i64(r, i, TMPL_CREATED_AT);
	t->updated_at = db_i64(r, i, TMPL_UPDATED_AT);
	if (sscanf(db_val(r, i, TMPL_WARM_COUNTS), "%u %u", &t->warm_ready, &t->warm_booting) != 2)
		t->warm_ready = t->warm_booting = 0;
	return t;
}

/* compute:sandboxes:manage on the tenant. */
static int decide_manage(rpc_call *c, const char *tenant, bc_error *err)
{
	struct authz_target t = {.type = "tenant", .id = tenant, .tenant_id = tenant, .parent = ""};

	return authz_decide(c, ctl_db(c), "compute:sandboxes:manage", &t, err);
}

/* compute:sandboxes:read on the template (its pool as parent). */
static int decide_read(rpc_call *c, const Bc__Compute__V1__SandboxTemplate *x, bc_error *err)
{
	struct authz_target t = {.type = "compute-sandbox-template", .id = x->id,
				 .tenant_id = x->tenant_id};
	char parent[128];

	snprintf(parent, sizeof(parent), "compute-pool/%s", x->pool_id);
	t.parent = parent;
	authz_attr(&t, "poolId", x->pool_id);
	authz_attr(&t, "name", x->name);
	authz_attr(&t, "createdBy", x->created_by);
	return authz_decide(c, ctl_db(c), "compute:sandboxes:read", &t, err);
}

static int unknown_fields(const ProtobufCMessage *m, bc_error *err)
{
	if (m->n_unknown_fields == 0)
		return 0;
	return invalid(err, "request", "the request has %u unknown field(s)", m->n_unknown_fields);
}

static int check_name(const char *name, bc_error *err)
{
	size_t n = strlen(name);

	if (n == 0 || n > NAME_MAX_LEN || strspn(name, "abcdefghijklmnopqrstuvwxyz"
						  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return invalid(err, "name", "name must be 1 to %d letters, digits, '.', '_' or '-'",
			       NAME_MAX_LEN);
	return 0;
}

static int check_network(const char *v, bc_error *err)
{
	if (strcmp(v, "egress") && strcmp(v, "private") && strcmp(v, "none"))
		return invalid(err, "network", "network must be egress, private or none");
	return 0;
}

/* env and volumes arrive with their own issues: refused until then. */
static int check_later(size_t n_env, size_t n_volumes, bc_error *err)
{
	if (n_env) {
		bc_error_set(err, BC_UNSUPPORTED, "env (secret references) is not supported yet");
		return bc_error_detail(err, "field", "env");
	}
	if (n_volumes) {
		bc_error_set(err, BC_UNSUPPORTED, "volumes are not supported yet");
		return bc_error_detail(err, "field", "volumes");
	}
	return 0;
}

static int check_ttls(int64_t def, int64_t max, bc_error *err)
{
	if (max < 1 || max > SBX_TTL_MAX)
		return invalid(err, "maxTtlSeconds", "maxTtlSeconds must be between 1 and %d",
			       SBX_TTL_MAX);
	if (def < 1 || def > max)
		return invalid(err, "defaultTtlSeconds", "defaultTtlSeconds must be between 1 and "
			       "maxTtlSeconds (%" PRId64 ")", max);
	return 0;
}

static int check_warm(const Bc__Compute__V1__WarmPool *w, bc_error *err)
{
	if (w && (w->max > WARM_MAX || w->min > w->max))
		return invalid(err, "warm", "warm needs min <= max <= %d", WARM_MAX);
	return 0;
}

static int check_create(const Bc__Compute__V1__CreateSandboxTemplateRequest *q, bc_error *err)
{
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 || (r = check_name(q->name, err)) < 0 ||
	    (r = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return r;
	if (!*q->flavor || !str_is_printable(q->flavor, 64))
		return invalid(err, "flavor", "flavor must be a flavor id or name");
	if (!*q->image_id || !str_is_printable(q->image_id, 64))
		return invalid(err, "imageId", "imageId must be an image id or name");
	if ((r = bootdata_check_user(q->user_data, err)) < 0)
		return r;
	if (*q->network && (r = check_network(q->network, err)) < 0)
		return r;
	if ((r = check_ttls(q->default_ttl_seconds ? q->default_ttl_seconds : SBX_TTL_DEFAULT,
			    q->max_ttl_seconds ? q->max_ttl_seconds : SBX_TTL_MAX, err)) < 0 ||
	    (r = check_warm(q->warm, err)) < 0)
		return r;
	return check_later(q->n_env, q->n_volumes, err);
}

/* The shape a template would have, resolved and checked against its pool. */
struct shape {
	const char *tenant, *pool_id, *flavor, *image_id, *network;
	const char *runtime;              /* the template's (update), or NULL */
	char flavor_id[64], image_id_out[64], runtime_out[32];
};

static int check_runtime(const char *runtime, const char *format, int gpus, bc_error *err)
{
	for (size_t i = 0; i < ARRAY_SIZE(runtimes); i++) {
		if (strcmp(runtimes[i].runtime, runtime) != 0)
			continue;
		if (!strstr(runtimes[i].formats, format)) {
			invalid(err, "imageId", "runtime %s does not boot %s images", runtime, format);
			return bc_error_detail(err, "reason", "image-format-unsupported");
		}
		if (gpus > 0 && !runtimes[i].gpus) {
			invalid(err, "flavor", "runtime %s does not pass GPUs through", runtime);
			return bc_error_detail(err, "reason", "gpus-unsupported");
		}
		return 0;
	}
	bc_error_set(err, BC_INVALID_STATE, "pool runtime %s is not known", runtime);
	return bc_error_detail(err, "reason", "runtime-unknown");
}

/* Pool visible to the tenant; flavor and image known; the runtime boots
 * them; private/none need the pool's IP range. */
static int resolve_shape(struct db *d, struct shape *s, bc_error *err)
{
	enum { SH_RUNTIME, SH_HAS_RANGE, SH_FLAVOR_ID, SH_GPUS, SH_IMAGE_ID, SH_FORMAT };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, s->pool_id);
	dbp_str(&p, s->tenant);
	dbp_str(&p, s->flavor);
	dbp_str(&p, s->image_id);
	rc = db_exec(d, &r, "SELECT p.runtime, p.ipam_subnet IS NOT NULL, (SELECT id FROM flavors "
		     "WHERE (id = $3 OR name = $3) AND deleted_at IS NULL LIMIT 1), (SELECT gpus FROM "
		     "flavors WHERE (id = $3 OR name = $3) AND deleted_at IS NULL LIMIT 1), (SELECT id "
		     "FROM images WHERE (id = $4 OR name = $4) AND deleted_at IS NULL LIMIT 1), "
		     "(SELECT format FROM images WHERE (id = $4 OR name = $4) AND deleted_at IS NULL "
		     "LIMIT 1) FROM pools p WHERE p.id = $1 AND p.deleted_at IS NULL AND "
		     "(cardinality(p.tenant_ids) = 0 OR $2 = ANY (p.tenant_ids))", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0)
		rc = bc_error_set(err, BC_NOT_FOUND, "pool %s not found", s->pool_id);
	else if (!db_val(r, 0, SH_FLAVOR_ID))
		rc = invalid(err, "flavor", "unknown flavor %s", s->flavor);
	else if (!db_val(r, 0, SH_IMAGE_ID))
		rc = invalid(err, "imageId", "unknown image %s", s->image_id);
	else if (s->runtime && strcmp(s->runtime, db_val(r, 0, SH_RUNTIME)) != 0) {
		bc_error_set(err, BC_INVALID_STATE, "pool %s now runs %s, the template %s",
			     s->pool_id, db_val(r, 0, SH_RUNTIME), s->runtime);
		rc = bc_error_detail(err, "reason", "pool-runtime-changed");
	} else if (strcmp(s->network, "egress") != 0 && !db_bool(r, 0, SH_HAS_RANGE)) {
		bc_error_set(err, BC_INVALID_STATE, "network %s needs the pool's IP range, and pool "
			     "%s has none", s->network, s->pool_id);
		rc = bc_error_detail(err, "reason", "pool-without-ip-range");
	} else
		rc = check_runtime(db_val(r, 0, SH_RUNTIME), db_val(r, 0, SH_FORMAT),
				   (int)db_i64(r, 0, SH_GPUS), err);
	if (rc == 0) {
		snprintf(s->runtime_out, sizeof(s->runtime_out), "%s", db_val(r, 0, SH_RUNTIME));
		snprintf(s->flavor_id, sizeof(s->flavor_id), "%s", db_val(r, 0, SH_FLAVOR_ID));
		snprintf(s->image_id_out, sizeof(s->image_id_out), "%s", db_val(r, 0, SH_IMAGE_ID));
	}
	PQclear(r);
	return rc;
}

static int name_taken(bc_error *err, const char *name)
{
	bc_error_set(err, BC_CONFLICT, "a sandbox template named %s exists", name);
	return bc_error_detail(err, "reason", "name-taken");
}

struct tcreate {
	rpc_call *call;
	const Bc__Compute__V1__CreateSandboxTemplateRequest *q;
	const char *tenant;
	char id[64];
};

static int tcreate_tx(struct db *d, void *arg, bc_error *err)
{
	struct tcreate *a = arg;
	const Bc__Compute__V1__CreateSandboxTemplateRequest *q = a->q;
	struct shape s = {.tenant = a->tenant, .pool_id = q->pool_id, .flavor = q->flavor,
			  .image_id = q->image_id, .network = *q->network ? q->network : "egress"};
	struct dbp p = {0};
	int rc;

	if ((rc = resolve_shape(d, &s, err)) < 0)
		return rc;
	id_new("sbxt", a->id, sizeof(a->id));
	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	dbp_str(&p, q->name);
	dbp_str(&p, q->pool_id);
	dbp_str(&p, s.runtime_out);
	dbp_str(&p, s.flavor_id);
	dbp_str(&p, s.image_id_out);
	dbp_str(&p, q->user_data);
	dbp_str(&p, s.network);
	dbp_i64(&p, q->default_ttl_seconds ? q->default_ttl_seconds : SBX_TTL_DEFAULT);
	dbp_i64(&p, q->max_ttl_seconds ? q->max_ttl_seconds : SBX_TTL_MAX);
	dbp_i64(&p, q->warm ? q->warm->min : 0);
	dbp_i64(&p, q->warm ? q->warm->max : 0);
	dbp_str(&p, ctl_principal(a->call)->id);
	rc = db_exec(d, NULL, "INSERT INTO sandbox_templates (id, tenant_id, name, pool_id, runtime, "
		     "flavor_id, image_id, user_data, network, default_ttl_seconds, max_ttl_seconds, "
		     "warm_min, warm_max, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
		     "$10, $11, $12, $13, $14)", &p);
	if (rc == -EEXIST)
		return name_taken(err, q->name);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Read one live template of tenant (NOT_FOUND otherwise). */
static int tmpl_fetch(rpc_call *c, const char *tenant, const char *id,
		      Bc__Compute__V1__SandboxTemplate **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " TMPL_COLS TMPL_FROM "WHERE t.id = $1 AND "
			 "t.tenant_id = $2 AND t.deleted_at IS NULL", &p, err,
			 "sandbox template %s not found", id)) < 0)
		return rc;
	*ret = tmpl_from_row(c, r, 0);
	PQclear(r);
	return 0;
}

static int tmpl_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__CreateSandboxTemplateRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxTemplate *t = NULL;
	struct tcreate a = {.call = c, .q = q};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_create(q, err)) < 0 || (r = decide_manage(c, a.tenant, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", tcreate_tx, &a, err)) < 0 ||
	    (r = tmpl_fetch(c, a.tenant, a.id, &t, err)) < 0)
		return r;
	log_info("sandbox template %s: created (%s) for tenant %s", a.id, q->name, a.tenant);
	*ret = &t->base;
	return 0;
}

/* ----------------------------------------------------------------- update */

struct tupdate {
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q;
	const char *tenant;
};

#define Q_SET(q, f, F) ((q)->f##_set_case == BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__##F##_SET_##F)

/* The columns of the template tupdate_tx reads, in its SELECT's order. */
enum {
	UPD_POOL_ID, UPD_NAME, UPD_RUNTIME, UPD_FLAVOR, UPD_IMAGE_ID, UPD_USER_DATA, UPD_NETWORK,
	UPD_DEFAULT_TTL, UPD_MAX_TTL, UPD_FLAVOR_ID
};

static int check_immutable(const Bc__Compute__V1__UpdateSandboxTemplateRequest *q,
			   const PGresult *r, bc_error *err)
{
	const char *field = NULL;

	if (Q_SET(q, pool_id, POOL_ID) && strcmp(q->pool_id, db_val(r, 0, UPD_POOL_ID)) != 0)
		field = "poolId";
	else if (Q_SET(q, name, NAME) && strcmp(q->name, db_val(r, 0, UPD_NAME)) != 0)
		field = "name";
	else if (Q_SET(q, runtime, RUNTIME) && strcmp(q->runtime, db_val(r, 0, UPD_RUNTIME)) != 0)
		field = "runtime";
	if (!field)
		return 0;
	invalid(err, field, "%s of a sandbox template cannot change", field);
	return bc_error_detail(err, "reason", "immutable");
}

static int tupdate_tx(struct db *d, void *arg, bc_error *err)
{
	struct tupdate *a = arg;
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q = a->q;
	struct shape s = {.tenant = a->tenant};
	struct dbp p = {0};
	PGresult *r = NULL;
	int64_t def, max;
	bool guest;
	int rc;

	dbp_str(&p, q->template_id);
	dbp_str(&p, a->tenant);
	if ((rc = db_one(d, &r, "SELECT t.pool_id, t.name, t.runtime, f.name, t.image_id, "
			 "t.user_data, t.network, t.default_ttl_seconds, t.max_ttl_seconds, "
			 "t.flavor_id" TMPL_FROM "WHERE t.id = $1 AND t.tenant_id = $2 AND "
			 "t.deleted_at IS NULL FOR UPDATE OF t", &p, err,
			 "sandbox template %s not found", q->template_id)) < 0)
		return rc;
	s.pool_id = db_val(r, 0, UPD_POOL_ID);
	s.runtime = db_val(r, 0, UPD_RUNTIME);
	s.flavor = Q_SET(q, flavor, FLAVOR) ? q->flavor : db_val(r, 0, UPD_FLAVOR_ID);
	s.image_id = Q_SET(q, image_id, IMAGE_ID) ? q->image_id : db_val(r, 0, UPD_IMAGE_ID);
	s.network = Q_SET(q, network, NETWORK) ? q->network : db_val(r, 0, UPD_NETWORK);
	def = Q_SET(q, default_ttl_seconds, DEFAULT_TTL_SECONDS) ? q->default_ttl_seconds
								  : db_i64(r, 0, UPD_DEFAULT_TTL);
	max = Q_SET(q, max_ttl_seconds, MAX_TTL_SECONDS) ? q->max_ttl_seconds
							  : db_i64(r, 0, UPD_MAX_TTL);
	if ((rc = check_immutable(q, r, err)) < 0 || (rc = check_ttls(def, max, err)) < 0 ||
	    (rc = resolve_shape(d, &s, err)) < 0) {
		PQclear(r);
		return rc;
	}
	/* what the guest runs: flavor, image, user data, network */
	guest = strcmp(s.flavor_id, db_val(r, 0, UPD_FLAVOR_ID)) != 0 ||
		strcmp(s.image_id_out, db_val(r, 0, UPD_IMAGE_ID)) != 0 ||
		strcmp(s.network, db_val(r, 0, UPD_NETWORK)) != 0 ||
		(Q_SET(q, user_data, USER_DATA) &&
		 strcmp(q->user_data, db_val(r, 0, UPD_USER_DATA)) != 0);
	p.n = 0;
	dbp_str(&p, q->template_id);
	dbp_str(&p, s.flavor_id);
	dbp_str(&p, s.image_id_out);
	dbp_nstr(&p, Q_SET(q, user_data, USER_DATA) ? q->user_data : NULL);
	dbp_bool(&p, Q_SET(q, user_data, USER_DATA));
	dbp_str(&p, s.network);
	dbp_i64(&p, def);
	dbp_i64(&p, max);
	dbp_bool(&p, q->warm != NULL);
	dbp_i64(&p, q->warm ? q->warm->min : 0);
	dbp_i64(&p, q->warm ? q->warm->max : 0);
	dbp_bool(&p, guest);
	rc = db_exec(d, NULL, "UPDATE sandbox_templates SET flavor_id = $2, image_id = $3, "
		     "user_data = CASE WHEN $5 THEN coalesce($4, '') ELSE user_data END, network = $6, "
		     "default_ttl_seconds = $7, max_ttl_seconds = $8, warm_min = CASE WHEN $9 THEN "
		     "$10::int ELSE warm_min END, warm_max = CASE WHEN $9 THEN $11::int ELSE warm_max "
		     "END, version = version + 1, instance_version = instance_version + CASE WHEN "
		     "$12 THEN 1 ELSE 0 END, updated_at = now() WHERE id = $1", &p);
	PQclear(r); /* s.network may point into it */
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int check_update(const Bc__Compute__V1__UpdateSandboxTemplateRequest *q, bc_error *err)
{
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 ||
	    (r = check_id(err, "templateId", "sbxt", q->template_id)) < 0)
		return r;
	if (Q_SET(q, flavor, FLAVOR) && (!*q->flavor || !str_is_printable(q->flavor, 64)))
		return invalid(err, "flavor", "flavor must be a flavor id or name");
	if (Q_SET(q, image_id, IMAGE_ID) && (!*q->image_id || !str_is_printable(q->image_id, 64)))
		return invalid(err, "imageId", "imageId must be an image id or name");
	if (Q_SET(q, user_data, USER_DATA) && (r = bootdata_check_user(q->user_data, err)) < 0)
		return r;
	if (Q_SET(q, network, NETWORK) && (r = check_network(q->network, err)) < 0)
		return r;
	if ((r = check_warm(q->warm, err)) < 0)
		return r;
	return check_later(q->n_env, q->n_volumes, err);
}

static int tmpl_update(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxTemplate *t = NULL;
	struct tupdate a = {.q = q};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_update(q, err)) < 0 || (r = tmpl_fetch(c, a.tenant, q->template_id, &t, err)) < 0 ||
	    (r = decide_manage(c, a.tenant, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", tupdate_tx, &a, err)) < 0 ||
	    (r = tmpl_fetch(c, a.tenant, q->template_id, &t, err)) < 0)
		return r;
	log_info("sandbox template %s: updated to version %" PRId64, t->id, t->version);
	*ret = &t->base;
	return 0;
}

/* ------------------------------------------------------- delete, get, list */

static int tmpl_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__DeleteSandboxTemplateRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxTemplate *t = NULL;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (rc = check_id(err, "templateId", "sbxt", q->template_id)) < 0 ||
	    (rc = tmpl_fetch(c, tenant, q->template_id, &t, err)) < 0 ||
	    (rc = decide_manage(c, tenant, err)) < 0)
		return rc;
	dbp_str(&p, q->template_id);
	dbp_str(&p, tenant);
	if ((rc = db_one(ctl_db(c), &r, "UPDATE sandbox_templates SET deleted_at = now(), "
			 "updated_at = now() WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL "
			 "RETURNING id", &p, err, "sandbox template %s not found",
			 q->template_id)) < 0)
		return rc;
	PQclear(r);
	log_info("sandbox template %s: deleted", q->template_id);
	*ret = &t->base;
	return 0;
}

static int tmpl_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__GetSandboxTemplateRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxTemplate *t = NULL;
	const char *tenant;
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (r = check_id(err, "templateId", "sbxt", q->template_id)) < 0 ||
	    (r = tmpl_fetch(c, tenant, q->template_id, &t, err)) < 0 ||
	    (r = decide_read(c, t, err)) < 0)
		return r;
	*ret = &t->base;
	return 0;
}

static int tmpl_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Compute__V1__ListSandboxTemplatesRequest *q = (const void *)m;
	Bc__Compute__V1__ListSandboxTemplatesResponse *resp;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	rc = db_exec(ctl_db(c), &r, "SELECT " TMPL_COLS TMPL_FROM "WHERE t.tenant_id = $1 AND "
		     "t.deleted_at IS NULL ORDER BY t.name LIMIT 1000", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_sandbox_templates_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		Bc__Compute__V1__SandboxTemplate *t = tmpl_from_row(c, r, i);
		bc_error skip = {0};
		if (decide_read(c, t, &skip) < 0) {
			if (skip.code == BC_UNAVAILABLE || skip.code == BC_INTERNAL) {
				PQclear(r);
				*err = skip;
				return -BC_EDOMAIN;
			}
			continue; /* one the caller may not read is left out */
		}
		resp->items[resp->n_items++] = t;
	}
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

const struct rpc_handler *tmpl_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Create", RPC_UNARY, {.unary = tmpl_create}},
		{"Update", RPC_UNARY, {.unary = tmpl_update}},
		{"Delete", RPC_UNARY, {.unary = tmpl_delete}},
		{"Get", RPC_UNARY, {.unary = tmpl_get}},
		{"List", RPC_UNARY, {.unary = tmpl_list}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
