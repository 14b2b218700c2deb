/* rpc_http_ws.c: RFC 6455 WebSockets on the JSON/HTTP transport, each one
 * a bidi call (rpc.h struct rpc_ws_route, docs/http.md).
 *
 * A connection thread that read `GET <prefix><rest>` checks the opening
 * handshake (plain HTTP errors: 400, 426), takes a stream slot, has a
 * worker run pre_call and stream_admit, answers 101 and runs the bidi
 * handler on itself. The call's transport (rpc_ws_ops) maps messages onto
 * frames: the first receive is {path}, then one {data} per binary message
 * (fragments reassembled, at most max_message_bytes), each send one binary
 * frame of msg.data.
 *
 * Two threads may use one call at once (the coordinator's relay receives
 * on one and sends on the other), and OpenSSL's SSL object is not safe for
 * concurrent SSL_read/SSL_write. The socket is non-blocking; `io` is held
 * around every single SSL_* (or recv/send) call and never while waiting:
 * a thread that cannot go on (SSL_ERROR_WANT_*) drops it and polls. So a
 * writer blocked on a client that does not read never stops the reader,
 * and memory per connection stays bounded: the read buffer holds at most
 * one frame and 16 KiB more, the message being reassembled at most
 * max_message_bytes, and a send blocks until the kernel took its frame.
 * `wmu` keeps a frame's bytes together; a pong the reader owes while a
 * writer holds it is left in `pong` and sent by whichever thread next
 * holds wmu.
 *
 * Protocol errors end the call with a close code (1002 unmasked or
 * malformed frame, 1003 text, 1009 too big): receives return the error,
 * sends -ECANCELED, and the close frame goes out when the handler returns.
 * Otherwise the handler's return sends 1000, 1011 with its error, or 1001
 * while the server stops; then the connection is closed. */
#include "rpc_http_conn.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_READ_CHUNK 16384
/* OpenSSL's record buffer once upgraded (released while empty: the
 * context's SSL_MODE_RELEASE_BUFFERS), so one read(2) takes several
 * records of a large frame */
#define WS_READ_AHEAD (64 * 1024)
#define WS_CLOSE_WAIT_MS 2000        /* for the client's close after ours */
#define WS_FINAL_WRITE_MS 5000       /* our close frame */

enum {
	WS_CLOSE_NORMAL = 1000, WS_CLOSE_GOING_AWAY = 1001, WS_CLOSE_PROTOCOL = 1002,
	WS_CLOSE_UNSUPPORTED = 1003, WS_CLOSE_TOO_BIG = 1009, WS_CLOSE_INTERNAL = 1011,
};

struct http_ws_route {
	char *prefix;
	size_t group_len;            /* "/api/<group>/": cut from the path */
	const struct rpc_method *m;
	const ProtobufCFieldDescriptor *in_path, *in_data, *out_data;
};

struct http_ws {
	struct http_conn *c;
	const struct http_ws_route *r;
	char *path;                  /* the first message's, until given */
	size_t max;                  /* max_message_bytes */

	pthread_mutex_t io;          /* every SSL_* / recv / send call */
	pthread_mutex_t wmu;         /* one whole frame being written */
	pthread_mutex_t pmu;         /* pong, pong_len, pong_due */
	uint8_t pong[125];
	size_t pong_len;
	bool pong_due;

	/* the receiving thread's: c->buf[roff, c->len) unread */
	size_t roff;
	size_t frame_len;            /* the incomplete frame's whole length, 0: unknown */
	uint8_t *msg;                /* the message being reassembled */
	size_t msg_len, msg_cap;
	bool in_msg;                 /* a fragmented message is open */
	bool eof;                    /* the client's close frame came */
	int rerr;                    /* sticky receive error */
	size_t accounted;            /* our share of h->ws_buffered */

	atomic_bool gone;            /* the connection failed or closed */
	atomic_int close_code;       /* a protocol error's code, 0: none */
	const char *close_why;
	bool close_sent;             /* under wmu */
};

/* ------------------------------------------------------------ routes */

