/* node_place.c: where an instance runs and what it holds there. Placement
 * books vCPUs, memory, disk and GPUs on a ready node of the pool that has
 * room and carries the required labels, under the node's row lock so two
 * replicas never overbook one node; IPAM leases an address and a MAC; a
 * finished deletion releases both. Everything runs in the caller's
 * transaction and bumps the affected node's spec generation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "event_data.h"
#include "instances.h"
#include "ipam.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "sealed.h"
#include "util.h"
#include "volume_attach.h"

#define FREE_SUMS                                                                          \
	" LEFT JOIN LATERAL (SELECT coalesce(sum(a.vcpus), 0) v, coalesce(sum(a.memory_mib), 0) " \
	"m, coalesce(sum(a.disk_gib), 0) dk, coalesce(sum(a.gpus), 0) g FROM allocations a "    \
	"WHERE a.node_id = n.id AND a.released_at IS NULL) b ON true "
#define FITS                                                                               \
	" AND n.cap_vcpus - b.v >= $4 AND n.cap_memory_mib - b.m >= $5 AND n.cap_disk_gib - "  \
	"b.dk >= $6 AND n.cap_gpus - b.g >= $7 "

static char *lines(const char *const *v)
{
	size_t len = 1;
	char *s, *p;

	for (size_t i = 0; v && v[i]; i++)
		len += strlen(v[i]) + 1;
	s = p = xmalloc(len);
	*p = '\0';
	for (size_t i = 0; v && v[i]; i++)
		p += sprintf(p, "%s%s", i ? "\n" : "", v[i]);
	return s;
}

static void shape_params(struct dbp *p, const struct place_req *q, const char *labels,
			 const char *first)
{
	dbp_str(p, first);
	dbp_str(p, labels);
	dbp_str(p, q->instance_id);
	dbp_i64(p, q->vcpus);
	dbp_i64(p, q->memory_mib);
	dbp_i64(p, q->disk_gib);
	dbp_i64(p, q->gpus);
	dbp_str(p, q->cpu_model ? q->cpu_model : "");
}
/* shape_params' $8: a memory restore's CPU model (PLACE_CPU_MODEL) */
#define PLACE_CPU_MODEL " AND ($8 = '' OR n.labels->>'" PLACE_CPU_MODEL_LABEL "' = $8) "

/* Lock one candidate and book on it if it still fits. 1 booked, 0 not. */
static int try_node(struct db *d, const struct place_req *q, const char *node, const char *labels)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, fits;

	shape_params(&p, q, labels, node);
	rc = db_exec(d, &r, "SELECT n.id FROM nodes n" FREE_SUMS "WHERE n.id = (SELECT id FROM nodes "
		     "WHERE id = $1 AND state = 'ready' FOR UPDATE) AND n.labels ?& "
		     "string_to_array($2, E'\\n') AND length($3) > 0" PLACE_CPU_MODEL FITS, &p);
	if (rc < 0)
		return rc;
	fits = PQntuples(r) == 1;
	PQclear(r);
	if (!fits)
		return 0;
	p.n = 0;
	dbp_str(&p, node);
	dbp_str(&p, q->instance_id);
	dbp_str(&p, q->tenant_id);
	dbp_i64(&p, q->vcpus);
	dbp_i64(&p, q->memory_mib);
	dbp_i64(&p, q->disk_gib);
	dbp_i64(&p, q->gpus);
	rc = db_exec(d, NULL, "INSERT INTO allocations (node_id, owner_kind, owner_id, tenant_id, "
		     "vcpus, memory_mib, disk_gib, gpus) VALUES ($1, 'instance', $2, $3, $4, $5, $6, "
		     "$7)", &p);
	if (rc < 0)
		return rc;
	p.n = 0;
	dbp_str(&p, node);
	dbp_str(&p, q->instance_id);
	rc = db_exec(d, NULL, "UPDATE instances SET node_id = $1, reason = '', guest_ready_at = NULL, "
		     "updated_at = now() WHERE id = $2", &p);
	if (rc == 0)
		rc = spec_bump_instance(d, node, q->instance_id);
	return rc < 0 ? rc : 1;
}

