/* iam_react.c: the sandbox half of the IAM reactions (spec: "Withdrawn
 * agents and departing owners"), level-triggered on the reconciler's
 * leader so a missed or racing change is caught at the next pass:
 *
 *   - an open sandbox an agent created is withdrawn when that agent is no
 *     longer active (reason agent-suspended) or the delegation it was
 *     created under is revoked (reason delegation-revoked): sandbox.withdrawn,
 *     then an ordinary sandbox delete (a sandbox is the agent's own
 *     workspace; kept snapshots stay);
 *   - an open sandbox whose owner is deleted is deleted (an ordinary
 *     delete, sandbox.deleting); nobody may use its memory any more. Up to
 *     100 sandboxes a pass; all the owner's snapshots, kept ones too, are
 *     deleted (sandbox.snapshot.deleted). Moving it to
 *     a successor (sandbox.reassigned) is not offered: there is no API to
 *     name one yet.
 *
 * "The delegation it was created under" is the agent's live delegation to
 * the sandbox's owner that existed when the sandbox was made (at most one
 * is live per agent), so a new delegation does not revive older work. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "db.h"
#include "event_data.h"
#include "iam_react.h"
#include "log.h"
#include "outbox.h"
#include "sandboxes.h"
#include "snapshots.h"
#include "util.h"

static const char withdraw_sql[] =
	"SELECT s.id, CASE WHEN a.state <> 'active' THEN 'agent-suspended' ELSE "
	"'delegation-revoked' END, s.agent_id FROM sandboxes s JOIN identities a ON a.id = "
	"s.agent_id WHERE s.deleting_at IS NULL AND (a.state <> 'active' OR NOT EXISTS (SELECT 1 "
	"FROM delegations d WHERE d.agent_id = s.agent_id AND d.user_id = s.owner_id AND "
	"d.revoked_at IS NULL AND d.created_at <= s.created_at)) "
	"UNION ALL SELECT s.id, 'owner-deleted', coalesce(s.agent_id, '') FROM sandboxes s JOIN "
	"identities o ON o.id = s.owner_id WHERE s.deleting_at IS NULL AND o.state = 'deleted' "
	"LIMIT 100";
/* withdraw_sql's columns, in its order */
enum { WD_SANDBOX_ID, WD_REASON, WD_AGENT_ID };

struct wd {
	const char *id, *reason, *agent;
	bool done;
};

static int withdraw_tx(struct db *d, void *arg, bc_error *err)
{
	enum { WS_TENANT_ID, WS_TEMPLATE_ID, WS_INSTANCE_ID, WS_POOL_ID };
	struct wd *a = arg;
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	char subject[96];
	int rc;

	a->done = false;
	dbp_str(&p, a->id);
	rc = db_exec(d, &r, "SELECT tenant_id, template_id, instance_id, pool_id FROM sandboxes "
		     "WHERE id = $1 AND deleting_at IS NULL FOR UPDATE SKIP LOCKED", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r); /* deleting already, or someone holds it: the next pass sees */
		return 0;
	}
	snprintf(subject, sizeof(subject), "sandbox/%s", a->id);
	rc = evd_sandbox("sandbox.withdrawn", &(struct evd_sandbox){.reason = a->reason,
			 .agent_id = a->agent, .template_id = db_val(r, 0, WS_TEMPLATE_ID),
			 .instance_id = db_val(r, 0, WS_INSTANCE_ID), .pool_id = db_val(r, 0, WS_POOL_ID)}, &data);
	/* an owner who is gone: an ordinary delete (sandbox.deleting) */
	if (rc == 0 && strcmp(a->reason, "owner-deleted") != 0)
		rc = event_publish(d, "sandbox.withdrawn", subject, db_val(r, 0, WS_TENANT_ID), data);
	PQclear(r);
	if (rc == 0)
		rc = sbx_delete_locked(d, a->id, false);
	a->done = rc == 0;
	return rc < 0 ? db_fail(err, rc) : 0;
}

void iam_react_tick(struct db *d)
{
	PGresult *r = NULL;

	/* an owner who is gone: every snapshot, kept ones too (nobody may
	 * restore them; they hold memory and secrets) */
	if (snap_delete_where(d, "EXISTS (SELECT 1 FROM identities o WHERE o.id = p.owner_id AND "
			      "o.state = 'deleted')", NULL) < 0)
		log_warn("sandbox snapshots: the departed owners' deletion failed");
	if (db_exec(d, &r, withdraw_sql, NULL) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++) {
		struct wd a = {db_val(r, i, WD_SANDBOX_ID), db_val(r, i, WD_REASON),
			       db_val(r, i, WD_AGENT_ID), false};
		bc_error err;

		bc_error_clear(&err);
		if (db_tx(d, "READ COMMITTED", withdraw_tx, &a, &err) < 0)
			log_warn("sandbox %s: withdrawal failed: %s", a.id, err.message);
		else if (a.done)
			log_info("sandbox %s: withdrawn (%s)", a.id, a.reason);
	}
	PQclear(r);
}
