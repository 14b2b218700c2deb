/* waiter.h: creates that wait for their resource to settle without holding
 * an RPC worker (see waiter.c). */
#ifndef BC_CTL_WAITER_H
#define BC_CTL_WAITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"
#include "rpc.h"

struct ctl_app;
struct waiter;
struct watch_entry;

/* One waiting call, owned by the waiter from waiter_add on. */
struct waiter_item {
	rpc_call *call;
	const char *tenant, *id;   /* the resource waited for, in the call's arena */
	int64_t end_ms;            /* mono_ms() when its time is up */
	bool done;                 /* the call was completed */
	/* the waiter's: */
	struct watch_entry *entry;
	uint64_t seen;
	int64_t next_read_ms;
	struct waiter_item *next;
};

/* What a waiter waits on: one kind of resource. */
struct waiter_kind {
	const char *noun;  /* "sandbox": the NOT_FOUND message */
	/* the rows of the ids in $1 (a text[]), id and tenant first */
	const char *sql;
	int state_col;     /* the column whose value says whether it settled */
	bool (*settled)(const char *state);
	/* the answer from row i of r, allocated in c's arena */
	ProtobufCMessage *(*answer)(rpc_call *c, const PGresult *r, int i);
};

/* Start the waiter thread with its own database connection (conninfo);
 * at most max_items wait at once. The due items are re-read in one query
 * (kind->sql) and each answered as the inline wait would: the read once
 * settled or its time is up, NOT_FOUND if it is gone, or the database
 * failure. NULL on failure. */
struct waiter *waiter_start(struct ctl_app *app, const char *conninfo, int max_items,
			    const struct waiter_kind *kind);
/* Answer every item with a final read, stop and free. NULL-safe. Only once
 * the RPC server is freed (no handler adds any more). */
void waiter_stop(struct waiter *w);

/* From a unary handler: detach call and hand it to w (may be NULL), to be
 * re-read at once, when the watch key `key` is notified and every 20 ms,
 * for timeout_ms. RPC_DETACHED (return it from the handler, do not touch
 * call again), or -EOPNOTSUPP (no waiter, or not detachable: the JSON/HTTP
 * transport, the server stopping) or -EBUSY (max_items wait already):
 * answer inline. */
int waiter_add(struct waiter *w, rpc_call *call, const char *tenant, const char *id,
	       const char *key, int timeout_ms);

/* The number of items waiting now (for tests and logs). */
int waiter_count(const struct waiter *w);

#endif
