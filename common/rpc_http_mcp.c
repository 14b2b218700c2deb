/* rpc_http_mcp.c: MCP's Streamable HTTP transport (revision 2025-06-18) at
 * /mcp on the JSON/HTTP port (docs/mcp.md): a POST carries one JSON-RPC
 * message and is answered as application/json (202 without a body for a
 * notification); GET is 405 (no server-initiated stream); DELETE ends a
 * session. The protocol is common/mcp.c's, as over stdio; each tool's API
 * call runs the method's unary handler on the worker that took the
 * message, through the same pre_call (the request's bearer token) as a
 * POST /api/... of that method: no loopback HTTP.
 *
 * Sessions: initialize (authenticated first) gets an Mcp-Session-Id,
 * every later message must carry it (400 without, 404 for an unknown or
 * idle one) and the same credential it was issued to (a session id alone
 * is worth nothing). At most mcp_max_sessions live at once; one idle past
 * mcp_idle_timeout_ms is gone. A browser's Origin header must be one of
 * mcp_allowed_origins (DNS rebinding); a request without one (no
 * browser) is fine. MCP-Protocol-Version, when sent, must be ours. The
 * three tools that need an SSH client are not offered here. */
#include "rpc_http_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "json_lex.h"
#include "mcp_internal.h"
#include "util.h"

#define MCP_PATH "/mcp"
#define MCP_AUTH_PATH "/bc.compute.v1.SandboxTemplates/List"
#define MCP_CALL_TIMEOUT_MS 30000

struct mcp_session {
	char id[33];                 /* "" : a free slot */
	uint8_t cred[SHA256_DIGEST_LENGTH];
	int64_t used_ms;
};

struct http_mcp {
	pthread_mutex_t lock;
	struct mcp_session *s;
	int max, idle_ms;
	char *origins;               /* ",a,b," */
};

int http_mcp_init(struct rpc_http *h)
{
	const struct rpc_server_opts *o = &h->srv->opts;
	struct http_mcp *m;

	if (o->mcp_max_sessions <= 0)
		return 0;
	m = xcalloc(1, sizeof(*m));
	pthread_mutex_init(&m->lock, NULL);
	m->max = o->mcp_max_sessions;
	m->s = xcalloc((size_t)m->max, sizeof(*m->s));
	m->idle_ms = o->mcp_idle_timeout_ms > 0 ? o->mcp_idle_timeout_ms : 3600000;
	m->origins = xasprintf(",%s,", o->mcp_allowed_origins ? o->mcp_allowed_origins : "");
	h->mcp = m;
	return 0;
}

void http_mcp_free(struct rpc_http *h)
{
	if (!h->mcp)
		return;
	OPENSSL_cleanse(h->mcp->s, (size_t)h->mcp->max * sizeof(*h->mcp->s));
	pthread_mutex_destroy(&h->mcp->lock);
	free(h->mcp->s);
	free(h->mcp->origins);
	free(h->mcp);
	h->mcp = NULL;
}

bool http_mcp_wants(const struct rpc_http *h, const struct rpc_http_request *req)
{
	return h->mcp && strcmp(req->target, MCP_PATH) == 0;
}

/* ---- sessions ---- */

static bool live(const struct http_mcp *m, const struct mcp_session *s, int64_t now)
{
	return s->id[0] && now - s->used_ms < m->idle_ms;
}

/* The session sid of credential cred, touched: 0, or -ENOENT. */
static int session_use(struct http_mcp *m, const char *sid, const uint8_t *cred, bool end)
{
	int64_t now = mono_ms();
	int r = -ENOENT;

	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < m->max; i++) {
		struct mcp_session *s = &m->s[i];

		if (!live(m, s, now) || strcmp(s->id, sid) != 0 ||
		    CRYPTO_memcmp(s->cred, cred, sizeof(s->cred)) != 0)
			continue;
		s->used_ms = now;
		if (end)
			memset(s, 0, sizeof(*s));
		r = 0;
		break;
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}

/* A new session for cred in a free or idle slot: 0, or -ENOSPC. */
static int session_new(struct http_mcp *m, const uint8_t *cred, char id[33])
{
	int64_t now = mono_ms();
	uint8_t raw[16];
	int r = -ENOSPC;

	if (random_bytes(raw, sizeof(raw)) < 0)
		return -EIO;
	hex_encode(raw, sizeof(raw), id);
	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < m->max; i++) {
		struct mcp_session *s = &m->s[i];

		if (live(m, s, now))
			continue;
		memcpy(s->id, id, 33);
		memcpy(s->cred, cred, sizeof(s->cred));
		s->used_ms = now;
		r = 0;
		break;
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}

