/* rpc_http.c: the JSON/HTTP transport beside the gRPC port (docs/http.md).
 *
 * POST /api/<group>/<service>/<method> with a proto3 JSON body runs the
 * same unary handler as the gRPC method "/<package>.<Service>/<Method>",
 * through the same rpc_call structure, pre_call and arena: the route table
 * is built from the registered service descriptors, the body is parsed by
 * pbjson into the method's input descriptor and the reply written from its
 * output descriptor. No per-method code.
 *
 * Threads. One accept thread; one thread per connection (at most
 * HTTP_MAX_CONNS; beyond that new connections wait in the listen backlog)
 * doing TLS, reading requests under a deadline and writing responses; and
 * `workers` worker threads that own the per-thread state (thread_init, a
 * database connection in the controller) and run pre_call and handlers. A
 * connection thread hands each parsed request to the worker queue and waits
 * for its answer, so slow or idle clients only ever hold a connection
 * thread, never a worker or its database connection.
 *
 * Shutdown: stop accepting; connections between requests or still reading
 * one close within a poll tick; a request already handed to a worker is
 * answered (Connection: close); then the workers stop. */
#include "rpc_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "pbjson.h"
#include "util.h"

#define HTTP_MAX_CONNS 512
#define HTTP_IO_TIMEOUT_MS 30000     /* a whole request, or idle keep-alive */
#define HTTP_TICK_MS 200             /* how often blocked reads check shutdown */
#define HTTP_DEFAULT_TIMEOUT_MS 30000
#define HTTP_MAX_TIMEOUT_MS 3600000
#define HTTP_LINGER_MS 1000
#define HTTP_ROUTE_MAX 192

struct http_route {
	char lower[HTTP_ROUTE_MAX], exact[HTTP_ROUTE_MAX];
	const struct rpc_method *m;
};

/* A request handed from a connection to a worker, and its answer. */
struct http_job {
	struct http_job *next;
	const struct rpc_method *m;
	const struct rpc_http_request *req;
	const char *peer;
	const char *body;
	size_t body_len;
	int64_t deadline_ms;
	int status;                  /* out */
	char *resp;                  /* out, malloc'd JSON */
	bool done;
	/* set: authenticate and admit this stream on the worker instead */
	rpc_call *admit;
	bc_error *admit_err;
	int admit_rc;                /* out */
};

struct http_conn {
	struct http_conn *next;
	struct rpc_http *h;
	pthread_t tid;
	int fd;
	SSL *ssl;
	char peer[96];
	char head[RPC_HTTP_MAX_HEAD + 1];
	char *buf;                   /* bytes read, not yet consumed */
	size_t len, cap;
	bool done;
};

struct rpc_http {
	rpc_server *srv;
	int lfd, port;
	int wake[2];                 /* a byte here stops the accept thread */
	SSL_CTX *ctx;                /* NULL: plain HTTP (tests) */
	struct http_route *routes;
	size_t n_routes;

	pthread_t accept_tid;
	pthread_t *workers;
	int n_workers;
	bool started;
	atomic_bool stopping;

	pthread_mutex_t lock;        /* everything below */
	pthread_cond_t work;         /* a job queued, or workers_stop */
	pthread_cond_t done;         /* a job answered */
	pthread_cond_t room;         /* a connection ended, or stopping */
	struct http_job *jobs, **jobs_tail;
	struct http_conn *conns;
	int n_conns;
	int n_streams;               /* server streams being served */
	bool workers_stop;
};

/* ------------------------------------------------------------ setup */

/* "host:port", "[v6]:port", ":port" into host (NULL: any) and port. */
static int split_listen(const char *addr, char *host, size_t hlen, const char **ret_port)
{
	const char *colon = strrchr(addr, ':'), *h = addr;
	size_t n;

	if (!colon || !colon[1] || strncmp(addr, "unix:", 5) == 0)
		return -EINVAL;
	n = (size_t)(colon - addr);
	if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
		h++;
		n -= 2;
	}
	if (n >= hlen)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	*ret_port = colon + 1;
	return 0;
}

