/* metrics.c: GET /metrics over plain HTTP/1.x from one thread. Requests are
 * small and rare (a scraper every few seconds), so the thread serves one
 * connection at a time with short timeouts; anything but GET /metrics is
 * 404, a request head over 8 KiB or slower than 2 s is dropped. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define HEAD_MAX 8192
#define READ_TIMEOUT_MS 2000

struct metrics_srv {
	int fd;
	volatile bool stop;
	pthread_t thread;
	metrics_render_fn fn;
	void *arg;
};

static int split_listen(const char *listen, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(listen, ':');

	if (!colon || colon == listen)
		return -EINVAL;
	if (listen[0] == '[') {
		if (colon[-1] != ']')
			return -EINVAL;
		snprintf(host, hlen, "%.*s", (int)(colon - listen - 2), listen + 1);
	} else {
		snprintf(host, hlen, "%.*s", (int)(colon - listen), listen);
	}
	snprintf(port, plen, "%s", colon + 1);
	return 0;
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
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0 ||
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

/* Read until the blank line ending the head; false on timeout or overflow. */
static bool read_head(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	int64_t end = mono_ms() + READ_TIMEOUT_MS;

	while (len + 1 < cap) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(end - mono_ms());
		ssize_t n;
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return false;
		n = read(fd, buf + len, cap - 1 - len);
		if (n <= 0)
			return false;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return true;
	}
	return false;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void serve_one(struct metrics_srv *m, int fd)
{
	char head[HEAD_MAX], hdr[160];
	char *body = NULL;
	size_t blen = 0;
	FILE *out;

	if (!read_head(fd, head, sizeof(head)))
		return;
	if (strncmp(head, "GET /metrics ", 13) != 0 && strncmp(head, "GET /metrics?", 13) != 0) {
		static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n"
					 "Connection: close\r\n\r\nnot found\n";
		write_all(fd, nf, sizeof(nf) - 1);
		return;
	}
	out = open_memstream(&body, &blen);
	if (!out)
		return;
	m->fn(out, m->arg);
	fclose(out);
	snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n", blen);
	write_all(fd, hdr, strlen(hdr));
	write_all(fd, body, blen);
	free(body);
}

static void *metrics_thread(void *arg)
{
	struct metrics_srv *m = arg;

	while (!m->stop) {
		struct pollfd p = {.fd = m->fd, .events = POLLIN};
		int c;
		if (poll(&p, 1, 200) <= 0)
			continue;
		c = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		serve_one(m, c);
		close(c);
	}
	return NULL;
}

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
