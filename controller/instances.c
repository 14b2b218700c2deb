/* instances.c: the Instances API (Create, Get, List, Delete). A create is
 * validated completely before anything is written, then in one transaction
 * inserts the instance, leases its NIC, books capacity on a node (or leaves
 * it Unschedulable), publishes instance.created, records its idempotency key
 * and bumps the node's spec so the agent hears of it at once. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/instances.pb-c.h"
#include "bootdata.h"
#include "db.h"
#include "event_data.h"
#include "idem.h"
#include "instances.h"
#include "volume_attach.h"
#include "ipam.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "quota.h"
#include "rowmsg.h"
#include "sealed.h"
#include "sshcert.h"
#include "util.h"
#include "validate.h"
#include "waiter.h"
#include "watch.h"

#define WAIT_MAX_MS 30000
#define SSH_KEYS_MAX BOOTDATA_KEYS_MAX

#define INST_COLS                                                                          \
	"i.id, i.tenant_id, i.pool_id, coalesce(i.node_id, ''), i.flavor_name, i.image_id, "  \
	"i.state, i.desired_state, i.reason, i.vcpus, i.memory_mib, i.disk_gib, i.gpus, "     \
	"i.network_policy, coalesce(i.sandbox_id, ''), coalesce(i.warm_template_id, ''), "    \
	MS("i.created_at") ", " MS("i.updated_at") ", coalesce(" MS("i.deleted_at") ", 0), " \
	"i.created_by, array_to_string(i.ssh_keys, E'\\n'), coalesce(i.mac::text, ''), "      \
	"coalesce((SELECT host(l.address) FROM ip_leases l WHERE l.instance_id = i.id LIMIT 1), " \
	"''), coalesce((SELECT p.ipam_subnet6::text FROM pools p WHERE p.id = i.pool_id), ''), " \
	"(SELECT a.agent_id FROM authz_resources a WHERE a.type = 'compute-instance' AND a.id = i.id), " \
	"coalesce(" MS("i.guest_ready_at") ", 0)"
/* The columns of INST_COLS, in its order: the two must stay in step. */
enum {
	INST_ID, INST_TENANT_ID, INST_POOL_ID, INST_NODE_ID, INST_FLAVOR, INST_IMAGE_ID,
	INST_STATE, INST_DESIRED_STATE, INST_REASON, INST_VCPUS, INST_MEMORY_MIB, INST_DISK_GIB,
	INST_GPUS, INST_NETWORK_POLICY, INST_SANDBOX_ID, INST_WARM_TEMPLATE_ID, INST_CREATED_AT,
	INST_UPDATED_AT, INST_DELETED_AT, INST_CREATED_BY, INST_SSH_KEYS, INST_MAC, INST_IPV4,
	INST_SUBNET6, INST_AGENT, INST_GUEST_READY_AT, INST_NCOLS
};
COLS_CHECK(INST_COLS, INST_NCOLS)
/* drafts are being decided: nobody sees them */
#define INST_NOT_DRAFT                                                                     \
	" AND NOT EXISTS (SELECT 1 FROM authz_resources a WHERE a.type = 'compute-instance' AND " \
	"a.id = i.id AND a.draft)"

static Bc__Compute__V1__Nic *nic_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__Nic *n = rpc_new(c, &bc__compute__v1__nic__descriptor);
	const char *subnet6 = db_val(r, i, INST_SUBNET6);
	unsigned char net[16];
	char tap[16];
	int prefix;

	ipam_tap_name(db_val(r, i, INST_ID), 0, tap);
	n->name = rpc_strdup(c, tap);
	n->mac = row_str(c, r, i, INST_MAC);
	n->ipv4 = row_str(c, r, i, INST_IPV4);
	n->ipv6 = (char *)"";
	if (subnet6 && *subnet6 && *n->mac && ipam_parse_cidr6(subnet6, net, &prefix) == 0) {
		n->ipv6 = rpc_alloc(c, 64);
		if (ipam_eui64(net, n->mac, n->ipv6, 64) < 0)
			n->ipv6 = (char *)"";
	}
	return n;
}

