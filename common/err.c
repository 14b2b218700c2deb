/* err.c: the spec's error codes, their names and their mappings to gRPC,
 * HTTP and exit statuses. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct code_row {
	const char *name;
	int grpc;   /* grpc_status_code */
	int http;
	int exit;
};

/* grpc status numbers: 3 INVALID_ARGUMENT, 5 NOT_FOUND, 10 ABORTED,
 * 7 PERMISSION_DENIED, 9 FAILED_PRECONDITION, 12 UNIMPLEMENTED,
 * 8 RESOURCE_EXHAUSTED, 2 UNKNOWN, 16 UNAUTHENTICATED, 13 INTERNAL,
 * 14 UNAVAILABLE, 4 DEADLINE_EXCEEDED. */
static const struct code_row codes[BC_CODE_COUNT] = {
	[BC_OK] = {"OK", 0, 200, 0},
	[BC_INVALID_INPUT] = {"INVALID_INPUT", 3, 400, 2},
	[BC_NOT_FOUND] = {"NOT_FOUND", 5, 404, 3},
	[BC_CONFLICT] = {"CONFLICT", 10, 409, 4},
	[BC_ACCESS_DENIED] = {"ACCESS_DENIED", 7, 403, 5},
	[BC_INVALID_STATE] = {"INVALID_STATE", 9, 409, 6},
	[BC_UNSUPPORTED] = {"UNSUPPORTED", 12, 501, 7},
	[BC_INVALID_CONFIG] = {"INVALID_CONFIG", 9, 500, 8},
	[BC_QUOTA_EXCEEDED] = {"QUOTA_EXCEEDED", 8, 429, 9},
	[BC_CAPACITY_UNAVAILABLE] = {"CAPACITY_UNAVAILABLE", 8, 503, 10},
	[BC_SPEND_LIMIT_REACHED] = {"SPEND_LIMIT_REACHED", 9, 402, 11},
	[BC_CONFIRMATION_REQUIRED] = {"CONFIRMATION_REQUIRED", 9, 428, 12},
	[BC_INVALID_RESPONSE] = {"INVALID_RESPONSE", 2, 502, 13},
	[BC_UNAUTHENTICATED] = {"UNAUTHENTICATED", 16, 401, 14},
	[BC_INTERNAL] = {"INTERNAL", 13, 500, 15},
	[BC_UNAVAILABLE] = {"UNAVAILABLE", 14, 503, 16},
	[BC_DEADLINE_EXCEEDED] = {"DEADLINE_EXCEEDED", 4, 504, 17},
	[BC_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", 8, 429, 18},
};

int bc_error_set(bc_error *e, enum bc_code code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return -BC_EDOMAIN;
	e->code = code;
	e->n_details = 0;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -BC_EDOMAIN;
}

int bc_error_detail(bc_error *e, const char *key, const char *fmt, ...)
{
	struct bc_detail *d = NULL;
	va_list ap;

	if (!e)
		return -BC_EDOMAIN;
	for (size_t i = 0; i < e->n_details; i++)
		if (strcmp(e->details[i].key, key) == 0)
			d = &e->details[i];
	if (!d) {
		if (e->n_details >= BC_ERR_MAX_DETAILS)
			return -BC_EDOMAIN;
		d = &e->details[e->n_details++];
		snprintf(d->key, sizeof(d->key), "%s", key);
	}
	va_start(ap, fmt);
	vsnprintf(d->value, sizeof(d->value), fmt, ap);
	va_end(ap);
	return -BC_EDOMAIN;
}

const char *bc_error_get_detail(const bc_error *e, const char *key)
{
	for (size_t i = 0; e && i < e->n_details; i++)
		if (strcmp(e->details[i].key, key) == 0)
			return e->details[i].value;
	return NULL;
}

void bc_error_clear(bc_error *e)
{
	if (e)
		memset(e, 0, sizeof(*e));
}

const char *bc_code_name(enum bc_code code)
{
	if ((unsigned)code >= BC_CODE_COUNT)
		return "INTERNAL";
	return codes[code].name;
}

enum bc_code bc_code_from_name(const char *name)
{
	for (int i = 0; name && i < BC_CODE_COUNT; i++)
		if (strcmp(codes[i].name, name) == 0)
			return (enum bc_code)i;
	return BC_INTERNAL;
}

int bc_code_grpc_status(enum bc_code code)
{
	return (unsigned)code < BC_CODE_COUNT ? codes[code].grpc : 13;
}

enum bc_code bc_code_from_grpc_status(int status)
{
	switch (status) {
	case 0: return BC_OK;
	case 3: case 11: return BC_INVALID_INPUT;
	case 5: return BC_NOT_FOUND;
	case 6: case 10: return BC_CONFLICT;
	case 7: return BC_ACCESS_DENIED;
	case 9: return BC_INVALID_STATE;
	case 12: return BC_UNSUPPORTED;
	case 8: return BC_QUOTA_EXCEEDED;
	case 16: return BC_UNAUTHENTICATED;
	case 14: return BC_UNAVAILABLE;
	case 4: return BC_DEADLINE_EXCEEDED;
	default: return BC_INTERNAL;
	}
}

int bc_code_http_status(enum bc_code code)
{
	return (unsigned)code < BC_CODE_COUNT ? codes[code].http : 500;
}

int bc_code_exit_status(enum bc_code code)
{
	return (unsigned)code < BC_CODE_COUNT ? codes[code].exit : 15;
}
