/* dbdrv.c: drives the controller's statement cache (controller/db.c) on a
 * real PostgreSQL for tests/integration/db_cache.t.
 *
 *   dbdrv CONNINFO   prints one line per step: "<step> <answer>", where the
 *                    answer is the statement's value or "error"
 *
 * db_exec keys its prepared statements by the text's address. A statement
 * built at run time (a buffer freed and reused, or rewritten in place) puts
 * another text at an address the cache knows: it must run the new text,
 * never the old one's prepared statement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/db.h"

static void step(struct db *d, const char *name, const char *sql, const struct dbp *p)
{
	PGresult *r = NULL;

	if (db_exec(d, &r, sql, p) < 0 || PQntuples(r) != 1)
		printf("%s error\n", name);
	else
		printf("%s %s\n", name, PQgetvalue(r, 0, 0));
	PQclear(r);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const char literal[] = "SELECT 'literal'";
	struct dbp p = {0};
	struct db *d;
	char *buf;

	if (argc != 2 || !(d = db_open(argv[1]))) {
		fprintf(stderr, "usage: dbdrv CONNINFO (and a database that answers)\n");
		return 2;
	}
	buf = malloc(256);
	strcpy(buf, "SELECT 'first'");
	step(d, "first", buf, NULL);
	step(d, "literal", literal, NULL);
	strcpy(buf, "SELECT 'second'"); /* the same address, another text */
	step(d, "second", buf, NULL);
	strcpy(buf, "SELECT $1::text || ' third'"); /* and another parameter count */
	dbp_str(&p, "the");
	step(d, "third", buf, &p);
	strcpy(buf, "SELECT 'second'"); /* back to a text seen before */
	step(d, "again", buf, NULL);
	step(d, "literal-again", literal, NULL);
	free(buf);
	db_close(d);
	return 0;
}
