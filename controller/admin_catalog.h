/* admin_catalog.h: the operator's catalog services, Pools, Flavors and Images. */
#ifndef BC_CTL_ADMIN_CATALOG_H
#define BC_CTL_ADMIN_CATALOG_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the Pools, Flavors and Images services (server.c's
 * table). */
const struct rpc_handler *pools_handlers(size_t *ret_n);
const struct rpc_handler *flavors_handlers(size_t *ret_n);
const struct rpc_handler *images_handlers(size_t *ret_n);

#endif