int place_instance(struct db *d, const struct place_req *q, char **ret_node, bc_error *err)
{
	_cleanup_free_ char *labels = lines(q->labels);
	struct dbp p = {0};
	PGresult *r = NULL;
	unsigned int start = 0;
	int rc, n;

	*ret_node = NULL;
	shape_params(&p, q, labels, q->pool_id);
	dbp_str(&p, q->only_node ? q->only_node : "");
	rc = db_exec(d, &r, "SELECT n.id FROM nodes n" FREE_SUMS "WHERE n.pool_id = $1 AND n.state = "
		     "'ready' AND n.labels ?& string_to_array($2, E'\\n') AND NOT (n.id = ANY ("
		     "SELECT unnest(refused_nodes) FROM instances WHERE id = $3)) AND ($9 = '' OR "
		     "n.id = $9)" PLACE_CPU_MODEL FITS
		     "ORDER BY n.cap_memory_mib - b.m DESC, n.id LIMIT 4", &p);
	if (rc < 0)
		return db_fail(err, rc);
	n = PQntuples(r);
	random_bytes(&start, sizeof(start));
	for (int k = 0; k < n && !*ret_node; k++) {
		/* start at a random one of the best few so concurrent creates
		 * do not all queue on the same node's lock */
		const char *node = db_val(r, (int)((start + (unsigned)k) % (unsigned)n), 0);
		rc = try_node(d, q, node, labels);
		if (rc < 0) {
			PQclear(r);
			return db_fail(err, rc);
		}
		if (rc == 1)
			*ret_node = xstrdup(node);
	}
	PQclear(r);
	if (!*ret_node) {
		p.n = 0;
		dbp_str(&p, q->instance_id);
		dbp_str(&p, q->only_node ? q->only_node : "");
		dbp_str(&p, labels);
		rc = db_exec(d, NULL, "UPDATE instances SET reason = 'Unschedulable: ' || CASE WHEN "
			     "$2 <> '' THEN 'its volumes'' host ' || $2 || ' is not ready, has no room "
			     "or lacks ' || replace($3, E'\\n', ', ') ELSE 'no node of the pool has room' "
			     "|| CASE WHEN $3 <> '' THEN ' and carries ' || replace($3, E'\\n', ', ') ELSE "
			     "'' END END || CASE WHEN cardinality(refused_nodes) > 0 THEN ' that "
			     "has not refused it (' || array_to_string(refused_nodes, ', ') || ')' "
			     "ELSE '' END, updated_at = now() WHERE id = $1", &p);
		if (rc < 0)
			return db_fail(err, rc);
	}
	return 0;
}

/* The columns of place_pending's SELECT. */
enum {
	PP_TENANT, PP_POOL, PP_VCPUS, PP_MEMORY_MIB, PP_DISK_GIB, PP_GPUS, PP_NETWORK_POLICY,
	PP_SSH_HOST_ONLY, PP_SANDBOX_ID, PP_WARM_TEMPLATE_ID, PP_CPU_MODEL, PP_VOLUMES_NODE,
	PP_NEEDS_IDENTITY
};

int place_pending(struct db *d, const char *id, char **ret_node, bc_error *err)
{
	const char *labels[5] = {NULL, NULL, NULL, NULL, NULL};
	struct place_req q;
	size_t nl = 0;
	char subject[96];
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	*ret_node = NULL;
	dbp_str(&p, id);
	rc = db_exec(d, &r, "SELECT tenant_id, pool_id, vcpus, memory_mib, disk_gib, gpus, "
		     "network_policy, ssh_from_host_only, sandbox_id, warm_template_id, coalesce(("
		     "SELECT s.cpu_model FROM sandbox_snapshots s WHERE s.id = restore_snapshot_id "
		     "AND s.include_memory), ''), "
		     "coalesce((SELECT min(v.node_id) FROM instance_volumes iv JOIN volumes v ON "
		     "v.id = iv.volume_id WHERE iv.instance_id = instances.id), ''), needs_identity FROM "
		     "instances WHERE id = $1 AND node_id IS "
		     "NULL AND desired_state <> 'deleted' AND state = 'provisioning' FOR UPDATE SKIP "
		     "LOCKED", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return 0;
	}
	if (strcmp(db_val(r, 0, PP_NETWORK_POLICY), "egress") != 0)
		labels[nl++] = CAP_NETWORK_POLICY;
	if (db_bool(r, 0, PP_SSH_HOST_ONLY))
		labels[nl++] = CAP_SSH_HOST_ONLY;
	if (*db_val(r, 0, PP_VOLUMES_NODE))
		labels[nl++] = CAP_INSTANCE_VOLUMES;
	if (db_bool(r, 0, PP_NEEDS_IDENTITY))
		labels[nl++] = CAP_IDENTITY;
	q = (struct place_req){.instance_id = id, .tenant_id = db_val(r, 0, PP_TENANT),
			       .pool_id = db_val(r, 0, PP_POOL), .vcpus = (int)db_i64(r, 0, PP_VCPUS),
			       .memory_mib = db_i64(r, 0, PP_MEMORY_MIB),
			       .disk_gib = db_i64(r, 0, PP_DISK_GIB),
			       .gpus = (int)db_i64(r, 0, PP_GPUS), .labels = labels,
			       .cpu_model = db_val(r, 0, PP_CPU_MODEL),
			       .only_node = db_val(r, 0, PP_VOLUMES_NODE)};
	rc = place_instance(d, &q, ret_node, err);
	if (rc == 0 && *ret_node) {
		snprintf(subject, sizeof(subject), "instance/%s", id);
		rc = evd_instance("instance.placed", &(struct evd_instance){.node_id = *ret_node,
				  .sandbox_id = db_val(r, 0, PP_SANDBOX_ID),
				  .warm_template_id = db_val(r, 0, PP_WARM_TEMPLATE_ID)},
				  &data);
		if (rc == 0)
			rc = event_publish(d, "instance.placed", subject, q.tenant_id, data);
		if (rc < 0)
			rc = db_fail(err, rc);
	}
	PQclear(r);
	return rc;
}

