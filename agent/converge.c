/* converge.c: desired (applied NodeSpec) against actual (runtime list).
 *
 * Rules of one pass, all idempotent:
 *  - an instance the spec names that the runtime lacks is created, then
 *    moved to its desired state (running, paused or stopped); host admission
 *    refusals are reported stopped with the runtime's "ResourcesExhausted:"
 *    reason and retried on the next pass; a create waiting for something
 *    (-EAGAIN: image download, boot data) is reported provisioning with the
 *    reason and retried on the next pass;
 *  - an instance that exists is adopted once per bcd process (never
 *    restarted), its live settings updated, then moved to its desired state;
 *  - desired DELETED destroys it and reports it "deleted" for as long as
 *    the spec names it;
 *  - an instance the spec does not name is destroyed and reported
 *    "deleted" until one report carrying that has been delivered;
 *  - before any spec is known nothing is created or destroyed: the pass
 *    only lists, so a lost spec.pb can never wipe a host;
 *  - fenced (no controller for node_lost_seconds, see fence_step) the pass
 *    applies nothing: it pauses or stops what runs and sets its taps down.
 * Failures are reported per instance (state error + reason) and logged once
 * per distinct reason, never every pass.
 *
 * Slow runtime calls run off the pass ("jobs", conv_set_concurrency): a
 * create with its first start or pause, a move that starts or stops an
 * existing instance, a destroy. Pauses, resumes, adopts and live updates
 * stay in the pass: they take milliseconds. At most one job per instance;
 * a pass never calls the runtime for an instance whose job is queued or
 * running, and reports it meanwhile as the job's phase says: a create
 * "provisioning" until it ended (or what its last attempt reported, while
 * it is retried); a start "starting"; a stop or a destroy the
 * state the pass listed ("Deleting: ..." for a destroy); an instance the
 * spec no longer names is not reported until its destroy ends. The end of
 * a job asks for a pass (conv_poke), which reports its outcome under the
 * rules above (a failed job is retried on a later pass, never in the pass
 * that reports it); a spec that deletes an instance whose create runs
 * destroys it once the create ended; a create still queued for an
 * instance the spec no longer wants is dropped. With no workers (0, the
 * unit tests) a job runs inline in the pass as before. */
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
#include "netlink.h"
#include "rebind.h"
#include "util.h"
#include "volumes.h"

/* ------------------------------------------------------------- helpers */

void *grow(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 16;
	p = realloc(p, *cap * size);
	if (!p)
		abort();
	return p;
}

int cmp_item(const void *a, const void *b)
{
	return strcmp(((const struct conv_item *)a)->id, ((const struct conv_item *)b)->id);
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

static int cmp_inst(const void *a, const void *b)
{
	return strcmp(((const struct rt_instance *)a)->id, ((const struct rt_instance *)b)->id);
}

static int cmp_spec_ptr(const void *a, const void *b)
{
	const Bc__Node__V1__InstanceSpec *x = *(Bc__Node__V1__InstanceSpec *const *)a;
	const Bc__Node__V1__InstanceSpec *y = *(Bc__Node__V1__InstanceSpec *const *)b;

	return strcmp(x->id, y->id);
}

static void idset_add(struct idset *s, const char *id)
{
	s->ids = grow(s->ids, &s->cap, s->n, sizeof(*s->ids));
	snprintf(s->ids[s->n++], RT_ID_MAX + 1, "%s", id);
}

static void idset_sort(struct idset *s)
{
	if (s->n > 1)
		qsort(s->ids, s->n, sizeof(*s->ids), cmp_id);
}

/* Sorted sets only. */
static bool idset_has(const struct idset *s, const char *id)
{
	return s->n && bsearch(id, s->ids, s->n, sizeof(*s->ids), cmp_id);
}

static void idset_clear(struct idset *s)
{
	free(s->ids);
	*s = (struct idset){0};
}

struct conv_item *add_item(struct pass *p, const char *id, const char *state,
			   const char *reason)
{
	struct conv_item *it;

	p->items = grow(p->items, &p->cap, p->n, sizeof(*p->items));
	it = &p->items[p->n++];
	*it = (struct conv_item){0};
	snprintf(it->id, sizeof(it->id), "%s", id);
	snprintf(it->state, sizeof(it->state), "%s", state);
	snprintf(it->reason, sizeof(it->reason), "%s", reason ? reason : "");
	return it;
}

static void add_gone(struct pass *p, const char *id)
{
	struct conv_item *it;

	p->gone = grow(p->gone, &p->cap_gone, p->n_gone, sizeof(*p->gone));
	it = &p->gone[p->n_gone++];
	*it = (struct conv_item){0};
	snprintf(it->id, sizeof(it->id), "%s", id);
	snprintf(it->state, sizeof(it->state), "deleted");
	it->once = true;
}

/* The reason last published for id ("" if none). Converge thread only:
 * it is the only writer of c->items. */
static const char *prev_reason(const struct conv *c, const char *id)
{
	struct conv_item key = {0}, *it;

	snprintf(key.id, sizeof(key.id), "%s", id);
	it = c->n_items ? bsearch(&key, c->items, c->n_items, sizeof(*c->items), cmp_item) : NULL;
	return it ? it->reason : "";
}

/* The state last published for id ("" if none). Converge thread only. */
static const char *prev_state(const struct conv *c, const char *id)
{
	struct conv_item key = {0}, *it;

	snprintf(key.id, sizeof(key.id), "%s", id);
	it = c->n_items ? bsearch(&key, c->items, c->n_items, sizeof(*c->items), cmp_item) : NULL;
	return it ? it->state : "";
}

/* Log a per-instance problem at warn, once per distinct reason. */
static void warn_once(const struct conv *c, const char *id, const char *reason)
{
	if (strcmp(prev_reason(c, id), reason) != 0)
		log_warn("instance %s: %s", id, reason);
}

/* ---------------------------------------------------------- lifecycle */

struct conv *conv_new(struct rt *rt)
{
	struct conv *c = xcalloc(1, sizeof(*c));
	pthread_condattr_t ca;

	c->rt = rt;
	c->contact_ms = mono_ms();  /* the fence counts from the start */
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &ca);
	pthread_cond_init(&c->changed, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->jlock, NULL);
	pthread_cond_init(&c->jwake, NULL);
	return c;
}

