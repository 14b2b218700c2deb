/* rpc_http.c: the JSON/HTTP transport beside the gRPC port (docs/http.md):
 * routing and answering requests; their connections are rpc_http_conn.c's.
 *
 * POST /api/<group>/<service>/<method> with a proto3 JSON body runs the
 * same unary handler as the gRPC method "/<package>.<Service>/<Method>",
 * through the same rpc_call structure, pre_call and arena: the route table
 * is built from the registered service descriptors, the body is parsed by
 * pbjson into the method's input descriptor and the reply written from its
 * output descriptor. No per-method code.
 *
 * A connection thread (rpc_http_conn.c) reads one whole request and calls
 * http_serve_one, which routes it, refuses it or hands the call to the
 * worker queue and writes the answer. `workers` worker threads own the
 * per-thread state (thread_init, a database connection in the controller)
 * and run pre_call and handlers, so connection threads never hold a worker
 * or its database connection. A server stream runs its handler on its
 * connection thread once a worker admitted it, writing newline-delimited
 * JSON (the transport's rpc_transport_ops). A GET under a WebSocket route
 * goes to rpc_http_ws.c instead. */
#include "rpc_http_conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pbjson.h"
#include "util.h"

#define HTTP_DEFAULT_TIMEOUT_MS 30000
#define HTTP_MAX_TIMEOUT_MS 3600000
#define HTTP_ROUTE_MAX 192

struct http_route {
	char lower[HTTP_ROUTE_MAX], exact[HTTP_ROUTE_MAX];
	const struct rpc_method *m;
};

/* A request handed from a connection to a worker, and its answer. */
struct http_job {
	struct http_link link;       /* in h->jobs */
	const struct rpc_method *m;
	const struct rpc_http_request *req;
	const char *peer;
	const char *body;
	size_t body_len;
	int64_t deadline_ms;
	int status;                  /* out */
	char *resp;                  /* out, malloc'd JSON */
	bool done;
	/* set: run fn(arg, thread state) on the worker instead */
	void (*fn)(void *arg, void *thread_state);
	void *arg;
	/* set: authenticate and admit this stream on the worker instead */
	rpc_call *admit;
	bc_error *admit_err;
	int admit_rc;                /* out */
};

/* See rpc_http_conn.h: routes for every method of an exposed package
 * (compute, admin). */
void http_routes_build(struct rpc_http *h)
{
	const rpc_server *s = h->srv;

	h->routes = xcalloc(s->n_methods ? s->n_methods : 1, sizeof(*h->routes));
	for (size_t i = 0; i < s->n_methods; i++) {
		struct http_route *r = &h->routes[h->n_routes];

		if (rpc_http_route(s->methods[i].svc, s->methods[i].md, r->lower, r->exact,
				   sizeof(r->lower)) == 0) {
			r->m = &s->methods[i];
			h->n_routes++;
		}
	}
}

static const struct rpc_method *route_find(const struct rpc_http *h, const char *path)
{
	for (size_t i = 0; i < h->n_routes; i++)
		if (strcmp(h->routes[i].lower, path) == 0 || strcmp(h->routes[i].exact, path) == 0)
			return h->routes[i].m;
	return NULL;
}

/* --------------------------------------------------------- responses */