int release_placement(struct db *d, const char *id, bool address)
{
	struct dbp p = {0};
	int rc;

	dbp_str(&p, id);
	rc = db_exec(d, NULL, "UPDATE allocations SET released_at = now() WHERE owner_kind = "
		     "'instance' AND owner_id = $1 AND released_at IS NULL", &p);
	if (rc == 0 && address)
		rc = db_exec(d, NULL, "DELETE FROM ip_leases WHERE instance_id = $1", &p);
	return rc;
}

/* One try: the first free address in a window of the range (or the whole
 * range when window is 0), starting at a random offset so that concurrent
 * creates rarely race for the same address. ret_addr is "" when the window
 * is full or another transaction took the address first. */
static int lease_try(struct db *d, const char *pool, const char *inst, const char *mac,
		     const char *subnet, const char *gw, int64_t hosts, int64_t window,
		     char *ret_addr, size_t len)
{
	enum { LEASE_ADDRESS }; /* the RETURNING's one column */
	struct dbp p = {0};
	PGresult *r = NULL;
	uint64_t rnd = 0;
	int64_t first = 1, last = hosts;
	int rc;

	if (window > 0) {
		random_bytes(&rnd, sizeof(rnd));
		first = 1 + (int64_t)(rnd % (uint64_t)hosts);
		last = first + window - 1 < hosts ? first + window - 1 : hosts;
	}
	dbp_str(&p, pool);
	dbp_str(&p, subnet);
	dbp_str(&p, mac);
	dbp_str(&p, inst);
	dbp_i64(&p, first);
	dbp_i64(&p, last);
	dbp_str(&p, gw);
	dbp_i64(&p, ipam_quarantine());
	/* not an address released within the quarantine (migration 0010) */
	rc = db_exec(d, &r,
		     "INSERT INTO ip_leases (pool_id, address, mac, instance_id) SELECT $1, a, "
		     "$3::macaddr, $4 FROM (SELECT set_masklen($2::inet + g, 32) a FROM "
		     "generate_series($5::bigint, $6::bigint) g) c WHERE c.a <> $7::inet AND NOT "
		     "EXISTS (SELECT 1 FROM ip_leases l WHERE l.pool_id = $1 AND l.address = c.a) "
		     "AND NOT EXISTS (SELECT 1 FROM ip_quarantine q WHERE q.pool_id = $1 AND "
		     "q.address = c.a AND q.released_at > now() - make_interval(secs => $8)) "
		     "LIMIT 1 ON CONFLICT DO NOTHING RETURNING host(address)", &p);
	if (rc < 0)
		return rc;
	ret_addr[0] = '\0';
	if (PQntuples(r) == 1)
		snprintf(ret_addr, len, "%s", db_val(r, 0, LEASE_ADDRESS));
	PQclear(r);
	return 0;
}

#define LEASE_WINDOW 64

/* The columns of lease_nic's SELECT of the pool. */
enum { IP_SUBNET, IP_GATEWAY, IP_PREFIX };

int lease_nic(struct db *d, const char *pool_id, const char *instance_id, char mac[18],
	      bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	char addr[64];
	int rc = 0, prefix;

	dbp_str(&p, pool_id);
	rc = db_exec(d, &r, "SELECT ipam_subnet::text, host(ipam_gateway), masklen(ipam_subnet) "
		     "FROM pools WHERE id = $1", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1 || !db_val(r, 0, IP_SUBNET)) {
		PQclear(r);
		return 0; /* no IPAM: a MAC only */
	}
	prefix = (int)db_i64(r, 0, IP_PREFIX);
	addr[0] = '\0';
	/* random windows first; the whole range only when they were full */
	for (int attempt = 0; attempt < 8 && rc == 0 && !addr[0]; attempt++) {
		if (attempt == 4) {
			/* maybe the MAC is what collided: take another */
			ipam_random_mac(mac);
			p.n = 0;
			dbp_str(&p, mac);
			dbp_str(&p, instance_id);
			rc = db_exec(d, NULL, "UPDATE instances SET mac = $1::macaddr WHERE id = $2", &p);
		}
		if (rc == 0)
			rc = lease_try(d, pool_id, instance_id, mac, db_val(r, 0, IP_SUBNET),
				       db_val(r, 0, IP_GATEWAY),
				       (int64_t)ipam_hosts4(prefix), attempt < 6 ? LEASE_WINDOW : 0,
				       addr, sizeof(addr));
	}
	PQclear(r);
	if (rc < 0)
		return db_fail(err, rc);
	if (!addr[0]) {
		bc_error_set(err, BC_CAPACITY_UNAVAILABLE, "the pool's address range is exhausted");
		return bc_error_detail(err, "reason", "ipam-exhausted");
	}
	return 0;
}

