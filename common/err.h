/* err.h: the project's one error vocabulary, the spec's codes.
 *
 * Library and daemon functions return 0 on success and a negative errno or
 * -BC_E* on failure. Where a failure is a domain refusal that must reach the
 * caller (INVALID_INPUT, CONFLICT with details.reason, ...), the function
 * fills a bc_error: the code, a human message, and the spec's details as
 * key/value strings. Transports translate a bc_error exactly once, at the
 * edge: gRPC status + google.rpc.ErrorInfo, JSON body, bcctl exit code. */
#ifndef BC_ERR_H
#define BC_ERR_H

#include <stddef.h>

enum bc_code {
	BC_OK = 0,
	BC_INVALID_INPUT,
	BC_NOT_FOUND,
	BC_CONFLICT,
	BC_ACCESS_DENIED,
	BC_INVALID_STATE,
	BC_UNSUPPORTED,
	BC_INVALID_CONFIG,
	BC_QUOTA_EXCEEDED,
	BC_CAPACITY_UNAVAILABLE,
	BC_SPEND_LIMIT_REACHED,
	BC_CONFIRMATION_REQUIRED,
	BC_INVALID_RESPONSE,
	/* transport-level codes that are not in the spec's list but must be
	 * expressible: no credential, a broken server, a peer that is gone. */
	BC_UNAUTHENTICATED,
	BC_INTERNAL,
	BC_UNAVAILABLE,
	BC_DEADLINE_EXCEEDED,
	/* too many requests from one principal: details.retryAfterSeconds */
	BC_RESOURCE_EXHAUSTED,
	BC_CODE_COUNT
};

#define BC_ERR_MAX_DETAILS 8

struct bc_detail {
	char key[48];
	char value[208];
};

typedef struct bc_error {
	enum bc_code code;
	char message[512];
	size_t n_details;
	struct bc_detail details[BC_ERR_MAX_DETAILS];
} bc_error;

/* Returned by functions that filled a bc_error. */
#define BC_EDOMAIN 4096

/* Set code and printf-style message; clears previous details.
 * Always returns -BC_EDOMAIN so callers can `return bc_error_set(...)`. */
int bc_error_set(bc_error *e, enum bc_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Add or replace one detail (e.g. "reason" = "extend-in-flight").
 * Details past BC_ERR_MAX_DETAILS are dropped. Returns -BC_EDOMAIN. */
int bc_error_detail(bc_error *e, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Value of a detail or NULL. */
const char *bc_error_get_detail(const bc_error *e, const char *key);

void bc_error_clear(bc_error *e);

/* "INVALID_INPUT", ...; "OK" for BC_OK; never NULL. */
const char *bc_code_name(enum bc_code code);

/* Inverse of bc_code_name; BC_INTERNAL for an unknown name. */
enum bc_code bc_code_from_name(const char *name);

/* The gRPC status code (grpc_status_code value) for a code. */
int bc_code_grpc_status(enum bc_code code);

/* A code for a gRPC status that carried no ErrorInfo. */
enum bc_code bc_code_from_grpc_status(int status);

/* The HTTP status the JSON transport answers with. */
int bc_code_http_status(enum bc_code code);

/* bcctl's process exit code for a code (0 for BC_OK). */
int bc_code_exit_status(enum bc_code code);

#endif
