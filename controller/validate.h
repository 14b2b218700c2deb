/* validate.h: the shared shapes of refusals (validate.c). */
#ifndef BC_CTL_VALIDATE_H
#define BC_CTL_VALIDATE_H

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

#endif
