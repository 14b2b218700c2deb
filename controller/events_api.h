/* events_api.h: the Events service, List (paged) and Watch (a server
 * stream resumable from an event id). */
#ifndef BC_CTL_EVENTS_API_H
#define BC_CTL_EVENTS_API_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the Events service (server.c's table). */
const struct rpc_handler *events_handlers(size_t *ret_n);

#endif
