/* spawn.c: run a helper program without a shell (spawn.h). */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

/* Keep the last SPAWN_OUT_MAX - 1 bytes of what the child writes. */
static void keep_tail(char *out, size_t *n, const char *buf, size_t len)
{
	size_t cap = SPAWN_OUT_MAX - 1;

	if (!out)
		return;
	if (len >= cap) {
		memcpy(out, buf + len - cap, cap);
		*n = cap;
	} else {
		if (*n + len > cap) {
			size_t drop = *n + len - cap;
			memmove(out, out + drop, *n - drop);
			*n -= drop;
		}
		memcpy(out + *n, buf, len);
		*n += len;
	}
	out[*n] = '\0';
}

static int start(char *const argv[], int wfd, pid_t *ret)
{
	posix_spawn_file_actions_t fa;
	int e;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, wfd, 1);
	posix_spawn_file_actions_adddup2(&fa, wfd, 2);
	e = posix_spawnp(ret, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return -e;
}

/* Read the child's output until EOF or the deadline. */
static bool drain(int rfd, int64_t deadline, char *out)
{
	size_t n = 0;
	char buf[4096];

	for (;;) {
		int64_t left = deadline_left(deadline);
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		if (left <= 0)
			return false;
		int r = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
		if (r < 0 && errno != EINTR)
			return false;
		if (r <= 0)
			continue;
		ssize_t k = read(rfd, buf, sizeof(buf));
		if (k == 0)
			return true;
		if (k < 0 && errno != EINTR && errno != EAGAIN)
			return true;
		if (k > 0)
			keep_tail(out, &n, buf, (size_t)k);
	}
}

int spawn_run(char *const argv[], int timeout_ms, char *out)
{
	int fds[2], status = 0, e;
	pid_t pid;
	bool done;

	if (out)
		out[0] = '\0';
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	e = start(argv, fds[1], &pid);
	close(fds[1]);
	if (e < 0) {
		close(fds[0]);
		return e;
	}
	done = drain(fds[0], deadline_in(timeout_ms), out);
	close(fds[0]);
	if (!done)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!done)
		return -ETIMEDOUT;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}
