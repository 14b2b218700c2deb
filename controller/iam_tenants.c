/* iam_tenants.c: the operator's Tenants, Identities, ApiTokens and
 * Delegations services (the last three also self-service for a tenant's
 * own administrators, decided as IAM actions: iam_self.c). Tokens are random, shown once, stored as SHA-256
 * and may expire; an agent identity acts only under a live delegation from
 * a user of its tenant (auth.c refuses it once the delegation is revoked).
 * Each change and its event commit together. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "bc/admin/v1/iam.pb-c.h"
#include "db.h"
#include "iam_self.h"
#include "iam_tenants.h"
#include "log.h"
#include "outbox.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

#define TOKEN_TTL_MAX (400LL * 86400)

struct write_arg {
	struct iam_write *w;
	PGresult **ret;
};

static int write_tx(struct db *d, void *arg, bc_error *err)
{
	struct write_arg *a = arg;
	struct iam_write *w = a->w;
	_cleanup_free_ char *data = NULL;
	PGresult *r = NULL;
	char subject[160];
	int rc = evd_iam(w->ev_type, &w->ev, &data);

	if (rc < 0)
		return db_fail(err, rc);
	rc = db_exec(d, &r, w->sql, &w->p);

	if (rc == -EEXIST) {
		bc_error_set(err, BC_CONFLICT, "%s", "already exists");
		return bc_error_detail(err, "reason", "%s", w->conflict_reason);
	}
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return bc_error_set(err, BC_NOT_FOUND, "%s", w->notfound_msg);
	}
	snprintf(subject, sizeof(subject), "%s/%s", w->subject_kind, db_val(r, 0, w->id_col));
	rc = event_publish(d, w->ev_type, subject, db_val(r, 0, w->tenant_col), data);
	if (rc < 0) {
		PQclear(r);
		return db_fail(err, rc);
	}
	PQclear(*a->ret);
	*a->ret = r;
	return 0;
}

int iam_write_run(rpc_call *c, struct iam_write *w, PGresult **ret, bc_error *err)
{
	struct write_arg a = {w, ret};

	*ret = NULL;
	return db_tx(ctl_db(c), "READ COMMITTED", write_tx, &a, err);
}

/* ---------------------------------------------------------------- tenants */

#define TENANT_COLS "id, name, state, " MS("created_at")
/* The columns of TENANT_COLS, in its order: the two must stay in step. */
enum { TENANT_ID, TENANT_NAME, TENANT_STATE, TENANT_CREATED_AT, TENANT_NCOLS };
COLS_CHECK(TENANT_COLS, TENANT_NCOLS)

static Bc__Admin__V1__Tenant *tenant_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Tenant *t = rpc_new(c, &bc__admin__v1__tenant__descriptor);

	t->id = row_str(c, r, i, TENANT_ID);
	t->name = row_str(c, r, i, TENANT_NAME);
	t->state = row_str(c, r, i, TENANT_STATE);
	t->created_at = db_i64(r, i, TENANT_CREATED_AT);
	return t;
}

static int check_tenant_id(bc_error *err, const char *field, const char *id)
{
	if (!str_is_slug(id, 63))
		return invalid(err, field, "%s must be a tenant id ([a-z0-9][a-z0-9.-], at most 63)",
			       field);
	return 0;
}

static int tenants_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	const Bc__Admin__V1__CreateTenantRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING " TENANT_COLS,
		.notfound_msg = "", .conflict_reason = "tenant-exists", .ev_type = "tenant.created",
		.ev = {.name = q->name},
		.subject_kind = "tenant", .id_col = TENANT_ID,
		.tenant_col = TENANT_ID};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_tenant_id(err, "id", q->id)) < 0)
		return rc;
	if (!str_is_printable(q->name, 128))
		return invalid(err, "name", "name must be at most 128 printable characters");
	dbp_str(&w.p, q->id);
	dbp_str(&w.p, *q->name ? q->name : q->id);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &tenant_row(c, r, 0)->base;
	PQclear(r);
	log_info("tenant %s: created", q->id);
	return 0;
}

static int tenants_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Admin__V1__GetTenantRequest *q = (const void *)m;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_tenant_id(err, "tenantId", q->tenant_id)) < 0)
		return rc;
	dbp_str(&p, q->tenant_id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " TENANT_COLS " FROM tenants WHERE id = $1", &p, err,
			  "tenant %s not found", q->tenant_id)) < 0)
		return rc;
	*ret = &tenant_row(c, r, 0)->base;
	PQclear(r);
	return 0;
}