void conv_set_guestready(struct conv *c, struct guestready *gr)
{
	c->gr = gr;
}

void conv_set_net(struct conv *c, struct net *net)
{
	c->net = net;
}

void conv_set_volumes(struct conv *c, struct vol *vol)
{
	c->vol = vol;
}

void conv_set_snapshots(struct conv *c, struct snap *snap)
{
	c->snap = snap;
}

void conv_set_rebind(struct conv *c, struct rebind *rb)
{
	c->rb = rb;
}


void conv_free(struct conv *c)
{
	if (!c)
		return;
	jobs_stop(c);
	for (size_t i = 0; i < c->n_jobs; i++)
		job_free(c->jobs[i]);
	free(c->jobs);
	free(c->workers);
	pthread_cond_destroy(&c->jwake);
	pthread_mutex_destroy(&c->jlock);
	if (c->spec)
		bc__node__v1__node_spec__free_unpacked(c->spec, NULL);
	if (c->pending)
		bc__node__v1__node_spec__free_unpacked(c->pending, NULL);
	idset_clear(&c->adopted);
	free(c->items);
	free(c->gone);
	free(c->results);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

void conv_submit(struct conv *c, Bc__Node__V1__NodeSpec *spec)
{
	Bc__Node__V1__NodeSpec *old;

	pthread_mutex_lock(&c->lock);
	old = c->pending;
	c->pending = spec;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
	if (old)
		bc__node__v1__node_spec__free_unpacked(old, NULL);
}

void conv_poke(struct conv *c)
{
	pthread_mutex_lock(&c->lock);
	c->poked = true;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
}

void conv_stop(struct conv *c)
{
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->wake);
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

bool conv_stopping(struct conv *c)
{
	bool s;

	pthread_mutex_lock(&c->lock);
	s = c->stopping;
	pthread_mutex_unlock(&c->lock);
	return s;
}

/* ------------------------------------------------------- state moves */

struct step {
	const char *name;
	int (*fn)(struct rt *rt, const char *id);
	enum rt_state result;
};

static enum rt_state target_of(Bc__Node__V1__DesiredState want)
{
	switch (want) {
	case BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED:
		return RT_STATE_PAUSED;
	case BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED:
		return RT_STATE_STOPPED;
	default:  /* RUNNING, and UNSPECIFIED (proto3's default) */
		return RT_STATE_RUNNING;
	}
}

/* The next operation on the way from cur to target (cur != target). */
static struct step next_step(const struct runtime_ops *o, enum rt_state cur, enum rt_state target)
{
	if (cur == RT_STATE_ERROR || target == RT_STATE_STOPPED)
		return (struct step){"stop", o->stop, RT_STATE_STOPPED};
	if (cur == RT_STATE_STOPPED)
		return (struct step){"start", o->start, RT_STATE_RUNNING};
	if (cur == RT_STATE_PAUSED)
		return (struct step){"resume", o->resume, RT_STATE_RUNNING};
	return (struct step){"pause", o->pause, RT_STATE_PAUSED};
}

/* The state to move s to: its desired state, but a warm instance
 * (pause_after_ready) runs until its guest reported up (state.h). */
static Bc__Node__V1__DesiredState want_of(struct conv *c, const Bc__Node__V1__InstanceSpec *s)
{
	return state_effective_desired(s->desired_state, s->pause_after_ready,
				       s->pause_after_ready ? gr_get(c->gr, s->id) : 0);
}

/* Move id from cur to the desired state; returns the state reached, with
 * reason set on failure (then RT_STATE_ERROR). */
enum rt_state move(struct conv *c, const char *id, enum rt_state cur,
		   Bc__Node__V1__DesiredState want, char *reason)
{
	enum rt_state target = target_of(want);

	for (int i = 0; cur != target && i < 4; i++) {
		struct step s = next_step(c->rt->ops, cur, target);
		int e;
		if (s.fn == c->rt->ops->start)  /* a new boot: it must announce itself anew */
			gr_clear(c->gr, id);
		e = s.fn(c->rt, id);
		if (e == -EINPROGRESS) {  /* e.g. a guest shutting down: next pass */
			const char *why = c->rt->ops->last_error ? c->rt->ops->last_error(c->rt)
								 : NULL;
			snprintf(reason, RT_REASON_MAX, "%.150s", why ? why : "in progress");
			return cur;
		}
		if (e < 0) {
			const char *why = c->rt->ops->last_error ? c->rt->ops->last_error(c->rt)
								 : NULL;
			snprintf(reason, RT_REASON_MAX, "%s failed: %.120s", s.name,
				 why ? why : strerror(-e));
			return RT_STATE_ERROR;
		}
		log_info("instance %s: %s (now %s)", id, s.name, rt_state_name(s.result));
		cur = s.result;
	}
	return cur;
}

/* ------------------------------------------------------------ the pass */

static const struct rt_instance *find_actual(const struct rt_instance *v, size_t n, const char *id)
{
	struct rt_instance key = {0};

	snprintf(key.id, sizeof(key.id), "%s", id);
	return n ? bsearch(&key, v, n, sizeof(*v), cmp_inst) : NULL;
}

/* The identity rebind's part of an item: the applied ref, and while a
 * running instance's rebind keeps failing, its reason. */
static void item_rebind(struct conv *c, struct conv_item *it)
{
	char why[RT_REASON_MAX];

	if (!c->rb)
		return;
	rebind_status(c->rb, it->id, it->rebound_ref, why);
	if (!*it->reason && *why && strcmp(it->state, "running") == 0)
		snprintf(it->reason, sizeof(it->reason), "%s", why);
}

static void record_state(struct conv *c, struct pass *p, const char *id, enum rt_state st,
			 const char *reason)
{
	struct conv_item *it;

	if (reason && *reason)
		warn_once(c, id, reason);
	it = add_item(p, id, rt_state_name(st), reason);
	if (st == RT_STATE_RUNNING || st == RT_STATE_PAUSED)
		it->guest_ready_at = gr_get(c->gr, id);
	item_rebind(c, it);
}

/* An instance a job is working on: reported as the job's phase says, kept
 * owned; no call. */
static void report_phase(struct conv *c, struct pass *p, const char *id, const char *state,
			 const char *reason)
{
	struct conv_item *it = add_item(p, id, state, reason);

	if (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0)
		it->guest_ready_at = gr_get(c->gr, id);
	item_rebind(c, it);
}

/* A running instance whose spec names an identity bundle not yet applied:
 * a rebind job (slow: a hot-plug and the guest's answer), off the pass. */
static void rebind_start(struct conv *c, const Bc__Node__V1__InstanceSpec *s)
{
	struct job *j;

	if (!c->rb || !rebind_due(c->rb, s))
		return;
	j = job_new(JOB_REBIND, s->id);
	j->spec = spec_copy(s);
	j->from = RT_STATE_RUNNING;
	snprintf(j->phase, sizeof(j->phase), "running");
	log_info("instance %s: identity rebind %s under way", s->id, s->identity_rebind_ref);
	if (!job_submit(c, j))
		job_free(j);  /* ran inline: its outcome is in the record */
}

static void report_busy(struct conv *c, struct pass *p, const struct busy *b)
{
	if (idset_has(&c->adopted, b->id))
		idset_add(&p->owned, b->id);
	report_phase(c, p, b->id, b->phase, b->phase_reason);
}

/* The destroy of a (listed in state from) by a job, or inline; reports
 * the outcome once it ended. */
static void destroy_start(struct conv *c, struct pass *p, const struct rt_instance *a,
			  bool unnamed)
{
	struct job *j = job_new(JOB_DESTROY, a->id);

	j->from = a->state;
	j->unnamed = unnamed;
	j->generation = c->spec ? c->spec->generation : 0;
	snprintf(j->phase, sizeof(j->phase), "%s", rt_state_name(a->state));
	snprintf(j->phase_reason, sizeof(j->phase_reason), "Deleting: the runtime is destroying it");
	if (job_submit(c, j)) {
		p->destroying = true;
		if (!unnamed)  /* an unnamed one is not reported until it is gone */
			report_phase(c, p, a->id, j->phase, j->phase_reason);
		return;
	}
	if (j->e < 0)
		record_state(c, p, j->id, j->from, j->reason);
	else if (unnamed)
		add_gone(p, j->id);
	else
		add_item(p, j->id, "deleted", NULL);
	job_free(j);
}

static void converge_deleted(struct conv *c, struct pass *p, const char *id,
			     const struct rt_instance *a)
{
	const struct busy *b = busy_of(p, id);
	const struct job *d;

	if (b) {  /* a create still running is destroyed once it ended */
		report_busy(c, p, b);
		return;
	}
	if (!a) {
		add_item(p, id, "deleted", NULL);
		return;
	}
	d = done_of(p, id, JOB_DESTROY, -1);
	if (d && d->e < 0) {  /* retried on a later pass */
		record_state(c, p, id, a->state, d->reason);
		return;
	}
	destroy_start(c, p, a, false);
}

static void on_net_fail(const char *id, const char *reason, void *data)
{
	struct pass *p = data;
	struct conv_item *it;

	for (size_t i = 0; i < p->n_netfail; i++)
		if (strcmp(p->netfail[i].id, id) == 0)
			return;
	p->netfail = grow(p->netfail, &p->cap_netfail, p->n_netfail, sizeof(*p->netfail));
	it = &p->netfail[p->n_netfail++];
	*it = (struct conv_item){0};
	snprintf(it->id, sizeof(it->id), "%s", id);
	snprintf(it->reason, sizeof(it->reason), "%s", reason);
}

/* Fail closed: an instance the network step refused is never created or
 * started, and is stopped if it runs; reported error with the reason. */
static bool net_refused(struct conv *c, struct pass *p, const Bc__Node__V1__InstanceSpec *s,
			const struct rt_instance *a)
{
	const char *reason = NULL;

	for (size_t i = 0; i < p->n_netfail && !reason; i++)
		if (strcmp(p->netfail[i].id, s->id) == 0)
			reason = p->netfail[i].reason;
	if (!reason)
		return false;
	if (a && a->state != RT_STATE_STOPPED && c->rt->ops->stop(c->rt, s->id) == 0)
		log_warn("instance %s: stopped: its network rules are not in force", s->id);
	record_state(c, p, s->id, RT_STATE_ERROR, reason);
	return true;
}

/* Report an ended create (with its first start). */
static void create_outcome(struct conv *c, struct pass *p, const struct job *j)
{
	char reason[RT_REASON_MAX];

	snprintf(reason, sizeof(reason), "%s", j->reason);
	if (j->e == -ENOSPC) {
		record_state(c, p, j->id, RT_STATE_STOPPED, reason);
		return;
	}
	if (j->e == -EAGAIN) {  /* image or boot data not there yet: next pass */
		if (!*reason)
			snprintf(reason, sizeof(reason), "create failed: %s", strerror(-j->e));
		if (strcmp(prev_reason(c, j->id), reason) != 0)
			log_info("instance %s: provisioning: %s", j->id, reason);
		add_item(p, j->id, "provisioning", reason);
		return;
	}
	if (j->e < 0) {
		if (!*reason)
			snprintf(reason, sizeof(reason), "create failed: %s", strerror(-j->e));
		record_state(c, p, j->id, RT_STATE_ERROR, reason);
		return;
	}
	idset_add(&p->owned, j->id);
	record_state(c, p, j->id, j->st, reason);
}

static void converge_new(struct conv *c, struct pass *p, const Bc__Node__V1__InstanceSpec *s)
{
	char reason[RT_REASON_MAX] = "";
	const struct busy *b;
	const struct job *d;
	const char *st_prev;
	struct job *j;

	if (*s->runtime && strcmp(s->runtime, c->rt->ops->name) != 0) {
		snprintf(reason, sizeof(reason), "UnsupportedRuntime: %.64s", s->runtime);
		record_state(c, p, s->id, RT_STATE_ERROR, reason);
		return;
	}
	b = busy_of(p, s->id);
	if (b) {
		report_busy(c, p, b);
		return;
	}
	if (net_refused(c, p, s, NULL))
		return;
	d = done_of(p, s->id, JOB_CREATE, -1);
	if (d) {  /* it failed (or the instance went): retried on a later pass */
		create_outcome(c, p, d);
		return;
	}
	if (p->destroying) {  /* capacity is freed before it is taken: its end pokes */
		st_prev = prev_state(c, s->id);
		add_item(p, s->id, *st_prev ? st_prev : "provisioning", prev_reason(c, s->id));
		return;
	}
	j = job_new(JOB_CREATE, s->id);
	j->spec = spec_copy(s);
	j->want = want_of(c, s);
	/* a retry keeps reporting what the last attempt found */
	st_prev = prev_state(c, s->id);
	if (strcmp(st_prev, "provisioning") == 0 || strcmp(st_prev, "stopped") == 0 ||
	    strcmp(st_prev, "error") == 0) {
		snprintf(j->phase, sizeof(j->phase), "%s", st_prev);
		snprintf(j->phase_reason, sizeof(j->phase_reason), "%s", prev_reason(c, s->id));
	} else {
		snprintf(j->phase, sizeof(j->phase), "provisioning");
	}
	if (job_submit(c, j)) {
		add_item(p, s->id, j->phase, j->phase_reason);
		return;
	}
	create_outcome(c, p, j);
	job_free(j);
}

static void converge_existing(struct conv *c, struct pass *p, const Bc__Node__V1__InstanceSpec *s,
			      const struct rt_instance *a)
{
	char reason[RT_REASON_MAX] = "";
	const Bc__Node__V1__DesiredState want = want_of(c, s);
	enum rt_state st, target = target_of(want);
	const struct busy *b = busy_of(p, s->id);
	const struct job *d;
	struct job *j;
	int e;

	if (b) {
		report_busy(c, p, b);
		return;
	}
	if (net_refused(c, p, s, a))
		return;
	d = done_of(p, s->id, JOB_CREATE, JOB_MOVE);
	if (d && d->e == 0) {  /* this process made or moved it: owned */
		idset_add(&p->owned, s->id);
		if (*d->reason) {  /* its move failed: retried on a later pass */
			record_state(c, p, s->id, d->st, d->reason);
			return;
		}
	} else if (!idset_has(&c->adopted, s->id)) {
		e = c->rt->ops->adopt(c->rt, s);
		if (e < 0) {
			snprintf(reason, sizeof(reason), "adopt failed: %s", strerror(-e));
			record_state(c, p, s->id, a->state, reason);
			return;
		}
		log_info("instance %s: adopted (%s)", s->id, rt_state_name(a->state));
	} else if (c->rt->ops->update && (e = c->rt->ops->update(c->rt, s)) < 0) {
		/* reported with the instance's state; retried next pass */
		snprintf(reason, sizeof(reason), "update failed: %s", strerror(-e));
	}
	idset_add(&p->owned, s->id);
	if (a->state == target || (a->state != RT_STATE_STOPPED && a->state != RT_STATE_ERROR &&
				   target != RT_STATE_STOPPED)) {
		/* pause and resume: quick, in the pass */
		st = move(c, s->id, a->state, want, reason);
		record_state(c, p, s->id, st, reason);
		if (st == RT_STATE_RUNNING && !*reason)
			rebind_start(c, s);
		return;
	}
	/* a start or a stop: a job */
	j = job_new(JOB_MOVE, s->id);
	j->from = a->state;
	j->want = want;
	snprintf(j->phase, sizeof(j->phase), "%s",
		 a->state == RT_STATE_STOPPED ? "starting" : rt_state_name(a->state));
	snprintf(j->phase_reason, sizeof(j->phase_reason), "%s",
		 a->state == RT_STATE_STOPPED ? "" : prev_reason(c, s->id));
	if (job_submit(c, j)) {
		report_phase(c, p, s->id, j->phase, j->phase_reason);
		return;
	}
	if (!*j->reason && *reason)  /* an update failure, as before */
		snprintf(j->reason, sizeof(j->reason), "%s", reason);
	record_state(c, p, s->id, j->st, j->reason);
	job_free(j);
}

/* The spec's instances sorted by id, duplicates dropped, unusable ids
 * logged and dropped. *ret owned (free). */
size_t spec_sorted(const struct conv *c, Bc__Node__V1__InstanceSpec ***ret)
{
	size_t n = c->spec->n_instances, k = 0;
	Bc__Node__V1__InstanceSpec **v = xcalloc(n ? n : 1, sizeof(*v));

	for (size_t i = 0; i < n; i++) {
		if (rt_id_valid(c->spec->instances[i]->id))
			v[k++] = c->spec->instances[i];
		else
			log_warn("spec generation %" PRIu64 ": unusable instance id skipped",
				 c->spec->generation);
	}
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_spec_ptr);
	n = k;
	k = 0;
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(v[k - 1]->id, v[i]->id) != 0)
			v[k++] = v[i];
	*ret = v;
	return k;
}

