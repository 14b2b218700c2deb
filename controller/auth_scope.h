/* auth_scope.h: the one rule for which tenant a call acts on (auth.c).
 * Every handler that takes a tenantId asks it here: auth_tenant for the
 * compute and events APIs, iam_scope_tenant (iam_self.c) for the IAM admin
 * services, which alone let the operator's empty tenantId mean every
 * tenant. */
#ifndef BC_CTL_AUTH_SCOPE_H
#define BC_CTL_AUTH_SCOPE_H

#include "ctl.h"

/* The operator's empty tenantId means every tenant: *ret_tenant is "". */
#define AUTH_SCOPE_ALL_TENANTS 1u

/* Resolve the tenant a call acts on. No identity calling: UNAUTHENTICATED.
 * An empty (or NULL) requested is the caller's own tenant (with
 * AUTH_SCOPE_ALL_TENANTS, the operator's is "": every tenant). Otherwise
 * requested must be a tenant id (INVALID_INPUT on field tenantId); another
 * tenant than the caller's is NOT_FOUND unless the caller is the operator
 * and the tenant exists and is not deleted. *ret_tenant borrows requested
 * or the principal's tenant; set only on success. */
int auth_scope_tenant(const rpc_call *call, const char *requested, unsigned flags,
		      const char **ret_tenant, bc_error *err);

#endif