static int bind_listen(struct rpc_http *h, const char *addr)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const char *port;
	char host[256];
	int fd = -1, one = 1, r;

	if ((r = split_listen(addr, host, sizeof(host), &port)) < 0)
		return r;
	if (getaddrinfo(*host ? host : NULL, port, &hints, &ai) != 0 || !ai)
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		r = -EADDRINUSE;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	h->lfd = fd;
	h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	return 0;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char http11[] = "\x08http/1.1";
	unsigned char *sel = NULL;

	if (SSL_select_next_proto(&sel, outlen, http11, sizeof(http11) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

/* The certificate chain (first the leaf) and key from PEM strings. */
static int ctx_load(SSL_CTX *ctx, const char *cert_pem, const char *key_pem)
{
	BIO *b = BIO_new_mem_buf(cert_pem, -1), *k = BIO_new_mem_buf(key_pem, -1);
	X509 *x = b ? PEM_read_bio_X509_AUX(b, NULL, NULL, NULL) : NULL;
	EVP_PKEY *pk = k ? PEM_read_bio_PrivateKey(k, NULL, NULL, NULL) : NULL;
	int ok = x && pk && SSL_CTX_use_certificate(ctx, x) == 1 &&
		 SSL_CTX_use_PrivateKey(ctx, pk) == 1;

	while (ok && (X509_free(x), x = PEM_read_bio_X509(b, NULL, NULL, NULL)))
		if (SSL_CTX_add0_chain_cert(ctx, x) != 1)
			ok = 0;
		else
			x = NULL;
	ok = ok && SSL_CTX_check_private_key(ctx) == 1;
	X509_free(x);
	EVP_PKEY_free(pk);
	BIO_free(b);
	BIO_free(k);
	ERR_clear_error();
	return ok ? 0 : -EIO;
}

static int tls_setup(struct rpc_http *h)
{
	const rpc_server *s = h->srv;

	if (!s->tls)
		return 0;
	h->ctx = SSL_CTX_new(TLS_server_method());
	if (!h->ctx)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(h->ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(h->ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_alpn_select_cb(h->ctx, alpn_select, NULL);
	return ctx_load(h->ctx, s->cert_pem, s->key_pem);
}

/* Routes for every method of an exposed package (compute, admin). */
static void routes_build(struct rpc_http *h)
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

/* See rpc_internal.h. */
int rpc_http_new(rpc_server *s, struct rpc_http **ret)
{
	struct rpc_http *h = xcalloc(1, sizeof(*h));
	int r;

	h->srv = s;
	h->lfd = h->wake[0] = h->wake[1] = -1;
	h->jobs_tail = &h->jobs;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->work, NULL);
	pthread_cond_init(&h->done, NULL);
	pthread_cond_init(&h->room, NULL);
	r = tls_setup(h);
	if (r == 0 && pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) < 0)
		r = -errno;
	if (r == 0)
		r = bind_listen(h, s->http_listen);
	if (r < 0) {
		rpc_http_free(h);
		return r;
	}
	routes_build(h);
	*ret = h;
	return 0;
}

/* See rpc_internal.h. */
int rpc_http_port(const struct rpc_http *h)
{
	return h->port;
}

/* -------------------------------------------------------------- I/O */

/* Wait for ev on c's socket until deadline; reads (abort_on_stop) give up
 * once the server stops. 0, -ETIMEDOUT, -ECANCELED. */
static int io_wait(struct http_conn *c, short ev, int64_t deadline, bool abort_on_stop)
{
	struct pollfd p = {.fd = c->fd, .events = ev};

	for (;;) {
		int64_t left = deadline - mono_ms();

		if (abort_on_stop && atomic_load(&c->h->stopping))
			return -ECANCELED;
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, left < HTTP_TICK_MS ? (int)left : HTTP_TICK_MS) > 0)
			return 0;
	}
}

/* After an SSL call failed with e: wait as OpenSSL asks, or an error. */
static int ssl_retry(struct http_conn *c, int e, int64_t deadline, bool abort_on_stop)
{
	switch (SSL_get_error(c->ssl, e)) {
	case SSL_ERROR_WANT_READ:
		return io_wait(c, POLLIN, deadline, abort_on_stop);
	case SSL_ERROR_WANT_WRITE:
		return io_wait(c, POLLOUT, deadline, abort_on_stop);
	case SSL_ERROR_ZERO_RETURN:
		return -EPIPE;
	default:
		return -EIO;
	}
}

