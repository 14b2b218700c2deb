/* identity_api.c: the identity broker's methods (docs/identity.md).
 *
 * Node.Attest: a host forwards a guest's attestation (the bootstrap value
 * it was given) from the link-local endpoint bcd serves on the guest's
 * tap, adding what only the host knows: the instance behind that tap and
 * the address the tap guards bind to it. The broker checks, with the epoch
 * locked, that the bootstrap is pending, unexpired and matching that
 * instance, that the calling node runs the instance and that the address
 * is its lease; then the epoch is live, bound to the instance and address,
 * and a capability token (stored hashed) with a 600 s lease is returned.
 * One live epoch per address is the database's rule (a partial unique
 * index), so two replicas attesting at once can never both win. A refusal
 * leaves the epoch pending (a stranger's replay does not burn it).
 *
 * Node.RenewIdentity: the capability token renews its lease, from the same
 * node, instance and address only.
 *
 * Node.ReportActivity: the guest's running/idle, with the same token, from
 * the same node, instance and address; moves the sandbox's lifecycle.
 *
 * Identity.Recognize: the live epoch holding an address: its sandbox,
 * agent, task, run and tenant; decided as compute:identity:recognize on
 * the sandbox. NOT_FOUND when none (revoked, lapsed, never attested). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "bc/compute/v1/identity.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "identity.h"
#include "log.h"
#include "rowmsg.h"
#include "sandboxes.h"
#include "sealed.h"
#include "util.h"
#include "validate.h"

#define WID_SECRET_MAX 128

static bool address_ok(const char *a)
{
	unsigned char buf[16];

	return a && (inet_pton(AF_INET, a, buf) == 1 || inet_pton(AF_INET6, a, buf) == 1);
}

/* code with details reason; the message is fmt with one string. */
__attribute__((format(printf, 4, 5)))
static int refuse(bc_error *err, int code, const char *reason, const char *fmt, ...)
{
	va_list ap;
	char msg[256];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	bc_error_set(err, code, "%s", msg);
	return bc_error_detail(err, "reason", "%s", reason);
}

static int check_forward(const char *secret, const char *field, const char *instance,
			 const char *address, bc_error *err)
{
	if (!*secret || !str_is_printable(secret, WID_SECRET_MAX))
		return invalid(err, field, "%s is not a value the broker issued", field);
	if (!id_valid("inst", instance))
		return invalid(err, "instanceId", "instanceId is not an instance id");
	if (!address_ok(address))
		return invalid(err, "address", "address is not an IPv4 or IPv6 address");
	return 0;
}

/* ----------------------------------------------------------------- attest */

struct attest {
	const Bc__Node__V1__AttestRequest *q;
	const char *node;
	char hash[65], cap[80], cap_hash[65];
	char epoch[64], sandbox[64];
	int64_t lease_ms;
};

/* The epoch the bootstrap names, locked, with what the checks need. */
enum {
	AT_ID, AT_STATE, AT_UNEXPIRED, AT_INSTANCE, AT_SANDBOX, AT_NODE, AT_OPEN, AT_LEASED
};
static int attest_read(struct db *d, struct attest *a, PGresult **ret)
{
	struct dbp p = {0};

	dbp_str(&p, a->hash);
	dbp_str(&p, a->q->address);
	return db_exec(d, ret, "SELECT e.id, e.state, e.bootstrap_expires_at > now(), "
		       "e.instance_id, e.sandbox_id, coalesce(i.node_id, ''), s.deleting_at IS NULL, "
		       "EXISTS (SELECT 1 FROM ip_leases l WHERE l.instance_id = e.instance_id AND "
		       "host(l.address) = host($2::inet)) FROM identity_epochs e JOIN instances i ON "
		       "i.id = e.instance_id JOIN sandboxes s ON s.id = e.sandbox_id WHERE "
		       "e.bootstrap_hash = $1 FOR UPDATE OF e", &p);
}

