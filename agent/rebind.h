/* rebind.h: bcd's side of a memory restore's identity rebind (rebind.c;
 * docs/rebind.md): which instances still need their
 * bundle delivered, the delivery itself (a converge job), and the record
 * of the ones done, data_dir/instances-rebound.json. Thread-safe: the
 * converge thread asks, a runtime worker delivers. */
#ifndef BC_AGENT_REBIND_H
#define BC_AGENT_REBIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "runtime.h"

#define REBIND_FILE "instances-rebound.json"
#define REBIND_REF_MAX 80
#define REBIND_RETRY_MIN_MS 30000
#define REBIND_RETRY_MAX_MS (15 * 60 * 1000)
#define REBIND_ENTRIES_MAX 4096

struct rebind;

/* Open the record at dir/REBIND_FILE (a missing file is an empty record;
 * one that does not parse is logged and treated as empty). fetch (with
 * ctx) fetches a bundle: Node.GetBootData{instance, ref}. 0 with *ret
 * owned (rebind_free), or -errno. */
int rebind_open(const char *dir, rt_boot_data_fn fetch, void *ctx, struct rebind **ret);
void rebind_free(struct rebind *rb);

/* Converge thread: whether s (running, listed now) needs a rebind job now:
 * its spec names a ref the record does not hold for it, and it is not
 * waiting for a retry after a failure. */
bool rebind_due(struct rebind *rb, const Bc__Node__V1__InstanceSpec *s);

/* Deliver s's bundle: fetch it, check it (rebind_bundle.h), build the
 * archive with a fresh nonce and call rt's rebind; on 0 record it. On a
 * failure the next attempt waits (REBIND_RETRY_MIN_MS, doubling up to
 * REBIND_RETRY_MAX_MS; every REBIND_RETRY_MAX_MS for -EOPNOTSUPP) and
 * reason (RT_REASON_MAX) says why ("IdentityRebind: ..."). */
int rebind_run(struct rebind *rb, struct rt *rt, const Bc__Node__V1__InstanceSpec *s,
	       char *reason);

/* What a report says of id: the ref applied (out, REBIND_REF_MAX; "":
 * none) and the last failure of a rebind still wanted (why,
 * RT_REASON_MAX; "": none). */
void rebind_status(struct rebind *rb, const char *id, char *ref, char *why);

/* Forget the instances spec no longer names (the record rewritten when it
 * changed), and the failures of refs it no longer names. */
void rebind_gc(struct rebind *rb, const Bc__Node__V1__NodeSpec *spec);

#endif