static int tenants_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	const Bc__Admin__V1__ListTenantsRequest *q = (const void *)m;
	Bc__Admin__V1__ListTenantsResponse *resp;
	int limit = q->limit ? q->limit : 100, rc;
	struct dbp p = {0};
	PGresult *r = NULL;

	if (q->limit < 0 || q->limit > 500)
		return invalid(err, "limit", "limit must be between 1 and 500");
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " TENANT_COLS " FROM tenants WHERE id > $1 "
			  "ORDER BY id LIMIT $2", &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_tenants_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[resp->n_items++] = tenant_row(c, r, i);
	if ((int)resp->n_items == limit)
		resp->cursor = resp->items[limit - 1]->id;
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

/* A tenant becomes deleted only once it has no live instance: INVALID_STATE
 * (reason tenant-not-empty, instances) before; set it deleting first and
 * delete them. The update checks again, for a create racing this call. */
static int check_empty(rpc_call *c, const char *tenant, bc_error *err)
{
	_cleanup_free_ char *n = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, tenant);
	rc = db_scalar(ctl_db(c), "SELECT count(*) FROM instances WHERE tenant_id = $1 AND state "
		       "<> 'deleted'", &p, &n);
	if (rc < 0)
		return db_fail(err, rc);
	if (strcmp(n, "0") == 0)
		return 0;
	bc_error_set(err, BC_INVALID_STATE, "tenant %s still has %s live instances", tenant, n);
	bc_error_detail(err, "instances", "%s", n);
	return bc_error_detail(err, "reason", "tenant-not-empty");
}

/* A deleting tenant is being torn down (teardown.c: its tokens revoked,
 * its instances deleting): it only goes on to deleted. INVALID_STATE
 * (reason tenant-deleting) for anything else. */
static int check_not_deleting(rpc_call *c, const char *tenant, const char *want, bc_error *err)
{
	_cleanup_free_ char *st = NULL;
	struct dbp p = {0};
	int rc;

	if (strcmp(want, "deleting") == 0 || strcmp(want, "deleted") == 0)
		return 0;
	dbp_str(&p, tenant);
	rc = db_scalar(ctl_db(c), "SELECT state FROM tenants WHERE id = $1", &p, &st);
	if (rc == -ENOENT)
		return 0; /* the update says NOT_FOUND */
	if (rc < 0)
		return db_fail(err, rc);
	if (strcmp(st, "deleting") != 0)
		return 0;
	bc_error_set(err, BC_INVALID_STATE, "tenant %s is being torn down: it can only become "
		     "deleted", tenant);
	bc_error_detail(err, "state", "deleting");
	return bc_error_detail(err, "reason", "tenant-deleting");
}

static int tenants_set_state(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			     bc_error *err)
{
	const Bc__Admin__V1__SetTenantStateRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "UPDATE tenants SET state = $2, updated_at = now() WHERE id = $1 AND "
		       "state <> 'deleted' AND (state <> 'deleting' OR $2 IN ('deleting', "
		       "'deleted')) AND ($2 <> 'deleted' OR NOT EXISTS (SELECT 1 FROM "
		       "instances WHERE tenant_id = $1 AND state <> 'deleted')) RETURNING " TENANT_COLS,
		.ev_type = "tenant.state-changed", .subject_kind = "tenant", .conflict_reason = "",
		.ev = {.state = q->state}};
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if ((rc = check_tenant_id(err, "tenantId", q->tenant_id)) < 0)
		return rc;
	if (strcmp(q->state, "active") && strcmp(q->state, "suspended") &&
	    strcmp(q->state, "deleting") && strcmp(q->state, "deleted"))
		return invalid(err, "state", "state must be active, suspended, deleting or deleted");
	if (strcmp(q->tenant_id, ctl_principal(c)->tenant_id) == 0) {
		bc_error_set(err, BC_INVALID_STATE, "the operator's own tenant stays active");
		return bc_error_detail(err, "reason", "root-tenant");
	}
	if ((rc = check_not_deleting(c, q->tenant_id, q->state, err)) < 0)
		return rc;
	if (strcmp(q->state, "deleted") == 0 && (rc = check_empty(c, q->tenant_id, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "tenant %s not found (or it still has instances)", q->tenant_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->tenant_id);
	dbp_str(&w.p, q->state);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &tenant_row(c, r, 0)->base;
	PQclear(r);
	log_info("tenant %s: now %s", q->tenant_id, q->state);
	return 0;
}

/* ------------------------------------------------------------- identities */

#define IDN_COLS "id, tenant_id, kind, name, is_admin, state, " MS("created_at")
/* The columns of IDN_COLS, in its order: the two must stay in step. */
enum {
	IDN_ID, IDN_TENANT_ID, IDN_KIND, IDN_NAME, IDN_IS_ADMIN, IDN_STATE, IDN_CREATED_AT,
	IDN_NCOLS
};
COLS_CHECK(IDN_COLS, IDN_NCOLS)

static Bc__Admin__V1__Identity *idn_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Identity *x = rpc_new(c, &bc__admin__v1__identity__descriptor);

	x->id = row_str(c, r, i, IDN_ID);
	x->tenant_id = row_str(c, r, i, IDN_TENANT_ID);
	x->kind = row_str(c, r, i, IDN_KIND);
	x->name = row_str(c, r, i, IDN_NAME);
	x->is_admin = db_bool(r, i, IDN_IS_ADMIN);
	x->state = row_str(c, r, i, IDN_STATE);
	x->created_at = db_i64(r, i, IDN_CREATED_AT);
	return x;
}

