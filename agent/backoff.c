/* backoff.c: retry pacing for the agent's connections to the controller
 * (reconnect 0.2 s .. 5 s with jitter, so a fleet of agents does not
 * stampede a restarted controller) and the shutdown-aware sleep. */
#include "backoff.h"

#include <errno.h>
#include <time.h>

#include "util.h"

void backoff_init(struct backoff *b, int64_t min_ms, int64_t max_ms)
{
	b->min_ms = min_ms > 0 ? min_ms : 1;
	b->max_ms = max_ms >= b->min_ms ? max_ms : b->min_ms;
	b->cur_ms = b->min_ms;
}

int64_t backoff_next(struct backoff *b)
{
	uint32_t rnd = 0;
	int64_t half = b->cur_ms / 2, d;

	random_bytes(&rnd, sizeof(rnd));
	d = b->cur_ms - half + (half > 0 ? (int64_t)(rnd % (uint32_t)(half + 1)) : 0);
	b->cur_ms = b->cur_ms > b->max_ms / 2 ? b->max_ms : b->cur_ms * 2;
	return d > 0 ? d : 1;
}

void backoff_reset(struct backoff *b)
{
	b->cur_ms = b->min_ms;
}

void backoff_stop_init(struct backoff_stop *s)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->stop = false;
}

void backoff_stop_destroy(struct backoff_stop *s)
{
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
}

void backoff_stop_request(struct backoff_stop *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

bool backoff_stopped(struct backoff_stop *s)
{
	bool v;

	pthread_mutex_lock(&s->lock);
	v = s->stop;
	pthread_mutex_unlock(&s->lock);
	return v;
}

bool backoff_sleep(struct backoff_stop *s, int64_t ms)
{
	struct timespec until;
	bool v;

	until = deadline_ts(ms);
	pthread_mutex_lock(&s->lock);
	while (!s->stop)
		if (pthread_cond_timedwait(&s->cond, &s->lock, &until) == ETIMEDOUT)
			break;
	v = s->stop;
	pthread_mutex_unlock(&s->lock);
	return v;
}
