/* rpc_detach.c: unary calls handed off by their handler (rpc.h, "Detached
 * unary calls"), so a call that waits for something does not hold a
 * worker.
 *
 * A detached call sits in its server's list until it is answered, by its
 * owner (rpc_call_complete) or by the layer: the reaper thread ends the
 * calls whose client went away (their RECV_CLOSE_ON_SERVER, started at
 * detach, completed) or whose deadline passed, and shutdown ends the rest.
 * Whoever sets `claimed` first sends the answer; the other side only frees
 * (the owner) or forgets (the layer). The layer releases the gRPC side of
 * a call it ended at once but leaves the struct to the owner, who may
 * complete it after the server is gone: so the lock and condition are
 * process-wide, not the server's.
 *
 * Threads touching a call's pluck queue: the reaper polls tag_close only
 * while the call is unclaimed and under rpc_detach_mu; the owner or the
 * layer uses the queue only after claiming it under the same lock. */
#include "rpc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

#define REAP_INTERVAL_MS 100

static pthread_mutex_t detach_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t detach_cond = PTHREAD_COND_INITIALIZER;
static _Thread_local const rpc_call *tl_taken;

/* ------------------------------------------------------------- list */

static void link_locked(rpc_server *s, rpc_call *c)
{
	c->dprev = NULL;
	c->dnext = s->detached;
	if (s->detached)
		s->detached->dprev = c;
	s->detached = c;
	s->n_detached++;
}

static void unlink_locked(rpc_server *s, rpc_call *c)
{
	if (c->dprev)
		c->dprev->dnext = c->dnext;
	else
		s->detached = c->dnext;
	if (c->dnext)
		c->dnext->dprev = c->dprev;
	c->dnext = c->dprev = NULL;
	s->n_detached--;
}

/* ---------------------------------------------------------- handoff */

/* See rpc.h. */
bool rpc_call_can_detach(const rpc_call *call)
{
	return call->ops->can_detach && call->call && call->method &&
	       call->method->h.kind == RPC_UNARY && !call->detached &&
	       call->srv->reaper_started && !rpc_server_stopping(call->srv);
}

/* See rpc.h. The close watch starts before the call is listed, so the
 * reaper can always poll it. */
int rpc_call_detach(rpc_call *call)
{
	rpc_server *s = call->srv;
	int r = -EOPNOTSUPP;

	if (!rpc_call_can_detach(call))
		return r;
	rpc_call_watch_close(call);
	if (!call->close_started)
		return r;
	pthread_mutex_lock(&detach_mu);
	if (!rpc_server_stopping(s)) {
		call->detached = true;
		link_locked(s, call);
		tl_taken = call;
		r = 0;
	}
	pthread_mutex_unlock(&detach_mu);
	return r;
}

/* See rpc_internal.h. */
bool rpc_detach_taken(const rpc_call *c)
{
	if (tl_taken != c)
		return false;
	tl_taken = NULL;
	return true;
}

/* The layer's answer to a call it claimed; the struct stays the owner's. */
static void layer_end(rpc_call *c, enum bc_code code, const char *msg)
{
	rpc_server *s = c->srv;
	bc_error e;

	bc_error_clear(&e);
	bc_error_set(&e, code, "%s", msg);
	rpc_call_finish(c, -BC_EDOMAIN, NULL, &e);
	rpc_call_release_grpc(c);
	pthread_mutex_lock(&detach_mu);
	unlink_locked(s, c);
	c->layer_done = true;
	pthread_cond_broadcast(&detach_cond);
	pthread_mutex_unlock(&detach_mu);
}

