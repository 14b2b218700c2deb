/* test_ctl_mcp.c: common/mcp.c and mcp_tools.c, the MCP server core, with
 * a stand-in for the transport's API calls. Every answer is read back
 * with the controller's own JSON tree reader (controller/json.c, hence the
 * test_ctl_ name), an independent parser: JSON-RPC framing (malformed
 * input, ids of every JSON type echoed byte for byte, batches refused,
 * notifications and responses unanswered), the tool table (every input
 * and output schema parses, destructive tools annotated, the gate), and
 * tools/call (arguments renamed into the request, a fresh idempotency
 * key, waitSeconds, bad arguments refused before any call, the API's
 * refusal as a tool result with isError). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "controller/json.h"
#include "mcp.h"
#include "pbjson.h"
#include "tap.h"

/* The stand-in API: a canned answer (JSON of the reply type) or error per
 * call, and a record of the last request. */
static struct fake {
	int calls;
	char method[64];
	char *last_req;               /* the request as proto3 JSON */
	int templates, pools;         /* how many items each List shows */
	const char *answer;           /* the reply of any other call */
	bc_error err;                 /* code != OK: refuse with it */
} F;

static int fake_call(void *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
		     const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret,
		     bc_error *err)
{
	const ProtobufCMethodDescriptor *m =
		protobuf_c_service_descriptor_get_method_by_name(svc, method);
	const char *json = F.answer ? F.answer : "{}";
	bc_error e = {0};

	(void)ctx;
	(void)extra_ms;
	F.calls++;
	snprintf(F.method, sizeof(F.method), "%s.%s", svc->short_name, method);
	free(F.last_req);
	F.last_req = NULL;
	pbjson_write(req, 0, &F.last_req);
	if (strcmp(F.method, "SandboxTemplates.List") == 0)
		json = F.templates ? "{\"items\":[{\"id\":\"sbxt_1\"}]}" : "{}";
	else if (strcmp(F.method, "Pools.List") == 0 && !F.pools)
		return bc_error_set(err, BC_ACCESS_DENIED, "operator credential required");
	else if (strcmp(F.method, "Pools.List") == 0)
		json = "{\"items\":[{\"id\":\"pool_1\"}]}";
	else if (F.err.code != BC_OK) {
		*err = F.err;
		return -BC_EDOMAIN;
	}
	if (pbjson_read(m->output, json, strlen(json), 1 << 20, ret, &e) < 0)
		return bc_error_set(err, BC_INTERNAL, "bad canned answer");
	return 0;
}

static const struct mcp_api api = {.call = fake_call, .server_name = "bc",
				   .server_version = "test"};

/* Handle msg; the answer parsed (NULL when there is none). */
static struct json *ask(const char *msg, char **raw)
{
	struct mcp_server s = {.api = &api};
	struct json *j = NULL;
	char *out = NULL;

	if (mcp_handle(&s, msg, strlen(msg), &out) < 0)
		return NULL;
	if (raw)
		*raw = out ? strdup(out) : NULL;
	if (out && json_parse(out, strlen(out), &j, NULL) < 0)
		j = NULL;
	free(out);
	return j;
}

static int err_code(const struct json *j)
{
	const struct json *e = json_get(j, "error"), *c = e ? json_get(e, "code") : NULL;

	return c && c->type == JSON_NUMBER ? (int)c->num : 0;
}

static void expect_error(const char *msg, int code, const char *what)
{
	struct json *j = ask(msg, NULL);
	const struct json *id = j ? json_get(j, "id") : NULL;

	is_int(err_code(j), code, "%s: JSON-RPC error %d", what, code);
	ok(id && id->type == JSON_NULL, "%s: answered with id null", what);
	json_free(j);
}

static void test_malformed(void)
{
	char deep[100] = "";

	expect_error("", MCP_PARSE_ERROR, "empty input");
	expect_error("{", MCP_PARSE_ERROR, "an unclosed object");
	expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":}", MCP_PARSE_ERROR, "a missing value");
	expect_error("{\"jsonrpc\":\"2.0\"} x", MCP_PARSE_ERROR, "trailing text");
	expect_error("{\"a\":\"\xff\"}", MCP_PARSE_ERROR, "invalid UTF-8");
	expect_error("{\"a\":01}", MCP_PARSE_ERROR, "a number with a leading zero");
	for (int i = 0; i < 40; i++)
		strcat(deep, "[");
	expect_error(deep, MCP_PARSE_ERROR, "nesting past the bound");
	expect_error("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_INVALID_REQUEST,
		     "a batch");
	expect_error("\"ping\"", MCP_INVALID_REQUEST, "a message that is not an object");
}

