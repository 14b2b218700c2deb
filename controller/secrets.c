/* secrets.c: the secret broker (see secrets.h and docs/secrets.md).
 *
 * A secret is a row of secret_refs (name, scope, kind, version) and one
 * blob of the sealed store (sealed.h) holding its value; no column and no
 * answer carries the value. Put writes a new blob and points the row at
 * it (a rotation raises version), then deletes the old blob; Puts of one
 * name are serialised by a transaction-scoped advisory lock so that no
 * blob is orphaned. Every method is decided as compute:secrets:manage on
 * the tenant (on compute-fleet/global for the fleet scope, operators
 * only), and Put and Delete publish secret.put / secret.deleted carrying
 * the name, scope and version only.
 *
 * A sandbox template names secrets as secret://<tenant>/<sec_ id or name>
 * in env or as its whole user data. REFS_SQL looks every reference up in
 * one statement, for the template write (secrets_check_refs) and for each
 * instance made from it (secrets_resolve), which also reads each value
 * through sealed_get with the version it records. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/secrets.pb-c.h"
#include "event_data.h"
#include "jsonw.h"
#include "log.h"
#include "outbox.h"
#include "rowmsg.h"
#include "sealed.h"
#include "secrets.h"
#include "util.h"
#include "validate.h"


#define SECRET_COLS                                                                        \
	"s.id, s.tenant_id, s.name, s.scope, s.kind, s.version, " MS("s.created_at") ", "     \
	MS("s.updated_at") ", s.created_by"
/* The columns of SECRET_COLS, in its order: the two must stay in step. */
enum {
	SEC_ID, SEC_TENANT_ID, SEC_NAME, SEC_SCOPE, SEC_KIND, SEC_VERSION, SEC_CREATED_AT,
	SEC_UPDATED_AT, SEC_CREATED_BY, SEC_NCOLS
};
COLS_CHECK(SECRET_COLS, SEC_NCOLS)

bool secrets_broker(const struct ctl_app *app)
{
	return app && app->cfg.secret_broker != 0;
}

static Bc__Compute__V1__Secret *secret_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__Secret *s = rpc_new(c, &bc__compute__v1__secret__descriptor);

	s->id = row_str(c, r, i, SEC_ID);
	s->tenant_id = row_str(c, r, i, SEC_TENANT_ID);
	s->name = row_str(c, r, i, SEC_NAME);
	s->scope = row_str(c, r, i, SEC_SCOPE);
	s->kind = row_str(c, r, i, SEC_KIND);
	s->version = db_i64(r, i, SEC_VERSION);
	s->created_at = db_i64(r, i, SEC_CREATED_AT);
	s->updated_at = db_i64(r, i, SEC_UPDATED_AT);
	s->created_by = row_str(c, r, i, SEC_CREATED_BY);
	return s;
}

/* ------------------------------------------------------------ the scope */

static int unknown_fields(const ProtobufCMessage *m, bc_error *err)
{
	if (m->n_unknown_fields == 0)
		return 0;
	return invalid(err, "request", "the request has %u unknown field(s)", m->n_unknown_fields);
}

/* The tenant and scope a call acts on: "" or "tenant" is the tenant's own
 * (auth_tenant); "fleet" is the root tenant's fleet scope, operators only. */
static int call_scope(rpc_call *c, const char *tenant_id, const char *scope,
		      const char **ret_tenant, const char **ret_scope, bc_error *err)
{
	int r;

	if (!*scope || strcmp(scope, "tenant") == 0)
		*ret_scope = "tenant";
	else if (strcmp(scope, "fleet") == 0)
		*ret_scope = "fleet";
	else
		return invalid(err, "scope", "scope must be tenant or fleet");
	if ((r = auth_tenant(c, tenant_id, ret_tenant, err)) < 0)
		return r;
	if (strcmp(*ret_scope, "fleet") != 0)
		return 0;
	if (!auth_is_operator(ctl_principal(c))) {
		bc_error_set(err, BC_ACCESS_DENIED, "fleet secrets are the operator's");
		bc_error_detail(err, "action", SECRET_ACTION);
		bc_error_detail(err, "resource", "compute-fleet/global");
		return bc_error_detail(err, "reason", "operator-required");
	}
	if (strcmp(*ret_tenant, AUTH_ROOT_TENANT) != 0)
		return invalid(err, "tenantId", "fleet secrets belong to the root tenant");
	return 0;
}

