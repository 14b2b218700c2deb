/* test_sshclient.c: the argument vectors bcctl gives OpenSSH (sshclient.h),
 * checked by the real ssh: `ssh -G` (inserted after the program name)
 * prints the configuration our vector gives, so the test reads what ssh
 * itself made of it: every forwarding and proxy off, the certificate, the
 * known-hosts file, the alias, strictness and user; and the command words
 * that look like options (-oProxyCommand=..., -L ..., -F ...) change none
 * of it. Known-hosts rendering and ID:PATH parsing too. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sshclient.h"
#include "tap.h"
#include "util.h"

static const char ca_line[] =
	"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bc CA";

/* Run argv with "-G" after argv[0]; its stdout (malloc'd) or NULL. */
static char *ssh_g(char **argv)
{
	size_t n = 0;
	int pfd[2];
	pid_t pid;
	char **v, *out = NULL;
	size_t len = 0;
	FILE *mem;

	while (argv[n])
		n++;
	v = xcalloc(n + 2, sizeof(*v));
	v[0] = argv[0];
	v[1] = (char *)"-G";
	memcpy(v + 2, argv + 1, n * sizeof(*v));
	if (pipe(pfd) < 0)
		return NULL;
	pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);

		dup2(pfd[1], 1);
		dup2(devnull, 0);
		dup2(devnull, 2);
		close(pfd[0]);
		execvp(v[0], v);
		_exit(127);
	}
	close(pfd[1]);
	mem = open_memstream(&out, &len);
	for (;;) {
		char buf[4096];
		ssize_t r = read(pfd[0], buf, sizeof(buf));

		if (r <= 0)
			break;
		fwrite(buf, 1, (size_t)r, mem);
	}
	fclose(mem);
	close(pfd[0]);
	waitpid(pid, NULL, 0);
	free(v);
	return out;
}

/* The value ssh -G printed for key (lowercase), or "" */
static const char *cfg(const char *out, const char *key, char *buf, size_t len)
{
	size_t k = strlen(key);

	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, key, k) == 0 && p[k] == ' ') {
			size_t n = strcspn(p + k + 1, "\n");

			snprintf(buf, len, "%.*s", (int)n, p + k + 1);
			return buf;
		}
	}
	buf[0] = '\0';
	return buf;
}

static int index_of(char **argv, const char *s)
{
	for (int i = 0; argv[i]; i++)
		if (strcmp(argv[i], s) == 0)
			return i;
	return -1;
}

static char key_file[] = "/tmp/test_sshclient_keyXXXXXX";

