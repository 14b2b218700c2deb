/* db.h: PostgreSQL access for the controller, over libpq.
 *
 * One connection per thread (gRPC workers, reconcilers, the LISTEN thread
 * each own one; stream threads borrow one from streams.c's pool), parametrized queries only (PQexecParams;
 * never SQL built from input), and a transaction helper that retries
 * serialization failures and deadlocks. */
#ifndef BC_CTL_DB_H
#define BC_CTL_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "err.h"

/* A statement this connection has prepared, keyed by the address of its
 * SQL text: every statement is a string literal, so the address names it. */
struct db_stmt {
	const char *sql;
	uint64_t text_hash;  /* of the text it was prepared from (stmt_of) */
	char name[16];
};

struct db {
	PGconn *conn;
	char *conninfo;
	bool in_tx;
	const char *begin;   /* a BEGIN not sent yet: goes with the first statement */
	struct db_stmt *stmts;
	size_t n_stmts;
};

/* Parameters of one statement: up to 24, strings (NULL = SQL NULL). */
#define DBP_MAX 24
struct dbp {
	int n;
	const char *v[DBP_MAX];
	char buf[DBP_MAX][32];
};

void dbp_str(struct dbp *p, const char *s);      /* "" stays "" */
void dbp_nstr(struct dbp *p, const char *s);     /* "" or NULL -> NULL */
void dbp_i64(struct dbp *p, int64_t v);
void dbp_u64(struct dbp *p, uint64_t v);
void dbp_bool(struct dbp *p, bool v);

/* Connect (db_open) or reconnect lazily (db_ensure). 0 or -EIO. */
struct db *db_open(const char *conninfo);
int db_ensure(struct db *d);
void db_close(struct db *d);

/* Run one statement, prepared on this connection the first time it is
 * seen (sql must be a string literal: its address is the cache key), so
 * PostgreSQL parses it once and can reuse its plan. On success *ret (if not NULL) is the result (PQclear
 * it). On failure returns -EIO (or -EAGAIN for a serialization failure or
 * deadlock, -EEXIST for a unique violation, -EINVAL for bad input such as
 * invalid inet text), and err (if not NULL) is INTERNAL. The statement is
 * logged at debug level only. */
int db_exec(struct db *d, PGresult **ret, const char *sql, const struct dbp *p);

/* Convenience: first row's first column as a malloc'd string (NULL for SQL
 * NULL) with -ENOENT when there is no row. */
int db_scalar(struct db *d, const char *sql, const struct dbp *p, char **ret);

/* Statements sent together, in one round trip (a libpq pipeline), in
 * order, within the caller's transaction if any; for statements none of
 * which needs an earlier one's answer. Returns 0 with every q[i].r set
 * (PQclear each), or the first failure as db_exec would, with every q[].r
 * NULL (a transaction is then aborted, as after any failed statement). */
#define DB_PIPE_MAX 8
struct db_q {
	const char *sql;
	const struct dbp *p;
	PGresult *r;
};
int db_pipe(struct db *d, struct db_q *q, int n);

/* Run fn inside BEGIN ... COMMIT at the given isolation ("READ COMMITTED",
 * "REPEATABLE READ", "SERIALIZABLE"). fn returns 0 to commit, <0 to roll
 * back (its bc_error is kept). Serialization failures and deadlocks (in fn
 * or at COMMIT) are retried up to 8 times with a short random backoff.
 * Returns fn's result, or -EIO with err INTERNAL. */
typedef int (*db_tx_fn)(struct db *d, void *arg, bc_error *err);
int db_tx(struct db *d, const char *isolation, db_tx_fn fn, void *arg, bc_error *err);

/* Value helpers for results. */
const char *db_val(const PGresult *r, int row, int col);   /* NULL for SQL NULL */
int64_t db_i64(const PGresult *r, int row, int col);       /* 0 for NULL */
bool db_bool(const PGresult *r, int row, int col);

/* The SQLSTATE of the last failed statement on this connection ("" if none). */
const char *db_last_sqlstate(const struct db *d);

/* Map a database failure to the caller: UNAVAILABLE/INTERNAL in err
 * (-BC_EDOMAIN and -EAGAIN, which db_tx retries, pass untouched). */
int db_fail(bc_error *err, int rc);
/* Run a statement that must return a row: 0 with *ret (PQclear it), or
 * NOT_FOUND with the printf-style message when it returns none, or the
 * database failure as db_fail maps it. */
int db_one(struct db *d, PGresult **ret, const char *sql, const struct dbp *p, bc_error *err,
	   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* One batch of a retention purge: sql deletes at most $2 (batch) rows
 * older than $1 (retention_seconds) and selects how many. Nothing to do
 * when retention_seconds <= 0 (keep them all). The number deleted, or
 * -errno. */
int db_purge(struct db *d, const char *sql, int retention_seconds, int batch);

#endif
