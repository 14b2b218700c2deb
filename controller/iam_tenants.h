/* iam_tenants.h: the Tenants, Identities, ApiTokens and Delegations
 * services (iam_tenants.c), and the write-and-publish helper every IAM
 * service uses. */
#ifndef BC_CTL_IAM_TENANTS_H
#define BC_CTL_IAM_TENANTS_H

#include <stddef.h>

#include "db.h"
#include "err.h"
#include "event_data.h"
#include "rpc.h"

/* One row-returning write and its event, in one transaction: run sql with
 * p; no row is NOT_FOUND with notfound_msg; else publish ev_type with
 * subject "<subject_kind>/<row[id_col]>" in the tenant row[tenant_col]
 * with ev's data (event_data.c), and *ret is the row (PQclear it). -EEXIST (a unique violation) becomes
 * CONFLICT with reason conflict_reason. */
struct iam_write {
	const char *sql;
	struct dbp p;
	const char *notfound_msg, *conflict_reason;
	const char *ev_type, *subject_kind;
	int id_col, tenant_col;
	struct evd_iam ev;
};
int iam_write_run(rpc_call *c, struct iam_write *w, PGresult **ret, bc_error *err);

/* The handlers of the Tenants, Identities, ApiTokens and Delegations
 * services (server.c's table). */
const struct rpc_handler *tenants_handlers(size_t *ret_n);
const struct rpc_handler *idn_handlers(size_t *ret_n);
const struct rpc_handler *tok_handlers(size_t *ret_n);
const struct rpc_handler *dlg_handlers(size_t *ret_n);

#endif
