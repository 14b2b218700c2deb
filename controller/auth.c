/* auth.c: who is calling. Public and admin calls carry a bearer token, which
 * is looked up by its SHA-256 (tokens are never stored); node calls carry the
 * node's client certificate, whose common name is the node id and whose
 * serial is the one issued last (nodeapi_check_serial). Join and
 * Health need neither. A tenant's identity then spends one token of its
 * request rate limit (ratelimit.c); the operator has none. Full policy
 * evaluation (IAM) builds on the principal set here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "db.h"
#include "log.h"
#include "node.h"
#include "ratelimit.h"
#include "tunnels.h"
#include "util.h"

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

void auth_token_new(char *out, size_t len)
{
	unsigned char raw[32];
	char hex[65];

	if (random_bytes(raw, sizeof(raw)) < 0)
		abort();
	hex_encode(raw, sizeof(raw), hex);
	snprintf(out, len, "bct_%s", hex);
}

static int auth_node(rpc_call *call, struct principal *p, bc_error *err)
{
	enum { NODE_POOL_ID, NODE_STATE };
	const char *cn = rpc_call_peer_cn(call);
	struct dbp q = {0};
	PGresult *r = NULL;
	int rc;

	if (!cn)
		return bc_error_set(err, BC_UNAUTHENTICATED, "node calls need the node's client "
				    "certificate");
	dbp_str(&q, cn);
	rc = db_exec(ctl_db(call), &r, "SELECT pool_id, state FROM nodes WHERE id = $1", &q);
	if (rc < 0)
		return bc_error_set(err, BC_UNAVAILABLE, "database unavailable");
	if (PQntuples(r) == 0) {
		PQclear(r);
		return bc_error_set(err, BC_UNAUTHENTICATED, "unknown node %s", cn);
	}
	if (strcmp(db_val(r, 0, NODE_STATE), "retired") == 0) {
		PQclear(r);
		log_warn("node %s: call refused: node is retired", cn);
		bc_error_set(err, BC_ACCESS_DENIED, "node %s is retired", cn);
		return bc_error_detail(err, "reason", "node-retired");
	}
	rc = nodeapi_check_serial(ctl_db(call), cn, rpc_call_peer_cert_pem(call));
	if (rc < 0) {
		PQclear(r);
		return rc == -EACCES ? bc_error_set(err, BC_UNAUTHENTICATED, "this certificate of "
						    "node %s is not the one issued", cn) :
				       bc_error_set(err, BC_UNAVAILABLE, "database unavailable");
	}
	p->kind = PRINCIPAL_NODE;
	snprintf(p->id, sizeof(p->id), "%s", cn);
	snprintf(p->pool_id, sizeof(p->pool_id), "%s", db_val(r, 0, NODE_POOL_ID));
	PQclear(r);
	return 0;
}

/* The columns auth_token reads of a token, in its SELECT's order. */
enum {
	TOKEN_IDENTITY_ID, TOKEN_TENANT_ID, TOKEN_IS_ADMIN, TOKEN_TENANT_STATE,
	TOKEN_IDENTITY_STATE, TOKEN_KIND, TOKEN_USER_ID, TOKEN_DELEGATION_ID, TOKEN_USER_STATE,
	TOKEN_EXPIRES_AT, TOKEN_SANDBOX_ID, TOKEN_RUN_ID
};

/* A token of an inactive tenant or identity, of an agent whose delegation
 * was revoked, or of an agent whose delegating user is no longer active,
 * is refused: ACCESS_DENIED with the reason. */
static int auth_refuse(const PGresult *r, bc_error *err)
{
	static const struct {
		const char *reason, *msg;
	} why[] = {
		{"tenant-inactive", "tenant is not active"},
		{"identity-inactive", "identity is not active"},
		{"delegation-revoked", "the agent's delegation was revoked"},
		{"delegation-user-inactive", "the agent's delegating user is not active"},
	};
	bool agent = strcmp(db_val(r, 0, TOKEN_KIND), "agent") == 0;
	size_t i;

	if (strcmp(db_val(r, 0, TOKEN_TENANT_STATE), "active") != 0)
		i = 0;
	else if (strcmp(db_val(r, 0, TOKEN_IDENTITY_STATE), "active") != 0)
		i = 1;
	else if (agent && !*db_val(r, 0, TOKEN_DELEGATION_ID))
		i = 2;
	else if (agent && strcmp(db_val(r, 0, TOKEN_USER_STATE), "active") != 0)
		i = 3;
	else
		return 0;
	bc_error_set(err, BC_ACCESS_DENIED, "%s", why[i].msg);
	return bc_error_detail(err, "reason", "%s", why[i].reason);
}

