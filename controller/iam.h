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

/* iam_offers.c, registered by iam_policies_register */
int iam_offers_register(rpc_server *s);

#endif