static int idn_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__CreateIdentityRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "INSERT INTO identities (id, tenant_id, kind, name, is_admin) SELECT $1, id, "
		       "$3, $4, $5 FROM tenants WHERE id = $2 AND state <> 'deleted' RETURNING " IDN_COLS,
		.conflict_reason = "identity-exists", .ev_type = "identity.created",
		.ev = {.name = q->name, .kind = q->kind},
		.subject_kind = "identity", .id_col = IDN_ID,
		.tenant_col = IDN_TENANT_ID};
	PGresult *r = NULL;
	char id[64], msg[128];
	const char *tenant;
	struct iam_obj o;
	int rc;

	if ((rc = iam_scope_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (rc = check_tenant_id(err, "tenantId", tenant)) < 0)
		return rc;
	if (strcmp(q->kind, "user") && strcmp(q->kind, "service") && strcmp(q->kind, "agent"))
		return invalid(err, "kind", "kind must be user, service or agent");
	if (!*q->name || !str_is_printable(q->name, 128))
		return invalid(err, "name", "name must be 1 to 128 printable characters");
	if (q->is_admin && strcmp(q->kind, "agent") == 0)
		return invalid(err, "isAdmin", "an agent is never an administrator");
	id_new("idn", id, sizeof(id));
	o = (struct iam_obj){.type = "iam-identity", .id = id, .tenant = tenant,
			     .admin = q->is_admin, .attrs = {"kind", q->kind, "name", q->name,
							     "isAdmin", q->is_admin ? "true" : "false"}};
	if ((rc = iam_decide(c, "iam:identities:create", &o, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "tenant %s not found", tenant);
	w.notfound_msg = msg;
	dbp_str(&w.p, id);
	dbp_str(&w.p, tenant);
	dbp_str(&w.p, q->kind);
	dbp_str(&w.p, q->name);
	dbp_bool(&w.p, q->is_admin);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &idn_row(c, r, 0)->base;
	PQclear(r);
	log_info("identity %s: created (%s in tenant %s) by %s", id, q->kind, tenant,
		 ctl_principal(c)->id);
	return 0;
}

#define IDN_OF "SELECT tenant_id, id, is_admin FROM identities WHERE id = $1"

/* Decide action on identity id; admin_only: the change needs an
 * administrator when the identity is one. */
static int idn_decide(rpc_call *c, const char *action, const char *id, bool admin_only,
		      bc_error *err)
{
	struct iam_ref ref;
	struct iam_obj o;
	int rc;

	if ((rc = iam_identity_of(c, IDN_OF, id, "identity", &ref, err)) < 0)
		return rc;
	o = (struct iam_obj){.type = "iam-identity", .id = id, .tenant = ref.tenant,
			     .admin = admin_only && ref.admin,
			     .attrs = {"isAdmin", ref.admin ? "true" : "false"}};
	return iam_decide(c, action, &o, err);
}

static int idn_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		   bc_error *err)
{
	const Bc__Admin__V1__GetIdentityRequest *q = (const void *)m;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "identityId", "idn", q->identity_id)) < 0 ||
	    (rc = idn_decide(c, "iam:identities:read", q->identity_id, false, err)) < 0)
		return rc;
	dbp_str(&p, q->identity_id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " IDN_COLS " FROM identities WHERE id = $1", &p, err,
			  "identity %s not found", q->identity_id)) < 0)
		return rc;
	*ret = &idn_row(c, r, 0)->base;
	PQclear(r);
	return 0;
}

