/* streams.h: admission of streaming calls (streams.c): per replica with a
 * reserve for nodes, per principal, per tenant, strangers together; and the
 * bounded database pool their handlers read from. */
#ifndef BC_CTL_STREAMS_H
#define BC_CTL_STREAMS_H

#include "config.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

struct streams;

/* A new admission state for cfg's limits, or NULL; streams_free frees it. */
struct streams *streams_new(const struct ctl_config *cfg);
void streams_free(struct streams *s);
/* The server's stream_admit/stream_done: 0, or -BC_EDOMAIN with
 * QUOTA_EXCEEDED (gRPC RESOURCE_EXHAUSTED, HTTP 429), details.reason
 * stream-limit-{replica,principal,tenant,unauthenticated} and limit. */
int streams_admit(rpc_call *call, bc_error *err);
void streams_done(rpc_call *call);
/* A stream handler takes a pool connection before it reads (ctl_db(call)
 * is it until given back) and gives it back before it waits: 0, or
 * UNAVAILABLE when none came free within 30 s or the server stops.
 * stream_db_give is a no-op when the call holds none. */
int stream_db_take(rpc_call *call, bc_error *err);
void stream_db_give(rpc_call *call);
/* At start: refuse (-ERANGE, logged) when the connections this replica may
 * open exceed what the database allows, or (-EINVAL) a reserve not below
 * max_streams. */
int streams_check_budget(struct db *d, const struct ctl_config *cfg);

#endif