static const char *status_text(int status)
{
	static const struct { int code; const char *text; } t[] = {
		{100, "Continue"}, {200, "OK"}, {202, "Accepted"}, {301, "Moved Permanently"},
		{304, "Not Modified"}, {400, "Bad Request"}, {401, "Unauthorized"},
		{402, "Payment Required"}, {403, "Forbidden"}, {404, "Not Found"},
		{405, "Method Not Allowed"}, {409, "Conflict"}, {411, "Length Required"},
		{413, "Content Too Large"}, {415, "Unsupported Media Type"},
		{417, "Expectation Failed"}, {426, "Upgrade Required"}, {428, "Precondition Required"},
		{429, "Too Many Requests"}, {431, "Request Header Fields Too Large"},
		{500, "Internal Server Error"}, {501, "Not Implemented"}, {502, "Bad Gateway"},
		{503, "Service Unavailable"}, {504, "Gateway Timeout"},
		{505, "HTTP Version Not Supported"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(t); i++)
		if (t[i].code == status)
			return t[i].text;
	return "Unknown";
}

/* See rpc_http_conn.h. */
int http_respond(struct http_conn *c, int status, const char *extra, const char *json,
		   bool keep_alive)
{
	_cleanup_free_ char *head = xasprintf(
		"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		"Cache-Control: no-store\r\nConnection: %s\r\n%s\r\n",
		status, status_text(status), strlen(json) + 1, keep_alive ? "keep-alive" : "close",
		extra);
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	int r = http_conn_write(c, head, strlen(head), deadline);

	if (r == 0)
		r = http_conn_write(c, json, strlen(json), deadline);
	if (r == 0)
		r = http_conn_write(c, "\n", 1, deadline);
	return r;
}

/* See rpc_http_conn.h. */
int http_respond_error(struct http_conn *c, int status, const char *extra, bool keep_alive,
			 enum bc_code code, const char *field, const char *fmt, ...)
{
	_cleanup_free_ char *json = NULL;
	char msg[512];
	bc_error e;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	bc_error_clear(&e);
	bc_error_set(&e, code, "%s", msg);
	if (field)
		bc_error_detail(&e, "field", "%s", field);
	json = rpc_http_error_json(&e);
	return http_respond(c, status, extra, json, keep_alive);
}

/* --------------------------------------------------------- the call */

/* The request body as a message of m's input: an empty body is an empty
 * message. */
static int body_parse(const struct rpc_method *m, const char *body, size_t body_len,
		      size_t max, ProtobufCMessage **ret, bc_error *err)
{
	const ProtobufCMessageDescriptor *d = m->md->input;
	size_t skip = 0;
	int r;

	while (skip < body_len && strchr(" \t\r\n", body[skip]) && body[skip])
		skip++;
	if (skip == body_len) {
		*ret = protobuf_c_message_unpack(d, NULL, 0, (const uint8_t *)"");
		return *ret ? 0 : bc_error_set(err, BC_INTERNAL, "internal error");
	}
	r = pbjson_read(d, body, body_len, max, ret, err);
	if (r < 0 && r != -BC_EDOMAIN)
		return bc_error_set(err, BC_INVALID_INPUT, "malformed JSON request");
	return r;
}

/* See rpc_http_conn.h. */
void http_call_metadata(rpc_call *c, const struct rpc_http_request *req)
{
	const char **k = rpc_alloc(c, (req->n_headers + 1) * sizeof(char *));
	const char **v = rpc_alloc(c, (req->n_headers + 1) * sizeof(char *));

	for (size_t i = 0; i < req->n_headers; i++) {
		k[i] = rpc_strdup(c, req->headers[i].name);
		v[i] = rpc_strdup(c, req->headers[i].value);
	}
	rpc_call_set_metadata(c, req->n_headers, k, v);
}

/* On a worker: pre_call, parse, the handler, the JSON answer. */
static void job_run(struct rpc_http *h, struct http_job *j, void *thread_state)
{
	rpc_server *s = h->srv;
	rpc_call *c = rpc_call_alloc(s, &rpc_http_ops, thread_state);
	ProtobufCMessage *req = NULL, *resp = NULL;
	bc_error err;
	int r;

	c->method = j->m;
	c->path = j->m->path;
	c->peer = rpc_strdup(c, j->peer);
	c->deadline_ms = j->deadline_ms;
	http_call_metadata(c, j->req);
	bc_error_clear(&err);
	r = rpc_call_pre(c, &err);
	if (r >= 0)
		r = body_parse(j->m, j->body, j->body_len, s->opts.max_message_bytes, &req, &err);
	if (r >= 0)
		r = rpc_call_invoke_unary(c, req, &resp, &err);
	if (r >= 0 && mono_ms() > j->deadline_ms)
		r = bc_error_set(&err, BC_DEADLINE_EXCEEDED, "deadline exceeded");
	if (r >= 0 && pbjson_write(resp, PBJSON_EMIT_DEFAULTS, &j->resp) < 0)
		r = bc_error_set(&err, BC_INTERNAL, "internal error");
	if (r < 0) {
		j->status = bc_code_http_status(err.code);
		j->resp = rpc_http_error_json(&err);
	} else {
		j->status = 200;
	}
	log_debug("rpc: http %s from %s: %d", c->path, c->peer, j->status);
	if (req)
		protobuf_c_message_free_unpacked(req, NULL);
	rpc_call_release(c);
}

/* See rpc_http_conn.h. */
void *http_worker_main(void *arg)
{
	struct rpc_http *h = arg;
	const struct rpc_server_opts *o = &h->srv->opts;
	void *ts = o->thread_init ? o->thread_init(o->user) : NULL;
	struct http_link *l;

	pthread_mutex_lock(&h->lock);
	while ((l = http_fifo_wait(&h->jobs, &h->lock, &h->work, &h->workers_stop, NULL))) {
		struct http_job *j = http_of(l, struct http_job, link);

		pthread_mutex_unlock(&h->lock);
		if (j->fn) {
			j->fn(j->arg, ts);
		} else if (j->admit) {
			j->admit->thread_state = ts;
			j->admit_rc = rpc_call_stream_admit(j->admit, j->admit_err);
			j->admit->thread_state = NULL;
		} else {
			job_run(h, j, ts);
		}
		pthread_mutex_lock(&h->lock);
		j->done = true;
		pthread_cond_broadcast(&h->done);
	}
	pthread_mutex_unlock(&h->lock);
	if (o->thread_fini)
		o->thread_fini(o->user, ts);
	return NULL;
}

/* Queue j for a worker and wait for its answer. */
static void job_submit(struct rpc_http *h, struct http_job *j)
{
	pthread_mutex_lock(&h->lock);
	http_fifo_push(&h->jobs, &j->link);
	pthread_cond_signal(&h->work);
	while (!j->done)
		pthread_cond_wait(&h->done, &h->lock);
	pthread_mutex_unlock(&h->lock);
}

/* See rpc_http_conn.h. */
void http_run_on_worker(struct rpc_http *h, void (*fn)(void *arg, void *thread_state),
			void *arg)
{
	struct http_job j = {.fn = fn, .arg = arg};

	job_submit(h, &j);
}

/* ------------------------------------------------------ server streams */

#define STREAM_HEAD "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n" \
	"Cache-Control: no-store\r\nConnection: close\r\n"

/* Write one line of the stream body (a chunk on HTTP/1.1). */
static int stream_write(struct http_conn *c, bool chunked, const char *line)
{
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	size_t n = strlen(line);
	char size[32];
	int r = 0;

	if (chunked) {
		snprintf(size, sizeof(size), "%zx\r\n", n + 1);
		r = http_conn_write(c, size, strlen(size), deadline);
	}
	if (r == 0)
		r = http_conn_write(c, line, n, deadline);
	if (r == 0)
		r = http_conn_write(c, chunked ? "\n\r\n" : "\n", chunked ? 3 : 1, deadline);
	return r;
}

static int stream_head(rpc_call *call)
{
	struct http_conn *c = call->http_conn;
	const char *head = call->http_chunked ? STREAM_HEAD "Transfer-Encoding: chunked\r\n\r\n"
					      : STREAM_HEAD "\r\n";

	if (call->http_head_sent)
		return 0;
	call->http_head_sent = true;
	if (http_conn_write(c, head, strlen(head), mono_ms() + HTTP_IO_TIMEOUT_MS) < 0) {
		call->http_gone = true;
		return -ECANCELED;
	}
	return 0;
}

/* True when the stream must end: the client went away, the deadline
 * passed, or the server stops. */
static bool stream_over(rpc_call *call)
{
	struct http_conn *c = call->http_conn;

	if (!call->http_deadline_hit && mono_ms() >= call->deadline_ms)
		call->http_deadline_hit = true;
	return call->http_gone || call->http_deadline_hit || atomic_load(&c->h->stopping) ||
	       rpc_server_stopping(call->srv);
}

/* The HTTP transport's send: one message as one line of newline-delimited
 * JSON, flushed; 0, -EINVAL (a unary call: no stream), -ECANCELED (client
 * gone, deadline passed, server stopping), -EIO. */
static int http_send(rpc_call *call, const ProtobufCMessage *msg)
{
	_cleanup_free_ char *json = NULL;

	if (!call->http_conn)
		return -EINVAL;
	if (stream_over(call) || stream_head(call) < 0)
		return -ECANCELED;
	if (pbjson_write(msg, PBJSON_EMIT_DEFAULTS, &json) < 0)
		return -EIO;
	if (stream_write(call->http_conn, call->http_chunked, json) < 0) {
		call->http_gone = true;
		return -ECANCELED;
	}
	return 0;
}

/* The HTTP transport's wait: true once the client went away, the deadline
 * passed or the server stops (a unary call: at once); waits up to
 * timeout_ms (< 0: no limit). Sends the response head first, so a client
 * sees 200 as soon as a handler waits. The client sends nothing while it
 * reads a stream: anything readable on the socket (its close, a reset, a
 * TLS alert) means it is gone. */
static bool http_wait_cancelled(rpc_call *call, int timeout_ms)
{
	struct http_conn *c = call->http_conn;
	int64_t end = timeout_ms < 0 ? INT64_MAX : mono_ms() + timeout_ms;

	if (!c)
		return true;
	if (stream_over(call) || stream_head(call) < 0)
		return true;
	for (;;) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
		int64_t now = mono_ms(), left = end < call->deadline_ms ? end : call->deadline_ms;
		int wait = left - now < HTTP_TICK_MS ? (int)(left - now) : HTTP_TICK_MS;

		if (poll(&p, 1, wait < 0 ? 0 : wait) > 0 && p.revents) {
			call->http_gone = true;
			return true;
		}
		if (stream_over(call))
			return true;
		if (mono_ms() >= end)
			return false;
	}
}

