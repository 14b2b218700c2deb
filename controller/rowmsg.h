/* rowmsg.h: helpers to fill response messages from result rows, with every
 * string copied into the call's arena. */
#ifndef BC_CTL_ROWMSG_H
#define BC_CTL_ROWMSG_H

#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "rpc.h"

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

#endif
