/* ratelimit.h: per-principal token buckets (ratelimit.c), per replica. */
#ifndef BC_CTL_RATELIMIT_H
#define BC_CTL_RATELIMIT_H

#include <stdint.h>

#include "config.h"
#include "err.h"

/* One token bucket (tokens, when last refilled) */
struct ratelimit_bucket {
	double tokens;
	int64_t at_ms;       /* 0: new, full */
};
/* Take a token from b at now_ms, refilling rate a second up to burst:
 * 0, or -EAGAIN with *ret_retry_s (>= 1) until one is back. Pure. */
int ratelimit_bucket_take(struct ratelimit_bucket *b, int64_t now_ms, int rate, int burst,
			  int *ret_retry_s);
/* Set the rate and burst from the config (rate 0: no limit). */
void ratelimit_configure(const struct ctl_config *c);
/* One request of principal_id: 0, or RESOURCE_EXHAUSTED with details
 * reason rate-limited and retryAfterSeconds. */
int ratelimit_take(const char *principal_id, bc_error *err);

#endif