static Bc__Compute__V1__Instance *inst_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__Instance *x = rpc_new(c, &bc__compute__v1__instance__descriptor);

	x->id = row_str(c, r, i, INST_ID);
	x->tenant_id = row_str(c, r, i, INST_TENANT_ID);
	x->pool_id = row_str(c, r, i, INST_POOL_ID);
	x->node_id = row_str(c, r, i, INST_NODE_ID);
	x->flavor = row_str(c, r, i, INST_FLAVOR);
	x->image_id = row_str(c, r, i, INST_IMAGE_ID);
	x->state = row_str(c, r, i, INST_STATE);
	x->desired_state = row_str(c, r, i, INST_DESIRED_STATE);
	x->reason = row_str(c, r, i, INST_REASON);
	x->vcpus = (uint32_t)db_i64(r, i, INST_VCPUS);
	x->memory_mib = (uint64_t)db_i64(r, i, INST_MEMORY_MIB);
	x->disk_gib = (uint64_t)db_i64(r, i, INST_DISK_GIB);
	x->gpus = (uint32_t)db_i64(r, i, INST_GPUS);
	x->network_policy = row_str(c, r, i, INST_NETWORK_POLICY);
	x->sandbox_id = row_str(c, r, i, INST_SANDBOX_ID);
	x->warm_template_id = row_str(c, r, i, INST_WARM_TEMPLATE_ID);
	x->created_at = db_i64(r, i, INST_CREATED_AT);
	x->updated_at = db_i64(r, i, INST_UPDATED_AT);
	x->deleted_at = db_i64(r, i, INST_DELETED_AT);
	x->created_by = row_str(c, r, i, INST_CREATED_BY);
	x->n_ssh_keys = row_strv(c, r, i, INST_SSH_KEYS, &x->ssh_keys);
	x->guest_ready_at = db_i64(r, i, INST_GUEST_READY_AT);
	if (*db_val(r, i, INST_MAC) || *db_val(r, i, INST_IPV4)) {
		x->nics = rpc_alloc(c, sizeof(*x->nics));
		x->nics[0] = nic_from_row(c, r, i);
		x->n_nics = 1;
	}
	return x;
}

/* What a decision sees of an instance: its shape, pool and creator. */
static void inst_target(const Bc__Compute__V1__Instance *x, const char *agent,
			struct authz_target *t, char parent[128])
{
	char num[32];

	*t = (struct authz_target){.type = "compute-instance", .id = x->id,
				   .tenant_id = x->tenant_id, .parent = parent,
				   .agent_id = agent && *agent ? agent : NULL};
	snprintf(parent, 128, "compute-pool/%s", x->pool_id);
	authz_attr(t, "poolId", x->pool_id);
	authz_attr(t, "flavor", x->flavor);
	authz_attr(t, "imageId", x->image_id);
	authz_attr(t, "networkPolicy", x->network_policy);
	authz_attr(t, "createdBy", x->created_by);
	snprintf(num, sizeof(num), "%u", x->vcpus);
	authz_attr(t, "vcpus", num);
	snprintf(num, sizeof(num), "%" PRIu64, x->memory_mib);
	authz_attr(t, "memoryMib", num);
	snprintf(num, sizeof(num), "%" PRIu64, x->disk_gib);
	authz_attr(t, "diskGiB", num);
	snprintf(num, sizeof(num), "%u", x->gpus);
	authz_attr(t, "gpus", num);
}

int inst_decide(rpc_call *c, const char *action, const Bc__Compute__V1__Instance *x,
		       const char *agent, bc_error *err)
{
	struct authz_target t;
	char parent[128];

	inst_target(x, agent, &t, parent);
	return authz_decide(c, ctl_db(c), action, &t, err);
}

int inst_fetch(rpc_call *c, const char *tenant, const char *id,
		      Bc__Compute__V1__Instance **ret, char *ret_agent, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " INST_COLS " FROM instances i WHERE i.id = $1 AND "
		     "i.tenant_id = $2" INST_NOT_DRAFT, &p, err,
			  "instance %s not found", id)) < 0)
		return rc;
	*ret = inst_from_row(c, r, 0);
	if (ret_agent)
		snprintf(ret_agent, 64, "%s",
			 db_val(r, 0, INST_AGENT) ? db_val(r, 0, INST_AGENT) : "");
	PQclear(r);
	return 0;
}

/* ----------------------------------------------------------------- create */

static bool valid_ssh_key(const char *k)
{
	static const char *const types[] = {"ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-nistp256 ",
					    "ecdsa-sha2-nistp384 ", "ecdsa-sha2-nistp521 ",
					    "sk-ssh-ed25519@openssh.com ",
					    "sk-ecdsa-sha2-nistp256@openssh.com "};
	bool ok = false;

	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		ok |= strncmp(k, types[i], strlen(types[i])) == 0;
	return ok && str_is_printable(k, 8192);
}

