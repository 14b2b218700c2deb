/* fuzz_mcp.c: mcp_handle (common/mcp.c, mcp_tools.c, mcp_exec.c) on
 * arbitrary bytes as one JSON-RPC message, with a stand-in API (an empty
 * reply, a refusal for every Delete) and a stand-in exec answering bytes
 * that are not UTF-8. Whatever it answers must be one JSON object that the
 * controller's own JSON reader accepts, with "jsonrpc": "2.0"; otherwise
 * it aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/json.h"
#include "mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int call(void *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
		const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret, bc_error *err)
{
	const ProtobufCMethodDescriptor *m =
		protobuf_c_service_descriptor_get_method_by_name(svc, method);

	(void)ctx;
	(void)req;
	(void)extra_ms;
	if (strcmp(method, "Delete") == 0) {
		bc_error_set(err, BC_ACCESS_DENIED, "no \"%s\"", method);
		bc_error_detail(err, "reason", "no-allow");
		return -BC_EDOMAIN;
	}
	*ret = protobuf_c_message_unpack(m->output, NULL, 0, (const uint8_t *)"");
	return *ret ? 0 : bc_error_set(err, BC_INTERNAL, "unpack");
}

static int exec(void *ctx, const struct mcp_exec_req *q, struct mcp_exec_out *ret, bc_error *err)
{
	(void)ctx;
	(void)err;
	if (!q->command || !q->sandbox_id)
		abort();
	ret->out = malloc(3);
	memcpy(ret->out, "\xff\x00x", 3);
	ret->out_len = 3;
	ret->exit_code = q->in_len % 2;
	return 0;
}

static const struct mcp_api api = {.call = call, .exec = exec, .server_name = "fuzz",
				   .server_version = "1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_server s = {.api = &api};
	struct json *j = NULL;
	const struct json *v;
	char *out = NULL;

	if (mcp_handle(&s, (const char *)data, size, &out) < 0 || !out)
		return 0;
	if (json_parse(out, strlen(out), &j, NULL) < 0 || j->type != JSON_OBJECT ||
	    !(v = json_get(j, "jsonrpc")) || v->type != JSON_STRING || strcmp(v->str, "2.0") != 0) {
		fprintf(stderr, "fuzz_mcp: a bad answer: %s\n", out);
		abort();
	}
	json_free(j);
	free(out);
	return 0;
}
