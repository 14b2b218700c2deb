/* runtime_fake_int.h: what runtime_fake.c shares with the fake runtime's
 * other files (runtime_fake_rebind.c); private to them. */
#ifndef BC_AGENT_RUNTIME_FAKE_INT_H
#define BC_AGENT_RUNTIME_FAKE_INT_H

#include <stdbool.h>

#include "runtime.h"

/* state_dir/fake, where records, hooks and the ledger live. */
const char *fake_dir(struct rt *rt);
/* Append one ledger line (ending '\n'). */
void fake_ledger(struct rt *rt, const char *line);
/* The test hooks of id: op named in <id>.fail; sleep as <id>.slow says. */
bool fake_fail(struct rt *rt, const char *id, const char *op);
void fake_slow(struct rt *rt, const char *id, const char *op);
/* The state of the instance id holds: 0, or -ENOENT. */
int fake_state(struct rt *rt, const char *id, enum rt_state *ret);

/* runtime_fake_rebind.c: runtime_ops.rebind. */
int fake_rebind(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec, const void *tar,
		size_t len, const char *nonce, char *reason);

#endif
