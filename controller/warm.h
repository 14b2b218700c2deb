/* warm.h: warm pools (warm.c): the claim inside Sandboxes.Create's
 * transaction, the pool pass of the sandbox reconciler, the gauges. */
#ifndef BC_CTL_WARM_H
#define BC_CTL_WARM_H

#include <stdint.h>
#include <stdio.h>

#include "ctl.h"

#define WARM_REFILL_PER_PASS 4      /* warm instances created per template per pass */
#define WARM_BUDGET_CACHE_MS 60000  /* a tenant's budget answer is kept a minute */

/* One claim: the template (read FOR SHARE by the caller), the sandbox
 * that takes the instance, and the caller it is created for. */
struct warm_claim {
	const char *template_id, *sandbox_id, *network;
	int instance_version;
	int64_t ttl_seconds;
	const struct principal *caller;
	char instance[64];   /* out: the claimed instance */
	char node[64];       /* out: its node */
};

/* Inside the caller's READ COMMITTED transaction: take the oldest
 * claimable warm instance of the template (paused or stopped, of its
 * current instance_version, on a ready host carrying the capabilities
 * the template needs, whose host certificate, if any, covers the
 * lifetime; FOR UPDATE SKIP LOCKED, so concurrent claims never take one
 * twice and never wait for each other). The instance gets sandbox_id and
 * claimed_at, loses warm_template_id, is desired running again and its
 * authorization row becomes the caller's; its node's spec stream hears of
 * it (an insert-only change row, as spec_bump: concurrent claims on one
 * node do not wait for each other) and the pool reconciler is woken to
 * refill, all in one statement. 1 when claimed, 0 when nothing is
 * claimable (the caller creates cold), <0 with err. */
int warm_claim_tx(struct db *d, struct warm_claim *w, bc_error *err);

/* One pass over every pool (the sandbox reconciler's leader): drains
 * (older instance_version, failed, on a host without the capability, a
 * deleted template's, a drain budget's, then beyond warm.max newest
 * first), then refills up to warm.min, at most WARM_REFILL_PER_PASS per
 * template, each in its own transaction. Logs; never fails. */
void warm_pass(struct db *d);

/* Prometheus gauges: warm instances per template and state. */
void warm_metrics_render(FILE *out, struct db *d);

#endif
