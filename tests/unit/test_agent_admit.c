/* test_agent_admit.c: the host-admission rule both runtimes share
 * (agent/admit.c): what fits, what does not and the reason, capacity 0
 * unenforced, memory decided before vCPUs. */
#include <errno.h>
#include <string.h>

#include "agent/admit.h"
#include "agent/runtime.h"
#include "tap.h"

/* admit_fits over plain numbers; reason left in `reason`. */
static char reason[RT_REASON_MAX];

static int fits(uint64_t cap_v, uint64_t cap_m, uint64_t held_v, uint64_t held_m,
		uint64_t need_v, uint64_t need_m)
{
	struct admit_res cap = {cap_v, cap_m}, held = {held_v, held_m}, need = {need_v, need_m};

	strcpy(reason, "untouched");
	return admit_fits(&cap, &held, &need, reason);
}

int main(void)
{
	is_int(fits(8, 8192, 0, 0, 2, 1024), 0, "an empty host takes an instance");
	is_str(reason, "untouched", "no reason when it fits");
	is_int(fits(8, 8192, 6, 7168, 2, 1024), 0, "exactly full fits");
	is_int(fits(8, 8192, 6, 7168, 2, 1025), -ENOSPC, "one MiB over does not");
	is_str(reason, "ResourcesExhausted: memory", "memory named");
	is_int(fits(8, 8192, 7, 0, 2, 1024), -ENOSPC, "one vCPU over does not");
	is_str(reason, "ResourcesExhausted: vcpus", "vcpus named");
	is_int(fits(1, 1, 4, 4096, 4, 4096), -ENOSPC, "both over");
	is_str(reason, "ResourcesExhausted: memory", "memory is decided first");
	is_int(fits(0, 0, 1000, 1u << 30, 64, 1u << 20), 0, "capacity 0 is not enforced");
	is_int(fits(0, 1024, 1000, 0, 64, 1024), 0, "vcpus unenforced, memory fits");
	is_int(fits(2, 0, 0, 1u << 30, 3, 1), -ENOSPC, "memory unenforced, vcpus over");
	is_str(reason, "ResourcesExhausted: vcpus", "vcpus named");
	done_testing();
}
