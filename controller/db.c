/* db.c: libpq connections, parametrized statements, retried transactions. */
#include "db.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

static __thread char last_state[6];

static void dbp_push(struct dbp *p, const char *v)
{
	if (p->n >= DBP_MAX)
		abort(); /* a programming error: statements are static */
	p->v[p->n++] = v;
}

void dbp_str(struct dbp *p, const char *s)
{
	dbp_push(p, s ? s : "");
}

void dbp_nstr(struct dbp *p, const char *s)
{
	dbp_push(p, s && *s ? s : NULL);
}

void dbp_i64(struct dbp *p, int64_t v)
{
	snprintf(p->buf[p->n], sizeof(p->buf[0]), "%" PRId64, v);
	dbp_push(p, p->buf[p->n]);
}

void dbp_u64(struct dbp *p, uint64_t v)
{
	snprintf(p->buf[p->n], sizeof(p->buf[0]), "%" PRIu64, v);
	dbp_push(p, p->buf[p->n]);
}

void dbp_bool(struct dbp *p, bool v)
{
	dbp_push(p, v ? "true" : "false");
}

static void stmts_forget(struct db *d)
{
	free(d->stmts);
	d->stmts = NULL;
	d->n_stmts = 0;
}

static int db_connect(struct db *d)
{
	stmts_forget(d);
	if (d->conn)
		PQfinish(d->conn);
	d->conn = PQconnectdb(d->conninfo);
	if (PQstatus(d->conn) != CONNECTION_OK) {
		log_debug("db connect failed: %s", PQerrorMessage(d->conn));
		PQfinish(d->conn);
		d->conn = NULL;
		return -EIO;
	}
	d->in_tx = false;
	return 0;
}

struct db *db_open(const char *conninfo)
{
	struct db *d = xcalloc(1, sizeof(*d));

	d->conninfo = xstrdup(conninfo);
	if (db_connect(d) < 0) {
		db_close(d);
		return NULL;
	}
	return d;
}

int db_ensure(struct db *d)
{
	if (d->conn && PQstatus(d->conn) == CONNECTION_OK)
		return 0;
	return db_connect(d);
}

void db_close(struct db *d)
{
	if (!d)
		return;
	if (d->conn)
		PQfinish(d->conn);
	stmts_forget(d);
	free(d->conninfo);
	free(d);
}

static int map_state(const char *st)
{
	if (!st)
		return -EIO;
	if (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0)
		return -EAGAIN;
	if (strcmp(st, "23505") == 0)
		return -EEXIST;
	if (strncmp(st, "22", 2) == 0)
		return -EINVAL;
	return -EIO;
}

static bool is_tx_control(const char *sql, const struct dbp *p)
{
	return !p && (!strncmp(sql, "BEGIN", 5) || !strcmp(sql, "COMMIT") ||
		      !strcmp(sql, "ROLLBACK"));
}

/* The prepared statement of sql on this connection; *fresh when it is
 * new and still has to be prepared (it is recorded only once that worked:
 * stmt_prepared). */
static const struct db_stmt *stmt_of(struct db *d, const char *sql, bool *fresh)
{
	struct db_stmt *n;

	for (size_t i = 0; i < d->n_stmts; i++)
		if (d->stmts[i].sql == sql) {
			*fresh = false;
			return &d->stmts[i];
		}
	d->stmts = realloc(d->stmts, (d->n_stmts + 1) * sizeof(*d->stmts));
	if (!d->stmts)
		abort();
	n = &d->stmts[d->n_stmts];
	n->sql = sql;
	snprintf(n->name, sizeof(n->name), "s%zu", d->n_stmts);
	*fresh = true;
	return n;
}

static void stmt_prepared(struct db *d)
{
	d->n_stmts++;
}

/* A transaction's BEGIN, its statement's PREPARE if new, and the statement,
 * sent together in one pipeline (one round trip instead of two or three);
 * returns the first failure, else the statement's result. An explicit
 * transaction outlives the pipeline's sync, so later statements run in it
 * as usual. */
static PGresult *run_with_begin(struct db *d, const struct db_stmt *st, bool fresh,
				const char *sql, const struct dbp *p)
{
	PGresult *got[3] = {NULL, NULL, NULL}, *r;
	int want = fresh ? 3 : 2, n = 0, nulls = 0;
	const char *begin = d->begin;

	d->begin = NULL;
	if (!PQenterPipelineMode(d->conn) ||
	    !PQsendQueryParams(d->conn, begin, 0, NULL, NULL, NULL, NULL, 0) ||
	    (fresh && !PQsendPrepare(d->conn, st->name, sql, p ? p->n : 0, NULL)) ||
	    !PQsendQueryPrepared(d->conn, st->name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL,
				 0) ||
	    !PQpipelineSync(d->conn)) {
		PQexitPipelineMode(d->conn);
		return PQmakeEmptyPGresult(d->conn, PGRES_FATAL_ERROR);
	}
	/* each command's result is followed by a NULL; the sync ends it all */
	while (nulls < 8) {
		r = PQgetResult(d->conn);
		if (!r) {
			if (PQstatus(d->conn) != CONNECTION_OK)
				break;
			nulls++;
			continue;
		}
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			break;
		}
		if (n < want)
			got[n++] = r;
		else
			PQclear(r);
	}
	PQexitPipelineMode(d->conn);
	if (n < want) {
		for (int i = 0; i < n; i++)
			PQclear(got[i]);
		return PQmakeEmptyPGresult(d->conn, PGRES_FATAL_ERROR);
	}
	/* the first failure is the one to report (later ones say "aborted") */
	for (int i = 0; i < want - 1; i++) {
		if (PQresultStatus(got[i]) != PGRES_COMMAND_OK) {
			for (int j = 0; j < want; j++)
				if (j != i)
					PQclear(got[j]);
			return got[i];
		}
		PQclear(got[i]);
	}
	if (fresh)
		stmt_prepared(d);
	return got[want - 1];
}

