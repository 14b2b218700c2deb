/* init.c: initialise a deployment: the API CA and server certificate, the
 * node CA, the sandbox SSH CA (sandbox_ca.c), the tunnel client
 * certificate (node_tunnel.c), the key-encryption key file
 * of the sealed store (kek.c), the schema, the root tenant and the first admin token. Safe to
 * run again: existing material is kept, and a new admin token is minted only
 * when none exists or one is asked for. serve renews the server certificate
 * from the API CA when it nears expiry (init_renew_server_cert). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "auth.h"
#include "db.h"
#include "init.h"
#include "kek.h"
#include "log.h"
#include "migrate.h"
#include "node_tunnel.h"
#include "pki.h"
#include "sandbox_ca.h"
#include "util.h"

#define SERVER_CERT_DAYS 825

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

/* Issue server.pem/server.key from the API CA: serverAuth, CN bc-controller,
 * SANs localhost, the loopback addresses and api_san. */
static int issue_server_cert(struct ctl_app *app)
{
	_cleanup_free_ char *sans_buf = xstrdup(app->cfg.api_san);
	_cleanup_free_ char *cp = pki_path(app, "api-ca.pem");
	_cleanup_free_ char *kp = pki_path(app, "api-ca.key");
	const char *sans[34] = {"localhost", "127.0.0.1", "::1"};
	char *save = NULL, *cert = NULL, *key = NULL, *cacert = NULL, *cakey = NULL;
	size_t n = 3;
	int r;

	for (char *s = strtok_r(sans_buf, ", ", &save); s && n < 33; s = strtok_r(NULL, ", ", &save))
		sans[n++] = s;
	sans[n] = NULL;
	if ((r = file_read_all(cp, 1 << 20, &cacert, NULL)) < 0 ||
	    (r = file_read_all(kp, 1 << 20, &cakey, NULL)) < 0)
		goto out;
	r = pki_issue(cacert, cakey, "bc-controller", sans, PKI_SERVER, SERVER_CERT_DAYS, &cert,
		      &key);
	if (r == 0)
		r = write_pair(app, "server", cert, key);
out:
	free(cacert);
	pki_free_secret(cakey);
	free(cert);
	pki_free_secret(key);
	return r;
}

static int make_server_cert(struct ctl_app *app)
{
	_cleanup_free_ char *path = pki_path(app, "server.pem");
	int r;

	if (exists(path))
		return 0;
	r = issue_server_cert(app);
	if (r == 0)
		log_info("init: wrote %s", path);
	return r;
}

/* Milliseconds server.pem has left, or INT64_MAX when it is unreadable
 * (serve fails on it with its own message). */
static int64_t server_cert_left_ms(struct ctl_app *app)
{
	_cleanup_free_ char *path = pki_path(app, "server.pem");
	_cleanup_free_ char *cert = NULL;
	int64_t not_after = 0;

	if (file_read_all(path, 1 << 20, &cert, NULL) < 0 ||
	    pki_cert_info(cert, NULL, &not_after, NULL) < 0)
		return INT64_MAX;
	return not_after - (int64_t)time(NULL) * 1000;
}

/* See init.h. Replicas sharing pki_dir renew one at a time (a lock file),
 * and the second finds the new certificate and keeps it. */
int init_renew_server_cert(struct ctl_app *app)
{
	_cleanup_free_ char *lock = pki_path(app, "server.lock");
	int64_t window = (int64_t)app->cfg.server_cert_renew_days * 86400 * 1000, left;
	int fd, r = 0;

	if (window == 0 || server_cert_left_ms(app) > window)
		return 0;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		r = -errno;
		log_error("pki: cannot lock %s: %s", lock, strerror(-r));
		goto out;
	}
	left = server_cert_left_ms(app);
	if (left > window)
		goto out;
	log_warn("pki: server.pem expires in %lld h: issuing a new one from the API CA",
		 (long long)(left / 3600000));
	r = issue_server_cert(app);
	if (r < 0)
		log_error("pki: cannot renew server.pem: %s", strerror(-r));
	else
		log_info("pki: wrote a new server.pem, valid %d days", SERVER_CERT_DAYS);
out:
	if (fd >= 0)
		close(fd);
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
	if ((r = sandbox_ca_create(app, false, NULL)) < 0 ||
	    (r = node_tunnel_client_create(app, false)) < 0)
		return r;
	if ((r = kek_create(app->cfg.kek_file)) < 0) {
		log_error("init: cannot create the key-encryption key file %s: %s", app->cfg.kek_file,
			  strerror(-r));
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
