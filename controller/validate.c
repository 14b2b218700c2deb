/* validate.c: the shapes of refusals every handler shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int check_page(bc_error *err, int32_t limit, const char *cursor, const char *cursor_prefix,
	       const char *scope, int *ret_limit, bool *ret_all)
{
	int r;

	if (limit < 0 || limit > 200)
		return invalid(err, "limit", "limit must be between 1 and 200");
	if (*cursor && (r = check_id(err, "cursor", cursor_prefix, cursor)) < 0)
		return r;
	*ret_all = strcmp(scope, "all") == 0;
	if (*scope && !*ret_all && strcmp(scope, "mine") != 0)
		return invalid(err, "scope", "scope must be mine or all");
	*ret_limit = limit ? limit : 50;
	return 0;
}

int list_left_out(const bc_error *skip, bc_error *err)
{
	if (skip->code != BC_UNAVAILABLE && skip->code != BC_INTERNAL)
		return 0;
	*err = *skip;
	return -BC_EDOMAIN;
}
