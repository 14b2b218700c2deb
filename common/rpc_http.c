/* rpc_http.c: the JSON/HTTP transport beside the gRPC port (docs/http.md).
 *
 * POST /api/<group>/<service>/<method> with a proto3 JSON body runs the
 * same unary handler as the gRPC method "/<package>.<Service>/<Method>",
 * through the same rpc_call structure, pre_call and arena: the route table
 * is built from the registered service descriptors, the body is parsed by
 * pbjson into the method's input descriptor and the reply written from its
 * output descriptor. No per-method code.
 *
 * Connections and threads. One event loop thread (epoll) accepts, runs
 * each TLS handshake non-blocking and reads each request, head and body,
 * without a thread per connection: a connection that sends nothing, or
 * sends slowly, only costs its socket and TLS state, and is closed by the
 * handshake, header or idle timeout (rpc_server_opts http_*). New
 * connections beyond the total or per-address cap are closed at once. A
 * whole request is handed to one of at most http_threads connection
 * threads (started on demand; server streams hold theirs without counting
 * against the cap), which writes the 100-continue or refusal if any, hands
 * the call to the worker queue, waits for its answer and writes it; a
 * keep-alive connection then goes back to the loop, never idling on a
 * thread. `workers` worker threads own the per-thread state (thread_init,
 * a database connection in the controller) and run pre_call and handlers,
 * so connection threads never hold a worker or its database connection.
 * Long-lived connections that mostly wait (SSE, WebSockets) are meant to
 * become loop states of their own, not threads.
 *
 * A connection is owned by exactly one of: the loop (in its list and in
 * epoll), the ready queue, a connection thread, the back queue (returning
 * to the loop). h->lock guards the queues and the counters.
 *
 * Shutdown: stop accepting; connections owned by the loop close at once;
 * a request already read is answered (Connection: close); then the
 * workers stop. */
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
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "pbjson.h"
#include "util.h"

#define HTTP_IO_TIMEOUT_MS 30000     /* a request body; a response */
#define HTTP_BACKLOG 1024
#define HTTP_ADDR_BUCKETS 1024
#define HTTP_ACCEPT_BATCH 64
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

/* Where a connection stands while the loop owns it. */
enum conn_state {
	CS_HANDSHAKE,                /* TLS handshake */
	CS_WAIT,                     /* no byte of the next request yet */
	CS_HEAD,                     /* part of a request head */
	CS_BODY,                     /* the head, part of the body (want bytes) */
};

struct http_conn {
	struct http_conn *next, *prev; /* the loop's list, or a queue (next) */
	struct rpc_http *h;
	int fd;
	SSL *ssl;
	char peer[96];
	uint8_t addr[16];            /* the per-address cap's key */
	char *buf;                   /* bytes read, not yet consumed */
	size_t len, cap;
	/* loop only: */
	enum conn_state state;
	int64_t deadline;            /* closed when it passes */
	size_t want;                 /* CS_BODY: head + body length */
	uint32_t events;             /* registered with epoll, 0: not */
};

/* Connections per address (IPv4, or the /64 of IPv6). */
struct addr_count {
	struct addr_count *next;
	uint8_t key[16];
	int n;
};

struct rpc_http {
	rpc_server *srv;
	int lfd, port;
	int wake[2];                 /* a byte here stops the accept thread */
	SSL_CTX *ctx;                /* NULL: plain HTTP (tests) */
	struct http_route *routes;
	size_t n_routes;

	/* limits, from the options or their defaults */
	int max_conns, max_per_addr, max_threads;
	int handshake_ms, header_ms, idle_ms;

	int ep;                      /* epoll: the listener, wake[0], connections */
	pthread_t loop_tid;
	struct http_conn *loop_conns; /* owned by the loop (loop thread only) */
	int64_t last_sweep;
	pthread_t *workers;
	int n_workers;
	bool started;
	atomic_bool stopping;

