/* outbox.c: the events outbox. Every state change inserts its event in the
 * same transaction as the change, so an event exists exactly when the change
 * committed. Inserting takes no lock: the order readers see is given after
 * commit by bc_events_sequence (migration 0007), which numbers every
 * committed, unsequenced event (events.seq) one sequencer at a time, so
 * "seq > last seen" is a complete resume point (events_api.c). Events
 * older than events_retention_seconds are purged by the reconciler, oldest
 * first, in batches (events_retention_tick): a watcher resuming from a
 * purged seq continues with the oldest event kept. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "db.h"
#include "idem.h"
#include "log.h"
#include "outbox.h"
#include "tunnels.h"
#include "util.h"

#define EVENTS_PURGE_BATCH 1000
#define RETENTION_EVERY_MS 30000

int event_publish(struct db *d, const char *type, const char *subject, const char *tenant_id,
		  const char *data_json)
{
	struct dbp p = {0};

	dbp_str(&p, type);
	dbp_str(&p, subject);
	dbp_nstr(&p, tenant_id);
	dbp_str(&p, data_json ? data_json : "{}");
	return db_exec(d, NULL, "INSERT INTO events (type, subject, tenant_id, data) VALUES ($1, $2, "
		       "$3, $4::jsonb)", &p);
}

/* Delete the sequenced events older than retention_seconds among the
 * oldest EVENTS_PURGE_BATCH (ids follow commit order closely enough, and
 * reading only the first batch by id keeps a pass cheap however large the
 * table). The number deleted, or -errno. */
static int events_purge(struct db *d, int retention_seconds)
{
	return db_purge(d, "WITH g AS (DELETE FROM events WHERE id IN (SELECT id FROM (SELECT id, "
			"seq, created_at FROM events ORDER BY id LIMIT $2) o WHERE o.seq IS NOT NULL "
			"AND o.created_at < now() - make_interval(secs => $1)) RETURNING 1) SELECT "
			"count(*) FROM g", retention_seconds, EVENTS_PURGE_BATCH);
}

void events_retention_tick(struct db *d, const struct ctl_config *cfg)
{
	static int64_t next_ms;
	int ev, keys, tun;

	if (mono_ms() < next_ms)
		return;
	next_ms = mono_ms() + RETENTION_EVERY_MS;
	/* events are numbered before each read; with no reader they wait, and
	 * only numbered ones are purged (a reader's resume point stays whole) */
	ev = events_sequence(d);
	if (ev == 0)
		ev = events_purge(d, cfg->events_retention_seconds);
	keys = idem_purge(d, cfg->idempotency_retention_seconds);
	tun = tunnels_purge(d, cfg->events_retention_seconds);
	if (ev < 0 || keys < 0 || tun < 0)
		log_warn("retention: purge failed: %s",
			 strerror(-(ev < 0 ? ev : keys < 0 ? keys : tun)));
	else if (ev > 0 || keys > 0 || tun > 0)
		log_info("retention: %d events, %d idempotency keys and %d tunnels purged", ev,
			 keys, tun);
	if (ev == EVENTS_PURGE_BATCH || keys == IDEM_PURGE_BATCH || tun == TUNNELS_PURGE_BATCH)
		next_ms = 0; /* more to do: again at the next pass */
}

int events_sequence(struct db *d)
{
	return db_exec(d, NULL, "SELECT bc_events_sequence()", NULL);
}