int auth_token_hash(struct db *d, const char *hash, struct principal *p, bc_error *err)
{
	struct dbp q = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&q, hash);
	rc = db_exec(d, &r,
		     "SELECT i.id, i.tenant_id, i.is_admin, t.state, i.state, i.kind, "
		     "coalesce(d.user_id, ''), coalesce(d.id, ''), coalesce(u.state, ''), "
		     "coalesce(floor(extract(epoch FROM k.expires_at))::bigint, 0), "
		     "coalesce(k.sandbox_id, ''), coalesce(k.run_id, '') FROM "
		     "api_tokens k JOIN identities i ON i.id = k.identity_id JOIN tenants t ON t.id = "
		     "i.tenant_id LEFT JOIN delegations d ON d.agent_id = i.id AND d.revoked_at IS "
		     "NULL LEFT JOIN identities u ON u.id = d.user_id "
		     "WHERE k.token_hash = $1 AND k.revoked_at IS NULL "
		     "AND (k.expires_at IS NULL OR k.expires_at > now())", &q);
	if (rc < 0)
		return bc_error_set(err, BC_UNAVAILABLE, "database unavailable");
	if (PQntuples(r) == 0) {
		PQclear(r);
		return bc_error_set(err, BC_UNAUTHENTICATED, "invalid or expired token");
	}
	if ((rc = auth_refuse(r, err)) < 0) {
		PQclear(r);
		return rc;
	}
	memset(p, 0, sizeof(*p));
	p->kind = PRINCIPAL_IDENTITY;
	snprintf(p->id, sizeof(p->id), "%s", db_val(r, 0, TOKEN_IDENTITY_ID));
	snprintf(p->tenant_id, sizeof(p->tenant_id), "%s", db_val(r, 0, TOKEN_TENANT_ID));
	snprintf(p->identity_kind, sizeof(p->identity_kind), "%s", db_val(r, 0, TOKEN_KIND));
	snprintf(p->user_id, sizeof(p->user_id), "%s", db_val(r, 0, TOKEN_USER_ID));
	snprintf(p->delegation_id, sizeof(p->delegation_id), "%s",
		 db_val(r, 0, TOKEN_DELEGATION_ID));
	snprintf(p->token_hash, sizeof(p->token_hash), "%s", hash);
	p->token_expires_at = db_i64(r, 0, TOKEN_EXPIRES_AT);
	snprintf(p->token_sandbox, sizeof(p->token_sandbox), "%s", db_val(r, 0, TOKEN_SANDBOX_ID));
	snprintf(p->token_run, sizeof(p->token_run), "%s", db_val(r, 0, TOKEN_RUN_ID));
	p->is_admin = db_bool(r, 0, TOKEN_IS_ADMIN);
	PQclear(r);
	return 0;
}

static int auth_token(rpc_call *call, struct principal *p, bc_error *err)
{
	const char *tok = rpc_call_bearer(call);
	char hash[65];

	if (!tok || !*tok)
		return bc_error_set(err, BC_UNAUTHENTICATED, "missing bearer token");
	if (strlen(tok) > 256)
		return bc_error_set(err, BC_UNAUTHENTICATED, "invalid or expired token");
	sha256_hex(tok, strlen(tok), hash);
	return auth_token_hash(ctl_db(call), hash, p, err);
}

/* The admin services a tenant's own identities may call, each call decided
 * as an IAM action inside their tenant (iam_self.c); every other admin
 * service is the operator's. */
static bool self_service(const char *method)
{
	static const char *const svc[] = {"/bc.admin.v1.Identities/", "/bc.admin.v1.ApiTokens/",
					  "/bc.admin.v1.Delegations/", "/bc.admin.v1.Policies/"};

	for (size_t i = 0; i < ARRAY_SIZE(svc); i++)
		if (has_prefix(method, svc[i]))
			return true;
	return false;
}

/* Tunnels.Connect authenticates by the single-use ticket of its first
 * message (tunnels.c), not by a bearer token. */
