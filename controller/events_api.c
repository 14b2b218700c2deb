/* events_api.c: Events.List and Events.Watch over the outbox. An event's id
 * is its seq, given after commit by one sequencer at a time (outbox.c,
 * migration 0007): once a seq is visible every smaller one is, so "seq >
 * last seen" is a complete resume point. Every read first sequences what
 * committed before it (a transaction of its own), so a caller's List sees
 * the events of the changes it made. Watch streams wake on NOTIFY bc_events
 * (a trigger on events; the LISTEN thread in watch.c) and poll every few
 * seconds besides; a watch holds no database connection while it waits
 * (streams.c) and ends after events_watch_max_seconds (UNAVAILABLE, reason
 * watch-max-duration, details.afterId to resume from). Both calls are
 * decided as compute:events:read on compute-events/<tenant>. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/events.pb-c.h"
#include "db.h"
#include "events_api.h"
#include "log.h"
#include "outbox.h"
#include "rowmsg.h"
#include "streams.h"
#include "util.h"
#include "validate.h"
#include "watch.h"

#define EV_PAGE_MAX 1000
#define EV_POLL_MS 5000

/* The columns of ev_page's SELECT, in its order. */
enum { EVR_SEQ, EVR_TYPE, EVR_SUBJECT, EVR_TENANT_ID, EVR_DATA, EVR_CREATED_AT };

static Bc__Compute__V1__Event *ev_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__Event *e = rpc_new(c, &bc__compute__v1__event__descriptor);

	e->id = (uint64_t)db_i64(r, i, EVR_SEQ);
	e->type = row_str(c, r, i, EVR_TYPE);
	e->subject = row_str(c, r, i, EVR_SUBJECT);
	e->tenant_id = row_str(c, r, i, EVR_TENANT_ID);
	e->data = row_str(c, r, i, EVR_DATA);
	e->created_at = db_i64(r, i, EVR_CREATED_AT);
	return e;
}

static int ev_page(rpc_call *c, const char *tenant, uint64_t after, const char *prefix,
		   int limit, PGresult **ret, bc_error *err)
{
	struct dbp p = {0};
	int rc;

	if ((rc = events_sequence(ctl_db(c))) < 0)
		return db_fail(err, rc);
	dbp_str(&p, tenant);
	dbp_u64(&p, after);
	dbp_str(&p, prefix);
	dbp_i64(&p, limit);
	rc = db_exec(ctl_db(c), ret, "SELECT seq, type, subject, coalesce(tenant_id, ''), data::text, "
		     MS("created_at") " FROM events WHERE tenant_id = $1 AND seq > $2 AND ($3 = '' OR "
		     "starts_with(type, $3)) ORDER BY seq LIMIT $4", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int ev_authorize(rpc_call *c, const char *requested, const char *prefix,
			const char **ret_tenant, bc_error *err)
{
	struct authz_target t = {.type = "compute-events"};
	int r;

	if ((r = auth_tenant(c, requested, ret_tenant, err)) < 0)
		return r;
	if (!str_is_printable(prefix, 64))
		return invalid(err, "typePrefix", "typePrefix must be at most 64 printable characters");
	t.id = t.tenant_id = *ret_tenant;
	return authz_decide(c, ctl_db(c), "compute:events:read", &t, err);
}

static int ev_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		   bc_error *err)
{
	const Bc__Compute__V1__ListEventsRequest *q = (const void *)m;
	Bc__Compute__V1__ListEventsResponse *resp;
	int limit = q->limit ? q->limit : 100, rc;
	const char *tenant;
	PGresult *r = NULL;

	if ((rc = ev_authorize(c, q->tenant_id, q->type_prefix, &tenant, err)) < 0)
		return rc;
	if (q->limit < 0 || q->limit > EV_PAGE_MAX)
		return invalid(err, "limit", "limit must be between 1 and %d", EV_PAGE_MAX);
	if ((rc = ev_page(c, tenant, q->after_id, q->type_prefix, limit, &r, err)) < 0)
		return rc;
	resp = rpc_new(c, &bc__compute__v1__list_events_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[resp->n_items++] = ev_row(c, r, i);
	if ((int)resp->n_items == limit)
		resp->cursor = resp->items[limit - 1]->id;
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

/* Send every event after *after, page by page; *after moves with each.
 * Each page is read on a pool connection, given back before the page is
 * sent: a watcher holds none while it waits or its client reads. */
static int ev_drain(rpc_call *c, const char *tenant, const char *prefix, uint64_t *after,
		    bc_error *err)
{
	for (;;) {
		PGresult *r = NULL;
		int n, rc = stream_db_take(c, err);

		if (rc < 0)
			return rc;
		rc = ev_page(c, tenant, *after, prefix, 500, &r, err);
		stream_db_give(c);
		if (rc < 0)
			return rc;
		n = PQntuples(r);
		for (int i = 0; i < n && rc == 0; i++) {
			Bc__Compute__V1__Event *e = ev_row(c, r, i);
			if ((rc = rpc_call_send(c, &e->base)) == 0)
				*after = e->id;
		}
		PQclear(r);
		if (rc < 0 || n < 500)
			return rc;
	}
}

/* A watch past events_watch_max_seconds ends UNAVAILABLE, reason
 * watch-max-duration, with the id to resume after (details.afterId: the
 * last one sent; the client calls Watch again with it). */
static int watch_expired(rpc_call *c, uint64_t after, bc_error *err)
{
	int max = ctl_app(c)->cfg.events_watch_max_seconds;

	bc_error_set(err, BC_UNAVAILABLE, "the watch reached its maximum duration of %d s: "
		     "watch again after id %llu", max, (unsigned long long)after);
	bc_error_detail(err, "reason", "watch-max-duration");
	bc_error_detail(err, "maxSeconds", "%d", max);
	return bc_error_detail(err, "afterId", "%llu", (unsigned long long)after);
}

static int ev_watch(rpc_call *c, const ProtobufCMessage *m, bc_error *err)
{
	const Bc__Compute__V1__WatchEventsRequest *q = (const void *)m;
	struct ctl_app *app = ctl_app(c);
	uint64_t after = q->after_id, seen = 0, seq = 1;
	struct watch_entry *e;
	const char *tenant;
	int64_t poll_at = 0, end = mono_ms() + app->cfg.events_watch_max_seconds * 1000LL;
	int r;

	if ((r = stream_db_take(c, err)) < 0)
		return r;
	r = ev_authorize(c, q->tenant_id, q->type_prefix, &tenant, err);
	stream_db_give(c);
	if (r < 0)
		return r;
	e = watch_add(app->watches, WATCH_EVENTS);
	log_debug("events: %s watching tenant %s after %llu", ctl_principal(c)->id, tenant,
		  (unsigned long long)after);
	while (!app->stopping && !rpc_call_wait_cancelled(c, 0)) {
		if (mono_ms() >= end) {
			r = watch_expired(c, after, err);
			break;
		}
		if (seq != seen || mono_ms() >= poll_at) {
			seen = seq;
			poll_at = mono_ms() + EV_POLL_MS;
			if ((r = ev_drain(c, tenant, q->type_prefix, &after, err)) < 0)
				break;
		}
		seq = watch_wait(app->watches, e, seen, 500);
	}
	watch_remove(app->watches, e);
	return r == -ECANCELED ? 0 : r;
}

const struct rpc_handler *events_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"List", RPC_UNARY, {.unary = ev_list}},
		{"Watch", RPC_SERVER_STREAM, {.sstream = ev_watch}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