/* See rpc.h. */
void rpc_call_complete(rpc_call *call, int rc, const ProtobufCMessage *resp, bc_error *err)
{
	rpc_server *s = call->srv;
	bc_error local;
	bool mine;

	if (!err) {
		bc_error_clear(&local);
		err = &local;
	}
	pthread_mutex_lock(&detach_mu);
	mine = !call->claimed;
	call->claimed = true;
	while (!mine && !call->layer_done)
		pthread_cond_wait(&detach_cond, &detach_mu);
	pthread_mutex_unlock(&detach_mu);
	if (mine) {
		/* the server is alive: its shutdown waits for the list to empty */
		rpc_call_finish(call, rc, resp, err);
		rpc_call_release_grpc(call);
		pthread_mutex_lock(&detach_mu);
		unlink_locked(s, call);
		pthread_cond_broadcast(&detach_cond);
		pthread_mutex_unlock(&detach_mu);
	}
	rpc_call_release(call);
}

/* See rpc.h. */
bool rpc_call_detached_over(const rpc_call *call)
{
	bool over;

	pthread_mutex_lock(&detach_mu);
	over = call->claimed;
	pthread_mutex_unlock(&detach_mu);
	return over;
}

/* ----------------------------------------------------------- reaper */

/* True if c's client went away (or the call ended otherwise). */
static bool close_seen(rpc_call *c)
{
	grpc_event ev;

	if (!c->close_done) {
		ev = grpc_completion_queue_pluck(c->cq, &c->tag_close,
						 gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
		if (ev.type == GRPC_OP_COMPLETE)
			c->close_done = true;
	}
	return c->close_done;
}

struct ending {
	rpc_call **v;
	size_t n, cap;
};

static void ending_add(struct ending *e, rpc_call *c)
{
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->v = realloc(e->v, e->cap * sizeof(*e->v));
		if (!e->v)
			abort();
	}
	e->v[e->n++] = c;
}

/* Claim the calls to end: all (shutdown) or those whose client is gone or
 * whose deadline passed. */
static void claim_ended(rpc_server *s, bool all, struct ending *gone, struct ending *late)
{
	int64_t now = mono_ms();

	pthread_mutex_lock(&detach_mu);
	for (rpc_call *c = s->detached; c; c = c->dnext) {
		if (c->claimed)
			continue;
		if (all || close_seen(c))
			ending_add(gone, c);
		else if (now >= c->deadline_ms)
			ending_add(late, c);
		else
			continue;
		c->claimed = true;
	}
	pthread_mutex_unlock(&detach_mu);
}

static void end_all(struct ending *e, enum bc_code code, const char *msg)
{
	for (size_t i = 0; i < e->n; i++)
		layer_end(e->v[i], code, msg);
	free(e->v);
	*e = (struct ending){0};
}

static bool reaper_sleep(rpc_server *s)
{
	struct timespec ts = deadline_ts(REAP_INTERVAL_MS);
	bool stop;

	pthread_mutex_lock(&s->lock);
	if (!s->reaper_stop)
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	stop = s->reaper_stop;
	pthread_mutex_unlock(&s->lock);
	return stop;
}

static void *reaper_main(void *arg)
{
	rpc_server *s = arg;
	struct ending gone = {0}, late = {0};

	while (!reaper_sleep(s)) {
		claim_ended(s, false, &gone, &late);
		end_all(&gone, BC_UNAVAILABLE, "call cancelled");
		end_all(&late, BC_DEADLINE_EXCEEDED, "deadline exceeded");
	}
	return NULL;
}

/* See rpc_internal.h. */
void rpc_detach_start(rpc_server *s)
{
	if (pthread_create(&s->reaper, NULL, reaper_main, s) != 0)
		return; /* calls are answered inline then */
	s->reaper_started = true;
}

/* See rpc_internal.h. Called once `stopping` is set, so nothing detaches
 * any more. */
void rpc_detach_stop(rpc_server *s)
{
	struct ending rest = {0}, none = {0};

	if (!s->reaper_started)
		return;
	claim_ended(s, true, &rest, &none);
	end_all(&rest, BC_UNAVAILABLE, "server shutting down");
	free(none.v);
	pthread_mutex_lock(&detach_mu);
	while (s->detached)
		pthread_cond_wait(&detach_cond, &detach_mu);
	pthread_mutex_unlock(&detach_mu);
	pthread_mutex_lock(&s->lock);
	s->reaper_stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->reaper, NULL);
}