/* Every check of the attestation, in order; 0 when all pass. */
static int attest_check(const struct attest *a, const PGresult *r, bc_error *err)
{
	const char *q_inst = a->q->instance_id;

	if (PQntuples(r) == 0)
		return refuse(err, BC_ACCESS_DENIED, "bootstrap-unknown",
			      "%s", "the bootstrap value is not one the broker issued");
	if (strcmp(db_val(r, 0, AT_STATE), "pending") != 0)
		return refuse(err, BC_ACCESS_DENIED, "bootstrap-used",
			      "the bootstrap value was already used (epoch %s)", db_val(r, 0, AT_ID));
	if (!db_bool(r, 0, AT_UNEXPIRED))
		return refuse(err, BC_ACCESS_DENIED, "bootstrap-expired",
			      "the bootstrap value of epoch %s has expired", db_val(r, 0, AT_ID));
	if (strcmp(db_val(r, 0, AT_INSTANCE), q_inst) != 0)
		return refuse(err, BC_ACCESS_DENIED, "bootstrap-mismatch",
			      "the bootstrap value was not issued to instance %s", q_inst);
	if (strcmp(db_val(r, 0, AT_NODE), a->node) != 0)
		return refuse(err, BC_ACCESS_DENIED, "instance-not-on-node",
			      "instance %s does not run on the calling node", q_inst);
	if (!db_bool(r, 0, AT_LEASED))
		return refuse(err, BC_ACCESS_DENIED, "address-mismatch",
			      "%s is not the address leased to the instance", a->q->address);
	if (!db_bool(r, 0, AT_OPEN))
		return refuse(err, BC_INVALID_STATE, "sandbox-deleting", "sandbox %s is being deleted",
			      db_val(r, 0, AT_SANDBOX));
	return 0;
}

/* A warm claim's value, sealed for the host (identity.c), is of no more
 * use once its epoch goes live: the reference cleared, the blob deleted.
 * First in the commit, so the instance row is locked before the sandbox,
 * in the order a report takes them. */
static int drop_host_bootstrap(struct db *d, const char *instance)
{
	_cleanup_free_ char *ref = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, instance);
	rc = db_scalar(d, "UPDATE instances i SET identity_bootstrap_ref = NULL FROM (SELECT id, "
		       "identity_bootstrap_ref AS r FROM instances WHERE id = $1) o WHERE i.id = o.id "
		       "AND o.r IS NOT NULL RETURNING o.r", &p, &ref);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	rc = sealed_delete(d, ref);
	return rc < 0 ? rc : 0;
}

/* The epoch live, sandbox.identity.live, the lifecycle, and readiness when
 * the instance already runs with its guest up (the gate of 0023 let
 * nothing through before). CONFLICT when the address holds a live epoch. */
