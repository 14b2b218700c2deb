/* guestsig.c: the guest-up signal's listener (see guestsig.h).
 *
 * One thread, one poll loop, everything non-blocking: the listening
 * socket (bound to the spec's gateway with IP_FREEBIND, so it does not
 * depend on the bridge's address being up yet; re-bound when the gateway
 * changes), at most GS_CONNS connections with a GS_REQUEST_MAX buffer each
 * (closed after one request or 2 s), and at most GS_PROBES ssh checks in
 * flight (a non-blocking connect from the gateway address to guest:22,
 * retried every second, GS_PROBE_TRIES times). Nothing here blocks on a
 * guest. */
#include "guestsig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "converge.h"
#include "guest_ready.h"
#include "guestready.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define GS_CONNS 8
#define GS_PROBES 16
#define GS_CONN_MS 2000
#define GS_PROBE_TRIES 10
#define GS_PROBE_MS 1000      /* one connect's bound, and the pause between tries */
#define GS_REBIND_MS 1000
#define GS_LOGGED 256

static const char *const result_names[GS_RESULTS] = {
	"accepted", "malformed", "unknown-source", "other-instance", "early", "repeated", "no-ssh"};

const char *gs_result_name(enum gs_result r)
{
	return r < GS_RESULTS ? result_names[r] : "?";
}

/* ------------------------------------------------------- pure parts */

static bool id_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '-';
}

int gs_parse(const char *buf, size_t len, char id[RT_ID_MAX + 1])
{
	static const char method[] = "POST " BC_GUEST_READY_PATH;
	const size_t ml = sizeof(method) - 1;
	const char *end = NULL, *p;
	size_t k = 0, line;

	/* what is there must be able to start a valid request */
	if (memcmp(buf, method, len < ml ? len : ml) != 0)
		return -1;
	for (size_t i = ml; i < len && i - ml <= RT_ID_MAX && buf[i] != ' '; i++)
		if (!id_char(buf[i]) || i - ml == RT_ID_MAX)
			return -1;
	for (size_t i = 0; i + 1 < len && !end; i++) {
		if (buf[i] == '\0')
			return -1;
		if (buf[i] == '\n' && buf[i + 1] == '\n')
			end = buf + i;
		else if (i + 3 < len && memcmp(buf + i, "\r\n\r\n", 4) == 0)
			end = buf + i;
	}
	if (!end)
		return len >= GS_REQUEST_MAX ? -1 : 0;
	line = strcspn(buf, "\r\n");
	p = buf + ml;
	while (p < buf + line && id_char(*p) && k < RT_ID_MAX)
		id[k++] = *p++;
	id[k] = '\0';
	if (k == 0 || p >= buf + line || *p != ' ')
		return -1;
	p++;
	if (buf + line - p != 8 || strncmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1'))
		return -1;
	return 1;
}

/* addr as bytes (16 for both families, v4 as v4-mapped); false if neither */
static bool addr_bytes(const char *a, unsigned char out[16])
{
	struct in_addr v4;

	if (a && inet_pton(AF_INET6, a, out) == 1)
		return true;
	if (!a || inet_pton(AF_INET, a, &v4) != 1)
		return false;
	memset(out, 0, 10);
	out[10] = out[11] = 0xff;
	memcpy(out + 12, &v4, 4);
	return true;
}

const struct gs_addr *gs_source(const struct gs_addr *v, size_t n, const char *src)
{
	unsigned char s[16], a[16];
	const struct gs_addr *who = NULL;

	if (!addr_bytes(src, s))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (!addr_bytes(v[i].addr, a) || memcmp(a, s, 16) != 0)
			continue;
		if (who && strcmp(who->id, v[i].id) != 0)
			return NULL;   /* two instances claim it */
		who = &v[i];
	}
	return who;
}

enum gs_result gs_attribute(const struct gs_addr *v, size_t n, const char *src, const char *id,
			    bool marked)
{
	const struct gs_addr *who = gs_source(v, n, src);

	if (!who)
		return GS_UNKNOWN_SOURCE;
	if (strcmp(who->id, id) != 0)
		return GS_OTHER_INSTANCE;
	if (strcmp(who->state, "running") != 0)
		return GS_EARLY;
	return marked ? GS_REPEATED : GS_ACCEPTED;
}

