/* init.c: initialise a deployment: the API CA and server certificate, the
 * node CA, the schema, the root tenant and the first admin token. Safe to
 * run again: existing material is kept, and a new admin token is minted only
 * when none exists or one is asked for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "log.h"
#include "pki.h"
#include "util.h"

static char *pki_path(const struct ctl_app *app, const char *file)
{
	return xasprintf("%s/%s", app->cfg.pki_dir, file);
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static int write_pair(const struct ctl_app *app, const char *base, const char *cert,
		      const char *key)
{
	_cleanup_free_ char *cp = xasprintf("%s/%s.pem", app->cfg.pki_dir, base);
	_cleanup_free_ char *kp = xasprintf("%s/%s.key", app->cfg.pki_dir, base);
	int r = file_write_atomic(kp, key, strlen(key), 0600);

	if (r == 0)
		r = file_write_atomic(cp, cert, strlen(cert), 0644);
	return r;
}

static int make_ca(const struct ctl_app *app, const char *base, const char *cn)
{
	_cleanup_free_ char *path = xasprintf("%s/%s.pem", app->cfg.pki_dir, base);
	char *cert = NULL, *key = NULL;
	int r;

	if (exists(path))
		return 0;
	if ((r = pki_ca_new(cn, 3650, &cert, &key)) == 0)
		r = write_pair(app, base, cert, key);
	free(cert);
	pki_free_secret(key);
	if (r == 0)
		log_info("init: wrote %s", path);
	return r;
}

static int make_server_cert(struct ctl_app *app)
{
	_cleanup_free_ char *path = pki_path(app, "server.pem");
	_cleanup_free_ char *sans_buf = xstrdup(app->cfg.api_san);
	const char *sans[34] = {"localhost", "127.0.0.1", "::1"};
	char *save = NULL, *cert = NULL, *key = NULL, *cacert = NULL, *cakey = NULL;
	size_t n = 3;
	int r;

	if (exists(path))
		return 0;
	for (char *s = strtok_r(sans_buf, ", ", &save); s && n < 33; s = strtok_r(NULL, ", ", &save))
		sans[n++] = s;
	sans[n] = NULL;
	{
		_cleanup_free_ char *cp = pki_path(app, "api-ca.pem");
		_cleanup_free_ char *kp = pki_path(app, "api-ca.key");
		if ((r = file_read_all(cp, 1 << 20, &cacert, NULL)) < 0 ||
		    (r = file_read_all(kp, 1 << 20, &cakey, NULL)) < 0)
			goto out;
	}
	r = pki_issue(cacert, cakey, "bc-controller", sans, PKI_SERVER, 825, &cert, &key);
	if (r == 0)
		r = write_pair(app, "server", cert, key);
	if (r == 0)
		log_info("init: wrote %s", path);
out:
	free(cacert);
	pki_free_secret(cakey);
	free(cert);
	pki_free_secret(key);
	return r;
}

int pki_load(struct ctl_app *app)
{
	static const char *const files[] = {"api-ca.pem", "node-ca.pem", "node-ca.key"};
	char **dst[] = {&app->api_ca_pem, &app->node_ca_pem, &app->node_ca_key_pem};

	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *p = pki_path(app, files[i]);
		int r = file_read_all(p, 1 << 20, dst[i], NULL);
		if (r < 0) {
			log_error("pki: cannot read %s: %s (run bc-controller init)", p, strerror(-r));
			return r;
		}
	}
	return 0;
}

static int admin_exists(struct db *d, bool *ret)
{
	_cleanup_free_ char *v = NULL;
	int r = db_scalar(d, "SELECT count(*) FROM identities WHERE is_admin", NULL, &v);

	if (r == 0)
		*ret = v && atoi(v) > 0;
	return r;
}

int init_run(struct ctl_app *app, bool new_admin_token)
{
	struct db *d = NULL;
	char token[128];
	bool have_admin = false;
	int r, version = 0;

	if ((r = mkdir_p(app->cfg.pki_dir, 0700)) < 0) {
		log_error("init: cannot create %s: %s", app->cfg.pki_dir, strerror(-r));
		return r;
	}
	if ((r = make_ca(app, "api-ca", "bc API CA")) < 0 ||
	    (r = make_ca(app, "node-ca", "bc node CA")) < 0 || (r = make_server_cert(app)) < 0) {
		log_error("init: PKI: %s", strerror(-r));
		return r;
	}
	if (!(d = db_open(app->cfg.database))) {
		log_error("init: cannot connect to the database");
		return -EIO;
	}
	r = migrate_apply(d, migrate_default_dir(app->cfg.migrations_dir), &version);
	if (r == 0)
		r = admin_exists(d, &have_admin);
	if (r == 0 && (!have_admin || new_admin_token)) {
		r = auth_create_admin(d, AUTH_ROOT_TENANT, "admin", token, sizeof(token));
		if (r == 0)
			r = file_write_atomic(app->cfg.admin_token_file, token, strlen(token), 0600);
		if (r == 0) {
			printf("admin token (shown once, also in %s):\n%s\n", app->cfg.admin_token_file,
			       token);
			log_info("init: minted an admin token for tenant root");
		}
	}
	db_close(d);
	if (r == 0)
		log_info("init: deployment ready, schema version %d", version);
	return r;
}
