/* iam_policies.c: the operator's Policies and Quotas services (Policies
 * also self-service inside a tenant, decided as iam:policies:* actions:
 * iam_self.c). A policy is
 * validated by policy.c before it is stored (a malformed one is
 * INVALID_INPUT naming the offending field as document.<path>) and applies
 * once attached to an identity or to its whole tenant. Quotas are per
 * tenant, NULL meaning unlimited; authz.c charges them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/admin/v1/iam.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "iam_policies.h"
#include "iam_self.h"
#include "iam_tenants.h"
#include "log.h"
#include "outbox.h"
#include "policy.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

#define POL_COLS                                                                            \
	"p.id, p.tenant_id, p.name, p.document, array_to_string(ARRAY(SELECT a.target_id FROM " \
	"policy_attachments a WHERE a.policy_id = p.id AND a.target_kind = 'identity' ORDER BY " \
	"a.target_id), E'\\n'), EXISTS (SELECT 1 FROM policy_attachments a WHERE a.policy_id = " \
	"p.id AND a.target_kind = 'tenant'), " MS("p.created_at")
/* The columns of POL_COLS, in its order: the two must stay in step. */
enum {
	POL_ID, POL_TENANT_ID, POL_NAME, POL_DOCUMENT, POL_IDENTITY_IDS, POL_TENANT_WIDE,
	POL_CREATED_AT, POL_NCOLS
};
COLS_CHECK(POL_COLS, POL_NCOLS)

static Bc__Admin__V1__Policy *pol_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Policy *x = rpc_new(c, &bc__admin__v1__policy__descriptor);
	struct policy *p = NULL;

	x->id = row_str(c, r, i, POL_ID);
	x->tenant_id = row_str(c, r, i, POL_TENANT_ID);
	x->name = row_str(c, r, i, POL_NAME);
	x->document = row_str(c, r, i, POL_DOCUMENT);
	x->n_identity_ids = row_strv(c, r, i, POL_IDENTITY_IDS, &x->identity_ids);
	x->tenant_wide = db_bool(r, i, POL_TENANT_WIDE);
	x->created_at = db_i64(r, i, POL_CREATED_AT);
	if (policy_parse(x->document, strlen(x->document), &p, NULL, NULL, 0) == 0)
		x->statements = (uint32_t)policy_statements(p);
	policy_free(p);
	return x;
}

static int pol_fetch(rpc_call *c, const char *id, Bc__Admin__V1__Policy **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "policyId", "pol", id)) < 0)
		return rc;
	dbp_str(&p, id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " POL_COLS " FROM policies p WHERE p.id = $1 AND "
			  "p.deleted_at IS NULL", &p, err,
			  "policy %s not found", id)) < 0)
		return rc;
	*ret = pol_row(c, r, 0);
	PQclear(r);
	return 0;
}

/* Decide action on policy x; target: the identity an attach names, or
 * NULL. Another tenant's policy is NOT_FOUND for all but the operator. */
static int pol_decide(rpc_call *c, const char *action, const Bc__Admin__V1__Policy *x,
		      const char *target, bc_error *err)
{
	struct iam_obj o = {.type = "iam-policy", .id = x->id, .tenant = x->tenant_id,
			    .attrs = {"name", x->name, target ? "identityId" : NULL, target}};

	return iam_decide(c, action, &o, err);
}

/* INVALID_INPUT naming document.<path> for a document policy.c refuses. */
static int check_document(const char *doc, bc_error *err)
{
	char field[256], msg[256];
	struct policy *p = NULL;

	if (policy_parse(doc, strlen(doc), &p, field, msg, sizeof(field)) == 0) {
		policy_free(p);
		return 0;
	}
	bc_error_set(err, BC_INVALID_INPUT, "document: %s", msg);
	return bc_error_detail(err, "field", "document.%s", field);
}

