/* iam_policies.h: the Policies and Quotas services. */
#ifndef BC_CTL_IAM_POLICIES_H
#define BC_CTL_IAM_POLICIES_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the Policies and Quotas services (server.c's table). */
const struct rpc_handler *pol_handlers(size_t *ret_n);
const struct rpc_handler *quotas_handlers(size_t *ret_n);

#endif