/* compute:secrets:manage on the tenant, or on the fleet. */
static int decide(rpc_call *c, const char *tenant, bool fleet, bc_error *err)
{
	struct authz_target t = {.type = "tenant", .id = tenant, .tenant_id = tenant,
				 .parent = ""};

	if (fleet) {
		t.type = "compute-fleet";
		t.id = "global";
	}
	return authz_decide(c, ctl_db(c), SECRET_ACTION, &t, err);
}

static int no_broker(bc_error *err)
{
	bc_error_set(err, BC_INVALID_CONFIG, "no secret broker is configured "
		     "(config key secret_broker)");
	return bc_error_detail(err, "reason", "no-secret-broker");
}

/* ------------------------------------------------------------------- put */

static int check_put(const Bc__Compute__V1__PutSecretRequest *q, bc_error *err)
{
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0)
		return r;
	if (!str_is_slug(q->name, SECRET_NAME_MAX))
		return invalid(err, "name", "name must be 1 to %d lowercase letters, digits, '-' or "
			       "'.', starting with a letter or digit", SECRET_NAME_MAX);
	if (q->value.len == 0) {
		invalid(err, "value", "value is required");
		return bc_error_detail(err, "reason", "value-empty");
	}
	if (q->value.len > SECRET_VALUE_MAX) {
		invalid(err, "value", "value is larger than %d bytes", SECRET_VALUE_MAX);
		return bc_error_detail(err, "reason", "value-too-large");
	}
	if (memchr(q->value.data, '\0', q->value.len)) {
		invalid(err, "value", "value holds a NUL byte, which no environment variable can");
		return bc_error_detail(err, "reason", "value-has-nul");
	}
	return 0;
}

struct sput {
	rpc_call *call;
	const Bc__Compute__V1__PutSecretRequest *q;
	const char *tenant, *scope;
	PGresult *row;      /* SECRET_COLS of the secret as written */
};

static int publish(struct db *d, const char *type, const PGresult *r)
{
	_cleanup_free_ char *data = NULL;
	char subject[96];
	int rc;

	rc = evd_secret(type, &(struct evd_secret){.name = db_val(r, 0, SEC_NAME),
			.scope = db_val(r, 0, SEC_SCOPE), .version = db_i64(r, 0, SEC_VERSION)},
			&data);
	if (rc < 0)
		return rc;
	snprintf(subject, sizeof(subject), "secret/%s", db_val(r, 0, SEC_ID));
	return event_publish(d, type, subject, db_val(r, 0, SEC_TENANT_ID), data);
}

/* The row to write: existing (locked; its id and old blob) or a new id. */
static int put_existing(struct db *d, struct sput *a, char id[64], char **ret_old_ref)
{
	enum { EX_ID, EX_REF };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->tenant);
	dbp_str(&p, a->scope);
	dbp_str(&p, a->q->name);
	/* Puts of one name wait for each other, so each sees the last one's blob */
	if ((rc = db_exec(d, NULL, "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 "
			  "|| '/' || $3, 14))", &p)) < 0 ||
	    (rc = db_exec(d, &r, "SELECT id, sealed_ref FROM secret_refs WHERE tenant_id = $1 AND "
			  "scope = $2 AND name = $3 FOR UPDATE", &p)) < 0)
		return rc;
	if (PQntuples(r) == 1) {
		snprintf(id, 64, "%s", db_val(r, 0, EX_ID));
		*ret_old_ref = xstrdup(db_val(r, 0, EX_REF));
	} else {
		id_new("sec", id, 64);
	}
	PQclear(r);
	return 0;
}

