/* converge_jobs.c: the slow runtime calls a pass hands off (creates,
 * moves, destroys) and the workers that run them; see converge.c's head
 * comment for the rules. */
#include "converge_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "guestready.h"
#include "state.h"
#include "log.h"
#include "snapshot.h"
#include "net.h"
#include "rebind.h"
#include "netlink.h"
#include "util.h"
#include "volumes.h"

/* --------------------------------------------------------------- jobs */

Bc__Node__V1__InstanceSpec *spec_copy(const Bc__Node__V1__InstanceSpec *s)
{
	size_t n = bc__node__v1__instance_spec__get_packed_size(s);
	uint8_t *buf = xmalloc(n ? n : 1);
	Bc__Node__V1__InstanceSpec *r;

	bc__node__v1__instance_spec__pack(s, buf);
	r = bc__node__v1__instance_spec__unpack(NULL, n, buf);
	free(buf);
	if (!r)
		abort();
	return r;
}

struct job *job_new(enum job_kind kind, const char *id)
{
	struct job *j = xcalloc(1, sizeof(*j));

	j->kind = kind;
	snprintf(j->id, sizeof(j->id), "%s", id);
	return j;
}

void job_free(struct job *j)
{
	if (!j)
		return;
	if (j->spec)
		bc__node__v1__instance_spec__free_unpacked(j->spec, NULL);
	free(j);
}

/* A create from a snapshot: its verified object, then the runtime's
 * restore; nothing is created unless both succeed. */
static void restore(struct conv *c, struct job *j)
{
	const Bc__Node__V1__InstanceSpec *s = j->spec;
	_cleanup_free_ char *path = NULL;
	enum rt_state st = RT_STATE_STOPPED;

	if (!c->snap || !c->rt->ops->restore) {
		snprintf(j->reason, sizeof(j->reason), "SnapshotRefused: runtime %s restores no "
			 "snapshots", c->rt->ops->name);
		j->e = -EOPNOTSUPP;
		return;
	}
	if ((j->e = snap_fetch(c->snap, s->restore_from, &path, j->reason)) < 0) {
		log_warn("instance %s: no snapshot to restore: %s", s->id, j->reason);
		if (j->e == -EIO || j->e == -ECANCELED)
			j->e = -EAGAIN;  /* the store may answer later: provisioning */
		return;
	}
	if ((j->e = c->rt->ops->restore(c->rt, s, path, &st, j->reason)) < 0)
		return;
	log_info("instance %s: restored from snapshot %s (%s)", s->id,
		 s->restore_from->snapshot_id, rt_state_name(st));
	j->st = move(c, j->id, st, j->want, j->reason);
}

/* The job's runtime calls; any thread. */
static void job_run(struct conv *c, struct job *j)
{
	const Bc__Node__V1__InstanceSpec *s = j->spec;

	j->reason[0] = '\0';
	switch (j->kind) {
	case JOB_CREATE:
		j->st = RT_STATE_STOPPED;
		gr_clear(c->gr, j->id);  /* a mark left by an earlier instance of that id */
		if (s->restore_from) {
			restore(c, j);
			break;
		}
		j->e = c->rt->ops->create(c->rt, s, j->reason);
		if (j->e < 0)
			break;
		log_info("instance %s: created (%" PRIu32 " vcpus, %" PRIu64 " MiB)", s->id,
			 s->vcpus, s->memory_mib);
		j->st = move(c, j->id, RT_STATE_STOPPED, j->want, j->reason);
		break;
	case JOB_MOVE:
		j->e = 0;
		j->st = move(c, j->id, j->from, j->want, j->reason);
		break;
	case JOB_REBIND:  /* the instance stays as it was, rebound or not */
		j->st = j->from;
		j->e = rebind_run(c->rb, c->rt, s, j->reason);
		break;
	case JOB_DESTROY:
		j->st = j->from;
		j->e = c->rt->ops->destroy(c->rt, j->id);
		if (j->e < 0) {
			snprintf(j->reason, sizeof(j->reason), "destroy failed: %s", strerror(-j->e));
			break;
		}
		gr_clear(c->gr, j->id);
		if (j->unnamed)
			log_info("instance %s: destroyed (not in spec generation %" PRIu64 ")", j->id,
				 j->generation);
		else
			log_info("instance %s: destroyed (desired deleted)", j->id);
		break;
	}
}

/* Under jlock: the oldest queued job, or NULL. */
static struct job *job_next(struct conv *c)
{
	for (size_t i = 0; i < c->n_jobs; i++)
		if (c->jobs[i]->state == JOB_QUEUED)
			return c->jobs[i];
	return NULL;
}

static void *worker_main(void *arg)
{
	struct conv *c = arg;
	struct job *j;

	pthread_mutex_lock(&c->jlock);
	while (!c->jstop) {
		if (!(j = job_next(c))) {
			pthread_cond_wait(&c->jwake, &c->jlock);
			continue;
		}
		j->state = JOB_RUNNING;
		pthread_mutex_unlock(&c->jlock);
		job_run(c, j);
		pthread_mutex_lock(&c->jlock);
		j->state = JOB_DONE;
		pthread_mutex_unlock(&c->jlock);
		conv_poke(c);  /* a pass reports its outcome */
		pthread_mutex_lock(&c->jlock);
	}
	pthread_mutex_unlock(&c->jlock);
	return NULL;
}

