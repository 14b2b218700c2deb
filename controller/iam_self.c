/* iam_self.c: tenant self-service for the IAM admin services. The
 * Identities, ApiTokens, Delegations and Policies services of bc.admin.v1
 * answer the operator everywhere and anyone else inside their own tenant,
 * where each call is decided as an IAM action (iam:identities:create, ...)
 * on the object it names, so a tenant's administrators (is_admin: allowed
 * everything in their tenant) manage their own people and grants, and
 * policies can hand parts of that to others. Another tenant's object is
 * NOT_FOUND, never ACCESS_DENIED; the operator-only services (Tenants,
 * Quotas, Offers, Pools, Nodes, Flavors, Images) stay operator-only
 * (auth.c). Only an administrator may make, change or hand a token to an
 * administrator (ACCESS_DENIED, reason admin-required), so a grant of
 * iam:identities:* or iam:tokens:* never mints an administrator. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "db.h"
#include "iam_self.h"
#include "util.h"
#include "validate.h"

int iam_scope_tenant(rpc_call *c, const char *requested, const char **ret, bc_error *err)
{
	return auth_scope_tenant(c, requested, AUTH_SCOPE_ALL_TENANTS, ret, err);
}

int iam_decide(rpc_call *c, const char *action, const struct iam_obj *o, bc_error *err)
{
	const struct principal *p = ctl_principal(c);
	struct authz_target t = {.type = o->type, .id = o->id, .tenant_id = o->tenant,
				 .parent = o->parent};
	int rc;

	if (auth_is_operator(p))
		return 0;
	if (!o->tenant || strcmp(o->tenant, p->tenant_id) != 0)
		return bc_error_set(err, BC_NOT_FOUND, "%s/%s not found", o->type, o->id);
	for (size_t i = 0; i + 1 < ARRAY_SIZE(o->attrs) && o->attrs[i]; i += 2)
		authz_attr(&t, o->attrs[i], o->attrs[i + 1]);
	if ((rc = authz_decide(c, ctl_db(c), action, &t, err)) < 0)
		return rc;
	if (o->admin && !p->is_admin) {
		bc_error_set(err, BC_ACCESS_DENIED, "only an administrator may %s for an "
			     "administrator", action);
		bc_error_detail(err, "action", "%s", action);
		bc_error_detail(err, "resource", "%s/%s", o->type, o->id);
		return bc_error_detail(err, "reason", "admin-required");
	}
	return 0;
}

int iam_visible(rpc_call *c, const char *action, const struct iam_obj *o, bc_error *err)
{
	bc_error e = {0};

	if (iam_decide(c, action, o, &e) == 0)
		return 1;
	if (e.code == BC_UNAVAILABLE || e.code == BC_INTERNAL) {
		*err = e;
		return -BC_EDOMAIN;
	}
	return 0;
}

int iam_identity_of(rpc_call *c, const char *sql, const char *id, const char *what,
		    struct iam_ref *ret, bc_error *err)
{
	enum { REF_TENANT_ID, REF_IDENTITY_ID, REF_IS_ADMIN }; /* what sql selects (iam.h) */
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, id);
	if ((rc = db_one(ctl_db(c), &r, sql, &p, err, "%s %s not found", what, id)) < 0)
		return rc;
	snprintf(ret->tenant, sizeof(ret->tenant), "%s", db_val(r, 0, REF_TENANT_ID));
	snprintf(ret->identity, sizeof(ret->identity), "%s",
		 db_val(r, 0, REF_IDENTITY_ID) ? db_val(r, 0, REF_IDENTITY_ID) : "");
	ret->admin = db_bool(r, 0, REF_IS_ADMIN);
	PQclear(r);
	if (!auth_is_operator(ctl_principal(c)) &&
	    strcmp(ret->tenant, ctl_principal(c)->tenant_id) != 0)
		return bc_error_set(err, BC_NOT_FOUND, "%s %s not found", what, id);
	return 0;
}
