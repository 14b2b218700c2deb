/* rpc_http_conn.c: the connections of the JSON/HTTP transport (rpc_http.c
 * answers their requests): the listener and TLS context, one epoll event
 * loop, the connection threads, the per-connection caps and timeouts and
 * the blocking I/O the threads use.
 *
 * One event loop thread (epoll) accepts, runs each TLS handshake
 * non-blocking and reads each request, head and body, without a thread per
 * connection: a connection that sends nothing, or sends slowly, only costs
 * its socket and TLS state, and is closed by the handshake, header or idle
 * timeout (rpc_server_opts http_*). New connections beyond the total or
 * per-address cap are closed at once. A whole request is handed to one of
 * at most http_threads connection threads (started on demand; server
 * streams hold theirs without counting against the cap), which writes the
 * 100-continue or refusal if any, hands the call to the worker queue,
 * waits for its answer and writes it; a keep-alive connection then goes
 * back to the loop, never idling on a thread. A WebSocket (rpc_http_ws.c)
 * holds its thread, as a server stream does, for as long as it is open.
 *
 * A connection's states (enum conn_state) while the loop owns it, each
 * with the deadline at which loop_sweep closes it:
 *
 *   accept --(over the total or per-address cap)--> closed at once
 *     |
 *     +-- TLS: CS_HANDSHAKE (handshake_ms) --+
 *     +-- plain -----------------------------+--> CS_WAIT (header_ms)
 *                                                   | first byte
 *                                                   v
 *                 CS_HEAD (header_ms from the first byte, at the latest
 *                          CS_WAIT's deadline)
 *                                                   | head parsed, body due
 *                                                   v
 *                 CS_BODY (HTTP_IO_TIMEOUT_MS from the head)
 *                                                   | the whole request, or
 *                                                   | a head to refuse
 *                                                   v
 *                 ready queue -> a connection thread answers it
 *                                                   | keep-alive: back queue
 *                                                   v
 *                 CS_WAIT (idle_ms), or CS_HEAD (header_ms) when bytes of
 *                 the next request came with the last one
 *
 * A connection is owned by exactly one of: the loop (in its list and in
 * epoll), the ready queue, a connection thread, the back queue (returning
 * to the loop). h->lock guards the queues and the counters.
 *
 * Shutdown: stop accepting; connections owned by the loop close at once;
 * a request already read is answered (Connection: close); then the
 * connection threads stop, then the workers. */
#include "rpc_http_conn.h"

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
#include "tlsconn.h"
#include "util.h"

#define HTTP_BACKLOG 1024
#define HTTP_ACCEPT_BATCH 64
#define HTTP_LINGER_MS 1000

/* Connections per address (IPv4, or the /64 of IPv6). */
struct addr_count {
	struct addr_count *next;
	uint8_t key[16];
	int n;
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
	return tlsc_ctx_use_chain(h->ctx, s->cert_pem, s->key_pem) < 0 ? -EIO : 0;
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
	http_fifo_init(&h->jobs);
	http_fifo_init(&h->ready);
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
	http_routes_build(h);
	if ((r = http_ws_routes_build(h)) < 0 || (r = http_mcp_init(h)) < 0) {
		rpc_http_free(h);
		return r;
	}
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

/* See rpc_http_conn.h. */
int http_conn_write(struct http_conn *c, const char *p, size_t n, int64_t deadline)
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

/* See rpc_http_conn.h. */
int http_conn_fill(struct http_conn *c, size_t want, int64_t deadline)
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

/* ------------------------------------------------------------ queues */

/* See rpc_http_conn.h. */
void http_fifo_init(struct http_fifo *q)
{
	q->head = NULL;
	q->tail = &q->head;
	q->n = 0;
}

/* See rpc_http_conn.h. */
void http_fifo_push(struct http_fifo *q, struct http_link *l)
{
	l->next = NULL;
	*q->tail = l;
	q->tail = &l->next;
	q->n++;
}

/* See rpc_http_conn.h. The workers and the connection threads both wait
 * here. */
struct http_link *http_fifo_wait(struct http_fifo *q, pthread_mutex_t *mu, pthread_cond_t *cv,
				 const bool *stop, int *idle)
{
	struct http_link *l;

	while (!q->head && !*stop) {
		if (idle)
			(*idle)++;
		pthread_cond_wait(cv, mu);
		if (idle)
			(*idle)--;
	}
	l = q->head;
	if (!l)
		return NULL;
	q->head = l->next;
	if (!q->head)
		q->tail = &q->head;
	q->n--;
	return l;
}

/* ------------------------------------------------ connection threads */

static void *conn_thread_main(void *arg);

/* Queue c, whose request is read, for a connection thread; start one if
 * none is idle and fewer than max_threads are busy with requests. */
static void conn_ready(struct rpc_http *h, struct http_conn *c)
{
	pthread_mutex_lock(&h->lock);
	http_fifo_push(&h->ready, &c->qlink);
	pthread_cond_signal(&h->ready_cv);
	pthread_mutex_unlock(&h->lock);
}

/* Start connection threads while requests wait for one and there is room.
 * Loop thread. */
static void threads_grow(struct rpc_http *h)
{
	pthread_mutex_lock(&h->lock);
	while (h->ready.n > h->n_idle && h->n_threads - h->n_streams < h->max_threads) {
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
	int r = http_serve_one(c);

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
	struct http_link *l;
	sigset_t pipe;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL); /* OpenSSL writes with write(2) */
	pthread_mutex_lock(&h->lock);
	h->n_idle--;
	while ((l = http_fifo_wait(&h->ready, &h->lock, &h->ready_cv, &h->threads_stop,
				   &h->n_idle))) {
		pthread_mutex_unlock(&h->lock);
		conn_serve(http_of(l, struct http_conn, qlink));
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* ------------------------------------------------------ the event loop */

/* Take c off the loop's list of connections. */
static void loop_unlink(struct rpc_http *h, struct http_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		h->loop_conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

static void loop_close(struct rpc_http *h, struct http_conn *c, const char *why)
{
	log_debug("rpc: http connection from %s closed: %s", c->peer, why);
	loop_unlink(h, c);
	conn_free(c); /* closing the socket takes it out of epoll */
}

/* Take c out of the loop (for a connection thread). */
static void loop_detach(struct rpc_http *h, struct http_conn *c)
{
	epoll_ctl(h->ep, EPOLL_CTL_DEL, c->fd, NULL);
	c->events = 0;
	loop_unlink(h, c);
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
		if (pthread_create(&h->workers[i], NULL, http_worker_main, h) != 0)
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
	http_ws_routes_free(h);
	http_mcp_free(h);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->work);
	pthread_cond_destroy(&h->done);
	pthread_cond_destroy(&h->room);
	pthread_cond_destroy(&h->ready_cv);
	free(h);
}
