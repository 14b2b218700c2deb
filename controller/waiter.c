/* waiter.c: a thread that holds creates waiting for their resource to
 * settle (Sandboxes.Create or Instances.Create with `wait`: one waiter
 * each), so a wait holds no RPC worker and no worker's database
 * connection.
 *
 * A handler detaches its call (rpc.h) and hands it here with the watch key
 * of its instance. The thread re-reads an item at once, when its key is
 * notified in the watch registry (a host report through this controller
 * that changed the instance, node_report.c) and every WAITER_REREAD_MS
 * otherwise, until it is answered (settled, time up, gone, client gone,
 * controller stopping). Every item due in one pass is re-read in one query,
 * the waiter_kind's (sandboxes.c, instances.c). Its keys are registered
 * with a poke (watch_add_poke): a notification wakes the thread's own
 * condition, so between re-reads it sleeps until the next item is due or
 * a key moves, and costs nothing while nothing happens. At most max_items
 * wait at once: past that waiter_add says -EBUSY and the create answers
 * with its first read. */
#include "waiter.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "db.h"
#include "log.h"
#include "util.h"
#include "watch.h"

#define WAITER_REREAD_MS 20
#define WAITER_BATCH 256

struct waiter {
	struct ctl_app *app;
	struct db *db;
	const struct waiter_kind *kind;
	int max_items;
	atomic_int count;
	pthread_t tid;
	pthread_mutex_t mu;           /* inbox, stop */
	pthread_cond_t cond;
	struct waiter_item *inbox;
	bool stop;
	bool poked;                   /* a key moved since the last pass */
	int64_t next_due_ms;          /* the thread's own: the earliest re-read */
	struct waiter_item *active;   /* the thread's own */
};

/* ------------------------------------------------------------ thread */

static bool item_due(struct waiter *w, struct waiter_item *it, int64_t now, bool final)
{
	uint64_t seq = watch_wait(w->app->watches, it->entry, it->seen, 0);

	if (seq != it->seen) {
		it->seen = seq;
		return true;
	}
	return final || now >= it->next_read_ms || now >= it->end_ms;
}

/* A Postgres text[] literal of the items' ids (printable, no comma, quote
 * or brace). */
static char *ids_array(struct waiter_item *const *due, size_t n)
{
	size_t len = 3;
	char *buf, *p;

	for (size_t i = 0; i < n; i++)
		len += strlen(due[i]->id) + 1;
	p = buf = xmalloc(len);
	*p++ = '{';
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%s", i ? "," : "", due[i]->id);
	strcpy(p, "}");
	return buf;
}

static int row_of(const PGresult *r, const struct waiter_item *it)
{
	enum { ROW_ID, ROW_TENANT_ID }; /* every kind's sql: id and tenant first */
	for (int i = 0; r && i < PQntuples(r); i++)
		if (strcmp(db_val(r, i, ROW_ID), it->id) == 0 &&
		    strcmp(db_val(r, i, ROW_TENANT_ID), it->tenant) == 0)
			return i;
	return -1;
}

/* Answer it from the batch read unless it still waits. */
static void answer(const struct waiter_kind *k, struct waiter_item *it, const PGresult *r,
		   int rc, int64_t now, bool final)
{
	int i = rc < 0 ? -1 : row_of(r, it);
	bc_error err;

	bc_error_clear(&err);
	if (i >= 0 && !final && now < it->end_ms && !k->settled(db_val(r, i, k->state_col)))
		return;
	if (rc < 0) {
		rpc_call_complete(it->call, db_fail(&err, rc), NULL, &err);
	} else if (i < 0) {
		bc_error_set(&err, BC_NOT_FOUND, "%s %s not found", k->noun, it->id);
		rpc_call_complete(it->call, -BC_EDOMAIN, NULL, &err);
	} else {
		rpc_call_complete(it->call, 0, k->answer(it->call, r, i), &err);
	}
	it->done = true;
}

/* Re-read n due items in one query and answer those that are through. */
static void check(struct waiter *w, struct waiter_item *const *due, size_t n, int64_t now,
		  bool final)
{
	_cleanup_free_ char *ids = ids_array(due, n);
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, ids);
	rc = db_exec(w->db, &r, w->kind->sql, &p);
	for (size_t i = 0; i < n; i++)
		answer(w->kind, due[i], r, rc, now, final);
	PQclear(r);
}

static void check_due(struct waiter *w, struct waiter_item **due, size_t n, int64_t now,
		      bool final)
{
	for (size_t i = 0; i < n; i += WAITER_BATCH)
		check(w, due + i, n - i < WAITER_BATCH ? n - i : WAITER_BATCH, now, final);
	now = mono_ms();
	for (size_t i = 0; i < n; i++)
		due[i]->next_read_ms = now + WAITER_REREAD_MS;
}

/* Drop the answered items (and answer those whose call the RPC layer
 * ended: the client went away, its deadline passed). */
