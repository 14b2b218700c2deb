/* node_admin.c: the operator's view of hosts: join tokens (pool-scoped,
 * single use, expiring, stored as a hash and shown once), node get/list with
 * capacity and bookings, its capacity ceiling (what a report may claim at
 * most), and retirement (the node's certificate is refused from then on;
 * its instances are lost, its deletions finish). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/admin/v1/admin.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

#define JOIN_TTL_DEFAULT 3600
#define JOIN_TTL_MAX (7 * 86400)

#define NODE_COLS                                                                            \
	"n.id, n.pool_id, n.hostname, n.address, n.state, (SELECT string_agg(key || E'\\t' || " \
	"value, E'\\n' ORDER BY key) FROM jsonb_each_text(n.labels)), n.cap_vcpus, "            \
	"n.cap_memory_mib, n.cap_disk_gib, n.cap_gpus, coalesce(b.vcpus, 0), coalesce(b.mem, 0), " \
	"coalesce(b.disk, 0), coalesce(b.gpus, 0), n.spec_generation, n.applied_generation, "   \
	"coalesce(" MS("n.last_report_at") ", 0), " MS("n.joined_at")                           \
	", array_to_string(n.capabilities, E'\\n'), coalesce(b.instances, 0), n.max_vcpus, "    \
	"n.max_memory_mib, n.max_disk_gib, n.max_gpus, n.cert_serial, coalesce("              \
	MS("n.cert_not_after") ", 0), array_to_string(n.warnings, E'\\n')"
/* The columns of NODE_COLS, in order; each capacity is four columns
 * (enum cap_col). */
enum {
	NODE_COL_ID, NODE_COL_POOL, NODE_COL_HOSTNAME, NODE_COL_ADDRESS, NODE_COL_STATE,
	NODE_COL_LABELS, NODE_COL_CAPACITY, NODE_COL_BOOKED = NODE_COL_CAPACITY + 4,
	NODE_COL_SPEC_GEN = NODE_COL_BOOKED + 4, NODE_COL_APPLIED_GEN, NODE_COL_LAST_REPORT,
	NODE_COL_JOINED, NODE_COL_CAPABILITIES, NODE_COL_INSTANCES, NODE_COL_CEILING,
	NODE_COL_CERT_SERIAL = NODE_COL_CEILING + 4, NODE_COL_CERT_EXPIRES, NODE_COL_WARNINGS
};
enum cap_col { CAP_VCPUS, CAP_MEMORY_MIB, CAP_DISK_GIB, CAP_GPUS };
#define NODE_FROM                                                                            \
	" FROM nodes n LEFT JOIN LATERAL (SELECT sum(a.vcpus) vcpus, sum(a.memory_mib) mem, "   \
	"sum(a.disk_gib) disk, sum(a.gpus) gpus, count(*) FILTER (WHERE a.owner_kind = "         \
	"'instance') instances FROM allocations a WHERE a.node_id = n.id AND a.released_at IS "  \
	"NULL) b ON true "

