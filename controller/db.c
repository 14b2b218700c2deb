/* db.c: libpq connections, parametrized statements, retried transactions. */
#include "db.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
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

/* The slot of sql's prepared statement on this connection; *fresh when it
 * is new: the slot is then d->n_stmts, taken by stmt_prepared once its
 * PREPARE was sent. */
static uint64_t text_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static size_t stmt_of(struct db *d, const char *sql, bool *fresh)
{
	uint64_t h = text_hash(sql);
	struct db_stmt *n;

	for (size_t i = 0; i < d->n_stmts; i++) {
		if (d->stmts[i].sql != sql)
			continue;
		if (d->stmts[i].text_hash == h) {
			*fresh = false;
			return i;
		}
		/* the key is the text's address: another text at an address a
		 * freed one had (a statement built at run time) must never run
		 * the old one's prepared statement */
		log_error("database: statement %s's address now holds another text (a statement "
			  "that is not a string literal?); preparing it anew", d->stmts[i].name);
		d->stmts[i].sql = NULL;
	}
	d->stmts = realloc(d->stmts, (d->n_stmts + 1) * sizeof(*d->stmts));
	if (!d->stmts)
		abort();
	n = &d->stmts[d->n_stmts];
	n->sql = sql;
	n->text_hash = h;
	snprintf(n->name, sizeof(n->name), "s%zu", d->n_stmts);
	*fresh = true;
	return d->n_stmts;
}

static void stmt_prepared(struct db *d)
{
	d->n_stmts++;
}

/* A pending BEGIN (db_tx), then each statement, preceded by its PREPARE when
 * new on this connection, all in one libpq pipeline with one sync: one
 * round trip. An explicit transaction outlives the sync, so statements
 * after it run in the same transaction as usual. Each q[i].r gets its
 * statement's answer (its PREPARE's or the BEGIN's when that failed);
 * after a failure the later ones get PGRES_PIPELINE_ABORTED. -1 when the
 * pipeline itself failed (a broken connection): some q[].r are NULL and
 * the connection is closed (db_ensure opens a new one). */
static int run_pipeline(struct db *d, struct db_q *q, int n)
{
	int kind[2 * DB_PIPE_MAX + 1], want = 0, got = 0, nulls = 0;
	size_t slot[DB_PIPE_MAX];
	const char *begin = d->begin;
	bool ok = PQenterPipelineMode(d->conn), failed;
	PGresult *r;

	if (n > DB_PIPE_MAX)
		abort(); /* a programming error: pipelines are static */
	d->begin = NULL;
	if (begin) {
		kind[want++] = -1; /* -1: BEGIN, -2 - i: PREPARE of i, i: statement i */
		ok = ok && PQsendQueryParams(d->conn, begin, 0, NULL, NULL, NULL, NULL, 0);
	}
	for (int i = 0; i < n; i++) {
		bool fresh;
		q[i].r = NULL;
		slot[i] = stmt_of(d, q[i].sql, &fresh);
		if (fresh) {
			kind[want++] = -2 - i;
			ok = ok && PQsendPrepare(d->conn, d->stmts[slot[i]].name, q[i].sql,
						 q[i].p ? q[i].p->n : 0, NULL);
			stmt_prepared(d); /* taken back below unless it answers OK */
		}
		kind[want++] = i;
		ok = ok && PQsendQueryPrepared(d->conn, d->stmts[slot[i]].name,
					       q[i].p ? q[i].p->n : 0, q[i].p ? q[i].p->v : NULL,
					       NULL, NULL, 0);
	}
	ok = ok && PQpipelineSync(d->conn);
	/* each command's result is followed by a NULL; the sync ends it all */
	while (ok && nulls <= want) {
		int k;
		if (!(r = PQgetResult(d->conn))) {
			if (PQstatus(d->conn) != CONNECTION_OK)
				break;
			nulls++;
			continue;
		}
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			break;
		}
		if (got >= want) { /* more than was asked: not ours to answer */
			PQclear(r);
			continue;
		}
		k = kind[got++];
		failed = PQresultStatus(r) != PGRES_COMMAND_OK;
		if (k < -1 && failed && slot[-2 - k] < d->n_stmts)
			d->n_stmts = slot[-2 - k]; /* it and every later new one unprepared */
		if (k >= 0 && !q[k].r)
			q[k].r = r;
		else if (k < -1 && failed)
			q[-2 - k].r = r; /* the PREPARE's failure is the statement's answer */
		else if (k == -1 && failed && n > 0)
			q[0].r = r;      /* so is the BEGIN's */
		else
			PQclear(r);
	}
	PQexitPipelineMode(d->conn);
	if (got == want)
		return 0;
	/* which PREPAREs took is unknown: start over on a new connection */
	PQfinish(d->conn);
	d->conn = NULL;
	stmts_forget(d);
	return -1;
}

/* Transaction control goes through the simple protocol; everything else is
 * prepared once per connection. A transaction's BEGIN waits for its first
 * statement and goes with it (run_pipeline); one that ends before any
 * statement never sends it. */