/* An id comes back as the very text it was sent as. */
static void test_ids(void)
{
	const char *good[] = {"\"abc\"", "7", "-1.5e3", "12345678901234567890", "\"\"",
			      "\"\\u00e9\""};
	const char *bad[] = {"null", "true", "{}", "[1]"};
	char msg[256], want[256], *raw = NULL;

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		struct json *j;

		snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"ping\"}",
			 good[i]);
		snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}", good[i]);
		j = ask(msg, &raw);
		is_str(raw, want, "id %s echoed byte for byte", good[i]);
		free(raw);
		json_free(j);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"ping\"}",
			 bad[i]);
		expect_error(msg, MCP_INVALID_REQUEST, bad[i]);
	}
}

static void test_framing(void)
{
	struct mcp_server s = {.api = &api};
	char *out = (char *)1;
	const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
	const char *resp = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}";
	struct json *j;
	const struct json *r;

	is_int(mcp_handle(&s, note, strlen(note), &out), 0, "a notification is handled");
	ok(out == NULL && s.initialized, "and answered with nothing; initialized noted");
	out = (char *)1;
	is_int(mcp_handle(&s, resp, strlen(resp), &out), 0, "a response from the client");
	ok(out == NULL, "gets no answer");
	out = (char *)1;
	mcp_handle(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"nope\"}", 33, &out);
	ok(out == NULL, "an unknown notification gets no answer");

	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
		"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":"
		"{\"name\":\"t\",\"version\":\"1\"}}}", NULL);
	r = j ? json_get(j, "result") : NULL;
	ok(r && json_get(r, "protocolVersion") &&
	   strcmp(json_get(r, "protocolVersion")->str, "2025-06-18") == 0,
	   "initialize answers protocol revision 2025-06-18");
	ok(r && json_get(r, "capabilities") && json_get(json_get(r, "capabilities"), "tools"),
	   "with the tools capability");
	json_free(j);

	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}", NULL);
	is_int(err_code(j), MCP_INVALID_PARAMS, "initialize without protocolVersion: -32602");
	json_free(j);
	j = ask("{\"id\":1,\"method\":\"ping\"}", NULL);
	is_int(err_code(j), MCP_INVALID_REQUEST, "no jsonrpc member: -32600");
	ok(j && json_get(j, "id") && json_get(j, "id")->num == 1, "with the request's id");
	json_free(j);
	j = ask("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", NULL);
	is_int(err_code(j), MCP_INVALID_REQUEST, "jsonrpc 1.0: -32600");
	json_free(j);
	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}", NULL);
	is_int(err_code(j), MCP_METHOD_NOT_FOUND, "an unknown method: -32601");
	json_free(j);
	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}", NULL);
	is_int(err_code(j), MCP_INVALID_PARAMS, "params that are not an object: -32602");
	json_free(j);
	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}", NULL);
	is_int(err_code(j), MCP_INVALID_PARAMS, "tools/call without a name: -32602");
	json_free(j);
	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
		"{\"name\":\"run_anything\"}}", NULL);
	is_int(err_code(j), MCP_INVALID_PARAMS, "an unknown tool: -32602");
	json_free(j);
	j = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
		"{\"name\":\"get_sandbox\",\"arguments\":[]}}", NULL);
	is_int(err_code(j), MCP_INVALID_PARAMS, "arguments that are not an object: -32602");
	json_free(j);
}

static const struct json *tool_named(const struct json *tools, const char *name)
{
	for (size_t i = 0; tools && i < tools->n; i++)
		if (strcmp(json_get(tools->kids[i], "name")->str, name) == 0)
			return tools->kids[i];
	return NULL;
}

static struct json *list(bool gate)
{
	struct mcp_server s = {.api = &api};
	struct json *j = NULL;
	char *out = NULL;