static int idn_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Admin__V1__ListIdentitiesRequest *q = (const void *)m;
	Bc__Admin__V1__ListIdentitiesResponse *resp;
	int limit = q->limit ? q->limit : 100, rc;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;

	if (q->limit < 0 || q->limit > 500)
		return invalid(err, "limit", "limit must be between 1 and 500");
	if ((rc = iam_scope_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " IDN_COLS " FROM identities WHERE ($1 = '' OR "
			  "tenant_id = $1) AND id > $2 ORDER BY id LIMIT $3", &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_identities_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		/* each item is checked; one the caller may not read is left out */
		struct iam_obj o = {.type = "iam-identity", .id = db_val(r, i, IDN_ID),
				    .tenant = db_val(r, i, IDN_TENANT_ID),
				    .attrs = {"isAdmin",
					      db_bool(r, i, IDN_IS_ADMIN) ? "true" : "false"}};
		if ((rc = iam_visible(c, "iam:identities:read", &o, err)) < 0) {
			PQclear(r);
			return rc;
		}
		if (rc)
			resp->items[resp->n_items++] = idn_row(c, r, i);
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, IDN_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

static int idn_set_state(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			 bc_error *err)
{
	const Bc__Admin__V1__SetIdentityStateRequest *q = (const void *)m;
	struct iam_write w = {
		/* a user leaving active revokes every delegation to it in the same
		 * statement, each with its delegation.revoked event ($3, reason
		 * user-inactive) */
		.sql = "WITH u AS (UPDATE identities SET state = $2, updated_at = now() WHERE id = "
		       "$1 AND state <> 'deleted' RETURNING " IDN_COLS "), d AS (UPDATE delegations "
		       "SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL AND $2 <> "
		       "'active' AND EXISTS (SELECT 1 FROM u) RETURNING id, tenant_id), e AS (INSERT "
		       "INTO events (type, subject, tenant_id, data) SELECT 'delegation.revoked', "
		       "'delegation/' || id, tenant_id, $3::jsonb FROM d) SELECT * FROM u",
		.ev_type = "identity.state-changed", .subject_kind = "identity",
		.ev = {.state = q->state},
		.tenant_col = IDN_TENANT_ID,
		.conflict_reason = ""};
	_cleanup_free_ char *revoked = NULL;
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if ((rc = check_id(err, "identityId", "idn", q->identity_id)) < 0)
		return rc;
	if (strcmp(q->state, "active") && strcmp(q->state, "suspended") && strcmp(q->state, "deleted"))
		return invalid(err, "state", "state must be active, suspended or deleted");
	if (strcmp(q->identity_id, ctl_principal(c)->id) == 0) {
		bc_error_set(err, BC_INVALID_STATE, "no identity changes its own state");
		return bc_error_detail(err, "reason", "self");
	}
	if ((rc = idn_decide(c, "iam:identities:update", q->identity_id, true, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "identity %s not found", q->identity_id);
	w.notfound_msg = msg;
	if ((rc = evd_iam("delegation.revoked", &(struct evd_iam){.reason = "user-inactive"},
			  &revoked)) < 0)
		return bc_error_set(err, BC_INTERNAL, "%s", strerror(-rc));
	dbp_str(&w.p, q->identity_id);
	dbp_str(&w.p, q->state);
	dbp_str(&w.p, revoked);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &idn_row(c, r, 0)->base;
	PQclear(r);
	log_info("identity %s: now %s", q->identity_id, q->state);
	return 0;
}

/* ------------------------------------------------------------- API tokens */

#define TOK_COLS "k.id, k.identity_id, k.name, coalesce(" MS("k.expires_at") ", 0), " \
	"coalesce(" MS("k.revoked_at") ", 0), " MS("k.created_at") ", i.tenant_id"
/* The columns of TOK_COLS, in its order: the two must stay in step. */
enum {
	TOK_ID, TOK_IDENTITY_ID, TOK_NAME, TOK_EXPIRES_AT, TOK_REVOKED_AT, TOK_CREATED_AT,
	TOK_TENANT_ID, TOK_NCOLS
};
COLS_CHECK(TOK_COLS, TOK_NCOLS)

static Bc__Admin__V1__ApiToken *tok_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__ApiToken *t = rpc_new(c, &bc__admin__v1__api_token__descriptor);

	t->id = row_str(c, r, i, TOK_ID);
	t->identity_id = row_str(c, r, i, TOK_IDENTITY_ID);
	t->name = row_str(c, r, i, TOK_NAME);
	t->expires_at = db_i64(r, i, TOK_EXPIRES_AT);
	t->revoked_at = db_i64(r, i, TOK_REVOKED_AT);
	t->created_at = db_i64(r, i, TOK_CREATED_AT);
	return t;
}

/* Decide action on token id of identity (whose tenant it is in): a token
 * of an administrator needs an administrator. */
static int tok_decide(rpc_call *c, const char *action, const char *id, const char *identity,
		      bc_error *err)
{
	char parent[96];
	struct iam_ref ref;
	struct iam_obj o;
	int rc;

	if ((rc = iam_identity_of(c, IDN_OF, identity, "identity", &ref, err)) < 0)
		return rc;
	snprintf(parent, sizeof(parent), "iam-identity/%s", identity);
	o = (struct iam_obj){.type = "iam-token", .id = id, .tenant = ref.tenant, .parent = parent,
			     .admin = ref.admin, .attrs = {"identityId", identity}};
	return iam_decide(c, action, &o, err);
}

static int tok_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__CreateApiTokenRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "WITH k AS (INSERT INTO api_tokens (id, identity_id, token_hash, name, "
		       "expires_at) SELECT $1, id, $3, $4, CASE WHEN $5 > 0 THEN now() + "
		       "make_interval(secs => $5) END FROM identities WHERE id = $2 AND state = "
		       "'active' RETURNING *) SELECT " TOK_COLS " FROM k JOIN identities i ON "
		       "i.id = k.identity_id",
		.conflict_reason = "token-exists", .ev_type = "token.created", .subject_kind = "token",
		.ev = {.name = q->name, .identity_id = q->identity_id},
		.tenant_col = TOK_TENANT_ID};
	Bc__Admin__V1__ApiToken *t;
	char id[64], token[128], hash[65], msg[128];
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "identityId", "idn", q->identity_id)) < 0)
		return rc;
	id_new("tok", id, sizeof(id));
	if ((rc = tok_decide(c, "iam:tokens:create", id, q->identity_id, err)) < 0)
		return rc;
	if (q->ttl_seconds < 0 || q->ttl_seconds > TOKEN_TTL_MAX)
		return invalid(err, "ttlSeconds", "ttlSeconds must be between 0 (never) and %lld",
			       TOKEN_TTL_MAX);
	if (!str_is_printable(q->name, 128))
		return invalid(err, "name", "name must be at most 128 printable characters");
	auth_token_new(token, sizeof(token));
	sha256_hex(token, strlen(token), hash);
	snprintf(msg, sizeof(msg), "identity %s not found or not active", q->identity_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, id);
	dbp_str(&w.p, q->identity_id);
	dbp_str(&w.p, hash);
	dbp_str(&w.p, q->name);
	dbp_i64(&w.p, q->ttl_seconds);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	t = tok_row(c, r, 0);
	t->token = rpc_strdup(c, token);
	OPENSSL_cleanse(token, sizeof(token));
	PQclear(r);
	*ret = &t->base;
	log_info("token %s: created for identity %s", id, q->identity_id);
	return 0;
}

