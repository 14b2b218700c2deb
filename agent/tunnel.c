/* tunnel.c: the controller's ssh tunnels into this node's instances, on
 * bcd's own mTLS port (tunnel_listen): the raw protocol (tunnel_raw.h,
 * tunnel_protocol = raw, the default; the same checks as below, the
 * refusals as answer lines, the relay on plain TLS: "raw protocol"
 * further down) or gRPC Agent.Tunnel (tunnel_protocol = grpc), described
 * here.
 *
 * Who: the TLS handshake asks for a client certificate and verifies it
 * against ca.pem (the API CA alone: a node's certificate, from the node
 * CA, fails the handshake); pre_call then takes only the CN
 * TUNNEL_CLIENT_CN, the controller's tunnel client certificate. bcd serves
 * with its tunnel certificate (serverAuth, SAN = the node id).
 *
 * What: the first message names the target. Only port 22 of an instance
 * of the applied spec that runs now; the connection goes to the
 * instance's own guest address (its first NIC's IPAM IPv4) from the host's
 * address on the instances' bridge (the spec's IPAM gateway, bound before
 * connect), so the guard rules that let only the host reach a guest's ssh
 * still hold. Anything else is refused: PERMISSION_DENIED (port),
 * NOT_FOUND (an instance this node does not hold), INVALID_STATE (not
 * running, no address), UNAVAILABLE (the guest does not answer).
 *
 * Relay: the stream's thread copies guest -> controller, a thread of the
 * tunnel's own copies controller -> guest; one TUNNEL_CHUNK_MAX buffer
 * per direction and blocking writes, so a slow reader on either side
 * stalls the other through TCP and HTTP/2 flow control and memory per
 * tunnel stays constant. A half-close from the controller is passed on
 * (shutdown SHUT_WR); the guest's EOF ends the tunnel with OK. At most
 * `max` tunnels at once (RESOURCE_EXHAUSTED beyond). */
#include "tunnel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bc/node/v1/agent.pb-c.h"
#include "converge.h"
#include "log.h"
#include "metrics.h"
#include "rpc.h"
#include "runtime.h"
#include "tlsconn.h"
#include "util.h"

#define OPEN_TIMEOUT_MS 10000
#define CONNECT_TIMEOUT_MS 5000
#define POLL_MS 250
#define MAX_MESSAGE (TUNNEL_CHUNK_MAX + 1024)
/* each tunnel's HTTP/2 receive window: bounded (rpc.h), room for two
 * chunks in flight */
#define WINDOW_BYTES (2 * TUNNEL_CHUNK_MAX)

enum refusal { R_NO_CERT, R_NOT_CONTROLLER, R_LIMIT, R_BAD_OPEN, R_PORT, R_UNKNOWN,
	       R_NOT_RUNNING, R_NO_ADDRESS, R_CONNECT, R_HANDSHAKE, R_COUNT };
static const char *const refusal_names[R_COUNT] = {
	"no-client-cert", "not-controller", "limit", "bad-open", "port",
	"unknown-instance", "not-running", "no-address", "connect", "handshake"};

struct rconn {
	struct tlsc *tls;           /* set under the server's mu */
	int sock;                   /* the controller's connection */
	int gfd;                    /* the guest's connection, -1 before */
	struct rconn *next;
};

struct tunnel_srv {
	rpc_server *srv;            /* the gRPC protocol (raw = false) */
	/* the raw protocol */
	SSL_CTX *ctx;
	int lfd;
	pthread_t acceptor;
	bool accepting;
	atomic_bool stopping;
	pthread_mutex_t mu;         /* conns, threads */
	pthread_cond_t cv;
	struct rconn *conns;
	unsigned threads;
	struct conv *conv;
	char *state_dir;
	bool fake;
	uint32_t max;
	atomic_uint admitted;       /* streams admitted (the limit) */
	atomic_uint open;           /* relaying now */
	atomic_ullong total;        /* relays begun */
	atomic_ullong refused[R_COUNT];
	bool raw;
};

static int refuse(struct tunnel_srv *t, enum refusal why, bc_error *err, enum bc_code code,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int refuse(struct tunnel_srv *t, enum refusal why, bc_error *err, enum bc_code code,
		  const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&t->refused[why], 1);
	bc_error_set(err, code, "%s", msg);
	bc_error_detail(err, "reason", "%s", refusal_names[why]);
	log_info("tunnel: refused: %s", err->message);
	return -BC_EDOMAIN;
}

/* ---------------------------------------------------------- admission */