	pthread_mutex_t lock;        /* everything below */
	pthread_cond_t work;         /* a job queued, or workers_stop */
	pthread_cond_t done;         /* a job answered */
	pthread_cond_t room;         /* a connection ended */
	pthread_cond_t ready_cv;     /* a connection is ready, or threads_stop */
	struct http_job *jobs, **jobs_tail;
	struct http_conn *ready, **ready_tail; /* whole requests for a thread */
	struct http_conn *back;      /* keep-alive connections for the loop */
	int n_ready;
	pthread_t *threads;          /* connection threads */
	int n_threads, n_idle, threads_cap;
	bool threads_stop, loop_done;
	struct addr_count *addrs[HTTP_ADDR_BUCKETS];
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
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, HTTP_BACKLOG) < 0 ||
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
	SSL_CTX_set_mode(h->ctx, SSL_MODE_RELEASE_BUFFERS); /* idle connections */
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

static int opt_or(int v, int def)
{
	return v > 0 ? v : def;
}

static void limits_set(struct rpc_http *h)
{
	const struct rpc_server_opts *o = &h->srv->opts;

	h->max_conns = opt_or(o->http_max_conns, 4096);
	h->max_per_addr = opt_or(o->http_max_conns_per_addr, 128);
	h->max_threads = opt_or(o->http_threads, 256);
	h->handshake_ms = opt_or(o->http_handshake_timeout_ms, 5000);
	h->header_ms = opt_or(o->http_header_timeout_ms, 10000);
	h->idle_ms = opt_or(o->http_idle_timeout_ms, 60000);
}

/* The listener and the wake pipe in a new epoll set. */
static int loop_setup(struct rpc_http *h)
{
	struct epoll_event l = {.events = EPOLLIN, .data.ptr = &h->lfd};
	struct epoll_event w = {.events = EPOLLIN, .data.ptr = h->wake};

	h->ep = epoll_create1(EPOLL_CLOEXEC);
	if (h->ep < 0)
		return -errno;
	if (fcntl(h->lfd, F_SETFL, O_NONBLOCK) < 0 ||
	    epoll_ctl(h->ep, EPOLL_CTL_ADD, h->lfd, &l) < 0 ||
	    epoll_ctl(h->ep, EPOLL_CTL_ADD, h->wake[0], &w) < 0)
		return -errno;
	return 0;
}

/* See rpc_internal.h. */
int rpc_http_new(rpc_server *s, struct rpc_http **ret)
{
	struct rpc_http *h = xcalloc(1, sizeof(*h));
	int r;

	h->srv = s;
	h->lfd = h->wake[0] = h->wake[1] = h->ep = -1;
	h->jobs_tail = &h->jobs;
	h->ready_tail = &h->ready;
	limits_set(h);
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->work, NULL);
	pthread_cond_init(&h->done, NULL);
	pthread_cond_init(&h->room, NULL);
	pthread_cond_init(&h->ready_cv, NULL);
	r = tls_setup(h);
	if (r == 0 && pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) < 0)
		r = -errno;
	if (r == 0)
		r = bind_listen(h, s->http_listen);
	if (r == 0)
		r = loop_setup(h);
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
	rpc_call *c = rpc_call_alloc(s, &rpc_http_ops, thread_state);
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
	call = rpc_call_alloc(s, &rpc_http_ops, NULL);
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
	_cleanup_free_ char *copy = NULL;
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
	copy = xmalloc(head + 1);
	memcpy(copy, c->buf, head);
	copy[head] = '\0';
	status = rpc_http_parse_head(copy, head, &req, &why);
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

/* ------------------------------------------------- per-address counts */

/* The cap's key: an IPv4 address (also when mapped into IPv6) as
 * ::ffff:a.b.c.d, an IPv6 address as its /64 (one host holds a whole /64). */
static void addr_key(const struct sockaddr_storage *ss, uint8_t key[16])
{
	memset(key, 0, 16);
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
			memcpy(key, s6->sin6_addr.s6_addr, 16);
		else
			memcpy(key, s6->sin6_addr.s6_addr, 8);
	} else if (ss->ss_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	}
}

static struct addr_count **addr_slot_locked(struct rpc_http *h, const uint8_t key[16])
{
	uint32_t x = 2166136261u;
	struct addr_count **pp;