static int tok_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Admin__V1__ListApiTokensRequest *q = (const void *)m;
	Bc__Admin__V1__ListApiTokensResponse *resp;
	struct iam_ref ref;
	char parent[96];
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "identityId", "idn", q->identity_id)) < 0 ||
	    (rc = iam_identity_of(c, IDN_OF, q->identity_id, "identity", &ref, err)) < 0)
		return rc;
	snprintf(parent, sizeof(parent), "iam-identity/%s", q->identity_id);
	dbp_str(&p, q->identity_id);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " TOK_COLS " FROM api_tokens k JOIN identities i "
			  "ON i.id = k.identity_id WHERE k.identity_id = $1 ORDER BY k.id LIMIT 500",
			  &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_api_tokens_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		struct iam_obj o = {.type = "iam-token", .id = db_val(r, i, TOK_ID),
				    .tenant = ref.tenant,
				    .parent = parent, .attrs = {"identityId", q->identity_id}};
		if ((rc = iam_visible(c, "iam:tokens:read", &o, err)) < 0) {
			PQclear(r);
			return rc;
		}
		if (rc)
			resp->items[resp->n_items++] = tok_row(c, r, i);
	}
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

static int tok_revoke(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__RevokeApiTokenRequest *q = (const void *)m;
	struct iam_ref ref;
	struct iam_write w = {
		.sql = "WITH k AS (UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) "
		       "WHERE id = $1 RETURNING *) SELECT " TOK_COLS " FROM k JOIN identities i ON "
		       "i.id = k.identity_id",
		.conflict_reason = "", .ev_type = "token.revoked", .subject_kind = "token",
		.tenant_col = TOK_TENANT_ID};
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if ((rc = check_id(err, "tokenId", "tok", q->token_id)) < 0 ||
	    (rc = iam_identity_of(c, "SELECT i.tenant_id, i.id, i.is_admin FROM api_tokens k JOIN "
				  "identities i ON i.id = k.identity_id WHERE k.id = $1",
				  q->token_id, "token", &ref, err)) < 0 ||
	    (rc = tok_decide(c, "iam:tokens:revoke", q->token_id, ref.identity, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "token %s not found", q->token_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->token_id);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &tok_row(c, r, 0)->base;
	PQclear(r);
	log_info("token %s: revoked", q->token_id);
	return 0;
}

/* ------------------------------------------------------------ delegations */

#define DLG_COLS "id, tenant_id, agent_id, user_id, " MS("created_at") ", coalesce(" \
	MS("revoked_at") ", 0)"
/* The columns of DLG_COLS, in its order: the two must stay in step. */
enum {
	DLG_ID, DLG_TENANT_ID, DLG_AGENT_ID, DLG_USER_ID, DLG_CREATED_AT, DLG_REVOKED_AT,
	DLG_NCOLS
};
COLS_CHECK(DLG_COLS, DLG_NCOLS)

static Bc__Admin__V1__Delegation *dlg_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Delegation *x = rpc_new(c, &bc__admin__v1__delegation__descriptor);

	x->id = row_str(c, r, i, DLG_ID);
	x->tenant_id = row_str(c, r, i, DLG_TENANT_ID);
	x->agent_id = row_str(c, r, i, DLG_AGENT_ID);
	x->user_id = row_str(c, r, i, DLG_USER_ID);
	x->created_at = db_i64(r, i, DLG_CREATED_AT);
	x->revoked_at = db_i64(r, i, DLG_REVOKED_AT);
	return x;
}

/* Decide action on delegation id of agent for user: acting for an
 * administrator needs an administrator to grant it. */
static int dlg_decide(rpc_call *c, const char *action, const char *id, const char *agent,
		      const char *user, bc_error *err)
{
	struct iam_ref a, u;
	struct iam_obj o;
	char parent[96];
	int rc;

	if ((rc = iam_identity_of(c, IDN_OF, agent, "identity", &a, err)) < 0 ||
	    (rc = iam_identity_of(c, IDN_OF, user, "identity", &u, err)) < 0)
		return rc;
	snprintf(parent, sizeof(parent), "iam-identity/%s", agent);
	o = (struct iam_obj){.type = "iam-delegation", .id = id, .tenant = a.tenant,
			     .parent = parent, .admin = u.admin,
			     .attrs = {"agentId", agent, "userId", user}};
	return iam_decide(c, action, &o, err);
}

static int dlg_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__CreateDelegationRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "INSERT INTO delegations (id, tenant_id, agent_id, user_id) SELECT $1, "
		       "a.tenant_id, a.id, u.id FROM identities a JOIN identities u ON u.tenant_id = "
		       "a.tenant_id WHERE a.id = $2 AND a.kind = 'agent' AND a.state = 'active' AND "
		       "u.id = $3 AND u.kind = 'user' AND u.state = 'active' RETURNING " DLG_COLS,
		.notfound_msg = "no active agent and active user of one tenant with these ids",
		.conflict_reason = "agent-delegated", .ev_type = "delegation.created",
		.ev = {.agent_id = q->agent_id, .user_id = q->user_id},
		.subject_kind = "delegation", .tenant_col = DLG_TENANT_ID};
	PGresult *r = NULL;
	char id[64];
	int rc;

	if ((rc = check_id(err, "agentId", "idn", q->agent_id)) < 0 ||
	    (rc = check_id(err, "userId", "idn", q->user_id)) < 0)
		return rc;
	id_new("dlg", id, sizeof(id));
	if ((rc = dlg_decide(c, "iam:delegations:create", id, q->agent_id, q->user_id, err)) < 0)
		return rc;
	dbp_str(&w.p, id);
	dbp_str(&w.p, q->agent_id);
	dbp_str(&w.p, q->user_id);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &dlg_row(c, r, 0)->base;
	PQclear(r);
	log_info("delegation %s: agent %s acts for %s", id, q->agent_id, q->user_id);
	return 0;
}

