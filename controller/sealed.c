/* sealed.c: the sealed store (see sealed.h). Blobs travel to PostgreSQL as
 * bytea in hex text form, both ways, so any byte value is safe in a text
 * parameter (written as "\x..." bytea input, read with encode(data, 'hex')).
 * What travels is the envelope (common/envelope.c): the plain bytes exist
 * only in this process's memory, never in a statement, a row or the WAL.
 *
 * The key-encryption keys are one process-wide snapshot, reference-counted
 * so that a reload (the file changed: a rotation) never frees a ring a
 * worker is using. Every put and get stats the file (inode, size, mtime,
 * ctime): a rename into place by
 * `secrets rotate-kek` is seen at once by every replica sharing the file. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db.h"
#include "envelope.h"
#include "log.h"
#include "rowmsg.h"
#include "sealed.h"
#include "util.h"

#define SCHEME "envelope-v1"

/* sealed_get's row */
#define GET_COLS "tenant_id, scheme, encode(data, 'hex')"
enum { GET_TENANT, GET_SCHEME, GET_DATA, GET_NCOLS };
COLS_CHECK(GET_COLS, GET_NCOLS)

/* sealed_count's one row */
enum { COUNT_PLAIN, COUNT_STALE };

/* sealed_migrate's and sealed_rewrap's rows, a batch at a time */
#define ROW_COLS "ref, tenant_id, encode(data, 'hex'), coalesce(kek_id, '')"
enum { ROW_REF, ROW_TENANT, ROW_DATA, ROW_KEK, ROW_NCOLS };
COLS_CHECK(ROW_COLS, ROW_NCOLS)

struct keys {
	int refs;
	struct envelope_ring *ring;
};

static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;
static struct keys *keys;   /* the current snapshot, one reference held */
static char *keys_path;
static struct stat keys_st; /* of the file keys was read from */

/* Hex text (encode(data, 'hex')) into bytes. */
static int hex_text_decode(const char *s, char **ret, size_t *ret_len)
{
	size_t n;
	char *out;

	if (strlen(s) % 2)
		return -EBADMSG;
	n = strlen(s) / 2;
	out = xmalloc(n + 1);
	if (hex_decode(s, n, out) < 0) {
		free(out);
		return -EBADMSG;
	}
	out[n] = '\0';
	*ret = out;
	*ret_len = n;
	return 0;
}

/* bytea input text "\x<hex>" of len bytes: malloc'd. */
static char *bytea_text(const void *data, size_t len)
{
	char *hex = xmalloc(2 * len + 3);

	memcpy(hex, "\\x", 2);
	hex_encode(data, len, hex + 2);
	return hex;
}

/* The authenticated data of a blob: its ref and its tenant. */
static char *aad_of(const char *ref, const char *tenant, size_t *ret_len)
{
	size_t a = strlen(ref), b = tenant ? strlen(tenant) : 0;
	char *s = xmalloc(a + b + 2);

	memcpy(s, ref, a + 1);
	memcpy(s + a + 1, tenant ? tenant : "", b + 1);
	*ret_len = a + 1 + b;
	return s;
}

/* ------------------------------------------------------------ the keys */

static void keys_unref(struct keys *k)
{
	bool last;

	if (!k)
		return;
	pthread_mutex_lock(&keys_lock);
	last = --k->refs == 0;
	pthread_mutex_unlock(&keys_lock);
	if (last) {
		envelope_ring_free(k->ring);
		free(k);
	}
}

static void keysp(struct keys **k) { keys_unref(*k); }

