/* teardown.h: tearing a deleting tenant down (teardown.c). */
#ifndef BC_CTL_TEARDOWN_H
#define BC_CTL_TEARDOWN_H

#include <stdbool.h>

#include "db.h"
#include "err.h"

/* Tear a `deleting` tenant down, one transaction (a no-op for a tenant
 * not deleting, or one another pass holds); *ret_done (may be NULL) once
 * the tenant became deleted. 0 or -BC_EDOMAIN. */
int teardown_tenant(struct db *d, const char *tenant, bool *ret_done, bc_error *err);
/* teardown_tenant for every deleting tenant (reconciler only). */
void teardown_tick(struct db *d);

#endif