const char *const auth_open_methods[] = {"/bc.node.v1.Node/Join", TUNNEL_CONNECT_METHOD, NULL};

static bool open_method(const char *m)
{
	if (has_prefix(m, "/grpc.health.v1.Health/"))
		return true;
	for (size_t i = 0; auth_open_methods[i]; i++)
		if (strcmp(m, auth_open_methods[i]) == 0)
			return true;
	return false;
}

int auth_pre_call(rpc_call *call, bc_error *err)
{
	const char *m = rpc_call_method(call);
	struct principal *p = rpc_alloc(call, sizeof(*p));
	int rc;

	memset(p, 0, sizeof(*p));
	rpc_call_set_principal(call, p, NULL);
	if (open_method(m))
		return 0;
	if (has_prefix(m, "/bc.node.v1."))
		return auth_node(call, p, err);
	if ((rc = auth_token(call, p, err)) < 0)
		return rc;
	if (!auth_is_operator(p) && (rc = ratelimit_take(p->id, err)) < 0)
		return rc;
	if (has_prefix(m, "/bc.admin.v1.") && !auth_is_operator(p) && !self_service(m))
		return bc_error_set(err, BC_ACCESS_DENIED, "operator credential required");
	return 0;
}

int auth_scope_tenant(const rpc_call *call, const char *requested, unsigned flags,
		      const char **ret_tenant, bc_error *err)
{
	const struct principal *p = ctl_principal(call);

	if (!p || p->kind != PRINCIPAL_IDENTITY)
		return bc_error_set(err, BC_UNAUTHENTICATED, "no caller");
	if (!requested || !*requested) {
		bool all = (flags & AUTH_SCOPE_ALL_TENANTS) && auth_is_operator(p);
		*ret_tenant = all ? "" : p->tenant_id;
		return 0;
	}
	if (!str_is_slug(requested, 63)) {
		bc_error_set(err, BC_INVALID_INPUT, "tenantId is not a valid tenant id");
		return bc_error_detail(err, "field", "tenantId");
	}
	if (strcmp(requested, p->tenant_id) != 0) {
		struct dbp q = {0};
		_cleanup_free_ char *v = NULL;
		int rc;

		if (!auth_is_operator(p))
			return bc_error_set(err, BC_NOT_FOUND, "tenant %s not found", requested);
		dbp_str(&q, requested);
		rc = db_scalar(ctl_db(call), "SELECT id FROM tenants WHERE id = $1 AND state <> "
			       "'deleted'", &q, &v);
		if (rc == -ENOENT)
			return bc_error_set(err, BC_NOT_FOUND, "tenant %s not found", requested);
		if (rc < 0)
			return db_fail(err, rc);
	}
	*ret_tenant = requested;
	return 0;
}

int auth_tenant(const rpc_call *call, const char *requested, const char **ret_tenant,
		bc_error *err)
{
	return auth_scope_tenant(call, requested, 0, ret_tenant, err);
}

int auth_create_admin(struct db *d, const char *tenant_id, const char *name, char *ret_token,
		      size_t len)
{
	char idn[64], tid[64], hash[65];
	struct dbp q = {0};
	int r;

	id_new("idn", idn, sizeof(idn));
	id_new("tok", tid, sizeof(tid));
	auth_token_new(ret_token, len);
	sha256_hex(ret_token, strlen(ret_token), hash);
	dbp_str(&q, tenant_id);
	r = db_exec(d, NULL, "INSERT INTO tenants (id, name) VALUES ($1, $1) "
		    "ON CONFLICT (id) DO NOTHING", &q);
	q.n = 0;
	dbp_str(&q, idn);
	dbp_str(&q, tenant_id);
	dbp_str(&q, name);
	if (r == 0)
		r = db_exec(d, NULL, "INSERT INTO identities (id, tenant_id, kind, name, is_admin) "
			    "VALUES ($1, $2, 'user', $3, true)", &q);
	q.n = 0;
	dbp_str(&q, tid);
	dbp_str(&q, idn);
	dbp_str(&q, hash);
	if (r == 0)
		r = db_exec(d, NULL, "INSERT INTO api_tokens (id, identity_id, token_hash) "
			    "VALUES ($1, $2, $3)", &q);
	return r;
}