static Bc__Admin__V1__Capacity *capacity(rpc_call *c, const PGresult *r, int i, int col)
{
	Bc__Admin__V1__Capacity *cap = rpc_new(c, &bc__admin__v1__capacity__descriptor);

	cap->vcpus = (uint32_t)db_i64(r, i, col + CAP_VCPUS);
	cap->memory_mib = (uint64_t)db_i64(r, i, col + CAP_MEMORY_MIB);
	cap->disk_gib = (uint64_t)db_i64(r, i, col + CAP_DISK_GIB);
	cap->gpus = (uint32_t)db_i64(r, i, col + CAP_GPUS);
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

	n->id = row_str(c, r, i, NODE_COL_ID);
	n->pool_id = row_str(c, r, i, NODE_COL_POOL);
	n->hostname = row_str(c, r, i, NODE_COL_HOSTNAME);
	n->address = row_str(c, r, i, NODE_COL_ADDRESS);
	n->state = row_str(c, r, i, NODE_COL_STATE);
	labels(c, n, r, i, NODE_COL_LABELS);
	n->capacity = capacity(c, r, i, NODE_COL_CAPACITY);
	n->booked = capacity(c, r, i, NODE_COL_BOOKED);
	n->spec_generation = (uint64_t)db_i64(r, i, NODE_COL_SPEC_GEN);
	n->applied_generation = (uint64_t)db_i64(r, i, NODE_COL_APPLIED_GEN);
	n->last_report_at = db_i64(r, i, NODE_COL_LAST_REPORT);
	n->joined_at = db_i64(r, i, NODE_COL_JOINED);
	n->n_capabilities = row_strv(c, r, i, NODE_COL_CAPABILITIES, &n->capabilities);
	n->instances = (uint32_t)db_i64(r, i, NODE_COL_INSTANCES);
	n->capacity_ceiling = capacity(c, r, i, NODE_COL_CEILING);
	n->cert_serial = row_str(c, r, i, NODE_COL_CERT_SERIAL);
	n->cert_expires_at = db_i64(r, i, NODE_COL_CERT_EXPIRES);
	n->n_warnings = row_strv(c, r, i, NODE_COL_WARNINGS, &n->warnings);
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
	t->expires_at = db_i64(r, 0, COL_ONLY);
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

int node_publish(struct db *d, const char *type, const char *node_id, const char *pool_id)
{
	_cleanup_free_ char *data = NULL;
	char subject[96];
	int rc = evd_node(type, &(struct evd_node){.pool_id = pool_id}, &data);

	if (rc < 0)
		return rc;
	snprintf(subject, sizeof(subject), "node/%s", node_id);
	return event_publish(d, type, subject, NULL, data);
}

/* The node becomes retired (once: node.retired is published by the call
 * that retires it, not by a repeat). */
static int retire_tx(struct db *d, void *arg, bc_error *err)
{
	enum { RET_POOL_ID };
	struct retire *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->id);
	rc = db_exec(d, &r, "UPDATE nodes SET state = 'retired', retired_at = now() WHERE id = $1 "
		     "AND state <> 'retired' RETURNING pool_id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1 && (rc = nodes_abandon(d, a->id, "node retired")) == 0)
		rc = node_publish(d, "node.retired", a->id, db_val(r, 0, RET_POOL_ID));
	PQclear(r);
	/* a retired node opens no spec stream again to take them */
	if (rc == 0)
		rc = db_exec(d, NULL, "DELETE FROM node_spec_changes WHERE node_id = $1", &p);
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

struct set_capacity {
	const Bc__Admin__V1__SetNodeCapacityRequest *q;
	char was[128], now[128];
};

/* The ceiling, each resource left 0 keeping its own; the capacity drops to
 * it at once (a report raises it again only up to the ceiling). */
/* The columns of set_capacity_tx's RETURNING: the ceiling before and after. */
enum { CEIL_WAS, CEIL_NOW };

static int set_capacity_tx(struct db *d, void *arg, bc_error *err)
{
	struct set_capacity *a = arg;
	const Bc__Admin__V1__Capacity *c = a->q->ceiling;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->q->node_id);
	dbp_u64(&p, c->vcpus);
	dbp_u64(&p, c->memory_mib);
	dbp_u64(&p, c->disk_gib);
	dbp_u64(&p, c->gpus);
	if ((rc = db_one(d, &r, "UPDATE nodes n SET max_vcpus = CASE WHEN $2::int > 0 THEN $2::int ELSE "
			 "n.max_vcpus END, max_memory_mib = CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE "
			 "n.max_memory_mib END, max_disk_gib = CASE WHEN $4::bigint > 0 THEN $4::bigint ELSE "
			 "n.max_disk_gib END, max_gpus = CASE WHEN $5::int > 0 THEN $5::int ELSE n.max_gpus END "
			 "FROM (SELECT id, max_vcpus, max_memory_mib, max_disk_gib, max_gpus FROM nodes "
			 "WHERE id = $1 FOR UPDATE) old WHERE n.id = old.id RETURNING old.max_vcpus || "
			 "'/' || old.max_memory_mib || '/' || old.max_disk_gib || '/' || old.max_gpus, "
			 "n.max_vcpus || '/' || n.max_memory_mib || '/' || n.max_disk_gib || '/' || "
			 "n.max_gpus", &p, err, "node %s not found", a->q->node_id)) < 0)
		return rc;
	snprintf(a->was, sizeof(a->was), "%s", db_val(r, 0, CEIL_WAS));
	snprintf(a->now, sizeof(a->now), "%s", db_val(r, 0, CEIL_NOW));
	PQclear(r);
	p.n = 1;
	rc = db_exec(d, NULL, "UPDATE nodes SET cap_vcpus = least(cap_vcpus, max_vcpus), "
		     "cap_memory_mib = least(cap_memory_mib, max_memory_mib), cap_disk_gib = "
		     "least(cap_disk_gib, max_disk_gib), cap_gpus = least(cap_gpus, max_gpus) WHERE "
		     "id = $1", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int nodes_set_capacity(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			      bc_error *err)
{
	const Bc__Admin__V1__SetNodeCapacityRequest *q = (const void *)m;
	const Bc__Admin__V1__Capacity *cap = q->ceiling;
	struct set_capacity a = {.q = q};
	Bc__Admin__V1__Node *n = NULL;
	int r;

	if ((r = check_id(err, "nodeId", "node", q->node_id)) < 0)
		return r;
	if (!cap || (!cap->vcpus && !cap->memory_mib && !cap->disk_gib && !cap->gpus))
		return invalid(err, "ceiling", "ceiling must set at least one resource");
	if (cap->vcpus > 65536 || cap->gpus > 1024 || cap->memory_mib > (1ull << 40) ||
	    cap->disk_gib > (1ull << 30))
		return invalid(err, "ceiling", "ceiling is out of range");
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", set_capacity_tx, &a, err)) < 0)
		return r;
	log_info("node %s: capacity ceiling %s vCPU/MiB/GiB/GPU (was %s), set by %s", q->node_id,
		 a.now, a.was, ctl_principal(c)->id);
	if ((r = node_fetch(c, ctl_db(c), q->node_id, &n, err)) < 0)
		return r;
	*ret = &n->base;
	return 0;
}

#define U(name, f) {name, RPC_UNARY, {.unary = f}}

const struct rpc_handler *node_admin_handlers(size_t *ret_n)
{
	static const struct rpc_handler nodes[] = {
		U("CreateJoinToken", nodes_join_token), U("Get", nodes_get), U("List", nodes_list),
		U("Retire", nodes_retire), U("SetCapacity", nodes_set_capacity)};

	*ret_n = ARRAY_SIZE(nodes);
	return nodes;
}
