/* bench_policy.c: the cost of one policy decision for `make bench`, with
 * 10 and with 1,000 statements attached. The pure engine is compiled in
 * directly (the bench binaries link only libbc). Statements are built so
 * that the deciding one is the last: every statement is tried, with
 * wildcards and conditions on the way. Prints one key=value line:
 *
 *   decide<N>_us   policy_decide on a parsed document (per call, median of runs)
 *   load<N>_us     policy_parse + policy_decide: what authz.c pays when a
 *                  document is not in its parse cache (first use, or the
 *                  cache is full), besides reading it from PostgreSQL */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../controller/json.c"
#include "../controller/policy.c"

static char *document(int n)
{
	size_t cap = (size_t)n * 320 + 64, used = 0;
	char *s = xmalloc(cap);

	used += (size_t)snprintf(s + used, cap - used, "{\"statements\": [");
	for (int i = 0; i < n; i++) {
		bool last = i == n - 1;
		used += (size_t)snprintf(
			s + used, cap - used,
			"%s{\"sid\": \"S%d\", \"effect\": \"allow\", \"actions\": [\"compute:%s:*\", "
			"\"billing:read\"], \"resources\": [\"compute-%s/*\", \"compute-pool/pool_%d\"], "
			"\"conditions\": {\"NumericLessThanEquals\": {\"resource.vcpus\": %d}, "
			"\"StringLike\": {\"principal.id\": \"idn_*\"}}}",
			i ? ", " : "", i, last ? "instances" : "volumes", last ? "instance" : "volume", i,
			last ? 64 : 1);
	}
	snprintf(s + used, cap - used, "]}");
	return s;
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median per-call microseconds (as a double) over 15 runs of reps calls. */
static double measure(const char *doc, bool parse_each, int reps)
{
	const struct policy_attr ra[] = {{"vcpus", "2"}, {"gpus", "0"}, {"poolId", "pool_x"}};
	const struct policy_attr pa[] = {{"id", "idn_alice"}, {"kind", "user"}};
	const char *const anc[] = {"compute-pool/pool_x", "tenant/acme"};
	struct policy_request q = {.action = "compute:instances:create",
				   .resource = "compute-instance/inst_1", .ancestors = anc,
				   .n_ancestors = 2, .resource_attrs = ra, .n_resource_attrs = 3,
				   .principal_attrs = pa, .n_principal_attrs = 2};
	struct policy *p = NULL;
	int64_t runs[15];

	if (policy_parse(doc, strlen(doc), &p, NULL, NULL, 0) < 0)
		abort();
	for (int r = 0; r < 15; r++) {
		int64_t t0 = mono_us();
		for (int i = 0; i < reps; i++) {
			struct policy *each = p;
			if (parse_each && policy_parse(doc, strlen(doc), &each, NULL, NULL, 0) < 0)
				abort();
			const struct policy *const docs[] = {each};
			if (policy_decide(docs, 1, &q, NULL) != POLICY_ALLOW)
				abort();
			if (parse_each)
				policy_free(each);
		}
		runs[r] = mono_us() - t0;
	}
	policy_free(p);
	qsort(runs, 15, sizeof(runs[0]), cmp);
	return (double)runs[7] / reps;
}

int main(void)
{
	char *d10 = document(10), *d1000 = document(1000);

	printf("decide10_us=%.2f load10_us=%.2f decide1000_us=%.2f load1000_us=%.2f\n",
	       measure(d10, false, 20000), measure(d10, true, 2000), measure(d1000, false, 200),
	       measure(d1000, true, 20));
	free(d10);
	free(d1000);
	return 0;
}