static int attest_commit(struct db *d, struct attest *a, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = drop_host_bootstrap(d, a->q->instance_id)) < 0)
		return db_fail(err, rc);
	dbp_str(&p, a->epoch);
	dbp_str(&p, a->node);
	dbp_str(&p, a->q->address);
	dbp_str(&p, a->cap_hash);
	dbp_i64(&p, WID_LEASE_SECONDS);
	rc = db_exec(d, &r, "WITH e AS (UPDATE identity_epochs SET state = 'live', live_at = now(), "
		     "node_id = $2, address = $3::inet, capability_hash = $4, lease_expires_at = now() "
		     "+ make_interval(secs => $5::int) WHERE id = $1 AND state = 'pending' RETURNING *), "
		     "s AS (UPDATE sandboxes s SET lifecycle = CASE WHEN s.lifecycle IN ('bound', "
		     "'created-on-demand') THEN 'identity-live' ELSE s.lifecycle END FROM e WHERE s.id = "
		     "e.sandbox_id RETURNING s.*), v AS (INSERT INTO events (type, subject, tenant_id, "
		     "data) SELECT 'sandbox.identity.live', 'sandbox/' || s.id, s.tenant_id, "
		     "jsonb_build_object('epochId', e.id, 'instanceId', e.instance_id, 'address', "
		     "host(e.address), 'nodeId', e.node_id, 'task', s.task_id, 'run', s.run_id, "
		     "'agent', s.agent_label) FROM e JOIN s ON s.id = e.sandbox_id) SELECT "
		     "(extract(epoch FROM lease_expires_at) * 1000)::bigint FROM e", &p);
	if (rc == -EEXIST)
		return refuse(err, BC_CONFLICT, "address-live",
			      "another live identity holds address %s", a->q->address);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return refuse(err, BC_ACCESS_DENIED, "bootstrap-used",
			      "the bootstrap value was already used (epoch %s)", a->epoch);
	}
	a->lease_ms = db_i64(r, 0, COL_ONLY);
	PQclear(r);
	p = (struct dbp){0};
	dbp_str(&p, a->sandbox);
	/* the trigger's sandbox.ready, for the path it could not take */
	rc = db_exec(d, NULL, "WITH s AS (UPDATE sandboxes s SET state = 'ready', ready_at = now(), "
		     "ready_source = 'identity', updated_at = now() FROM instances i WHERE s.id = $1 "
		     "AND i.id = s.instance_id AND s.state = 'starting' AND i.state = 'running' AND "
		     "i.guest_ready_at IS NOT NULL RETURNING s.*) INSERT INTO events (type, subject, "
		     "tenant_id, data) SELECT 'sandbox.ready', 'sandbox/' || id, tenant_id, "
		     "jsonb_build_object('templateId', template_id, 'instanceId', instance_id, "
		     "'poolId', pool_id, 'warm', warm) FROM s", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int attest_tx(struct db *d, void *arg, bc_error *err)
{
	struct attest *a = arg;
	PGresult *r = NULL;
	int rc;

	if ((rc = attest_read(d, a, &r)) < 0)
		return db_fail(err, rc);
	if ((rc = attest_check(a, r, err)) == 0) {
		snprintf(a->epoch, sizeof(a->epoch), "%s", db_val(r, 0, AT_ID));
		snprintf(a->sandbox, sizeof(a->sandbox), "%s", db_val(r, 0, AT_SANDBOX));
	}
	PQclear(r);
	return rc < 0 ? rc : attest_commit(d, a, err);
}

static void *attest_answer(rpc_call *c, const struct attest *a)
{
	Bc__Node__V1__AttestResponse *o = rpc_new(c, &bc__node__v1__attest_response__descriptor);

	o->epoch_id = rpc_strdup(c, a->epoch);
	o->sandbox_id = rpc_strdup(c, a->sandbox);
	o->capability_token = rpc_strdup(c, a->cap);
	o->lease_expires_at = a->lease_ms;
	o->renew_after_seconds = WID_RENEW_AFTER_SECONDS;
	return &o->base;
}

static int wid_attest(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	struct attest a = {.q = (const void *)m, .node = ctl_principal(c)->id};
	int rc;

	if ((rc = check_forward(a.q->bootstrap, "bootstrap", a.q->instance_id, a.q->address,
				err)) < 0)
		return rc;
	sha256_hex(a.q->bootstrap, strlen(a.q->bootstrap), a.hash);
	auth_token_new(a.cap, sizeof(a.cap));
	memcpy(a.cap, "bcc_", 4);
	sha256_hex(a.cap, strlen(a.cap), a.cap_hash);
	rc = db_tx(ctl_db(c), "READ COMMITTED", attest_tx, &a, err);
	if (rc < 0) {
		log_info("node %s: attestation for instance %s from %s refused: %s", a.node,
			 a.q->instance_id, a.q->address, err->message);
	} else {
		log_info("sandbox %s: identity live (epoch %s, instance %s, address %s, node %s)",
			 a.sandbox, a.epoch, a.q->instance_id, a.q->address, a.node);
		*ret = attest_answer(c, &a);
	}
	OPENSSL_cleanse(a.cap, sizeof(a.cap));
	return rc;
}

/* ------------------------------------------------------------------ renew */

static int wid_renew(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Node__V1__RenewIdentityRequest *q = (const void *)m;
	const char *node = ctl_principal(c)->id;
	struct attest a = {.node = node};
	char hash[65];
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_forward(q->capability_token, "capabilityToken", q->instance_id,
				q->address, err)) < 0)
		return rc;
	sha256_hex(q->capability_token, strlen(q->capability_token), hash);
	dbp_str(&p, hash);
	dbp_str(&p, q->instance_id);
	dbp_str(&p, node);
	dbp_str(&p, q->address);
	dbp_i64(&p, WID_LEASE_SECONDS);
	rc = db_exec(ctl_db(c), &r, "UPDATE identity_epochs SET lease_expires_at = now() + "
		     "make_interval(secs => $5::int) WHERE capability_hash = $1 AND state = 'live' "
		     "AND lease_expires_at > now() AND instance_id = $2 AND node_id = $3 AND "
		     "host(address) = host($4::inet) RETURNING id, sandbox_id, (extract(epoch FROM "
		     "lease_expires_at) * 1000)::bigint", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		log_info("node %s: identity renewal for instance %s refused", node, q->instance_id);
		return refuse(err, BC_ACCESS_DENIED, "capability-invalid", "%s",
			      "the capability token is not live for this instance and address");
	}
	snprintf(a.epoch, sizeof(a.epoch), "%s", db_val(r, 0, 0));
	snprintf(a.sandbox, sizeof(a.sandbox), "%s", db_val(r, 0, 1));
	a.lease_ms = db_i64(r, 0, 2);
	PQclear(r);
	*ret = attest_answer(c, &a); /* the token is the caller's own: not repeated */
	return 0;
}

