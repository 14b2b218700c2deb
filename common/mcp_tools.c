/* mcp_tools.c: the MCP tools, as data. Each tool is one public API method:
 * its arguments object is renamed member by member into the method's
 * request in proto3 JSON and read by pbjson_read (which checks every type
 * and range), the call goes through the transport's mcp_api, and the reply
 * written by pbjson_write is both the structured result and its text copy.
 * The output schema is made from the reply's descriptor, so it always
 * describes what pbjson_write emits.
 *
 * The spec's gate decides what tools/list shows: create_sandbox needs
 * compute:sandboxes:read on some template, which SandboxTemplates.List
 * answers (it leaves out every template the caller may not read).
 * create_sandbox_volume needs a visible pool: bc's IAM has no
 * compute:pools:read (pools are the operator's), so a pool is visible
 * when a readable template names one or Pools.List answers the operator.
 * The gate only hides: every call is still decided by the API.
 *
 * Beyond the spec's tools (issue 19), snapshot_sandbox takes a snapshot:
 * Sandboxes.Snapshot decides it as compute:sandboxes:update on the sandbox
 * like any caller's, and the snapshot belongs to the sandbox's owner. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/compute/v1/volumes.pb-c.h"
#include "mcp_internal.h"
#include "pbjson.h"
#include "pbjson_internal.h"
#include "rpc_internal.h"
#include "util.h"

#define SCHEMA_DEPTH 8
#define WAIT_DEFAULT_S 20
#define WAIT_MAX_S 30

enum mcp_gate { GATE_NONE, GATE_TEMPLATE, GATE_POOL };

/* An argument: its name in the tool, and the request field it fills
 * (proto3 JSON name), or NULL for waitSeconds (the request's wait). */
struct mcp_arg {
	const char *name, *field;
};

struct mcp_tool {
	const char *name, *title, *description;
	const char *input;          /* the inputSchema, JSON */
	const ProtobufCServiceDescriptor *svc;
	const char *method;
	struct mcp_arg args[8];
	unsigned hints;             /* MCP_HINT_* */
	enum mcp_gate gate;
	const char *wrap;           /* a create: answers {idempotencyKey, <wrap>: reply} */
};

#define SBX_SVC (&bc__compute__v1__sandboxes__descriptor)
#define TPL_SVC (&bc__compute__v1__sandbox_templates__descriptor)
#define SNAP_SVC (&bc__compute__v1__sandbox_snapshots__descriptor)
#define VOL_SVC (&bc__compute__v1__sandbox_volumes__descriptor)

#define OBJ(props, req) "{\"type\":\"object\",\"properties\":{" props "}," req \
	"\"additionalProperties\":false}"
#define REQ(...) "\"required\":[" __VA_ARGS__ "],"
#define P_STR(name, what) "\"" name "\":{\"type\":\"string\",\"description\":\"" what "\"}"
#define P_SCOPE "\"scope\":{\"type\":\"string\",\"enum\":[\"mine\",\"all\"],\"description\":" \
	"\"mine (default): what you created; all: the tenant's, each one you may read\"}"
#define P_LIST "\"deleted\":{\"type\":\"boolean\",\"description\":\"include deleted ones\"}," \
	"\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":200}," \
	P_STR("cursor", "the previous page's cursor")
#define P_SIZE "\"sizeGiB\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":16384," \
	"\"description\":\"size in GiB\"}"
#define P_KEY P_STR("idempotencyKey", "repeat a create with the same key to retry it " \
		    "safely (default: a fresh one, returned in the answer)")

