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
 * The volumes a template names are volume_attach.c's (checked, decided on
 * each volume, written in the template's transaction).
 * None of these publishes an event. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bootdata.h"
#include "db.h"
#include "jsonw.h"
#include "identity.h"
#include "log.h"
#include "rowmsg.h"
#include "sandboxes.h"
#include "secrets.h"
#include "templates.h"
#include "util.h"
#include "validate.h"
#include "volume_attach.h"

#define NAME_MAX_LEN 64
#define WARM_MAX 64

/* A template's env as text: "NAME\tref" lines sorted by name (names and
 * references hold neither a tab nor a newline), the same text for the same
 * env however it was written. */
#define ENV_LIST_SQL(t)                                                                    \
	"coalesce((SELECT string_agg(key || E'\\t' || value, E'\\n' ORDER BY key COLLATE "  \
	"\"C\") FROM jsonb_each_text(" t ".env)), '')"

#define TMPL_COLS                                                                          \
	"t.id, t.tenant_id, t.name, t.pool_id, t.runtime, f.name, t.image_id, t.user_data, "  \
	"t.network, t.default_ttl_seconds, t.max_ttl_seconds, t.warm_min, t.warm_max, "       \
	"t.version, t.created_by, " MS("t.created_at") ", " MS("t.updated_at") ", "           \
	"(SELECT count(*) FILTER (WHERE w.state = 'paused' AND w.desired_state = 'paused' AND " \
	"w.guest_ready_at IS NOT NULL) || ' ' || count(*) FILTER (WHERE w.state IN ("           \
	"'provisioning', 'starting', 'running') OR w.desired_state = 'running' OR (w.state = " \
	"'paused' AND w.guest_ready_at IS NULL)) FROM instances w WHERE "                      \
	"w.warm_template_id = t.id AND w.desired_state <> 'deleted' AND "                    \
	"w.warm_instance_version = t.instance_version), " ENV_LIST_SQL("t") ", " VA_TEMPLATE_SQL("t")    \
	", t.identity"
/* The columns of TMPL_COLS, in its order: the two must stay in step. */
enum {
	TMPL_ID, TMPL_TENANT_ID, TMPL_NAME, TMPL_POOL_ID, TMPL_RUNTIME, TMPL_FLAVOR, TMPL_IMAGE_ID,
	TMPL_USER_DATA, TMPL_NETWORK, TMPL_DEFAULT_TTL, TMPL_MAX_TTL, TMPL_WARM_MIN, TMPL_WARM_MAX,
	TMPL_VERSION, TMPL_CREATED_BY, TMPL_CREATED_AT, TMPL_UPDATED_AT, TMPL_WARM_COUNTS,
	TMPL_ENV, TMPL_VOLUMES, TMPL_IDENTITY, TMPL_NCOLS
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

/* ENV_LIST_SQL's text (in the call's arena, split in place) as t's env. */
static void env_from_text(rpc_call *c, Bc__Compute__V1__SandboxTemplate *t, char *text)
{
	size_t n = *text ? 1 : 0;

	for (const char *p = text; *p; p++)
		n += *p == '\n';
	t->env = rpc_alloc(c, (n + 1) * sizeof(*t->env));
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		Bc__Compute__V1__SandboxTemplate__EnvEntry *e =
			rpc_new(c, &bc__compute__v1__sandbox_template__env_entry__descriptor);
		char *tab = strchr(line, '\t');
		if (!tab || t->n_env >= n)
			continue;
		*tab = '\0';
		e->key = line;
		e->value = tab + 1;
		t->env[t->n_env++] = e;
	}
}

static int env_cmp(const void *a, const void *b)
{
	return strcmp(((const struct secrets_env *)a)->name, ((const struct secrets_env *)b)->name);
}

/* A request's env map (entries of any *EnvEntry type: key, value) as
 * secrets_env in the call's arena, sorted by name. */
