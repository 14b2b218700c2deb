/* admit.h: host admission, the rule both runtimes (runtime_libvirt.c,
 * runtime_fake.c) apply before they create an instance. */
#ifndef BC_AGENT_ADMIT_H
#define BC_AGENT_ADMIT_H

#include <stdint.h>

/* An amount of the host's resources: its capacity, what its instances
 * hold, or what one instance needs. */
struct admit_res {
	uint64_t vcpus;
	uint64_t memory_mib;
};

/* Does an instance needing `need` fit a host of capacity `cap` whose
 * instances already hold `held` (whatever their state: a defined instance
 * keeps its booking, as the controller counts it)? A capacity of 0 is not
 * enforced. Memory is checked first, then vCPUs. 0 if it fits; -ENOSPC
 * with reason (RT_REASON_MAX bytes) "ResourcesExhausted: memory" or
 * "ResourcesExhausted: vcpus" if not. Pure. */
int admit_fits(const struct admit_res *cap, const struct admit_res *held,
	       const struct admit_res *need, char *reason);

#endif
