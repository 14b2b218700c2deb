/* test_identity_client.c: the recognition cache's bound (identity_client.h):
 * an answer is kept at most min(its cacheSeconds, the cache's max), the max
 * is clamped to 10 s, NOT_FOUND is never kept, the oldest is evicted. */
#include "identity_client.h"

#include <stdio.h>
#include <string.h>

#include "tap.h"

static struct idc_answer ans(const char *addr, const char *sbx)
{
	struct idc_answer a = {0};

	snprintf(a.address, sizeof(a.address), "%s", addr);
	snprintf(a.sandbox_id, sizeof(a.sandbox_id), "%s", sbx);
	return a;
}

int main(void)
{
	struct idc_cache *c = idc_new(2, IDC_DEFAULT_SECONDS), *big = idc_new(4, 60);
	struct idc_answer a = ans("10.0.0.5", "sbx_a"), got;

	ok(c && big, "caches made");
	ok(!idc_get(c, "10.0.0.5", 0, &got), "empty: a miss");
	idc_put(c, &a, 2, 1000);
	ok(idc_get(c, "10.0.0.5", 2999, &got) && !strcmp(got.sandbox_id, "sbx_a"),
	   "kept just under 2 s");
	ok(!idc_get(c, "10.0.0.5", 3000, &got), "gone at 2 s: a revoked identity is honoured no longer");
	idc_put(c, &a, 5, 0);
	ok(!idc_get(c, "10.0.0.5", 2000, &got), "an answer asking 5 s is kept only the cache's 2 s");
	idc_put(big, &a, 60, 0);
	ok(idc_get(big, "10.0.0.5", 9999, &got), "a 60 s cache is clamped ...");
	ok(!idc_get(big, "10.0.0.5", 10000, &got), "... to 10 s");
	idc_put(c, &a, 0, 0);
	ok(!idc_get(c, "10.0.0.5", 0, &got), "cacheSeconds 0: not kept");
	idc_put(c, &a, 2, 0);
	idc_forget(c, "10.0.0.5");
	ok(!idc_get(c, "10.0.0.5", 1, &got), "forgotten on demand");
	{
		struct idc_answer b = ans("10.0.0.6", "sbx_b"), d = ans("10.0.0.7", "sbx_d");
		idc_put(c, &a, 2, 10);
		idc_put(c, &b, 2, 20);
		idc_put(c, &d, 2, 30);
		ok(!idc_get(c, "10.0.0.5", 31, &got), "full: the oldest is evicted");
		ok(idc_get(c, "10.0.0.6", 31, &got) && idc_get(c, "10.0.0.7", 31, &got),
		   "the others stay");
		b.sandbox_id[4] = 'X';
		idc_put(c, &b, 2, 40);
		ok(idc_get(c, "10.0.0.6", 41, &got) && !strcmp(got.sandbox_id, "sbx_X"),
		   "a new answer for an address replaces the old one");
	}
	idc_free(c);
	idc_free(big);
	idc_free(NULL);
	done_testing();
}
