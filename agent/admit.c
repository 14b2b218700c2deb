/* admit.c: host admission, as one pure rule. The libvirt and the fake
 * runtime each count what their own instances hold (libvirt from its
 * domains, the fake from its records) and read their capacity (the agent's
 * capacity_* keys; the fake also its test hook); whether the new instance
 * fits is decided here, once, so the two cannot drift. Checks only the
 * host's totals: huge pages, NUMA nodes and pinned CPUs are the libvirt
 * runtime's own (they ask the host). */
#include "admit.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "runtime.h"

/* One resource: fits unless a capacity is set and held + need exceeds it. */
static bool res_fits(uint64_t cap, uint64_t held, uint64_t need)
{
	return !cap || held + need <= cap;
}

/* See admit.h. */
int admit_fits(const struct admit_res *cap, const struct admit_res *held,
	       const struct admit_res *need, char *reason)
{
	const char *what = NULL;

	if (!res_fits(cap->memory_mib, held->memory_mib, need->memory_mib))
		what = "memory";
	else if (!res_fits(cap->vcpus, held->vcpus, need->vcpus))
		what = "vcpus";
	if (!what)
		return 0;
	snprintf(reason, RT_REASON_MAX, "ResourcesExhausted: %s", what);
	return -ENOSPC;
}
