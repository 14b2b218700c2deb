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
/* A new random API token ("bct_..."), NUL-terminated into out[len]. */
void auth_token_new(char *out, size_t len);
/* Create an administrator identity name in tenant_id and a token for it
 * (stored as SHA-256 only), the token into ret_token[len]. 0 or -errno. */
int auth_create_admin(struct db *d, const char *tenant_id, const char *name, char *ret_token,
		      size_t len);
/* Resolve the tenant a call acts in: the request's tenant_id, or the
 * caller's own when empty. Non-admins may act only in their own tenant
 * (another tenant's is NOT_FOUND). */
int auth_tenant(const rpc_call *call, const char *requested, const char **ret_tenant,
		bc_error *err);

#endif
