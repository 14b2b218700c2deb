/* kek.c: the key-encryption key (KEK) file and `bc-controller secrets`.
 *
 * The file (config key kek_file, default <pki_dir>/kek.keys, mode 0600)
 * holds every KEK the deployment has had, the last one current; envelopes
 * name the key that wraps their data key. Changes are made under a lock
 * file (kek_file + ".lock") and renamed into place, so a running serve
 * (sealed.c, which stats the file on every use) sees the new file whole.
 *
 *   init-kek    create the file if missing (what `init` does; for a
 *               deployment initialised before encryption at rest)
 *   rotate-kek  add a key, make it current, rewrap every data key under it
 *               online (passes until none is left under an older key)
 *   migrate     seal the rows still stored plain, then VACUUM FULL the table
 *               so their old bytes leave its files
 *   status      the keys, and how many blobs each one wraps
 *
 * Nothing here prints or logs a key or a blob: only key ids and counts. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db.h"
#include "kek.h"
#include "log.h"
#include "migrate.h"
#include "rowmsg.h"
#include "sealed.h"
#include "util.h"

#define REWRAP_PASSES 30   /* a pass a second while in-flight puts land */

/* status's rows */
#define STATUS_COLS "coalesce(kek_id, ''), count(*)"
enum { ST_KEK, ST_COUNT, ST_NCOLS };
COLS_CHECK(STATUS_COLS, ST_NCOLS)

static void unlockp(int *fd)
{
	if (*fd >= 0) {
		flock(*fd, LOCK_UN);
		close(*fd);
	}
}

