/* instance_actions.h: Start, Stop, Pause and Resume of the Instances
 * service. */
#ifndef BC_CTL_INSTANCE_ACTIONS_H
#define BC_CTL_INSTANCE_ACTIONS_H

#include <stddef.h>

#include "rpc.h"

/* The handlers of Start, Stop, Pause and Resume, which server.c's table
 * adds to the Instances service beside inst_handlers (instances.h). */
const struct rpc_handler *inst_actions(size_t *ret_n);

#endif
