/* metrics.c: GET /metrics over plain HTTP/1.x from one thread. Requests are
 * small and rare (a scraper every few seconds), but a client that connects
 * and sends nothing, sends its head slowly or never reads the answer must
 * not keep the page from the next scraper: the thread polls up to
 * MAX_CONNS non-blocking connections at once, each with a deadline (its
 * head within READ_TIMEOUT_MS of the connect, its answer within
 * WRITE_TIMEOUT_MS of the head); when every slot is taken, the oldest
 * connection still sending its head is dropped for the new one. Anything
 * but GET /metrics is 404; a head over 8 KiB is dropped. An address
 * without a host (":9464") listens on loopback. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define HEAD_MAX 8192
#define READ_TIMEOUT_MS 2000
#define WRITE_TIMEOUT_MS 5000
#define MAX_CONNS 32
#define TICK_MS 200

/* One client: reading its head (out == NULL), then writing out. */
struct mconn {
	int fd;                     /* -1: free slot */
	int64_t since, deadline;
	size_t len;
	char head[HEAD_MAX];
	char *out;
	size_t out_len, out_off;
};

struct metrics_srv {
	int fd;
	atomic_bool stop;
	pthread_t thread;
	metrics_render_fn fn;
	void *arg;
	struct mconn conns[MAX_CONNS];
};

/* "host:port", "[v6]:port"; no host (":port", "port"): loopback. */
static int split_listen(const char *listen, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(listen, ':');

	if (!colon) {
		snprintf(host, hlen, "127.0.0.1");
		snprintf(port, plen, "%s", listen);
		return *listen ? 0 : -EINVAL;
	}
	if (colon == listen) {
		snprintf(host, hlen, "127.0.0.1");
	} else if (listen[0] == '[') {
		if (colon[-1] != ']')
			return -EINVAL;
		snprintf(host, hlen, "%.*s", (int)(colon - listen - 2), listen + 1);
	} else {
		snprintf(host, hlen, "%.*s", (int)(colon - listen), listen);
	}
	snprintf(port, plen, "%s", colon + 1);
	return colon[1] ? 0 : -EINVAL;
}

static int bind_listen(const char *addr, int *ret_port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[128], port[16];
	int fd, one = 1, r;

	if ((r = split_listen(addr, host, sizeof(host), port, sizeof(port))) < 0)
		return r;
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	*ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						    : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static void conn_close(struct mconn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	c->out = NULL;
	c->fd = -1;
}

/* The answer to a complete head, into c->out. */
static void respond(struct metrics_srv *m, struct mconn *c)
{
	static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n"
				 "Connection: close\r\n\r\nnot found\n";
	char *body = NULL;
	size_t blen = 0;
	FILE *out;

	c->deadline = mono_ms() + WRITE_TIMEOUT_MS;
	if (strncmp(c->head, "GET /metrics ", 13) != 0 && strncmp(c->head, "GET /metrics?", 13) != 0) {
		c->out = xstrdup(nf);
		c->out_len = sizeof(nf) - 1;
		return;
	}
	out = open_memstream(&body, &blen);
	if (!out) {
		conn_close(c);
		return;
	}
	m->fn(out, m->arg);
	fclose(out);
	c->out = xasprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
			   "Content-Length: %zu\r\nConnection: close\r\n\r\n%.*s",
			   blen, (int)blen, body);
	c->out_len = strlen(c->out);
	free(body);
}

/* Read what the client sent; answer once the head is complete. */
static void conn_read(struct metrics_srv *m, struct mconn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, c->head + c->len, sizeof(c->head) - 1 - c->len, 0);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		c->len += (size_t)n;
		c->head[c->len] = '\0';
		if (strstr(c->head, "\r\n\r\n") || strstr(c->head, "\n\n")) {
			respond(m, c);
			return;
		}
		if (c->len + 1 >= sizeof(c->head)) {
			conn_close(c);
			return;
		}
	}
}

/* Write what the socket takes; close once all is written. */
static void conn_write(struct mconn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (w <= 0)
			break;
		c->out_off += (size_t)w;
	}
	conn_close(c);
}

/* A free slot, or the one of the oldest connection still reading its head
 * (closed), or NULL when every slot is writing an answer. */
static struct mconn *slot_take(struct metrics_srv *m)
{
	struct mconn *oldest = NULL;

	for (size_t i = 0; i < MAX_CONNS; i++) {
		struct mconn *c = &m->conns[i];

		if (c->fd < 0)
			return c;
		if (!c->out && (!oldest || c->since < oldest->since))
			oldest = c;
	}
	if (oldest)
		conn_close(oldest);
	return oldest;
}

static void accept_one(struct metrics_srv *m)
{
	struct mconn *c;
	int fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	c = slot_take(m);
	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	c->len = c->out_len = c->out_off = 0;
	c->since = mono_ms();
	c->deadline = c->since + READ_TIMEOUT_MS;
}

static void *metrics_thread(void *arg)
{
	struct metrics_srv *m = arg;

	while (!m->stop) {
		struct pollfd p[MAX_CONNS + 1] = {{.fd = m->fd, .events = POLLIN}};
		int64_t now = mono_ms();

		for (size_t i = 0; i < MAX_CONNS; i++) {
			struct mconn *c = &m->conns[i];

			if (c->fd >= 0 && now >= c->deadline)
				conn_close(c);
			p[i + 1].fd = c->fd;
			p[i + 1].events = c->out ? POLLOUT : POLLIN;
		}
		if (poll(p, MAX_CONNS + 1, TICK_MS) <= 0)
			continue;
		for (size_t i = 0; i < MAX_CONNS; i++) {
			struct mconn *c = &m->conns[i];

			if (c->fd < 0 || !p[i + 1].revents)
				continue;
			if (!c->out)
				conn_read(m, c);
			if (c->fd >= 0 && c->out)
				conn_write(c);
		}
		if (p[0].revents)
			accept_one(m);
	}
	for (size_t i = 0; i < MAX_CONNS; i++)
		conn_close(&m->conns[i]);
	return NULL;
}

/* See metrics.h. */
metrics_srv *metrics_serve(const char *addr, metrics_render_fn fn, void *arg, int *ret_port,
			   int *ret_errno)
{
	struct metrics_srv *m;
	int port = 0, fd = bind_listen(addr, &port);

	if (fd < 0) {
		if (ret_errno)
			*ret_errno = -fd;
		return NULL;
	}
	m = xcalloc(1, sizeof(*m));
	m->fd = fd;
	m->fn = fn;
	m->arg = arg;
	for (size_t i = 0; i < MAX_CONNS; i++)
		m->conns[i].fd = -1;
	if (pthread_create(&m->thread, NULL, metrics_thread, m) != 0) {
		close(fd);
		free(m);
		if (ret_errno)
			*ret_errno = EAGAIN;
		return NULL;
	}
	if (ret_port)
		*ret_port = port;
	return m;
}
void metrics_stop(metrics_srv *m)
{
	if (!m)
		return;
	m->stop = true;
	pthread_join(m->thread, NULL);
	close(m->fd);
	free(m);
}

void metrics_head(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_line(FILE *out, const char *name, const char *labels, double value)
{
	if (labels && *labels)
		fprintf(out, "%s{%s} %.17g\n", name, labels, value);
	else
		fprintf(out, "%s %.17g\n", name, value);
}