bool gs_source_instance(struct conv *c, const char *src, char ret_id[RT_ID_MAX + 1],
			char ret_gw[64])
{
	struct conv_guest *cg = NULL;
	const struct gs_addr *who;
	struct gs_addr *v;
	size_t n = 0;
	char gw[64];

	conv_guests(c, gw, &cg, &n);
	v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = (struct gs_addr){cg[i].id, cg[i].addr, cg[i].state};
	who = gs_source(v, n, src);
	if (who)
		snprintf(ret_id, RT_ID_MAX + 1, "%s", who->id);
	if (ret_gw)
		snprintf(ret_gw, 64, "%s", gw);
	free(v);
	free(cg);
	return who != NULL;
}

/* --------------------------------------------------------- the thread */

struct conn {
	int fd;
	size_t len;
	int64_t deadline;
	char src[INET6_ADDRSTRLEN];
	char buf[GS_REQUEST_MAX];
};

struct probe {
	bool used;
	int fd;               /* -1: waiting for next_at */
	int tries;
	int64_t next_at, deadline;
	char id[RT_ID_MAX + 1];
	struct sockaddr_in guest;
};

struct logged {
	char id[RT_ID_MAX + 1];
	enum gs_result r;
};

struct guestsig {
	struct gs_opts o;
	pthread_t th;
	int wake[2];
	atomic_bool stop;
	atomic_ullong counts[GS_RESULTS];
	/* the thread's own */
	int lfd;
	char bound[64];        /* the gateway lfd is bound to ("" none) */
	int bind_err;          /* the last bind error logged (0 none) */
	int64_t rebind_at;
	struct in_addr gw;
	struct conn conns[GS_CONNS];
	struct probe probes[GS_PROBES];
	struct logged logged[GS_LOGGED];
	size_t n_logged, next_logged;
};

/* Count r for id; log the first of each (instance, result). */
static void count(struct guestsig *g, enum gs_result r, const char *id, const char *src)
{
	atomic_fetch_add(&g->counts[r], 1);
	for (size_t i = 0; i < g->n_logged; i++)
		if (g->logged[i].r == r && strcmp(g->logged[i].id, id) == 0)
			return;
	snprintf(g->logged[g->next_logged].id, sizeof(g->logged[0].id), "%s", id);
	g->logged[g->next_logged].r = r;
	g->next_logged = (g->next_logged + 1) % GS_LOGGED;
	if (g->n_logged < GS_LOGGED)
		g->n_logged++;
	if (r == GS_ACCEPTED)
		log_info("instance %s: guest up (signal from %s, sshd answers)", id, src);
	else
		log_warn("guest-up signal from %s for %s ignored: %s (counted; logged once)", src,
			 *id ? id : "?", gs_result_name(r));
}

static void reply(int fd, int code, const char *text)
{
	char b[128];
	int n = snprintf(b, sizeof(b), "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			 code, text);

	/* non-blocking, a few bytes into an empty socket buffer */
	if (send(fd, b, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		return;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

static bool probing(struct guestsig *g, const char *id)
{
	for (size_t i = 0; i < GS_PROBES; i++)
		if (g->probes[i].used && strcmp(g->probes[i].id, id) == 0)
			return true;
	return false;
}

static struct probe *probe_new(struct guestsig *g)
{
	for (size_t i = 0; i < GS_PROBES; i++)
		if (!g->probes[i].used)
			return &g->probes[i];
	return NULL;
}

/* A whole request on c: attribute it, answer, start the ssh check. */
static void handle(struct guestsig *g, struct conn *c, const char *id)
{
	struct conv_guest *cg = NULL;
	struct gs_addr *v;
	size_t n = 0;
	char gw[64];
	enum gs_result r;
	struct probe *p;

	conv_guests(g->o.conv, gw, &cg, &n);
	v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = (struct gs_addr){cg[i].id, cg[i].addr, cg[i].state};
	r = gs_attribute(v, n, c->src, id, probing(g, id) || gr_get(g->o.gr, id) != 0);
	free(v);
	free(cg);
	if (r != GS_ACCEPTED) {
		static const int codes[GS_RESULTS] = {204, 400, 403, 403, 425, 409, 503};
		static const char *const texts[GS_RESULTS] = {"No Content", "Bad Request", "Forbidden",
							      "Forbidden", "Too Early", "Conflict",
							      "Service Unavailable"};
		reply(c->fd, codes[r], texts[r]);
		count(g, r, id, c->src);
		return;
	}
	if (!(p = probe_new(g))) {
		reply(c->fd, 503, "Service Unavailable");   /* the guest tries again */
		return;
	}
	*p = (struct probe){.used = true, .fd = -1, .next_at = mono_ms()};
	snprintf(p->id, sizeof(p->id), "%s", id);
	p->guest.sin_family = AF_INET;
	p->guest.sin_port = htons(g->o.ssh_port ? g->o.ssh_port : 22);
	if (inet_pton(AF_INET, c->src, &p->guest.sin_addr) != 1) {
		/* an IPv6 source: the listener serves IPv4 only, so not reached */
		p->used = false;
		reply(c->fd, 403, "Forbidden");
		count(g, GS_UNKNOWN_SOURCE, id, c->src);
		return;
	}
	reply(c->fd, 204, "No Content");
}

static void conn_read(struct guestsig *g, struct conn *c)
{
	char id[RT_ID_MAX + 1] = "";
	ssize_t k = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT);
	int r;

	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		if (c->len > 0)
			count(g, GS_MALFORMED, "", c->src);
		conn_close(c);
		return;
	}
	c->len += (size_t)k;
	r = gs_parse(c->buf, c->len, id);
	if (r == 0)
		return;
	if (r < 0) {
		reply(c->fd, 400, "Bad Request");
		count(g, GS_MALFORMED, "", c->src);
	} else {
		handle(g, c, id);
	}
	shutdown(c->fd, SHUT_WR);
	conn_close(c);
}

static void do_accept(struct guestsig *g)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(g->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct conn *c = NULL;

	if (fd < 0)
		return;
	for (size_t i = 0; i < GS_CONNS && !c; i++)
		if (g->conns[i].fd < 0)
			c = &g->conns[i];
	if (!c) {   /* a handful at most: the rest are closed at once */
		close(fd);
		return;
	}
	c->fd = fd;
	c->len = 0;
	c->deadline = mono_ms() + GS_CONN_MS;
	c->src[0] = '\0';
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->src, sizeof(c->src));
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->src, sizeof(c->src));
}

