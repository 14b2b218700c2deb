/* auth.h: authentication of API calls (auth.c): bearer tokens and node
 * certificates, and the tenant a call acts in. */
#ifndef BC_CTL_AUTH_H
#define BC_CTL_AUTH_H

#include <stddef.h>

#include "db.h"
#include "err.h"
#include "rpc.h"

/* The server's pre-call hook: authenticate a call (bearer token or node
 * certificate) and set its principal. 0, or UNAUTHENTICATED /
 * ACCESS_DENIED / RESOURCE_EXHAUSTED (rate limit) in err. */
int auth_pre_call(rpc_call *call, bc_error *err);
/* The methods (besides grpc.health.v1.Health's) that need no credential,
 * NULL-terminated. */
extern const char *const auth_open_methods[];
/* The principal of the API token whose SHA-256 (hex) is hash, as a call
 * bearing it would get: UNAUTHENTICATED for an unknown, revoked or expired
 * token, ACCESS_DENIED (auth_pre_call's reasons) for an inactive tenant,
 * identity or delegation. The tunnel gateway re-checks an open tunnel's
 * caller with it. */
struct principal;
int auth_token_hash(struct db *d, const char *hash, struct principal *p, bc_error *err);
/* A new random API token ("bct_..."), NUL-terminated into out[len]. */
void auth_token_new(char *out, size_t len);
/* Create an administrator identity name in tenant_id and a token for it
 * (stored as SHA-256 only), the token into ret_token[len]. 0 or -errno. */
int auth_create_admin(struct db *d, const char *tenant_id, const char *name, char *ret_token,
		      size_t len);
/* The one rule for which tenant a call acts on. Every handler that takes
 * a tenantId asks it here: auth_tenant for the compute and events APIs,
 * iam_scope_tenant (iam_self.c) for the IAM admin services, which alone let
 * the operator's empty tenantId mean every tenant (AUTH_SCOPE_ALL_TENANTS:
 * *ret_tenant is then ""). No identity calling: UNAUTHENTICATED. An empty
 * (or NULL) requested is the caller's own tenant. Otherwise requested must
 * be a tenant id (INVALID_INPUT on field tenantId); another tenant than the
 * caller's is NOT_FOUND unless the caller is the operator and the tenant
 * exists and is not deleted. *ret_tenant borrows requested or the
 * principal's tenant; set only on success. */
#define AUTH_SCOPE_ALL_TENANTS 1u
int auth_scope_tenant(const rpc_call *call, const char *requested, unsigned flags,
		      const char **ret_tenant, bc_error *err);
/* auth_scope_tenant without flags: the request's tenant_id, or the
 * caller's own when empty. Non-admins may act only in their own tenant
 * (another tenant's is NOT_FOUND). */
int auth_tenant(const rpc_call *call, const char *requested, const char **ret_tenant,
		bc_error *err);

#endif