/* Read what is available into buf: >0 bytes, 0 at EOF, <0 on error. */
static ssize_t conn_read(struct http_conn *c, char *buf, size_t n, int64_t deadline)
{
	for (;;) {
		ssize_t got;
		int r;

		if (c->ssl) {
			size_t k = 0;

			ERR_clear_error();
			r = SSL_read_ex(c->ssl, buf, n, &k);
			if (r == 1)
				return (ssize_t)k;
			r = ssl_retry(c, r, deadline, true);
			if (r == -EPIPE)
				return 0;
		} else {
			got = recv(c->fd, buf, n, 0);
			if (got >= 0)
				return got;
			r = errno == EAGAIN || errno == EINTR ? io_wait(c, POLLIN, deadline, true)
							      : -errno;
		}
		if (r < 0)
			return r;
	}
}

static int conn_write(struct http_conn *c, const char *p, size_t n, int64_t deadline)
{
	while (n) {
		size_t k = 0;
		ssize_t w;
		int r;

		if (c->ssl) {
			ERR_clear_error();
			r = SSL_write_ex(c->ssl, p, n, &k);
			if (r != 1 && (r = ssl_retry(c, r, deadline, false)) < 0)
				return r;
		} else {
			w = send(c->fd, p, n, MSG_NOSIGNAL);
			if (w >= 0)
				k = (size_t)w;
			else if (errno != EAGAIN && errno != EINTR)
				return -errno;
			else if ((r = io_wait(c, POLLOUT, deadline, false)) < 0)
				return r;
		}
		p += k;
		n -= k;
	}
	return 0;
}