static const struct mcp_tool tools[] = {
	{"list_sandbox_templates", "List sandbox templates",
	 "The templates you may create sandboxes from, with their pools, lifetimes and warm "
	 "pool sizes.",
	 OBJ("", ""), TPL_SVC, "List", {{0}}, MCP_HINT_READ_ONLY | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"create_sandbox", "Create a sandbox",
	 "Create a sandbox from a template and wait up to waitSeconds for it to be ready. "
	 "Answers {idempotencyKey, sandbox}; on CONFIRMATION_REQUIRED or a lost answer, call "
	 "again with the same idempotencyKey.",
	 OBJ(P_STR("templateId", "the template (sbxt_...)") ","
	     "\"ttlSeconds\":{\"type\":\"integer\",\"minimum\":1,\"description\":"
	     "\"lifetime in seconds (default: the template's)\"}," P_KEY ","
	     "\"waitSeconds\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":30,\"default\":20,"
	     "\"description\":\"how long to wait for it to leave starting\"}",
	     REQ("\"templateId\"")),
	 SBX_SVC, "Create",
	 {{"templateId", "templateId"}, {"ttlSeconds", "ttlSeconds"},
	  {"idempotencyKey", "idempotencyKey"}, {"waitSeconds", NULL}},
	 MCP_HINT_IDEMPOTENT, GATE_TEMPLATE, "sandbox"},
	{"list_sandboxes", "List sandboxes", "Sandboxes, newest first.",
	 OBJ(P_SCOPE "," P_STR("templateId", "only this template's") "," P_LIST, ""), SBX_SVC,
	 "List",
	 {{"scope", "scope"}, {"templateId", "templateId"}, {"deleted", "deleted"},
	  {"limit", "limit"}, {"cursor", "cursor"}},
	 MCP_HINT_READ_ONLY | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"get_sandbox", "Get a sandbox", "One sandbox: its state, expiry and instance.",
	 OBJ(P_STR("sandboxId", "sbx_..."), REQ("\"sandboxId\"")), SBX_SVC, "Get",
	 {{"sandboxId", "sandboxId"}}, MCP_HINT_READ_ONLY | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"extend_sandbox", "Extend a sandbox",
	 "Move a sandbox's expiry later: by a duration (30m, 8h, 7d) from now, or until an "
	 "epoch-millisecond time.",
	 OBJ(P_STR("sandboxId", "sbx_...") "," P_STR("by", "a duration such as 30m, 8h, 7d") ","
	     "\"until\":{\"type\":\"integer\",\"description\":\"the new expiry, epoch ms\"}",
	     REQ("\"sandboxId\"")),
	 SBX_SVC, "Extend", {{"sandboxId", "sandboxId"}, {"by", "by"}, {"until", "until"}}, 0,
	 GATE_NONE, NULL},
	{"delete_sandbox", "Delete a sandbox", "Delete a sandbox: its guest and disk are gone.",
	 OBJ(P_STR("sandboxId", "sbx_..."), REQ("\"sandboxId\"")), SBX_SVC, "Delete",
	 {{"sandboxId", "sandboxId"}}, MCP_HINT_DESTRUCTIVE | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"snapshot_sandbox", "Snapshot a sandbox",
	 "Save a sandbox's disk and (includeMemory, default true) memory to the snapshot store; "
	 "the sandbox keeps running. Answers {idempotencyKey, snapshot}: the snapshot is pending "
	 "until the host uploaded it (see list_sandbox_snapshots). It holds the sandbox's "
	 "processes, files and secrets; only the sandbox's owner can restore it.",
	 OBJ(P_STR("sandboxId", "sbx_...") ","
	     "\"includeMemory\":{\"type\":\"boolean\",\"default\":true,\"description\":"
	     "\"memory and disk (true) or the disk only\"},"
	     "\"keep\":{\"type\":\"boolean\",\"default\":false,\"description\":"
	     "\"keep the snapshot after the sandbox is deleted\"}," P_KEY,
	     REQ("\"sandboxId\"")),
	 SBX_SVC, "Snapshot",
	 {{"sandboxId", "sandboxId"}, {"includeMemory", "includeMemory"}, {"keep", "keep"},
	  {"idempotencyKey", "idempotencyKey"}},
	 MCP_HINT_IDEMPOTENT, GATE_NONE, "snapshot"},
	{"list_sandbox_snapshots", "List sandbox snapshots",
	 "Sandbox snapshots that are not deleted, newest first: state, includeMemory, keep, "
	 "size, and ownerIdentityId (only the owner restores one).",
	 OBJ(P_SCOPE "," P_STR("sandboxId", "only this sandbox's (sbx_...)") ","
	     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":200}," P_STR("cursor",
	     "the previous page's cursor"), ""),
	 SNAP_SVC, "List",
	 {{"scope", "scope"}, {"sandboxId", "sandboxId"}, {"limit", "limit"}, {"cursor", "cursor"}},
	 MCP_HINT_READ_ONLY | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"delete_sandbox_snapshot", "Delete a sandbox snapshot",
	 "Delete a snapshot: it can no longer be restored and its stored object is removed.",
	 OBJ(P_STR("snapshotId", "snap_..."), REQ("\"snapshotId\"")), SNAP_SVC, "Delete",
	 {{"snapshotId", "snapshotId"}}, MCP_HINT_DESTRUCTIVE | MCP_HINT_IDEMPOTENT, GATE_NONE,
	 NULL},
	{"list_sandbox_volumes", "List sandbox volumes",
	 "Sandbox volumes (persistent disks), newest first.",
	 OBJ(P_STR("poolId", "only this pool's") "," P_SCOPE "," P_LIST, ""), VOL_SVC, "List",
	 {{"poolId", "poolId"}, {"scope", "scope"}, {"deleted", "deleted"}, {"limit", "limit"},
	  {"cursor", "cursor"}},
	 MCP_HINT_READ_ONLY | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
	{"create_sandbox_volume", "Create a sandbox volume",
	 "Create a persistent volume on one host of a pool. Answers {idempotencyKey, volume}; "
	 "call again with the same idempotencyKey to retry.",
	 OBJ(P_STR("poolId", "the pool (pool_...)") "," P_STR("name", "the volume's name") ","
	     P_SIZE "," P_KEY,
	     REQ("\"poolId\",\"name\",\"sizeGiB\"")),
	 VOL_SVC, "Create",
	 {{"poolId", "poolId"}, {"name", "name"}, {"sizeGiB", "sizeGib"},
	  {"idempotencyKey", "idempotencyKey"}},
	 MCP_HINT_IDEMPOTENT, GATE_POOL, "volume"},
	{"resize_sandbox_volume", "Grow a sandbox volume",
	 "Grow a volume to sizeGiB (never shrinks it; its current size changes nothing).",
	 OBJ(P_STR("volumeId", "vol_...") "," P_SIZE, REQ("\"volumeId\",\"sizeGiB\"")), VOL_SVC,
	 "Resize", {{"volumeId", "volumeId"}, {"sizeGiB", "sizeGib"}}, MCP_HINT_IDEMPOTENT,
	 GATE_NONE, NULL},
	{"delete_sandbox_volume", "Delete a sandbox volume",
	 "Delete a volume: its data is wiped.",
	 OBJ(P_STR("volumeId", "vol_..."), REQ("\"volumeId\"")), VOL_SVC, "Delete",
	 {{"volumeId", "volumeId"}}, MCP_HINT_DESTRUCTIVE | MCP_HINT_IDEMPOTENT, GATE_NONE, NULL},
};

/* ---- schemas ---- */

static void schema_put(struct jsonw *b, const ProtobufCMessageDescriptor *d, int depth);

static void schema_scalar(struct jsonw *b, const ProtobufCFieldDescriptor *f, int depth)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_BOOL:
		jsonw_text(b, "{\"type\":\"boolean\"}");
		break;
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_DOUBLE:
		jsonw_text(b, "{\"type\":\"number\"}");
		break;
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_BYTES:
	case PROTOBUF_C_TYPE_ENUM:
		jsonw_text(b, "{\"type\":\"string\"}");
		break;
	case PROTOBUF_C_TYPE_MESSAGE:
		schema_put(b, f->descriptor, depth + 1);
		break;
	default: /* every integer: pbjson writes them as numbers */
		jsonw_text(b, "{\"type\":\"integer\"}");
	}
}