static int check_create(const Bc__Compute__V1__CreateInstanceRequest *q, bc_error *err)
{
	int r;

	if ((r = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return r;
	if (!*q->flavor || !str_is_printable(q->flavor, 64))
		return invalid(err, "flavor", "flavor must be a flavor id or name");
	if (!*q->image_id || !str_is_printable(q->image_id, 64))
		return invalid(err, "imageId", "imageId must be an image id or name");
	if (q->n_ssh_keys > SSH_KEYS_MAX)
		return invalid(err, "sshKeys", "at most %d sshKeys", SSH_KEYS_MAX);
	for (size_t i = 0; i < q->n_ssh_keys; i++)
		if (!valid_ssh_key(q->ssh_keys[i]))
			return invalid(err, "sshKeys", "sshKeys[%zu] is not an OpenSSH public key "
				       "line", i);
	if ((r = bootdata_check_user(q->user_data, err)) < 0)
		return r;
	if (*q->network_policy && strcmp(q->network_policy, "egress") &&
	    strcmp(q->network_policy, "private") && strcmp(q->network_policy, "none"))
		return invalid(err, "networkPolicy", "networkPolicy must be egress, private or none");
	if (q->wait && (q->wait->timeout_ms < 0 || q->wait->timeout_ms > WAIT_MAX_MS))
		return invalid(err, "wait.timeoutMs", "wait.timeoutMs must be between 0 and %d",
			       WAIT_MAX_MS);
	return idem_check_key(q->idempotency_key, err);
}

struct create {
	rpc_call *call;
	const Bc__Compute__V1__CreateInstanceRequest *q;
	const char *tenant;
	struct idem k;
	struct inst_new n;
	bool reused;
};

/* Pool visible to the tenant, its IPAM if the policy needs it. */
static int resolve_pool(struct db *d, struct inst_new *n, char **ret_runtime, bc_error *err)
{
	enum { POOL_RUNTIME, POOL_HAS_RANGE, POOL_GATEWAY };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, n->pool_id);
	dbp_str(&p, n->tenant);
	rc = db_exec(d, &r, "SELECT runtime, ipam_subnet IS NOT NULL, CASE WHEN family(ipam_gateway) "
		     "= 4 THEN host(ipam_gateway) ELSE '' END FROM pools WHERE id = $1 AND "
		     "deleted_at IS NULL AND (cardinality(tenant_ids) = 0 OR $2 = ANY (tenant_ids))",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return bc_error_set(err, BC_NOT_FOUND, "pool %s not found", n->pool_id);
	}
	if (strcmp(n->policy, "egress") != 0 && !db_bool(r, 0, POOL_HAS_RANGE)) {
		PQclear(r);
		bc_error_set(err, BC_INVALID_STATE, "network policy %s needs the pool's IP range, and "
			     "pool %s has none", n->policy, n->pool_id);
		return bc_error_detail(err, "reason", "pool-without-ip-range");
	}
	*ret_runtime = xstrdup(db_val(r, 0, POOL_RUNTIME));
	snprintf(n->pool_gateway, sizeof(n->pool_gateway), "%s", db_val(r, 0, POOL_GATEWAY));
	PQclear(r);
	return 0;
}

/* Render the instance's user data and seal it (sealed.h) before the row
 * that names it is written; a refused create rolls both back. With
 * certifyHostKey (n->host_ca), a fresh host key and its certificate for
 * this instance go into it: the private key exists only in the sealed
 * blob, wiped here once sealed. */
static int seal_user_data(struct db *d, struct inst_new *n, char ref[SEALED_REF_MAX],
			  bc_error *err)
{
	struct bootdata_ssh_ca ca;
	struct bootdata_in in = {.instance_id = n->id, .ssh_keys = n->ssh_keys,
				 .n_ssh_keys = n->n_ssh_keys, .user_data = n->user_data,
				 .ssh_ca = n->ssh_ca, .env = n->env, .n_env = n->n_env,
				 .ready_signal = true, .ready_gateway = n->pool_gateway,
				 .volumes = n->volumes ? n->volumes->boot : NULL,
				 .n_volumes = n->volumes ? n->volumes->n : 0,
				 .identity_bootstrap = n->identity_bootstrap,
				 .identity_host = n->identity_host,
				 .sandbox_token = n->sandbox_token};
	char *key = NULL, *cert = NULL;
	int rc;

	n->host_cert_valid_before = 0;
	if (n->ssh_ca && n->host_ca) {
		ca = *n->ssh_ca;
		rc = bootdata_host_key_new(n->host_ca, n->id, (int64_t)time(NULL), &key, &cert,
					   &n->host_cert_valid_before);
		if (rc < 0)
			return bc_error_set(err, BC_INTERNAL, "instance %s: no host certificate: %s",
					    n->id, strerror(-rc));
		ca.host_key = key;
		ca.host_cert = cert;
		in.ssh_ca = &ca;
	}
	rc = bootdata_seal(d, &in, n->tenant, ref, err);
	sshcert_free_secret(key);
	free(cert);
	if (rc < 0)
		n->host_cert_valid_before = 0;
	return rc;
}

/* The principal a create acts for: the one it names, else the caller. */
static const struct principal *create_owner(rpc_call *c, const struct inst_new *n)
{
	return n->owner ? n->owner : ctl_principal(c);
}

/* A workload identity travels in its boot data (a cold sandbox's
 * bootstrap value) or comes from its host (a warm instance of a template
 * with identity): either way only a host running the attestation endpoint
 * can serve its guest. */
static bool inst_needs_identity(const struct inst_new *n)
{
	return (n->identity_bootstrap && *n->identity_bootstrap) || n->identity_host;
}

/* The shape insert_instance returns, in its RETURNING's order. */
enum { SHAPE_VCPUS, SHAPE_MEMORY_MIB, SHAPE_DISK_GIB, SHAPE_GPUS, SHAPE_FLAVOR, SHAPE_IMAGE_ID };

static int insert_instance(struct db *d, rpc_call *c, struct inst_new *n, PGresult **ret_shape,
			   bc_error *err)
{
	_cleanup_free_ char *keys = NULL;
	char ref[SEALED_REF_MAX];
	struct dbp p = {0};
	size_t len = 1;
	int rc;

	for (size_t i = 0; i < n->n_ssh_keys; i++)
		len += strlen(n->ssh_keys[i]) + 1;
	keys = xcalloc(1, len);
	for (size_t i = 0; i < n->n_ssh_keys; i++)
		strcat(strcat(keys, i ? "\n" : ""), n->ssh_keys[i]);
	id_new("inst", n->id, sizeof(n->id));
	ipam_random_mac(n->mac);
	if ((rc = seal_user_data(d, n, ref, err)) < 0)
		return rc;
	dbp_str(&p, n->id);
	dbp_str(&p, n->tenant);
	dbp_str(&p, n->pool_id);
	dbp_str(&p, n->flavor);
	dbp_str(&p, n->image_id);
	dbp_str(&p, n->policy);
	dbp_str(&p, keys);
	dbp_str(&p, ref);
	dbp_str(&p, create_owner(c, n)->id);
	dbp_str(&p, n->mac);
	dbp_nstr(&p, n->sandbox_id);
	dbp_bool(&p, n->ssh_from_host_only);
	dbp_nstr(&p, n->warm_template_id);
	if (n->warm_template_id)
		dbp_i64(&p, n->warm_instance_version);
	else
		dbp_nstr(&p, NULL);
	if (n->host_cert_valid_before)
		dbp_i64(&p, n->host_cert_valid_before);
	else
		dbp_nstr(&p, NULL);
	dbp_bool(&p, inst_needs_identity(n));
	rc = db_exec(d, ret_shape,
		     "INSERT INTO instances (id, tenant_id, pool_id, flavor_id, flavor_name, image_id, "
		     "vcpus, memory_mib, disk_gib, gpus, huge_pages, numa_node, pin_vcpus, "
		     "network_policy, ssh_keys, user_data_ref, created_by, mac, sandbox_id, "
		     "ssh_from_host_only, warm_template_id, warm_instance_version, host_certified, "
		     "host_cert_valid_before, needs_identity) SELECT $1, $2, $3, f.id, "
		     "f.name, im.id, f.vcpus, f.memory_mib, f.disk_gib, f.gpus, f.huge_pages, "
		     "f.numa_node, f.pin_vcpus, $6, coalesce(string_to_array(nullif($7, ''), E'\\n'), '{}'), $8, $9, "
		     "$10::macaddr, $11, $12, $13, $14::int, $15::bigint IS NOT NULL, to_timestamp($15::bigint), "
		     "$16 FROM flavors f, images im WHERE (f.id = $4 OR f.name = $4) AND f.deleted_at IS "
		     "NULL AND (im.id = $5 OR im.name = $5) AND im.deleted_at IS NULL "
		     "RETURNING vcpus, memory_mib, disk_gib, gpus, flavor_name, image_id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(*ret_shape) == 1)
		return 0;
	PQclear(*ret_shape);
	*ret_shape = NULL;
	/* say which of the two is unknown */
	p.n = 0;
	dbp_str(&p, n->flavor);
	rc = db_exec(d, ret_shape, "SELECT 1 FROM flavors WHERE (id = $1 OR name = $1) AND "
		     "deleted_at IS NULL", &p);
	if (rc < 0)
		return db_fail(err, rc);
	rc = PQntuples(*ret_shape);
	PQclear(*ret_shape);
	*ret_shape = NULL;
	if (rc == 0)
		return invalid(err, "flavor", "unknown flavor %s", n->flavor);
	return invalid(err, "imageId", "unknown image %s", n->image_id);
}

/* Draft, then decide: stage the instance's authorization row with the
 * requested shape, decide on it (unless the caller decided on its own
 * resource), then charge the quota and check the budget. Any refusal rolls
 * the whole create back. */
static int admit(struct db *d, rpc_call *c, const struct inst_new *n, const PGresult *shape,
		 bc_error *err)
{
	struct authz_target t = {.type = "compute-instance", .id = n->id, .tenant_id = n->tenant};
	char parent[128];
	int rc;

	snprintf(parent, sizeof(parent), "compute-pool/%s", n->pool_id);
	t.parent = parent;
	authz_attr(&t, "poolId", n->pool_id);
	authz_attr(&t, "flavor", n->flavor);
	authz_attr(&t, "imageId", n->image_id);
	authz_attr(&t, "networkPolicy", n->policy);
	authz_attr(&t, "createdBy", create_owner(c, n)->id);
	authz_attr(&t, "vcpus", db_val(shape, 0, SHAPE_VCPUS));
	authz_attr(&t, "memoryMib", db_val(shape, 0, SHAPE_MEMORY_MIB));
	authz_attr(&t, "diskGiB", db_val(shape, 0, SHAPE_DISK_GIB));
	authz_attr(&t, "gpus", db_val(shape, 0, SHAPE_GPUS));
	if (n->sandbox_id)
		authz_attr(&t, "sandboxId", n->sandbox_id);
	if (n->warm_template_id)
		authz_attr(&t, "warmTemplateId", n->warm_template_id);
	if ((rc = authz_stage_as(create_owner(c, n), d, &t, err)) < 0)
		return rc;
	if (n->decide_action &&
	    (rc = authz_decide_staged(c, d, n->decide_action, t.type, t.id, err)) < 0)
		return rc;
	if ((rc = quota_check(d, n->tenant, (int)db_i64(shape, 0, SHAPE_VCPUS),
			      db_i64(shape, 0, SHAPE_MEMORY_MIB), db_i64(shape, 0, SHAPE_DISK_GIB),
			      (int)db_i64(shape, 0, SHAPE_GPUS), err)) < 0)
		return rc;
	if (n->warm_template_id)
		return 0; /* the pool's budget rules, with their cache (warm.c) */
	return quota_budget(d, n->tenant, n->pool_id, err);
}

/* No new work in a tenant that is not active (suspended, being torn
 * down), whoever asks (the operator too): INVALID_STATE, reason
 * tenant-inactive. FOR SHARE: a state change waits for this create, or
 * this create sees it. */
static int tenant_active(struct db *d, const char *tenant, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, tenant);
	if ((rc = db_one(d, &r, "SELECT state FROM tenants WHERE id = $1 FOR SHARE", &p, err,
			 "tenant %s not found", tenant)) < 0)
		return rc;
	if (strcmp(db_val(r, 0, COL_ONLY), "active") == 0) {
		PQclear(r);
		return 0;
	}
	bc_error_set(err, BC_INVALID_STATE, "tenant %s is %s: no new work", tenant,
		     db_val(r, 0, COL_ONLY));
	bc_error_detail(err, "state", "%s", db_val(r, 0, COL_ONLY));
	PQclear(r);
	return bc_error_detail(err, "reason", "tenant-inactive");
}

int instance_create_tx(rpc_call *c, struct db *d, struct inst_new *n, bc_error *err)
{
	_cleanup_free_ char *runtime = NULL, *data = NULL;
	const char *labels[5] = {NULL, NULL, NULL, NULL, NULL};
	PGresult *shape = NULL;
	struct place_req pr;
	char subject[96];
	size_t nl = 0;
	int rc;

	n->node = NULL;
	if ((rc = tenant_active(d, n->tenant, err)) < 0 ||
	    (rc = resolve_pool(d, n, &runtime, err)) < 0 ||
	    (rc = insert_instance(d, c, n, &shape, err)) < 0)
		return rc;
	if ((rc = admit(d, c, n, shape, err)) < 0) {
		PQclear(shape);
		return rc;
	}
	pr = (struct place_req){.instance_id = n->id, .tenant_id = n->tenant,
				.pool_id = n->pool_id, .vcpus = (int)db_i64(shape, 0, SHAPE_VCPUS),
				.memory_mib = db_i64(shape, 0, SHAPE_MEMORY_MIB),
				.disk_gib = db_i64(shape, 0, SHAPE_DISK_GIB),
				.gpus = (int)db_i64(shape, 0, SHAPE_GPUS), .labels = labels,
				.cpu_model = n->restore_cpu_model};
	PQclear(shape);
	if (strcmp(n->policy, "egress") != 0)
		labels[nl++] = CAP_NETWORK_POLICY;
	if (n->ssh_from_host_only)
		labels[nl++] = CAP_SSH_HOST_ONLY;
	if (inst_needs_identity(n))
		labels[nl++] = CAP_IDENTITY;
	if (n->volumes && n->volumes->n > 0) {
		labels[nl++] = CAP_INSTANCE_VOLUMES;
		pr.only_node = n->volumes->node;
		if ((rc = va_attach_tx(d, n->id, n->volumes, err)) < 0)
			return rc;
	}
	if ((rc = lease_nic(d, n->pool_id, n->id, n->mac, err)) < 0 ||
	    (rc = authz_commit(d, "compute-instance", n->id, err)) < 0)
		return rc;
	/* placement last: the node's row lock is held only until commit */
	if ((rc = place_instance(d, &pr, &n->node, err)) < 0)
		return rc;
	if (!n->node && (rc = quota_unplaced(d, n->tenant, err)) < 0)
		return rc;
	snprintf(subject, sizeof(subject), "instance/%s", n->id);
	rc = evd_instance("instance.created", &(struct evd_instance){.pool_id = n->pool_id,
			  .node_id = n->node, .sandbox_id = n->sandbox_id,
			  .warm_template_id = n->warm_template_id}, &data);
	if (rc == 0)
		rc = event_publish(d, "instance.created", subject, n->tenant, data);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int create_tx(struct db *d, void *arg, bc_error *err)
{
	struct create *a = arg;
	_cleanup_free_ char *existing = NULL;
	int rc;

	a->reused = false;
	free(a->n.node);
	a->n.node = NULL;
	if ((rc = idem_lookup(d, &a->k, &existing, err)) < 0)
		return rc;
	if (existing) {
		snprintf(a->n.id, sizeof(a->n.id), "%s", existing);
		a->reused = true;
		return 0;
	}
	if ((rc = instance_create_tx(a->call, d, &a->n, err)) < 0)
		return rc;
	return idem_record(d, &a->k, a->n.id, err);
}

static bool unsettled(const char *state)
{
	return strcmp(state, "provisioning") == 0 || strcmp(state, "starting") == 0;
}

static bool inst_settled(const char *state)
{
	return !unsettled(state);
}

static ProtobufCMessage *inst_wait_answer(rpc_call *c, const PGresult *r, int i)
{
	return &inst_from_row(c, r, i)->base;
}

/* See instances.h. */
const struct waiter_kind inst_waiter_kind = {
	.noun = "instance",
	.sql = "SELECT " INST_COLS " FROM instances i WHERE i.id = ANY($1::text[])" INST_NOT_DRAFT,
	.state_col = INST_STATE,
	.settled = inst_settled,
	.answer = inst_wait_answer,
};

/* Re-read until the instance leaves provisioning/starting or time is up;
 * the last read is the answer either way. Over gRPC the create is handed
 * to the instances' waiter (waiter.c) and holds no worker. Otherwise (JSON/HTTP)
 * the wait holds a worker thread and its database connection, so at most
 * half the workers wait at once: past that a create answers with its first
 * read, as if its time had run out. The wait sleeps on the instance's key
 * in the watch registry: a host report through this controller that
 * changes its state wakes it at once (node_report.c); anything else is seen at
 * the next re-read, every 50 ms. */
static int wait_settled(rpc_call *c, const char *tenant, const char *id, int timeout_ms,
			Bc__Compute__V1__Instance **inst, bc_error *err)
{
	struct ctl_app *app = ctl_app(c);
	int64_t end = deadline_in(timeout_ms);
	struct watch_entry *e;
	uint64_t seen = 0;
	int r = 0;

	int cap = app->cfg.workers > 1 ? app->cfg.workers / 2 : 1;

	if (__atomic_add_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST) > cap) {
		__atomic_sub_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST);
		log_debug("instance %s: answering at once, %d creates already wait", id, cap);
		return 0;
	}
	e = watch_add(app->watches, id);
	while (!deadline_passed(end) && unsettled((*inst)->state)) {
		int64_t left = deadline_left(end);
		seen = watch_wait(app->watches, e, seen, (int)(left < 50 ? left : 50));
		if ((r = inst_fetch(c, tenant, id, inst, NULL, err)) < 0)
			break;
	}
	watch_remove(app->watches, e);
	__atomic_sub_fetch(&app->waiting, 1, __ATOMIC_SEQ_CST);
	return r;
}

