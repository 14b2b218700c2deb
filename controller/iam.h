/* iam.h: what the IAM admin services (iam_tenants.c, iam_policies.c) and
 * the decision layer (authz.c) share. */
#ifndef BC_CTL_IAM_H
#define BC_CTL_IAM_H

#include "ctl.h"

/* One row-returning write and its event, in one transaction: run sql with
 * p; no row is NOT_FOUND with notfound_msg; else publish ev_type with
 * subject "<subject_kind>/<row[id_col]>" in the tenant row[tenant_col],
 * and *ret is the row (PQclear it). -EEXIST (a unique violation) becomes
 * CONFLICT with reason conflict_reason. */
struct iam_write {
	const char *sql;
	struct dbp p;
	const char *notfound_msg, *conflict_reason;
	const char *ev_type, *subject_kind;
	int id_col, tenant_col;
};
int iam_write_run(rpc_call *c, struct iam_write *w, PGresult **ret, bc_error *err);

/* iam_self.c: self-service (see there). The tenant an IAM call acts in,
 * by auth_scope_tenant's rule (auth_scope.h): the operator's "" means
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

/* iam_offers.c, registered by iam_policies_register */
int iam_offers_register(rpc_server *s);

#endif