static void schema_field(struct jsonw *b, const ProtobufCFieldDescriptor *f, int depth)
{
	if (pbj_is_map(f)) {
		const ProtobufCMessageDescriptor *e = f->descriptor;

		jsonw_text(b, "{\"type\":\"object\",\"additionalProperties\":");
		schema_scalar(b, &e->fields[1], depth);
		jsonw_text(b, "}");
	} else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		jsonw_text(b, "{\"type\":\"array\",\"items\":");
		schema_scalar(b, f, depth);
		jsonw_text(b, "}");
	} else {
		schema_scalar(b, f, depth);
	}
}

static void schema_put(struct jsonw *b, const ProtobufCMessageDescriptor *d, int depth)
{
	char name[PBJSON_MAX_NAME];

	if (depth > SCHEMA_DEPTH) {
		jsonw_text(b, "{\"type\":\"object\"}");
		return;
	}
	jsonw_text(b, "{\"type\":\"object\",\"properties\":{");
	for (unsigned i = 0; i < d->n_fields; i++) {
		pbj_json_name(d->fields[i].name, name, sizeof(name));
		if (i)
			jsonw_text(b, ",");
		jsonw_string(b, name);
		jsonw_text(b, ":");
		schema_field(b, &d->fields[i], depth);
	}
	jsonw_text(b, "}}");
}