static int dlg_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Admin__V1__ListDelegationsRequest *q = (const void *)m;
	Bc__Admin__V1__ListDelegationsResponse *resp;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = iam_scope_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " DLG_COLS " FROM delegations WHERE $1 = '' OR "
			  "tenant_id = $1 ORDER BY id LIMIT 500", &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_delegations_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		char parent[96];
		struct iam_obj o = {.type = "iam-delegation", .id = db_val(r, i, DLG_ID),
				    .tenant = db_val(r, i, DLG_TENANT_ID), .parent = parent,
				    .attrs = {"agentId", db_val(r, i, DLG_AGENT_ID), "userId",
					      db_val(r, i, DLG_USER_ID)}};

		snprintf(parent, sizeof(parent), "iam-identity/%s", db_val(r, i, DLG_AGENT_ID));
		if ((rc = iam_visible(c, "iam:delegations:read", &o, err)) < 0) {
			PQclear(r);
			return rc;
		}
		if (rc)
			resp->items[resp->n_items++] = dlg_row(c, r, i);
	}
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

static int dlg_revoke_decide(rpc_call *c, const char *id, const char *agent, bc_error *err)
{
	_cleanup_free_ char *user = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, id);
	if ((rc = db_scalar(ctl_db(c), "SELECT user_id FROM delegations WHERE id = $1", &p,
			    &user)) < 0)
		return db_fail(err, rc);
	return dlg_decide(c, "iam:delegations:revoke", id, agent, user, err);
}

