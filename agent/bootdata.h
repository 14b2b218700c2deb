/* bootdata.h: an instance's boot data from the controller
 * (Node.GetBootData over the agent's mTLS client), for the runtimes'
 * NoCloud seed. */
#ifndef BC_AGENT_BOOTDATA_H
#define BC_AGENT_BOOTDATA_H

#include <stddef.h>

/* An rt_boot_data_fn: ctx is the agent's rpc_client. 0 with *ret malloc'd
 * (may be empty), or -errno with reason ("NOT_FOUND: ...", the controller's
 * code and message) in RT_REASON_MAX bytes. */
int bootdata_fetch(void *ctx, const char *instance_id, const char *ref, void **ret,
		   size_t *ret_len, char *reason);

#endif