static void test_ssh_vector(void)
{
	struct sshc_opts o = {.kind = SSHC_SSH, .prog = "ssh", .port = 40123,
			      .key_file = key_file,
			      .cert_file = "/tmp/bcctl-exec-x/id-cert.pub",
			      .known_hosts = "/tmp/bcctl-exec-x/known_hosts", .account = "sandbox",
			      .host_key_alias = "inst_01abc", .strict = true};
	char *hostile[] = {(char *)"-oProxyCommand=touch /tmp/pwned", (char *)"-L",
			   (char *)"8080:127.0.0.1:80", (char *)"-F", (char *)"/etc/evil",
			   (char *)"-oUser=root"};
	char **argv = NULL, *out, b[512];
	int dd;

	ok(sshc_argv(&o, hostile, 6, &argv) == 0, "an ssh vector for a command of option-like words");
	dd = index_of(argv, "--");
	ok(dd > 0 && strcmp(argv[dd + 1], SSHC_HOST) == 0, "\"--\" comes right before the host");
	ok(strcmp(argv[dd + 2], hostile[0]) == 0 && strcmp(argv[dd + 7], "-oUser=root") == 0 &&
		   argv[dd + 8] == NULL,
	   "the command's words follow the host unchanged, and nothing else");
	ok(index_of(argv, "-a") > 0 && index_of(argv, "-a") < dd && index_of(argv, "-x") < dd &&
		   index_of(argv, "-x") > 0,
	   "-a -x before the host");
	ok(index_of(argv, "-F") == 1 && strcmp(argv[2], "none") == 0, "-F none first");
	out = ssh_g(argv);
	ok(out && strstr(out, "hostname 127.0.0.1"), "ssh -G parses the vector (host 127.0.0.1)");
	if (!out)
		out = xstrdup("");
	is_str(cfg(out, "port", b, sizeof(b)), "40123", "port");
	is_str(cfg(out, "user", b, sizeof(b)), "sandbox", "user sandbox, not root from the command");
	is_str(cfg(out, "proxycommand", b, sizeof(b)), "", "no ProxyCommand");
	is_str(cfg(out, "proxyjump", b, sizeof(b)), "", "no ProxyJump");
	is_str(cfg(out, "forwardagent", b, sizeof(b)), "no", "no agent forwarding");
	is_str(cfg(out, "forwardx11", b, sizeof(b)), "no", "no X11 forwarding");
	is_str(cfg(out, "clearallforwardings", b, sizeof(b)), "yes", "every forwarding cleared");
	ok(!strstr(out, "localforward"), "no -L from the command");
	is_str(cfg(out, "controlmaster", b, sizeof(b)), "false", "no connection sharing");
	is_str(cfg(out, "controlpath", b, sizeof(b)), "", "no ControlPath");
	is_str(cfg(out, "permitlocalcommand", b, sizeof(b)), "no", "no PermitLocalCommand");
	is_str(cfg(out, "identitiesonly", b, sizeof(b)), "yes", "IdentitiesOnly");
	is_str(cfg(out, "stricthostkeychecking", b, sizeof(b)), "true", "StrictHostKeyChecking yes");
	is_str(cfg(out, "hostkeyalias", b, sizeof(b)), "inst_01abc", "HostKeyAlias");
	is_str(cfg(out, "certificatefile", b, sizeof(b)), "/tmp/bcctl-exec-x/id-cert.pub",
	       "CertificateFile");
	is_str(cfg(out, "userknownhostsfile", b, sizeof(b)), "/tmp/bcctl-exec-x/known_hosts",
	       "UserKnownHostsFile");
	is_str(cfg(out, "globalknownhostsfile", b, sizeof(b)), "/tmp/bcctl-exec-x/known_hosts",
	       "GlobalKnownHostsFile");
	is_str(cfg(out, "identityfile", b, sizeof(b)), key_file, "the user's key");
	free(out);
	sshc_argv_free(argv);

	o.strict = false;
	o.host_key_alias = "sbx_01xyz";
	ok(sshc_argv(&o, NULL, 0, &argv) == 0, "TOFU, no command (a login shell)");
	out = ssh_g(argv);
	is_str(cfg(out ? out : "", "stricthostkeychecking", b, sizeof(b)), "accept-new",
	       "StrictHostKeyChecking accept-new");
	is_str(cfg(out ? out : "", "hostkeyalias", b, sizeof(b)), "sbx_01xyz", "aliased to the sandbox");
	ok(strcmp(argv[index_of(argv, "--") + 1], SSHC_HOST) == 0 &&
		   argv[index_of(argv, "--") + 2] == NULL,
	   "the host is the last word");
	free(out);
	sshc_argv_free(argv);
}

static void test_scp_vector(void)
{
	struct sshc_opts o = {.kind = SSHC_SCP, .prog = "scp", .port = 40124,
			      .key_file = "/k", .cert_file = "/c", .known_hosts = "/kh",
			      .account = "sandbox", .host_key_alias = "inst_01abc", .strict = true,
			      .recursive = true};
	char *paths[] = {(char *)"-oProxyCommand=x", (char *)"127.0.0.1:/tmp/y"};
	char **argv = NULL;
	int dd;

	ok(sshc_argv(&o, paths, 2, &argv) == 0, "an scp vector");
	dd = index_of(argv, "--");
	ok(dd > 0 && strcmp(argv[dd + 1], paths[0]) == 0 && strcmp(argv[dd + 2], paths[1]) == 0 &&
		   !argv[dd + 3],
	   "the paths follow \"--\" unchanged");
	ok(index_of(argv, "-P") > 0 && index_of(argv, "-r") > 0 && index_of(argv, "-r") < dd,
	   "-P for the port, -r before the paths");
	ok(index_of(argv, "-a") < 0, "no ssh-only flags for scp");
	sshc_argv_free(argv);
	ok(sshc_argv(&o, paths, 1, &argv) == -EINVAL, "scp needs two paths");
	paths[1] = (char *)"127.0.0.1:/tmp/a\nb";
	ok(sshc_argv(&o, paths, 2, &argv) == -EINVAL, "a path with a newline is refused");
}