static int pre_call(rpc_call *call, bc_error *err)
{
	struct tunnel_srv *t = rpc_call_user(call);
	const char *cn = rpc_call_peer_cn(call);

	if (!cn)
		return refuse(t, R_NO_CERT, err, BC_UNAUTHENTICATED,
			      "a client certificate is required");
	if (strcmp(cn, TUNNEL_CLIENT_CN) != 0)
		return refuse(t, R_NOT_CONTROLLER, err, BC_ACCESS_DENIED,
			      "certificate %.64s is not the controller's tunnel client", cn);
	return 0;
}

static int stream_admit(rpc_call *call, bc_error *err)
{
	struct tunnel_srv *t = rpc_call_user(call);

	if (atomic_fetch_add(&t->admitted, 1) >= t->max) {
		atomic_fetch_sub(&t->admitted, 1);
		return refuse(t, R_LIMIT, err, BC_RESOURCE_EXHAUSTED,
			      "tunnels at their limit (tunnel_max = %u)", t->max);
	}
	return 0;
}

static void stream_done(rpc_call *call)
{
	struct tunnel_srv *t = rpc_call_user(call);

	atomic_fetch_sub(&t->admitted, 1);
}

/* ------------------------------------------------------------- target */

/* TEST ONLY (fake runtime): the local host:port guest maps to in
 * TUNNEL_FAKE_TARGETS, into buf. 0 or -ENOENT. */
static int fake_target(const struct tunnel_srv *t, const char *guest, char *buf, size_t len)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", t->state_dir, TUNNEL_FAKE_TARGETS);
	_cleanup_free_ char *text = NULL;
	char *save = NULL;

	if (file_read_all(path, 65536, &text, NULL) < 0)
		return -ENOENT;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char g[64], hp[128];
		if (sscanf(l, "%63s %127s", g, hp) == 2 && strcmp(g, guest) == 0) {
			snprintf(buf, len, "%s", hp);
			return 0;
		}
	}
	return -ENOENT;
}

static int parse_v4(const char *host, uint16_t port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

/* A TCP connection to to, from `from` (NULL: any), within
 * CONNECT_TIMEOUT_MS: the descriptor (blocking) or -errno. */
static int connect_v4(const struct sockaddr_in *from, const struct sockaddr_in *to)
{
	struct pollfd pfd;
	socklen_t sl = sizeof(int);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0, one = 1;

	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
	if (from && bind(fd, (const struct sockaddr *)from, sizeof(*from)) < 0)
		goto fail;
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) < 0) {
		if (errno != EINPROGRESS)
			goto fail;
		pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
		if (poll(&pfd, 1, CONNECT_TIMEOUT_MS) <= 0) {
			errno = ETIMEDOUT;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0 || e) {
			errno = e ? e : EIO;
			goto fail;
		}
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		goto fail;
	return fd;
fail:
	e = -errno;
	close(fd);
	return e;
}

/* The connection to the guest's port 22 of tg: fd, or -BC_EDOMAIN. */
static int dial_guest(struct tunnel_srv *t, const char *id, const struct conv_target *tg,
		      bc_error *err)
{
	struct sockaddr_in from, to;
	char hp[128];
	const char *colon;
	int fd;

	if (t->fake && fake_target(t, tg->guest, hp, sizeof(hp)) == 0 &&
	    (colon = strrchr(hp, ':'))) {
		char host[64];
		snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
		if (parse_v4(host, (uint16_t)atoi(colon + 1), &to) < 0)
			return refuse(t, R_CONNECT, err, BC_UNAVAILABLE,
				      "test target %.64s of the fake runtime is not IPv4", hp);
		fd = connect_v4(NULL, &to);
	} else {
		if (parse_v4(tg->guest, 22, &to) < 0)
			return refuse(t, R_NO_ADDRESS, err, BC_INVALID_STATE,
				      "instance %.64s has no IPv4 guest address", id);
		if (!*tg->host || parse_v4(tg->host, 0, &from) < 0)
			return refuse(t, R_NO_ADDRESS, err, BC_INVALID_STATE,
				      "instance %.64s: the spec gives the host no bridge address",
				      id);
		fd = connect_v4(&from, &to);
	}
	if (fd < 0)
		return refuse(t, R_CONNECT, err, BC_UNAVAILABLE,
			      "instance %.64s: its sshd does not answer: %s", id,
			      strerror(-fd));
	return fd;
}

