/* watch.c: push of NodeSpecs. Each open Node.WatchSpec stream registers
 * here; the LISTEN thread turns NOTIFY bc_node_spec '<node id>' into a
 * wake-up of that node's streams, which rebuild the spec and send it when
 * its generation is newer than the last one sent. NOTIFY bc_events (a
 * trigger on the events outbox) wakes the Events.Watch streams, registered
 * under WATCH_EVENTS. A lost LISTEN connection wakes every stream once it
 * is back, so no change is missed. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "log.h"
#include "util.h"
#include "watch.h"

struct watch_entry {
	char node_id[64];
	uint64_t seq;
	void (*poke)(void *arg);  /* watch_add_poke: called when seq moves */
	void *poke_arg;
	struct watch_entry *next;
};

struct watch_registry {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct watch_entry *head;
};

struct watch_registry *watch_registry_new(void)
{
	struct watch_registry *r = xcalloc(1, sizeof(*r));
	pthread_condattr_t a;

	pthread_mutex_init(&r->mu, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cond, &a);
	pthread_condattr_destroy(&a);
	return r;
}

void watch_registry_free(struct watch_registry *r)
{
	if (!r)
		return;
	while (r->head) {
		struct watch_entry *e = r->head;
		r->head = e->next;
		free(e);
	}
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cond);
	free(r);
}

struct watch_entry *watch_add_poke(struct watch_registry *r, const char *node_id,
				   void (*poke)(void *arg), void *arg)
{
	struct watch_entry *e = watch_add(r, node_id);

	pthread_mutex_lock(&r->mu);
	e->poke = poke;
	e->poke_arg = arg;
	pthread_mutex_unlock(&r->mu);
	return e;
}

struct watch_entry *watch_add(struct watch_registry *r, const char *node_id)
{
	struct watch_entry *e = xcalloc(1, sizeof(*e));

	snprintf(e->node_id, sizeof(e->node_id), "%s", node_id);
	pthread_mutex_lock(&r->mu);
	e->next = r->head;
	r->head = e;
	pthread_mutex_unlock(&r->mu);
	return e;
}

void watch_remove(struct watch_registry *r, struct watch_entry *e)
{
	pthread_mutex_lock(&r->mu);
	for (struct watch_entry **p = &r->head; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			break;
		}
	pthread_mutex_unlock(&r->mu);
	free(e);
}

void watch_notify(struct watch_registry *r, const char *node_id)
{
	pthread_mutex_lock(&r->mu);
	for (struct watch_entry *e = r->head; e; e = e->next)
		if (!node_id || strcmp(e->node_id, node_id) == 0) {
			e->seq++;
			if (e->poke)
				e->poke(e->poke_arg);
		}
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->mu);
}

uint64_t watch_wait(struct watch_registry *r, struct watch_entry *e, uint64_t seen, int timeout_ms)
{
	struct timespec ts;
	uint64_t seq;

	ts = deadline_ts(timeout_ms);
	pthread_mutex_lock(&r->mu);
	while (e->seq == seen) {
		if (pthread_cond_timedwait(&r->cond, &r->mu, &ts) == ETIMEDOUT)
			break;
	}
	seq = e->seq;
	pthread_mutex_unlock(&r->mu);
	return seq;
}

static PGconn *listen_connect(const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *r;

	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	r = PQexec(c, "LISTEN bc_node_spec; LISTEN bc_events");
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		PQfinish(c);
		return NULL;
	}
	PQclear(r);
	return c;
}

void *watch_listen_thread(void *arg)
{
	struct ctl_app *app = arg;
	PGconn *c = NULL;

	while (!app->stopping) {
		struct pollfd pfd;
		PGnotify *n;

		if (!c) {
			if (!(c = listen_connect(app->cfg.database))) {
				log_warn("listen: cannot connect to the database, retrying");
				sleep(1);
				continue;
			}
			watch_notify(app->watches, NULL); /* whatever we missed */
		}
		pfd.fd = PQsocket(c);
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 250) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c)) {
			log_warn("listen: connection lost: %s", PQerrorMessage(c));
			PQfinish(c);
			c = NULL;
			continue;
		}
		while ((n = PQnotifies(c))) {
			watch_notify(app->watches, strcmp(n->relname, "bc_events") == 0 ?
				     WATCH_EVENTS : n->extra);
			PQfreemem(n);
		}
	}
	if (c)
		PQfinish(c);
	return NULL;
}