static void test_refusals(void)
{
	struct sshc_opts o = {.kind = SSHC_SSH, .prog = "ssh", .port = 1, .key_file = "/k",
			      .cert_file = "/c", .known_hosts = "/kh", .account = "sandbox",
			      .host_key_alias = "inst_x", .strict = true};
	char **argv = NULL;

	o.cert_file = "/tmp/a\"b";
	ok(sshc_argv(&o, NULL, 0, &argv) == -EINVAL, "a file name with a quote is refused");
	o.cert_file = "/c";
	o.account = "root; x";
	ok(sshc_argv(&o, NULL, 0, &argv) == -EINVAL, "an account outside the safe set is refused");
	o.account = "sandbox";
	o.host_key_alias = "a b";
	ok(sshc_argv(&o, NULL, 0, &argv) == -EINVAL, "an alias with a space is refused");
	o.host_key_alias = "inst_x";
	o.port = 70000;
	ok(sshc_argv(&o, NULL, 0, &argv) == -EINVAL, "port 70000 is refused");
}

static void test_known_hosts(void)
{
	char *kh = NULL;

	ok(sshc_known_hosts(true, "inst_01abc", ca_line, &kh) == 0, "a certified guest's file");
	is_str(kh, "@cert-authority inst_01abc ssh-ed25519 "
		   "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
	       "@cert-authority <principal> <CA key>, the comment dropped");
	free(kh);
	kh = NULL;
	ok(sshc_known_hosts(false, "inst_01abc", ca_line, &kh) == 0 && kh && !*kh,
	   "an uncertified guest's file is empty");
	free(kh);
	kh = NULL;
	ok(sshc_known_hosts(true, "INST_01ABC", ca_line, &kh) == -EINVAL,
	   "a principal with capitals is refused (ssh lowercases the alias)");
	ok(sshc_known_hosts(true, "inst_01abc\n* ssh-ed25519 AAAA", ca_line, &kh) == -EINVAL,
	   "a principal that would add a line is refused");
	ok(sshc_known_hosts(true, "*", ca_line, &kh) == -EINVAL, "a wildcard principal is refused");
	ok(sshc_known_hosts(true, "inst_x", "ssh-rsa AAAAB3NzaC1yc2E", &kh) == -EINVAL,
	   "a CA that is not ed25519/P-256 is refused");
	ok(sshc_known_hosts(true, "inst_x", "ssh-ed25519 AAAA x\n@cert-authority * k", &kh) == -EINVAL,
	   "a CA line with a second line is refused");
}

static void test_remote_path(void)
{
	char id[64];
	const char *path = NULL;

	ok(sshc_remote_path("sbx_01abc:/tmp/x", id, sizeof(id), &path) && strcmp(id, "sbx_01abc") == 0 &&
		   strcmp(path, "/tmp/x") == 0,
	   "sbx_ID:PATH is the sandbox's");
	ok(sshc_remote_path("sbx_01abc:", id, sizeof(id), &path) && !*path, "sbx_ID: is its home");
	ok(!sshc_remote_path("./sbx_01abc:/x", id, sizeof(id), &path), "./sbx_... is local");
	ok(!sshc_remote_path("/tmp/a:b", id, sizeof(id), &path), "a local path with a colon is local");
	ok(!sshc_remote_path("host:/x", id, sizeof(id), &path), "another host is not a sandbox");
	ok(!sshc_remote_path("sbx_a/b:/x", id, sizeof(id), &path), "an id with a slash is not one");
}

int main(void)
{
	int fd = mkstemp(key_file);

	if (fd < 0)
		return 1;
	close(fd);
	test_ssh_vector();
	unlink(key_file);
	test_scp_vector();
	test_refusals();
	test_known_hosts();
	test_remote_path();
	done_testing();
}
