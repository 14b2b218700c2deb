/* rowmsg.h: helpers to fill response messages from result rows, with every
 * string copied into the call's arena.
 *
 * Rows are read by name. Every SELECT list spelled as a *_COLS macro has an
 * enum of its columns beside it, in the same order, ending with a count
 * (SBX_COLS, SBX_ID .. SBX_NCOLS), and code reads db_val(r, i,
 * SBX_EXPIRES_AT), never db_val(r, i, 8); an ad-hoc query gets a local enum
 * beside its SQL. COLS_CHECK(SBX_COLS, SBX_NCOLS) beside the pair checks at
 * start-up (an assert: debug builds) that the list has as many columns as
 * the enum counts. */
#ifndef BC_CTL_ROWMSG_H
#define BC_CTL_ROWMSG_H

#include <assert.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "rpc.h"

/* The column of a one-column SELECT (db_scalar's, or db_val(r, 0, COL_ONLY)). */
enum { COL_ONLY = 0 };

/* Epoch milliseconds of a timestamptz column, for SELECT lists. */
#define MS(col) "(extract(epoch from " col ") * 1000)::bigint"

static inline char *row_str(rpc_call *c, const PGresult *r, int row, int col)
{
	const char *v = db_val(r, row, col);

	return v ? rpc_strdup(c, v) : (char *)"";
}

/* Split a column selected as array_to_string(col, E'\n') into an arena
 * array (every element we store is a single printable line). */
static inline size_t row_strv(rpc_call *c, const PGresult *r, int row, int col, char ***ret)
{
	const char *v = db_val(r, row, col);
	size_t n = 0, cap = 1;
	char **out, *s, *save = NULL;

	*ret = NULL;
	if (!v || !*v)
		return 0;
	s = rpc_strdup(c, v);
	for (const char *p = s; *p; p++)
		cap += *p == '\n';
	out = rpc_alloc(c, cap * sizeof(char *));
	for (char *t = strtok_r(s, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
		out[n++] = t;
	*ret = out;
	return n;
}

/* The number of top-level items of a SELECT list: commas outside
 * parentheses and outside '...' literals, plus one (0 for ""). */
static inline int cols_count(const char *s)
{
	int n = 0, depth = 0;
	bool quoted = false, any = false;

	for (; *s; s++) {
		any = any || (*s != ' ' && *s != '\t' && *s != '\n');
		if (*s == '\'')
			quoted = !quoted;
		else if (quoted)
			continue;
		else if (*s == '(')
			depth++;
		else if (*s == ')')
			depth--;
		else if (*s == ',' && depth == 0)
			n++;
	}
	return any ? n + 1 : 0;
}

#ifdef NDEBUG
#define COLS_CHECK(cols, ncols)
#else
/* At start-up: the column list cols has exactly ncols columns. */
#define COLS_CHECK(cols, ncols)                                              \
	__attribute__((constructor)) static void cols_check_##ncols(void)    \
	{                                                                    \
		assert(cols_count(cols) == ncols && #cols " vs " #ncols);    \
	}
#endif

#endif
