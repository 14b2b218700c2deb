/* warm.h: warm pools (warm.c): the claim inside Sandboxes.Create's
 * transaction, the pool pass of the sandbox reconciler, the gauges. */
#ifndef BC_CTL_WARM_H
#define BC_CTL_WARM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "app.h"
#include "db.h"
#include "node.h"

#define WARM_REFILL_PER_PASS 4      /* warm instances created per template per pass */
#define WARM_BUDGET_CACHE_MS 60000  /* a tenant's budget answer is kept a minute */

/* Whether warm instance row i (whose warm_secret_versions is not NULL) is
 * stale: a secret it was given has another version now, or is gone. An
 * instance of a template naming no secrets records none (NULL) and is
 * never looked at. */
#define WARM_SECRETS_STALE(i)                                                              \
	"EXISTS (SELECT 1 FROM jsonb_each_text(" i ".warm_secret_versions) v LEFT JOIN "       \
	"secret_refs s ON s.id = v.key WHERE s.version IS DISTINCT FROM v.value::bigint)"

#define WARM_CLAIM_RETIRE_MAX 4     /* stale warm instances one claim retires */

/* One claim: the template (read FOR SHARE by the caller), the sandbox
 * that takes the instance, and the caller it is created for. */
struct warm_claim {
	const char *template_id, *sandbox_id, *network;
	int instance_version;
	int64_t ttl_seconds;
	const struct principal *caller;
	bool identity;     /* the bind check: its host must advertise instance.identity */
};

/* The claim, as the CTEs a statement in the caller's READ COMMITTED
 * transaction starts with (Sandboxes.Create adds the sandbox's rows to
 * it: sandboxes.c). c takes the oldest claimable warm instance of the
 * template (paused after its guest reported up: guest_ready_at set; of
 * its current instance_version, on a
 * ready host carrying the capabilities the template needs, whose host
 * certificate, if any, covers the lifetime, not stale
 * (WARM_SECRETS_STALE); FOR UPDATE SKIP LOCKED, so
 * concurrent claims never take one twice and never wait for each other);
 * u hands it over (sandbox_id, claimed_at, no warm_template_id, desired
 * running again; RETURNING i.*, so the statement reads the instance as
 * claimed); z makes its authorization row the caller's; n records the
 * change of its node (an insert-only row, as spec_bump: concurrent claims
 * on one node do not wait for each other), naming the instance, so the
 * node's next spec reads only it again (NODE_SPEC_CHANGES_FROM, node.h).
 * The statement must also select pg_notify(NODE_SPEC_CHANNEL, node_id) and
 * pg_notify(SBX_WAKE_CHANNEL, 'warm') from u (the node's spec stream, the
 * pool's refill). Nothing
 * claimable: u is empty, and so is whatever is built on it. Parameters
 * $1-$7 from warm_claim_params: template, instance_version, capabilities
 * ("\n"-separated), lifetime (s), sandbox, owner, agent (NULL: none). */
#define WARM_CLAIM_CTE                                                                     \
	"WITH c AS (SELECT i.id FROM instances i JOIN nodes n ON n.id = i.node_id WHERE "     \
	"i.warm_template_id = $1 AND i.warm_instance_version = $2::int AND i.state = "        \
	"'paused' AND i.desired_state = 'paused' AND i.guest_ready_at IS NOT NULL AND "       \
	"n.state = 'ready' AND (i.warm_secret_versions IS NULL OR NOT " WARM_SECRETS_STALE("i") ") "   \
	"AND n.labels ?& string_to_array($3, E'\\n') AND (i.host_cert_valid_before "         \
	"IS NULL OR i.host_cert_valid_before >= now() + make_interval(secs => $4::int)) "     \
	"ORDER BY i.created_at, i.id LIMIT 1 FOR UPDATE OF i SKIP LOCKED), "                  \
	"u AS (UPDATE instances i SET sandbox_id = $5, warm_template_id = NULL, claimed_at = " \
	"now(), desired_state = 'running', updated_at = now() FROM c WHERE i.id = c.id "      \
	"RETURNING i.*), "                                                                    \
	"z AS (UPDATE authz_resources a SET owner_id = $6, agent_id = $7, attrs = (a.attrs - " \
	"'warmTemplateId') || jsonb_build_object('sandboxId', $5::text) FROM u WHERE a.type " \
	"= 'compute-instance' AND a.id = u.id), "                                             \
	"n AS (" NODE_SPEC_CHANGES_FROM("u") ")"
#define WARM_CLAIM_NPARAMS 7
void warm_claim_params(struct dbp *q, const struct warm_claim *w);

/* Before a claim from a template that names secrets, in the claim's
 * transaction: retire (drain) up to limit stale warm instances of the
 * template, oldest first (the candidates a claim would try first), each
 * publishing instance.deleting with reason warm-stale; the claim then
 * takes the next current one, or none (a cold create). *ret_n: how many. */
int warm_retire_stale(struct db *d, const char *template_id, int limit, int *ret_n,
		      bc_error *err);

/* One pass over every pool (the sandbox reconciler's leader): drains
 * (older instance_version, failed, on a host without the capability, a
 * deleted template's, a drain budget's, for a template naming secrets
 * the stale ones, one whose host certificate no longer covers the
 * template's default lifetime, then beyond warm.max newest
 * first), then refills up to warm.min, at most WARM_REFILL_PER_PASS per
 * template, each in its own transaction, resolving the template's
 * secrets (broker: secrets_broker(app)) and recording their versions,
 * each instance with the guest trust part (sbx_guest_trust). Logs; never
 * fails. */
void warm_pass(struct db *d, const struct ctl_app *app);

/* Prometheus gauges: warm instances per template and state. */
void warm_metrics_render(FILE *out, struct db *d);

#endif
