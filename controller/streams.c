/* streams.c: what a streaming call (WatchSpec, Events.Watch, Health/Watch)
 * may hold. A stream is authenticated on the worker that received it
 * (common/rpc_server.c) and then admitted here, or refused
 * RESOURCE_EXHAUSTED (QUOTA_EXCEEDED, details.reason), by:
 *
 *   max_streams                    every stream of this replica
 *   stream_reserve_nodes           of those, slots only node streams
 *                                  (WatchSpec) may take
 *   max_streams_per_principal      one identity's or one node's streams
 *   max_streams_per_tenant         all identities of one tenant
 *   max_unauthenticated_streams    every stream without a credential
 *                                  (grpc.health.v1.Health/Watch), together
 *   max_tunnels                    every Tunnels.Connect, together: a
 *                                  tunnel authenticates by its ticket, in
 *                                  its first message, and is counted here
 *                                  whoever opened it
 *
 * A stream holds no database connection while it sleeps: its handler takes
 * one from a bounded pool (stream_db_connections) only while it reads, and
 * gives it back before it waits again (stream_db_take/stream_db_give). A
 * quarter of the pool (at least one) is kept for node streams, so a tenant
 * with many watchers delays only its own. A pool rather than one LISTEN
 * reader per replica: the handlers keep their per-stream reads (a node's
 * spec cache, a watcher's resume point and type filter) and the wake-up is
 * already LISTEN-driven (watch.c); the pool bounds the connections all the
 * same, and a reader would have to re-implement each stream's reads. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "config.h"
#include "db.h"
#include "log.h"
#include "streams.h"
#include "tunnels.h"
#include "util.h"

#define POOL_WAIT_MS 30000

struct stream_count {
	struct stream_count *next;
	char key[80];
	int n;
};

struct streams {
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* a pool connection came back */
	int total, others;            /* every stream; those not of nodes */
	struct stream_count *counts;  /* per principal, tenant, "anon" */
	/* the database pool of stream handlers */
	struct db **idle;
	int n_idle, n_busy, size, node_reserve;
	char *conninfo;
};

/* See streams.h. */
struct streams *streams_new(const struct ctl_config *cfg)
{
	struct streams *s = xcalloc(1, sizeof(*s));
	pthread_condattr_t ca;

	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->size = cfg->stream_db_connections;
	s->node_reserve = s->size / 4 > 0 ? s->size / 4 : 1;
	if (s->node_reserve >= s->size)
		s->node_reserve = s->size - 1;
	s->idle = xcalloc((size_t)s->size, sizeof(*s->idle));
	s->conninfo = xstrdup(cfg->database);
	return s;
}

