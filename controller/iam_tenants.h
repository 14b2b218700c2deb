/* iam_tenants.c: the Tenants, Identities, ApiTokens and Delegations
 * services. */
#ifndef BC_CTL_IAM_TENANTS_H
#define BC_CTL_IAM_TENANTS_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the Tenants, Identities, ApiTokens and Delegations
 * services (server.c's table). */
const struct rpc_handler *tenants_handlers(size_t *ret_n);
const struct rpc_handler *idn_handlers(size_t *ret_n);
const struct rpc_handler *tok_handlers(size_t *ret_n);
const struct rpc_handler *dlg_handlers(size_t *ret_n);

#endif
