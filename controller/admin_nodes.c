/* admin_nodes.c: the operator's view of hosts: join tokens (pool-scoped,
 * single use, expiring, stored as a hash and shown once), node get/list with
 * capacity and bookings, and retirement (the node's certificate is refused
 * from then on; its instances are lost, its deletions finish). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "ctl.h"
#include "log.h"
#include "nodes.h"
#include "rowmsg.h"
#include "util.h"

#define JOIN_TTL_DEFAULT 3600
#define JOIN_TTL_MAX (7 * 86400)

#define NODE_COLS                                                                            \
	"n.id, n.pool_id, n.hostname, n.address, n.state, (SELECT string_agg(key || E'\\t' || " \
	"value, E'\\n' ORDER BY key) FROM jsonb_each_text(n.labels)), n.cap_vcpus, "            \
	"n.cap_memory_mib, n.cap_disk_gib, n.cap_gpus, coalesce(b.vcpus, 0), coalesce(b.mem, 0), " \
	"coalesce(b.disk, 0), coalesce(b.gpus, 0), n.spec_generation, n.applied_generation, "   \
	"coalesce(" MS("n.last_report_at") ", 0), " MS("n.joined_at")                           \
	", array_to_string(n.capabilities, E'\\n'), coalesce(b.instances, 0)"
#define NODE_FROM                                                                            \
	" FROM nodes n LEFT JOIN LATERAL (SELECT sum(a.vcpus) vcpus, sum(a.memory_mib) mem, "   \
	"sum(a.disk_gib) disk, sum(a.gpus) gpus, count(*) FILTER (WHERE a.owner_kind = "         \
	"'instance') instances FROM allocations a WHERE a.node_id = n.id AND a.released_at IS "  \
	"NULL) b ON true "

static Bc__Admin__V1__Capacity *capacity(rpc_call *c, const PGresult *r, int i, int col)
{
	Bc__Admin__V1__Capacity *cap = rpc_new(c, &bc__admin__v1__capacity__descriptor);

	cap->vcpus = (uint32_t)db_i64(r, i, col);
	cap->memory_mib = (uint64_t)db_i64(r, i, col + 1);
	cap->disk_gib = (uint64_t)db_i64(r, i, col + 2);
	cap->gpus = (uint32_t)db_i64(r, i, col + 3);
	return cap;
}

static void labels(rpc_call *c, Bc__Admin__V1__Node *n, const PGresult *r, int i, int col)
{
	char **lines = NULL;
	size_t cnt = row_strv(c, r, i, col, &lines);

	n->labels = rpc_alloc(c, (cnt + 1) * sizeof(*n->labels));
	for (size_t k = 0; k < cnt; k++) {
		Bc__Admin__V1__Node__LabelsEntry *e =
			rpc_new(c, &bc__admin__v1__node__labels_entry__descriptor);
		char *tab = strchr(lines[k], '\t');
		e->key = lines[k];
		e->value = (char *)"";
		if (tab) {
			*tab = '\0';
			e->value = tab + 1;
		}
		n->labels[n->n_labels++] = e;
	}
}

static Bc__Admin__V1__Node *node_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Node *n = rpc_new(c, &bc__admin__v1__node__descriptor);

	n->id = row_str(c, r, i, 0);
	n->pool_id = row_str(c, r, i, 1);
	n->hostname = row_str(c, r, i, 2);
	n->address = row_str(c, r, i, 3);
	n->state = row_str(c, r, i, 4);
	labels(c, n, r, i, 5);
	n->capacity = capacity(c, r, i, 6);
	n->booked = capacity(c, r, i, 10);
	n->spec_generation = (uint64_t)db_i64(r, i, 14);
	n->applied_generation = (uint64_t)db_i64(r, i, 15);
	n->last_report_at = db_i64(r, i, 16);
	n->joined_at = db_i64(r, i, 17);
	n->n_capabilities = row_strv(c, r, i, 18, &n->capabilities);
	n->instances = (uint32_t)db_i64(r, i, 19);
	return n;
}

static int node_fetch(rpc_call *c, struct db *d, const char *id, Bc__Admin__V1__Node **ret,
		      bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "nodeId", "node", id)) < 0)
		return rc;
	dbp_str(&p, id);
	if ((rc = db_one(d, &r, "SELECT " NODE_COLS NODE_FROM "WHERE n.id = $1", &p, err,
			  "node %s not found", id)) < 0)
		return rc;
	*ret = node_from_row(c, r, 0);
	PQclear(r);
	return 0;
}

static int nodes_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__GetNodeRequest *q = (const void *)m;
	Bc__Admin__V1__Node *n = NULL;
	int r = node_fetch(c, ctl_db(c), q->node_id, &n, err);

	if (r == 0)
		*ret = &n->base;
	return r;
}

static int nodes_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__ListNodesRequest *q = (const void *)m;
	Bc__Admin__V1__ListNodesResponse *resp;
	struct dbp p = {0};
	PGresult *r = NULL;
	int limit = q->limit ? q->limit : 100, rc;

	if (q->limit < 0 || q->limit > 500)
		return invalid(err, "limit", "limit must be between 1 and 500");
	if (*q->pool_id && (rc = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return rc;
	if (*q->cursor && (rc = check_id(err, "cursor", "node", q->cursor)) < 0)
		return rc;
	dbp_str(&p, q->pool_id);
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	rc = db_exec(ctl_db(c), &r, "SELECT " NODE_COLS NODE_FROM "WHERE ($1 = '' OR n.pool_id = $1) "
		     "AND n.id > $2 ORDER BY n.id LIMIT $3", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_nodes_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[resp->n_items++] = node_from_row(c, r, i);
	if ((int)resp->n_items == limit)
		resp->cursor = resp->items[limit - 1]->id;
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

static int nodes_join_token(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			    bc_error *err)
{
	const Bc__Admin__V1__CreateJoinTokenRequest *q = (const void *)m;
	Bc__Admin__V1__JoinToken *t;
	unsigned char secret[24];
	char id[64], hex[49], hash[65];
	struct dbp p = {0};
	PGresult *r = NULL;
	int64_t ttl = q->ttl_seconds ? q->ttl_seconds : JOIN_TTL_DEFAULT;
	int rc;

	if ((rc = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return rc;
	if (ttl < 60 || ttl > JOIN_TTL_MAX)
		return invalid(err, "ttlSeconds", "ttlSeconds must be between 60 and %d", JOIN_TTL_MAX);
	if (random_bytes(secret, sizeof(secret)) < 0)
		return bc_error_set(err, BC_INTERNAL, "no randomness");
	hex_encode(secret, sizeof(secret), hex);
	sha256_hex(hex, strlen(hex), hash);
	id_new("jt", id, sizeof(id));
	dbp_str(&p, id);
	dbp_str(&p, q->pool_id);
	dbp_str(&p, hash);
	dbp_i64(&p, ttl);
	dbp_str(&p, ctl_principal(c)->id);
	if ((rc = db_one(ctl_db(c), &r, "INSERT INTO join_tokens (id, pool_id, secret_hash, expires_at, "
		     "created_by) SELECT $1, id, $3, now() + make_interval(secs => $4), $5 FROM pools "
		     "WHERE id = $2 AND deleted_at IS NULL RETURNING " MS("expires_at"), &p, err,
			  "pool %s not found", q->pool_id)) < 0)
		return rc;
	t = rpc_new(c, &bc__admin__v1__join_token__descriptor);
	t->id = rpc_strdup(c, id);
	t->pool_id = rpc_strdup(c, q->pool_id);
	t->expires_at = db_i64(r, 0, 0);
	t->token = rpc_alloc(c, 128);
	snprintf(t->token, 128, "bcjt_%s.%s", id + 3, hex);
	OPENSSL_cleanse(secret, sizeof(secret));
	PQclear(r);
	*ret = &t->base;
	log_info("join token %s: created for pool %s", id, q->pool_id);
	return 0;
}

struct retire {
	const char *id;
};

static int retire_tx(struct db *d, void *arg, bc_error *err)
{
	struct retire *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	rc = db_exec(d, &r, "UPDATE nodes SET state = 'retired', retired_at = now() WHERE id = $1 "
		     "AND state <> 'retired' RETURNING id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1)
		rc = nodes_abandon(d, a->id, "node retired");
	PQclear(r);
	/* a retired node opens no spec stream again to take them */
	if (rc == 0)
		rc = db_exec(d, NULL, "DELETE FROM node_spec_changes WHERE node_id = $1", &p);
	if (rc == 0) {
		char subject[96];
		snprintf(subject, sizeof(subject), "node/%s", a->id);
		rc = event_publish(d, "node.retired", subject, NULL, NULL);
	}
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int nodes_retire(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	const Bc__Admin__V1__RetireNodeRequest *q = (const void *)m;
	Bc__Admin__V1__Node *n = NULL;
	struct retire a = {.id = q->node_id};
	int r;

	if ((r = node_fetch(c, ctl_db(c), q->node_id, &n, err)) < 0)
		return r;
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", retire_tx, &a, err)) < 0)
		return r;
	if ((r = node_fetch(c, ctl_db(c), q->node_id, &n, err)) < 0)
		return r;
	log_info("node %s: retired", q->node_id);
	*ret = &n->base;
	return 0;
}

#define U(name, f) {name, RPC_UNARY, {.unary = f}}

int admin_register(rpc_server *s)
{
	static const struct rpc_handler nodes[] = {
		U("CreateJoinToken", nodes_join_token), U("Get", nodes_get), U("List", nodes_list),
		U("Retire", nodes_retire)};
	int r = admin_catalog_register(s);

	return r < 0 ? r : rpc_server_add_service(s, &bc__admin__v1__nodes__descriptor, nodes, 4);
}
