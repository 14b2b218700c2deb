/* sandbox_ca.c: the sandbox SSH CA of the deployment (docs/operations.md,
 * "The sandbox SSH CA"). One ed25519 key, separate from the X.509 CAs of
 * pki_dir, that signs the short user certificates of Sandboxes.Exec and
 * the host certificates of sandbox guests (common/sshcert.c). Its private
 * key is a PKCS#8 PEM file of mode 0600 at sandbox_ca_key_file, beside
 * which its OpenSSH public line is written for operators.
 *
 * `init` makes it when it is missing and keeps it otherwise; `pki
 * add-sandbox-ca` adds it to a deployment made before it existed and never
 * replaces one: the key is linked into place, so two racing commands
 * cannot both win and a crash never leaves half a key. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "node_tunnel.h"
#include "sandbox_ca.h"
#include "util.h"

#define CA_COMMENT "bc sandbox SSH CA"
#define KEY_MAX (64 * 1024)

/* The public line's path: KEY.pub for KEY.key, else KEY + ".pub". */
static char *pub_path(const char *key)
{
	size_t n = strlen(key);

	if (n > 4 && strcmp(key + n - 4, ".key") == 0)
		return xasprintf("%.*s.pub", (int)(n - 4), key);
	return xasprintf("%s.pub", key);
}

/* Write pem to path unless a file is there: written beside it, then
 * linked into place (-EEXIST if taken). */
static int write_new_key(const char *path, const char *pem)
{
	_cleanup_free_ char *tmp = xasprintf("%s.new.%d", path, (int)getpid());
	int r = file_write_atomic(tmp, pem, strlen(pem), 0600);

	if (r < 0)
		return r;
	r = link(tmp, path) < 0 ? -errno : 0;
	unlink(tmp);
	return r;
}

static int key_dir(const char *key)
{
	_cleanup_free_ char *d = xstrdup(key);

	return mkdir_p(dirname(d), 0700);
}

static int make_key(const char *key, const char *pub, char **ret_line)
{
	char *pem = NULL, *line = NULL, *nl = NULL;
	struct sshcert_ca *ca = NULL;
	int r;

	if ((r = key_dir(key)) < 0 || (r = sshcert_ca_generate(&pem)) < 0 ||
	    (r = sshcert_ca_load(pem, &ca)) < 0 ||
	    (r = sshcert_ca_public_line(ca, CA_COMMENT, &line)) < 0 ||
	    (r = write_new_key(key, pem)) < 0)
		goto out;
	nl = xasprintf("%s\n", line);
	if ((r = file_write_atomic(pub, nl, strlen(nl), 0644)) < 0)
		goto out;
	if (ret_line) {
		*ret_line = line;
		line = NULL;
	}
out:
	sshcert_free_secret(pem);
	sshcert_ca_free(ca);
	free(line);
	free(nl);
	return r;
}

int sandbox_ca_create(const struct ctl_app *app, bool refuse_existing, char **ret_line)
{
	const char *key = app->cfg.sandbox_ca_key_file;
	_cleanup_free_ char *pub = pub_path(key);
	int r;

	if (access(key, F_OK) == 0) {
		if (refuse_existing) {
			log_error("pki: %s exists: the deployment has a sandbox SSH CA already "
				  "(it is never replaced)", key);
			return -EEXIST;
		}
		return 0;
	}
	r = make_key(key, pub, ret_line);
	if (r == -EEXIST && !refuse_existing)
		return 0;	/* another init made it meanwhile: keep theirs */
	if (r == -EEXIST)
		log_error("pki: %s appeared meanwhile: kept it", key);
	else if (r < 0)
		log_error("pki: cannot create the sandbox SSH CA %s: %s", key, strerror(-r));
	else
		log_info("pki: wrote the sandbox SSH CA %s (0600) and its public line %s", key, pub);
	return r;
}

int sandbox_ca_load(const struct ctl_app *app, struct sshcert_ca **ret)
{
	char *pem = NULL;
	int r = file_read_all(app->cfg.sandbox_ca_key_file, KEY_MAX, &pem, NULL);

	if (r < 0)
		return r;
	r = sshcert_ca_load(pem, ret);
	sshcert_free_secret(pem);
	return r;
}

int sandbox_ca_serve(struct ctl_app *app)
{
	int r = sandbox_ca_load(app, &app->sandbox_ca);

	if (r == -ENOENT) {
		log_warn("serve: no sandbox SSH CA (%s): sandboxes are created without the guest "
			 "trust part and Sandboxes.Exec is unsupported (bc-controller pki "
			 "add-sandbox-ca adds one)", app->cfg.sandbox_ca_key_file);
		return 0;
	}
	if (r == 0)
		r = sshcert_ca_public_line(app->sandbox_ca, CA_COMMENT, &app->sandbox_ca_line);
	if (r < 0) {
		log_error("sandbox SSH CA %s: %s", app->cfg.sandbox_ca_key_file, strerror(-r));
		sandbox_ca_unload(app);
	}
	return r;
}

void sandbox_ca_unload(struct ctl_app *app)
{
	sshcert_ca_free(app->sandbox_ca);
	app->sandbox_ca = NULL;
	free(app->sandbox_ca_line);
	app->sandbox_ca_line = NULL;
}

static int cmd_add(struct ctl_app *app)
{
	_cleanup_free_ char *line = NULL;

	if (sandbox_ca_create(app, true, &line) < 0)
		return 1;
	printf("sandbox SSH CA (guests trust this public key line):\n%s\n", line);
	return 0;
}

static const struct ctl_verb verbs[] = {
	{"add-sandbox-ca", cmd_add, "add the sandbox SSH CA to a deployment that has none"},
	{"add-tunnel-client", node_tunnel_pki_add,
	 "add the controller's tunnel client certificate (Agent.Tunnel) to a deployment"},
};

int sandbox_ca_command(struct ctl_app *app, int argc, char **argv)
{
	return ctl_verb_run(app, "pki", verbs, ARRAY_SIZE(verbs), argc, argv);
}
