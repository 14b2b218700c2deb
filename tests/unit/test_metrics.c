/* test_metrics.c: common/metrics.c under clients that hold its connections
 * (issue 12, item 13): one that asks for a large page and never reads it,
 * some that connect and send nothing, one that sends half a request. While
 * they are held, another client gets the whole page within 10 s. A bare
 * ":port" listens on loopback. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "metrics.h"
#include "tap.h"
#include "util.h"

#define PAGE_LINES 200000 /* about 5 MiB: more than any socket buffers */

static void render_big(FILE *out, void *arg)
{
	(void)arg;
	metrics_head(out, "t_big", "gauge", "a large page");
	for (int i = 0; i < PAGE_LINES; i++)
		fprintf(out, "t_big{i=\"%d\"} %d\n", i, i);
}

static int dial(int port, int rcvbuf)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 2};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0) /* a connect that the backlog cannot take fails in 2 s */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (fd >= 0 && rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int send_str(int fd, const char *s)
{
	return send(fd, s, strlen(s), MSG_NOSIGNAL) == (ssize_t)strlen(s) ? 0 : -1;
}

/* Read the whole answer (until EOF) within timeout_ms: its length, or -1. */
static ssize_t read_all(int fd, int timeout_ms, bool *ret_ends)
{
	int64_t end = mono_ms() + timeout_ms;
	char buf[65536], tail[32] = "";
	ssize_t total = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = end - mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -1;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		if (n >= 16)
			memcpy(tail, buf + n - 16, 16);
		total += n;
	}
	*ret_ends = strstr(tail, "} 199999\n") != NULL;
	return total;
}

int main(void)
{
	int port = 0, err = 0, hog, silent[40], partial, good;
	metrics_srv *m = metrics_serve(":0", render_big, NULL, &port, &err);
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	bool ends = false;
	ssize_t got;

	ok(m != NULL, "metrics_serve(\":0\") serves (%s)", strerror(err));
	if (!m) {
		done_testing();
	}
	{
		int probe = dial(port, 0);

		ok(probe >= 0 && getsockname(probe, (struct sockaddr *)&a, &al) == 0 &&
			   ntohl(a.sin_addr.s_addr) == INADDR_LOOPBACK,
		   "a bare :port listens on loopback");
		if (probe >= 0)
			close(probe);
	}
	hog = dial(port, 4096);
	ok(hog >= 0 && send_str(hog, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == 0,
	   "a client asks for a 5 MiB page and never reads it");
	usleep(300 * 1000); /* let the server start writing to it */
	for (size_t i = 0; i < ARRAY_SIZE(silent); i++)
		silent[i] = dial(port, 0);
	{
		int n = 0;

		for (size_t i = 0; i < ARRAY_SIZE(silent); i++)
			n += silent[i] >= 0;
		ok(n >= 10, "clients connect and send nothing (%d of 40 connected)", n);
	}
	partial = dial(port, 0);
	ok(partial >= 0 && send_str(partial, "GET /metr") == 0, "one sends half a request head");

	good = dial(port, 0);
	ok(good >= 0 && send_str(good, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == 0,
	   "another client asks for /metrics");
	got = good >= 0 ? read_all(good, 10000, &ends) : -1;
	ok(got > (ssize_t)PAGE_LINES * 10 && ends,
	   "... and gets the whole page within 10 s (%zd bytes)", got);

	for (size_t i = 0; i < ARRAY_SIZE(silent); i++)
		if (silent[i] >= 0)
			close(silent[i]);
	if (partial >= 0)
		close(partial);
	if (good >= 0)
		close(good);
	if (hog >= 0)
		close(hog);
	metrics_stop(m);
	ok(1, "metrics_stop returns with the clients gone");
	done_testing();
}