/* An HTTP call never receives a message after its body. */
static int http_recv(rpc_call *call, ProtobufCMessage **ret, int timeout_ms)
{
	return -EINVAL;
}

/* An HTTP call holds nothing of its transport: its connection is the
 * connection thread's. */
static void http_release(rpc_call *call)
{
}

/* The JSON/HTTP transport: see rpc_internal.h. */
const struct rpc_transport_ops rpc_http_ops = {
	.name = "http",
	.send = http_send,
	.recv = http_recv,
	.wait_cancelled = http_wait_cancelled,
	.release = http_release,
	.can_detach = false,
};

/* See rpc_http_conn.h. */
bool http_stream_slot(struct rpc_http *h, int delta)
{
	bool ok = true;

	pthread_mutex_lock(&h->lock);
	if (delta > 0 && h->n_streams >= h->srv->opts.max_streams)
		ok = false;
	else
		h->n_streams += delta;
	pthread_mutex_unlock(&h->lock);
	return ok;
}

/* End a stream: an error before the head is an ordinary error response;
 * after it, a last line {"error": {...}}; then the body's end. */
static int stream_end(struct http_conn *c, rpc_call *call, int r, bc_error *err, bool ka)
{
	_cleanup_free_ char *json = NULL;

	if (r < 0 && err->code == BC_OK)
		bc_error_set(err, BC_INTERNAL, "internal error");
	if (r < 0 && !call->http_head_sent) {
		json = rpc_http_error_json(err);
		return http_respond(c, bc_code_http_status(err->code), "", json, ka) < 0 ? -1 : 1;
	}
	if (call->http_gone || stream_head(call) < 0)
		return -1;
	if (r < 0) {
		json = rpc_http_error_json(err);
		if (stream_write(c, call->http_chunked, json) < 0)
			return -1;
	}
	if (call->http_chunked)
		http_conn_write(c, "0\r\n\r\n", 5, mono_ms() + HTTP_IO_TIMEOUT_MS);
	return -1; /* Connection: close */
}

