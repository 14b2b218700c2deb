/* test_rpc_ws.c: WebSocket routes of the JSON/HTTP transport (rpc.h struct
 * rpc_ws_route, rpc_http_ws.c) against a real in-process plain-HTTP server
 * with hand-built bidi services; the client is a raw socket writing and
 * reading RFC 6455 frames byte by byte, so the test controls masking,
 * fragmentation and limits.
 *
 * `test_rpc_ws --serve` is the interop suite's server (tests/interop/ws.t):
 * the same echo service over TLS with a throwaway CA; it prints
 * "port=<n> ca=<file>" and serves until its stdin closes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "rpc.h"
#include "rpc_internal.h"
#include "tap.h"
#include "util.h"

/* ------------------------------------------------ the message: a frame */

/* As bc.compute.v1.TunnelFrame: string ticket = 1; bytes data = 2;
 * string path = 3. */
typedef struct {
	ProtobufCMessage base;
	char *ticket;
	ProtobufCBinaryData data;
	char *path;
} Frame;

static const ProtobufCMessageDescriptor frame_d;

static void frame_init(ProtobufCMessage *m)
{
	static const Frame init = {PROTOBUF_C_MESSAGE_INIT(&frame_d), (char *)protobuf_c_empty_string,
				   {0, NULL}, (char *)protobuf_c_empty_string};

	*(Frame *)m = init;
}

static const ProtobufCFieldDescriptor frame_fields[] = {
	{"ticket", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, offsetof(Frame, ticket),
	 NULL, &protobuf_c_empty_string, 0, 0, NULL, NULL},
	{"data", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_BYTES, 0, offsetof(Frame, data), NULL,
	 NULL, 0, 0, NULL, NULL},
	{"path", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, offsetof(Frame, path), NULL,
	 &protobuf_c_empty_string, 0, 0, NULL, NULL},
};
static const unsigned frame_by_name[] = {1, 2, 0};
static const ProtobufCIntRange frame_ranges[] = {{1, 0}, {0, 3}};
static const ProtobufCMessageDescriptor frame_d = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "bc.compute.v1.TunnelFrame", "TunnelFrame",
	"Bc__Compute__V1__TunnelFrame", "bc.compute.v1", sizeof(Frame), 3, frame_fields,
	frame_by_name, 1, frame_ranges, frame_init, NULL, NULL, NULL,
};
/* A message without the mapped fields, for the start-time check. */
static const ProtobufCFieldDescriptor bare_fields[] = {
	{"ticket", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, offsetof(Frame, ticket),
	 NULL, &protobuf_c_empty_string, 0, 0, NULL, NULL},
};
static const unsigned bare_by_name[] = {0};
static const ProtobufCIntRange bare_ranges[] = {{1, 0}, {0, 1}};
static const ProtobufCMessageDescriptor bare_d = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "bc.compute.v1.Bare", "Bare", "Bc__Compute__V1__Bare",
	"bc.compute.v1", sizeof(Frame), 1, bare_fields, bare_by_name, 1, bare_ranges, frame_init,
	NULL, NULL, NULL,
};

static const ProtobufCMethodDescriptor tun_methods[] = {
	{"Connect", &frame_d, &frame_d}, {"Pump", &frame_d, &frame_d},
	{"Bare", &bare_d, &bare_d},      {"Create", &frame_d, &frame_d},
};
static const unsigned tun_index[] = {2, 0, 3, 1};
static const ProtobufCServiceDescriptor tun_service = {
	PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC, "bc.compute.v1.Tunnels", "Tunnels",
	"Bc__Compute__V1__Tunnels", "bc.compute.v1", ARRAY_SIZE(tun_methods), tun_methods,
	tun_index,
};

/* ------------------------------------------------------------ handlers */

static atomic_int n_handler, n_admitted, n_done, n_cancel_seen, last_recv_rc;
static pthread_mutex_t path_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_path[256];

static int send_bytes(rpc_call *call, const void *p, size_t n)
{
	Frame out;

	frame_init(&out.base);
	out.data.data = (uint8_t *)p;
	out.data.len = n;
	return rpc_call_send(call, &out.base);
}

/* Connect: the first message's path comes back as the first frame; then
 * every message is echoed. Paths select other behaviours: "wait" waits
 * for the client to go away, "fail" ends with a long error. */