/* The open message's target checked against the spec: fd, or -BC_EDOMAIN. */
static int open_target(struct tunnel_srv *t, const char *id, uint32_t port, bc_error *err)
{
	struct conv_target tg;

	if (port != 22)
		return refuse(t, R_PORT, err, BC_ACCESS_DENIED,
			      "port %u: only port 22 (the instance's sshd) is served", port);
	if (!rt_id_valid(id) || conv_tunnel_target(t->conv, id, &tg) < 0)
		return refuse(t, R_UNKNOWN, err, BC_NOT_FOUND,
			      "instance %.64s is not on this node", id);
	if (strcmp(tg.state, "running") != 0)
		return refuse(t, R_NOT_RUNNING, err, BC_INVALID_STATE,
			      "instance %.64s is not running", id);
	return dial_guest(t, id, &tg, err);
}

/* -------------------------------------------------------------- relay */

struct pump {
	rpc_call *call;
	int fd;
	atomic_bool stop;
};

/* After the controller half-closed: the guest's answer may still flow,
 * but a call that ends (the controller cancelled it, the server stops)
 * must end the guest's side too, or a guest that never answers (gone
 * with its VM, no FIN ever) would hold the tunnel's thread for ever. */
static void watch_call(struct pump *p)
{
	while (!atomic_load(&p->stop))
		if (rpc_call_wait_cancelled(p->call, POLL_MS))
			break;
}

/* controller -> guest, until the controller half-closes, the call ends or
 * the other direction stops it. */
static void *pump_in(void *arg)
{
	struct pump *p = arg;

	while (!atomic_load(&p->stop)) {
		ProtobufCMessage *m = NULL;
		int r = rpc_call_recv(p->call, &m, POLL_MS);
		Bc__Node__V1__TunnelChunk *c = (void *)m;
		bool bad;

		if (r == -ETIMEDOUT)
			continue;
		if (r == 0) {           /* half-closed: passed on */
			shutdown(p->fd, SHUT_WR);
			watch_call(p);
			break;
		}
		if (r < 0)
			break;
		bad = c->open || sock_send_all(p->fd, c->data.data, c->data.len) < 0;
		protobuf_c_message_free_unpacked(m, NULL);
		if (bad)
			break;
	}
	shutdown(p->fd, SHUT_RDWR);     /* ends the other direction's read */
	return NULL;
}

/* guest -> controller on this thread; 0 at the guest's EOF. */
static int pump_out(rpc_call *call, int fd)
{
	Bc__Node__V1__TunnelChunk c = BC__NODE__V1__TUNNEL_CHUNK__INIT;
	uint8_t *buf = xmalloc(TUNNEL_CHUNK_MAX);
	int rc = 0;

	for (;;) {
		ssize_t n = read(fd, buf, TUNNEL_CHUNK_MAX);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		c.data.data = buf;
		c.data.len = (size_t)n;
		if (rpc_call_send(call, &c.base) < 0) {
			rc = -ECANCELED;
			break;
		}
	}
	free(buf);
	return rc;
}

static int tunnel_call(rpc_call *call, bc_error *err)
{
	struct tunnel_srv *t = rpc_call_user(call);
	const Bc__Node__V1__TunnelChunk *first;
	ProtobufCMessage *m = NULL;
	struct pump p = {.call = call};
	pthread_t th;
	char id[RT_ID_MAX + 1];
	int r = rpc_call_recv(call, &m, OPEN_TIMEOUT_MS);

	if (r != 1)
		return refuse(t, R_BAD_OPEN, err, BC_INVALID_INPUT,
			      "the first message must open a tunnel");
	first = (const void *)m;
	if (!first->open) {
		protobuf_c_message_free_unpacked(m, NULL);
		return refuse(t, R_BAD_OPEN, err, BC_INVALID_INPUT,
			      "the first message must carry open");
	}
	snprintf(id, sizeof(id), "%s", first->open->instance_id);
	p.fd = open_target(t, first->open->instance_id, first->open->port, err);
	if (p.fd >= 0)
		log_info("tunnel %.64s: open to %s:22 for the controller (%s)",
			 first->open->tunnel_id, id, rpc_call_peer(call));
	protobuf_c_message_free_unpacked(m, NULL);
	if (p.fd < 0)
		return p.fd;
	atomic_fetch_add(&t->open, 1);
	atomic_fetch_add(&t->total, 1);
	if (pthread_create(&th, NULL, pump_in, &p) != 0) {
		atomic_fetch_sub(&t->open, 1);
		close(p.fd);
		return bc_error_set(err, BC_INTERNAL, "cannot start a thread");
	}
	r = pump_out(call, p.fd);
	atomic_store(&p.stop, true);
	shutdown(p.fd, SHUT_RDWR);
	pthread_join(th, NULL);
	close(p.fd);
	atomic_fetch_sub(&t->open, 1);
	log_info("tunnel to %s:22 closed", id);
	return r < 0 ? bc_error_set(err, BC_UNAVAILABLE, "the controller went away") : 0;
}