static int pol_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__CreatePolicyRequest *q = (const void *)m;
	struct iam_write w = {
		.sql = "WITH p AS (INSERT INTO policies (id, tenant_id, name, document) SELECT $1, id, "
		       "$3, $4 FROM tenants WHERE id = $2 AND state <> 'deleted' RETURNING *) SELECT "
		       POL_COLS " FROM p",
		.conflict_reason = "name-taken", .ev_type = "policy.created", .subject_kind = "policy",
		.ev = {.name = q->name},
		.tenant_col = POL_TENANT_ID};
	PGresult *r = NULL;
	char id[64], msg[128];
	const char *tenant;
	struct iam_obj o;
	int rc;

	if ((rc = iam_scope_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	if (!str_is_slug(tenant, 63))
		return invalid(err, "tenantId", "tenantId must be a tenant id");
	if (!*q->name || !str_is_printable(q->name, 128))
		return invalid(err, "name", "name must be 1 to 128 printable characters");
	if ((rc = check_document(q->document, err)) < 0)
		return rc;
	id_new("pol", id, sizeof(id));
	o = (struct iam_obj){.type = "iam-policy", .id = id, .tenant = tenant,
			     .attrs = {"name", q->name}};
	if ((rc = iam_decide(c, "iam:policies:create", &o, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "tenant %s not found", tenant);
	w.notfound_msg = msg;
	dbp_str(&w.p, id);
	dbp_str(&w.p, tenant);
	dbp_str(&w.p, q->name);
	dbp_str(&w.p, q->document);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &pol_row(c, r, 0)->base;
	PQclear(r);
	log_info("policy %s: created in tenant %s by %s", id, tenant, ctl_principal(c)->id);
	return 0;
}

static int pol_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		   bc_error *err)
{
	const Bc__Admin__V1__GetPolicyRequest *q = (const void *)m;
	Bc__Admin__V1__Policy *x = NULL;
	int rc = pol_fetch(c, q->policy_id, &x, err);

	if (rc == 0)
		rc = pol_decide(c, "iam:policies:read", x, NULL, err);
	if (rc == 0)
		*ret = &x->base;
	return rc;
}

static int pol_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Admin__V1__ListPoliciesRequest *q = (const void *)m;
	Bc__Admin__V1__ListPoliciesResponse *resp;
	const char *tenant;
	int limit = q->limit ? q->limit : 100, rc;
	struct dbp p = {0};
	PGresult *r = NULL;

	if (q->limit < 0 || q->limit > 500)
		return invalid(err, "limit", "limit must be between 1 and 500");
	if ((rc = iam_scope_tenant(c, q->tenant_id, &tenant, err)) < 0)
		return rc;
	dbp_str(&p, tenant);
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " POL_COLS " FROM policies p WHERE ($1 = '' OR "
			  "p.tenant_id = $1) AND p.id > $2 AND p.deleted_at IS NULL ORDER BY p.id "
			  "LIMIT $3", &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_policies_response__descriptor);
	resp->items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++) {
		/* each item is checked; one the caller may not read is left out */
		Bc__Admin__V1__Policy *x = pol_row(c, r, i);
		struct iam_obj o = {.type = "iam-policy", .id = x->id, .tenant = x->tenant_id,
				    .attrs = {"name", x->name}};

		if ((rc = iam_visible(c, "iam:policies:read", &o, err)) < 0) {
			PQclear(r);
			return rc;
		}
		if (rc)
			resp->items[resp->n_items++] = x;
	}
	if (PQntuples(r) == limit)
		resp->cursor = row_str(c, r, limit - 1, POL_ID);
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

struct attach {
	const Bc__Admin__V1__AttachPolicyRequest *q;
	bool detach, delete;
	int max;     /* policies that may apply to one identity */
};

/* After an attach in tenant (to identity, or tenant-wide when ""): the
 * most live policies now applying to one identity (its own and the
 * tenant's) must not pass max, or QUOTA_EXCEEDED (resource
 * attachedPolicies). The cap is enforced here, never when deciding:
 * authz.c evaluates every attached document. */
static int attach_cap(struct db *d, const char *tenant, const char *identity, int max,
		      bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	long long n;
	int rc;

	dbp_str(&p, tenant);
	dbp_str(&p, identity);
	rc = db_scalar(d, "SELECT (SELECT count(*) FROM policy_attachments a JOIN policies p ON "
		       "p.id = a.policy_id AND p.deleted_at IS NULL WHERE a.target_kind = 'tenant' "
		       "AND a.target_id = $1) + coalesce((SELECT max(n) FROM (SELECT count(*) n FROM "
		       "policy_attachments a JOIN policies p ON p.id = a.policy_id AND p.deleted_at IS "
		       "NULL AND p.tenant_id = $1 WHERE a.target_kind = 'identity' AND ($2 = '' OR "
		       "a.target_id = $2) GROUP BY a.target_id) x), 0)", &p, &v);
	if (rc < 0)
		return db_fail(err, rc);
	n = strtoll(v, NULL, 10);
	if (n <= max)
		return 0;
	bc_error_set(err, BC_QUOTA_EXCEEDED, "at most %d policies may apply to one identity "
		     "(this attach makes %lld)", max, n);
	bc_error_detail(err, "resource", "attachedPolicies");
	bc_error_detail(err, "requested", "1");
	bc_error_detail(err, "remaining", "0");
	return bc_error_detail(err, "limit", "%d", max);
}

static int attach_tx(struct db *d, void *arg, bc_error *err)
{
	enum { AT_TENANT_ID, AT_IDENTITY_OK }; /* the policy's read */
	struct attach *a = arg;
	const char *kind = a->q->tenant ? "tenant" : "identity";
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	char subject[96];
	const char *ev;
	int rc;

	dbp_str(&p, a->q->policy_id);
	dbp_str(&p, a->q->identity_id);
	rc = db_exec(d, &r, "SELECT p.tenant_id, $2 = '' OR EXISTS (SELECT 1 FROM identities i "
		     "WHERE i.id = $2 AND i.tenant_id = p.tenant_id) FROM policies p WHERE p.id = $1 "
		     "AND p.deleted_at IS NULL FOR UPDATE", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0 || !db_bool(r, 0, AT_IDENTITY_OK)) {
		rc = PQntuples(r);
		PQclear(r);
		if (rc == 0)
			return bc_error_set(err, BC_NOT_FOUND, "policy %s not found", a->q->policy_id);
		return bc_error_set(err, BC_NOT_FOUND, "identity %s not found in the policy's tenant",
				    a->q->identity_id);
	}
	p.n = 0;
	dbp_str(&p, a->q->policy_id);
	dbp_str(&p, kind);
	dbp_str(&p, a->q->tenant ? db_val(r, 0, AT_TENANT_ID) : a->q->identity_id);
	if (a->delete) {
		p.n = 1; /* only the policy id */
		rc = db_exec(d, NULL, "DELETE FROM policy_attachments WHERE policy_id = $1", &p);
		if (rc == 0)
			rc = db_exec(d, NULL, "UPDATE policies SET deleted_at = now() WHERE id = $1", &p);
		ev = "policy.deleted";
	} else if (a->detach) {
		rc = db_exec(d, NULL, "DELETE FROM policy_attachments WHERE policy_id = $1 AND "
			     "target_kind = $2 AND target_id = $3", &p);
		ev = "policy.detached";
	} else {
		rc = db_exec(d, NULL, "INSERT INTO policy_attachments (policy_id, target_kind, "
			     "target_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", &p);
		ev = "policy.attached";
		if (rc == 0 && (rc = attach_cap(d, db_val(r, 0, AT_TENANT_ID), a->q->tenant ? "" :
						a->q->identity_id, a->max, err)) < 0) {
			PQclear(r);
			return rc;
		}
	}
	snprintf(subject, sizeof(subject), "policy/%s", a->q->policy_id);
	if (rc == 0)
		rc = evd_iam(ev, &(struct evd_iam){.target_kind = kind, .target_id = a->q->tenant ?
			     db_val(r, 0, AT_TENANT_ID) : a->q->identity_id}, &data);
	if (rc == 0)
		rc = event_publish(d, ev, subject, db_val(r, 0, AT_TENANT_ID), data);
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int attach_run(rpc_call *c, const Bc__Admin__V1__AttachPolicyRequest *q, bool detach,
		      bool del, ProtobufCMessage **ret, bc_error *err)
{
	struct attach a = {.q = q, .detach = detach, .delete = del,
			   .max = ctl_app(c)->cfg.policy_attach_max};
	Bc__Admin__V1__Policy *x = NULL;
	int rc;

	if ((rc = check_id(err, "policyId", "pol", q->policy_id)) < 0)
		return rc;
	if (!del && q->tenant == (*q->identity_id != '\0'))
		return invalid(err, "identityId", "give exactly one of identityId or tenant");
	if (!del && !q->tenant && (rc = check_id(err, "identityId", "idn", q->identity_id)) < 0)
		return rc;
	if ((rc = pol_fetch(c, q->policy_id, &x, err)) < 0 ||
	    (rc = pol_decide(c, del ? "iam:policies:delete" : detach ? "iam:policies:detach" :
			     "iam:policies:attach", x, *q->identity_id ? q->identity_id : NULL,
			     err)) < 0)
		return rc;
	if ((rc = db_tx(ctl_db(c), "READ COMMITTED", attach_tx, &a, err)) < 0)
		return rc;
	if (!del && (rc = pol_fetch(c, q->policy_id, &x, err)) < 0)
		return rc;
	log_info("policy %s: %s", q->policy_id, del ? "deleted" : detach ? "detached" : "attached");
	*ret = &x->base;
	return 0;
}

static int pol_attach(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	return attach_run(c, (const void *)m, false, false, ret, err);
}

static int pol_detach(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	return attach_run(c, (const void *)m, true, false, ret, err);
}

static int pol_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__DeletePolicyRequest *q = (const void *)m;
	Bc__Admin__V1__AttachPolicyRequest a = BC__ADMIN__V1__ATTACH_POLICY_REQUEST__INIT;

	a.policy_id = q->policy_id;
	return attach_run(c, &a, false, true, ret, err);
}

/* ----------------------------------------------------------------- quotas */

#define QUOTA_COLS "t.id, q.vcpus, q.memory_gib, q.disk_gib, q.gpus, q.instances"
/* The columns of QUOTA_COLS, in its order: the two must stay in step. */
enum {
	QUOTA_TENANT_ID, QUOTA_VCPUS, QUOTA_MEMORY_GIB, QUOTA_DISK_GIB, QUOTA_GPUS,
	QUOTA_INSTANCES, QUOTA_NCOLS
};
COLS_CHECK(QUOTA_COLS, QUOTA_NCOLS)

static Bc__Admin__V1__Quota *quota_row(rpc_call *c, const PGresult *r)
{
	Bc__Admin__V1__Quota *x = rpc_new(c, &bc__admin__v1__quota__descriptor);

	x->tenant_id = row_str(c, r, 0, QUOTA_TENANT_ID);
	x->has_vcpus = db_val(r, 0, QUOTA_VCPUS) != NULL;
	x->vcpus = (uint32_t)db_i64(r, 0, QUOTA_VCPUS);
	x->has_memory_gib = db_val(r, 0, QUOTA_MEMORY_GIB) != NULL;
	x->memory_gib = (uint64_t)db_i64(r, 0, QUOTA_MEMORY_GIB);
	x->has_disk_gib = db_val(r, 0, QUOTA_DISK_GIB) != NULL;
	x->disk_gib = (uint64_t)db_i64(r, 0, QUOTA_DISK_GIB);
	x->has_gpus = db_val(r, 0, QUOTA_GPUS) != NULL;
	x->gpus = (uint32_t)db_i64(r, 0, QUOTA_GPUS);
	x->has_instances = db_val(r, 0, QUOTA_INSTANCES) != NULL;
	x->instances = (uint32_t)db_i64(r, 0, QUOTA_INSTANCES);
	return x;
}

static int quota_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__GetQuotaRequest *q = (const void *)m;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, q->tenant_id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " QUOTA_COLS " FROM tenants t LEFT JOIN quotas q "
			  "ON q.tenant_id = t.id WHERE t.id = $1", &p, err,
			  "tenant %s not found", q->tenant_id)) < 0)
		return rc;
	*ret = &quota_row(c, r)->base;
	PQclear(r);
	return 0;
}