static int h_connect(rpc_call *call, bc_error *err)
{
	ProtobufCMessage *m = NULL;
	int r;

	n_handler++;
	if (rpc_call_recv(call, &m, 1000) != 1)
		return bc_error_set(err, BC_INTERNAL, "no path message");
	pthread_mutex_lock(&path_mu);
	snprintf(last_path, sizeof(last_path), "%s", ((Frame *)m)->path);
	pthread_mutex_unlock(&path_mu);
	r = send_bytes(call, ((Frame *)m)->path, strlen(((Frame *)m)->path));
	if (strstr(((Frame *)m)->path, "/wait")) {
		protobuf_c_message_free_unpacked(m, NULL);
		if (rpc_call_wait_cancelled(call, 20000))
			n_cancel_seen++;
		return 0;
	}
	if (strstr(((Frame *)m)->path, "/fail")) {
		protobuf_c_message_free_unpacked(m, NULL);
		return bc_error_set(err, BC_INVALID_STATE, "%0200d", 7);
	}
	protobuf_c_message_free_unpacked(m, NULL);
	while (r == 0 && (r = rpc_call_recv(call, &m, -1)) == 1) {
		r = send_bytes(call, ((Frame *)m)->data.data, ((Frame *)m)->data.len);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	last_recv_rc = r;
	if (r < 0)
		return bc_error_set(err, BC_INVALID_INPUT, "receive: %d", r);
	return 0;
}

/* The pump's pattern: message i of n bytes is byte (i * 7 + k) at k,
 * after 4 bytes of i. */
static size_t pump_len(unsigned i)
{
	return 4 + (i * 2654435761u) % 12000;
}

static void pump_fill(uint8_t *p, unsigned i, size_t n)
{
	p[0] = (uint8_t)(i >> 24);
	p[1] = (uint8_t)(i >> 16);
	p[2] = (uint8_t)(i >> 8);
	p[3] = (uint8_t)i;
	for (size_t k = 4; k < n; k++)
		p[k] = (uint8_t)(i * 7 + k);
}

static bool pump_check(const uint8_t *p, size_t n, unsigned i)
{
	uint8_t *want;
	bool ok;

	if (n != pump_len(i))
		return false;
	want = xmalloc(n);
	pump_fill(want, i, n);
	ok = memcmp(want, p, n) == 0;
	free(want);
	return ok;
}

#define PUMP_N 3000
static atomic_int pump_sent, pump_recv_ok;

static void *pump_sender(void *arg)
{
	rpc_call *call = arg;
	uint8_t *buf = xmalloc(16384);

	for (unsigned i = 0; i < PUMP_N; i++) {
		pump_fill(buf, i, pump_len(i));
		if (send_bytes(call, buf, pump_len(i)) < 0)
			break;
		pump_sent++;
	}
	free(buf);
	return NULL;
}

/* Pump: one thread sends PUMP_N patterned messages while this one
 * receives and checks PUMP_N. */
static int h_pump(rpc_call *call, bc_error *err)
{
	ProtobufCMessage *m = NULL;
	pthread_t t;

	n_handler++;
	if (rpc_call_recv(call, &m, 1000) != 1)
		return bc_error_set(err, BC_INTERNAL, "no path message");
	protobuf_c_message_free_unpacked(m, NULL);
	pthread_create(&t, NULL, pump_sender, call);
	for (unsigned i = 0; i < PUMP_N; i++) {
		if (rpc_call_recv(call, &m, 30000) != 1)
			break;
		if (pump_check(((Frame *)m)->data.data, ((Frame *)m)->data.len, i))
			pump_recv_ok++;
		protobuf_c_message_free_unpacked(m, NULL);
	}
	pthread_join(t, NULL);
	return 0;
}

static int h_bare(rpc_call *call, bc_error *err)
{
	return 0;
}

static int h_create(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		    bc_error *err)
{
	return 0;
}

static const struct rpc_handler tun_handlers[] = {
	{.method = "Connect", .kind = RPC_BIDI, .fn.bidi = h_connect},
	{.method = "Pump", .kind = RPC_BIDI, .fn.bidi = h_pump},
	{.method = "Bare", .kind = RPC_BIDI, .fn.bidi = h_bare},
	{.method = "Create", .kind = RPC_UNARY, .fn.unary = h_create},
};

/* A request with header x-deny is refused before any handler. */
static int pre_call(rpc_call *call, bc_error *err)
{
	if (rpc_call_metadata(call, "x-deny"))
		return bc_error_set(err, BC_ACCESS_DENIED, "denied by pre_call");
	return 0;
}

static int stream_admit(rpc_call *call, bc_error *err)
{
	n_admitted++;
	return 0;
}

static void stream_done(rpc_call *call)
{
	n_done++;
}

static const struct rpc_ws_route routes[] = {
	{"/api/compute/tunnels/", "/bc.compute.v1.Tunnels/Connect"},
	{"/api/compute/pump/", "/bc.compute.v1.Tunnels/Pump"},
};

#define MAX_MSG (64 * 1024)
#define MAX_STREAMS 4
#define IDLE_MS 400               /* keep-alive idle timeout: WebSockets leave it */

static int http_port;

static rpc_server *server_up(const struct rpc_tls *tls, const struct rpc_ws_route *r, size_t n,
			     int *ret_err)
{
	struct rpc_server_opts o = {
		.listen = "127.0.0.1:0", .tls = tls, .workers = 2, .max_streams = MAX_STREAMS,
		.max_message_bytes = tls ? 1 << 20 : MAX_MSG, .pre_call = pre_call,
		.stream_admit = stream_admit, .stream_done = stream_done,
		.http_listen = "127.0.0.1:0", .ws_routes = r, .n_ws_routes = n,
		.http_idle_timeout_ms = IDLE_MS,
	};
	rpc_server *s = rpc_server_new(&o, NULL);
	int port, e = -ENOMEM;

	if (s && (e = rpc_server_add_service(s, &tun_service, tun_handlers,
					     ARRAY_SIZE(tun_handlers))) == 0)
		e = rpc_server_start(s, &port);
	if (ret_err)
		*ret_err = e;
	if (e < 0) {
		rpc_server_free(s, 0);
		return NULL;
	}
	http_port = rpc_server_http_port(s);
	return s;
}

/* ------------------------------------------------------------ client */

struct wc {
	int fd;
	uint8_t buf[1 << 20];
	size_t len;
};

static struct wc *wc_connect(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port)};
	struct wc *c = xcalloc(1, sizeof(*c));

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(c->fd);
		free(c);
		return NULL;
	}
	return c;
}