/* --------------------------------------------------------- raw protocol */

/* The raw protocol (tunnel.h): TLS, one request line, one answer line,
 * then the bytes. One thread per connection copies guest -> controller,
 * a second one controller -> guest, each with one TUNNEL_CHUNK_MAX
 * buffer and blocking writes: a slow reader stalls the other side
 * through TCP, memory per tunnel stays constant. */

struct rpump {
	struct tlsc *tls;
	int fd;
	atomic_bool stop;
};

/* controller -> guest, until the controller's close_notify (passed on as
 * shutdown SHUT_WR; then until its connection ends), an error, or stop */
static void *rpump_in(void *arg)
{
	struct rpump *p = arg;
	uint8_t *buf = xmalloc(TUNNEL_CHUNK_MAX);

	while (!atomic_load(&p->stop)) {
		ssize_t n = tlsc_read(p->tls, buf, TUNNEL_CHUNK_MAX, POLL_MS);

		if (n == -ETIMEDOUT)
			continue;
		if (n == 0) {
			shutdown(p->fd, SHUT_WR);
			while (!atomic_load(&p->stop) && tlsc_wait_gone(p->tls, POLL_MS) == 0)
				;
			break;
		}
		if (n < 0 || sock_send_all(p->fd, buf, (size_t)n) < 0)
			break;
	}
	free(buf);
	shutdown(p->fd, SHUT_RDWR);     /* ends the other direction's read */
	return NULL;
}

/* The answer line: "OK", or "ERR CODE REASON MESSAGE". */
static void answer(struct tlsc *c, const bc_error *err)
{
	char line[700];
	const char *why;

	if (!err) {
		snprintf(line, sizeof(line), "OK\n");
	} else {
		why = bc_error_get_detail(err, "reason");
		snprintf(line, sizeof(line), "ERR %s %s %s\n", bc_code_name(err->code),
			 why ? why : "-", err->message);
		for (char *q = line; q[1]; q++)
			if (*q == '\n' || *q == '\r')
				*q = ' ';
	}
	tlsc_write_all(c, line, strlen(line));
}