	if (mcp_tools_list(&s, gate, &out) == 0)
		json_parse(out, strlen(out), &j, NULL);
	free(out);
	return j;
}

static bool schema_ok(const struct json *sc)
{
	const struct json *t = sc ? json_get(sc, "type") : NULL;

	return t && t->type == JSON_STRING && strcmp(t->str, "object") == 0 &&
	       json_get(sc, "properties") && json_get(sc, "properties")->type == JSON_OBJECT;
}

static void test_tools(void)
{
	struct json *j = list(false);
	const struct json *tools = j ? json_get(j, "tools") : NULL, *t, *props;
	size_t destructive = 0;

	ok(tools && tools->type == JSON_ARRAY && tools->n == 13, "thirteen tools without the gate");
	for (size_t i = 0; tools && i < tools->n; i++) {
		const struct json *a;

		t = tools->kids[i];
		ok(schema_ok(json_get(t, "inputSchema")) && schema_ok(json_get(t, "outputSchema")),
		   "%s: input and output schemas are object schemas", json_get(t, "name")->str);
		a = json_get(t, "annotations");
		if (a && json_get(a, "destructiveHint")->b)
			destructive++;
	}
	is_int(destructive, 3, "three tools are destructive");
	ok(json_get(json_get(tool_named(tools, "delete_sandbox"), "annotations"),
		    "destructiveHint")->b &&
	   json_get(json_get(tool_named(tools, "delete_sandbox_volume"), "annotations"),
		    "destructiveHint")->b, "delete_sandbox and delete_sandbox_volume");
	ok(json_get(json_get(tool_named(tools, "delete_sandbox_snapshot"), "annotations"),
		    "destructiveHint")->b &&
	   json_get(json_get(tool_named(tools, "list_sandbox_snapshots"), "annotations"),
		    "readOnlyHint")->b && tool_named(tools, "snapshot_sandbox") &&
	   !json_get(json_get(tool_named(tools, "snapshot_sandbox"), "annotations"),
		     "destructiveHint")->b,
	   "delete_sandbox_snapshot destructive, list_sandbox_snapshots read-only, "
	   "snapshot_sandbox neither");
	props = json_get(json_get(tool_named(tools, "get_sandbox"), "outputSchema"), "properties");
	ok(props && json_get(props, "expiresAt") &&
	   strcmp(json_get(json_get(props, "expiresAt"), "type")->str, "integer") == 0,
	   "get_sandbox's output schema: expiresAt an integer (from the Sandbox descriptor)");
	props = json_get(json_get(tool_named(tools, "create_sandbox"), "outputSchema"),
			 "properties");
	ok(props && json_get(props, "idempotencyKey") && schema_ok(json_get(props, "sandbox")),
	   "create_sandbox answers {idempotencyKey, sandbox}");
	json_free(j);
}

static void test_gate(void)
{
	struct json *j;
	const struct json *tools;

	free(F.last_req);
	F = (struct fake){0};
	j = list(true);
	tools = json_get(j, "tools");
	ok(!tool_named(tools, "create_sandbox") && !tool_named(tools, "create_sandbox_volume"),
	   "no readable template, no pool: both creates hidden");
	ok(tool_named(tools, "list_sandboxes") && tools->n == 11, "the other eleven listed");
	json_free(j);
	F.templates = 1;
	j = list(true);
	tools = json_get(j, "tools");
	ok(tool_named(tools, "create_sandbox") && tool_named(tools, "create_sandbox_volume"),
	   "a readable template: both creates listed");
	json_free(j);
	F.templates = 0;
	F.pools = 1;
	j = list(true);
	tools = json_get(j, "tools");
	ok(!tool_named(tools, "create_sandbox") && tool_named(tools, "create_sandbox_volume"),
	   "pools visible, no template: only create_sandbox_volume");
	json_free(j);
}

/* tools/call name with arguments args; the result object (owned by *j). */
static const struct json *call(const char *name, const char *args, struct json **j)
{
	char msg[1024];

	snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
		 "\"params\":{\"name\":\"%s\",\"arguments\":%s}}", name, args);
	*j = ask(msg, NULL);
	return *j ? json_get(*j, "result") : NULL;
}