/* See rpc_http_conn.h. */
int http_stream_admit(struct rpc_http *h, rpc_call *call, bc_error *err)
{
	struct http_job j = {.admit = call, .admit_err = err};

	job_submit(h, &j);
	return j.admit_rc;
}

/* Run a server-streaming method on this connection's thread once a worker
 * authenticated and admitted it; the stream has no thread state of its own
 * (its handler borrows one while it reads: rpc_call_set_thread).
 * deadline_ms: INT64_MAX without x-timeout-ms. */
static int serve_stream(struct http_conn *c, const struct rpc_method *m,
			const struct rpc_http_request *req, const char *body, int64_t deadline_ms)
{
	struct rpc_http *h = c->h;
	rpc_server *s = h->srv;
	const struct rpc_server_opts *o = &s->opts;
	ProtobufCMessage *msg = NULL;
	rpc_call *call;
	bc_error err;
	int r;

	if (!http_stream_slot(h, 1))
		return http_respond_error(c, bc_code_http_status(BC_QUOTA_EXCEEDED), "",
				     req->keep_alive, BC_QUOTA_EXCEEDED, NULL,
				     "too many streams") < 0 ? -1 : 1;
	call = rpc_call_alloc(s, &rpc_http_ops, NULL);
	call->method = m;
	call->path = m->path;
	call->peer = rpc_strdup(call, c->peer);
	call->deadline_ms = deadline_ms;
	call->http_conn = c;
	call->http_chunked = req->minor >= 1;
	http_call_metadata(call, req);
	bc_error_clear(&err);
	r = http_stream_admit(h, call, &err);
	if (r >= 0)
		r = body_parse(m, body, req->content_length, o->max_message_bytes, &msg, &err);
	if (r >= 0)
		r = m->h.fn.sstream(call, msg, &err) < 0 ? -BC_EDOMAIN : 0;
	if (r >= 0 && call->http_deadline_hit)
		r = bc_error_set(&err, BC_DEADLINE_EXCEEDED, "deadline exceeded");
	log_debug("rpc: http stream %s from %s ended: %s", call->path, call->peer,
		  r < 0 ? bc_code_name(err.code) : "OK");
	r = stream_end(c, call, r, &err, req->keep_alive && !atomic_load(&h->stopping));
	if (msg)
		protobuf_c_message_free_unpacked(msg, NULL);
	rpc_call_release(call);
	http_stream_slot(h, -1);
	return r;
}