static int inst_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__CreateInstanceRequest *q = (const void *)m;
	Bc__Compute__V1__CreateInstanceRequest h = *q;
	Bc__Compute__V1__Instance *inst = NULL;
	struct create a = {.call = c, .q = q};
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 || (r = check_create(q, err)) < 0)
		return r;
	a.n = (struct inst_new){.tenant = a.tenant, .pool_id = q->pool_id, .flavor = q->flavor,
				.image_id = q->image_id, .user_data = q->user_data,
				.policy = *q->network_policy ? q->network_policy : "egress",
				.ssh_keys = (const char *const *)q->ssh_keys,
				.n_ssh_keys = q->n_ssh_keys,
				.decide_action = "compute:instances:create"};
	h.idempotency_key = (char *)"";
	h.wait = NULL;
	h.tenant_id = (char *)a.tenant;
	a.k = (struct idem){.tenant_id = a.tenant, .caller_id = ctl_principal(c)->id,
			    .scope = "instances.create", .key = q->idempotency_key};
	idem_hash(&h.base, a.k.request_hash);
	r = db_tx(ctl_db(c), "READ COMMITTED", create_tx, &a, err);
	free(a.n.node);
	if (r < 0 || (r = inst_fetch(c, a.tenant, a.n.id, &inst, NULL, err)) < 0)
		return r;
	if (!a.reused)
		log_info("instance %s: created for tenant %s on %s", a.n.id, a.tenant,
			 *inst->node_id ? inst->node_id : "(unplaced)");
	if (q->wait && q->wait->timeout_ms > 0 && unsettled(inst->state)) {
		r = waiter_add(ctl_app(c)->inst_waiter, c, a.tenant, a.n.id, a.n.id,
			       q->wait->timeout_ms);
		if (r == RPC_DETACHED)
			return r; /* the waiter answers; c is no longer ours */
		if (r == -EOPNOTSUPP &&
		    (r = wait_settled(c, a.tenant, a.n.id, q->wait->timeout_ms, &inst, err)) < 0)
			return r;
	}
	*ret = &inst->base;
	return 0;
}

