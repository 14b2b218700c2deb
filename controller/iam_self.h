/* iam_self.h: the tenant an IAM call acts in and the IAM decisions
 * (iam_self.c), shared by the IAM services (iam_tenants.c, iam_policies.c,
 * iam_offers.c). */
#ifndef BC_CTL_IAM_SELF_H
#define BC_CTL_IAM_SELF_H

#include <stdbool.h>

#include "err.h"
#include "rpc.h"

/* iam_self.c: self-service (see there). The tenant an IAM call acts in,
 * by auth_scope_tenant's rule (auth.h): the operator's "" means
 * every tenant (*ret is ""), any other tenant it names must exist; anyone
 * else's own tenant ("" or its own id; another is NOT_FOUND). */
int iam_scope_tenant(rpc_call *c, const char *requested, const char **ret, bc_error *err);

/* An IAM object as a decision sees it: "<type>/<id>" (iam-identity,
 * iam-token, iam-delegation, iam-policy) in tenant, under parent (e.g. a
 * token under "iam-identity/<id>", or NULL); admin: the change makes,
 * changes or empowers an administrator (only one may do it); attrs: name,
 * value pairs for conditions, NULL-terminated. */
struct iam_obj {
	const char *type, *id, *tenant, *parent;
	bool admin;
	const char *attrs[9];
};
/* The operator: allowed. Anyone else: NOT_FOUND outside its tenant, else
 * the IAM decision of action on o (ACCESS_DENIED), and for an
 * administrator's object the caller must be one (reason admin-required). */
int iam_decide(rpc_call *c, const char *action, const struct iam_obj *o, bc_error *err);
/* For list calls: 1 if the caller may see o, 0 if not, <0 (err) when the
 * database failed. */
int iam_visible(rpc_call *c, const char *action, const struct iam_obj *o, bc_error *err);

/* The tenant (and identity, admin flag) an object belongs to, by sql
 * selecting (tenant_id, identity id or NULL, is_admin) for $1 = id:
 * NOT_FOUND ("<what> <id> not found") when there is none or it is another
 * tenant's (the operator sees every tenant). */
struct iam_ref {
	char tenant[64], identity[64];
	bool admin;
};
int iam_identity_of(rpc_call *c, const char *sql, const char *id, const char *what,
		    struct iam_ref *ret, bc_error *err);

#endif