static void wc_close(struct wc *c)
{
	if (c) {
		close(c->fd);
		free(c);
	}
}

static int wc_write(struct wc *c, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);

		if (w < 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* More bytes within timeout_ms: >0, 0 at EOF, <0 error or timeout. */
static ssize_t wc_read(struct wc *c, int timeout_ms)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	ssize_t n;

	if (c->len == sizeof(c->buf))
		return -ENOSPC;
	if (poll(&p, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
	if (n > 0)
		c->len += (size_t)n;
	return n < 0 ? -errno : n;
}

/* Send a request head and read the response head: the status, the head
 * in head (NUL-terminated); body bytes or frames stay in c->buf. */
static int wc_handshake(struct wc *c, const char *head_out, char *head, size_t hlen)
{
	uint8_t *end;
	size_t n;

	if (wc_write(c, head_out, strlen(head_out)) < 0)
		return -EIO;
	while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
		if (wc_read(c, 5000) <= 0)
			return -EIO;
	n = (size_t)(end - c->buf) + 4;
	snprintf(head, hlen, "%.*s", (int)n, (char *)c->buf);
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
	return atoi(head + 9);
}

#define RFC_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define RFC_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static char *ws_head(const char *target, const char *extra)
{
	return xasprintf("GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Key: " RFC_KEY "\r\n"
			 "Sec-WebSocket-Version: 13\r\n%s\r\n", target, extra ? extra : "");
}

/* A client frame; masked unless told, fin and op as given. */
static int wc_frame(struct wc *c, bool fin, int op, const void *p, size_t n, bool masked)
{
	uint8_t h[14], key[4] = {0x37, 0xfa, 0x21, 0x3d}, *buf;
	size_t hl = 2;
	int r;

	h[0] = (uint8_t)((fin ? 0x80 : 0) | op);
	if (n < 126) {
		h[1] = (uint8_t)n;
	} else if (n <= 0xffff) {
		h[1] = 126;
		h[2] = (uint8_t)(n >> 8);
		h[3] = (uint8_t)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	if (masked) {
		h[1] |= 0x80;
		memcpy(h + hl, key, 4);
		hl += 4;
	}
	buf = xmalloc(hl + n + 1);
	memcpy(buf, h, hl);
	for (size_t i = 0; i < n; i++)
		buf[hl + i] = ((const uint8_t *)p)[i] ^ (masked ? key[i % 4] : 0);
	r = wc_write(c, buf, hl + n);
	free(buf);
	return r;
}

/* One server frame: its opcode (fin must be set, payload unmasked) into
 * *op, payload copied into out (at most cap). Length, or <0. */
static ssize_t wc_next(struct wc *c, int *op, uint8_t *out, size_t cap, int timeout_ms)
{
	size_t hl = 2, n;

	for (;;) {
		if (c->len >= 2) {
			n = c->buf[1] & 0x7f;
			if (c->buf[1] & 0x80)
				return -EBADMSG; /* servers never mask */
			if (n == 126 && c->len >= 4) {
				n = (size_t)c->buf[2] << 8 | c->buf[3];
				hl = 4;
			} else if (n == 127 && c->len >= 10) {
				n = 0;
				for (int i = 0; i < 8; i++)
					n = n << 8 | c->buf[2 + i];
				hl = 10;
			}
			if ((n < 126 || hl > 2) && c->len >= hl + n) {
				*op = c->buf[0] & 0x0f;
				if (n > cap)
					return -ENOSPC;
				memcpy(out, c->buf + hl, n);
				memmove(c->buf, c->buf + hl + n, c->len - hl - n);
				c->len -= hl + n;
				return (ssize_t)n;
			}
			hl = 2;
		}
		if (wc_read(c, timeout_ms) <= 0)
			return -EIO;
	}
}

/* Read frames until a close: its code (reason into why), or <0. */
static int wc_close_code(struct wc *c, char *why, size_t wlen)
{
	uint8_t p[256];
	int op;
	ssize_t n;

	while ((n = wc_next(c, &op, p, sizeof(p), 5000)) >= 0)
		if (op == 0x8) {
			if (why)
				snprintf(why, wlen, "%.*s", n > 2 ? (int)n - 2 : 0, (char *)p + 2);
			return n >= 2 ? p[0] << 8 | p[1] : 0;
		}
	return (int)n;
}

/* An open WebSocket on target; the path frame (Connect's echo of it) read
 * and checked unless want_path is NULL. */
static struct wc *wc_open(const char *target, const char *want_path)
{
	struct wc *c = wc_connect();
	char *h = ws_head(target, NULL), head[2048];
	uint8_t p[512];
	int st, op = -1;
	ssize_t n;

	st = c ? wc_handshake(c, h, head, sizeof(head)) : -1;
	free(h);
	if (st != 101) {
		wc_close(c);
		return NULL;
	}
	if (!want_path)
		return c;
	n = wc_next(c, &op, p, sizeof(p) - 1, 5000);
	if ((n < 0 || op != 0x2 || (size_t)n != strlen(want_path) ||
			  memcmp(p, want_path, (size_t)n) != 0)) {
		wc_close(c);
		return NULL;
	}
	return c;
}

static bool wait_for(atomic_int *v, int want, int ms)
{
	for (int i = 0; i < ms / 10 && atomic_load(v) < want; i++)
		usleep(10 * 1000);
	return atomic_load(v) >= want;
}

/* -------------------------------------------------------------- tests */

static void test_handshake(void)
{
	struct wc *c = wc_connect();
	char *h = ws_head("/api/compute/tunnels/tun_x/connect?ticket=abc", "Authorization: Bearer t\r\n");
	char head[2048];
	uint8_t p[256];
	int op = -1;
	ssize_t n;

	is_int(wc_handshake(c, h, head, sizeof(head)), 101, "handshake answers 101");
	ok(strcasestr(head, "\r\nSec-WebSocket-Accept: " RFC_ACCEPT "\r\n") != NULL,
	   "Sec-WebSocket-Accept is RFC 6455's value for its example key");
	ok(strcasestr(head, "\r\nUpgrade: websocket\r\n") &&
	   strcasestr(head, "\r\nConnection: Upgrade\r\n"), "Upgrade and Connection headers");
	n = wc_next(c, &op, p, sizeof(p) - 1, 5000);
	p[n > 0 ? n : 0] = '\0';
	is_str((char *)p, "tunnels/tun_x/connect?ticket=abc",
	       "first message's path: the target after /api/compute/, query kept");
	is_int(op, 0x2, "echoed as a binary frame");
	free(h);
	wc_close(c);
}

static void test_frames(void)
{
	struct wc *c = wc_open("/api/compute/tunnels/t1", "tunnels/t1");
	uint8_t p[70000], big[70000];
	int op = -1;
	ssize_t n;

	ok(c != NULL, "WebSocket open");
	if (!c)
		return;
	wc_frame(c, true, 0x2, "hello", 5, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 5 && op == 0x2 && memcmp(p, "hello", 5) == 0, "masked binary frame echoed");

	wc_frame(c, true, 0x2, "", 0, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 0 && op == 0x2, "empty message echoed as an empty frame");

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 31);
	wc_frame(c, true, 0x2, big, 60000, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 60000 && memcmp(p, big, 60000) == 0, "60000-byte frame (16-bit length) echoed");
	/* unmasked 8 bytes at a time: a length that is no multiple of 8,
	 * right behind a 3-byte frame (the payload at an odd address) */
	wc_frame(c, true, 0x2, "odd", 3, true);
	wc_frame(c, true, 0x2, big + 1, 60005, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 3 && memcmp(p, "odd", 3) == 0, "3-byte frame echoed");
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 60005 && memcmp(p, big + 1, 60005) == 0,
	   "60005-byte frame behind it echoed (its mask's phase kept to the last byte)");

	wc_frame(c, false, 0x2, "frag", 4, true);
	wc_frame(c, true, 0x9, "ping!", 5, true); /* a control frame between fragments */
	wc_frame(c, false, 0x0, "men", 3, true);
	wc_frame(c, true, 0x0, "ted", 3, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 5 && op == 0xa && memcmp(p, "ping!", 5) == 0,
	   "ping between fragments answered by a pong with its payload");
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 10 && op == 0x2 && memcmp(p, "fragmented", 10) == 0,
	   "three fragments reassembled into one message");

	wc_frame(c, true, 0xa, "unasked", 7, true); /* unsolicited pong: ignored */
	wc_frame(c, true, 0x2, "after", 5, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 5 && memcmp(p, "after", 5) == 0, "unsolicited pong ignored");

	last_recv_rc = 1;
	wc_frame(c, true, 0x8, "\x03\xe8", 2, true);
	is_int(wc_close_code(c, NULL, 0), 1000, "client close: server closes 1000");
	is_int(last_recv_rc, 0, "client close: rpc_call_recv returned 0");
	ok(wc_read(c, 3000) == 0, "then the server closes the connection");
	wc_close(c);
}

