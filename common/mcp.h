/* mcp.h: the Model Context Protocol (revision 2025-06-18) server core that
 * bc's MCP transports share: JSON-RPC 2.0 framing of one message, the
 * methods (initialize, notifications/initialized, ping, tools/list,
 * tools/call) and the tool table, each tool a public API method with a JSON
 * Schema for its arguments and one, made from the reply's protobuf-c
 * descriptor, for its structured result; and three tools that run code and
 * move files in a sandbox, offered when the transport can run a command
 * there (mcp_exec.c).
 *
 * The transport (bcctl mcp over stdio, cli/mcp.c) reads a message, hands it
 * to mcp_handle() and writes the answer; the API calls themselves go
 * through the transport's mcp_api, so every call is decided by the API with
 * the transport's credential. Pure apart from those calls: no I/O, no
 * logging. */
#ifndef BC_MCP_H
#define BC_MCP_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_MESSAGE_MAX (4u << 20)  /* one JSON-RPC message, bytes */

/* JSON-RPC 2.0 error codes. */
#define MCP_PARSE_ERROR -32700
#define MCP_INVALID_REQUEST -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602
#define MCP_INTERNAL_ERROR -32603

/* A command for the stdio-only tools (run_command, write_file, read_file):
 * the remote shell's command line (argv words already quoted), stdin, a
 * deadline, and how much of stdout and of stderr to keep. */
struct mcp_exec_req {
	const char *sandbox_id;
	const char *command;
	const uint8_t *in;
	size_t in_len;
	int64_t timeout_ms;
	size_t cap;
};

/* Its outcome: the first cap bytes of each stream (malloc'd, may be NULL
 * when empty), whether more came, whether the deadline ended it, and the
 * exit status (-1 when it did not exit). */
struct mcp_exec_out {
	uint8_t *out, *err;
	size_t out_len, err_len;
	bool out_trunc, err_trunc, timed_out;
	int exit_code;
};

/* What the transport offers the core. call: svc.method with req, the
 * caller's credential; 0 and *ret (the core frees it with
 * protobuf_c_message_free_unpacked), or < 0 with err filled. extra_ms is
 * added to the call's deadline (server-side waits). */
struct mcp_api {
	void *ctx;
	int (*call)(void *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
		    const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret,
		    bc_error *err);
	/* run a command in a sandbox (the stdio transport, over the exec
	 * grant and stock OpenSSH); NULL: the three tools that need it are
	 * not offered. 0 with *ret filled, or < 0 with err. */
	int (*exec)(void *ctx, const struct mcp_exec_req *q, struct mcp_exec_out *ret,
		    bc_error *err);
	const char *server_name;      /* serverInfo.name */
	const char *server_version;   /* serverInfo.version */
};

/* One server's state: what the client said at initialize. */
struct mcp_server {
	const struct mcp_api *api;
	bool initialized;
	char client_version[32];      /* the negotiated protocol revision */
};

/* Handle one JSON-RPC message msg[0..len) (need not be NUL-terminated).
 * 0 with *ret_reply the answer (a JSON-RPC response, malloc'd, no newline)
 * or NULL when the message asks for none (a notification, a response);
 * -ENOMEM. Malformed JSON, a batch, an unknown method or bad params are
 * answered as JSON-RPC errors; a refused API call is a tool result with
 * isError. */
int mcp_handle(struct mcp_server *s, const char *msg, size_t len, char **ret_reply);

/* The tools/list result ({"tools":[...]}) as mcp_handle answers it, for
 * tests: every tool when gate is false, else as the API's answers show
 * the caller. 0 and *ret_json (caller frees), or -ENOMEM. */
int mcp_tools_list(struct mcp_server *s, bool gate, char **ret_json);

/* The JSON Schema of a message type's proto3 JSON form (pbjson_write), as
 * an object schema; malloc'd. For outputSchema and tests. */
char *mcp_schema_of(const ProtobufCMessageDescriptor *d);

#endif