static void rconn_del(struct tunnel_srv *t, struct rconn *rc)
{
	pthread_mutex_lock(&t->mu);
	for (struct rconn **pp = &t->conns; *pp; pp = &(*pp)->next)
		if (*pp == rc) {
			*pp = rc->next;
			break;
		}
	t->threads--;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

/* One connection: the handshake, the checks, the relay. */
static void raw_serve(struct tunnel_srv *t, struct rconn *rc, int sock)
{
	char ebuf[256], cnbuf[128], line[TUNNEL_REQUEST_MAX], id[RT_ID_MAX + 1], tid[80];
	struct rpump p = {0};
	bc_error err = {0};
	const char *cn;
	unsigned port = 0;
	pthread_t th;
	int r;

	struct tlsc *c = NULL;

	if (tlsc_accept(t->ctx, sock, OPEN_TIMEOUT_MS, &c, ebuf, sizeof(ebuf)) < 0) {
		pthread_mutex_lock(&t->mu);
		rc->sock = -1;
		pthread_mutex_unlock(&t->mu);
		atomic_fetch_add(&t->refused[R_HANDSHAKE], 1);
		log_info("tunnel: refused a connection: %s", ebuf);
		return;
	}
	pthread_mutex_lock(&t->mu);
	rc->tls = c;
	rc->sock = -1;
	pthread_mutex_unlock(&t->mu);
	if (atomic_load(&t->stopping)) /* tunnel_stop may have missed it */
		return;
	if (!(cn = tlsc_peer_cn(rc->tls, cnbuf, sizeof(cnbuf)))) {
		refuse(t, R_NO_CERT, &err, BC_UNAUTHENTICATED, "a client certificate is required");
		answer(rc->tls, &err);
		return;
	}
	if (strcmp(cn, TUNNEL_CLIENT_CN) != 0) {
		refuse(t, R_NOT_CONTROLLER, &err, BC_ACCESS_DENIED,
		       "certificate %.64s is not the controller's tunnel client", cn);
		answer(rc->tls, &err);
		return;
	}
	r = tlsc_read_line(rc->tls, line, sizeof(line), OPEN_TIMEOUT_MS);
	if (r < 0 || sscanf(line, TUNNEL_RAW_MAGIC " %64s %u %79s", id, &port, tid) != 3) {
		refuse(t, R_BAD_OPEN, &err, BC_INVALID_INPUT,
		       "the request must be \"" TUNNEL_RAW_MAGIC " INSTANCE PORT TUNNEL\"");
		answer(rc->tls, &err);
		return;
	}
	if (atomic_fetch_add(&t->admitted, 1) >= t->max) {
		atomic_fetch_sub(&t->admitted, 1);
		refuse(t, R_LIMIT, &err, BC_RESOURCE_EXHAUSTED,
		       "tunnels at their limit (tunnel_max = %u)", t->max);
		answer(rc->tls, &err);
		return;
	}
	if ((p.fd = open_target(t, id, port, &err)) < 0) {
		answer(rc->tls, &err);
		atomic_fetch_sub(&t->admitted, 1);
		return;
	}
	pthread_mutex_lock(&t->mu);
	rc->gfd = p.fd;
	pthread_mutex_unlock(&t->mu);
	log_info("tunnel %.64s: open to %s:22 for the controller (%s, raw)", tid, id,
		 tlsc_peer(rc->tls));
	answer(rc->tls, NULL);
	p.tls = rc->tls;
	atomic_fetch_add(&t->open, 1);
	atomic_fetch_add(&t->total, 1);
	if (pthread_create(&th, NULL, rpump_in, &p) == 0) {
		uint8_t *buf = xmalloc(TUNNEL_CHUNK_MAX);
		struct timespec ts;

		/* guest -> controller on this thread; the guest's EOF is
		 * close_notify, then the controller ends the connection */
		for (;;) {
			ssize_t n = read(p.fd, buf, TUNNEL_CHUNK_MAX);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || tlsc_write_all(rc->tls, buf, (size_t)n) < 0)
				break;
		}
		free(buf);
		tlsc_close_write(rc->tls);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += OPEN_TIMEOUT_MS / 1000;
		if (pthread_timedjoin_np(th, NULL, &ts) != 0) {
			atomic_store(&p.stop, true);
			tlsc_cancel(rc->tls);
			pthread_join(th, NULL);
		}
	}
	pthread_mutex_lock(&t->mu);
	rc->gfd = -1;
	pthread_mutex_unlock(&t->mu);
	close(p.fd);
	atomic_fetch_sub(&t->open, 1);
	atomic_fetch_sub(&t->admitted, 1);
	log_info("tunnel to %s:22 closed", id);
}

struct rstart {
	struct tunnel_srv *t;
	struct rconn *rc;
	int sock;
};

static void *raw_thread(void *arg)
{
	struct rstart *s = arg;

	raw_serve(s->t, s->rc, s->sock);
	rconn_del(s->t, s->rc);
	tlsc_free(s->rc->tls);
	free(s->rc);
	free(s);
	return NULL;
}

static void *raw_accept(void *arg)
{
	struct tunnel_srv *t = arg;

	while (!atomic_load(&t->stopping)) {
		struct pollfd pfd = {.fd = t->lfd, .events = POLLIN};
		struct rstart *s;
		pthread_attr_t a;
		pthread_t th;
		int fd;

		if (poll(&pfd, 1, POLL_MS) <= 0)
			continue;
		fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				usleep(100000);
			continue;
		}
		s = xcalloc(1, sizeof(*s));
		s->t = t;
		s->sock = fd;
		s->rc = xcalloc(1, sizeof(*s->rc));
		s->rc->gfd = -1;
		s->rc->sock = fd;
		pthread_mutex_lock(&t->mu);
		s->rc->next = t->conns;
		t->conns = s->rc;
		t->threads++;
		pthread_mutex_unlock(&t->mu);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &a, raw_thread, s) != 0) {
			rconn_del(t, s->rc);
			close(fd);
			free(s->rc);
			free(s);
		}
		pthread_attr_destroy(&a);
	}
	return NULL;
}

