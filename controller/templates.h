/* templates.h: the SandboxTemplates service. */
#ifndef BC_CTL_TEMPLATES_H
#define BC_CTL_TEMPLATES_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of the SandboxTemplates service (server.c's table). */
const struct rpc_handler *tmpl_handlers(size_t *ret_n);

#endif