/* Open, send what `bad` does, expect close code `code`. */
static void expect_close(const char *what, int code, void (*bad)(struct wc *))
{
	struct wc *c = wc_open("/api/compute/tunnels/t2", "tunnels/t2");
	char why[200] = "";

	ok(c != NULL, "%s: open", what);
	if (!c)
		return;
	last_recv_rc = 1;
	bad(c);
	is_int(wc_close_code(c, why, sizeof(why)), code, "%s: close %d (%s)", what, code, why);
	wc_close(c);
}

static void bad_unmasked(struct wc *c)
{
	wc_frame(c, true, 0x2, "plain", 5, false);
}

static void bad_text(struct wc *c)
{
	wc_frame(c, true, 0x1, "text", 4, true);
}

static void bad_big(struct wc *c)
{
	/* only the header: the server must refuse before the payload */
	uint8_t h[14] = {0x82, 0xff, 0, 0, 0, 0, 0, 2, 0, 0, 1, 2, 3, 4}; /* 128 KiB */

	wc_write(c, h, sizeof(h));
}

static void bad_big_fragments(struct wc *c)
{
	static uint8_t part[40000];

	wc_frame(c, false, 0x2, part, sizeof(part), true);
	wc_frame(c, true, 0x0, part, sizeof(part), true);
}