char *mcp_schema_of(const ProtobufCMessageDescriptor *d)
{
	struct jsonw b = {0};
	char *out = NULL;

	schema_put(&b, d, 0);
	return jsonw_take(&b, &out) < 0 ? NULL : out;
}

static const ProtobufCMethodDescriptor *method_of(const struct mcp_tool *t)
{
	return protobuf_c_service_descriptor_get_method_by_name(t->svc, t->method);
}

static void output_schema(struct jsonw *b, const struct mcp_tool *t)
{
	const ProtobufCMessageDescriptor *out = method_of(t)->output;

	if (!t->wrap) {
		schema_put(b, out, 0);
		return;
	}
	jsonw_text(b, "{\"type\":\"object\",\"properties\":{\"idempotencyKey\":"
		     "{\"type\":\"string\"},");
	jsonw_string(b, t->wrap);
	jsonw_text(b, ":");
	schema_put(b, out, 1);
	jsonw_text(b, "},\"required\":[\"idempotencyKey\",");
	jsonw_string(b, t->wrap);
	jsonw_text(b, "]}");
}

/* ---- tools/list ---- */

static void hint(struct jsonw *b, const char *name, bool on)
{
	jsonw_text(b, ",\"");
	jsonw_text(b, name);
	jsonw_text(b, on ? "\":true" : "\":false");
}

/* See mcp_internal.h. */
void mcp_tool_put(struct jsonw *b, const char *name, const char *title, const char *description,
		  const char *input, const char *output, unsigned hints)
{
	jsonw_text(b, "{\"name\":");
	jsonw_string(b, name);
	jsonw_text(b, ",\"title\":");
	jsonw_string(b, title);
	jsonw_text(b, ",\"description\":");
	jsonw_string(b, description);
	jsonw_text(b, ",\"inputSchema\":");
	jsonw_text(b, input);
	jsonw_text(b, ",\"outputSchema\":");
	jsonw_text(b, output);
	jsonw_text(b, ",\"annotations\":{\"title\":");
	jsonw_string(b, title);
	hint(b, "readOnlyHint", hints & MCP_HINT_READ_ONLY);
	hint(b, "destructiveHint", hints & MCP_HINT_DESTRUCTIVE);
	hint(b, "idempotentHint", hints & MCP_HINT_IDEMPOTENT);
	hint(b, "openWorldHint", hints & MCP_HINT_OPEN_WORLD);
	jsonw_text(b, "}}");
}

static void tool_put(struct jsonw *b, const struct mcp_tool *t)
{
	struct jsonw o = {0};
	char *out = NULL;

	output_schema(&o, t);
	if (jsonw_take(&o, &out) < 0) {
		b->err = b->err ? b->err : -ENOMEM;
		return;
	}
	mcp_tool_put(b, t->name, t->title, t->description, t->input, out, t->hints);
	free(out);
}

/* The number of items List answers the caller with an empty request, 0
 * on any refusal. */
static size_t visible(struct mcp_server *s, const ProtobufCServiceDescriptor *svc)
{
	const ProtobufCMethodDescriptor *m =
		protobuf_c_service_descriptor_get_method_by_name(svc, "List");
	ProtobufCMessage *req = xcalloc(1, m->input->sizeof_message), *resp = NULL;
	bc_error err = {0};
	size_t n = 0;

	protobuf_c_message_init(m->input, req);
	if (s->api->call(s->api->ctx, svc, "List", req, 0, &resp, &err) == 0) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(m->output, "items");

		n = f ? *(size_t *)pbj_member(resp, f->quantifier_offset) : 0;
	}
	protobuf_c_message_free_unpacked(resp, NULL);
	free(req);
	return n;
}