static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d,
						 const char *name, ProtobufCType type)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);

	if (!f || f->type != type || f->label == PROTOBUF_C_LABEL_REPEATED ||
	    (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
		return NULL;
	return f;
}

/* "/api/<group>/...": the length of "/api/<group>/", 0 if not so. */
static size_t group_len(const char *prefix)
{
	const char *slash;

	if (strncmp(prefix, "/api/", 5) != 0 || !(slash = strchr(prefix + 5, '/')) ||
	    slash == prefix + 5)
		return 0;
	return (size_t)(slash + 1 - prefix);
}

/* See rpc_http_conn.h. */
int http_ws_routes_build(struct rpc_http *h)
{
	const rpc_server *s = h->srv;
	size_t n = s->opts.n_ws_routes;

	if (!n)
		return 0;
	h->ws_routes = xcalloc(n, sizeof(*h->ws_routes));
	for (size_t i = 0; i < n; i++) {
		const struct rpc_ws_route *o = &s->opts.ws_routes[i];
		struct http_ws_route *r = &h->ws_routes[h->n_ws_routes];

		if (!o->prefix || !o->method || !(r->group_len = group_len(o->prefix))) {
			log_debug("rpc: WebSocket route %zu: prefix must be /api/<group>/...", i);
			return -EINVAL;
		}
		for (size_t k = 0; k < s->n_methods && !r->m; k++)
			if (strcmp(s->methods[k].path, o->method) == 0)
				r->m = &s->methods[k];
		if (!r->m || !r->m->has_handler || r->m->h.kind != RPC_BIDI) {
			log_debug("rpc: WebSocket route %s: %s is no registered bidi method",
				  o->prefix, o->method);
			return -EINVAL;
		}
		r->in_path = field_of(r->m->md->input, "path", PROTOBUF_C_TYPE_STRING);
		r->in_data = field_of(r->m->md->input, "data", PROTOBUF_C_TYPE_BYTES);
		r->out_data = field_of(r->m->md->output, "data", PROTOBUF_C_TYPE_BYTES);
		if (!r->in_path || !r->in_data || !r->out_data) {
			log_debug("rpc: WebSocket route %s: %s needs input {string path; bytes "
				  "data} and output {bytes data}", o->prefix, o->method);
			return -EINVAL;
		}
		r->prefix = xstrdup(o->prefix);
		h->n_ws_routes++;
	}
	return 0;
}

/* See rpc_http_conn.h. */
void http_ws_routes_free(struct rpc_http *h)
{
	for (size_t i = 0; i < h->n_ws_routes; i++)
		free(h->ws_routes[i].prefix);
	free(h->ws_routes);
	h->ws_routes = NULL;
	h->n_ws_routes = 0;
}

static const struct http_ws_route *route_of(const struct rpc_http *h, const char *target)
{
	for (size_t i = 0; i < h->n_ws_routes; i++)
		if (strncmp(target, h->ws_routes[i].prefix, strlen(h->ws_routes[i].prefix)) == 0)
			return &h->ws_routes[i];
	return NULL;
}

/* See rpc_http_conn.h. Other methods on the prefix route as usual (a
 * service's unary methods may live under it). */
bool http_ws_wants(const struct rpc_http *h, const struct rpc_http_request *req)
{
	return strcmp(req->method, "GET") == 0 && route_of(h, req->target);
}

/* See rpc_internal.h. */
size_t rpc_http_ws_buffered(const rpc_server *s)
{
	return s->http ? atomic_load(&s->http->ws_buffered) : 0;
}

/* -------------------------------------------------------------- I/O */

static bool ws_stopping(const struct http_ws *w)
{
	return atomic_load(&w->c->h->stopping) || rpc_server_stopping(w->c->h->srv);
}

/* Wait up to ms for ev on the socket (without io held). */
static void ws_poll(struct http_ws *w, short ev, int ms)
{
	struct pollfd p = {.fd = w->c->fd, .events = ev};

	poll(&p, 1, ms < 0 ? 0 : ms);
}

/* One non-blocking read into buf: >0 bytes, 0 would block (*ret_ev: what
 * to wait for), <0 EOF or error. Over TLS, every record read ahead
 * already, up to n (one SSL_read returns one record). */
static ssize_t ws_read1(struct http_ws *w, void *buf, size_t n, short *ret_ev)
{
	struct http_conn *c = w->c;
	ssize_t got = 0;

	*ret_ev = POLLIN;
	pthread_mutex_lock(&w->io);
	if (c->ssl) {
		size_t k = 0;
		int r;

		ERR_clear_error();
		while ((r = SSL_read_ex(c->ssl, (char *)buf + got, n - (size_t)got, &k)) == 1) {
			got += (ssize_t)k;
			if ((size_t)got == n || !SSL_has_pending(c->ssl))
				break;
		}
		if (got > 0) {
			ERR_clear_error();
		} else {
			switch (SSL_get_error(c->ssl, r)) {
			case SSL_ERROR_WANT_READ:
				got = 0;
				break;
			case SSL_ERROR_WANT_WRITE:
				*ret_ev = POLLOUT;
				got = 0;
				break;
			default:
				got = -EPIPE;
			}
		}
	} else {
		got = recv(c->fd, buf, n, MSG_DONTWAIT);
		if (got == 0)
			got = -EPIPE;
		else if (got < 0)
			got = errno == EAGAIN || errno == EINTR ? 0 : -EPIPE;
	}
	pthread_mutex_unlock(&w->io);
	return got;
}

/* SSL_write_ex without SIGPIPE: OpenSSL writes with write(2), and a
 * handler's own thread sending on a call (unlike the connection threads)
 * may not block the signal; a SIGPIPE raised here is taken back. */
static int ssl_write_nosig(SSL *ssl, const void *p, size_t n, size_t *k)
{
	static const struct timespec zero = {0, 0};
	sigset_t pipe, old, pending;
	int r, was_pending;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	r = SSL_write_ex(ssl, p, n, k);
	if (r != 1 && !was_pending)
		sigtimedwait(&pipe, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

/* Write all of p: 0, -ECANCELED (the server stops, unless final), -ETIMEDOUT
 * (past deadline), -EPIPE (the connection failed: gone). A frame cut short
 * (mid: bytes of it went before this call) leaves the connection gone too:
 * nothing can follow it. wmu held. */
static int ws_write_all(struct http_ws *w, const uint8_t *p, size_t n, bool final, bool mid,
			int64_t deadline)
{
	struct http_conn *c = w->c;

	while (n) {
		short ev = POLLOUT;
		size_t k = 0;
		int err = 0;

		if (atomic_load(&w->gone))
			return -EPIPE;
		err = !final && ws_stopping(w) ? -ECANCELED : mono_ms() >= deadline ? -ETIMEDOUT : 0;
		if (err) {
			if (mid)
				atomic_store(&w->gone, true);
			return err;
		}
		pthread_mutex_lock(&w->io);
		if (c->ssl) {
			int r;

			ERR_clear_error();
			r = ssl_write_nosig(c->ssl, p, n, &k);
			if (r != 1) {
				switch (SSL_get_error(c->ssl, r)) {
				case SSL_ERROR_WANT_READ:
					ev = POLLIN;
					break;
				case SSL_ERROR_WANT_WRITE:
					break;
				default:
					err = -EPIPE;
				}
			}
		} else {
			ssize_t s = send(c->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);

			if (s >= 0)
				k = (size_t)s;
			else if (errno != EAGAIN && errno != EINTR)
				err = -EPIPE;
		}
		pthread_mutex_unlock(&w->io);
		if (err) {
			atomic_store(&w->gone, true);
			return err;
		}
		if (!k) {
			int64_t left = deadline - mono_ms();

			ws_poll(w, ev, left < HTTP_TICK_MS ? (int)left : HTTP_TICK_MS);
		}
		p += k;
		n -= k;
		mid = mid || k;
	}
	return 0;
}

/* A frame header for a payload of n bytes (server frames are unmasked). */
static size_t ws_header(uint8_t *h, int op, uint64_t n)
{
	h[0] = (uint8_t)(0x80 | op);
	if (n < 126) {
		h[1] = (uint8_t)n;
		return 2;
	}
	if (n <= 0xffff) {
		h[1] = 126;
		h[2] = (uint8_t)(n >> 8);
		h[3] = (uint8_t)n;
		return 4;
	}
	h[1] = 127;
	for (int i = 0; i < 8; i++)
		h[2 + i] = (uint8_t)(n >> (56 - 8 * i));
	return 10;
}

/* Write one frame, wmu held. Small frames go as one write (one TLS
 * record). */
static int ws_frame_locked(struct http_ws *w, int op, const uint8_t *p, size_t n, bool final,
			   int64_t deadline)
{
	uint8_t buf[10 + 4096];
	size_t hl = ws_header(buf, op, n);
	int r;

	if (n <= sizeof(buf) - hl) {
		if (n)
			memcpy(buf + hl, p, n);
		return ws_write_all(w, buf, hl + n, final, false, deadline);
	}
	r = ws_write_all(w, buf, hl, final, false, deadline);
	return r < 0 ? r : ws_write_all(w, p, n, final, true, deadline);
}

/* The pong the reader owes, if any, wmu held. */
static void ws_pong_flush_locked(struct http_ws *w)
{
	uint8_t p[125];
	size_t n = 0;
	bool due;

	pthread_mutex_lock(&w->pmu);
	due = w->pong_due;
	if (due) {
		n = w->pong_len;
		memcpy(p, w->pong, n);
		w->pong_due = false;
	}
	pthread_mutex_unlock(&w->pmu);
	if (due && !w->close_sent)
		ws_frame_locked(w, RPC_WS_PONG, p, n, false, INT64_MAX);
}

/* Send the owed pong unless a writer holds wmu (it sends it after its
 * frame). */
static void ws_pong_try(struct http_ws *w)
{
	if (pthread_mutex_trylock(&w->wmu) != 0)
		return;
	ws_pong_flush_locked(w);
	pthread_mutex_unlock(&w->wmu);
}

static void ws_pong_owe(struct http_ws *w, const uint8_t *p, size_t n)
{
	pthread_mutex_lock(&w->pmu);
	memcpy(w->pong, p, n); /* only the latest ping needs its pong */
	w->pong_len = n;
	w->pong_due = true;
	pthread_mutex_unlock(&w->pmu);
	ws_pong_try(w);
}

static bool ws_pong_due(struct http_ws *w)
{
	bool due;

	pthread_mutex_lock(&w->pmu);
	due = w->pong_due;
	pthread_mutex_unlock(&w->pmu);
	return due;
}

/* One data frame of a send: 0, or -ECANCELED once the call cannot send. */
static int ws_send_frame(struct http_ws *w, int op, const uint8_t *p, size_t n)
{
	int r;

	pthread_mutex_lock(&w->wmu);
	if (w->close_sent || atomic_load(&w->close_code) || atomic_load(&w->gone)) {
		pthread_mutex_unlock(&w->wmu);
		return -ECANCELED;
	}
	r = ws_frame_locked(w, op, p, n, false, INT64_MAX);
	if (r == 0)
		ws_pong_flush_locked(w);
	pthread_mutex_unlock(&w->wmu);
	if (ws_pong_due(w))
		ws_pong_try(w);
	return r < 0 ? -ECANCELED : 0;
}

/* Our close frame (once), code and a reason cut to 123 bytes on a UTF-8
 * boundary. */
static void ws_send_close(struct http_ws *w, int code, const char *why)
{
	uint8_t p[125];
	size_t n = why ? strlen(why) : 0;

	if (n > sizeof(p) - 2) {
		n = sizeof(p) - 2;
		while (n && ((uint8_t)why[n] & 0xc0) == 0x80)
			n--;
	}
	p[0] = (uint8_t)(code >> 8);
	p[1] = (uint8_t)code;
	if (n)
		memcpy(p + 2, why, n);
	pthread_mutex_lock(&w->wmu);
	if (!w->close_sent) {
		w->close_sent = true;
		ws_frame_locked(w, RPC_WS_CLOSE, p, n + 2, true, mono_ms() + WS_FINAL_WRITE_MS);
	}
	pthread_mutex_unlock(&w->wmu);
}

/* ---------------------------------------------------------- receiving */

/* Keep h->ws_buffered at what this connection holds now. */
static void ws_account(struct http_ws *w)
{
	size_t now = w->c->cap + w->msg_cap;

	if (now >= w->accounted)
		atomic_fetch_add(&w->c->h->ws_buffered, now - w->accounted);
	else
		atomic_fetch_sub(&w->c->h->ws_buffered, w->accounted - now);
	w->accounted = now;
}

/* Read more bytes into c->buf: 0, -ETIMEDOUT after end, -ECANCELED (the
 * connection ended, or the server stops). */
static int ws_fill(struct http_ws *w, int64_t end)
{
	struct http_conn *c = w->c;

	if (w->roff) {
		memmove(c->buf, c->buf + w->roff, c->len - w->roff);
		c->len -= w->roff;
		w->roff = 0;
	}
	/* room for the rest of the frame being read (known from its header)
	 * and one more chunk, so a big frame is not grown chunk by chunk */
	if (c->cap - c->len < WS_READ_CHUNK ||
	    (w->frame_len > c->len && c->cap < w->frame_len + WS_READ_CHUNK)) {
		c->cap = (w->frame_len > c->len ? w->frame_len : c->len) + WS_READ_CHUNK;
		c->buf = realloc(c->buf, c->cap);
		if (!c->buf)
			abort();
		ws_account(w);
	}
	for (;;) {
		short ev;
		ssize_t n = ws_read1(w, c->buf + c->len, c->cap - c->len, &ev);
		int64_t left;

		if (n > 0) {
			c->len += (size_t)n;
			return 0;
		}
		if (n < 0) {
			atomic_store(&w->gone, true);
			return -ECANCELED;
		}
		if (ws_stopping(w) || atomic_load(&w->gone))
			return -ECANCELED;
		left = end - mono_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		ws_poll(w, ev, left < HTTP_TICK_MS ? (int)left : HTTP_TICK_MS);
	}
}

/* A protocol error: its close code goes out when the handler returns;
 * receives return err from now on, sends -ECANCELED. */
static int ws_fail(struct http_ws *w, int code, const char *why, int err)
{
	log_debug("rpc: WebSocket from %s: %s (close %d)", w->c->peer, why, code);
	w->close_why = why;
	atomic_store(&w->close_code, code);
	w->rerr = err;
	return err;
}

/* A whole frame's unmasked payload p: 1 when it completes a message (in
 * w->msg), 0 to go on, -1 for the client's close (w->eof). */
static int ws_take(struct http_ws *w, const struct rpc_ws_frame *f, const uint8_t *p)
{
	switch (f->op) {
	case RPC_WS_PING:
		ws_pong_owe(w, p, f->len);
		return 0;
	case RPC_WS_PONG:
		return 0;
	case RPC_WS_CLOSE:
		w->eof = true;
		return -1;
	}
	if (w->msg_cap - w->msg_len < f->len) {
		w->msg_cap = w->msg_len + f->len;
		w->msg = realloc(w->msg, w->msg_cap);
		if (!w->msg)
			abort();
		ws_account(w);
	}
	if (f->len)
		memcpy(w->msg + w->msg_len, p, f->len);
	w->msg_len += f->len;
	w->in_msg = !f->fin;
	return f->fin;
}

/* Take the frames complete in the buffer: 1 when a message is whole in
 * w->msg, 0 when more bytes are needed (or the close came: w->eof), <0 a
 * protocol error. */
static int ws_parse(struct http_ws *w)
{
	struct http_conn *c = w->c;

	for (;;) {
		uint8_t *p = (uint8_t *)c->buf + w->roff;
		size_t have = c->len - w->roff;
		struct rpc_ws_frame f;
		const char *why = NULL;
		int r = rpc_ws_frame_parse(p, have, &f, &why);

		if (r < 0)
			return ws_fail(w, -r, why, -EBADMSG);
		if (r == 0)
			return 0;
		if (!(f.op & 0x8) && (f.op == RPC_WS_CONT) != w->in_msg)
			return ws_fail(w, WS_CLOSE_PROTOCOL, "bad fragmentation", -EBADMSG);
		if (!(f.op & 0x8) && f.len > w->max - w->msg_len)
			return ws_fail(w, WS_CLOSE_TOO_BIG, "message too big", -EMSGSIZE);
		if (have < f.head_len + f.len) {
			w->frame_len = f.head_len + f.len;
			return 0;
		}
		w->frame_len = 0;
		p += f.head_len;
		xor_mask4(p, p, (size_t)f.len, f.mask);
		w->roff += f.head_len + f.len;
		r = ws_take(w, &f, p);
		if (r)
			return r < 0 ? 0 : 1;
	}
}

static ProtobufCMessage *msg_new(const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = xcalloc(1, d->sizeof_message);

	protobuf_c_message_init(d, m);
	return m;
}

static void *field_at(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset)
		*(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;
	return (char *)m + f->offset;
}

/* The WebSocket's receive: see rpc_internal.h struct rpc_transport_ops. */
static int ws_recv(rpc_call *call, ProtobufCMessage **ret, int timeout_ms)
{
	struct http_ws *w = call->http_ws;
	int64_t end = timeout_ms < 0 ? INT64_MAX : mono_ms() + timeout_ms;
	ProtobufCMessage *m;
	ProtobufCBinaryData *b;
	int r;

	if (w->path) {
		m = msg_new(call->method->md->input);
		*(char **)field_at(m, w->r->in_path) = w->path;
		w->path = NULL;
		*ret = m;
		return 1;
	}
	for (;;) {
		if (w->rerr)
			return w->rerr;
		if (w->eof)
			return 0;
		r = ws_parse(w);
		if (r < 0)
			return r;
		if (r == 1)
			break;
		if (w->eof)
			return 0;
		if ((r = ws_fill(w, end)) < 0)
			return r;
	}
	m = msg_new(call->method->md->input);
	b = field_at(m, w->r->in_data);
	b->data = w->msg_len ? w->msg : NULL;
	b->len = w->msg_len;
	if (!w->msg_len)
		free(w->msg);
	w->msg = NULL;
	w->msg_len = w->msg_cap = 0;
	ws_account(w);
	*ret = m;
	return 1;
}

/* The WebSocket's send: msg.data as one binary frame. Blocks while the
 * client does not read. */
static int ws_send(rpc_call *call, const ProtobufCMessage *msg)
{
	struct http_ws *w = call->http_ws;
	const ProtobufCBinaryData *b =
		(const void *)((const char *)msg + w->r->out_data->offset);

	if (ws_stopping(w))
		return -ECANCELED;
	return ws_send_frame(w, RPC_WS_BINARY, b->data, b->len);
}

/* True once the connection failed or closed, a protocol error ended the
 * call, or the server stops; a client that closed its TCP side counts
 * (seen without reading: the receiving thread owns the bytes). */
static bool ws_wait_cancelled(rpc_call *call, int timeout_ms)
{
	struct http_ws *w = call->http_ws;
	int64_t end = timeout_ms < 0 ? INT64_MAX : mono_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = {.fd = w->c->fd, .events = POLLRDHUP};
		int64_t left;

		if (atomic_load(&w->gone) || atomic_load(&w->close_code) || ws_stopping(w))
			return true;
		left = end - mono_ms();
		if (left <= 0)
			return false;
		if (poll(&p, 1, left < HTTP_TICK_MS ? (int)left : HTTP_TICK_MS) > 0 && p.revents) {
			atomic_store(&w->gone, true);
			return true;
		}
	}
}

static void ws_release(rpc_call *call)
{
}

/* rpc_call_cancel: the connection counts as gone, so a send blocked on a
 * client that does not read (and a receive) returns at its next tick. */
static void ws_cancel(rpc_call *call)
{
	struct http_ws *w = call->http_ws;

	atomic_store(&w->gone, true);
}

static const struct rpc_transport_ops rpc_ws_ops = {
	.name = "websocket",
	.send = ws_send,
	.recv = ws_recv,
	.wait_cancelled = ws_wait_cancelled,
	.release = ws_release,
	.cancel = ws_cancel,
	.can_detach = false,
};

/* -------------------------------------------------------- handshake */

/* A Sec-WebSocket-Key: base64 of 16 bytes. */
static bool key_valid(const char *key)
{
	unsigned char out[32];

	return key && strlen(key) == 24 && key[22] == '=' && key[23] == '=' &&
	       EVP_DecodeBlock(out, (const unsigned char *)key, 24) == 18;
}

/* Sec-WebSocket-Accept for key: base64(SHA-1(key GUID)), 28 characters. */
static void accept_value(const char *key, char out[29])
{
	unsigned char md[SHA_DIGEST_LENGTH];
	char buf[64];

	snprintf(buf, sizeof(buf), "%s" WS_GUID, key);
	SHA1((const unsigned char *)buf, strlen(buf), md);
	EVP_EncodeBlock((unsigned char *)out, md, SHA_DIGEST_LENGTH);
}

/* The handshake's refusal, if any: 0 or the status sent (and the
 * connection is to be closed). */
static int handshake_check(struct http_conn *c, const struct rpc_http_request *req)
{
	const char *upgrade = rpc_http_header(req, "upgrade");
	const char *version = rpc_http_header(req, "sec-websocket-version");

	if (!rpc_http_list_has(upgrade, "websocket"))
		return http_respond_error(c, 426, "Upgrade: websocket\r\n", false,
					  BC_INVALID_INPUT, "Upgrade",
					  "this is a WebSocket endpoint: Upgrade: websocket required"),
		       426;
	if (req->minor < 1)
		return http_respond_error(c, 400, "", false, BC_INVALID_INPUT, NULL,
					  "WebSockets need HTTP/1.1"), 400;
	if (!rpc_http_list_has(rpc_http_header(req, "connection"), "upgrade"))
		return http_respond_error(c, 400, "", false, BC_INVALID_INPUT, "Connection",
					  "Connection: Upgrade required"), 400;
	if (!version || strcmp(version, "13") != 0)
		return http_respond_error(c, 426, "Sec-WebSocket-Version: 13\r\n", false,
					  BC_INVALID_INPUT, "Sec-WebSocket-Version",
					  "unsupported WebSocket version: use 13"), 426;
	if (!key_valid(rpc_http_header(req, "sec-websocket-key")))
		return http_respond_error(c, 400, "", false, BC_INVALID_INPUT, "Sec-WebSocket-Key",
					  "missing or malformed Sec-WebSocket-Key"), 400;
	if (req->content_length)
		return http_respond_error(c, 400, "", false, BC_INVALID_INPUT, NULL,
					  "a WebSocket handshake has no body"), 400;
	return 0;
}

/* The first message's path: the target after "/api/<group>/", query kept. */
static char *path_of(const struct http_ws_route *r, const struct rpc_http_request *req)
{
	const char *rest = req->target + r->group_len;

	return req->query ? xasprintf("%s?%s", rest, req->query) : xstrdup(rest);
}

/* After our close frame: read (and drop) until the client's close, EOF or
 * a short while, so our close is not lost to a reset. */
static void ws_close_wait(struct http_ws *w)
{
	int64_t end = mono_ms() + WS_CLOSE_WAIT_MS;

	while (!w->eof && !w->rerr && !atomic_load(&w->gone) && mono_ms() < end) {
		int r = ws_parse(w);

		if (r == 1) {
			free(w->msg);
			w->msg = NULL;
			w->msg_len = w->msg_cap = 0;
			continue;
		}
		if (r < 0 || w->eof)
			break;
		if (ws_fill(w, end) < 0)
			break;
	}
}

/* Run the handler on the upgraded connection; then the close frames. */
static void ws_run(struct http_ws *w, rpc_call *call)
{
	bc_error err;
	int r, code;
	const char *why = NULL;

	bc_error_clear(&err);
	r = call->method->h.fn.bidi(call, &err);
	if (r < 0 && err.code == BC_OK)
		bc_error_set(&err, BC_INTERNAL, "internal error");
	code = atomic_load(&w->close_code);
	if (code) {
		why = w->close_why;
	} else if (ws_stopping(w)) {
		code = WS_CLOSE_GOING_AWAY;
		why = "server shutting down";
	} else if (r < 0) {
		code = WS_CLOSE_INTERNAL;
		why = err.message;
	} else {
		code = WS_CLOSE_NORMAL;
	}
	log_debug("rpc: WebSocket %s from %s ended: %s, close %d", call->path, call->peer,
		  r < 0 ? bc_code_name(err.code) : "OK", code);
	ws_send_close(w, code, why);
	if (!w->rerr)
		ws_close_wait(w);
}

/* See rpc_http_conn.h. */
int http_ws_serve(struct http_conn *c, const struct rpc_http_request *req)
{
	struct rpc_http *h = c->h;
	const struct http_ws_route *r = route_of(h, req->target);
	struct http_ws w = {.c = c, .r = r, .max = h->srv->opts.max_message_bytes};
	_cleanup_free_ char *json = NULL;
	char accept[29], *head;
	rpc_call *call;
	bc_error err;
	int rc;

	if (handshake_check(c, req))
		return -1;
	if (!http_stream_slot(h, 1))
		return http_respond_error(c, bc_code_http_status(BC_QUOTA_EXCEEDED), "", false,
					  BC_QUOTA_EXCEEDED, NULL, "too many streams"), -1;
	call = rpc_call_alloc(h->srv, &rpc_ws_ops, NULL);
	call->method = r->m;
	call->path = r->m->path;
	call->peer = rpc_strdup(call, c->peer);
	call->deadline_ms = INT64_MAX;
	call->http_ws = &w;
	http_call_metadata(call, req);
	bc_error_clear(&err);
	rc = http_stream_admit(h, call, &err);
	if (rc < 0) {
		if (err.code == BC_OK)
			bc_error_set(&err, BC_INTERNAL, "internal error");
		json = rpc_http_error_json(&err);
		http_respond(c, bc_code_http_status(err.code), "", json, false);
		rpc_call_release(call);
		http_stream_slot(h, -1);
		return -1;
	}
	accept_value(rpc_http_header(req, "sec-websocket-key"), accept);
	head = xasprintf("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", accept);
	rc = http_conn_write(c, head, strlen(head), mono_ms() + HTTP_IO_TIMEOUT_MS);
	free(head);
	if (rc == 0) {
		if (c->ssl) { /* a tunnel's bytes: read ahead, WS_READ_AHEAD per read(2) */
			SSL_set_read_ahead(c->ssl, 1);
			SSL_set_default_read_buffer_len(c->ssl, WS_READ_AHEAD);
		}
		pthread_mutex_init(&w.io, NULL);
		pthread_mutex_init(&w.wmu, NULL);
		pthread_mutex_init(&w.pmu, NULL);
		w.path = path_of(r, req);
		ws_account(&w);
		log_debug("rpc: WebSocket %s from %s open", call->path, call->peer);
		ws_run(&w, call);
		free(w.path);
		free(w.msg);
		atomic_fetch_sub(&h->ws_buffered, w.accounted);
		pthread_mutex_destroy(&w.io);
		pthread_mutex_destroy(&w.wmu);
		pthread_mutex_destroy(&w.pmu);
	}
	rpc_call_release(call);
	http_stream_slot(h, -1);
	return -1; /* linger: the client's last bytes are drained */
}