static void unbind(struct guestsig *g)
{
	if (g->lfd >= 0)
		close(g->lfd);
	g->lfd = -1;
	g->bound[0] = '\0';
}

int gs_listen(const char *gw, uint16_t port, struct in_addr *ret_addr)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, fd, e = 0;

	if (!gw || !*gw || inet_pton(AF_INET, gw, &sa.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0)
		e = errno;
	if (e) {
		if (fd >= 0)
			close(fd);
		return -e;
	}
	*ret_addr = sa.sin_addr;
	return fd;
}

/* Follow the spec's gateway: (re)bind when it changed or the last bind
 * failed. */
static void rebind(struct guestsig *g)
{
	struct conv_guest *cg = NULL;
	uint16_t port = g->o.port ? g->o.port : BC_GUEST_READY_PORT;
	size_t n = 0;
	char gw[64];
	int fd;

	if (mono_ms() < g->rebind_at)
		return;
	g->rebind_at = mono_ms() + GS_REBIND_MS;
	conv_guests(g->o.conv, gw, &cg, &n);
	free(cg);
	if (g->lfd >= 0 && strcmp(gw, g->bound) == 0)
		return;
	unbind(g);
	if (!*gw)
		return;
	if ((fd = gs_listen(gw, port, &g->gw)) < 0) {
		if (fd != -g->bind_err)
			log_warn("guest-up signal: cannot listen on %s:%d: %s (retrying)", gw, port,
				 strerror(-fd));
		g->bind_err = -fd;
		return;
	}
	g->bind_err = 0;
	g->lfd = fd;
	snprintf(g->bound, sizeof(g->bound), "%s", gw);
	log_info("guest-up signal: listening on %s:%d", gw, port);
}

static void probe_done(struct guestsig *g, struct probe *p, bool up)
{
	char src[INET_ADDRSTRLEN] = "";

	inet_ntop(AF_INET, &p->guest.sin_addr, src, sizeof(src));
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	if (up) {
		int e = gr_mark(g->o.gr, p->id, now_ms());

		if (e == 0) {
			/* gr's notify asks for a pass: a warm instance waits for this */
			count(g, GS_ACCEPTED, p->id, src);
		} else if (e == -EALREADY) {
			count(g, GS_REPEATED, p->id, src);
		} else {
			log_warn("instance %s: cannot record that the guest is up: %s", p->id,
				 strerror(-e));
		}
		p->used = false;
		return;
	}
	log_debug("instance %s: guest's port %d does not answer yet (try %d)", p->id,
		  ntohs(p->guest.sin_port), p->tries + 1);
	if (++p->tries >= GS_PROBE_TRIES) {
		count(g, GS_NO_SSH, p->id, src);
		p->used = false;
		return;
	}
	p->next_at = mono_ms() + GS_PROBE_MS;
}

