/* migrate.c: forward-only schema migrations from numbered SQL files
 * (NNNN_name.sql), applied in order under an advisory lock, each in its own
 * transaction, recorded with the SHA-256 of its text. An applied file whose
 * text changed since is refused: migrations are never edited. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db.h"
#include "log.h"
#include "migrate.h"
#include "util.h"

#define MIGRATE_LOCK "7164930317812341"

struct mfile {
	int version;
	char name[256];
};

static int mfile_cmp(const void *a, const void *b)
{
	return ((const struct mfile *)a)->version - ((const struct mfile *)b)->version;
}

static int list_files(const char *dir, struct mfile **ret, size_t *ret_n)
{
	DIR *dp = opendir(dir);
	struct mfile *v = NULL;
	size_t n = 0;
	struct dirent *e;

	if (!dp)
		return -errno;
	while ((e = readdir(dp))) {
		int ver;
		size_t len = strlen(e->d_name);
		if (len < 10 || len >= 256 || strcmp(e->d_name + len - 4, ".sql") != 0)
			continue;
		if (sscanf(e->d_name, "%4d_", &ver) != 1 || ver <= 0)
			continue;
		v = realloc(v, (n + 1) * sizeof(*v));
		if (!v)
			abort();
		v[n].version = ver;
		snprintf(v[n].name, sizeof(v[n].name), "%s", e->d_name);
		n++;
	}
	closedir(dp);
	qsort(v, n, sizeof(*v), mfile_cmp);
	for (size_t i = 0; i < n; i++)
		if (v[i].version != (int)i + 1) {
			log_error("migrate: %s: versions must be 1..N without gaps", v[i].name);
			free(v);
			return -EINVAL;
		}
	*ret = v;
	*ret_n = n;
	return 0;
}

const char *migrate_default_dir(const char *configured)
{
	static const char *const dirs[] = {"migrations", "/usr/local/share/bc/migrations",
					   "/usr/share/bc/migrations"};
	struct stat st;

	if (configured && *configured)
		return configured;
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		if (stat(dirs[i], &st) == 0 && S_ISDIR(st.st_mode))
			return dirs[i];
	return dirs[0];
}

static int exec_script(struct db *d, const char *sql)
{
	PGresult *r = PQexec(d->conn, sql);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

	if (!ok)
		log_error("migrate: %s", PQresultErrorMessage(r));
	PQclear(r);
	return ok ? 0 : -EIO;
}

static int apply_one(struct db *d, const char *dir, const struct mfile *f)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, f->name);
	_cleanup_free_ char *sql = NULL, *have = NULL;
	char sum[65];
	struct dbp p = {0};
	size_t len;
	int r;

	if ((r = file_read_all(path, 8 << 20, &sql, &len)) < 0) {
		log_error("migrate: cannot read %s: %s", path, strerror(-r));
		return r;
	}
	sha256_hex(sql, len, sum);
	dbp_i64(&p, f->version);
	r = db_scalar(d, "SELECT checksum FROM schema_migrations WHERE version = $1", &p, &have);
	if (r == 0) {
		if (strcmp(have, sum) != 0) {
			log_error("migrate: %s was changed after it was applied (checksum %s, "
				  "recorded %s)", f->name, sum, have);
			return -EINVAL;
		}
		return 0;
	}
	if (r != -ENOENT)
		return r;
	if (exec_script(d, "BEGIN") < 0)
		return -EIO;
	if (exec_script(d, sql) < 0) {
		exec_script(d, "ROLLBACK");
		return -EIO;
	}
	p.n = 0;
	dbp_i64(&p, f->version);
	dbp_str(&p, f->name);
	dbp_str(&p, sum);
	if (db_exec(d, NULL, "INSERT INTO schema_migrations (version, name, checksum) "
		    "VALUES ($1, $2, $3)", &p) < 0 || exec_script(d, "COMMIT") < 0) {
		exec_script(d, "ROLLBACK");
		return -EIO;
	}
	log_info("migrate: applied %s", f->name);
	return 0;
}

int migrate_apply(struct db *d, const char *dir, int *ret_version)
{
	struct mfile *files = NULL;
	size_t n = 0;
	int r;

	if ((r = list_files(dir, &files, &n)) < 0) {
		log_error("migrate: cannot list %s: %s", dir, strerror(-r));
		return r;
	}
	if ((int)n > CTL_SCHEMA_VERSION) {
		log_error("migrate: %s holds %zu migrations, this binary knows %d", dir, n,
			  CTL_SCHEMA_VERSION);
		free(files);
		return -EINVAL;
	}
	r = exec_script(d, "SELECT pg_advisory_lock(" MIGRATE_LOCK ")");
	if (r == 0)
		r = exec_script(d, "CREATE TABLE IF NOT EXISTS schema_migrations ("
				   "version integer PRIMARY KEY, name text NOT NULL, "
				   "checksum text NOT NULL, applied_at timestamptz NOT NULL "
				   "DEFAULT now())");
	for (size_t i = 0; r == 0 && i < n; i++)
		r = apply_one(d, dir, &files[i]);
	exec_script(d, "SELECT pg_advisory_unlock(" MIGRATE_LOCK ")");
	free(files);
	if (r == 0)
		r = migrate_current(d, ret_version);
	return r;
}

int migrate_current(struct db *d, int *ret_version)
{
	_cleanup_free_ char *v = NULL;
	int r = db_scalar(d, "SELECT coalesce(max(version), 0) FROM schema_migrations", NULL, &v);

	if (r < 0 && strcmp(db_last_sqlstate(d), "42P01") == 0) {
		*ret_version = 0;
		return 0;
	}
	if (r < 0)
		return r;
	*ret_version = v ? atoi(v) : 0;
	return 0;
}