/* Transaction control goes through the simple protocol; everything else is
 * prepared once per connection. A transaction's BEGIN waits for its first
 * statement (run_with_begin); one that ends before any statement never
 * sends it. */
static PGresult *run(struct db *d, const char *sql, const struct dbp *p)
{
	const struct db_stmt *st;
	bool fresh;
	PGresult *r;

	if (is_tx_control(sql, p)) {
		if (d->begin && sql[0] != 'B') { /* nothing was sent: nothing to end */
			d->begin = NULL;
			return PQmakeEmptyPGresult(d->conn, PGRES_COMMAND_OK);
		}
		return PQexec(d->conn, sql);
	}
	st = stmt_of(d, sql, &fresh);
	if (d->begin)
		return run_with_begin(d, st, fresh, sql, p);
	if (fresh) {
		r = PQprepare(d->conn, st->name, sql, p ? p->n : 0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			return r; /* reported by the caller like any failure */
		PQclear(r);
		stmt_prepared(d);
	}
	return PQexecPrepared(d->conn, st->name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
}

int db_exec(struct db *d, PGresult **ret, const char *sql, const struct dbp *p)
{
	PGresult *r;
	ExecStatusType st;
	int rc;

	last_state[0] = '\0';
	if (db_ensure(d) < 0)
		return -EIO;
	r = run(d, sql, p);
	st = PQresultStatus(r);
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (ret)
			*ret = r;
		else
			PQclear(r);
		return 0;
	}
	{
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		snprintf(last_state, sizeof(last_state), "%s", state ? state : "");
		rc = map_state(state);
		if (rc == -EIO)
			log_warn("db: statement failed sqlstate=%s: %s", state ? state : "-",
				 PQresultErrorMessage(r));
		else
			log_debug("db: sqlstate=%s: %s", state ? state : "-", PQresultErrorMessage(r));
	}
	PQclear(r);
	if (PQstatus(d->conn) != CONNECTION_OK) {
		PQfinish(d->conn);
		d->conn = NULL;
		return -EIO;
	}
	return rc == -EIO ? -EPROTO : rc;
}

const char *db_last_sqlstate(const struct db *d)
{
	(void)d;
	return last_state;
}

int db_scalar(struct db *d, const char *sql, const struct dbp *p, char **ret)
{
	PGresult *r = NULL;
	int rc = db_exec(d, &r, sql, p);

	if (rc < 0)
		return rc;
	if (PQntuples(r) < 1) {
		PQclear(r);
		return -ENOENT;
	}
	*ret = PQgetisnull(r, 0, 0) ? NULL : xstrdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	return 0;
}

static void backoff(int attempt)
{
	unsigned int r = 0;
	struct timespec ts;

	random_bytes(&r, sizeof(r));
	ts.tv_sec = 0;
	ts.tv_nsec = (long)((1 + attempt) * 1000000L + (r % 4000000u));
	nanosleep(&ts, NULL);
}

int db_tx(struct db *d, const char *isolation, db_tx_fn fn, void *arg, bc_error *err)
{
	static const char *const begins[] = {
		"BEGIN ISOLATION LEVEL READ COMMITTED", "BEGIN ISOLATION LEVEL REPEATABLE READ",
		"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
		"BEGIN ISOLATION LEVEL SERIALIZABLE"};
	const char *begin = NULL;
	int rc = -EIO;

	for (size_t i = 0; i < ARRAY_SIZE(begins) && !begin; i++)
		if (strcmp(begins[i] + strlen("BEGIN ISOLATION LEVEL "), isolation) == 0)
			begin = begins[i];
	if (!begin)
		abort(); /* a programming error: isolation levels are literals */
	for (int attempt = 0; attempt < 8; attempt++) {
		if (db_ensure(d) < 0) {
			bc_error_set(err, BC_UNAVAILABLE, "database unavailable");
			return -EIO;
		}
		d->begin = begin; /* sent with the first statement */
		d->in_tx = true;
		rc = fn(d, arg, err);
		if (rc == 0)
			rc = db_exec(d, NULL, "COMMIT", NULL);
		else
			db_exec(d, NULL, "ROLLBACK", NULL);
		d->in_tx = false;
		d->begin = NULL;
		if (rc != -EAGAIN)
			break;
		if (d->conn)
			db_exec(d, NULL, "ROLLBACK", NULL);
		backoff(attempt);
	}
	if (rc < 0 && rc != -BC_EDOMAIN && err && err->code == BC_OK)
		bc_error_set(err, rc == -EAGAIN ? BC_CONFLICT : BC_INTERNAL,
			     rc == -EAGAIN ? "too much contention, retry" : "database error");
	return rc;
}

const char *db_val(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return PQgetvalue(r, row, col);
}

int64_t db_i64(const PGresult *r, int row, int col)
{
	const char *v = db_val(r, row, col);

	return v ? strtoll(v, NULL, 10) : 0;
}

bool db_bool(const PGresult *r, int row, int col)
{
	const char *v = db_val(r, row, col);

	return v && v[0] == 't';
}
