/* events.c: the events outbox. Every state change inserts its event in the
 * same transaction as the change, so an event exists exactly when the change
 * committed. A transaction-scoped advisory lock taken before the insert
 * hands out ids in commit order (Events.Watch resumes on "id > last"). */
#include "ctl.h"

/* the advisory lock key of event ids (migrate.c uses another) */
#define EVENTS_LOCK "4242001"

int event_publish(struct db *d, const char *type, const char *subject, const char *tenant_id,
		  const char *data_json)
{
	struct dbp p = {0};

	dbp_str(&p, type);
	dbp_str(&p, subject);
	dbp_nstr(&p, tenant_id);
	dbp_str(&p, data_json ? data_json : "{}");
	/* the lock is taken before the row's id is drawn, in one round trip */
	return db_exec(d, NULL, "INSERT INTO events (type, subject, tenant_id, data) SELECT $1, $2, "
		       "$3, $4::jsonb FROM (SELECT pg_advisory_xact_lock(" EVENTS_LOCK ")) l", &p);
}

int spec_bump(struct db *d, const char *node_id)
{
	struct dbp p = {0};
	int r;

	if (!node_id)
		return 0;
	dbp_str(&p, node_id);
	r = db_exec(d, NULL, "UPDATE nodes SET spec_generation = spec_generation + 1 "
		    "WHERE id = $1", &p);
	if (r == 0)
		r = db_exec(d, NULL, "SELECT pg_notify('bc_node_spec', $1)", &p);
	return r;
}