static const char *text_of(const struct json *r)
{
	const struct json *c = r ? json_get(r, "content") : NULL;

	return c && c->n == 1 ? json_get(c->kids[0], "text")->str : "";
}

static void test_calls(void)
{
	struct json *j, *req = NULL, *txt = NULL;
	const struct json *r, *sc;

	free(F.last_req);
	F = (struct fake){.answer = "{\"id\":\"sbx_1\",\"state\":\"ready\",\"expiresAt\":99}"};
	r = call("create_sandbox", "{\"templateId\":\"sbxt_1\",\"ttlSeconds\":600}", &j);
	is_str(F.method, "Sandboxes.Create", "create_sandbox calls Sandboxes.Create");
	json_parse(F.last_req, strlen(F.last_req), &req, NULL);
	ok(req && strcmp(json_get(req, "templateId")->str, "sbxt_1") == 0 &&
	   json_get(req, "ttlSeconds")->num == 600, "with templateId and ttlSeconds");
	ok(req && strncmp(json_get(req, "idempotencyKey")->str, "mcp_", 4) == 0,
	   "and a fresh idempotency key");
	ok(req && json_get(json_get(req, "wait"), "timeoutMs")->num == 20000,
	   "waiting 20 s by default");
	sc = r ? json_get(r, "structuredContent") : NULL;
	ok(r && !json_get(r, "isError")->b && sc &&
	   strcmp(json_get(sc, "idempotencyKey")->str, json_get(req, "idempotencyKey")->str) == 0 &&
	   strcmp(json_get(json_get(sc, "sandbox"), "id")->str, "sbx_1") == 0,
	   "answers {idempotencyKey, sandbox}");
	ok(json_parse(text_of(r), strlen(text_of(r)), &txt, NULL) == 0 &&
	   strcmp(json_get(json_get(txt, "sandbox"), "id")->str, "sbx_1") == 0,
	   "with a text copy of the structured result");
	json_free(txt);
	json_free(req);
	json_free(j);

	free(F.last_req);
	F = (struct fake){.answer = "{\"id\":\"snap_1\",\"state\":\"pending\"}"};
	r = call("snapshot_sandbox", "{\"sandboxId\":\"sbx_1\",\"includeMemory\":false,\"keep\":true}",
		 &j);
	is_str(F.method, "Sandboxes.Snapshot", "snapshot_sandbox calls Sandboxes.Snapshot");
	req = NULL;
	json_parse(F.last_req, strlen(F.last_req), &req, NULL);
	ok(req && strcmp(json_get(req, "sandboxId")->str, "sbx_1") == 0 &&
	   json_get(req, "includeMemory") && !json_get(req, "includeMemory")->b &&
	   json_get(req, "keep")->b && strncmp(json_get(req, "idempotencyKey")->str, "mcp_", 4) == 0,
	   "with sandboxId, includeMemory false, keep and a fresh idempotency key");
	sc = r ? json_get(r, "structuredContent") : NULL;
	ok(r && !json_get(r, "isError")->b && sc && json_get(sc, "idempotencyKey") &&
	   strcmp(json_get(json_get(sc, "snapshot"), "id")->str, "snap_1") == 0,
	   "answers {idempotencyKey, snapshot}");
	json_free(req);
	json_free(j);

	F.calls = 0;
	r = call("create_sandbox", "{\"templateId\":\"sbxt_1\",\"waitSeconds\":31}", &j);
	ok(r && json_get(r, "isError")->b && strstr(text_of(r), "INVALID_INPUT") &&
	   strstr(text_of(r), "waitSeconds") && F.calls == 0,
	   "waitSeconds 31: a tool error naming it, no call made");
	json_free(j);
	r = call("get_sandbox", "{\"sandboxId\":\"sbx_1\",\"rm\":\"-rf\"}", &j);
	ok(r && json_get(r, "isError")->b && strstr(text_of(r), "rm") && F.calls == 0,
	   "an unknown argument: a tool error, no call made");
	json_free(j);
	r = call("get_sandbox", "{\"sandboxId\":5}", &j);
	ok(r && json_get(r, "isError")->b && strstr(text_of(r), "INVALID_INPUT") && F.calls == 0,
	   "a number for a string: INVALID_INPUT, no call made");
	json_free(j);

	r = call("create_sandbox", "{\"templateId\":\"sbxt_1\",\"waitSeconds\":0}", &j);
	json_parse(F.last_req, strlen(F.last_req), &req, NULL);
	ok(req && !json_get(req, "wait"), "waitSeconds 0: no wait");
	json_free(req);
	json_free(j);

	F.answer = "{\"id\":\"vol_1\",\"sizeGib\":20}";
	r = call("create_sandbox_volume", "{\"poolId\":\"pool_1\",\"name\":\"n\",\"sizeGiB\":20,"
		 "\"idempotencyKey\":\"k1\"}", &j);
	json_parse(F.last_req, strlen(F.last_req), &req, NULL);
	ok(req && json_get(req, "sizeGib")->num == 20 &&
	   strcmp(json_get(req, "idempotencyKey")->str, "k1") == 0,
	   "create_sandbox_volume: sizeGiB is the request's sizeGib, the key kept");
	ok(r && strcmp(json_get(json_get(r, "structuredContent"), "idempotencyKey")->str, "k1") == 0,
	   "answers {idempotencyKey, volume} with the caller's key");
	json_free(req);
	json_free(j);

	bc_error_set(&F.err, BC_ACCESS_DENIED, "not allowed");
	bc_error_detail(&F.err, "reason", "no-allow");
	r = call("delete_sandbox", "{\"sandboxId\":\"sbx_1\"}", &j);
	ok(r && json_get(r, "isError")->b && !json_get(r, "structuredContent"),
	   "a refusal is a tool result with isError, without structuredContent");
	json_parse(text_of(r), strlen(text_of(r)), &txt, NULL);
	ok(txt && strcmp(json_get(json_get(txt, "error"), "code")->str, "ACCESS_DENIED") == 0 &&
	   strcmp(json_get(json_get(json_get(txt, "error"), "details"), "reason")->str,
		  "no-allow") == 0, "carrying the API's code and reason");
	json_free(txt);
	json_free(j);

	bc_error_set(&F.err, BC_CONFIRMATION_REQUIRED, "confirm");
	r = call("create_sandbox", "{\"templateId\":\"sbxt_1\",\"idempotencyKey\":\"again\"}", &j);
	json_parse(text_of(r), strlen(text_of(r)), &txt, NULL);
	ok(txt && strcmp(json_get(json_get(txt, "error"), "code")->str,
			 "CONFIRMATION_REQUIRED") == 0 &&
	   strcmp(json_get(txt, "idempotencyKey")->str, "again") == 0,
	   "CONFIRMATION_REQUIRED comes back with the key to retry with");
	json_free(txt);
	json_free(j);
	free(F.last_req);
}