/* ------------------------------------------------------- requests */

/* x-timeout-ms: 1..HTTP_MAX_TIMEOUT_MS; absent: the default. */
static int parse_timeout(const char *v, int64_t *ret_ms)
{
	char *end;
	long long ms;

	if (!v) {
		*ret_ms = HTTP_DEFAULT_TIMEOUT_MS;
		return 0;
	}
	errno = 0;
	ms = strtoll(v, &end, 10);
	if (errno || end == v || *end || ms < 1 || ms > HTTP_MAX_TIMEOUT_MS)
		return -EINVAL;
	*ret_ms = ms;
	return 0;
}

static int serve_health(struct http_conn *c, const struct rpc_http_request *req)
{
	bool stopping = atomic_load(&c->h->stopping);

	if (strcmp(req->method, "GET") != 0)
		return http_respond_error(c, 405, "Allow: GET\r\n", req->keep_alive, BC_INVALID_INPUT,
				     NULL, "method %s not allowed: use GET", req->method);
	return http_respond(c, stopping ? 503 : 200, "",
		       stopping ? "{\"status\":\"NOT_SERVING\"}" : "{\"status\":\"SERVING\"}",
		       req->keep_alive);
}

/* Route and run one complete request (head parsed, body in c->buf). */
static int serve_request(struct http_conn *c, const struct rpc_http_request *req,
			 const char *body)
{
	struct rpc_http *h = c->h;
	const struct rpc_method *m;
	struct http_job j = {0};
	int64_t timeout_ms;
	bool ka = req->keep_alive;
	int r;

	if (strcmp(req->target, "/healthz") == 0)
		return serve_health(c, req);
	if (http_mcp_wants(h, req))
		return http_mcp_serve(c, req, body);
	if (http_static_wants(h, req))
		return http_static_serve(c, req);
	m = route_find(h, req->target);
	if (!m)
		return http_respond_error(c, 404, "", ka, BC_NOT_FOUND, NULL, "no such method: %.200s",
				     req->target);
	if (strcmp(req->method, "POST") != 0)
		return http_respond_error(c, 405, "Allow: POST\r\n", ka, BC_INVALID_INPUT, NULL,
				     "method %s not allowed: use POST", req->method);
	if (!m->has_handler)
		return http_respond_error(c, 501, "", ka, BC_UNSUPPORTED, NULL, "method not implemented");
	if (m->h.kind == RPC_BIDI)
		return http_respond_error(c, 501, "", ka, BC_UNSUPPORTED, NULL,
				     "bidirectional streams are not served over JSON/HTTP: use gRPC");
	if (req->content_length && !rpc_http_is_json(rpc_http_header(req, "content-type")))
		return http_respond_error(c, 415, "", ka, BC_INVALID_INPUT, "Content-Type",
				     "Content-Type must be application/json");
	if (parse_timeout(rpc_http_header(req, "x-timeout-ms"), &timeout_ms) < 0)
		return http_respond_error(c, 400, "", ka, BC_INVALID_INPUT, "x-timeout-ms",
				     "x-timeout-ms must be an integer in [1, %d]",
				     HTTP_MAX_TIMEOUT_MS);
	if (m->h.kind == RPC_SERVER_STREAM)
		return serve_stream(c, m, req, body, rpc_http_header(req, "x-timeout-ms") ?
				    mono_ms() + timeout_ms : INT64_MAX);
	j.m = m;
	j.req = req;
	j.peer = c->peer;
	j.body = body;
	j.body_len = req->content_length;
	j.deadline_ms = mono_ms() + timeout_ms;
	job_submit(h, &j);
	r = http_respond(c, j.status, "", j.resp, ka && !atomic_load(&h->stopping));
	free(j.resp);
	return r;
}