	for (int i = 0; i < 16; i++)
		x = (x ^ key[i]) * 16777619u;
	for (pp = &h->addrs[x % HTTP_ADDR_BUCKETS]; *pp; pp = &(*pp)->next)
		if (memcmp((*pp)->key, key, 16) == 0)
			break;
	return pp;
}

/* Count a new connection from key: false (nothing counted) when the total
 * or the address is at its cap, or the server stops. */
static bool conn_admit(struct rpc_http *h, const uint8_t key[16], bool *ret_per_addr)
{
	struct addr_count **pp, *a;
	bool ok = false;

	*ret_per_addr = false;
	pthread_mutex_lock(&h->lock);
	pp = addr_slot_locked(h, key);
	a = *pp;
	if (atomic_load(&h->stopping) || h->n_conns >= h->max_conns) {
		;
	} else if (a && a->n >= h->max_per_addr) {
		*ret_per_addr = true;
	} else {
		if (!a) {
			a = *pp = xcalloc(1, sizeof(*a));
			memcpy(a->key, key, 16);
		}
		a->n++;
		h->n_conns++;
		ok = true;
	}
	pthread_mutex_unlock(&h->lock);
	return ok;
}

/* Close c and forget it (any thread; c owned by the caller). */
static void conn_free(struct http_conn *c)
{
	struct rpc_http *h = c->h;
	struct addr_count **pp, *a;

	SSL_free(c->ssl);
	close(c->fd);
	free(c->buf);
	pthread_mutex_lock(&h->lock);
	pp = addr_slot_locked(h, c->addr);
	if ((a = *pp) && --a->n == 0) {
		*pp = a->next;
		free(a);
	}
	h->n_conns--;
	pthread_cond_broadcast(&h->room);
	pthread_mutex_unlock(&h->lock);
	free(c);
}

/* ------------------------------------------------ connection threads */

static void *conn_thread_main(void *arg);

/* Queue c, whose request is read, for a connection thread; start one if
 * none is idle and fewer than max_threads are busy with requests. */
static void conn_ready(struct rpc_http *h, struct http_conn *c)
{
	c->next = NULL;
	pthread_mutex_lock(&h->lock);
	*h->ready_tail = c;
	h->ready_tail = &c->next;
	h->n_ready++;
	pthread_cond_signal(&h->ready_cv);
	pthread_mutex_unlock(&h->lock);
}

/* Start connection threads while requests wait for one and there is room.
 * Loop thread. */
static void threads_grow(struct rpc_http *h)
{
	pthread_mutex_lock(&h->lock);
	while (h->n_ready > h->n_idle && h->n_threads - h->n_streams < h->max_threads) {
		pthread_t t;

		if (h->n_threads == h->threads_cap) {
			h->threads_cap = h->threads_cap ? 2 * h->threads_cap : 16;
			h->threads = realloc(h->threads, (size_t)h->threads_cap * sizeof(*h->threads));
			if (!h->threads)
				abort();
		}
		if (pthread_create(&t, NULL, conn_thread_main, h) != 0)
			break;
		h->threads[h->n_threads++] = t;
		h->n_idle++; /* it takes a request before it waits */
	}
	pthread_mutex_unlock(&h->lock);
}

/* Hand a keep-alive connection back to the loop (closed if it is gone). */
static void conn_back(struct http_conn *c)
{
	struct rpc_http *h = c->h;
	bool closed;

	pthread_mutex_lock(&h->lock);
	closed = h->loop_done;
	if (!closed) {
		c->next = h->back;
		h->back = c;
	}
	pthread_mutex_unlock(&h->lock);
	if (closed)
		conn_free(c);
	else if (write(h->wake[1], "c", 1) < 0 && errno != EAGAIN)
		log_debug("rpc: http wake: %s", strerror(errno));
}

/* Serve the request read for c on this thread; then give c back to the
 * loop for the next one (a pipelined request too), or close it. */
static void conn_serve(struct http_conn *c)
{
	int r = conn_one(c);

	if (r == 1) {
		conn_back(c);
		return;
	}
	if (r < 0)
		linger_close(c);
	else if (c->ssl)
		SSL_shutdown(c->ssl);
	conn_free(c);
}