#define ENV_OF(c, q, ret_n) env_sorted((c), (q)->n_env, (ret_n), (const void *const *)(q)->env, \
				      offsetof(__typeof__(**(q)->env), key),                   \
				      offsetof(__typeof__(**(q)->env), value))
static struct secrets_env *env_sorted(rpc_call *c, size_t n, size_t *ret_n,
				      const void *const *entries, size_t key_off, size_t val_off)
{
	struct secrets_env *e = rpc_alloc(c, (n + 1) * sizeof(*e));

	for (size_t i = 0; i < n; i++) {
		const char *base = entries[i];
		e[i].name = *(const char *const *)(base + key_off);
		e[i].ref = *(const char *const *)(base + val_off);
	}
	qsort(e, n, sizeof(*e), env_cmp);
	*ret_n = n;
	return e;
}

/* The env as ENV_LIST_SQL writes it (e sorted by name), in the arena. */
static char *env_text(rpc_call *c, const struct secrets_env *e, size_t n)
{
	size_t len = 1;
	char *out;

	for (size_t i = 0; i < n; i++)
		len += strlen(e[i].name) + strlen(e[i].ref) + 2;
	out = rpc_alloc(c, len);
	*out = '\0';
	for (size_t i = 0; i < n; i++)
		strcat(strcat(strcat(strcat(out, i ? "\n" : ""), e[i].name), "\t"), e[i].ref);
	return out;
}

/* The env as the JSON object the env column holds, in the arena. */
static char *env_json(rpc_call *c, const struct secrets_env *e, size_t n)
{
	_cleanup_free_ char *json = NULL;
	struct jsonw w;

	jsonw_begin(&w);
	for (size_t i = 0; i < n; i++)
		jsonw_str(&w, e[i].name, e[i].ref);
	if (jsonw_end(&w, &json) < 0)
		abort();
	return rpc_strdup(c, json);
}

/* A template's own env (entries read back by tmpl_from_row) as
 * secrets_env. */
static struct secrets_env *env_of_template(rpc_call *c, const Bc__Compute__V1__SandboxTemplate *t)
{
	struct secrets_env *e = rpc_alloc(c, (t->n_env + 1) * sizeof(*e));

	for (size_t i = 0; i < t->n_env; i++)
		e[i] = (struct secrets_env){t->env[i]->key, t->env[i]->value};
	return e;
}

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
	t->identity = row_str(c, r, i, TMPL_IDENTITY);
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
	env_from_text(c, t, row_str(c, r, i, TMPL_ENV));
	va_fill(c, t, row_str(c, r, i, TMPL_VOLUMES));
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

/* A template with volumes keeps no warm pool: a warm instance would hold
 * them. */