static int conn_handshake(struct http_conn *c)
{
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	int r;

	c->ssl = SSL_new(c->h->ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
		return -ENOMEM;
	for (;;) {
		ERR_clear_error();
		r = SSL_accept(c->ssl);
		if (r == 1)
			return 0;
		if ((r = ssl_retry(c, r, deadline, true)) < 0)
			return r;
	}
}

/* Make room for n more bytes in c->buf. */
static void buf_reserve(struct http_conn *c, size_t n)
{
	if (c->cap - c->len >= n)
		return;
	c->cap = c->len + n;
	c->buf = realloc(c->buf, c->cap);
	if (!c->buf)
		abort();
}

/* Read until c->buf holds want bytes: 0, or <0 (EOF is -EPIPE). */
static int fill(struct http_conn *c, size_t want, int64_t deadline)
{
	while (c->len < want) {
		ssize_t n;

		buf_reserve(c, want - c->len < 16384 ? 16384 : want - c->len);
		n = conn_read(c, c->buf + c->len, c->cap - c->len, deadline);
		if (n <= 0)
			return n == 0 ? -EPIPE : (int)n;
		c->len += (size_t)n;
	}
	return 0;
}

/* --------------------------------------------------------- responses */

static const char *status_text(int status)
{
	static const struct { int code; const char *text; } t[] = {
		{100, "Continue"}, {200, "OK"}, {400, "Bad Request"}, {401, "Unauthorized"},
		{402, "Payment Required"}, {403, "Forbidden"}, {404, "Not Found"},
		{405, "Method Not Allowed"}, {409, "Conflict"}, {411, "Length Required"},
		{413, "Content Too Large"}, {415, "Unsupported Media Type"},
		{417, "Expectation Failed"}, {428, "Precondition Required"},
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

/* Write one response; extra is more header lines ("" or "Allow: POST\r\n"). */
static int respond(struct http_conn *c, int status, const char *extra, const char *json,
		   bool keep_alive)
{
	_cleanup_free_ char *head = xasprintf(
		"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		"Cache-Control: no-store\r\nConnection: %s\r\n%s\r\n",
		status, status_text(status), strlen(json) + 1, keep_alive ? "keep-alive" : "close",
		extra);
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	int r = conn_write(c, head, strlen(head), deadline);

	if (r == 0)
		r = conn_write(c, json, strlen(json), deadline);
	if (r == 0)
		r = conn_write(c, "\n", 1, deadline);
	return r;
}

/* A transport-level refusal: the JSON error body with an explicit status. */
static int respond_error(struct http_conn *c, int status, const char *extra, bool keep_alive,
			 enum bc_code code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

static int respond_error(struct http_conn *c, int status, const char *extra, bool keep_alive,
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
	return respond(c, status, extra, json, keep_alive);
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

/* The request headers as call metadata (lowercase keys), in the arena. */
static void job_metadata(rpc_call *c, const struct rpc_http_request *req)
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
	rpc_call *c = rpc_call_alloc(s, RPC_TRANSPORT_HTTP, thread_state);
	ProtobufCMessage *req = NULL, *resp = NULL;
	bc_error err;
	int r;

	c->method = j->m;
	c->path = j->m->path;
	c->peer = rpc_strdup(c, j->peer);
	c->deadline_ms = j->deadline_ms;
	job_metadata(c, j->req);
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

static void *worker_main(void *arg)
{
	struct rpc_http *h = arg;
	const struct rpc_server_opts *o = &h->srv->opts;
	void *ts = o->thread_init ? o->thread_init(o->user) : NULL;
	struct http_job *j;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->jobs && !h->workers_stop)
			pthread_cond_wait(&h->work, &h->lock);
		if (!h->jobs)
			break;
		j = h->jobs;
		h->jobs = j->next;
		if (!h->jobs)
			h->jobs_tail = &h->jobs;
		pthread_mutex_unlock(&h->lock);
		if (j->admit) {
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
	*h->jobs_tail = j;
	h->jobs_tail = &j->next;
	pthread_cond_signal(&h->work);
	while (!j->done)
		pthread_cond_wait(&h->done, &h->lock);
	pthread_mutex_unlock(&h->lock);
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
		r = conn_write(c, size, strlen(size), deadline);
	}
	if (r == 0)
		r = conn_write(c, line, n, deadline);
	if (r == 0)
		r = conn_write(c, chunked ? "\n\r\n" : "\n", chunked ? 3 : 1, deadline);
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
	if (conn_write(c, head, strlen(head), mono_ms() + HTTP_IO_TIMEOUT_MS) < 0) {
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

/* See rpc_internal.h. */
int rpc_http_stream_send(rpc_call *call, const ProtobufCMessage *msg)
{
	_cleanup_free_ char *json = NULL;

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

/* See rpc_internal.h. The client sends nothing while it reads a stream:
 * anything readable on the socket (its close, a reset, a TLS alert) means
 * it is gone. */
bool rpc_http_stream_wait_cancelled(rpc_call *call, int timeout_ms)
{
	struct http_conn *c = call->http_conn;
	int64_t end = timeout_ms < 0 ? INT64_MAX : mono_ms() + timeout_ms;

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

/* Take a stream slot (at most max_streams at once). */
static bool stream_slot(struct rpc_http *h, int delta)
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
		return respond(c, bc_code_http_status(err->code), "", json, ka) < 0 ? -1 : 1;
	}
	if (call->http_gone || stream_head(call) < 0)
		return -1;
	if (r < 0) {
		json = rpc_http_error_json(err);
		if (stream_write(c, call->http_chunked, json) < 0)
			return -1;
	}
	if (call->http_chunked)
		conn_write(c, "0\r\n\r\n", 5, mono_ms() + HTTP_IO_TIMEOUT_MS);
	return -1; /* Connection: close */
}

/* Authenticate and admit a stream on a worker (pre_call needs its thread
 * state: a database connection): 0 or -BC_EDOMAIN with err filled. */
static int stream_admit(struct rpc_http *h, rpc_call *call, bc_error *err)
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

	if (!stream_slot(h, 1))
		return respond_error(c, bc_code_http_status(BC_QUOTA_EXCEEDED), "",
				     req->keep_alive, BC_QUOTA_EXCEEDED, NULL,
				     "too many streams") < 0 ? -1 : 1;
	call = rpc_call_alloc(s, RPC_TRANSPORT_HTTP, NULL);
	call->method = m;
	call->path = m->path;
	call->peer = rpc_strdup(call, c->peer);
	call->deadline_ms = deadline_ms;
	call->http_conn = c;
	call->http_chunked = req->minor >= 1;
	job_metadata(call, req);
	bc_error_clear(&err);
	r = stream_admit(h, call, &err);
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
	stream_slot(h, -1);
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
		return respond_error(c, 405, "Allow: GET\r\n", req->keep_alive, BC_INVALID_INPUT,
				     NULL, "method %s not allowed: use GET", req->method);
	return respond(c, stopping ? 503 : 200, "",
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
	m = route_find(h, req->target);
	if (!m)
		return respond_error(c, 404, "", ka, BC_NOT_FOUND, NULL, "no such method: %.200s",
				     req->target);
	if (strcmp(req->method, "POST") != 0)
		return respond_error(c, 405, "Allow: POST\r\n", ka, BC_INVALID_INPUT, NULL,
				     "method %s not allowed: use POST", req->method);
	if (!m->has_handler)
		return respond_error(c, 501, "", ka, BC_UNSUPPORTED, NULL, "method not implemented");
	if (m->h.kind == RPC_BIDI)
		return respond_error(c, 501, "", ka, BC_UNSUPPORTED, NULL,
				     "bidirectional streams are not served over JSON/HTTP: use gRPC");
	if (req->content_length && !rpc_http_is_json(rpc_http_header(req, "content-type")))
		return respond_error(c, 415, "", ka, BC_INVALID_INPUT, "Content-Type",
				     "Content-Type must be application/json");
	if (parse_timeout(rpc_http_header(req, "x-timeout-ms"), &timeout_ms) < 0)
		return respond_error(c, 400, "", ka, BC_INVALID_INPUT, "x-timeout-ms",
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
	r = respond(c, j.status, "", j.resp, ka && !atomic_load(&h->stopping));
	free(j.resp);
	return r;
}

/* Half-close and discard what the client still sends for a while, so a
 * refusal sent before its body was read is not lost to a reset. */
static void linger_close(struct http_conn *c)
{
	int64_t deadline = mono_ms() + HTTP_LINGER_MS;
	size_t drained = 0;
	char sink[16384];

	if (c->ssl)
		SSL_shutdown(c->ssl);
	shutdown(c->fd, SHUT_WR);
	while (drained < (8u << 20) && io_wait(c, POLLIN, deadline, true) == 0) {
		ssize_t n = recv(c->fd, sink, sizeof(sink), 0);

		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			break;
		if (n > 0)
			drained += (size_t)n;
	}
}

/* Read, answer and consume one request. 1: keep the connection, 0: close
 * it, -1: close it after a refusal sent before the body was read. */
static int conn_one(struct http_conn *c)
{
	struct rpc_http_request req;
	size_t head = 0, max = c->h->srv->opts.max_message_bytes;
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	const char *why = NULL;
	int status;

	while (!(head = rpc_http_head_len(c->buf, c->len < RPC_HTTP_MAX_HEAD ? c->len
									 : RPC_HTTP_MAX_HEAD))) {
		if (c->len >= RPC_HTTP_MAX_HEAD) {
			respond_error(c, 431, "", false, BC_INVALID_INPUT, NULL,
				      "request head larger than %d bytes", RPC_HTTP_MAX_HEAD);
			return -1;
		}
		if (fill(c, c->len + 1, deadline) < 0)
			return 0;
	}
	memcpy(c->head, c->buf, head);
	c->head[head] = '\0';
	status = rpc_http_parse_head(c->head, head, &req, &why);
	if (status == 0 && !req.has_length && strcmp(req.method, "POST") == 0) {
		status = 411;
		why = "Content-Length required";
	}
	if (status) {
		respond_error(c, status, "", false, BC_INVALID_INPUT, NULL, "%s", why);
		return -1;
	}
	if (req.content_length > max) {
		bc_error e;
		_cleanup_free_ char *json = NULL;

		bc_error_clear(&e);
		bc_error_set(&e, BC_INVALID_INPUT, "request larger than %zu bytes", max);
		bc_error_detail(&e, "maxBytes", "%zu", max);
		json = rpc_http_error_json(&e);
		respond(c, 413, "", json, false);
		return -1;
	}
	if (req.expect_continue && c->len - head < req.content_length &&
	    conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, deadline) < 0)
		return 0;
	if (fill(c, head + req.content_length, deadline) < 0)
		return 0;
	if (serve_request(c, &req, c->buf + head) < 0)
		return 0;
	c->len -= head + req.content_length;
	memmove(c->buf, c->buf + head + req.content_length, c->len);
	return req.keep_alive && !atomic_load(&c->h->stopping);
}

static void peer_name(struct http_conn *c, const struct sockaddr_storage *ss)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(c->peer, sizeof(c->peer), "ipv6:[%s]:%u", a, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(c->peer, sizeof(c->peer), "ipv4:%s:%u", a, ntohs(s4->sin_port));
	}
}

static void *conn_main(void *arg)
{
	struct http_conn *c = arg;
	struct rpc_http *h = c->h;
	sigset_t pipe;
	int r = 0;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL); /* OpenSSL writes with write(2) */
	if (!h->ctx || conn_handshake(c) == 0)
		while ((r = conn_one(c)) == 1)
			;
	if (r < 0)
		linger_close(c);
	else if (c->ssl && r == 0)
		SSL_shutdown(c->ssl);
	SSL_free(c->ssl);
	c->ssl = NULL;
	close(c->fd);
	free(c->buf);
	c->buf = NULL;
	pthread_mutex_lock(&h->lock);
	c->done = true;
	h->n_conns--;
	pthread_cond_broadcast(&h->room);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* ------------------------------------------------------- accepting */

/* Detach the finished connections; the caller joins them. */
static struct http_conn *conns_reap_locked(struct rpc_http *h)
{
	struct http_conn **pp = &h->conns, *c, *dead = NULL;

	while ((c = *pp)) {
		if (c->done) {
			*pp = c->next;
			c->next = dead;
			dead = c;
		} else {
			pp = &c->next;
		}
	}
	return dead;
}

static void conns_join(struct http_conn *list)
{
	struct http_conn *next;

	for (; list; list = next) {
		next = list->next;
		pthread_join(list->tid, NULL);
		free(list);
	}
}

static void conn_spawn(struct rpc_http *h, int fd, const struct sockaddr_storage *ss)
{
	struct http_conn *c = xcalloc(1, sizeof(*c));

	c->h = h;
	c->fd = fd;
	peer_name(c, ss);
	pthread_mutex_lock(&h->lock);
	if (pthread_create(&c->tid, NULL, conn_main, c) == 0) {
		c->next = h->conns;
		h->conns = c;
		h->n_conns++;
		c = NULL;
	}
	pthread_mutex_unlock(&h->lock);
	if (c) {
		close(fd);
		free(c);
	}
}

/* Wait for room under HTTP_MAX_CONNS; false once stopping. */
static bool accept_room(struct rpc_http *h)
{
	struct http_conn *dead;
	bool go;

	pthread_mutex_lock(&h->lock);
	while (!atomic_load(&h->stopping) && h->n_conns >= HTTP_MAX_CONNS)
		pthread_cond_wait(&h->room, &h->lock);
	go = !atomic_load(&h->stopping);
	dead = conns_reap_locked(h);
	pthread_mutex_unlock(&h->lock);
	conns_join(dead);
	return go;
}

static void *accept_main(void *arg)
{
	struct rpc_http *h = arg;

	while (accept_room(h)) {
		struct pollfd p[2] = {{.fd = h->lfd, .events = POLLIN},
				      {.fd = h->wake[0], .events = POLLIN}};
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd;

		if (poll(p, 2, -1) < 0 || p[1].revents)
			continue;
		fd = accept4(h->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
				usleep(100 * 1000);
			continue;
		}
		conn_spawn(h, fd, &ss);
	}
	return NULL;
}

/* See rpc_internal.h. */
void rpc_http_start(struct rpc_http *h)
{
	h->n_workers = h->srv->opts.workers;
	h->workers = xcalloc((size_t)h->n_workers, sizeof(*h->workers));
	for (int i = 0; i < h->n_workers; i++)
		if (pthread_create(&h->workers[i], NULL, worker_main, h) != 0)
			abort();
	if (pthread_create(&h->accept_tid, NULL, accept_main, h) != 0)
		abort();
	h->started = true;
}

/* See rpc_internal.h. */
void rpc_http_stop(struct rpc_http *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	atomic_store(&h->stopping, true);
	pthread_cond_broadcast(&h->room);
	pthread_mutex_unlock(&h->lock);
	if (h->wake[1] >= 0 && write(h->wake[1], "x", 1) < 0)
		log_debug("rpc: http wake: %s", strerror(errno));
}

/* See rpc_internal.h. */
void rpc_http_free(struct rpc_http *h)
{
	struct http_conn *all;

	if (!h)
		return;
	rpc_http_stop(h);
	if (h->started) {
		pthread_join(h->accept_tid, NULL);
		pthread_mutex_lock(&h->lock);
		while (h->n_conns > 0)
			pthread_cond_wait(&h->room, &h->lock);
		all = h->conns;
		h->conns = NULL;
		h->workers_stop = true;
		pthread_cond_broadcast(&h->work);
		pthread_mutex_unlock(&h->lock);
		conns_join(all);
		for (int i = 0; i < h->n_workers; i++)
			pthread_join(h->workers[i], NULL);
	}
	if (h->lfd >= 0)
		close(h->lfd);
	if (h->wake[0] >= 0) {
		close(h->wake[0]);
		close(h->wake[1]);
	}
	SSL_CTX_free(h->ctx);
	free(h->workers);
	free(h->routes);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->work);
	pthread_cond_destroy(&h->done);
	pthread_cond_destroy(&h->room);
	free(h);
}