static void *conn_thread_main(void *arg)
{
	struct rpc_http *h = arg;
	struct http_conn *c;
	sigset_t pipe;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL); /* OpenSSL writes with write(2) */
	pthread_mutex_lock(&h->lock);
	h->n_idle--;
	for (;;) {
		while (!h->ready && !h->threads_stop) {
			h->n_idle++;
			pthread_cond_wait(&h->ready_cv, &h->lock);
			h->n_idle--;
		}
		if (!h->ready)
			break;
		c = h->ready;
		h->ready = c->next;
		if (!h->ready)
			h->ready_tail = &h->ready;
		h->n_ready--;
		pthread_mutex_unlock(&h->lock);
		conn_serve(c);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* ------------------------------------------------------ the event loop */

static void loop_close(struct rpc_http *h, struct http_conn *c, const char *why)
{
	log_debug("rpc: http connection from %s closed: %s", c->peer, why);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->loop_conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	conn_free(c); /* closing the socket takes it out of epoll */
}

/* Take c out of the loop (for a connection thread). */
static void loop_detach(struct rpc_http *h, struct http_conn *c)
{
	epoll_ctl(h->ep, EPOLL_CTL_DEL, c->fd, NULL);
	c->events = 0;
	if (c->prev)
		c->prev->next = c->next;
	else
		h->loop_conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

/* Wait for ev on c (registering it the first time); false on error. */
static bool loop_want(struct rpc_http *h, struct http_conn *c, uint32_t ev)
{
	struct epoll_event e = {.events = ev, .data.ptr = c};
	int op = c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

	if (c->events == ev)
		return true;
	if (epoll_ctl(h->ep, op, c->fd, &e) < 0)
		return false;
	c->events = ev;
	return true;
}

/* Answer Expect: 100-continue from the loop, so the body comes to the
 * loop too: 0, or <0 if the 25 bytes did not go at once. */
static int loop_continue(struct http_conn *c)
{
	static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
	size_t k = 0;

	if (!c->ssl)
		return send(c->fd, line, sizeof(line) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) ==
		       (ssize_t)sizeof(line) - 1 ? 0 : -EAGAIN;
	ERR_clear_error();
	return SSL_write_ex(c->ssl, line, sizeof(line) - 1, &k) == 1 ? 0 : -EAGAIN;
}

/* Where c stands once more bytes arrived: 1 when the request can go to a
 * thread (whole, or to be refused there: a bad or oversized head, a head
 * over the limit), 0 while more is needed, <0 to close c. */
static int loop_request_ready(struct rpc_http *h, struct http_conn *c)
{
	struct rpc_http_request req;
	_cleanup_free_ char *copy = NULL;
	const char *why = NULL;
	size_t head;

	if (c->state == CS_BODY)
		return c->len >= c->want;
	if (c->len >= RPC_HTTP_MAX_HEAD)
		return 1;
	head = rpc_http_head_len(c->buf, c->len);
	if (!head)
		return 0;
	copy = xmalloc(head + 1);
	memcpy(copy, c->buf, head);
	copy[head] = '\0';
	if (rpc_http_parse_head(copy, head, &req, &why) != 0 ||
	    req.content_length > h->srv->opts.max_message_bytes)
		return 1;
	c->want = head + req.content_length;
	if (c->len >= c->want)
		return 1;
	if (req.expect_continue && loop_continue(c) < 0)
		return -EAGAIN;
	c->state = CS_BODY;
	c->deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	return 0;
}

/* Read what c has without blocking: >0 bytes, 0 would block (*ret_ev set),
 * <0 EOF or error. */
static ssize_t loop_read1(struct http_conn *c, char *p, size_t n, uint32_t *ret_ev)
{
	size_t k = 0;
	ssize_t got;
	int r;

	*ret_ev = EPOLLIN;
	if (!c->ssl) {
		got = recv(c->fd, p, n, MSG_DONTWAIT);
		if (got > 0)
			return got;
		return got < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -EPIPE;
	}
	ERR_clear_error();
	r = SSL_read_ex(c->ssl, p, n, &k);
	if (r == 1)
		return (ssize_t)k;
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*ret_ev = EPOLLOUT;
		return 0;
	default:
		return -EPIPE;
	}
}

/* Read c until it would block or its request is ready. */
static void loop_read(struct rpc_http *h, struct http_conn *c)
{
	for (;;) {
		size_t limit = (c->state == CS_BODY ? c->want : RPC_HTTP_MAX_HEAD) + 16384;
		int ready = loop_request_ready(h, c);
		uint32_t ev;
		ssize_t n;

		if (ready < 0) {
			loop_close(h, c, "cannot send 100 Continue");
			return;
		}
		if (ready) {
			loop_detach(h, c);
			conn_ready(h, c);
			return;
		}
		buf_reserve(c, 16384);
		n = loop_read1(c, c->buf + c->len,
			       c->cap - c->len < limit - c->len ? c->cap - c->len : limit - c->len, &ev);
		if (n < 0) {
			loop_close(h, c, "closed by the client");
			return;
		}
		if (n == 0) {
			if (!loop_want(h, c, ev))
				loop_close(h, c, "epoll");
			return;
		}
		if (c->state == CS_WAIT) {
			int64_t head_end = mono_ms() + h->header_ms;

			c->state = CS_HEAD;
			c->deadline = c->deadline < head_end ? c->deadline : head_end;
		}
		c->len += (size_t)n;
	}
}

/* Move c's TLS handshake on; read once it is done. */
static void loop_advance(struct rpc_http *h, struct http_conn *c)
{
	int r;

	if (c->state == CS_HANDSHAKE) {
		ERR_clear_error();
		r = SSL_do_handshake(c->ssl);
		if (r != 1) {
			int e = SSL_get_error(c->ssl, r);

			if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
				loop_close(h, c, "TLS handshake failed");
			else if (!loop_want(h, c, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT))
				loop_close(h, c, "epoll");
			return;
		}
		c->state = CS_WAIT;
		c->deadline = mono_ms() + h->header_ms;
	}
	loop_read(h, c);
}

/* Into the loop's list; c->state and c->deadline set by the caller. */
static void loop_insert(struct rpc_http *h, struct http_conn *c)
{
	c->prev = NULL;
	c->next = h->loop_conns;
	if (c->next)
		c->next->prev = c;
	h->loop_conns = c;
	loop_advance(h, c);
}

static void loop_accept_one(struct rpc_http *h, int fd, const struct sockaddr_storage *ss)
{
	struct http_conn *c = xcalloc(1, sizeof(*c));
	bool per_addr;

	c->h = h;
	c->fd = fd;
	peer_name(c, ss);
	addr_key(ss, c->addr);
	if (!conn_admit(h, c->addr, &per_addr)) {
		log_debug("rpc: http connection from %s refused: %s", c->peer,
			  per_addr ? "per-address cap" : "connection cap");
		close(fd);
		free(c);
		return;
	}
	c->state = CS_WAIT;
	c->deadline = mono_ms() + h->header_ms;
	if (h->ctx) {
		c->ssl = SSL_new(h->ctx);
		if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
			conn_free(c);
			return;
		}
		SSL_set_accept_state(c->ssl);
		c->state = CS_HANDSHAKE;
		c->deadline = mono_ms() + h->handshake_ms;
	}
	loop_insert(h, c);
}

