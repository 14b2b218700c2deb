/* Unit tests of the per-principal token bucket (controller/ratelimit.c):
 * a new bucket serves its burst at once, then one call per 1/rate
 * seconds; an empty bucket says how many whole seconds until a token is
 * back; idle time refills it only up to the burst. */
#include <errno.h>
#include <string.h>

#include "controller/ratelimit.h"
#include "tap.h"

static int take_n(struct ratelimit_bucket *b, int64_t now, int rate, int burst, int n)
{
	int ok_n = 0, retry;

	for (int i = 0; i < n; i++)
		ok_n += ratelimit_bucket_take(b, now, rate, burst, &retry) == 0;
	return ok_n;
}

int main(void)
{
	struct ratelimit_bucket b = {0};
	int retry = 0;

	is_int(take_n(&b, 1000, 2, 5, 20), 5, "a new bucket serves its burst of 5, no more");
	is_int(ratelimit_bucket_take(&b, 1000, 2, 5, &retry), -EAGAIN, "then it is empty");
	is_int(retry, 1, "retry in 1 s at 2 a second");
	is_int(take_n(&b, 1500, 2, 5, 3), 1, "half a second later: one token at 2 a second");
	is_int(take_n(&b, 600000, 2, 5, 20), 5, "ten minutes idle: full again, not more");
	memset(&b, 0, sizeof(b));
	take_n(&b, 1000, 1, 1, 1);
	is_int(ratelimit_bucket_take(&b, 1000, 1, 1, &retry), -EAGAIN, "rate 1, burst 1: empty");
	is_int(retry, 1, "retry in 1 s at 1 a second");
	is_int(take_n(&b, 1400, 1, 1, 1), 0, "0.4 s later: still empty");
	ratelimit_bucket_take(&b, 1400, 1, 1, &retry);
	is_int(retry, 1, "retry rounds 0.6 s up to a whole second");
	memset(&b, 0, sizeof(b));
	is_int(take_n(&b, 1000, 1000, 1, 3), 1, "burst 1 at 1000 a second: one at a time");
	is_int(take_n(&b, 1001, 1000, 1, 3), 1, "a millisecond later: the next");
	done_testing();
}
