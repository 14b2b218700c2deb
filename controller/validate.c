/* validate.c: the shapes of refusals every handler shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "util.h"
#include "validate.h"

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