static int raw_start(struct tunnel_srv *t, const struct tunnel_opts *o, int *ret_port)
{
	char ebuf[256];

	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->ctx = tlsc_ctx_new(true, o->cert_pem, o->key_pem, o->ca_pem, ebuf, sizeof(ebuf));
	if (!t->ctx) {
		log_error("tunnel: %s", ebuf);
		return -EINVAL;
	}
	if ((t->lfd = tlsc_listen(o->listen, ret_port)) < 0)
		return t->lfd;
	if (pthread_create(&t->acceptor, NULL, raw_accept, t) != 0)
		return -EAGAIN;
	t->accepting = true;
	return 0;
}

/* Every connection ends: the acceptor first, then each relay's sockets. */
static void raw_stop(struct tunnel_srv *t)
{
	atomic_store(&t->stopping, true);
	if (t->accepting)
		pthread_join(t->acceptor, NULL);
	if (t->lfd >= 0)
		close(t->lfd);
	pthread_mutex_lock(&t->mu);
	for (;;) {
		struct timespec ts;

		for (struct rconn *rc = t->conns; rc; rc = rc->next) {
			if (rc->tls)
				tlsc_cancel(rc->tls);
			else if (rc->sock >= 0)
				shutdown(rc->sock, SHUT_RDWR);
			if (rc->gfd >= 0)
				shutdown(rc->gfd, SHUT_RDWR);
		}
		if (t->threads == 0)
			break;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	}
	pthread_mutex_unlock(&t->mu);
	tlsc_ctx_free(t->ctx);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
}

/* ------------------------------------------------------------- server */

int tunnel_start(const struct tunnel_opts *o, struct tunnel_srv **ret, int *ret_port)
{
	static const struct rpc_handler h[] = {{"Tunnel", RPC_BIDI, {.bidi = tunnel_call}}};
	struct rpc_tls tls = {.cert_pem = o->cert_pem, .key_pem = o->key_pem, .ca_pem = o->ca_pem,
			      .request_client_cert = true};
	struct tunnel_srv *t = xcalloc(1, sizeof(*t));
	struct rpc_server_opts so = {.listen = o->listen, .tls = &tls, .workers = 2,
				     .max_streams = (int)o->max + 8,
				     .max_message_bytes = MAX_MESSAGE, .user = t,
				     .stream_window_bytes = WINDOW_BYTES,
				     .pre_call = pre_call, .stream_admit = stream_admit,
				     .stream_done = stream_done};
	int e = 0;

	t->conv = o->conv;
	t->state_dir = xstrdup(o->state_dir);
	t->fake = o->fake;
	t->max = o->max;
	t->lfd = -1;
	t->raw = o->raw;
	if (o->raw) {
		if ((e = raw_start(t, o, ret_port)) < 0) {
			log_error("tunnel: cannot serve the raw tunnel protocol on %s: %s", o->listen,
				  strerror(-e));
			tunnel_stop(t);
			return e;
		}
		*ret = t;
		return 0;
	}
	t->srv = rpc_server_new(&so, &e);
	if (!t->srv)
		e = -(e ? e : EINVAL);
	else if ((e = rpc_server_add_service(t->srv, &bc__node__v1__agent__descriptor, h, 1)) == 0)
		e = rpc_server_start(t->srv, ret_port);
	if (e < 0) {
		log_error("tunnel: cannot serve Agent.Tunnel on %s: %s", o->listen, strerror(-e));
		tunnel_stop(t);
		return e;
	}
	*ret = t;
	return 0;
}

void tunnel_stop(struct tunnel_srv *t)
{
	if (!t)
		return;
	if (t->raw)
		raw_stop(t);
	rpc_server_free(t->srv, 1000);
	free(t->state_dir);
	free(t);
}

void tunnel_metrics_render(FILE *out, struct tunnel_srv *t)
{
	metrics_head(out, "bcd_tunnels_open", "gauge",
		     "Agent.Tunnel relays open now (controller to an instance's sshd)");
	metrics_line(out, "bcd_tunnels_open", NULL, t ? (double)atomic_load(&t->open) : 0);
	if (!t)
		return;
	metrics_head(out, "bcd_tunnels_total", "counter", "Agent.Tunnel relays opened");
	metrics_line(out, "bcd_tunnels_total", NULL, (double)atomic_load(&t->total));
	metrics_head(out, "bcd_tunnels_refused_total", "counter",
		     "Agent.Tunnel calls refused, by reason");
	for (int i = 0; i < R_COUNT; i++) {
		char label[64];
		snprintf(label, sizeof(label), "reason=\"%s\"", refusal_names[i]);
		metrics_line(out, "bcd_tunnels_refused_total", label,
			     (double)atomic_load(&t->refused[i]));
	}
}
