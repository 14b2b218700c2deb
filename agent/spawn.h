/* spawn.h: run a helper program (qemu-img, genisoimage) without a shell.
 *
 * posix_spawn, not fork: bcd is multi-threaded and has called grpc_init();
 * glibc's posix_spawn does not run fork handlers or copy the address space,
 * so nothing of gRPC's runs in the child. The child's stdin is /dev/null,
 * stdout and stderr go to a pipe whose last bytes are kept for the error
 * message. */
#ifndef BC_AGENT_SPAWN_H
#define BC_AGENT_SPAWN_H

#include <stddef.h>

#define SPAWN_OUT_MAX 512

/* Run argv[0] (an absolute path, or a name searched in PATH) with argv,
 * wait up to timeout_ms (then SIGKILL). 0 if it exited 0; -ECHILD if it
 * exited otherwise or was killed (out holds the tail of its output),
 * -ETIMEDOUT, or the -errno of posix_spawn. out (SPAWN_OUT_MAX) may be
 * NULL. */
int spawn_run(char *const argv[], int timeout_ms, char *out);

#endif