/* spec_bump every node of a newline-separated list (NULL or "": none). */
static int bump_lines(struct db *d, const char *lines)
{
	_cleanup_free_ char *copy = xstrdup(lines ? lines : "");
	char *save = NULL;
	int rc = 0;

	for (char *n = strtok_r(copy, "\n", &save); n && rc >= 0; n = strtok_r(NULL, "\n", &save))
		rc = spec_bump(d, n);
	return rc;
}

/* The columns of finish_deletions's SELECT. */
enum { FD_COUNT, FD_USER_DATA_REFS, FD_NODES };

int finish_deletions(struct db *d, const char *node_id, const char *ids_lines)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, n;

	dbp_nstr(&p, node_id);
	dbp_nstr(&p, ids_lines);
	rc = db_exec(d, &r,
		     "WITH gone AS (UPDATE instances SET state = 'deleted', deleted_at = now(), "
		     "updated_at = now(), refused_at = NULL WHERE desired_state = 'deleted' AND "
		     "state <> 'deleted' AND ($1::text IS NULL OR node_id = $1::text) AND ($2::text "
		     "IS NULL OR id = ANY (string_to_array($2::text, E'\\n'))) RETURNING id, "
		     "tenant_id, sandbox_id, warm_template_id, concat_ws(E'\\n', user_data_ref, "
		     "identity_bootstrap_ref, identity_rebind_ref) AS user_data_ref, node_id), rel AS (UPDATE "
		     "allocations SET released_at = now() WHERE owner_kind = 'instance' AND "
		     "released_at IS NULL AND owner_id IN (SELECT id FROM gone) RETURNING 1), lz AS "
		     "(DELETE FROM ip_leases WHERE instance_id IN (SELECT id FROM gone) RETURNING 1), "
		     "ev AS (INSERT INTO events (type, subject, tenant_id, data) SELECT "
		     "'instance.deleted', 'instance/' || id, tenant_id, "
		     EVD_INSTANCE_OWNER_SQL("gone") " FROM gone RETURNING 1) SELECT (SELECT count(*) FROM gone) + 0 * (SELECT count(*) "
		     "FROM rel) + 0 * (SELECT count(*) FROM lz) + 0 * (SELECT count(*) FROM ev), "
		     "(SELECT string_agg(user_data_ref, E'\\n') FROM gone), (SELECT string_agg(DISTINCT "
		     "node_id, E'\\n') FROM gone)", &p);
	if (rc < 0)
		return rc;
	n = (int)db_i64(r, 0, FD_COUNT);
	/* the sealed user data goes with the instance */
	rc = sealed_delete(d, db_val(r, 0, FD_USER_DATA_REFS));
	/* a spec without the instance, so its host drops its taps and guards */
	if (rc >= 0 && n > 0)
		rc = bump_lines(d, db_val(r, 0, FD_NODES));
	PQclear(r);
	return rc < 0 ? rc : n;
}

int nodes_abandon(struct db *d, const char *node_id, const char *reason)
{
	struct dbp p = {0};
	int rc = finish_deletions(d, node_id, NULL);

	if (rc < 0)
		return rc;
	dbp_str(&p, node_id);
	dbp_str(&p, reason);
	return db_exec(d, NULL,
		       "WITH l AS (UPDATE instances SET state = 'lost', reason = $2, updated_at = "
		       "now(), refused_at = NULL WHERE node_id = $1 AND state NOT IN ('deleted', "
		       "'deleting', 'lost') "
		       "RETURNING id, tenant_id, sandbox_id, warm_template_id) INSERT INTO events "
		       "(type, subject, tenant_id, data) SELECT 'instance.lost', 'instance/' || id, "
		       "tenant_id, jsonb_build_object('nodeId', $1::text, 'reason', $2::text) || "
		       EVD_INSTANCE_OWNER_SQL("l") " FROM l", &p);
}