static int volumes_no_warm(size_t n_volumes, uint32_t warm_max, bc_error *err)
{
	if (n_volumes == 0 || warm_max == 0)
		return 0;
	invalid(err, "warm", "a template with volumes keeps no warm pool (warm.max must be 0)");
	return bc_error_detail(err, "reason", "volumes-warm");
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

/* User data: a secret:// reference (checked with the env), or user data
 * itself (bootdata_check_user). */
static int check_user_data(const char *user_data, bc_error *err)
{
	return secrets_is_ref(user_data) ? 0 : bootdata_check_user(user_data, err);
}

static int check_create(const Bc__Compute__V1__CreateSandboxTemplateRequest *q,
			const struct secrets_env *env, size_t n_env, bc_error *err)
{
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 || (r = check_name(q->name, err)) < 0 ||
	    (r = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return r;
	if (!*q->flavor || !str_is_printable(q->flavor, 64))
		return invalid(err, "flavor", "flavor must be a flavor id or name");
	if (!*q->image_id || !str_is_printable(q->image_id, 64))
		return invalid(err, "imageId", "imageId must be an image id or name");
	if ((r = check_user_data(q->user_data, err)) < 0 ||
	    (r = secrets_check_syntax(env, n_env, q->user_data, err)) < 0)
		return r;
	if (*q->network && (r = check_network(q->network, err)) < 0)
		return r;
	if ((r = check_ttls(q->default_ttl_seconds ? q->default_ttl_seconds : SBX_TTL_DEFAULT,
			    q->max_ttl_seconds ? q->max_ttl_seconds : SBX_TTL_MAX, err)) < 0 ||
	    (r = check_warm(q->warm, err)) < 0 || (r = va_check(q->volumes, q->n_volumes, err)) < 0 ||
	    (r = wid_check_switch(q->identity, false, err)) < 0)
		return r;
	return volumes_no_warm(q->n_volumes, q->warm ? q->warm->max : 0, err);
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
	const struct secrets_env *env;
	size_t n_env;
	struct va_set vs;                /* the volumes as decided */
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

	if ((rc = resolve_shape(d, &s, err)) < 0 ||
	    (rc = secrets_check_refs(d, a->tenant, a->env, a->n_env, q->user_data, err)) < 0)
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
	dbp_str(&p, env_json(a->call, a->env, a->n_env));
	dbp_bool(&p, a->n_env > 0 || secrets_is_ref(q->user_data));
	rc = db_exec(d, NULL, "INSERT INTO sandbox_templates (id, tenant_id, name, pool_id, runtime, "
		     "flavor_id, image_id, user_data, network, default_ttl_seconds, max_ttl_seconds, "
		     "warm_min, warm_max, created_by, env, names_secrets) VALUES ($1, $2, $3, $4, $5, "
		     "$6, $7, $8, $9, $10, $11, $12, $13, $14, $15::jsonb, $16)", &p);
	if (rc == -EEXIST)
		return name_taken(err, q->name);
	if (rc == 0 && *q->identity)
		rc = wid_template_set(d, a->id, q->identity, false);
	if (rc < 0)
		return db_fail(err, rc);
	return va_write_tx(d, a->tenant, a->id, &a->vs, err);
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

	a.env = ENV_OF(c, q, &a.n_env);
	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_create(q, a.env, a.n_env, err)) < 0 ||
	    (r = secrets_decide_template(c, a.tenant, a.n_env, q->user_data, err)) < 0 ||
	    (r = decide_manage(c, a.tenant, err)) < 0 ||
	    (r = va_decide(c, a.tenant, q->pool_id, q->volumes, q->n_volumes, &a.vs, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", tcreate_tx, &a, err)) < 0 ||
	    (r = tmpl_fetch(c, a.tenant, a.id, &t, err)) < 0)
		return r;
	log_info("sandbox template %s: created (%s) for tenant %s", a.id, q->name, a.tenant);
	*ret = &t->base;
	return 0;
}

/* ----------------------------------------------------------------- update */

struct tupdate {
	rpc_call *call;
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q;
	const char *tenant;
	const struct secrets_env *env;   /* the request's env, sorted */
	size_t n_env;
	bool env_given;                  /* env or clear_env: the env is replaced */
	bool guest_asked;                /* a field of what the guest runs is given */
	/* the template's references the secrets decision was made on */
	const char *decided_env, *decided_user_data;
	bool vols_given;                 /* volumes or clear_volumes: the list is replaced */
	bool vols_current;               /* the current list was decided (vs) */
	struct va_set vs;
};

#define Q_SET(q, f, F) ((q)->f##_set_case == BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__##F##_SET_##F)

/* The columns of the template tupdate_tx reads, in its SELECT's order. */
enum {
	UPD_POOL_ID, UPD_NAME, UPD_RUNTIME, UPD_FLAVOR, UPD_IMAGE_ID, UPD_USER_DATA, UPD_NETWORK,
	UPD_DEFAULT_TTL, UPD_MAX_TTL, UPD_FLAVOR_ID, UPD_ENV, UPD_WARM_MAX, UPD_N_VOLUMES
};

/* Under the template's lock: the references the secrets decision was made
 * on are still the template's (CONFLICT reason secrets-changed: someone
 * changed them meanwhile; retry), and those the update writes name
 * secrets the tenant wrote itself. */
static int check_secrets_locked(struct db *d, const struct tupdate *a, const PGresult *r,
				bc_error *err)
{
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q = a->q;
	const char *ud = db_val(r, 0, UPD_USER_DATA);

	if (a->guest_asked &&
	    ((!a->env_given && strcmp(db_val(r, 0, UPD_ENV), a->decided_env) != 0) ||
	     (!Q_SET(q, user_data, USER_DATA) && strcmp(ud, a->decided_user_data) != 0 &&
	      (secrets_is_ref(ud) || secrets_is_ref(a->decided_user_data))))) {
		bc_error_set(err, BC_CONFLICT, "sandbox template %s names other secrets than when "
			     "the update was decided; retry", q->template_id);
		return bc_error_detail(err, "reason", "secrets-changed");
	}
	return secrets_check_refs(d, a->tenant, a->env, a->env_given ? a->n_env : 0,
				  Q_SET(q, user_data, USER_DATA) ? q->user_data : NULL, err);
}

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
			 "t.flavor_id, " ENV_LIST_SQL("t") ", t.warm_max, (SELECT count(*) FROM "
			 "template_volumes v WHERE v.template_id = t.id)" TMPL_FROM "WHERE t.id = $1 AND t.tenant_id = $2 AND "
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
	    (rc = resolve_shape(d, &s, err)) < 0 ||
	    (rc = check_secrets_locked(d, a, r, err)) < 0 ||
	    (rc = volumes_no_warm(a->vols_given ? a->vs.n
				  : (size_t)db_i64(r, 0, UPD_N_VOLUMES), q->warm ? q->warm->max
				  : (uint32_t)db_i64(r, 0, UPD_WARM_MAX), err)) < 0 ||
	    (a->vols_given && (rc = va_write_tx(d, a->tenant, q->template_id, &a->vs, err)) < 0) ||
	    (a->vols_current && (rc = va_same_tx(d, q->template_id, &a->vs, err)) < 0)) {
		PQclear(r);
		return rc;
	}
	/* what the guest runs: flavor, image, user data, env, network */
	guest = strcmp(s.flavor_id, db_val(r, 0, UPD_FLAVOR_ID)) != 0 ||
		(a->env_given && strcmp(env_text(a->call, a->env, a->n_env),
					db_val(r, 0, UPD_ENV)) != 0) ||
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
	dbp_bool(&p, a->env_given);
	dbp_str(&p, env_json(a->call, a->env, a->n_env));
	rc = db_exec(d, NULL, "UPDATE sandbox_templates SET flavor_id = $2, image_id = $3, "
		     "user_data = CASE WHEN $5 THEN coalesce($4, '') ELSE user_data END, env = CASE "
		     "WHEN $13 THEN $14::jsonb ELSE env END, names_secrets = (CASE WHEN $13 THEN "
		     "$14::jsonb ELSE env END) <> '{}'::jsonb OR (CASE WHEN $5 THEN coalesce($4, '') "
		     "ELSE user_data END) LIKE 'secret://%', network = $6, "
		     "default_ttl_seconds = $7, max_ttl_seconds = $8, warm_min = CASE WHEN $9 THEN "
		     "$10::int ELSE warm_min END, warm_max = CASE WHEN $9 THEN $11::int ELSE warm_max "
		     "END, version = version + 1, instance_version = instance_version + CASE WHEN "
		     "$12 THEN 1 ELSE 0 END, updated_at = now() WHERE id = $1", &p);
	PQclear(r); /* s.network may point into it */
	if (rc == 0 && Q_SET(q, identity, IDENTITY))
		rc = wid_template_set(d, q->template_id, q->identity, true);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int check_update(const Bc__Compute__V1__UpdateSandboxTemplateRequest *q,
			const struct secrets_env *env, size_t n_env, bc_error *err)
{
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 ||
	    (r = check_id(err, "templateId", "sbxt", q->template_id)) < 0)
		return r;
	if (Q_SET(q, flavor, FLAVOR) && (!*q->flavor || !str_is_printable(q->flavor, 64)))
		return invalid(err, "flavor", "flavor must be a flavor id or name");
	if (Q_SET(q, image_id, IMAGE_ID) && (!*q->image_id || !str_is_printable(q->image_id, 64)))
		return invalid(err, "imageId", "imageId must be an image id or name");
	if (Q_SET(q, user_data, USER_DATA) && (r = check_user_data(q->user_data, err)) < 0)
		return r;
	if (q->clear_env && n_env > 0)
		return invalid(err, "clearEnv", "clearEnv and env exclude each other");
	if ((r = secrets_check_syntax(env, n_env, Q_SET(q, user_data, USER_DATA) ? q->user_data
							     : NULL, err)) < 0)
		return r;
	if (Q_SET(q, network, NETWORK) && (r = check_network(q->network, err)) < 0)
		return r;
	if ((r = check_warm(q->warm, err)) < 0 ||
	    (Q_SET(q, identity, IDENTITY) && (r = wid_check_switch(q->identity, true, err)) < 0))
		return r;
	if (q->clear_volumes && q->n_volumes > 0)
		return invalid(err, "clearVolumes", "clearVolumes and volumes exclude each other");
	return va_check(q->volumes, q->n_volumes, err);
}

