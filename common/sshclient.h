/* sshclient.h: the argument vectors bcctl gives stock OpenSSH (ssh, scp)
 * for `bcctl sandbox exec` and `bcctl sandbox cp`, and the known-hosts file
 * of one connection (docs/cli.md, "sandbox exec").
 *
 * The guest is untrusted and the command may come from a model, so the
 * vectors turn off everything of the user's ssh configuration that would
 * hand the guest something (-F none, agent and X11 forwarding, every port
 * forwarding, ProxyCommand and ProxyJump, connection sharing,
 * PermitLocalCommand) and put "--" before the host (ssh) or the paths (scp):
 * no word of the command or of a path can become an option on this machine.
 * Pure functions; nothing logs. */
#ifndef BC_SSHCLIENT_H
#define BC_SSHCLIENT_H

#include <stdbool.h>
#include <stddef.h>

#define SSHC_HOST "127.0.0.1"   /* the one-connection listener bcctl opens */
#define SSHC_ARGS_MAX 4096      /* command words or paths */

enum sshc_prog { SSHC_SSH, SSHC_SCP };

struct sshc_opts {
	enum sshc_prog kind;
	const char *prog;          /* the program to run: "ssh", "/usr/bin/scp", ... */
	int port;                  /* the listener's port on SSHC_HOST */
	const char *key_file;      /* the private key (-i) */
	const char *cert_file;     /* its certificate (CertificateFile) */
	const char *known_hosts;   /* this connection's known-hosts file */
	const char *account;       /* the guest account (User) */
	const char *host_key_alias;/* HostKeyAlias: the host principal, or the sandbox id */
	bool strict;               /* StrictHostKeyChecking yes; false: accept-new */
	bool recursive;            /* scp -r */
};

/* The argument vector (NULL-terminated, malloc'd strings in a malloc'd
 * array: sshc_argv_free) of o's program for args: ssh's command words or
 * scp's paths, which follow "--" unchanged. -EINVAL for options that cannot
 * be passed safely (a path holding a newline or a '"', an account or alias
 * outside [A-Za-z0-9._@-], a port outside 1..65535, no program, more than
 * SSHC_ARGS_MAX args, scp without two paths), -ENOMEM. */
int sshc_argv(const struct sshc_opts *o, char *const *args, size_t n_args, char ***ret);
void sshc_argv_free(char **argv);

/* The known-hosts file of one connection: with certified, the line
 * "@cert-authority <host_principal> <type> <base64>" for the CA key line
 * ca_line (its comment dropped); without, "" (the caller trusts the key on
 * first use). -EINVAL for a principal outside [a-z0-9_.-] (1..128) or a CA
 * line that is not one ssh-ed25519 or ecdsa-sha2-nistp256 key. *ret
 * malloc'd. */
int sshc_known_hosts(bool certified, const char *host_principal, const char *ca_line,
		     char **ret);

/* "ID:PATH" names a path in sandbox ID (an "sbx_" id before the first
 * ':'): true with *ret_path pointing into s; false for a local path. */
bool sshc_remote_path(const char *s, char *id, size_t id_len, const char **ret_path);

#endif
