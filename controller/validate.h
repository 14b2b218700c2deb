/* validate.h: the shared shapes of refusals (validate.c). */
#ifndef BC_CTL_VALIDATE_H
#define BC_CTL_VALIDATE_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

/* INVALID_INPUT naming the field (details.field). Returns
 * -BC_EDOMAIN. */
int invalid(bc_error *err, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* INVALID_CONFIG naming the config key (details.field) and why
 * (details.reason). Returns -BC_EDOMAIN. */
int invalid_config(bc_error *err, const char *field, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* An id of the given prefix, else INVALID_INPUT on field. */
int check_id(bc_error *err, const char *field, const char *prefix, const char *value);

/* The paging arguments every List shares: limit 0..200 (0: 50, in
 * *ret_limit), a cursor that is empty or an id of cursor_prefix, and scope
 * "", "mine" or "all" (*ret_all: "all"). INVALID_INPUT naming the field. */
int check_page(bc_error *err, int32_t limit, const char *cursor, const char *cursor_prefix,
	       const char *scope, int *ret_limit, bool *ret_all);

/* A List leaves out an item whose read decision refused it (returns 0), but
 * fails the whole call when the decision could not be made (UNAVAILABLE,
 * INTERNAL: *err = *skip, returns -BC_EDOMAIN). */
int list_left_out(const bc_error *skip, bc_error *err);

#endif
