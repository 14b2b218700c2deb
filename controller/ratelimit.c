/* ratelimit.c: a request rate limit per principal, per replica. Each
 * tenant identity has a token bucket (rate_limit_per_second tokens a
 * second, at most rate_limit_burst); every authenticated call takes one,
 * and a call finding the bucket empty is refused with RESOURCE_EXHAUSTED
 * and details.retryAfterSeconds (whole seconds until a token is back). The
 * buckets live in this process only: with N replicas a principal gets at
 * most N times the rate. A bucket idle long enough to be full again is
 * the same as none, so idle buckets are dropped as the table is swept. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ratelimit.h"
#include "util.h"

#define RL_BUCKETS 4096
#define RL_SWEEP_EVERY 1024   /* inserts between sweeps of idle entries */

struct rl_entry {
	char id[64];
	struct ratelimit_bucket b;
	struct rl_entry *next;
};

static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rl_entry *rl_table[RL_BUCKETS];
static int rl_rate, rl_burst;
static unsigned rl_inserts;

int ratelimit_bucket_take(struct ratelimit_bucket *b, int64_t now_ms, int rate, int burst,
			  int *ret_retry_s)
{
	double cap = burst > 0 ? burst : 1;

	if (b->at_ms == 0) {
		b->tokens = cap;
	} else if (now_ms > b->at_ms) {
		b->tokens += (double)(now_ms - b->at_ms) * rate / 1000.0;
		if (b->tokens > cap)
			b->tokens = cap;
	}
	b->at_ms = now_ms;
	if (b->tokens >= 1.0) {
		b->tokens -= 1.0;
		return 0;
	}
	*ret_retry_s = (int)ceil((1.0 - b->tokens) / rate);
	if (*ret_retry_s < 1)
		*ret_retry_s = 1;
	return -EAGAIN;
}

void ratelimit_configure(const struct ctl_config *c)
{
	pthread_mutex_lock(&rl_mu);
	rl_rate = c->rate_limit_per_second;
	rl_burst = c->rate_limit_burst;
	pthread_mutex_unlock(&rl_mu);
}

static unsigned rl_hash(const char *id)
{
	unsigned h = 5381;

	for (; *id; id++)
		h = h * 33 + (unsigned char)*id;
	return h % RL_BUCKETS;
}

/* Drop every entry idle long enough to be full again (rl_mu held). */
static void rl_sweep(int64_t now_ms)
{
	int64_t full_ms = (int64_t)rl_burst * 1000 / rl_rate + 1000;

	for (size_t i = 0; i < RL_BUCKETS; i++) {
		struct rl_entry **pp = &rl_table[i];
		while (*pp) {
			struct rl_entry *e = *pp;
			if (now_ms - e->b.at_ms > full_ms) {
				*pp = e->next;
				free(e);
			} else {
				pp = &e->next;
			}
		}
	}
}

static struct rl_entry *rl_find(const char *id, int64_t now_ms)
{
	unsigned h = rl_hash(id);
	struct rl_entry *e;

	for (e = rl_table[h]; e; e = e->next)
		if (strcmp(e->id, id) == 0)
			return e;
	if (++rl_inserts % RL_SWEEP_EVERY == 0)
		rl_sweep(now_ms);
	e = xcalloc(1, sizeof(*e));
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->next = rl_table[h];
	rl_table[h] = e;
	return e;
}

int ratelimit_take(const char *principal_id, bc_error *err)
{
	int64_t now = mono_ms();
	int retry = 1, rc = 0;

	pthread_mutex_lock(&rl_mu);
	if (rl_rate > 0)
		rc = ratelimit_bucket_take(&rl_find(principal_id, now)->b, now, rl_rate, rl_burst,
					   &retry);
	pthread_mutex_unlock(&rl_mu);
	if (rc == 0)
		return 0;
	bc_error_set(err, BC_RESOURCE_EXHAUSTED, "too many requests from %s: retry in %d s",
		     principal_id, retry);
	bc_error_detail(err, "reason", "rate-limited");
	return bc_error_detail(err, "retryAfterSeconds", "%d", retry);
}