static void dbp_opt(struct dbp *p, bool has, uint64_t v)
{
	if (has)
		dbp_u64(p, v);
	else
		dbp_nstr(p, NULL);
}

static int quota_set(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__Quota *q = (const void *)m;
	struct iam_write w = {
		.sql = "WITH q AS (INSERT INTO quotas (tenant_id, vcpus, memory_gib, disk_gib, gpus, "
		       "instances) SELECT id, $2, $3, $4, $5, $6 FROM tenants WHERE id = $1 ON CONFLICT "
		       "(tenant_id) DO UPDATE SET vcpus = $2, memory_gib = $3, disk_gib = $4, gpus = $5, "
		       "instances = $6, updated_at = now() RETURNING *) SELECT " QUOTA_COLS " FROM q "
		       "JOIN tenants t ON t.id = q.tenant_id",
		.conflict_reason = "", .ev_type = "quota.set", .subject_kind = "tenant"};
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if (!str_is_slug(q->tenant_id, 63))
		return invalid(err, "tenantId", "tenantId must be a tenant id");
	if (q->vcpus > 1000000 || q->gpus > 100000 || q->instances > 1000000 ||
	    q->memory_gib > (1ULL << 40) || q->disk_gib > (1ULL << 40))
		return invalid(err, "quota", "a limit is out of range");
	snprintf(msg, sizeof(msg), "tenant %s not found", q->tenant_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->tenant_id);
	dbp_opt(&w.p, q->has_vcpus, q->vcpus);
	dbp_opt(&w.p, q->has_memory_gib, q->memory_gib);
	dbp_opt(&w.p, q->has_disk_gib, q->disk_gib);
	dbp_opt(&w.p, q->has_gpus, q->gpus);
	dbp_opt(&w.p, q->has_instances, q->instances);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	*ret = &quota_row(c, r)->base;
	PQclear(r);
	log_info("tenant %s: quota set", q->tenant_id);
	return 0;
}

#define U(name, f) {name, RPC_UNARY, {.unary = f}}

const struct rpc_handler *pol_handlers(size_t *ret_n)
{
	static const struct rpc_handler pol[] = {
		U("Create", pol_create), U("Get", pol_get), U("List", pol_list),
		U("Delete", pol_delete), U("Attach", pol_attach), U("Detach", pol_detach)};

	*ret_n = ARRAY_SIZE(pol);
	return pol;
}

const struct rpc_handler *quotas_handlers(size_t *ret_n)
{
	static const struct rpc_handler quota[] = {U("Set", quota_set), U("Get", quota_get)};

	*ret_n = ARRAY_SIZE(quota);
	return quota;
}
