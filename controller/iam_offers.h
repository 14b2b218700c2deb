/* iam_offers.h: the Offers service (a tenant's spend limit, a pool's
 * budget check). */
#ifndef BC_CTL_IAM_OFFERS_H
#define BC_CTL_IAM_OFFERS_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the Offers service (server.c's table). */
const struct rpc_handler *offers_handlers(size_t *ret_n);

#endif