/* Read and parse the file at path; its stat into *st. Logs what fails. */
static int ring_read(const char *path, struct envelope_ring **ret, struct stat *st)
{
	char *text = NULL;
	size_t len = 0;
	int r, line = 0;

	if (stat(path, st) < 0) {
		r = -errno;
		log_error("sealed: cannot read the key-encryption key file %s: %s%s", path,
			  strerror(-r), r == -ENOENT ? " (run bc-controller secrets init-kek)" : "");
		return r;
	}
	if (st->st_mode & 077) {
		log_error("sealed: %s is readable by others than its owner (mode %04o): chmod 0600 it",
			  path, (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	if ((r = file_read_all(path, 1 << 20, &text, &len)) < 0) {
		log_error("sealed: cannot read %s: %s", path, strerror(-r));
		return r;
	}
	r = envelope_ring_parse(text, ret, &line);
	OPENSSL_cleanse(text, len);
	free(text);
	if (r < 0)
		log_error("sealed: %s: %s at line %d", path,
			  r == -EEXIST ? "a key id twice" : r == -E2BIG ? "too many keys"
							      : "not a key file",
			  line);
	return r;
}

/* Replace the snapshot by the file's keys; keys_lock held. */
static int keys_reload(void)
{
	struct envelope_ring *ring = NULL;
	struct keys *k;
	struct stat st;
	int r = ring_read(keys_path, &ring, &st);

	if (r < 0)
		return r;
	k = xcalloc(1, sizeof(*k));
	k->refs = 1;
	k->ring = ring;
	if (keys && --keys->refs == 0) {
		envelope_ring_free(keys->ring);
		free(keys);
	}
	keys = k;
	keys_st = st;
	return 0;
}

static bool file_changed(void)
{
	struct stat st;

	if (stat(keys_path, &st) < 0)
		return false; /* keep what we have; a missing file is no reason to stop */
	return st.st_ino != keys_st.st_ino || st.st_dev != keys_st.st_dev ||
	       st.st_size != keys_st.st_size || st.st_mtim.tv_sec != keys_st.st_mtim.tv_sec ||
	       st.st_mtim.tv_nsec != keys_st.st_mtim.tv_nsec ||
	       st.st_ctim.tv_sec != keys_st.st_ctim.tv_sec ||
	       st.st_ctim.tv_nsec != keys_st.st_ctim.tv_nsec; /* cp -p keeps mtime, not ctime */
}

/* A reference to the current keys (read again if the file changed), or
 * NULL when none were loaded. */
static struct keys *keys_get(void)
{
	struct keys *k;

	pthread_mutex_lock(&keys_lock);
	if (keys_path && file_changed()) {
		if (keys_reload() == 0)
			log_info("sealed: key-encryption keys read again from %s (%zu keys, current "
				 "%s)", keys_path, keys->ring->n, envelope_ring_current(keys->ring)->id);
		else if (stat(keys_path, &keys_st) == 0) /* logged once: until it changes again */
			log_warn("sealed: keeping the keys read before from %s", keys_path);
	}
	k = keys;
	if (k)
		k->refs++;
	pthread_mutex_unlock(&keys_lock);
	return k;
}

int sealed_keys_load(const char *path)
{
	int r;

	pthread_mutex_lock(&keys_lock);
	free(keys_path);
	keys_path = xstrdup(path);
	r = keys_reload();
	pthread_mutex_unlock(&keys_lock);
	return r;
}

void sealed_keys_unload(void)
{
	struct keys *k;

	pthread_mutex_lock(&keys_lock);
	k = keys;
	keys = NULL;
	free(keys_path);
	keys_path = NULL;
	pthread_mutex_unlock(&keys_lock);
	keys_unref(k);
}

/* ------------------------------------------------------------ the store */

/* The envelope of data for ref/tenant as bytea text; its key id into kid. */
static int seal_text(const struct keys *k, const char *ref, const char *tenant,
		     const void *data, size_t len, char **ret, char kid[ENVELOPE_KID_MAX])
{
	size_t aad_len, env_len;
	_cleanup_free_ char *aad = aad_of(ref, tenant, &aad_len);
	_cleanup_free_ unsigned char *env = NULL;
	int r;

	if (!k)
		return -ENOKEY;
	r = envelope_seal(k->ring, aad, aad_len, data, len, &env, &env_len);
	if (r < 0)
		return r;
	snprintf(kid, ENVELOPE_KID_MAX, "%s", envelope_ring_current(k->ring)->id);
	*ret = bytea_text(env, env_len);
	return 0;
}

int sealed_put(struct db *d, const struct sealed_owner *o, const void *data, size_t len,
	       char ret_ref[SEALED_REF_MAX])
{
	_cleanup_(keysp) struct keys *k = keys_get();
	_cleanup_free_ char *hex = NULL;
	char ref[SEALED_REF_MAX], kid[ENVELOPE_KID_MAX];
	struct dbp p = {0};
	int rc;

	if (len == 0 || len > SEALED_DATA_MAX)
		return -EINVAL;
	id_new("sealed", ref, sizeof(ref));
	if ((rc = seal_text(k, ref, o->tenant_id, data, len, &hex, kid)) < 0) {
		log_error("sealed: cannot seal a blob for %s %s: %s", o->kind, o->id, strerror(-rc));
		return rc;
	}
	dbp_str(&p, ref);
	dbp_str(&p, o->kind);
	dbp_str(&p, o->id);
	dbp_nstr(&p, o->tenant_id);
	dbp_str(&p, hex);
	dbp_str(&p, kid);
	rc = db_exec(d, NULL, "INSERT INTO sealed_blobs (ref, owner_kind, owner_id, tenant_id, "
		     "data, scheme, kek_id) VALUES ($1, $2, $3, $4, $5::bytea, '" SCHEME "', $6)",
		     &p);
	if (rc == 0)
		memcpy(ret_ref, ref, sizeof(ref));
	return rc;
}

/* Open the envelope of row ref (hex text) into *ret. Logs a refusal. */
static int open_hex(const struct keys *k, const char *ref, const char *tenant, const char *hex,
		    char **ret, size_t *ret_len)
{
	size_t aad_len, env_len = 0;
	_cleanup_free_ char *aad = aad_of(ref, tenant, &aad_len);
	_cleanup_free_ char *env = NULL;
	char kid[ENVELOPE_KID_MAX] = "?";
	int r;

	if (!k)
		return -ENOKEY;
	if ((r = hex_text_decode(hex, &env, &env_len)) == 0)
		r = envelope_open(k->ring, aad, aad_len, (unsigned char *)env, env_len, ret, ret_len);
	if (r == -ENOKEY) {
		envelope_key_id((unsigned char *)env, env_len, kid);
		log_error("sealed %s: its data key is wrapped by key id %s, which is not in the "
			  "key-encryption key file %s (restore it from a backup: docs/secrets.md)",
			  ref, kid, keys_path ? keys_path : "(none loaded)");
	} else if (r < 0) {
		log_error("sealed %s: refused: the envelope does not open (tampered with, or "
			  "copied from another row)", ref);
	}
	return r;
}

int sealed_get(struct db *d, const char *ref, char **ret, size_t *ret_len)
{
	_cleanup_(keysp) struct keys *k = NULL;
	PGresult *r = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, ref);
	rc = db_exec(d, &r, "SELECT " GET_COLS " FROM sealed_blobs WHERE ref = $1", &p);
	if (rc < 0)
		return rc;
	if (PQntuples(r) == 0) {
		rc = -ENOENT;
	} else if (strcmp(db_val(r, 0, GET_SCHEME), SCHEME) != 0) {
		log_error("sealed %s: stored plain: run bc-controller secrets migrate", ref);
		rc = -EPROTO;
	} else {
		k = keys_get();
		rc = open_hex(k, ref, db_val(r, 0, GET_TENANT), db_val(r, 0, GET_DATA), ret,
			      ret_len);
	}
	PQclear(r);
	return rc;
}

int sealed_delete(struct db *d, const char *refs)
{
	_cleanup_free_ char *n = NULL;
	struct dbp p = {0};
	int rc;

	if (!refs || !*refs)
		return 0;
	dbp_str(&p, refs);
	rc = db_scalar(d, "WITH x AS (DELETE FROM sealed_blobs WHERE ref = ANY (string_to_array("
		       "$1, E'\\n')) RETURNING 1) SELECT count(*) FROM x", &p, &n);
	return rc < 0 ? rc : atoi(n);
}

/* ------------------------------------------------ migration and rotation */

int sealed_count(struct db *d, int64_t *ret_plain, int64_t *ret_stale)
{
	_cleanup_(keysp) struct keys *k = keys_get();
	const struct envelope_key *cur = k ? envelope_ring_current(k->ring) : NULL;
	PGresult *r = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, cur ? cur->id : "");
	rc = db_exec(d, &r, "SELECT count(*) FILTER (WHERE scheme = 'plain'), count(*) FILTER "
		     "(WHERE scheme <> 'plain' AND kek_id <> $1) FROM sealed_blobs", &p);
	if (rc < 0)
		return rc;
	*ret_plain = db_i64(r, 0, COUNT_PLAIN);
	*ret_stale = db_i64(r, 0, COUNT_STALE);
	PQclear(r);
	return 0;
}

/* Seal one plain row in place. */
static int migrate_row(struct db *d, const struct keys *k, const PGresult *r, int i)
{
	const char *ref = db_val(r, i, ROW_REF);
	_cleanup_free_ char *plain = NULL, *hex = NULL;
	size_t len = 0;
	char kid[ENVELOPE_KID_MAX];
	struct dbp p = {0};
	int rc;

	if ((rc = hex_text_decode(db_val(r, i, ROW_DATA), &plain, &len)) < 0)
		return rc;
	rc = len ? seal_text(k, ref, db_val(r, i, ROW_TENANT), plain, len, &hex, kid) : -EINVAL;
	OPENSSL_cleanse(plain, len);
	if (rc < 0)
		return rc;
	dbp_str(&p, ref);
	dbp_str(&p, hex);
	dbp_str(&p, kid);
	return db_exec(d, NULL, "UPDATE sealed_blobs SET scheme = '" SCHEME "', data = $2::bytea, "
		       "kek_id = $3 WHERE ref = $1 AND scheme = 'plain'", &p);
}

int sealed_migrate(struct db *d, int64_t *ret_n)
{
	_cleanup_(keysp) struct keys *k = keys_get();
	int64_t n = 0;
	int rc = 0, rows;

	if (!k)
		return -ENOKEY;
	do {
		PGresult *r = NULL;
		rc = db_exec(d, &r, "SELECT " ROW_COLS " FROM sealed_blobs WHERE scheme = 'plain' "
			     "ORDER BY ref LIMIT 100", NULL);
		if (rc < 0)
			break;
		rows = PQntuples(r);
		for (int i = 0; i < rows && rc == 0; i++)
			rc = migrate_row(d, k, r, i);
		n += rows;
		PQclear(r);
	} while (rc == 0 && rows > 0);
	if (rc == 0)
		*ret_n = n;
	return rc;
}

/* Rewrap one row under the current key; a row that changed meanwhile
 * (deleted, or rewrapped by another pass) is left alone. 1 if rewrapped. */
static int rewrap_row(struct db *d, const struct keys *k, const PGresult *r, int i)
{
	const char *ref = db_val(r, i, ROW_REF);
	size_t aad_len, env_len = 0, out_len = 0;
	_cleanup_free_ char *aad = aad_of(ref, db_val(r, i, ROW_TENANT), &aad_len);
	_cleanup_free_ char *env = NULL, *hex = NULL;
	_cleanup_free_ unsigned char *out = NULL;
	_cleanup_free_ char *n = NULL;
	struct dbp p = {0};
	int rc;

	if ((rc = hex_text_decode(db_val(r, i, ROW_DATA), &env, &env_len)) == 0)
		rc = envelope_rewrap(k->ring, aad, aad_len, (unsigned char *)env, env_len, &out,
				     &out_len);
	if (rc < 0) {
		log_error("sealed %s: cannot rewrap (key id %s): %s", ref, db_val(r, i, ROW_KEK),
			  rc == -ENOKEY ? "that key is not in the file" : "it does not open");
		return rc;
	}
	hex = bytea_text(out, out_len);
	dbp_str(&p, ref);
	dbp_str(&p, hex);
	dbp_str(&p, envelope_ring_current(k->ring)->id);
	dbp_str(&p, db_val(r, i, ROW_KEK));
	rc = db_scalar(d, "WITH x AS (UPDATE sealed_blobs SET data = $2::bytea, kek_id = $3 "
		       "WHERE ref = $1 AND kek_id = $4 RETURNING 1) SELECT count(*) FROM x", &p, &n);
	return rc < 0 ? rc : atoi(n);
}

int sealed_rewrap(struct db *d, int64_t *ret_n, int64_t *ret_failed)
{
	_cleanup_(keysp) struct keys *k = keys_get();
	char last[SEALED_REF_MAX] = "";
	int64_t n = 0, failed = 0;
	int rc = 0, rows;

	if (!k)
		return -ENOKEY;
	do {
		PGresult *r = NULL;
		struct dbp p = {0};
		dbp_str(&p, envelope_ring_current(k->ring)->id);
		dbp_str(&p, last);
		rc = db_exec(d, &r, "SELECT " ROW_COLS " FROM sealed_blobs WHERE scheme <> 'plain' "
			     "AND kek_id <> $1 AND ref > $2 ORDER BY ref LIMIT 100", &p);
		if (rc < 0)
			break;
		rows = PQntuples(r);
		for (int i = 0; i < rows; i++) {
			int x = rewrap_row(d, k, r, i);
			if (x == -ENOKEY || x == -EBADMSG)
				failed++;
			else if (x < 0 && (rc = x) < 0)
				break;
			else
				n += x;
		}
		if (rows)
			snprintf(last, sizeof(last), "%s", db_val(r, rows - 1, ROW_REF));
		PQclear(r);
	} while (rc == 0 && rows > 0);
	if (rc == 0) {
		*ret_n = n;
		*ret_failed = failed;
	}
	return rc;
}