static PGresult *run(struct db *d, const char *sql, const struct dbp *p)
{
	size_t st;
	bool fresh;
	PGresult *r;

	if (is_tx_control(sql, p)) {
		if (d->begin && sql[0] != 'B') { /* nothing was sent: nothing to end */
			d->begin = NULL;
			return PQmakeEmptyPGresult(d->conn, PGRES_COMMAND_OK);
		}
		return PQexec(d->conn, sql);
	}
	if (d->begin) {
		struct db_q q = {.sql = sql, .p = p};
		if (run_pipeline(d, &q, 1) < 0) {
			PQclear(q.r);
			return PQmakeEmptyPGresult(NULL, PGRES_FATAL_ERROR);
		}
		return q.r;
	}
	st = stmt_of(d, sql, &fresh);
	if (fresh) {
		r = PQprepare(d->conn, d->stmts[st].name, sql, p ? p->n : 0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			return r; /* reported by the caller like any failure */
		PQclear(r);
		stmt_prepared(d);
	}
	return PQexecPrepared(d->conn, d->stmts[st].name, p ? p->n : 0, p ? p->v : NULL, NULL,
			      NULL, 0);
}

/* What db_exec makes of a statement's result r (consumed). */
static int take(struct db *d, PGresult *r, PGresult **ret)
{
	ExecStatusType st = PQresultStatus(r);
	const char *state;
	int rc;

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (ret)
			*ret = r;
		else
			PQclear(r);
		return 0;
	}
	state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	snprintf(last_state, sizeof(last_state), "%s", state ? state : "");
	rc = map_state(state);
	if (rc == -EIO)
		log_warn("db: statement failed sqlstate=%s: %s", state ? state : "-",
			 PQresultErrorMessage(r));
	else
		log_debug("db: sqlstate=%s: %s", state ? state : "-", PQresultErrorMessage(r));
	PQclear(r);
	if (PQstatus(d->conn) != CONNECTION_OK) {
		PQfinish(d->conn);
		d->conn = NULL;
		return -EIO;
	}
	return rc == -EIO ? -EPROTO : rc;
}

int db_exec(struct db *d, PGresult **ret, const char *sql, const struct dbp *p)
{
	last_state[0] = '\0';
	if (db_ensure(d) < 0)
		return -EIO;
	return take(d, run(d, sql, p), ret);
}

int db_pipe(struct db *d, struct db_q *q, int n)
{
	int rc = 0;

	last_state[0] = '\0';
	if (db_ensure(d) < 0)
		return -EIO;
	if (run_pipeline(d, q, n) < 0) {
		for (int i = 0; i < n; i++) {
			PQclear(q[i].r);
			q[i].r = NULL;
		}
		return -EIO;
	}
	for (int i = 0; i < n; i++) {
		PGresult *r = q[i].r;
		q[i].r = NULL;
		if (rc < 0)
			PQclear(r); /* aborted after the first failure */
		else
			rc = take(d, r, &q[i].r);
	}
	if (rc < 0)
		for (int i = 0; i < n; i++) {
			PQclear(q[i].r);
			q[i].r = NULL;
		}
	return rc;
}

const char *db_last_sqlstate(const struct db *d)
{
	(void)d;
	return last_state;
}

int db_scalar(struct db *d, const char *sql, const struct dbp *p, char **ret)
{
	enum { SCALAR_COL };
	PGresult *r = NULL;
	int rc = db_exec(d, &r, sql, p);

	if (rc < 0)
		return rc;
	if (PQntuples(r) < 1) {
		PQclear(r);
		return -ENOENT;
	}
	*ret = PQgetisnull(r, 0, SCALAR_COL) ? NULL : xstrdup(PQgetvalue(r, 0, SCALAR_COL));
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

/* See db.h. */
int db_fail(bc_error *err, int rc)
{
	if (rc == -BC_EDOMAIN)
		return rc;
	if (rc == -EAGAIN)
		return rc; /* let db_tx retry */
	return bc_error_set(err, rc == -EIO ? BC_UNAVAILABLE : BC_INTERNAL,
			    "database error, try again");
}

/* See db.h. */
int db_one(struct db *d, PGresult **ret, const char *sql, const struct dbp *p, bc_error *err,
	   const char *fmt, ...)
{
	PGresult *r = NULL;
	char msg[400];
	va_list ap;
	int rc = db_exec(d, &r, sql, p);

	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		return bc_error_set(err, BC_NOT_FOUND, "%s", msg);
	}
	*ret = r;
	return 0;
}

/* See db.h. */
int db_purge(struct db *d, const char *sql, int retention_seconds, int batch)
{
	enum { PURGE_COUNT }; /* sql's one column: the rows deleted */
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (retention_seconds <= 0)
		return 0;
	dbp_i64(&p, retention_seconds);
	dbp_i64(&p, batch);
	if ((rc = db_exec(d, &r, sql, &p)) < 0)
		return rc;
	rc = (int)db_i64(r, 0, PURGE_COUNT);
	PQclear(r);
	return rc;
}