static int sput_tx(struct db *d, void *arg, bc_error *err)
{
	struct sput *a = arg;
	const struct principal *pr = ctl_principal(a->call);
	_cleanup_free_ char *old = NULL;
	char id[64], ref[SEALED_REF_MAX];
	struct sealed_owner o = {.kind = "secret", .id = id, .tenant_id = a->tenant};
	struct dbp p = {0};
	int rc;

	PQclear(a->row); /* a retried transaction starts over */
	a->row = NULL;
	if ((rc = put_existing(d, a, id, &old)) < 0 ||
	    (rc = sealed_put(d, &o, a->q->value.data, a->q->value.len, ref)) < 0)
		return db_fail(err, rc);
	dbp_str(&p, id);
	dbp_str(&p, a->tenant);
	dbp_str(&p, a->q->name);
	dbp_str(&p, a->scope);
	dbp_str(&p, ref);
	dbp_str(&p, pr->id);
	rc = db_exec(d, &a->row, old ?
		     "UPDATE secret_refs s SET version = version + 1, sealed_ref = $5, updated_at = "
		     "now() WHERE id = $1 AND tenant_id = $2 AND name = $3 AND scope = $4 AND "
		     "$6::text IS NOT NULL RETURNING " SECRET_COLS :
		     "INSERT INTO secret_refs AS s (id, tenant_id, name, scope, kind, sealed_ref, "
		     "created_by) VALUES ($1, $2, $3, $4, 'user', $5, $6) RETURNING " SECRET_COLS, &p);
	if (rc == 0 && old)
		rc = sealed_delete(d, old);
	if (rc >= 0)
		rc = publish(d, "secret.put", a->row);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int secret_put(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	Bc__Compute__V1__PutSecretRequest *q = (void *)m;
	struct sput a = {.call = c, .q = q};
	int r;

	if ((r = call_scope(c, q->tenant_id, q->scope, &a.tenant, &a.scope, err)) < 0 ||
	    (r = check_put(q, err)) < 0 || (r = decide(c, a.tenant, *a.scope == 'f', err)) < 0)
		goto out;
	if (!secrets_broker(ctl_app(c))) {
		r = no_broker(err);
		goto out;
	}
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", sput_tx, &a, err)) < 0)
		goto out;
	*ret = &secret_from_row(c, a.row, 0)->base;
	log_info("secret %s: %s version %s put in tenant %s (%s scope)", db_val(a.row, 0, SEC_ID),
		 q->name, db_val(a.row, 0, SEC_VERSION), a.tenant, a.scope);
out:
	PQclear(a.row);
	if (q->value.data)
		OPENSSL_cleanse(q->value.data, q->value.len);
	return r;
}

/* ------------------------------------------------------------ list, delete */

static int secret_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__ListSecretsRequest *q = (const void *)m;
	Bc__Compute__V1__ListSecretsResponse *resp;
	const char *tenant, *scope;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = unknown_fields(&q->base, err)) < 0 ||
	    (rc = call_scope(c, q->tenant_id, q->scope, &tenant, &scope, err)) < 0 ||
	    (rc = decide(c, tenant, *scope == 'f', err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, scope);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " SECRET_COLS " FROM secret_refs s WHERE "
			  "s.tenant_id = $1 AND s.scope = $2 AND s.kind = 'user' ORDER BY s.name "
			  "LIMIT 1000", &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_secrets_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[resp->n_items++] = secret_from_row(c, r, i);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

struct sdelete {
	const char *tenant, *scope, *key;
	PGresult *row;
};

static int sdelete_tx(struct db *d, void *arg, bc_error *err)
{
	struct sdelete *a = arg;
	struct dbp p = {0};
	int rc;

	PQclear(a->row);
	a->row = NULL;
	dbp_str(&p, a->tenant);
	dbp_str(&p, a->scope);
	dbp_str(&p, a->key);
	if ((rc = db_one(d, &a->row, "DELETE FROM secret_refs s WHERE s.tenant_id = $1 AND "
			 "s.scope = $2 AND s.kind = 'user' AND (s.id = $3 OR s.name = $3) RETURNING "
			 SECRET_COLS ", s.sealed_ref", &p, err, "secret %s not found", a->key)) < 0)
		return rc;
	rc = sealed_delete(d, db_val(a->row, 0, SEC_NCOLS));
	if (rc >= 0)
		rc = publish(d, "secret.deleted", a->row);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int secret_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			 bc_error *err)
{
	const Bc__Compute__V1__DeleteSecretRequest *q = (const void *)m;
	struct sdelete a = {.key = q->name};
	int r;

	if ((r = unknown_fields(&q->base, err)) < 0 ||
	    (r = call_scope(c, q->tenant_id, q->scope, &a.tenant, &a.scope, err)) < 0)
		return r;
	if (!id_valid("sec", q->name) && !str_is_slug(q->name, SECRET_NAME_MAX))
		return invalid(err, "name", "name must be a secret's name or sec_ id");
	if ((r = decide(c, a.tenant, *a.scope == 'f', err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", sdelete_tx, &a, err)) < 0) {
		PQclear(a.row);
		return r;
	}
	*ret = &secret_from_row(c, a.row, 0)->base;
	log_info("secret %s: %s deleted from tenant %s", db_val(a.row, 0, SEC_ID),
		 db_val(a.row, 0, SEC_NAME), a.tenant);
	PQclear(a.row);
	return 0;
}

const struct rpc_handler *secrets_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Put", RPC_UNARY, {.unary = secret_put}},
		{"List", RPC_UNARY, {.unary = secret_list}},
		{"Delete", RPC_UNARY, {.unary = secret_delete}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}

/* ------------------------------------------------- template references */

bool secrets_is_ref(const char *s)
{
	return s && strncmp(s, SECRET_URI, strlen(SECRET_URI)) == 0;
}

/* secret://<tenant>/<key>: the tenant slug and the key (a sec_ id or a
 * name) into their buffers; -EINVAL otherwise. */
static int parse_ref(const char *ref, char tenant[64], char key[64])
{
	const char *t, *slash;

	if (!secrets_is_ref(ref))
		return -EINVAL;
	t = ref + strlen(SECRET_URI);
	slash = strchr(t, '/');
	if (!slash || slash - t > 63 || strlen(slash + 1) > 63)
		return -EINVAL;
	snprintf(tenant, 64, "%.*s", (int)(slash - t), t);
	snprintf(key, 64, "%s", slash + 1);
	if (!str_is_slug(tenant, 63) ||
	    (!id_valid("sec", key) && !str_is_slug(key, SECRET_NAME_MAX)))
		return -EINVAL;
	return 0;
}

int secrets_check_syntax(const struct secrets_env *env, size_t n, const char *user_data,
			 bc_error *err)
{
	char tenant[64], key[64];

	if (n > BOOTDATA_ENV_MAX)
		return invalid(err, "env", "at most %d env entries", BOOTDATA_ENV_MAX);
	for (size_t i = 0; i < n; i++) {
		if (!bootdata_env_name_ok(env[i].name))
			return invalid(err, "env", "env names must be shell variable names "
				       "([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)",
				       BOOTDATA_ENV_NAME_MAX);
		if (parse_ref(env[i].ref, tenant, key) < 0)
			return invalid(err, "env", "env.%s must be secret://<tenant>/<secret id or "
				       "name>", env[i].name);
	}
	if (secrets_is_ref(user_data) && parse_ref(user_data, tenant, key) < 0)
		return invalid(err, "userData", "userData must be secret://<tenant>/<secret id or "
			       "name> to name a secret");
	return 0;
}

int secrets_decide_template(rpc_call *c, const char *tenant, size_t n, const char *user_data,
			    bc_error *err)
{
	const struct principal *p = ctl_principal(c);
	int r;

	if (n == 0 && !secrets_is_ref(user_data))
		return 0;
	if (!secrets_broker(ctl_app(c)))
		return no_broker(err);
	if (!p || p->kind != PRINCIPAL_IDENTITY || *p->delegation_id) {
		bc_error_set(err, BC_ACCESS_DENIED, "naming secrets in a template needs the caller's "
			     "own credential");
		bc_error_detail(err, "action", SECRET_ACTION);
		bc_error_detail(err, "resource", "tenant/%s", tenant);
		return bc_error_detail(err, "reason", "credential-required");
	}
	if ((r = decide(c, tenant, false, err)) < 0)
		return r;
	return strcmp(tenant, AUTH_ROOT_TENANT) == 0 ? decide(c, tenant, true, err) : 0;
}

/* Every reference of a template ($2: env {NAME: ref}; $3: user data ref or
 * NULL, as the row with name "") with the secret it names in tenant $1: a
 * tenant-scope user secret first, whatever else bears the key otherwise. */
#define REF_TENANT "substring(e.value from '^secret://([^/]*)/')"
#define REF_KEY "regexp_replace(e.value, '^secret://[^/]*/', '')"
#define REFS_SQL                                                                           \
	"SELECT e.key, " REF_TENANT " = $1, s.id, s.version, s.kind, s.scope, s.sealed_ref, " \
	"coalesce((SELECT state FROM tenants WHERE id = $1), 'deleted') FROM (SELECT key, "   \
	"value FROM jsonb_each_text($2::jsonb) UNION ALL SELECT '', $3::text WHERE $3 IS NOT " \
	"NULL) e LEFT JOIN LATERAL (SELECT s.id, s.version, s.kind, s.scope, s.sealed_ref "   \
	"FROM secret_refs s WHERE s.tenant_id = $1 AND " REF_TENANT " = $1 AND (s.id = "      \
	REF_KEY " OR s.name = " REF_KEY ") ORDER BY s.scope = 'tenant' AND s.kind = 'user' "  \
	"DESC LIMIT 1) s ON true ORDER BY e.key"
/* REFS_SQL's columns, in its order */
enum { REF_NAME, REF_SAME_TENANT, REF_ID, REF_VERSION, REF_KIND, REF_SCOPE, REF_SEALED,
       REF_TENANT_STATE };

/* INVALID_INPUT on the reference's field, with reason. */
static int bad_ref(bc_error *err, const char *name, const char *reason, const char *msg)
{
	if (*name)
		invalid(err, "env", "env.%s: %s", name, msg);
	else
		invalid(err, "userData", "userData: %s", msg);
	if (*name)
		bc_error_detail(err, "name", "%s", name);
	return bc_error_detail(err, "reason", "%s", reason);
}

/* A reference's row: a tenant-scope secret the tenant wrote, else the
 * refusal. at_write: a missing secret is INVALID_INPUT (the write names
 * it), else INVALID_STATE (deleted since the template was written). */
static int judge_ref(const PGresult *r, int i, bool at_write, bc_error *err)
{
	const char *name = db_val(r, i, REF_NAME);

	if (!db_bool(r, i, REF_SAME_TENANT))
		return bad_ref(err, name, "secret-other-tenant", "a template names only its own "
			       "tenant's secrets");
	if (!db_val(r, i, REF_ID) && at_write)
		return bad_ref(err, name, "secret-not-found", "no such secret");
	if (!db_val(r, i, REF_ID)) {
		bc_error_set(err, BC_INVALID_STATE, "%s%s: the secret it names was deleted",
			     *name ? "env." : "userData", name);
		return bc_error_detail(err, "reason", "secret-not-found");
	}
	if (strcmp(db_val(r, i, REF_KIND), "user") != 0)
		return bad_ref(err, name, "secret-platform-minted", "a platform-minted secret "
			       "cannot be named");
	if (strcmp(db_val(r, i, REF_SCOPE), "tenant") != 0)
		return bad_ref(err, name, "secret-fleet", "a fleet secret cannot be named");
	return 0;
}

/* REFS_SQL for env (n entries) and user_data into *ret. */
static int refs_query(struct db *d, const char *tenant, const char *env_json,
		      const char *user_data, PGresult **ret)
{
	struct dbp p = {0};

	dbp_str(&p, tenant);
	dbp_str(&p, env_json);
	dbp_nstr(&p, secrets_is_ref(user_data) ? user_data : NULL);
	return db_exec(d, ret, REFS_SQL, &p);
}

int secrets_check_refs(struct db *d, const char *tenant, const struct secrets_env *env,
		       size_t n, const char *user_data, bc_error *err)
{
	_cleanup_free_ char *json = NULL;
	PGresult *r = NULL;
	struct jsonw w;
	int rc;

	if (n == 0 && !secrets_is_ref(user_data))
		return 0;
	jsonw_begin(&w);
	for (size_t i = 0; i < n; i++)
		jsonw_str(&w, env[i].name, env[i].ref);
	if ((rc = jsonw_end(&w, &json)) < 0 || (rc = refs_query(d, tenant, json, user_data, &r)) < 0)
		return db_fail(err, rc);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++)
		rc = judge_ref(r, i, true, err);
	PQclear(r);
	return rc;
}

/* ------------------------------------------------------------ resolution */

void secrets_resolved_free(struct secrets_resolved *r)
{
	for (size_t i = 0; i < r->n_env; i++) {
		OPENSSL_cleanse((char *)r->env[i].value, r->env[i].len);
		free((char *)r->env[i].value);
		free((char *)r->env[i].name);
	}
	free(r->env);
	if (r->user_data) {
		OPENSSL_cleanse(r->user_data, strlen(r->user_data));
		free(r->user_data);
	}
	free(r->versions);
	*r = (struct secrets_resolved){0};
}

/* Take the value of row i: into the env, or as the user data. */
static int take_value(const PGresult *r, int i, char *v, size_t len, struct secrets_resolved *o,
		      bc_error *err)
{
	const char *name = db_val(r, i, REF_NAME);
	int rc;

	if (*name) {
		o->env[o->n_env++] = (struct bootdata_env){.name = xstrdup(name), .value = v,
							    .len = len};
		return 0;
	}
	o->user_data = v;
	if (secrets_is_ref(v))
		return bad_ref(err, "", "user-data-type", "the secret it names is a reference "
			       "itself");
	if ((rc = bootdata_check_user(v, err)) < 0)
		return bc_error_detail(err, "secret", "%s", db_val(r, i, REF_ID));
	return 0;
}

/* One attempt: the refs and versions in one statement, then each value.
 * -EAGAIN when a blob went (a rotation committed between the two). */
static int resolve_once(struct db *d, const char *tenant, const char *env_json,
			const char *user_data, struct secrets_resolved *o, bc_error *err)
{
	PGresult *r = NULL;
	struct jsonw w;
	int rc;

	if ((rc = refs_query(d, tenant, env_json, user_data, &r)) < 0)
		return db_fail(err, rc);
	o->env = xcalloc((size_t)PQntuples(r) + 1, sizeof(*o->env));
	jsonw_begin(&w);
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		char *v = NULL;
		size_t len = 0;

		if (strcmp(db_val(r, i, REF_TENANT_STATE), "active") != 0) {
			bc_error_set(err, BC_INVALID_STATE, "tenant %s is not active: its secrets are "
				     "released to no instance", tenant);
			rc = bc_error_detail(err, "reason", "tenant-inactive");
			break;
		}
		if ((rc = judge_ref(r, i, false, err)) < 0)
			break;
		jsonw_i64(&w, db_val(r, i, REF_ID), db_i64(r, i, REF_VERSION));
		if ((rc = sealed_get(d, db_val(r, i, REF_SEALED), &v, &len)) == -ENOENT)
			break;
		rc = rc < 0 ? db_fail(err, rc) : take_value(r, i, v, len, o, err);
	}
	PQclear(r);
	if (rc == 0)
		return jsonw_end(&w, &o->versions) < 0 ? bc_error_set(err, BC_INTERNAL, "out of "
								      "memory") : 0;
	free(w.buf);
	return rc == -ENOENT ? -EAGAIN : rc;
}

int secrets_resolve(bool broker, struct db *d, const char *tenant,
		    const char *env_json, const char *user_data, struct secrets_resolved *ret,
		    bc_error *err)
{
	bool has_env = env_json && *env_json && strcmp(env_json, "{}") != 0;
	int rc = -EAGAIN;

	*ret = (struct secrets_resolved){0};
	if (!has_env && !secrets_is_ref(user_data))
		return 0;
	if (!broker)
		return no_broker(err);
	for (int attempt = 0; attempt < 3 && rc == -EAGAIN; attempt++) {
		secrets_resolved_free(ret);
		rc = resolve_once(d, tenant, has_env ? env_json : "{}", user_data, ret, err);
	}
	if (rc == -EAGAIN)
		rc = bc_error_set(err, BC_UNAVAILABLE, "the template's secrets kept changing while "
				  "they were read; retry");
	if (rc < 0)
		secrets_resolved_free(ret);
	return rc;
}

int secrets_record_minted(struct db *d, const char *tenant, const char *kind,
			  const char *name, const char *ref)
{
	char id[64];
	struct dbp p = {0};

	id_new("sec", id, sizeof(id));
	dbp_str(&p, id);
	dbp_str(&p, tenant);
	dbp_str(&p, name);
	dbp_str(&p, kind);
	dbp_str(&p, ref);
	return db_exec(d, NULL, "INSERT INTO secret_refs (id, tenant_id, name, kind, sealed_ref) "
		       "VALUES ($1, $2, $3, $4, $5)", &p);
}

int secrets_tenant_deleted(struct db *d, const char *tenant)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	if ((rc = db_exec(d, &r, "DELETE FROM secret_refs s WHERE s.tenant_id = $1 AND s.kind = "
			  "'user' RETURNING " SECRET_COLS ", s.sealed_ref", &p)) < 0)
		return rc;
	for (int i = 0; rc >= 0 && i < PQntuples(r); i++) {
		_cleanup_free_ char *data = NULL;
		char subject[96];

		rc = sealed_delete(d, db_val(r, i, SEC_NCOLS));
		if (rc >= 0)
			rc = evd_secret("secret.deleted", &(struct evd_secret){
					.name = db_val(r, i, SEC_NAME), .scope = db_val(r, i, SEC_SCOPE),
					.version = db_i64(r, i, SEC_VERSION)}, &data);
		snprintf(subject, sizeof(subject), "secret/%s", db_val(r, i, SEC_ID));
		if (rc >= 0)
			rc = event_publish(d, "secret.deleted", subject, tenant, data);
	}
	PQclear(r);
	return rc < 0 ? rc : 0;
}