/* --------------------------------------------------------------- activity */

/* Node.ReportActivity: the guest's harness says running (a prompt was
 * delivered) or idle (its turn is complete), with its capability token;
 * its host adds the instance and address. The token must be the live
 * epoch's (unexpired lease), the calling node run the instance and the
 * address be its lease and the epoch's; the lifecycle moves only from
 * runtime-ready, running or idle (INVALID_STATE otherwise), a repeat is a
 * no-op, and each move publishes sandbox.running or sandbox.idle. */
struct activity {
	const Bc__Node__V1__ActivityRequest *q;
	const char *node;
	char hash[65], sandbox[64], lifecycle[32];
	bool changed;
};

enum {
	AC_EPOCH, AC_SANDBOX, AC_INSTANCE, AC_NODE, AC_EPOCH_ADDR, AC_LEASED, AC_LIFECYCLE,
	AC_OPEN
};
static int activity_check(const struct activity *a, const PGresult *r, bc_error *err)
{
	const char *life;

	if (PQntuples(r) == 0 || strcmp(db_val(r, 0, AC_INSTANCE), a->q->instance_id) != 0)
		return refuse(err, BC_ACCESS_DENIED, "capability-invalid", "%s",
			      "the capability token is not live for this instance");
	if (strcmp(db_val(r, 0, AC_NODE), a->node) != 0)
		return refuse(err, BC_ACCESS_DENIED, "instance-not-on-node",
			      "instance %s does not run on the calling node", a->q->instance_id);
	if (!db_bool(r, 0, AC_EPOCH_ADDR) || !db_bool(r, 0, AC_LEASED))
		return refuse(err, BC_ACCESS_DENIED, "address-mismatch",
			      "%s is not the address of the instance's live identity", a->q->address);
	if (!db_bool(r, 0, AC_OPEN))
		return refuse(err, BC_INVALID_STATE, "sandbox-deleting", "sandbox %s is being deleted",
			      db_val(r, 0, AC_SANDBOX));
	life = db_val(r, 0, AC_LIFECYCLE);
	if (strcmp(life, "runtime-ready") && strcmp(life, "running") && strcmp(life, "idle"))
		return refuse(err, BC_INVALID_STATE, "lifecycle",
			      "the sandbox is %s: running and idle follow runtime-ready", life);
	return 0;
}

