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
	void *arg;                 /* the check's data, in the call's arena */
	int64_t end_ms;            /* mono_ms() when its time is up */
	bool done;                 /* set by the check once it completed call */
	/* the waiter's: */
	struct watch_entry *entry;
	uint64_t seen;
	int64_t next_read_ms;
	struct waiter_item *next;
};

/* Re-read the n due items on d in one go where it can, and complete
 * (rpc_call_complete) and mark done every item that settled, whose time is
 * up (now >= end_ms) or, when final, all of them. */
typedef void (*waiter_check_fn)(struct db *d, struct waiter_item *const *due, size_t n,
				int64_t now, bool final);

/* Start the waiter thread with its own database connection (conninfo);
 * at most max_items wait at once. NULL on failure. */
struct waiter *waiter_start(struct ctl_app *app, const char *conninfo, int max_items,
			    waiter_check_fn check);
/* Answer every item with a final read, stop and free. NULL-safe. Only once
 * the RPC server is freed (no handler adds any more). */
void waiter_stop(struct waiter *w);

/* From a unary handler: detach call and hand it to w, to be re-read at
 * once, when the watch key `key` is notified and every reread_ms, until
 * end_ms. RPC_DETACHED (return it from the handler, do not touch call
 * again), or -EOPNOTSUPP (not detachable: the JSON/HTTP transport, the
 * server stopping) or -EBUSY (max_items wait already): answer inline. */
int waiter_add(struct waiter *w, rpc_call *call, const char *key, int64_t end_ms, void *arg);

/* The data most checks need: the resource waited for and its tenant. */
struct waiter_key {
	const char *tenant, *id;
};

/* A Postgres text[] literal of the ids of n items whose arg is a
 * waiter_key, for "id = ANY($1::text[])" (ids are printable and have no
 * comma, quote or brace). Free it. */
char *waiter_ids_array(struct waiter_item *const *due, size_t n);

/* The row of r whose first two columns are the key's id and tenant, or -1. */
int waiter_key_row(const PGresult *r, const struct waiter_key *k);

/* The number of items waiting now (for tests and logs). */
int waiter_count(const struct waiter *w);

#endif