static void loop_accept(struct rpc_http *h)
{
	for (int i = 0; i < HTTP_ACCEPT_BATCH && !atomic_load(&h->stopping); i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(h->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
				usleep(100 * 1000);
			return;
		}
		loop_accept_one(h, fd, &ss);
	}
}

/* Take back the keep-alive connections threads returned. */
static void loop_take_back(struct rpc_http *h)
{
	struct http_conn *list, *next;
	char sink[64];

	while (read(h->wake[0], sink, sizeof(sink)) > 0)
		;
	pthread_mutex_lock(&h->lock);
	list = h->back;
	h->back = NULL;
	pthread_mutex_unlock(&h->lock);
	for (; list; list = next) {
		int64_t now = mono_ms();

		next = list->next;
		list->state = list->len ? CS_HEAD : CS_WAIT;
		list->deadline = now + (list->len ? h->header_ms : h->idle_ms);
		loop_insert(h, list);
	}
}

/* Close the connections whose deadline passed (at most once a tick). */
static void loop_sweep(struct rpc_http *h)
{
	static const char *const why[] = {
		[CS_HANDSHAKE] = "TLS handshake timeout", [CS_WAIT] = "idle timeout",
		[CS_HEAD] = "request head timeout", [CS_BODY] = "request body timeout"};
	int64_t now = mono_ms();
	struct http_conn *c, *next;

	if (now - h->last_sweep < HTTP_TICK_MS)
		return;
	h->last_sweep = now;
	for (c = h->loop_conns; c; c = next) {
		next = c->next;
		if (now >= c->deadline)
			loop_close(h, c, why[c->state]);
	}
}

