/* converge_fence.c: fencing. Without contact with a controller for
 * fence_after_ms the pass applies nothing: it pauses or stops what runs
 * and sets its taps down (see converge.c's head comment). */
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
#include "net.h"
#include "netlink.h"
#include "util.h"
#include "volumes.h"

/* ------------------------------------------------------------ fencing */

void conv_set_fence(struct conv *c, enum conv_fence policy, int64_t after_ms)
{
	c->fence = policy;
	c->fence_after_ms = after_ms;
}

int conv_fence_parse(const char *s, enum conv_fence *ret)
{
	static const char *const names[] = {"off", "pause", "stop"};

	for (size_t i = 0; s && i < ARRAY_SIZE(names); i++)
		if (strcmp(s, names[i]) == 0) {
			*ret = (enum conv_fence)i;
			return 0;
		}
	return -EINVAL;
}

/* Under the lock: while fenced, a pass as soon as what it waits for came. */
void wake_if_fenced(struct conv *c)
{
	if (!c->fenced_at)
		return;
	c->poked = true;
	pthread_cond_broadcast(&c->wake);
}

void conv_contact(struct conv *c)
{
	pthread_mutex_lock(&c->lock);
	c->contact_ms = mono_ms();
	pthread_mutex_unlock(&c->lock);
}

void conv_confirm(struct conv *c)
{
	pthread_mutex_lock(&c->lock);
	c->contact_ms = c->confirm_ms = mono_ms();
	wake_if_fenced(c);
	pthread_mutex_unlock(&c->lock);
}

bool conv_fenced(struct conv *c)
{
	bool f;

	pthread_mutex_lock(&c->lock);
	f = c->fenced_at != 0;
	pthread_mutex_unlock(&c->lock);
	return f;
}

/* The fence for this pass: begins after fence_after_ms without contact;
 * lifts once a report carried the fenced states and the controller
 * confirmed the spec since the fence began. True: a fenced pass. */
bool fence_step(struct conv *c)
{
	int64_t now = mono_ms(), silent;
	bool begin = false, lift = false, fenced;

	if (c->fence == CONV_FENCE_OFF)
		return false;
	pthread_mutex_lock(&c->lock);
	silent = now - c->contact_ms;
	if (!c->fenced_at && silent >= c->fence_after_ms) {
		c->fenced_at = now;
		begin = true;
	} else if (c->fenced_at && c->confirm_ms > c->fenced_at &&
		   c->reported_seq >= c->fence_seq) {
		c->fenced_at = 0;
		lift = true;
	}
	fenced = c->fenced_at != 0;
	pthread_mutex_unlock(&c->lock);
	if (begin)
		log_warn("fence: no contact with a controller for %" PRId64 " s: %s every instance "
			 "and cutting its network until the controller confirms this node's spec",
			 silent / 1000, c->fence == CONV_FENCE_STOP ? "stopping" : "pausing");
	if (lift)
		log_info("fence: lifted: the controller confirmed spec generation %" PRIu64
			 "; converging it", c->spec ? c->spec->generation : 0);
	return fenced;
}

/* The taps of the spec's instances down (net_converge brings them up
 * again once the fence lifts). */
static void fence_taps(struct conv *c)
{
	if (!c->spec || !c->net || !net_enforces(c->net))
		return;
	for (size_t i = 0; i < c->spec->n_instances; i++)
		for (size_t k = 0; k < c->spec->instances[i]->n_nics; k++) {
			const char *tap = c->spec->instances[i]->nics[k]->tap;
			int e = nl_link_set_up(tap, false);
			if (e < 0 && e != -ENODEV)
				log_warn("fence: tap %s: cannot set it down: %s", tap, strerror(-e));
		}
}

/* A running instance paused (or, with fence = stop or when the pause
 * fails, stopped); reported with a Fenced reason. */
static void fence_one(struct conv *c, struct pass *p, const struct rt_instance *a)
{
	bool stop = c->fence == CONV_FENCE_STOP;
	enum rt_state st = a->state;
	char reason[RT_REASON_MAX];
	int e = 0;

	if (st == RT_STATE_RUNNING && !stop && (e = c->rt->ops->pause(c->rt, a->id)) == 0)
		st = RT_STATE_PAUSED;
	else if (st == RT_STATE_RUNNING || (stop && st == RT_STATE_PAUSED))
		if ((e = c->rt->ops->stop(c->rt, a->id)) == 0)
			st = RT_STATE_STOPPED;
	if (st != a->state)
		log_warn("instance %s: fenced: %s", a->id, rt_state_name(st));
	if (e < 0 && e != -EINPROGRESS)
		snprintf(reason, sizeof(reason), "Fenced: no contact with a controller; %s failed: "
			 "%.100s", stop ? "stop" : "pause", strerror(-e));
	else
		snprintf(reason, sizeof(reason), "Fenced: no contact with a controller for %" PRId64
			 " s", c->fence_after_ms / 1000);
	add_item(p, a->id, rt_state_name(st), reason);
}


/* A pass while fenced: nothing of the spec is applied, nothing created or
 * destroyed; every instance is held and reported Fenced. */
int fence_pass(struct conv *c)
{
	Bc__Node__V1__InstanceSpec **v = NULL;
	struct rt_instance *actual = NULL;
	struct pass p = {0};
	struct rt_storage stg;
	size_t n_actual = 0;
	int e;
	bool has_stg;

	jobs_take(c, &p, true);  /* ended jobs: this pass reports what it lists */
	e = list_actual(c, &actual, &n_actual);
	if (e == 0) {
		fence_taps(c);
		for (size_t i = 0; i < n_actual; i++) {
			const struct busy *b = busy_of(&p, actual[i].id);
			if (b)  /* its job's call is under way: held once it ends */
				add_item(&p, actual[i].id, b->phase, b->phase_reason);
			else
				fence_one(c, &p, &actual[i]);
		}
		if (c->spec) {
			size_t n = spec_sorted(c, &v);
			stamp_desired(&p, v, n);
			free(v);
		}
	}
	has_stg = c->vol && vol_last(c->vol, &stg) == 0;  /* volumes untouched */
	publish(c, &p, e == 0, has_stg ? &stg : NULL);
	pthread_mutex_lock(&c->lock);
	c->fence_seq = c->status.seq;
	pthread_mutex_unlock(&c->lock);
	pass_clear(&p);
	free(actual);
	return e;
}

