/* test_deadline.c: the monotonic deadline helpers of common/util.c
 * (deadline_ts normalises nanoseconds; deadline_in/left/passed agree with
 * mono_ms). */
#include <time.h>

#include "tap.h"
#include "util.h"

static int64_t ts_ms(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(void)
{
	struct timespec now, ts;
	int64_t d;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ts = deadline_ts(1999);
	ok(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L, "deadline_ts keeps tv_nsec below a second");
	ok(ts_ms(ts) - ts_ms(now) >= 1999 && ts_ms(ts) - ts_ms(now) < 1999 + 1000,
	   "deadline_ts(1999) is 1999 ms from now");
	ts = deadline_ts(0);
	ok(ts_ms(ts) >= ts_ms(now), "deadline_ts(0) is now");
	d = deadline_in(10000);
	ok(!deadline_passed(d), "a deadline 10 s away has not passed");
	ok(deadline_left(d) > 9000 && deadline_left(d) <= 10000, "about 10 s left");
	d = deadline_in(-1);
	ok(deadline_passed(d), "a deadline in the past has passed");
	ok(deadline_left(d) <= 0, "nothing left of it");
	ok(deadline_passed(mono_ms()), "a deadline of now has passed");
	done_testing();
}