/* ---- the calls, on a worker ---- */

struct mcp_job {
	struct rpc_http *h;
	const struct rpc_http_request *req;
	const char *peer, *body;
	size_t body_len;
	void *ts;                    /* the worker's thread state */
	int status;                  /* out: 200, or an HTTP refusal */
	char *reply;                 /* out: malloc'd */
};

static const struct rpc_method *method_of(const rpc_server *s, const char *path)
{
	for (size_t i = 0; i < s->n_methods; i++)
		if (strcmp(s->methods[i].path, path) == 0)
			return &s->methods[i];
	return NULL;
}

static rpc_call *call_new(struct mcp_job *j, const struct rpc_method *m, int64_t extra_ms)
{
	rpc_call *c = rpc_call_alloc(j->h->srv, &rpc_http_ops, j->ts);

	c->method = m;
	c->path = m->path;
	c->peer = rpc_strdup(c, j->peer);
	c->deadline_ms = mono_ms() + MCP_CALL_TIMEOUT_MS + extra_ms;
	http_call_metadata(c, j->req);
	return c;
}

/* A heap copy of a message the call's arena owns: the core frees it with
 * protobuf_c_message_free_unpacked. */
static ProtobufCMessage *heap_copy(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = xmalloc(n ? n : 1);
	ProtobufCMessage *out;

	protobuf_c_message_pack(m, buf);
	out = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
	free(buf);
	return out;
}

static int api_call(void *arg, const ProtobufCServiceDescriptor *svc, const char *method,
		    const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret,
		    bc_error *err)
{
	struct mcp_job *j = arg;
	const struct rpc_method *m;
	ProtobufCMessage *resp = NULL;
	char path[256];
	rpc_call *c;
	int r;

	snprintf(path, sizeof(path), "/%s/%s", svc->name, method);
	m = method_of(j->h->srv, path);
	if (!m || !m->has_handler || m->h.kind != RPC_UNARY)
		return bc_error_set(err, BC_UNSUPPORTED, "%s is not served here", path);
	c = call_new(j, m, extra_ms);
	r = rpc_call_pre(c, err);
	if (r >= 0)
		r = rpc_call_invoke_unary(c, req, &resp, err);
	if (r >= 0 && !(*ret = heap_copy(resp)))
		r = bc_error_set(err, BC_INTERNAL, "internal error");
	rpc_call_release(c);
	return r < 0 ? -BC_EDOMAIN : 0;
}

/* The credential is checked before a session is issued: pre_call of a
 * method every tools/list asks for. */
static int authenticate(struct mcp_job *j, bc_error *err)
{
	const struct rpc_method *m = method_of(j->h->srv, MCP_AUTH_PATH);
	rpc_call *c;
	int r;

	if (!m)
		return bc_error_set(err, BC_UNSUPPORTED, "MCP needs the compute API");
	c = call_new(j, m, 0);
	r = rpc_call_pre(c, err);
	rpc_call_release(c);
	return r;
}

static void mcp_work(void *arg, void *thread_state)
{
	struct mcp_job *j = arg;
	struct mcp_api api = {.ctx = j, .call = api_call, .server_name = "bc-controller",
			      .server_version = "1"};
	struct mcp_server s = {.api = &api};
	bc_error err = {0};

	j->ts = thread_state;
	if (authenticate(j, &err) < 0) {
		j->status = bc_code_http_status(err.code);
		j->reply = rpc_http_error_json(&err);
		return;
	}
	j->status = 200;
	if (mcp_handle(&s, j->body, j->body_len, &j->reply) < 0) {
		bc_error_set(&err, BC_INTERNAL, "internal error");
		j->status = 500;
		j->reply = rpc_http_error_json(&err);
	}
}

/* ---- the request ---- */

static bool origin_ok(const struct http_mcp *m, const char *origin)
{
	_cleanup_free_ char *needle = NULL;

	if (!origin)
		return true;
	if (strchr(origin, ','))
		return false;
	needle = xasprintf(",%s,", origin);
	return strstr(m->origins, needle) != NULL;
}