/* -------------------------------------------------------- get, list, delete */

static int inst_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__GetInstanceRequest *q = (const void *)m;
	Bc__Compute__V1__Instance *inst = NULL;
	const char *tenant;
	char agent[64];
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (r = check_id(err, "instanceId", "inst", q->instance_id)) < 0 ||
	    (r = inst_fetch(c, tenant, q->instance_id, &inst, agent, err)) < 0 ||
	    (r = inst_decide(c, "compute:instances:read", inst, agent, err)) < 0)
		return r;
	*ret = &inst->base;
	return 0;
}

static int inst_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Compute__V1__ListInstancesRequest *q = (const void *)m;
	Bc__Compute__V1__ListInstancesResponse *resp;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int limit = 0, rc;
	bool all = false;

	if ((rc = auth_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	if ((rc = check_page(err, q->limit, q->cursor, "inst", q->scope, &limit, &all)) < 0)
		return rc;
	if (*q->pool_id && (rc = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->pool_id);
	dbp_str(&p, q->cursor);
	dbp_bool(&p, q->deleted);
	dbp_i64(&p, limit);
	dbp_bool(&p, all);
	dbp_str(&p, ctl_principal(c)->id);
	/* mine: what the caller created, or (a user) what its agents created */
	rc = db_exec(ctl_db(c), &r, "SELECT " INST_COLS " FROM instances i WHERE i.tenant_id = $1 "
		     "AND ($2 = '' OR i.pool_id = $2) AND ($3 = '' OR i.id < $3) AND "
		     "i.warm_template_id IS NULL AND ($4 OR i.state <> 'deleted') AND ($6 OR "
		     "i.created_by = $7 OR EXISTS (SELECT 1 FROM authz_resources a WHERE a.type = "
		     "'compute-instance' AND a.id = i.id AND a.owner_id = $7 AND a.agent_id IS NULL))"
		     INST_NOT_DRAFT " ORDER BY i.id DESC LIMIT $5", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__compute__v1__list_instances_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		Bc__Compute__V1__Instance *x = inst_from_row(c, r, i);
		bc_error skip = {0};
		/* each item is checked; one the caller may not read is left out */
		if (inst_decide(c, "compute:instances:read", x, db_val(r, i, INST_AGENT),
				&skip) < 0) {
			if ((rc = list_left_out(&skip, err)) < 0) {
				PQclear(r);
				return rc;
			}
			continue;
		}
		resp->items[resp->n_items++] = x;
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, INST_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

int instance_managed(const char *id, const char *sandbox_id, const char *warm_template_id,
		     bc_error *err)
{
	if (sandbox_id && *sandbox_id)
		bc_error_set(err, BC_INVALID_STATE, "instance %s is managed by sandbox %s", id,
			     sandbox_id);
	else if (warm_template_id && *warm_template_id)
		bc_error_set(err, BC_INVALID_STATE, "instance %s is a warm instance of sandbox "
			     "template %s", id, warm_template_id);
	else
		return 0;
	return bc_error_detail(err, "reason", "sandbox-managed");
}

struct del {
	const char *tenant, *id;
	char *node;
};

static int delete_tx(struct db *d, void *arg, bc_error *err)
{
	enum { DEL_NODE_ID, DEL_STATE, DEL_DESIRED_STATE, DEL_SANDBOX_ID, DEL_WARM_TEMPLATE_ID };
	struct del *a = arg;
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	char subject[96];
	int rc;

	dbp_str(&p, a->id);
	dbp_str(&p, a->tenant);
	if ((rc = db_one(d, &r, "SELECT node_id, state, desired_state, sandbox_id, warm_template_id "
		     "FROM instances WHERE id = $1 AND tenant_id = $2 FOR UPDATE", &p, err,
			  "instance %s not found", a->id)) < 0)
		return rc;
	if ((rc = instance_managed(a->id, db_val(r, 0, DEL_SANDBOX_ID),
				   db_val(r, 0, DEL_WARM_TEMPLATE_ID), err)) < 0) {
		PQclear(r);
		return rc;
	}
	if (strcmp(db_val(r, 0, DEL_DESIRED_STATE), "deleted") == 0) {
		PQclear(r); /* already deleting or deleted: idempotent */
		return 0;
	}
	a->node = xstrdup(db_val(r, 0, DEL_NODE_ID));
	PQclear(r);
	p.n = 1; /* only the id */
	rc = db_exec(d, NULL, "UPDATE instances SET desired_state = 'deleted', state = 'deleting', "
		     "updated_at = now() WHERE id = $1", &p);
	snprintf(subject, sizeof(subject), "instance/%s", a->id);
	if (rc == 0)
		rc = evd_instance("instance.deleting", &(struct evd_instance){0}, &data);
	if (rc == 0)
		rc = event_publish(d, "instance.deleting", subject, a->tenant, data);
	if (rc == 0 && !a->node) {
		char ids[64];
		snprintf(ids, sizeof(ids), "%s", a->id);
		rc = finish_deletions(d, NULL, ids) < 0 ? -EIO : 0;
	} else if (rc == 0)
		rc = spec_bump_instance(d, a->node, a->id);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int inst_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__DeleteInstanceRequest *q = (const void *)m;
	Bc__Compute__V1__Instance *inst = NULL;
	struct del a = {.id = q->instance_id};
	char agent[64];
	int r;

	if ((r = auth_tenant(c, q->tenant_id, &a.tenant, err)) < 0 ||
	    (r = check_id(err, "instanceId", "inst", q->instance_id)) < 0 ||
	    (r = inst_fetch(c, a.tenant, q->instance_id, &inst, agent, err)) < 0 ||
	    (r = inst_decide(c, "compute:instances:delete", inst, agent, err)) < 0)
		return r;
	r = db_tx(ctl_db(c), "READ COMMITTED", delete_tx, &a, err);
	free(a.node);
	if (r < 0 || (r = inst_fetch(c, a.tenant, q->instance_id, &inst, NULL, err)) < 0)
		return r;
	log_info("instance %s: delete requested", q->instance_id);
	*ret = &inst->base;
	return 0;
}

const struct rpc_handler *inst_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Create", RPC_UNARY, {.unary = inst_create}},
		{"Get", RPC_UNARY, {.unary = inst_get}},
		{"List", RPC_UNARY, {.unary = inst_list}},
		{"Delete", RPC_UNARY, {.unary = inst_delete}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