/* The stand-in exec: records the command line and stdin, answers the
 * canned streams. */
static struct fake_exec {
	char *command;
	uint8_t in[64];
	size_t in_len;
	const char *out;
	size_t out_len, cap;
	int exit_code;
	long guest_deadline;     /* the guest's timeout(1) seconds */
	int64_t timeout_ms;      /* the local deadline */
} X;

/* The command the guest's shell gets is the tool's command line under the
 * guest's own deadline: "command -v timeout >/dev/null 2>&1 && exec timeout
 * -k 2 N sh -c 'LINE'; exec sh -c 'LINE'" (LINE single-quoted, ' as '\'').
 * Unwrapped into LINE and N; "(not wrapped)" when it is not that. */
static char *unquote(const char **p)
{
	char *out = calloc(1, strlen(*p) + 1), *o = out;
	const char *s = *p;

	if (*s++ != '\'')
		goto bad;
	for (;;) {
		if (!*s)
			goto bad;
		if (*s != '\'') {
			*o++ = *s++;
		} else if (strncmp(s, "'\\''", 4) == 0) {
			*o++ = '\'';
			s += 4;
		} else {
			*p = s + 1;
			return out;
		}
	}
bad:
	free(out);
	return NULL;
}

static char *unwrap(const char *cmd, long *deadline)
{
	static const char head[] = "command -v timeout >/dev/null 2>&1 && exec timeout -k 2 ";
	const char *p = cmd;
	char *end, *a = NULL, *b = NULL;

	if (strncmp(p, head, strlen(head)) != 0)
		goto bad;
	*deadline = strtol(p + strlen(head), &end, 10);
	p = end;
	if (strncmp(p, " sh -c ", 7) != 0 || (p += 7, !(a = unquote(&p))) ||
	    strncmp(p, "; exec sh -c ", 13) != 0 || (p += 13, !(b = unquote(&p))) || *p ||
	    strcmp(a, b) != 0)
		goto bad;
	free(b);
	return a;
bad:
	free(a);
	free(b);
	return strdup("(not wrapped)");
}