static int dlg_revoke(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__RevokeDelegationRequest *q = (const void *)m;
	struct iam_ref ref;
	struct iam_write w = {
		.sql = "UPDATE delegations SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 "
		       "RETURNING " DLG_COLS,
		.conflict_reason = "", .ev_type = "delegation.revoked",
		.subject_kind = "delegation", .tenant_col = DLG_TENANT_ID};
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if ((rc = check_id(err, "delegationId", "dlg", q->delegation_id)) < 0 ||
	    (rc = iam_identity_of(c, "SELECT tenant_id, agent_id, false FROM delegations WHERE id = "
				  "$1", q->delegation_id, "delegation", &ref, err)) < 0 ||
	    (rc = dlg_revoke_decide(c, q->delegation_id, ref.identity, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "delegation %s not found", q->delegation_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->delegation_id);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &dlg_row(c, r, 0)->base;
	PQclear(r);
	log_info("delegation %s: revoked", q->delegation_id);
	return 0;
}

#define U(name, f) {name, RPC_UNARY, {.unary = f}}

const struct rpc_handler *tenants_handlers(size_t *ret_n)
{
	static const struct rpc_handler tenants[] = {
		U("Create", tenants_create), U("Get", tenants_get), U("List", tenants_list),
		U("SetState", tenants_set_state)};

	*ret_n = ARRAY_SIZE(tenants);
	return tenants;
}

const struct rpc_handler *idn_handlers(size_t *ret_n)
{
	static const struct rpc_handler idn[] = {
		U("Create", idn_create), U("Get", idn_get), U("List", idn_list),
		U("SetState", idn_set_state)};

	*ret_n = ARRAY_SIZE(idn);
	return idn;
}

const struct rpc_handler *tok_handlers(size_t *ret_n)
{
	static const struct rpc_handler tok[] = {
		U("Create", tok_create), U("List", tok_list), U("Revoke", tok_revoke)};

	*ret_n = ARRAY_SIZE(tok);
	return tok;
}

const struct rpc_handler *dlg_handlers(size_t *ret_n)
{
	static const struct rpc_handler dlg[] = {
		U("Create", dlg_create), U("List", dlg_list), U("Revoke", dlg_revoke)};

	*ret_n = ARRAY_SIZE(dlg);
	return dlg;
}
