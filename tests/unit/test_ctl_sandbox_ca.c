/* test_ctl_sandbox_ca.c: the sandbox SSH CA's key file (controller/
 * sandbox_ca.c). No key: -ENOENT (Sandboxes.Exec answers UNSUPPORTED).
 * Created: mode 0600, its .pub line the loaded key's own public line;
 * kept by a second create, refused (-EEXIST) when asked never to replace
 * it; eight processes racing to add one leave exactly one winner and one
 * key, eight racing inits all succeed; a file holding another kind of key or garbage does not load. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller/sandbox_ca.h"
#include "log.h"
#include "pki.h"
#include "sshcert.h"
#include "tap.h"
#include "util.h"

static char dir[] = "/tmp/bc-sandbox-ca-XXXXXX";

static char *slurp(const char *path)
{
	char *s = NULL;

	if (file_read_all(path, 1 << 16, &s, NULL) < 0)
		return NULL;
	s[strcspn(s, "\n")] = '\0';
	return s;
}

static void test_create_load(void)
{
	struct ctl_app app = {0};
	struct sshcert_ca *ca = NULL;
	_cleanup_free_ char *key = xasprintf("%s/a/sandbox-ssh-ca.key", dir);
	_cleanup_free_ char *pub = xasprintf("%s/a/sandbox-ssh-ca.pub", dir);
	_cleanup_free_ char *line = NULL, *again = NULL, *onfile = NULL, *before = NULL,
			    *after = NULL;
	struct stat st;

	app.cfg.sandbox_ca_key_file = key;
	is_int(sandbox_ca_load(&app, &ca), -ENOENT, "no key file: -ENOENT (UNSUPPORTED)");
	is_int(sandbox_ca_create(&app, false, &line), 0, "create");
	ok(stat(key, &st) == 0 && (st.st_mode & 0777) == 0600, "key mode 0600");
	ok(stat(pub, &st) == 0 && (st.st_mode & 0777) == 0644, "public line mode 0644");
	is_int(sandbox_ca_load(&app, &ca), 0, "the key loads");
	ok(ca && sshcert_ca_public_line(ca, "bc sandbox SSH CA", &again) == 0, "its public line");
	onfile = slurp(pub);
	is_str(onfile, again, "the .pub file is the loaded key's line");
	is_str(line, again, "create returned the same line");
	is_int(sshcert_ca_line_check(onfile, NULL), 0, "a valid CA line");
	before = slurp(key);
	is_int(sandbox_ca_create(&app, false, NULL), 0, "create again keeps it");
	is_int(sandbox_ca_create(&app, true, NULL), -EEXIST, "refuse_existing: -EEXIST");
	after = slurp(key);
	is_str(after, before, "the key is unchanged");
	sshcert_ca_free(ca);
}

/* Eight processes create at once; how many succeeded. */
static int race(struct ctl_app *app, bool refuse_existing)
{
	pid_t pids[8];
	int wins = 0;

	for (int i = 0; i < 8; i++)
		if ((pids[i] = fork()) == 0)
			_exit(sandbox_ca_create(app, refuse_existing, NULL) == 0 ? 0 : 1);
	for (int i = 0; i < 8; i++) {
		int st = 0;
		waitpid(pids[i], &st, 0);
		wins += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	return wins;
}

static void test_race(void)
{
	_cleanup_free_ char *key = xasprintf("%s/race/ca.key", dir);
	_cleanup_free_ char *key2 = xasprintf("%s/race2/ca.key", dir);
	struct ctl_app app = {0};
	struct sshcert_ca *ca = NULL;

	app.cfg.sandbox_ca_key_file = key;
	is_int(race(&app, true), 1, "eight racing add-sandbox-ca: one wins, seven are refused");
	is_int(sandbox_ca_load(&app, &ca), 0, "... and the key loads");
	sshcert_ca_free(ca);
	ca = NULL;
	app.cfg.sandbox_ca_key_file = key2;
	is_int(race(&app, false), 8, "eight racing inits: all succeed");
	is_int(sandbox_ca_load(&app, &ca), 0, "... and the key loads");
	sshcert_ca_free(ca);
}

static void test_bad_files(void)
{
	_cleanup_free_ char *key = xasprintf("%s/bad.key", dir);
	struct ctl_app app = {0};
	struct sshcert_ca *ca = NULL;
	char *cert = NULL, *p256 = NULL;

	app.cfg.sandbox_ca_key_file = key;
	if (pki_ca_new("x", 1, &cert, &p256) < 0)
		abort();
	file_write_atomic(key, p256, strlen(p256), 0600);
	is_int(sandbox_ca_load(&app, &ca), -EINVAL, "a P-256 key file: -EINVAL");
	file_write_atomic(key, "hello\n", 6, 0600);
	is_int(sandbox_ca_load(&app, &ca), -EBADMSG, "garbage: -EBADMSG");
	ok(ca == NULL, "no CA from a bad file");
	free(cert);
	pki_free_secret(p256);
}

int main(void)
{
	_cleanup_free_ char *rm = NULL;

	if (!mkdtemp(dir))
		return 1;
	log_init("test", LOG_LVL_ERROR);
	test_create_load();
	test_race();
	test_bad_files();
	rm = xasprintf("rm -rf %s", dir);
	if (system(rm) != 0)
		printf("# could not remove %s\n", dir);
	done_testing();
}