static int fake_exec(void *ctx, const struct mcp_exec_req *q, struct mcp_exec_out *ret,
		     bc_error *err)
{
	(void)ctx;
	(void)err;
	free(X.command);
	X.command = unwrap(q->command, &X.guest_deadline);
	X.timeout_ms = q->timeout_ms;
	X.in_len = q->in_len < sizeof(X.in) ? q->in_len : sizeof(X.in);
	memcpy(X.in, q->in ? q->in : (const uint8_t *)"", X.in_len);
	X.cap = q->cap;
	ret->out = malloc(X.out_len + 1);
	memcpy(ret->out, X.out ? X.out : "", X.out_len);
	ret->out_len = X.out_len;
	ret->exit_code = X.exit_code;
	return 0;
}

static const struct mcp_api exec_api = {.call = fake_call, .exec = fake_exec,
					.server_name = "bc", .server_version = "test"};

static const struct json *xcall(const char *name, const char *args, struct json **j)
{
	struct mcp_server s = {.api = &exec_api};
	char msg[1024], *out = NULL;

	snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
		 "\"params\":{\"name\":\"%s\",\"arguments\":%s}}", name, args);
	*j = NULL;
	if (mcp_handle(&s, msg, strlen(msg), &out) == 0 && out)
		json_parse(out, strlen(out), j, NULL);
	free(out);
	return *j ? json_get(*j, "result") : NULL;
}

static const char *sc_str(const struct json *r, const char *key)
{
	const struct json *v = r ? json_get(json_get(r, "structuredContent"), key) : NULL;

	return v && v->type == JSON_STRING ? v->str : "";
}