static int activity_tx(struct db *d, void *arg, bc_error *err)
{
	struct activity *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->hash);
	dbp_str(&p, a->q->address);
	rc = db_exec(d, &r, "SELECT e.id, e.sandbox_id, e.instance_id, coalesce(i.node_id, ''), "
		     "host(e.address) = host($2::inet), EXISTS (SELECT 1 FROM ip_leases l WHERE "
		     "l.instance_id = e.instance_id AND host(l.address) = host($2::inet)), "
		     "s.lifecycle, s.deleting_at IS NULL FROM identity_epochs e JOIN instances i ON "
		     "i.id = e.instance_id JOIN sandboxes s ON s.id = e.sandbox_id WHERE "
		     "e.capability_hash = $1 AND e.state = 'live' AND e.lease_expires_at > now() "
		     "FOR UPDATE OF s", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if ((rc = activity_check(a, r, err)) == 0) {
		snprintf(a->sandbox, sizeof(a->sandbox), "%s", db_val(r, 0, AC_SANDBOX));
		a->changed = strcmp(db_val(r, 0, AC_LIFECYCLE), a->q->state) != 0;
	}
	PQclear(r);
	snprintf(a->lifecycle, sizeof(a->lifecycle), "%s", a->q->state);
	if (rc < 0 || !a->changed)
		return rc;
	p = (struct dbp){0};
	dbp_str(&p, a->sandbox);
	dbp_str(&p, a->q->state);
	rc = db_exec(d, NULL, "WITH o AS (SELECT lifecycle FROM sandboxes WHERE id = $1), s AS "
		     "(UPDATE sandboxes SET lifecycle = $2, updated_at = now() WHERE id = $1 RETURNING "
		     "*) INSERT INTO events (type, subject, tenant_id, data) SELECT CASE WHEN $2 = "
		     "'running' THEN 'sandbox.running' ELSE 'sandbox.idle' END, 'sandbox/' || s.id, "
		     "s.tenant_id, jsonb_build_object('instanceId', s.instance_id, 'from', o.lifecycle, "
		     "'task', s.task_id, 'run', s.run_id, 'agent', s.agent_label) FROM s, o", &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int wid_activity(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	struct activity a = {.q = (const void *)m, .node = ctl_principal(c)->id};
	Bc__Node__V1__ActivityResponse *o;
	int rc;

	if ((rc = check_forward(a.q->capability_token, "capabilityToken", a.q->instance_id,
				a.q->address, err)) < 0)
		return rc;
	if (strcmp(a.q->state, "running") != 0 && strcmp(a.q->state, "idle") != 0)
		return invalid(err, "state", "state must be running or idle");
	sha256_hex(a.q->capability_token, strlen(a.q->capability_token), a.hash);
	rc = db_tx(ctl_db(c), "READ COMMITTED", activity_tx, &a, err);
	if (rc < 0) {
		log_info("node %s: activity report for instance %s refused: %s", a.node,
			 a.q->instance_id, err->message);
		return rc;
	}
	if (a.changed)
		log_info("sandbox %s: %s (reported by its guest)", a.sandbox, a.lifecycle);
	o = rpc_new(c, &bc__node__v1__activity_response__descriptor);
	o->sandbox_id = rpc_strdup(c, a.sandbox);
	o->lifecycle = rpc_strdup(c, a.lifecycle);
	o->changed = a.changed;
	*ret = &o->base;
	return 0;
}

/* -------------------------------------------------------------- recognize */

enum {
	RC_EPOCH, RC_SANDBOX, RC_TENANT, RC_INSTANCE, RC_TASK, RC_RUN, RC_AGENT, RC_LIVE_AT,
	RC_ADDRESS
};
static int wid_recognize(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			 bc_error *err)
{
	const Bc__Compute__V1__RecognizeRequest *q = (const void *)m;
	Bc__Compute__V1__Recognition *o;
	struct sbx_brief b;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (!address_ok(q->address))
		return invalid(err, "address", "address is not an IPv4 or IPv6 address");
	dbp_str(&p, q->address);
	rc = db_one(ctl_db(c), &r, "SELECT e.id, e.sandbox_id, e.tenant_id, e.instance_id, "
		    "coalesce(s.task_id, ''), coalesce(s.run_id, ''), coalesce(s.agent_label, ''), "
		    "(extract(epoch FROM e.live_at) * 1000)::bigint, host(e.address) FROM "
		    "identity_epochs e JOIN sandboxes s ON s.id = e.sandbox_id WHERE e.state = "
		    "'live' AND e.address = $1::inet AND e.lease_expires_at > now()", &p, err,
		    "no live identity holds address %s", q->address);
	if (rc < 0)
		return rc;
	/* another tenant's sandbox is NOT_FOUND, as if there were none */
	if (!auth_is_operator(ctl_principal(c)))
		rc = sbx_decide_brief(c, db_val(r, 0, RC_TENANT), db_val(r, 0, RC_SANDBOX),
				      "compute:identity:recognize", &b, err);
	if (rc == 0) {
		o = rpc_new(c, &bc__compute__v1__recognition__descriptor);
		o->address = row_str(c, r, 0, RC_ADDRESS);
		o->sandbox_id = row_str(c, r, 0, RC_SANDBOX);
		o->tenant_id = row_str(c, r, 0, RC_TENANT);
		o->agent = row_str(c, r, 0, RC_AGENT);
		o->task = row_str(c, r, 0, RC_TASK);
		o->run = row_str(c, r, 0, RC_RUN);
		o->epoch_id = row_str(c, r, 0, RC_EPOCH);
		o->instance_id = row_str(c, r, 0, RC_INSTANCE);
		o->live_at = db_i64(r, 0, RC_LIVE_AT);
		o->cache_seconds = ctl_app(c)->cfg.identity_cache_seconds;
		*ret = &o->base;
	}
	PQclear(r);
	return rc;
}

const struct rpc_handler *wid_node_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Attest", RPC_UNARY, {.unary = wid_attest}},
		{"RenewIdentity", RPC_UNARY, {.unary = wid_renew}},
		{"ReportActivity", RPC_UNARY, {.unary = wid_activity}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}

const struct rpc_handler *wid_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Recognize", RPC_UNARY, {.unary = wid_recognize}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
