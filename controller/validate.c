/* validate.c: the shapes of refusals every handler shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "util.h"
#include "validate.h"

static int vrefuse(bc_error *err, enum bc_code code, const char *field, const char *fmt,
		   va_list ap)
{
	char msg[400];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	bc_error_set(err, code, "%s", msg);
	return bc_error_detail(err, "field", "%s", field);
}

int invalid(bc_error *err, const char *field, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vrefuse(err, BC_INVALID_INPUT, field, fmt, ap);
	va_end(ap);
	return r;
}

int invalid_config(bc_error *err, const char *field, const char *reason, const char *fmt,
		   ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrefuse(err, BC_INVALID_CONFIG, field, fmt, ap);
	va_end(ap);
	return bc_error_detail(err, "reason", "%s", reason);
}

int check_id(bc_error *err, const char *field, const char *prefix, const char *value)
{
	if (!value || !*value)
		return invalid(err, field, "%s is required", field);
	if (!id_valid(prefix, value))
		return invalid(err, field, "%s is not a valid %s_ id", field, prefix);
	return 0;
}