static void test_exec_tools(void)
{
	struct mcp_server s = {.api = &exec_api};
	struct json *j = NULL;
	const struct json *r, *tools;
	char *out = NULL;

	mcp_tools_list(&s, false, &out);
	json_parse(out, strlen(out), &j, NULL);
	free(out);
	tools = json_get(j, "tools");
	ok(tool_named(tools, "run_command") && tool_named(tools, "write_file") &&
	   tool_named(tools, "read_file") && tools->n == 16,
	   "a transport that can run commands lists run_command, write_file, read_file");
	for (size_t i = 13; tools && i < tools->n; i++)
		ok(schema_ok(json_get(tools->kids[i], "inputSchema")) &&
		   schema_ok(json_get(tools->kids[i], "outputSchema")), "%s: object schemas",
		   json_get(tools->kids[i], "name")->str);
	json_free(j);

	X = (struct fake_exec){.out = "hi\n", .out_len = 3, .exit_code = 3};
	r = xcall("run_command", "{\"sandboxId\":\"sbx_1\",\"command\":[\"echo\",\"it's\",\"$HOME\"]}",
		  &j);
	is_str(X.command, "'echo' 'it'\\''s' '$HOME'", "an argv command: each word single-quoted");
	ok(r && json_get(json_get(r, "structuredContent"), "exitCode")->num == 3 &&
	   strcmp(sc_str(r, "stdout"), "hi\n") == 0 && strcmp(sc_str(r, "stdoutEncoding"), "text") == 0,
	   "answers exitCode and stdout as text");
	is_int(X.cap, 1 << 20, "output capped at 1 MiB a stream");
	json_free(j);
	r = xcall("run_command", "{\"sandboxId\":\"sbx_1\",\"command\":\"echo hi; exit 3\","
		  "\"stdin\":\"AAEC/w==\",\"stdinEncoding\":\"base64\"}", &j);
	is_str(X.command, "echo hi; exit 3", "a string command goes to the shell as it is");
	ok(X.timeout_ms == 60000 && X.guest_deadline == 62,
	   "the local deadline 60 s by default, the guest's own 2 s later (got %lld ms, %ld s)",
	   (long long)X.timeout_ms, X.guest_deadline);
	ok(X.in_len == 4 && memcmp(X.in, "\x00\x01\x02\xff", 4) == 0, "base64 stdin decoded");
	json_free(j);
	X.out = "\x00\xff";
	X.out_len = 2;
	r = xcall("run_command", "{\"sandboxId\":\"sbx_1\",\"command\":\"x\",\"timeoutSeconds\":7}", &j);
	ok(X.timeout_ms == 7000 && X.guest_deadline == 9,
	   "timeoutSeconds 7: the guest kills the command at 9 s, after the local deadline");
	ok(strcmp(sc_str(r, "stdout"), "AP8=") == 0 && strcmp(sc_str(r, "stdoutEncoding"), "base64") == 0,
	   "binary stdout comes back as base64");
	json_free(j);
	free(X.command);
	X.command = NULL;
	r = xcall("run_command", "{\"sandboxId\":\"sbx_1\",\"command\":[],\"timeoutSeconds\":5}", &j);
	ok(r && json_get(r, "isError")->b && !X.command, "an empty argv: INVALID_INPUT, nothing run");
	json_free(j);
	r = xcall("run_command", "{\"sandboxId\":\"sbx_1\",\"command\":\"x\",\"timeoutSeconds\":901}", &j);
	ok(r && json_get(r, "isError")->b && !X.command, "timeoutSeconds 901 refused, nothing run");
	json_free(j);

	free(X.command);
	X = (struct fake_exec){.exit_code = 0};
	r = xcall("write_file", "{\"sandboxId\":\"sbx_1\",\"path\":\"/tmp/a b\",\"content\":\"AP8=\","
		  "\"encoding\":\"base64\",\"mode\":\"0600\"}", &j);
	is_str(X.command, "cat > '/tmp/a b' && chmod '0600' '/tmp/a b'",
	       "write_file: cat into the quoted path, then chmod");
	ok(X.in_len == 2 && X.in[0] == 0 && X.in[1] == 0xff &&
	   json_get(json_get(r, "structuredContent"), "bytes")->num == 2, "the decoded bytes on stdin");
	json_free(j);
	free(X.command);
	X.command = NULL;
	r = xcall("write_file", "{\"sandboxId\":\"sbx_1\",\"path\":\"/a\",\"content\":\"x\","
		  "\"mode\":\"u+x\"}", &j);
	ok(r && json_get(r, "isError")->b && !X.command, "a mode that is not octal: refused, nothing run");
	json_free(j);
	X.exit_code = 1;
	r = xcall("write_file", "{\"sandboxId\":\"sbx_1\",\"path\":\"/ro/a\",\"content\":\"x\"}", &j);
	ok(r && json_get(r, "isError")->b && strstr(text_of(r), "INVALID_STATE") &&
	   strstr(text_of(r), "command-failed"), "a failed write: INVALID_STATE, command-failed");
	json_free(j);

	free(X.command);
	X = (struct fake_exec){.out = "\x89PNG", .out_len = 4};
	r = xcall("read_file", "{\"sandboxId\":\"sbx_1\",\"path\":\"/x\"}", &j);
	is_str(X.command, "cat -- '/x'", "read_file: cat the quoted path");
	is_int(X.cap, 4 << 20, "capped at 4 MiB");
	ok(strcmp(sc_str(r, "encoding"), "base64") == 0 && strcmp(sc_str(r, "content"), "iVBORw==") == 0,
	   "a file that is not UTF-8 comes back as base64");
	json_free(j);
	r = xcall("read_file", "{\"sandboxId\":\"sbx_1\",\"path\":\"/x\",\"encoding\":\"text\"}", &j);
	ok(r && json_get(r, "isError")->b, "... and asked as text, refused");
	json_free(j);
	free(X.command);
}

int main(void)
{
	test_malformed();
	test_ids();
	test_framing();
	test_tools();
	test_gate();
	test_calls();
	test_exec_tools();
	done_testing();
}