static void loop_events(struct rpc_http *h, const struct epoll_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		void *p = ev[i].data.ptr;

		if (p == &h->lfd)
			loop_accept(h);
		else if (p == h->wake)
			loop_take_back(h);
		else
			loop_advance(h, p);
	}
}

/* On stop: close what the loop owns and whatever comes back from now on. */
static void loop_end(struct rpc_http *h)
{
	struct http_conn *back;

	while (h->loop_conns)
		loop_close(h, h->loop_conns, "server stopping");
	pthread_mutex_lock(&h->lock);
	h->loop_done = true;
	back = h->back;
	h->back = NULL;
	pthread_mutex_unlock(&h->lock);
	while (back) {
		struct http_conn *next = back->next;

		conn_free(back);
		back = next;
	}
}

static void *loop_main(void *arg)
{
	struct rpc_http *h = arg;
	struct epoll_event ev[64];

	while (!atomic_load(&h->stopping)) {
		int n = epoll_wait(h->ep, ev, ARRAY_SIZE(ev), HTTP_TICK_MS);

		if (n > 0)
			loop_events(h, ev, n);
		loop_sweep(h);
		threads_grow(h);
	}
	loop_end(h);
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
	if (pthread_create(&h->loop_tid, NULL, loop_main, h) != 0)
		abort();
	h->started = true;
}

/* See rpc_internal.h. */
void rpc_http_stop(struct rpc_http *h)
{
	if (!h)
		return;
	atomic_store(&h->stopping, true);
	if (h->wake[1] >= 0 && write(h->wake[1], "x", 1) < 0)
		log_debug("rpc: http wake: %s", strerror(errno));
}

/* Every connection closed: stop the connection threads, then the workers. */
static void threads_join(struct rpc_http *h)
{
	pthread_mutex_lock(&h->lock);
	while (h->n_conns > 0)
		pthread_cond_wait(&h->room, &h->lock);
	h->threads_stop = true;
	pthread_cond_broadcast(&h->ready_cv);
	pthread_mutex_unlock(&h->lock);
	for (int i = 0; i < h->n_threads; i++)
		pthread_join(h->threads[i], NULL);
	pthread_mutex_lock(&h->lock);
	h->workers_stop = true;
	pthread_cond_broadcast(&h->work);
	pthread_mutex_unlock(&h->lock);
	for (int i = 0; i < h->n_workers; i++)
		pthread_join(h->workers[i], NULL);
}

/* See rpc_internal.h. */
void rpc_http_free(struct rpc_http *h)
{
	if (!h)
		return;
	rpc_http_stop(h);
	if (h->started) {
		pthread_join(h->loop_tid, NULL);
		threads_join(h);
	}
	for (size_t i = 0; i < HTTP_ADDR_BUCKETS; i++)
		while (h->addrs[i]) {
			struct addr_count *a = h->addrs[i];

			h->addrs[i] = a->next;
			free(a);
		}
	if (h->ep >= 0)
		close(h->ep);
	if (h->lfd >= 0)
		close(h->lfd);
	if (h->wake[0] >= 0) {
		close(h->wake[0]);
		close(h->wake[1]);
	}
	SSL_CTX_free(h->ctx);
	free(h->workers);
	free(h->threads);
	free(h->routes);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->work);
	pthread_cond_destroy(&h->done);
	pthread_cond_destroy(&h->room);
	pthread_cond_destroy(&h->ready_cv);
	free(h);
}
