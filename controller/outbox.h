/* outbox.h: the events outbox (outbox.c): publishing and sequencing. */
#ifndef BC_CTL_OUTBOX_H
#define BC_CTL_OUTBOX_H

#include "config.h"
#include "db.h"

/* Publish an event inside the caller's transaction. data_json may be NULL
 * ("{}"). Statements may insert events themselves: no lock is needed, the
 * order is given after commit (events_sequence). 0 or -errno. */
int event_publish(struct db *d, const char *type, const char *subject, const char *tenant_id,
		  const char *data_json);
/* Number the committed events that have no seq yet (bc_events_sequence);
 * readers call it before reading, in a transaction of its own. */
int events_sequence(struct db *d);
/* The reconciler's retention pass (every 30 s): purge the events and
 * idempotency keys older than their config keys' retention, a bounded
 * batch each. Logs; never fails. */
void events_retention_tick(struct db *d, const struct ctl_config *cfg);

#endif