/* The volumes an update is decided on: a new list, or the current one
 * when the update changes what the guest runs (it hands them to new
 * code); a TTL or warm pool change decides nothing more. */
static int decide_update_volumes(rpc_call *c, struct tupdate *a,
				 const Bc__Compute__V1__SandboxTemplate *t, bc_error *err)
{
	if (a->vols_given)
		return va_decide(c, a->tenant, t->pool_id, a->q->volumes, a->q->n_volumes, &a->vs,
				 err);
	a->vols_current = a->guest_asked && t->n_volumes > 0;
	if (!a->vols_current)
		return 0;
	return va_decide(c, a->tenant, t->pool_id, t->volumes, t->n_volumes, &a->vs, err);
}

/* An update that changes what the guest runs is decided on the resulting
 * template's secrets (even when it names none itself: it hands them to new
 * code), which it records for check_secrets_locked. t: the template read
 * before the write's transaction. */
static int decide_update_secrets(rpc_call *c, struct tupdate *a,
				 const Bc__Compute__V1__SandboxTemplate *t, bc_error *err)
{
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q = a->q;
	const char *ud = Q_SET(q, user_data, USER_DATA) ? q->user_data : t->user_data;

	a->decided_env = env_text(c, env_of_template(c, t), t->n_env);
	a->decided_user_data = t->user_data;
	a->guest_asked = Q_SET(q, flavor, FLAVOR) || Q_SET(q, image_id, IMAGE_ID) ||
			 Q_SET(q, user_data, USER_DATA) || Q_SET(q, network, NETWORK) ||
			 a->env_given;
	if (!a->guest_asked)
		return 0;
	return secrets_decide_template(c, a->tenant, a->env_given ? a->n_env : t->n_env, ud, err);
}

static int tmpl_update(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__UpdateSandboxTemplateRequest *q = (const void *)m;
	Bc__Compute__V1__SandboxTemplate *t = NULL;
	struct tupdate a = {.call = c, .q = q};
	int r;

	a.env = ENV_OF(c, q, &a.n_env);
	a.env_given = a.n_env > 0 || q->clear_env;
	a.vols_given = q->n_volumes > 0 || q->clear_volumes;
	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_update(q, a.env, a.n_env, err)) < 0 ||
	    (r = tmpl_fetch(c, a.tenant, q->template_id, &t, err)) < 0 ||
	    (r = decide_update_secrets(c, &a, t, err)) < 0 ||
	    (r = decide_manage(c, a.tenant, err)) < 0 ||
	    (r = decide_update_volumes(c, &a, t, err)) < 0 ||
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
			if ((rc = list_left_out(&skip, err)) < 0) {
				PQclear(r);
				return rc;
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