static int lock_file(const char *path)
{
	_cleanup_free_ char *lp = xasprintf("%s.lock", path);
	int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int ring_write(const char *path, const struct envelope_ring *ring)
{
	char *text = envelope_ring_format(ring);
	size_t n = strlen(text);
	int r = file_write_atomic(path, text, n, 0600);

	OPENSSL_cleanse(text, n);
	free(text);
	return r;
}

static int ring_load(const char *path, struct envelope_ring **ret)
{
	char *text = NULL;
	size_t n = 0;
	int r = file_read_all(path, 1 << 20, &text, &n), line = 0;

	if (r < 0)
		return r;
	r = envelope_ring_parse(text, ret, &line);
	OPENSSL_cleanse(text, n);
	free(text);
	return r;
}

int kek_create(const char *path)
{
	_cleanup_(unlockp) int fd = lock_file(path);
	struct envelope_ring ring = {0};
	char id[ENVELOPE_KID_MAX];
	struct stat st;
	int r;

	if (fd < 0)
		return fd;
	if (stat(path, &st) == 0)
		return 0;
	ring.keys = xcalloc(ENVELOPE_KEYS_MAX, sizeof(*ring.keys));
	r = envelope_ring_add(&ring, id);
	if (r == 0)
		r = ring_write(path, &ring);
	OPENSSL_cleanse(ring.keys, ENVELOPE_KEYS_MAX * sizeof(*ring.keys));
	free(ring.keys);
	if (r == 0)
		log_info("secrets: wrote the key-encryption key file %s (key id %s)", path, id);
	return r < 0 ? r : 1;
}

int kek_add(const char *path, char ret_id[ENVELOPE_KID_MAX])
{
	_cleanup_(unlockp) int fd = lock_file(path);
	struct envelope_ring *ring = NULL;
	char id[ENVELOPE_KID_MAX];
	int r;

	if (fd < 0)
		return fd;
	if ((r = ring_load(path, &ring)) < 0)
		return r;
	if ((r = envelope_ring_add(ring, id)) == 0)
		r = ring_write(path, ring);
	envelope_ring_free(ring);
	if (r == 0)
		memcpy(ret_id, id, sizeof(id));
	return r;
}

struct db *kek_open_db(struct ctl_app *app, const char *verb)
{
	struct db *d = db_open(app->cfg.database);
	int v = 0;

	if (!d) {
		log_error("%s: cannot connect to the database", verb);
		return NULL;
	}
	if (migrate_current(d, &v) < 0 || v != CTL_SCHEMA_VERSION) {
		log_error("%s: database schema version %d, this binary serves %d: run "
			  "bc-controller migrate first", verb, v, CTL_SCHEMA_VERSION);
		db_close(d);
		return NULL;
	}
	if (sealed_keys_load(app->cfg.kek_file) < 0) {
		db_close(d);
		return NULL;
	}
	return d;
}

static int cmd_init_kek(struct ctl_app *app)
{
	int r = kek_create(app->cfg.kek_file);

	if (r < 0) {
		log_error("secrets init-kek: cannot create %s: %s", app->cfg.kek_file, strerror(-r));
		return 1;
	}
	printf("%s %s\n", r ? "created" : "kept the existing", app->cfg.kek_file);
	return 0;
}

/* Rewrap passes until no blob is left under an older key, or a pass makes
 * no progress (what remains does not open: logged by ref). */
static int rewrap_all(struct db *d, int64_t *ret_total, int64_t *ret_left)
{
	int64_t total = 0, plain = 0, left = 0;
	int r = 0;

	for (int pass = 0; pass < REWRAP_PASSES; pass++) {
		int64_t n = 0, failed = 0;
		if ((r = sealed_rewrap(d, &n, &failed)) < 0 ||
		    (r = sealed_count(d, &plain, &left)) < 0)
			break;
		total += n;
		if (left == 0 || (n == 0 && pass > 0))
			break;
		sleep(1); /* puts that read the old file just before the rename */
	}
	*ret_total = total;
	*ret_left = left;
	return r;
}

static int cmd_rotate(struct ctl_app *app)
{
	char id[ENVELOPE_KID_MAX];
	int64_t n = 0, left = 0;
	struct db *d;
	int r = kek_add(app->cfg.kek_file, id);

	if (r < 0) {
		log_error("secrets rotate-kek: cannot add a key to %s: %s%s", app->cfg.kek_file,
			  strerror(-r), r == -ENOENT ? " (run bc-controller secrets init-kek)" : "");
		return 1;
	}
	printf("new current key-encryption key: %s\n", id);
	fflush(stdout);
	if (!(d = kek_open_db(app, "secrets rotate-kek")))
		return 1;
	r = rewrap_all(d, &n, &left);
	db_close(d);
	if (r < 0) {
		log_error("secrets rotate-kek: %s: run it again (the new key stays current)",
			  strerror(-r));
		return 1;
	}
	printf("rewrapped %lld data keys; %lld blobs left under older keys\n", (long long)n,
	       (long long)left);
	return left ? 1 : 0;
}

static int cmd_migrate(struct ctl_app *app)
{
	struct db *d = kek_open_db(app, "secrets migrate");
	int64_t n = 0;
	int r;

	if (!d)
		return 1;
	r = sealed_migrate(d, &n);
	if (r == 0 && n > 0)
		r = db_exec(d, NULL, "VACUUM FULL sealed_blobs", NULL);
	db_close(d);
	if (r < 0) {
		log_error("secrets migrate: %s (the rows sealed so far stay sealed)", strerror(-r));
		return 1;
	}
	printf("sealed %lld plain blobs\n", (long long)n);
	return 0;
}

static int cmd_status(struct ctl_app *app)
{
	struct db *d = kek_open_db(app, "secrets status");
	struct envelope_ring *ring = NULL;
	PGresult *r = NULL;
	int rc;

	if (!d)
		return 1;
	rc = ring_load(app->cfg.kek_file, &ring);
	if (rc == 0)
		rc = db_exec(d, &r, "SELECT " STATUS_COLS " FROM sealed_blobs GROUP BY 1 ORDER BY 1",
			     NULL);
	db_close(d);
	if (rc < 0) {
		envelope_ring_free(ring);
		log_error("secrets status: %s", strerror(-rc));
		return 1;
	}
	printf("kek_file %s\n", app->cfg.kek_file);
	for (size_t i = 0; i < ring->n; i++)
		printf("key %s%s\n", ring->keys[i].id, i + 1 == ring->n ? " current" : "");
	for (int i = 0; i < PQntuples(r); i++) {
		const char *k = db_val(r, i, ST_KEK);
		printf("blobs %s %lld%s\n", *k ? k : "plain", (long long)db_i64(r, i, ST_COUNT),
		       *k && !envelope_ring_find(ring, k) ? " (key not in the file!)" : "");
	}
	PQclear(r);
	envelope_ring_free(ring);
	return 0;
}

static const struct ctl_verb verbs[] = {
	{"init-kek", cmd_init_kek, "create the key-encryption key file if it is missing"},
	{"rotate-kek", cmd_rotate, "add a new current key and rewrap every data key (online)"},
	{"migrate", cmd_migrate, "seal the blobs still stored plain"},
	{"status", cmd_status, "the keys, and how many blobs each one wraps"},
};

int kek_command(struct ctl_app *app, int argc, char **argv)
{
	int r = ctl_verb_run(app, "secrets", verbs, ARRAY_SIZE(verbs), argc, argv);

	sealed_keys_unload();
	return r;
}
