/* meter.h: metering (meter.c): usage lines from the bookings, and the
 * Usage service. */
#ifndef BC_CTL_METER_H
#define BC_CTL_METER_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"
#include "err.h"
#include "rpc.h"

/* One metering pass (usage lines of every open hourly window,
 * recomputed from the bookings; idempotent), in a transaction of its own;
 * *ret_lines (may be NULL) the lines it changed. 0 or -BC_EDOMAIN. */
int meter_pass(struct db *d, int64_t *ret_lines, bc_error *err);
/* Run a pass when interval_seconds have passed since the last
 * (reconciler only). */
void meter_tick(struct db *d, int interval_seconds);
/* The handlers of the Usage service (server.c's table). */
const struct rpc_handler *usage_handlers(size_t *ret_n);

#endif
