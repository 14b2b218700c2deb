/* validate.c: the shapes of refusals every handler shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "ctl.h"
#include "util.h"

int invalid(bc_error *err, const char *field, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	bc_error_set(err, BC_INVALID_INPUT, "%s", msg);
	return bc_error_detail(err, "field", "%s", field);
}

int check_id(bc_error *err, const char *field, const char *prefix, const char *value)
{
	if (!value || !*value)
		return invalid(err, field, "%s is required", field);
	if (!id_valid(prefix, value))
		return invalid(err, field, "%s is not a valid %s_ id", field, prefix);
	return 0;
}

int db_fail(bc_error *err, int rc)
{
	if (rc == -BC_EDOMAIN)
		return rc;
	if (rc == -EAGAIN)
		return rc; /* let db_tx retry */
	return bc_error_set(err, rc == -EIO ? BC_UNAVAILABLE : BC_INTERNAL,
			    "database error, try again");
}

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