void mcp_tools_put(struct mcp_server *s, bool gate, struct jsonw *b)
{
	int tpl = -1, pool = -1; /* unknown until a tool asks */
	bool first = true;

	jsonw_text(b, "[");
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		const struct mcp_tool *t = &tools[i];

		if (gate && t->gate != GATE_NONE && tpl < 0)
			tpl = visible(s, TPL_SVC) > 0;
		if (gate && t->gate == GATE_POOL && pool < 0)
			pool = tpl || visible(s, &bc__admin__v1__pools__descriptor) > 0;
		if (gate && ((t->gate == GATE_TEMPLATE && !tpl) || (t->gate == GATE_POOL && !pool)))
			continue;
		if (!first)
			jsonw_text(b, ",");
		first = false;
		tool_put(b, t);
	}
	if (s->api->exec) {
		if (!first)
			jsonw_text(b, ",");
		mcp_exec_tools_put(s, b);
	}
	jsonw_text(b, "]");
}

/* ---- tools/call ---- */

/* A CallToolResult: the text, and when structured is set, that JSON as
 * structuredContent too. */
int mcp_tool_result(const char *text, bool structured, bool is_error, char **ret)
{
	struct jsonw b = {0};

	jsonw_text(&b, "{\"content\":[{\"type\":\"text\",\"text\":");
	jsonw_string(&b, text);
	jsonw_text(&b, "}]");
	if (structured) {
		jsonw_text(&b, ",\"structuredContent\":");
		jsonw_text(&b, text);
	}
	jsonw_text(&b, is_error ? ",\"isError\":true}" : ",\"isError\":false}");
	return jsonw_take(&b, ret);
}

/* A refusal: the API's error body ({"error":{code, message, details}}, as
 * the JSON/HTTP transport writes it), with the idempotency key of a create
 * so the model can retry with it. */
int mcp_tool_error(const bc_error *e, const char *key, char **ret)
{
	bc_error fallback = {0};
	_cleanup_free_ char *body = NULL;
	struct jsonw b = {0};
	char *text = NULL;
	int r;

	if (e->code == BC_OK) { /* a failure that said nothing */
		bc_error_set(&fallback, BC_INTERNAL, "failed without a reason");
		e = &fallback;
	}
	if (!(body = rpc_http_error_json(e)))
		return -ENOMEM;
	jsonw_text_n(&b, body, strlen(body) - 1);
	if (key) {
		jsonw_text(&b, ",\"idempotencyKey\":");
		jsonw_string(&b, key);
	}
	jsonw_text(&b, "}");
	if ((r = jsonw_take(&b, &text)) < 0)
		return r;
	r = mcp_tool_result(text, false, true, ret);
	free(text);
	return r;
}

static const struct mcp_arg *arg_of(const struct mcp_tool *t, const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(t->args) && t->args[i].name; i++)
		if (strcmp(t->args[i].name, name) == 0)
			return &t->args[i];
	return NULL;
}

/* waitSeconds: a whole number of seconds, 0 to 30. */
static int wait_seconds(struct mcp_span v, int64_t *ret, bc_error *err)
{
	char buf[8];
	char *end;
	long s;

	if (v.n == 0 || v.n >= sizeof(buf) || v.p[0] < '0' || v.p[0] > '9')
		goto bad;
	memcpy(buf, v.p, v.n);
	buf[v.n] = '\0';
	s = strtol(buf, &end, 10);
	if (*end || s > WAIT_MAX_S)
		goto bad;
	*ret = s * 1000;
	return 0;
bad:
	bc_error_set(err, BC_INVALID_INPUT, "waitSeconds must be a whole number from 0 to 30");
	return bc_error_detail(err, "field", "waitSeconds");
}

/* The request's proto3 JSON from the tool's arguments: each renamed, a
 * fresh idempotency key for a create without one, the wait of
 * waitSeconds (default 20 s) in *ret_wait_ms. */
