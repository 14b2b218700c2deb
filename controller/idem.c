/* idem.c: idempotency keys for create-like calls. The same key with the same
 * request returns the first call's resource; with another request it is
 * CONFLICT (details.reason idempotency-key-reused). Keys are scoped to the
 * tenant, the caller and the method. The key is recorded in the same
 * transaction as the resource, so a refused call records nothing; two
 * concurrent calls with one key meet on the primary key and the loser's
 * transaction is retried, finding the winner's row. Keys are kept for
 * idempotency_retention_seconds, then purged by the reconciler. */
#include <errno.h>
#include <string.h>

#include "db.h"
#include "idem.h"
#include "util.h"
#include "validate.h"

int idem_hash(const ProtobufCMessage *req, char out[65])
{
	size_t n = protobuf_c_message_get_packed_size(req);
	uint8_t *buf = xmalloc(n);

	protobuf_c_message_pack(req, buf);
	sha256_hex(buf, n, out);
	free(buf);
	return 0;
}

int idem_lookup(struct db *d, const struct idem *k, char **ret_resource, bc_error *err)
{
	enum { LK_REQUEST_HASH, LK_RESOURCE_ID };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	*ret_resource = NULL;
	if (!k->key || !*k->key)
		return 0;
	dbp_str(&p, k->tenant_id);
	dbp_str(&p, k->caller_id);
	dbp_str(&p, k->scope);
	dbp_str(&p, k->key);
	rc = db_exec(d, &r, "SELECT request_hash, resource_id FROM idempotency_keys "
		     "WHERE tenant_id = $1 AND caller_id = $2 AND scope = $3 AND key = $4", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1) {
		if (strcmp(db_val(r, 0, LK_REQUEST_HASH), k->request_hash) != 0) {
			PQclear(r);
			bc_error_set(err, BC_CONFLICT, "idempotency key %s was used with another "
				     "request", k->key);
			return bc_error_detail(err, "reason", "idempotency-key-reused");
		}
		*ret_resource = xstrdup(db_val(r, 0, LK_RESOURCE_ID));
	}
	PQclear(r);
	return 0;
}

int idem_record(struct db *d, const struct idem *k, const char *resource_id, bc_error *err)
{
	struct dbp p = {0};
	int rc;

	if (!k->key || !*k->key)
		return 0;
	dbp_str(&p, k->tenant_id);
	dbp_str(&p, k->caller_id);
	dbp_str(&p, k->scope);
	dbp_str(&p, k->key);
	dbp_str(&p, k->request_hash);
	dbp_str(&p, resource_id);
	rc = db_exec(d, NULL, "INSERT INTO idempotency_keys (tenant_id, caller_id, scope, key, "
		     "request_hash, resource_id) VALUES ($1, $2, $3, $4, $5, $6)", &p);
	if (rc == -EEXIST)
		return -EAGAIN; /* a concurrent call won: retry and find its row */
	return rc < 0 ? db_fail(err, rc) : 0;
}

int idem_check_key(const char *key, bc_error *err)
{
	if (key && *key && !str_is_printable(key, 128))
		return invalid(err, "idempotencyKey", "idempotencyKey must be at most 128 "
			       "printable characters");
	return 0;
}

int idem_purge(struct db *d, int retention_seconds)
{
	return db_purge(d, "WITH g AS (DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid "
			"FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1) "
			"LIMIT $2) RETURNING 1) SELECT count(*) FROM g", retention_seconds,
			IDEM_PURGE_BATCH);
}
