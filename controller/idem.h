/* idem.h: idempotency keys for create-like calls (see idem.c). */
#ifndef BC_CTL_IDEM_H
#define BC_CTL_IDEM_H

#include <protobuf-c/protobuf-c.h>

#include "db.h"
#include "err.h"

struct idem {
	const char *tenant_id, *caller_id, *scope, *key;
	char request_hash[65];
};

/* SHA-256 of the packed request (callers clear the key and wait first). */
int idem_hash(const ProtobufCMessage *req, char out[65]);
/* Inside the create's transaction: *ret_resource = the id an earlier call
 * with this key created (malloc'd), or NULL. CONFLICT for another request. */
int idem_lookup(struct db *d, const struct idem *k, char **ret_resource, bc_error *err);
/* Record the key for resource_id, in the same transaction. -EAGAIN when a
 * concurrent call recorded it first (db_tx retries). */
int idem_record(struct db *d, const struct idem *k, const char *resource_id, bc_error *err);
int idem_check_key(const char *key, bc_error *err);
/* Delete up to IDEM_PURGE_BATCH keys older than retention_seconds (0:
 * keep them all); a call with a purged key is a new call. The table has
 * no index by age: the scan stops at a full batch, and the reconciler
 * runs it every 30 s. The number
 * deleted, or -errno. */
#define IDEM_PURGE_BATCH 1000
int idem_purge(struct db *d, int retention_seconds);

#endif