static void bad_cont(struct wc *c)
{
	wc_frame(c, true, 0x0, "cont", 4, true);
}

static void bad_rsv(struct wc *c)
{
	uint8_t f[] = {0xc2, 0x80, 1, 2, 3, 4};

	wc_write(c, f, sizeof(f));
}

static void bad_ping_long(struct wc *c)
{
	static uint8_t p[126];

	wc_frame(c, true, 0x9, p, sizeof(p), true);
}

static void test_protocol_errors(void)
{
	expect_close("unmasked frame", 1002, bad_unmasked);
	is_int(last_recv_rc, -EBADMSG, "unmasked: rpc_call_recv gave -EBADMSG");
	expect_close("text frame", 1003, bad_text);
	expect_close("frame over max_message_bytes", 1009, bad_big);
	is_int(last_recv_rc, -EMSGSIZE, "oversize: rpc_call_recv gave -EMSGSIZE");
	expect_close("fragments over max_message_bytes", 1009, bad_big_fragments);
	expect_close("continuation without a start", 1002, bad_cont);
	expect_close("reserved bits", 1002, bad_rsv);
	expect_close("ping of 126 bytes", 1002, bad_ping_long);
}

static void test_handler_error(void)
{
	struct wc *c = wc_open("/api/compute/tunnels/x/fail", "tunnels/x/fail");
	char why[200] = "";

	ok(c != NULL, "open (fail)");
	if (!c)
		return;
	is_int(wc_close_code(c, why, sizeof(why)), 1011, "handler error: close 1011");
	is_int((int)strlen(why), 123, "reason cut to 123 bytes");
	is_int((int)strspn(why, "0"), 123, "reason is the error's message");
	wc_close(c);
}

/* A request head (not upgraded): status and head. */
static int plain(const char *req, char *head, size_t hlen)
{
	struct wc *c = wc_connect();
	int st = c ? wc_handshake(c, req, head, hlen) : -1;

	wc_close(c);
	return st;
}