static void sweep(struct waiter *w)
{
	struct waiter_item **pp = &w->active, *it;

	while ((it = *pp)) {
		if (!it->done && rpc_call_detached_over(it->call)) {
			rpc_call_complete(it->call, 0, NULL, NULL); /* dropped by the layer */
			it->done = true;
		}
		if (!it->done) {
			pp = &it->next;
			continue;
		}
		*pp = it->next;
		watch_remove(w->app->watches, it->entry);
		free(it);
		atomic_fetch_sub(&w->count, 1);
	}
}

static void pass(struct waiter *w, bool final)
{
	static _Thread_local struct waiter_item **due;
	static _Thread_local size_t cap;
	int64_t now = mono_ms();
	size_t n = 0;

	sweep(w);
	for (struct waiter_item *it = w->active; it; it = it->next) {
		if (!item_due(w, it, now, final))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			due = realloc(due, cap * sizeof(*due));
			if (!due)
				abort();
		}
		due[n++] = it;
	}
	if (n)
		check_due(w, due, n, now, final);
	sweep(w);
	w->next_due_ms = INT64_MAX;
	for (struct waiter_item *it = w->active; it; it = it->next) {
		int64_t at = it->next_read_ms < it->end_ms ? it->next_read_ms : it->end_ms;
		if (at < w->next_due_ms)
			w->next_due_ms = at;
	}
	if (!w->active) {
		free(due);
		due = NULL;
		cap = 0;
	}
}

/* A key of ours moved (the registry's lock is held: only our own). */
static void poke(void *arg)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	w->poked = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->mu);
}

/* Move the inbox to the active list; wait for work when there is none, or
 * until the next item is due or a key moves when some wait. True once
 * stopped. */
static bool take(struct waiter *w)
{
	struct timespec ts;
	bool stop;

	pthread_mutex_lock(&w->mu);
	while (w->active && !w->inbox && !w->stop && !w->poked) {
		int64_t left = deadline_left(w->next_due_ms);
		if (left <= 0)
			break;
		ts = deadline_ts(left);
		if (pthread_cond_timedwait(&w->cond, &w->mu, &ts) == ETIMEDOUT)
			break;
	}
	w->poked = false;
	while (!w->active && !w->inbox && !w->stop)
		pthread_cond_wait(&w->cond, &w->mu);
	while (w->inbox) {
		struct waiter_item *it = w->inbox;

		w->inbox = it->next;
		it->next = w->active;
		w->active = it;
	}
	stop = w->stop;
	pthread_mutex_unlock(&w->mu);
	return stop;
}

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	bool stop = false;

	while (!stop || w->active) {
		stop = take(w);
		pass(w, stop || w->app->stopping);
	}
	return NULL;
}

/* ------------------------------------------------------------ public */

static struct db *db_lazy(const char *conninfo)
{
	struct db *d = db_open(conninfo);

	if (!d) {
		/* reconnects on first use, as a worker's (server.c) */
		d = xcalloc(1, sizeof(*d));
		d->conninfo = xstrdup(conninfo);
	}
	return d;
}

/* See waiter.h. */
struct waiter *waiter_start(struct ctl_app *app, const char *conninfo, int max_items,
			    const struct waiter_kind *kind)
{
	struct waiter *w = xcalloc(1, sizeof(*w));
	pthread_condattr_t ca;

	w->app = app;
	w->kind = kind;
	w->max_items = max_items;
	w->db = db_lazy(conninfo);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&w->tid, NULL, waiter_main, w) != 0) {
		db_close(w->db);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cond);
		free(w);
		return NULL;
	}
	return w;
}

/* See waiter.h. */
void waiter_stop(struct waiter *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->tid, NULL);
	db_close(w->db);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cond);
	free(w);
}

/* See waiter.h. The key is registered before the call is detached, so a
 * report committed after the handler's read is not missed. */
int waiter_add(struct waiter *w, rpc_call *call, const char *tenant, const char *id,
	       const char *key, int timeout_ms)
{
	struct waiter_item *it;

	if (!w || !rpc_call_can_detach(call))
		return -EOPNOTSUPP;
	if (atomic_fetch_add(&w->count, 1) >= w->max_items) {
		atomic_fetch_sub(&w->count, 1);
		log_debug("%s %s: answering at once, %d creates already wait", w->kind->noun, id,
			  w->max_items);
		return -EBUSY;
	}
	it = xcalloc(1, sizeof(*it));
	it->call = call;
	it->tenant = rpc_strdup(call, tenant);
	it->id = rpc_strdup(call, id);
	it->end_ms = mono_ms() + timeout_ms;
	it->entry = watch_add_poke(w->app->watches, key, poke, w);
	if (rpc_call_detach(call) < 0) {
		watch_remove(w->app->watches, it->entry);
		free(it);
		atomic_fetch_sub(&w->count, 1);
		return -EOPNOTSUPP;
	}
	pthread_mutex_lock(&w->mu);
	it->next = w->inbox;
	w->inbox = it;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->mu);
	return RPC_DETACHED;
}

/* See waiter.h. */
int waiter_count(const struct waiter *w)
{
	return w ? atomic_load((atomic_int *)&w->count) : 0;
}