/* Each item's desired state in the spec (0: the spec does not name it). A
 * change of desired state may come with a state the controller wrote itself
 * (a start shows "starting"), so a delta report carries the instance again
 * even when its state did not move. */
void stamp_desired(struct pass *p, Bc__Node__V1__InstanceSpec *const *v, size_t n)
{
	Bc__Node__V1__InstanceSpec key = BC__NODE__V1__INSTANCE_SPEC__INIT, *kp = &key;

	for (size_t i = 0; i < p->n; i++) {
		Bc__Node__V1__InstanceSpec *const *s;
		key.id = p->items[i].id;
		s = n ? bsearch(&kp, v, n, sizeof(*v), cmp_spec_ptr) : NULL;
		p->items[i].desired = s ? (int)(*s)->desired_state : 0;
	}
}

/* Every instance of the spec, in three phases so that capacity is freed
 * before it is taken: desired DELETED first, then existing instances
 * (stops before starts), then creates. */
static void converge_desired(struct conv *c, struct pass *p, const struct rt_instance *actual,
			     size_t n_actual)
{
	Bc__Node__V1__InstanceSpec **v = NULL;
	size_t n = spec_sorted(c, &v);
	const struct rt_instance **found = xcalloc(n ? n : 1, sizeof(*found));

	for (size_t i = 0; i < n; i++) {
		found[i] = find_actual(actual, n_actual, v[i]->id);
		if (v[i]->desired_state == BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
			converge_deleted(c, p, v[i]->id, found[i]);
	}
	for (int phase = 0; phase < 2; phase++)
		for (size_t i = 0; i < n; i++) {
			bool to_stop = target_of(v[i]->desired_state) == RT_STATE_STOPPED;
			if (!found[i] || v[i]->desired_state ==
					     BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
				continue;
			if (to_stop == (phase == 0))
				converge_existing(c, p, v[i], found[i]);
		}
	for (size_t i = 0; i < n; i++)
		if (!found[i] && v[i]->desired_state != BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
			converge_new(c, p, v[i]);
	stamp_desired(p, v, n);
	free(found);
	free(v);
}

/* matched[i] = the spec names actual[i]. */
static void mark_named(const struct conv *c, const struct rt_instance *actual, size_t n_actual,
		       bool *matched)
{
	for (size_t i = 0; i < c->spec->n_instances; i++) {
		const struct rt_instance *a =
			find_actual(actual, n_actual, c->spec->instances[i]->id);
		if (a)
			matched[a - actual] = true;
	}
}

/* Instances the spec does not name: destroyed (with a spec) or only
 * reported (before any spec is known). */
static void converge_unnamed(struct conv *c, struct pass *p, const struct rt_instance *actual,
			     size_t n_actual, const bool *matched)
{
	for (size_t i = 0; i < n_actual; i++) {
		const struct rt_instance *a = &actual[i];
		const struct job *d;
		if (matched[i])
			continue;
		if (!c->spec) {
			add_item(p, a->id, rt_state_name(a->state), NULL);
			continue;
		}
		if (busy_of(p, a->id))  /* destroyed (or being) once its job ended */
			continue;
		d = done_of(p, a->id, JOB_DESTROY, -1);
		if (d && d->e < 0) {  /* retried on a later pass */
			record_state(c, p, a->id, a->state, d->reason);
			continue;
		}
		destroy_start(c, p, a, true);
	}
	/* destroys that ended: gone */
	for (size_t i = 0; c->spec && i < p->n_done; i++) {
		const struct job *j = p->done[i];
		bool named = false;
		if (j->kind != JOB_DESTROY || j->e < 0 || find_actual(actual, n_actual, j->id))
			continue;
		for (size_t k = 0; k < c->spec->n_instances && !named; k++)
			named = strcmp(c->spec->instances[k]->id, j->id) == 0;
		if (!named)
			add_gone(p, j->id);
	}
}

static bool items_equal(const struct conv_item *a, size_t na, const struct conv_item *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (strcmp(a[i].id, b[i].id) || strcmp(a[i].state, b[i].state) ||
		    strcmp(a[i].reason, b[i].reason) || a[i].guest_ready_at != b[i].guest_ready_at ||
		    strcmp(a[i].rebound_ref, b[i].rebound_ref))
			return false;
	return true;
}

/* Drop one-shot "deleted" entries for ids the pass reports again. */
static void prune_gone(struct conv *c)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n_gone; i++) {
		const struct conv_item *it = &c->gone[i].item;
		if (c->n_items && bsearch(it, c->items, c->n_items, sizeof(*c->items), cmp_item))
			continue;
		c->gone[k++] = c->gone[i];
	}
	c->n_gone = k;
}

/* Publish the pass's outcome under the lock; bump seq if it differs. */
void publish(struct conv *c, struct pass *p, bool complete, const struct rt_storage *stg)
{
	struct conv_status *s = &c->status;
	uint64_t gen = c->spec ? c->spec->generation : 0;
	bool changed;

	if (p->n > 1)
		qsort(p->items, p->n, sizeof(*p->items), cmp_item);
	pthread_mutex_lock(&c->lock);
	changed = p->n_gone > 0 || s->applied_generation != gen || s->complete != complete ||
		  s->has_storage != (stg != NULL) ||
		  (stg && memcmp(&s->storage, stg, sizeof(*stg)) != 0) ||
		  (complete && !items_equal(c->items, c->n_items, p->items, p->n));
	if (changed)
		s->seq++;
	s->applied_generation = gen;
	s->complete = complete;
	s->has_storage = stg != NULL;
	if (stg)
		s->storage = *stg;
	if (complete) {
		free(c->items);
		c->items = p->items;
		c->n_items = p->n;
		p->items = NULL;
	}
	for (size_t i = 0; i < p->n_gone; i++) {
		c->gone = grow(c->gone, &c->cap_gone, c->n_gone, sizeof(*c->gone));
		c->gone[c->n_gone++] = (struct once_item){p->gone[i], s->seq};
	}
	prune_gone(c);
	if (changed)
		pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

void pass_clear(struct pass *p)
{
	for (size_t i = 0; i < p->n_done; i++)
		job_free(p->done[i]);
	free(p->done);
	free(p->busy);
	free(p->items);
	free(p->gone);
	free(p->netfail);
	idset_clear(&p->owned);
}

static void take_pending(struct conv *c)
{
	Bc__Node__V1__NodeSpec *spec, *old;

	pthread_mutex_lock(&c->lock);
	spec = c->pending;
	c->pending = NULL;
	pthread_mutex_unlock(&c->lock);
	if (!spec)
		return;
	pthread_mutex_lock(&c->lock);   /* conv_tunnel_target reads it under lock */
	old = c->spec;
	c->spec = spec;
	pthread_mutex_unlock(&c->lock);
	if (old)
		bc__node__v1__node_spec__free_unpacked(old, NULL);
	log_info("converging spec generation %" PRIu64 " (%zu instances)", spec->generation,
		 spec->n_instances);
}

int list_actual(struct conv *c, struct rt_instance **ret, size_t *ret_n)
{
	int e = c->rt->ops->list(c->rt, ret, ret_n);

	if (e < 0) {
		if (!c->list_failed)
			log_error("runtime %s: list failed: %s", c->rt->ops->name, strerror(-e));
		c->list_failed = true;
		return e;
	}
	if (c->list_failed)
		log_info("runtime %s: list works again", c->rt->ops->name);
	c->list_failed = false;
	if (*ret_n > 1)
		qsort(*ret, *ret_n, sizeof(**ret), cmp_inst);
	return 0;
}

/* vol_pass's question: is the instance running or paused as this pass
 * listed it, with no job of its own under way (one call at a time)? */
struct live_ctx {
	const struct pass *p;
	const struct rt_instance *actual;
	size_t n;
};

static bool live_idle(void *ctx, const char *id)
{
	const struct live_ctx *l = ctx;
	const struct rt_instance *a = find_actual(l->actual, l->n, id);

	return a && (a->state == RT_STATE_RUNNING || a->state == RT_STATE_PAUSED) &&
	       !busy_of(l->p, id);
}

int conv_pass(struct conv *c)
{
	struct rt_instance *actual = NULL;
	struct pass p = {0};
	struct rt_storage stg;
	bool has_stg = false;
	size_t n_actual = 0;
	bool *matched, fenced;
	int64_t t[4];
	int e;

	/* the fence first: a confirmation it sees came after its spec was
	 * submitted, so the spec taken next is at least that one */
	fenced = fence_step(c);
	take_pending(c);
	if (fenced)
		return fence_pass(c);
	/* before listing: a job ending after this is still busy for this pass */
	jobs_take(c, &p, true);
	t[0] = mono_ms();
	e = list_actual(c, &actual, &n_actual);
	t[1] = mono_ms();
	if (e < 0) {
		publish(c, &p, false, NULL);
		pass_clear(&p);
		return e;
	}
	matched = xcalloc(n_actual ? n_actual : 1, sizeof(*matched));
	if (c->spec)
		mark_named(c, actual, n_actual, matched);
	converge_unnamed(c, &p, actual, n_actual, matched);
	/* bridge, ruleset and taps before any instance is created or started */
	if (c->spec && c->net)
		net_converge(c->net, c->spec, on_net_fail, &p);
	t[2] = mono_ms();
	if (c->spec && c->rt->ops->node)
		c->rt->ops->node(c->rt, c->spec);
	t[3] = mono_ms();
	/* volumes made before the instances that attach them are created */
	if (c->vol)
		has_stg = vol_pass(c->vol, c->spec, c->rt, live_idle,
				   &(struct live_ctx){&p, actual, n_actual}, &stg) == 0;
	if (c->spec)
		converge_desired(c, &p, actual, n_actual);
	if (c->spec && c->snap)
		snap_gc(c->snap, c->spec);
	if (c->spec && c->rb)
		rebind_gc(c->rb, c->spec);
	log_debug("pass: %" PRId64 " ms (list %" PRId64 " ms, network %" PRId64 " ms, node %" PRId64
		  " ms, instances %" PRId64 " ms)", mono_ms() - t[0], t[1] - t[0], t[2] - t[1],
		  t[3] - t[2], mono_ms() - t[3]);
	idset_sort(&p.owned);
	idset_clear(&c->adopted);
	c->adopted = p.owned;
	p.owned = (struct idset){0};
	publish(c, &p, true, has_stg ? &stg : NULL);
	pass_clear(&p);
	free(matched);
	free(actual);
	return 0;
}

/* ------------------------------------------------------------ threads */

/* Under the lock: until the next periodic pass, or the fence's deadline
 * if that comes first. */
static int next_wait_ms(const struct conv *c)
{
	int64_t left = c->contact_ms + c->fence_after_ms - mono_ms() + 100;

	if (c->fence == CONV_FENCE_OFF || c->fenced_at || left >= CONV_INTERVAL_MS)
		return CONV_INTERVAL_MS;
	return left > 0 ? (int)left : 1;
}

void conv_run(struct conv *c)
{
	struct timespec until;

	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		pthread_mutex_unlock(&c->lock);
		conv_pass(c);
		pthread_mutex_lock(&c->lock);
		until = deadline_ts(next_wait_ms(c));
		while (!c->stopping && !c->pending && !c->poked)
			if (pthread_cond_timedwait(&c->wake, &c->lock, &until) == ETIMEDOUT)
				break;
		c->poked = false;
	}
	pthread_mutex_unlock(&c->lock);
	jobs_stop(c);
}

bool conv_wait_change(struct conv *c, uint64_t seen_seq, int timeout_ms)
{
	struct timespec until;
	bool changed;

	until = deadline_ts(timeout_ms > 0 ? timeout_ms : 0);
	pthread_mutex_lock(&c->lock);
	while (!c->stopping && c->status.seq == seen_seq)
		if (pthread_cond_timedwait(&c->changed, &c->lock, &until) == ETIMEDOUT)
			break;
	changed = c->status.seq != seen_seq;
	pthread_mutex_unlock(&c->lock);
	return changed;
}