static void probe_start(struct guestsig *g, struct probe *p)
{
	struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr = g->gw};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	p->deadline = mono_ms() + GS_PROBE_MS;
	if (fd < 0) {
		probe_done(g, p, false);
		return;
	}
	p->fd = fd;
	/* from the gateway address: a guest that takes ssh only from its
	 * host (ssh_from_host_only) takes it from there */
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    (connect(fd, (struct sockaddr *)&p->guest, sizeof(p->guest)) < 0 &&
	     errno != EINPROGRESS)) {
		probe_done(g, p, false);
		return;
	}
}

static void probe_check(struct guestsig *g, struct probe *p)
{
	int err = 0;
	socklen_t el = sizeof(err);

	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	probe_done(g, p, err == 0);
}

static void *run(void *arg)
{
	struct guestsig *g = arg;
	struct pollfd pf[2 + GS_CONNS + GS_PROBES];
	void *who[2 + GS_CONNS + GS_PROBES];

	while (!atomic_load(&g->stop)) {
		int64_t now = mono_ms(), wait = 250;
		size_t n = 0;

		rebind(g);
		pf[n] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
		who[n++] = NULL;
		if (g->lfd >= 0) {
			pf[n] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
			who[n++] = g;
		}
		for (size_t i = 0; i < GS_CONNS; i++) {
			struct conn *c = &g->conns[i];

			if (c->fd < 0)
				continue;
			if (now >= c->deadline) {
				count(g, GS_MALFORMED, "", c->src);
				conn_close(c);
				continue;
			}
			pf[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
			who[n++] = c;
		}
		for (size_t i = 0; i < GS_PROBES; i++) {
			struct probe *p = &g->probes[i];

			if (!p->used)
				continue;
			if (p->fd < 0 && now >= p->next_at && g->lfd >= 0)
				probe_start(g, p);
			else if (p->fd >= 0 && now >= p->deadline)
				probe_done(g, p, false);
			if (!p->used)
				continue;
			if (p->fd >= 0) {
				pf[n] = (struct pollfd){.fd = p->fd, .events = POLLOUT};
				who[n++] = p;
			} else if (p->next_at - now < wait) {
				wait = p->next_at - now < 0 ? 0 : p->next_at - now;
			}
		}
		if (poll(pf, n, (int)wait) <= 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (!pf[i].revents)
				continue;
			if (!who[i]) {
				char b[16];
				while (read(g->wake[0], b, sizeof(b)) > 0)
					;
			} else if (who[i] == g) {
				do_accept(g);
			} else if (pf[i].events == POLLOUT) {
				probe_check(g, who[i]);
			} else {
				conn_read(g, who[i]);
			}
		}
	}
	return NULL;
}

int gs_start(const struct gs_opts *o, struct guestsig **ret)
{
	struct guestsig *g = xcalloc(1, sizeof(*g));
	int e;

	g->o = *o;
	g->lfd = -1;
	for (size_t i = 0; i < GS_CONNS; i++)
		g->conns[i].fd = -1;
	if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
		e = -errno;
		free(g);
		return e;
	}
	if ((e = pthread_create(&g->th, NULL, run, g)) != 0) {
		close(g->wake[0]);
		close(g->wake[1]);
		free(g);
		return -e;
	}
	*ret = g;
	return 0;
}

void gs_stop(struct guestsig *g)
{
	if (!g)
		return;
	atomic_store(&g->stop, true);
	if (write(g->wake[1], "x", 1) < 0)
		log_debug("guest-up signal: wake: %s", strerror(errno));
	pthread_join(g->th, NULL);
	for (size_t i = 0; i < GS_CONNS; i++)
		conn_close(&g->conns[i]);
	for (size_t i = 0; i < GS_PROBES; i++)
		if (g->probes[i].used && g->probes[i].fd >= 0)
			close(g->probes[i].fd);
	unbind(g);
	close(g->wake[0]);
	close(g->wake[1]);
	free(g);
}

uint64_t gs_count(struct guestsig *g, enum gs_result r)
{
	return g && r < GS_RESULTS ? atomic_load(&g->counts[r]) : 0;
}

void gs_metrics_render(FILE *out, struct guestsig *g)
{
	if (!g)
		return;
	metrics_head(out, "bcd_guest_ready_signals_total", "counter",
		     "guest-up signals by result (accepted: the instance was marked up)");
	for (int r = 0; r < GS_RESULTS; r++) {
		char label[48];

		snprintf(label, sizeof(label), "result=\"%s\"", result_names[r]);
		metrics_line(out, "bcd_guest_ready_signals_total", label,
			     (double)atomic_load(&g->counts[r]));
	}
}