static void test_bad_handshakes(void)
{
	char head[2048], *r;
	int before = n_handler, admitted = n_admitted;

	r = xasprintf("GET /api/compute/tunnels/a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n");
	is_int(plain(r, head, sizeof(head)), 400, "no Sec-WebSocket-Key: 400");
	free(r);
	r = xasprintf("GET /api/compute/tunnels/a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
		      "Sec-WebSocket-Key: c2hvcnQ=\r\n\r\n");
	is_int(plain(r, head, sizeof(head)), 400, "a key not of 16 bytes: 400");
	free(r);
	r = xasprintf("GET /api/compute/tunnels/a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		      "Connection: Upgrade\r\nSec-WebSocket-Version: 12\r\n"
		      "Sec-WebSocket-Key: " RFC_KEY "\r\n\r\n");
	is_int(plain(r, head, sizeof(head)), 426, "version 12: 426");
	ok(strcasestr(head, "\r\nSec-WebSocket-Version: 13\r\n") != NULL, "426 names version 13");
	free(r);
	r = xasprintf("GET /api/compute/tunnels/a HTTP/1.1\r\nHost: x\r\n\r\n");
	is_int(plain(r, head, sizeof(head)), 426, "no Upgrade: 426");
	free(r);
	r = xasprintf("GET /api/compute/tunnels/a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
		      "Connection: keep-alive\r\nSec-WebSocket-Version: 13\r\n"
		      "Sec-WebSocket-Key: " RFC_KEY "\r\n\r\n");
	is_int(plain(r, head, sizeof(head)), 400, "no Connection: upgrade: 400");
	free(r);
	r = ws_head("/api/compute/elsewhere/a", NULL);
	is_int(plain(r, head, sizeof(head)), 404, "GET outside the routes: 404");
	free(r);
	r = ws_head("/api/compute/tunnels/a", "x-deny: 1\r\n");
	is_int(plain(r, head, sizeof(head)), 403, "pre_call refusal: its status (403)");
	free(r);
	r = xasprintf("POST /api/compute/tunnels/create HTTP/1.1\r\nHost: x\r\n"
		      "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
	is_int(plain(r, head, sizeof(head)), 200, "POST under the prefix: the unary method");
	free(r);
	is_int(n_handler, before, "no bad handshake reached a handler");
	is_int(n_admitted, admitted, "nor stream_admit (the refused one stopped at pre_call)");
}

/* max_streams counts WebSockets; rpc_call_wait_cancelled sees the client
 * go away; stream_done once each. */
static void test_streams_and_cancel(void)
{
	struct wc *c[MAX_STREAMS];
	char head[2048], *r;
	int seen = n_cancel_seen, done = n_done, opened = 0;

	for (int i = 0; i < MAX_STREAMS; i++)
		opened += (c[i] = wc_open("/api/compute/tunnels/w/wait", "tunnels/w/wait")) != NULL;
	is_int(opened, MAX_STREAMS, "%d WebSockets open", MAX_STREAMS);
	r = ws_head("/api/compute/tunnels/w/wait", NULL);
	is_int(plain(r, head, sizeof(head)), 429, "one more: refused (max_streams)");
	free(r);
	for (int i = 0; i < MAX_STREAMS; i++)
		wc_close(c[i]);
	ok(wait_for(&n_cancel_seen, seen + MAX_STREAMS, 5000),
	   "rpc_call_wait_cancelled saw each client go away");
	ok(wait_for(&n_done, done + MAX_STREAMS, 5000), "stream_done ran for each");
	c[0] = wc_open("/api/compute/tunnels/again", "tunnels/again");
	ok(c[0] != NULL, "a slot is free again");
	wc_close(c[0]);
}

struct pump_client {
	struct wc *c;
	atomic_int sent;
};

static void *pump_client_writer(void *arg)
{
	struct pump_client *pc = arg;
	uint8_t *buf = xmalloc(16384);

	for (unsigned i = 0; i < PUMP_N; i++) {
		size_t n = pump_len(i), cut = n / 3;

		pump_fill(buf, i, n);
		if (i % 5 == 0) { /* fragmented, a ping inside */
			if (wc_frame(pc->c, false, 0x2, buf, cut, true) < 0 ||
			    wc_frame(pc->c, true, 0x9, "p", 1, true) < 0 ||
			    wc_frame(pc->c, true, 0x0, buf + cut, n - cut, true) < 0)
				break;
		} else if (wc_frame(pc->c, true, 0x2, buf, n, true) < 0) {
			break;
		}
		pc->sent++;
	}
	free(buf);
	return NULL;
}

static void test_concurrency(void)
{
	struct pump_client pc = {.c = wc_open("/api/compute/pump/x", NULL)};
	uint8_t *p = xmalloc(65536);
	int ok_n = 0, pongs = 0, op;
	pthread_t t;

	ok(pc.c != NULL, "pump open");
	if (!pc.c) {
		free(p);
		return;
	}
	pthread_create(&t, NULL, pump_client_writer, &pc);
	/* read nothing for a while: the server's sender blocks in the middle
	 * of a frame while its receiver owes pongs for the pings it reads */
	usleep(500 * 1000);
	for (unsigned i = 0; i < PUMP_N;) {
		ssize_t n = wc_next(pc.c, &op, p, 65536, 30000);

		if (n < 0)
			break;
		if (op == 0xa) {
			pongs++;
			continue;
		}
		ok_n += op == 0x2 && pump_check(p, (size_t)n, i);
		i++;
	}
	pthread_join(t, NULL);
	is_int(pc.sent, PUMP_N, "client sent %d messages while reading", PUMP_N);
	is_int(ok_n, PUMP_N, "server's sending thread: all %d arrived intact and in order", PUMP_N);
	ok(wait_for(&pump_recv_ok, PUMP_N, 10000),
	   "server's receiving thread: all %d reassembled intact and in order", PUMP_N);
	ok(pongs > 0, "pongs (%d) interleaved with the data frames, never inside one", pongs);
	is_int(wc_close_code(pc.c, NULL, 0), 1000, "pump handler returned: close 1000");
	wc_close(pc.c);
	free(p);
}

/* A client that writes and never reads: the echo handler blocks in
 * rpc_call_send, stops receiving, and the server holds no more than a
 * frame or two in its buffers while the client pushed megabytes. */
static void test_slow_reader(rpc_server *s)
{
	struct wc *c = wc_open("/api/compute/tunnels/slow", "tunnels/slow");
	static uint8_t chunk[32768];
	size_t pushed = 0, peak = 0;
	int64_t end = mono_ms() + 4000, stalled_since = 0;
	int rcv = 4096;

	ok(c != NULL, "slow reader open");
	if (!c)
		return;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	while (mono_ms() < end) {
		struct pollfd p = {.fd = c->fd, .events = POLLOUT};
		size_t b;

		if (poll(&p, 1, 50) == 1) {
			uint8_t h[8] = {0x82, 0xfe, 0x80, 0x00, 0, 0, 0, 0}; /* 32768, zero mask */
			struct iovec iov[2] = {{h, 8}, {chunk, sizeof(chunk)}};
			struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
			ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

			if (w == (ssize_t)(8 + sizeof(chunk))) {
				pushed += sizeof(chunk);
				stalled_since = 0;
			} else if (w > 0) {
				/* finish the partial frame blocking */
				struct pollfd q = {.fd = c->fd, .events = POLLOUT};
				size_t done = (size_t)w;

				while (done < 8 + sizeof(chunk) && poll(&q, 1, 2000) == 1) {
					const uint8_t *src = done < 8 ? h + done : chunk + done - 8;
					size_t left = done < 8 ? 8 - done : 8 + sizeof(chunk) - done;
					ssize_t k = send(c->fd, src, left, MSG_NOSIGNAL);

					if (k <= 0)
						break;
					done += (size_t)k;
				}
				if (done < 8 + sizeof(chunk))
					break;
				pushed += sizeof(chunk);
			}
		} else if (!stalled_since) {
			stalled_since = mono_ms();
		} else if (mono_ms() - stalled_since > 1000) {
			break;
		}
		b = rpc_http_ws_buffered(s);
		peak = b > peak ? b : peak;
	}
	ok(pushed > 4 * MAX_MSG, "client pushed %zu bytes, reading nothing, until it stalled",
	   pushed);
	ok(peak > 0 && peak <= 2 * MAX_MSG + 3 * 16384,
	   "server's WebSocket buffers stayed at most %d bytes (peak %zu)",
	   2 * MAX_MSG + 3 * 16384, peak);
	wc_close(c);
	for (int i = 0; i < 500 && rpc_http_ws_buffered(s); i++)
		usleep(10 * 1000);
	is_int((int)rpc_http_ws_buffered(s), 0, "client gone: its buffers are given back");
}

/* An upgraded connection is out of the idle timeout: quiet for three
 * times it, it still echoes; a plain keep-alive connection is closed. */
static void test_quiet(void)
{
	struct wc *c = wc_open("/api/compute/tunnels/quiet", "tunnels/quiet");
	struct wc *k = wc_connect();
	char head[2048];
	uint8_t p[16];
	int op = -1;
	ssize_t n;

	ok(c != NULL, "quiet WebSocket open");
	if (!c || !k) {
		wc_close(c);
		wc_close(k);
		return;
	}
	is_int(wc_handshake(k, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", head, sizeof(head)),
	       200, "a keep-alive request beside it");
	usleep(3 * IDLE_MS * 1000);
	wc_frame(c, true, 0x2, "still", 5, true);
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 5 && memcmp(p, "still", 5) == 0, "WebSocket quiet for %d ms still echoes",
	   3 * IDLE_MS);
	while (wc_read(k, 2000) > 0)
		;
	ok(wc_read(k, 100) == 0, "while the idle keep-alive connection was closed");
	wc_close(k);
	wc_close(c);
}

/* Frames written in the same packet as the handshake are not lost. */
static void test_pipelined(void)
{
	struct wc *c = wc_connect();
	char *h = ws_head("/api/compute/tunnels/early", NULL), head[2048];
	uint8_t f[] = {0x82, 0x85, 0, 0, 0, 0, 'e', 'a', 'r', 'l', 'y'}, p[64];
	char *both = xmalloc(strlen(h) + sizeof(f));
	int op = -1;
	ssize_t n;

	memcpy(both, h, strlen(h));
	memcpy(both + strlen(h), f, sizeof(f));
	wc_write(c, both, strlen(h) + sizeof(f));
	is_int(wc_handshake(c, "", head, sizeof(head)), 101, "handshake and a frame in one write");
	n = wc_next(c, &op, p, sizeof(p), 5000); /* the path */
	n = wc_next(c, &op, p, sizeof(p), 5000);
	ok(n == 5 && memcmp(p, "early", 5) == 0, "the frame sent with the handshake echoed");
	free(both);
	free(h);
	wc_close(c);
}

static void test_start_checks(void)
{
	static const struct rpc_ws_route nohandler[] = {
		{"/api/compute/x/", "/bc.compute.v1.Tunnels/Nope"}};
	static const struct rpc_ws_route unary[] = {
		{"/api/compute/x/", "/bc.compute.v1.Tunnels/Create"}};
	static const struct rpc_ws_route bare[] = {
		{"/api/compute/x/", "/bc.compute.v1.Tunnels/Bare"}};
	static const struct rpc_ws_route badprefix[] = {
		{"/tunnels/", "/bc.compute.v1.Tunnels/Connect"}};
	int e = 0;

	ok(!server_up(NULL, nohandler, 1, &e) && e == -EINVAL, "route to no method: -EINVAL");
	ok(!server_up(NULL, unary, 1, &e) && e == -EINVAL, "route to a unary method: -EINVAL");
	ok(!server_up(NULL, bare, 1, &e) && e == -EINVAL,
	   "route to a method without path/data fields: -EINVAL");
	ok(!server_up(NULL, badprefix, 1, &e) && e == -EINVAL,
	   "prefix outside /api/<group>/: -EINVAL");
}

static void test_shutdown(rpc_server *s)
{
	struct wc *c = wc_open("/api/compute/tunnels/bye", "tunnels/bye");
	/* a pump whose client reads nothing: its sender blocks mid-frame */
	struct wc *stuck = wc_open("/api/compute/pump/stuck", NULL);
	int64_t t0;
	int sent0 = pump_sent;

	ok(c != NULL && stuck != NULL, "open before shutdown");
	usleep(500 * 1000);
	ok(pump_sent - sent0 < PUMP_N, "the stuck pump's sender is blocked (%d sent)",
	   pump_sent - sent0);
	t0 = mono_ms();
	rpc_server_free(s, 1000);
	ok(mono_ms() - t0 < 8000, "shutdown did not wait for the blocked sender (%lld ms)",
	   (long long)(mono_ms() - t0));
	if (c)
		is_int(wc_close_code(c, NULL, 0), 1001, "server shutdown closes it with 1001");
	wc_close(c);
	wc_close(stuck);
}

/* ----------------------------------------------------- interop server */

static int serve(void)
{
	char dir[] = "/tmp/test_rpc_ws.XXXXXX", cmd[2048], path[256];
	char *cert = NULL, *key = NULL, sink[256];
	struct rpc_tls tls;
	rpc_server *s;
	int e = 0;

	if (!mkdtemp(dir))
		return 1;
	snprintf(cmd, sizeof(cmd),
		 "cd %s && exec >/dev/null 2>&1 && "
		 "openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca && "
		 "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > srv.ext && "
		 "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout srv.key -out srv.csr -subj /CN=localhost && "
		 "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		 "-out srv.pem -days 2 -extfile srv.ext", dir);
	if (system(cmd) != 0)
		return 1;
	snprintf(path, sizeof(path), "%s/srv.pem", dir);
	file_read_all(path, 1 << 20, &cert, NULL);
	snprintf(path, sizeof(path), "%s/srv.key", dir);
	file_read_all(path, 1 << 20, &key, NULL);
	tls = (struct rpc_tls){.cert_pem = cert, .key_pem = key};
	rpc_global_init();
	s = server_up(&tls, routes, ARRAY_SIZE(routes), &e);
	if (!s) {
		fprintf(stderr, "server: %s\n", strerror(-e));
		return 1;
	}
	printf("port=%d ca=%s/ca.pem\n", http_port, dir);
	fflush(stdout);
	while (read(0, sink, sizeof(sink)) > 0)
		;
	rpc_server_free(s, 1000);
	rpc_global_shutdown();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	free(cert);
	free(key);
	return 0;
}

int main(int argc, char **argv)
{
	rpc_server *s;
	int e = 0;

	signal(SIGPIPE, SIG_IGN);
	if (getenv("TEST_RPC_DEBUG"))
		log_init("test_rpc_ws", LOG_LVL_DEBUG);
	if (argc > 1 && strcmp(argv[1], "--serve") == 0)
		return serve();
	rpc_global_init();
	s = server_up(NULL, routes, ARRAY_SIZE(routes), &e);
	ok(s != NULL, "plain-HTTP server with WebSocket routes on :%d (%s)", http_port,
	   s ? "up" : strerror(-e));
	if (s) {
		test_handshake();
		test_frames();
		test_pipelined();
		test_quiet();
		test_protocol_errors();
		test_handler_error();
		test_bad_handshakes();
		test_streams_and_cancel();
		test_concurrency();
		test_slow_reader(s);
		test_shutdown(s);
	}
	test_start_checks();
	ok(wait_for(&n_done, n_admitted, 100), "stream_done balanced stream_admit (%d)",
	   (int)n_admitted);
	rpc_global_shutdown();
	done_testing();
}