void conv_set_concurrency(struct conv *c, unsigned n)
{
	c->n_workers = n;
	if (!n)
		return;
	c->workers = xcalloc(n, sizeof(*c->workers));
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&c->workers[i], NULL, worker_main, c) != 0) {
			log_warn("converge: cannot start a runtime worker: %s", strerror(errno));
			break;
		}
		c->n_started++;
	}
	if (!c->n_started)
		c->n_workers = 0;  /* jobs inline, as before */
}

/* Workers end once their running job ended; queued jobs stay queued
 * (freed by conv_free). Idempotent. */
void jobs_stop(struct conv *c)
{
	size_t running = 0;

	pthread_mutex_lock(&c->jlock);
	c->jstop = true;
	for (size_t i = 0; i < c->n_jobs; i++)
		running += c->jobs[i]->state == JOB_RUNNING;
	pthread_cond_broadcast(&c->jwake);
	pthread_mutex_unlock(&c->jlock);
	if (running)
		log_info("converge: waiting for %zu runtime call(s) under way to end", running);
	for (size_t i = 0; i < c->n_started; i++)
		pthread_join(c->workers[i], NULL);
	c->n_started = 0;
}

/* Hand j to the workers (true), or run it here when there are none or
 * they stopped (false: done, the caller reports and frees it). */
bool job_submit(struct conv *c, struct job *j)
{
	pthread_mutex_lock(&c->jlock);
	if (c->n_started && !c->jstop) {
		c->jobs = grow(c->jobs, &c->cap_jobs, c->n_jobs, sizeof(*c->jobs));
		c->jobs[c->n_jobs++] = j;
		pthread_cond_signal(&c->jwake);
		pthread_mutex_unlock(&c->jlock);
		return true;
	}
	pthread_mutex_unlock(&c->jlock);
	job_run(c, j);
	j->state = JOB_DONE;
	return false;
}

static int cmp_busy(const void *a, const void *b)
{
	return strcmp(((const struct busy *)a)->id, ((const struct busy *)b)->id);
}

/* True if the spec wants id to exist (names it, not DELETED). */
static bool spec_wants(const Bc__Node__V1__NodeSpec *spec, const char *id)
{
	for (size_t i = 0; spec && i < spec->n_instances; i++)
		if (strcmp(spec->instances[i]->id, id) == 0)
			return spec->instances[i]->desired_state !=
			       BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED;
	return false;
}

/* At the start of a pass, before it lists: the jobs queued or running
 * (busy: no call for them in this pass) and, with harvest, the ended ones
 * (taken out of the table: this pass reports them). A queued create the
 * spec no longer wants is dropped. */
void jobs_take(struct conv *c, struct pass *p, bool harvest)
{
	size_t k = 0;

	pthread_mutex_lock(&c->jlock);
	p->busy = xcalloc(c->n_jobs ? c->n_jobs : 1, sizeof(*p->busy));
	p->done = xcalloc(c->n_jobs ? c->n_jobs : 1, sizeof(*p->done));
	for (size_t i = 0; i < c->n_jobs; i++) {
		struct job *j = c->jobs[i];
		if (j->state == JOB_DONE && harvest) {
			p->done[p->n_done++] = j;
			continue;
		}
		if (j->state == JOB_QUEUED && j->kind == JOB_CREATE && c->spec &&
		    !spec_wants(c->spec, j->id)) {
			log_info("instance %s: create dropped before it began: no longer wanted", j->id);
			job_free(j);
			continue;
		}
		if (j->state != JOB_DONE) {
			struct busy *b = &p->busy[p->n_busy++];
			snprintf(b->id, sizeof(b->id), "%s", j->id);
			b->kind = j->kind;
			p->destroying |= j->kind == JOB_DESTROY;
			snprintf(b->phase, sizeof(b->phase), "%s", j->phase);
			snprintf(b->phase_reason, sizeof(b->phase_reason), "%s", j->phase_reason);
		}
		c->jobs[k++] = j;
	}
	c->n_jobs = k;
	pthread_mutex_unlock(&c->jlock);
	if (p->n_busy > 1)
		qsort(p->busy, p->n_busy, sizeof(*p->busy), cmp_busy);
}

const struct busy *busy_of(const struct pass *p, const char *id)
{
	struct busy key;

	if (!p->n_busy)
		return NULL;
	snprintf(key.id, sizeof(key.id), "%s", id);
	return bsearch(&key, p->busy, p->n_busy, sizeof(*p->busy), cmp_busy);
}

/* The ended job of id of kind k (or, k2 >= 0, of kind k2), or NULL. */
const struct job *done_of(const struct pass *p, const char *id, int k, int k2)
{
	for (size_t i = 0; i < p->n_done; i++)
		if (strcmp(p->done[i]->id, id) == 0 &&
		    ((int)p->done[i]->kind == k || (int)p->done[i]->kind == k2))
			return p->done[i];
	return NULL;
}