/* See streams.h. No stream may be running. */
void streams_free(struct streams *s)
{
	struct stream_count *c, *next;

	if (!s)
		return;
	for (int i = 0; i < s->n_idle; i++)
		db_close(s->idle[i]);
	for (c = s->counts; c; c = next) {
		next = c->next;
		free(c);
	}
	free(s->idle);
	free(s->conninfo);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

/* ---------------------------------------------------------- admission */

static struct stream_count *count_find(struct streams *s, const char *key, bool add)
{
	struct stream_count *c;

	for (c = s->counts; c; c = c->next)
		if (strcmp(c->key, key) == 0)
			return c;
	if (!add)
		return NULL;
	c = xcalloc(1, sizeof(*c));
	snprintf(c->key, sizeof(c->key), "%s", key);
	c->next = s->counts;
	s->counts = c;
	return c;
}

static int count_of(struct streams *s, const char *key)
{
	const struct stream_count *c = count_find(s, key, false);

	return c ? c->n : 0;
}

static void count_move(struct streams *s, const char *key, int delta)
{
	struct stream_count **pp, *c;

	if (!*key)
		return;
	count_find(s, key, true)->n += delta;
	for (pp = &s->counts; (c = *pp);) {
		if (c->n <= 0) {
			*pp = c->next;
			free(c);
		} else {
			pp = &c->next;
		}
	}
}

/* The counters a call's stream moves: its principal's ("anon" without a
 * credential) and its tenant's ("" for nodes and strangers). */
static void stream_keys(const rpc_call *call, char *who, char *tenant, size_t len, bool *node)
{
	const struct principal *p = ctl_principal(call);

	*node = p && p->kind == PRINCIPAL_NODE;
	tenant[0] = '\0';
	if (strcmp(rpc_call_method(call), TUNNEL_CONNECT_METHOD) == 0) {
		snprintf(who, len, "tunnel");
		return;
	}
	if (!p || p->kind == PRINCIPAL_NONE) {
		snprintf(who, len, "anon");
		return;
	}
	snprintf(who, len, "%s:%s", *node ? "n" : "p", p->id);
	if (!*node)
		snprintf(tenant, len, "t:%s", p->tenant_id);
}

static int refuse(bc_error *err, const char *reason, int limit, const char *what)
{
	bc_error_set(err, BC_QUOTA_EXCEEDED, "too many streams: %s (limit %d)", what, limit);
	bc_error_detail(err, "reason", "%s", reason);
	return bc_error_detail(err, "limit", "%d", limit);
}

/* Which limit a new stream would pass, under s->mu: 0 or -BC_EDOMAIN. */
static int admit_check(struct streams *s, const struct ctl_config *cfg, const char *who,
		       const char *tenant, bool node, bc_error *err)
{
	if (s->total >= cfg->max_streams)
		return refuse(err, "stream-limit-replica", cfg->max_streams, "this replica's");
	if (!node && s->others >= cfg->max_streams - cfg->stream_reserve_nodes)
		return refuse(err, "stream-limit-replica", cfg->max_streams - cfg->stream_reserve_nodes,
			      "this replica's, the rest kept for nodes");
	if (strcmp(who, "tunnel") == 0) {
		if (count_of(s, who) >= cfg->max_tunnels)
			return refuse(err, "stream-limit-tunnels", cfg->max_tunnels,
				      "open tunnels");
		return 0;
	}
	if (strcmp(who, "anon") == 0) {
		if (count_of(s, who) >= cfg->max_unauthenticated_streams)
			return refuse(err, "stream-limit-unauthenticated",
				      cfg->max_unauthenticated_streams, "without a credential");
		return 0;
	}
	if (count_of(s, who) >= cfg->max_streams_per_principal)
		return refuse(err, "stream-limit-principal", cfg->max_streams_per_principal,
			      "this caller's");
	if (*tenant && count_of(s, tenant) >= cfg->max_streams_per_tenant)
		return refuse(err, "stream-limit-tenant", cfg->max_streams_per_tenant,
			      "this tenant's");
	return 0;
}

/* See streams.h. */
int streams_admit(rpc_call *call, bc_error *err)
{
	struct ctl_app *app = ctl_app(call);
	struct streams *s = app->streams;
	char who[80], tenant[80];
	bool node;
	int r;

	stream_keys(call, who, tenant, sizeof(who), &node);
	pthread_mutex_lock(&s->mu);
	r = admit_check(s, &app->cfg, who, tenant, node, err);
	if (r == 0) {
		s->total++;
		s->others += !node;
		count_move(s, who, 1);
		count_move(s, tenant, 1);
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		log_debug("streams: %s from %s (%s) refused: %s", rpc_call_method(call),
			  rpc_call_peer(call), who, err->message);
	return r;
}

/* See streams.h. */
void streams_done(rpc_call *call)
{
	struct streams *s = ctl_app(call)->streams;
	char who[80], tenant[80];
	bool node;

	stream_keys(call, who, tenant, sizeof(who), &node);
	pthread_mutex_lock(&s->mu);
	s->total--;
	s->others -= !node;
	count_move(s, who, -1);
	count_move(s, tenant, -1);
	pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------- the pool */

/* A handle, made lazily: one that could not connect now reconnects on
 * first use (db_ensure), as the workers' do. */
static struct db *pool_handle(struct streams *s)
{
	struct db *d = db_open(s->conninfo);

	if (!d) {
		d = xcalloc(1, sizeof(*d));
		d->conninfo = xstrdup(s->conninfo);
	}
	return d;
}

/* See streams.h. */
int stream_db_take(rpc_call *call, bc_error *err)
{
	struct ctl_app *app = ctl_app(call);
	struct streams *s = app->streams;
	const struct principal *p = ctl_principal(call);
	int cap = s->size - (p && p->kind == PRINCIPAL_NODE ? 0 : s->node_reserve);
	struct timespec until = deadline_ts(POOL_WAIT_MS);
	struct db *d = NULL;
	bool make = false;

	pthread_mutex_lock(&s->mu);
	while (s->n_busy >= cap && !app->stopping)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0)
			break;
	if (s->n_busy < cap && !app->stopping) {
		s->n_busy++;
		if (s->n_idle)
			d = s->idle[--s->n_idle];
		else
			make = true;
	}
	pthread_mutex_unlock(&s->mu);
	if (make)
		d = pool_handle(s);
	if (!d)
		return bc_error_set(err, BC_UNAVAILABLE, "database busy, try again");
	rpc_call_set_thread(call, d);
	return 0;
}

/* See streams.h. */
void stream_db_give(rpc_call *call)
{
	struct streams *s = ctl_app(call)->streams;
	struct db *d = ctl_db(call);

	if (!d)
		return;
	rpc_call_set_thread(call, NULL);
	if (d->in_tx || (d->conn && PQstatus(d->conn) != CONNECTION_OK)) {
		db_close(d); /* never hand a broken or busy connection on */
		d = NULL;
	}
	pthread_mutex_lock(&s->mu);
	s->n_busy--;
	if (d)
		s->idle[s->n_idle++] = d;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------ the connection budget */

/* Connections a replica opens besides its workers and the stream pool:
 * init's, the LISTEN thread, the reconciler, the sandbox reconciler, two
 * waiters, /metrics, and one spare. */
#define FIXED_CONNECTIONS 8

/* See streams.h. */
int streams_check_budget(struct db *d, const struct ctl_config *cfg)
{
	_cleanup_free_ char *max = NULL, *reserved = NULL;
	bool http = cfg->http_listen && *cfg->http_listen;
	int need = cfg->workers * (http ? 2 : 1) + cfg->stream_db_connections + FIXED_CONNECTIONS;
	int avail;

	if (cfg->stream_reserve_nodes >= cfg->max_streams) {
		log_error("serve: stream_reserve_nodes (%d) must be below max_streams (%d)",
			  cfg->stream_reserve_nodes, cfg->max_streams);
		return -EINVAL;
	}
	if (db_scalar(d, "SELECT current_setting('max_connections')", NULL, &max) < 0 ||
	    db_scalar(d, "SELECT current_setting('superuser_reserved_connections')", NULL,
		      &reserved) < 0) {
		log_error("serve: cannot read the database's max_connections");
		return -EIO;
	}
	avail = atoi(max) - atoi(reserved);
	if (need > avail) {
		log_error("serve: this replica may open %d database connections (workers %d%s, "
			  "stream_db_connections %d, %d others) but the database allows %d "
			  "(max_connections %s - superuser_reserved_connections %s): lower workers or "
			  "stream_db_connections, or raise max_connections",
			  need, cfg->workers, http ? " twice: gRPC and JSON/HTTP" : "",
			  cfg->stream_db_connections, FIXED_CONNECTIONS, avail, max, reserved);
		return -ERANGE;
	}
	log_info("serve: database connections: this replica at most %d of %d; streams at most "
		 "%d (%d kept for nodes), none holding a connection while it waits", need, avail,
		 cfg->max_streams, cfg->stream_reserve_nodes);
	return 0;
}