static int request_json(const struct mcp_tool *t, struct mcp_span args, struct jsonw *b,
			int64_t *ret_wait_ms, bc_error *err)
{
	struct mcp_span v;
	size_t i = 0;
	bool first = true, key = false, waits = arg_of(t, "waitSeconds") != NULL;
	int64_t wait_ms = WAIT_DEFAULT_S * 1000;
	char *name = NULL;
	int r;

	jsonw_text(b, "{");
	while (args.n && (r = mcp_json_next(args, &i, &name, &v)) == 1) {
		const struct mcp_arg *a = arg_of(t, name);

		if (!a) {
			bc_error_set(err, BC_INVALID_INPUT, "%s takes no argument %s", t->name, name);
			bc_error_detail(err, "field", "%s", name);
			free(name);
			return -BC_EDOMAIN;
		}
		free(name);
		if (!a->field) {
			if ((r = wait_seconds(v, &wait_ms, err)) < 0)
				return r;
			continue;
		}
		key |= strcmp(a->field, "idempotencyKey") == 0;
		jsonw_text(b, first ? "\"" : ",\"");
		first = false;
		jsonw_text(b, a->field);
		jsonw_text(b, "\":");
		jsonw_text_n(b, v.p, v.n);
	}
	if (t->wrap && !key) {
		char fresh[48];

		id_new("mcp", fresh, sizeof(fresh));
		jsonw_text(b, first ? "\"idempotencyKey\":" : ",\"idempotencyKey\":");
		jsonw_string(b, fresh);
		first = false;
	}
	if (waits && wait_ms > 0) {
		char w[64];

		snprintf(w, sizeof(w), "%s\"wait\":{\"timeoutMs\":%lld}", first ? "" : ",",
			 (long long)wait_ms);
		jsonw_text(b, w);
	}
	jsonw_text(b, "}");
	*ret_wait_ms = waits ? wait_ms : 0;
	return 0;
}

/* The answer of a create: {idempotencyKey, <wrap>: reply}. */
static int wrapped(const struct mcp_tool *t, const char *key, const char *json, char **ret)
{
	struct jsonw b = {0};

	jsonw_text(&b, "{\"idempotencyKey\":");
	jsonw_string(&b, key);
	jsonw_text(&b, ",");
	jsonw_string(&b, t->wrap);
	jsonw_text(&b, ":");
	jsonw_text(&b, json);
	jsonw_text(&b, "}");
	return jsonw_take(&b, ret);
}

static int call_tool(struct mcp_server *s, const struct mcp_tool *t, struct mcp_span args,
		     char **ret)
{
	const ProtobufCMethodDescriptor *m = method_of(t);
	ProtobufCMessage *req = NULL, *resp = NULL;
	struct jsonw b = {0};
	_cleanup_free_ char *json = NULL, *out = NULL, *text = NULL, *key = NULL;
	bc_error err = {0};
	int64_t wait_ms = 0;
	int r;

	if ((r = request_json(t, args, &b, &wait_ms, &err)) < 0) {
		free(b.buf);
		return r == -BC_EDOMAIN ? mcp_tool_error(&err, NULL, ret) : r;
	}
	if ((r = jsonw_take(&b, &json)) < 0)
		return r;
	if ((r = pbjson_read(m->input, json, strlen(json), MCP_MESSAGE_MAX, &req, &err)) < 0)
		return r == -BC_EDOMAIN ? mcp_tool_error(&err, NULL, ret) : r;
	if (t->wrap) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(m->input, "idempotency_key");

		key = xstrdup(*(char **)pbj_member(req, f->offset));
	}
	r = s->api->call(s->api->ctx, t->svc, t->method, req, wait_ms, &resp, &err);
	protobuf_c_message_free_unpacked(req, NULL);
	if (r < 0)
		return mcp_tool_error(&err, key, ret);
	r = pbjson_write(resp, 0, &out);
	protobuf_c_message_free_unpacked(resp, NULL);
	if (r < 0)
		return r;
	if (t->wrap && (r = wrapped(t, key, out, &text)) < 0)
		return r;
	return mcp_tool_result(text ? text : out, true, false, ret);
}

int mcp_tool_call(struct mcp_server *s, const char *name, struct mcp_span args,
		  char **ret_result)
{
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			return call_tool(s, &tools[i], args, ret_result);
	return s->api->exec ? mcp_exec_call(s, name, args, ret_result) : -ENOENT;
}
