/* bootdata.c: Node.GetBootData for the runtimes (bootdata.h). Called from
 * the converge thread only; gRPC calls are thread-safe on one client. */
#include "bootdata.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bc/node/v1/node.pb-c.h"
#include "err.h"
#include "rpc.h"
#include "runtime.h"
#include "util.h"

#define BOOTDATA_TIMEOUT_MS 30000

int bootdata_fetch(void *ctx, const char *instance_id, const char *ref, void **ret,
		   size_t *ret_len, char *reason)
{
	Bc__Node__V1__GetBootDataRequest req = BC__NODE__V1__GET_BOOT_DATA_REQUEST__INIT;
	ProtobufCMessage *resp = NULL;
	bc_error err = {0};
	char path[128];
	int e;

	req.instance_id = (char *)instance_id;
	req.ref = (char *)ref;
	rpc_method_path(&bc__node__v1__node__descriptor, "GetBootData", path, sizeof(path));
	e = rpc_client_unary(ctx, path, &req.base, &bc__node__v1__boot_data__descriptor, &resp,
			     BOOTDATA_TIMEOUT_MS, &err);
	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "%s: %.120s", bc_code_name(err.code),
			 err.message);
		bc_error_clear(&err);
		return e;
	}
	const Bc__Node__V1__BootData *bd = (const Bc__Node__V1__BootData *)resp;
	*ret_len = bd->user_data.len;
	*ret = xmalloc(bd->user_data.len + 1);
	if (bd->user_data.len)
		memcpy(*ret, bd->user_data.data, bd->user_data.len);
	explicit_bzero(bd->user_data.data, bd->user_data.len);
	protobuf_c_message_free_unpacked(resp, NULL);
	return 0;
}