/* See rpc_http_conn.h. */
int http_serve_one(struct http_conn *c)
{
	struct rpc_http_request req;
	size_t head = 0, max = c->h->srv->opts.max_message_bytes;
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	_cleanup_free_ char *copy = NULL;
	const char *why = NULL;
	int status;

	while (!(head = rpc_http_head_len(c->buf, c->len < RPC_HTTP_MAX_HEAD ? c->len
									 : RPC_HTTP_MAX_HEAD))) {
		if (c->len >= RPC_HTTP_MAX_HEAD) {
			http_respond_error(c, 431, "", false, BC_INVALID_INPUT, NULL,
				      "request head larger than %d bytes", RPC_HTTP_MAX_HEAD);
			return -1;
		}
		if (http_conn_fill(c, c->len + 1, deadline) < 0)
			return 0;
	}
	copy = xmalloc(head + 1);
	memcpy(copy, c->buf, head);
	copy[head] = '\0';
	status = rpc_http_parse_head(copy, head, &req, &why);
	if (status == 0 && !req.has_length && strcmp(req.method, "POST") == 0) {
		status = 411;
		why = "Content-Length required";
	}
	if (status) {
		http_respond_error(c, status, "", false, BC_INVALID_INPUT, NULL, "%s", why);
		return -1;
	}
	if (req.content_length > max) {
		bc_error e;
		_cleanup_free_ char *json = NULL;

		bc_error_clear(&e);
		bc_error_set(&e, BC_INVALID_INPUT, "request larger than %zu bytes", max);
		bc_error_detail(&e, "maxBytes", "%zu", max);
		json = rpc_http_error_json(&e);
		http_respond(c, 413, "", json, false);
		return -1;
	}
	if (req.expect_continue && c->len - head < req.content_length &&
	    http_conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, deadline) < 0)
		return 0;
	if (http_conn_fill(c, head + req.content_length, deadline) < 0)
		return 0;
	if (http_ws_wants(c->h, &req)) {
		/* what came after the head is the start of the frames */
		c->len -= head + req.content_length;
		memmove(c->buf, c->buf + head + req.content_length, c->len);
		return http_ws_serve(c, &req);
	}
	if (serve_request(c, &req, c->buf + head) < 0)
		return 0;
	c->len -= head + req.content_length;
	memmove(c->buf, c->buf + head + req.content_length, c->len);
	return req.keep_alive && !atomic_load(&c->h->stopping);
}