static void credential(const struct rpc_http_request *req, uint8_t out[SHA256_DIGEST_LENGTH])
{
	const char *a = rpc_http_header(req, "authorization");

	SHA256((const uint8_t *)(a ? a : ""), a ? strlen(a) : 0, out);
}

/* Is the body a request for initialize? */
static bool is_initialize(const char *body, size_t n)
{
	struct mcp_span o = {body, n}, v;
	size_t i = 0;

	while (o.n && json_lex_ws(o.p[0]))
		o.p++, o.n--;
	if (!o.n || o.p[0] != '{' || mcp_json_skip(body, n, &i, 0) < 0)
		return false;
	return mcp_json_get(o, "method", &v) && v.n == 12 && memcmp(v.p, "\"initialize\"", 12) == 0;
}

static int post(struct http_conn *c, const struct rpc_http_request *req, const char *body)
{
	struct http_mcp *m = c->h->mcp;
	struct mcp_job j = {.h = c->h, .req = req, .peer = c->peer, .body = body,
			    .body_len = req->content_length};
	const char *sid = rpc_http_header(req, "mcp-session-id");
	const char *ver = rpc_http_header(req, "mcp-protocol-version");
	uint8_t cred[SHA256_DIGEST_LENGTH];
	bool ka = req->keep_alive, init = is_initialize(body, req->content_length);
	char id[33], extra[80] = "";
	int r;

	if (req->content_length && !rpc_http_is_json(rpc_http_header(req, "content-type")))
		return http_respond_error(c, 415, "", ka, BC_INVALID_INPUT, "Content-Type",
					  "Content-Type must be application/json");
	if (ver && strcmp(ver, MCP_PROTOCOL_VERSION) != 0)
		return http_respond_error(c, 400, "", ka, BC_INVALID_INPUT, "MCP-Protocol-Version",
					  "unsupported MCP-Protocol-Version: this server speaks %s",
					  MCP_PROTOCOL_VERSION);
	credential(req, cred);
	if (!init && !sid)
		return http_respond_error(c, 400, "", ka, BC_INVALID_INPUT, "Mcp-Session-Id",
					  "Mcp-Session-Id required: initialize first");
	if (!init && session_use(m, sid, cred, false) < 0)
		return http_respond_error(c, 404, "", ka, BC_NOT_FOUND, "Mcp-Session-Id",
					  "no such MCP session: initialize again");
	http_run_on_worker(c->h, mcp_work, &j);
	if (j.status == 200 && init && j.reply && strstr(j.reply, "\"result\":")) {
		if ((r = session_new(m, cred, id)) < 0) {
			free(j.reply);
			return http_respond_error(c, 503, "Retry-After: 60\r\n", ka,
						  BC_RESOURCE_EXHAUSTED, NULL,
						  "too many MCP sessions (%d)", m->max);
		}
		snprintf(extra, sizeof(extra), "Mcp-Session-Id: %s\r\n", id);
	}
	r = http_respond(c, j.reply ? j.status : 202, extra, j.reply ? j.reply : "", ka);
	free(j.reply);
	OPENSSL_cleanse(cred, sizeof(cred));
	return r;
}

int http_mcp_serve(struct http_conn *c, const struct rpc_http_request *req, const char *body)
{
	struct http_mcp *m = c->h->mcp;
	bool ka = req->keep_alive;
	const char *sid = rpc_http_header(req, "mcp-session-id");
	uint8_t cred[SHA256_DIGEST_LENGTH];

	if (!origin_ok(m, rpc_http_header(req, "origin")))
		return http_respond_error(c, 403, "", ka, BC_ACCESS_DENIED, "Origin",
					  "Origin not allowed (controller config mcp_allowed_origins)");
	if (strcmp(req->method, "POST") == 0)
		return post(c, req, body);
	if (strcmp(req->method, "DELETE") != 0)
		return http_respond_error(c, 405, "Allow: POST, DELETE\r\n", ka, BC_INVALID_INPUT,
					  NULL, "method %s not allowed: POST a JSON-RPC message",
					  req->method);
	if (!sid)
		return http_respond_error(c, 400, "", ka, BC_INVALID_INPUT, "Mcp-Session-Id",
					  "Mcp-Session-Id required");
	credential(req, cred);
	if (session_use(m, sid, cred, true) < 0)
		return http_respond_error(c, 404, "", ka, BC_NOT_FOUND, "Mcp-Session-Id",
					  "no such MCP session");
	return http_respond(c, 200, "", "{}", ka);
}
