/* sandbox_run.c: the captured standard streams of a command that
 * `bcctl mcp` runs in a sandbox (run_command, write_file, read_file). The
 * session itself is sandbox exec's (sandbox_exec.c: the grant, the
 * listener, stock ssh, the relay); here ssh gets three pipes instead of
 * the terminal, and one thread feeds its stdin, keeps the first cap bytes
 * of its stdout and stderr (draining the rest, flagged), and ends ssh with
 * SIGTERM when the deadline passes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

#define PUMP_CHUNK 65536

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int cli_capture_actions(struct cli_capture *c, posix_spawn_file_actions_t *fa)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		int e = -errno;

		for (int i = 0; i < 2; i++) {
			close_fd(&in[i]);
			close_fd(&out[i]);
			close_fd(&err[i]);
		}
		return e;
	}
	posix_spawn_file_actions_init(fa);
	posix_spawn_file_actions_adddup2(fa, in[0], 0);
	posix_spawn_file_actions_adddup2(fa, out[1], 1);
	posix_spawn_file_actions_adddup2(fa, err[1], 2);
	c->child[0] = in[0];
	c->child[1] = out[1];
	c->child[2] = err[1];
	c->fd[0] = in[1];
	c->fd[1] = out[0];
	c->fd[2] = err[0];
	fcntl(c->fd[0], F_SETFL, O_NONBLOCK);
	return 0;
}

/* Keep the first cap bytes of what fd has, drop the rest. 0 at EOF. */
static ssize_t take(int fd, uint8_t **buf, size_t *len, bool *trunc, size_t cap)
{
	uint8_t chunk[PUMP_CHUNK];
	ssize_t n = read(fd, chunk, sizeof(chunk));
	size_t keep;

	if (n <= 0)
		return n < 0 && errno == EINTR ? 1 : n;
	keep = *len < cap ? cap - *len : 0;
	if ((size_t)n < keep)
		keep = (size_t)n;
	if (keep) {
		*buf = xrealloc(*buf, *len + keep);
		memcpy(*buf + *len, chunk, keep);
		*len += keep;
	}
	if ((size_t)n > keep)
		*trunc = true;
	return n;
}

static void feed(struct cli_capture *c)
{
	ssize_t n = write(c->fd[0], c->in + c->in_off, c->in_len - c->in_off);

	if (n > 0)
		c->in_off += (size_t)n;
	if ((n < 0 && errno != EAGAIN && errno != EINTR) || c->in_off == c->in_len)
		close_fd(&c->fd[0]);
}

static void *pump(void *arg)
{
	struct cli_capture *c = arg;
	struct mcp_exec_out *o = c->out;

	if (c->in_len == 0)
		close_fd(&c->fd[0]);
	while (c->fd[1] >= 0 || c->fd[2] >= 0) {
		struct pollfd p[3] = {{.fd = c->fd[0], .events = POLLOUT},
				      {.fd = c->fd[1], .events = POLLIN},
				      {.fd = c->fd[2], .events = POLLIN}};
		int64_t left = deadline_left(c->deadline);

		if (left <= 0 && !o->timed_out) {
			o->timed_out = true;
			kill(c->pid, SIGTERM);
			close_fd(&c->fd[0]);
		}
		if (poll(p, 3, left > 0 ? (int)(left < 1000 ? left : 1000) : 1000) <= 0)
			continue;
		if (p[0].revents)
			feed(c);
		if (p[1].revents && take(c->fd[1], &o->out, &o->out_len, &o->out_trunc, c->cap) <= 0)
			close_fd(&c->fd[1]);
		if (p[2].revents && take(c->fd[2], &o->err, &o->err_len, &o->err_trunc, c->cap) <= 0)
			close_fd(&c->fd[2]);
	}
	close_fd(&c->fd[0]);
	return NULL;
}

int cli_capture_start(struct cli_capture *c, pid_t pid)
{
	for (int i = 0; i < 3; i++)
		close_fd(&c->child[i]);
	c->pid = pid;
	if (pthread_create(&c->thread, NULL, pump, c) != 0)
		return -EAGAIN;
	c->running = true;
	return 0;
}

void cli_capture_finish(struct cli_capture *c)
{
	if (c->running)
		pthread_join(c->thread, NULL);
	c->running = false;
	for (int i = 0; i < 3; i++) {
		close_fd(&c->child[i]);
		close_fd(&c->fd[i]);
	}
}
