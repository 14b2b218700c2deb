/* authz.c: decisions for the APIs. The policies that apply to a caller are
 * those attached to it and to its tenant; an agent acting under a
 * delegation is allowed only what both its own policies and its user's
 * allow, and sees only what it created. The resource is named
 * "<type>/<id>" with its ancestors (its pool, then "tenant/<id>"), so a
 * grant on a pool or on the tenant reaches it. Creates stage a draft row in
 * the authorization projection and decide on what was staged; the whole
 * transaction rolls back on a refusal, so nothing is left behind. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "authz.h"
#include "db.h"
#include "log.h"
#include "policy.h"
#include "quota.h"
#include "util.h"

#define AUTHZ_CACHE_STATEMENTS 200000
#define AUTHZ_CACHE_BUCKETS 1024

struct cached {
	char id[64];
	struct policy *p;
	struct cached *next;
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cached *cache[AUTHZ_CACHE_BUCKETS];
static size_t cache_statements;

static unsigned bucket(const char *id)
{
	unsigned h = 5381;

	for (; *id; id++)
		h = h * 33 + (unsigned char)*id;
	return h % AUTHZ_CACHE_BUCKETS;
}

/* The parsed document of policy id: cached and shared (*ret_owned false),
 * or parsed for this call only when the cache is full (*ret_owned true).
 * -EINVAL when it does not parse. */
static int cache_get(const char *id, const char *doc, struct policy **ret, bool *ret_owned)
{
	unsigned b = bucket(id);
	struct policy *p = NULL;
	struct cached *c;

	pthread_mutex_lock(&cache_mu);
	for (c = cache[b]; c && strcmp(c->id, id) != 0; c = c->next)
		;
	pthread_mutex_unlock(&cache_mu);
	if (c) {
		*ret = c->p;
		*ret_owned = false;
		return 0;
	}
	if (policy_parse(doc, strlen(doc), &p, NULL, NULL, 0) < 0)
		return -EINVAL;
	pthread_mutex_lock(&cache_mu);
	for (c = cache[b]; c && strcmp(c->id, id) != 0; c = c->next)
		;
	if (!c && cache_statements + policy_statements(p) <= AUTHZ_CACHE_STATEMENTS) {
		c = xcalloc(1, sizeof(*c));
		snprintf(c->id, sizeof(c->id), "%s", id);
		c->p = p;
		c->next = cache[b];
		cache[b] = c;
		cache_statements += policy_statements(p);
		p = NULL;
	}
	pthread_mutex_unlock(&cache_mu);
	*ret = c ? c->p : p;
	*ret_owned = !c;
	if (c)
		policy_free(p); /* another thread cached it first */
	return 0;
}

void authz_attr(struct authz_target *t, const char *name, const char *value)
{
	size_t i = t->n_attrs;

	if (i >= AUTHZ_MAX_ATTRS)
		return;
	snprintf(t->names[i], sizeof(t->names[i]), "%s", policy_attr_canonical(name));
	snprintf(t->values[i], sizeof(t->values[i]), "%s", value ? value : "");
	t->attrs[i] = (struct policy_attr){t->names[i], t->values[i]};
	t->n_attrs++;
}

struct docs {
	struct policy **v;
	bool *owned;
	size_t n;
	bool admin;
	bool active;          /* the identity exists and is active */
	bool wants_budget;    /* a document names principal.budgetSpent */
	char unreadable[64];  /* the first attached document that does not parse */
};

static void docs_free(struct docs *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->owned[i])
			policy_free(s->v[i]);
	free(s->v);
	free(s->owned);
	s->v = NULL;
	s->owned = NULL;
	s->n = 0;
}

/* The policies of identity id in tenant, whether it is an admin and
 * whether it is active. Every attached document is loaded (the cap is
 * enforced when attaching, never here); one that no longer parses (it was
 * valid when stored; a newer binary may read it differently) is named in
 * s->unreadable and makes the decision a deny. */
static int docs_load(struct db *d, const char *id, const char *tenant, struct docs *s)
{
	enum { DOC_IS_ADMIN, DOC_ACTIVE, DOC_POLICY_ID, DOC_DOCUMENT };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, n;

	dbp_str(&p, id);
	dbp_str(&p, tenant);
	rc = db_exec(d, &r, "SELECT i.is_admin, i.state = 'active', p.id, p.document FROM "
		     "identities i LEFT JOIN (policies p JOIN policy_attachments a ON a.policy_id = "
		     "p.id AND p.deleted_at IS NULL AND p.tenant_id = $2 AND ((a.target_kind = "
		     "'identity' AND a.target_id = $1) OR (a.target_kind = 'tenant' AND a.target_id "
		     "= $2))) ON true WHERE i.id = $1 ORDER BY p.id", &p);
	if (rc < 0)
		return rc;
	n = PQntuples(r);
	s->admin = n > 0 && db_bool(r, 0, DOC_IS_ADMIN);
	s->active = n > 0 && db_bool(r, 0, DOC_ACTIVE);
	s->v = xcalloc(n ? (size_t)n : 1, sizeof(*s->v));
	s->owned = xcalloc(n ? (size_t)n : 1, sizeof(*s->owned));
	for (int i = 0; i < n; i++) {
		const char *doc = db_val(r, i, DOC_DOCUMENT);
		if (!doc)
			continue;
		s->wants_budget |= strstr(doc, AUTHZ_BUDGET_ATTR) != NULL;
		if (cache_get(db_val(r, i, DOC_POLICY_ID), doc, &s->v[s->n],
			      &s->owned[s->n]) == 0) {
			s->n++;
		} else if (!*s->unreadable) {
			log_warn("policy %s: stored document does not parse: every decision for "
				 "identity %s is a deny until it is detached",
				 db_val(r, i, DOC_POLICY_ID), id);
			snprintf(s->unreadable, sizeof(s->unreadable), "%s",
				 db_val(r, i, DOC_POLICY_ID));
		}
	}
	PQclear(r);
	return 0;
}

/* A decision's outcome: the effect, the deciding statement's sid (owned),
 * and for a refusal that is not the policies' own, why (a reason) and
 * the policy or identity it names. */
struct verdict {
	enum policy_effect e;
	char *sid;
	const char *reason;
	char names[64];
};

static int refuse(bc_error *err, const char *action, const char *resource,
		  const struct verdict *v)
{
	enum policy_effect e = v->e;
	const char *sid = v->sid;

	if (v->reason) {
		bc_error_set(err, BC_ACCESS_DENIED, "%s on %s is refused: %s %s", action, resource,
			     strcmp(v->reason, "policy-unreadable") == 0 ? "the stored document of "
			     "attached policy" : "not active:", v->names);
		bc_error_detail(err, "action", "%s", action);
		bc_error_detail(err, "resource", "%s", resource);
		if (strcmp(v->reason, "policy-unreadable") == 0)
			bc_error_detail(err, "policyId", "%s", v->names);
		return bc_error_detail(err, "reason", "%s", v->reason);
	}
	if (e == POLICY_DENY_EXPLICIT)
		bc_error_set(err, BC_ACCESS_DENIED, "%s on %s is denied by %s", action, resource,
			     sid && *sid ? sid : "a statement");
	else
		bc_error_set(err, BC_ACCESS_DENIED, "%s on %s is not allowed by any policy", action,
			     resource);
	bc_error_detail(err, "action", "%s", action);
	bc_error_detail(err, "resource", "%s", resource);
	if (e == POLICY_DENY_EXPLICIT && sid && *sid)
		bc_error_detail(err, "sid", "%s", sid);
	return bc_error_detail(err, "reason", "%s", e == POLICY_DENY_EXPLICIT ? "explicit-deny"
							    : "no-allow");
}

/* principal.budgetSpent: "true" once the tenant's metered spend reached
 * its offer's limit (whatever the offer does then), for statements such as
 * the spec's StopWhenOverBudget. Added to q (room for it in its array)
 * only when a document names it, so other decisions pay no query. */
static int budget_attr(struct db *d, const char *tenant, struct policy_request *q,
		       struct policy_attr *pa)
{
	enum quota_budget_state st;
	int rc;

	for (size_t i = 0; i < q->n_principal_attrs; i++)
		if (strcmp(pa[i].name, AUTHZ_BUDGET_ATTR) == 0)
			return 0;
	if ((rc = quota_billing_check(d, tenant, &st)) < 0)
		return rc;
	pa[q->n_principal_attrs++] = (struct policy_attr){AUTHZ_BUDGET_ATTR,
							   st == QUOTA_BUDGET_OK ? "false" : "true"};
	return 0;
}

/* Decide for one identity's documents into *v: nothing is allowed for an
 * identity that is not active (reason inactive_reason), the admin flag
 * allows all, an unreadable document denies. 0, or -errno. */
static int decide_for(struct db *d, const char *id, const char *tenant,
		      struct policy_request *q, struct policy_attr *pa,
		      const char *inactive_reason, struct verdict *v)
{
	struct docs s = {0};
	const char *sid = NULL;
	int rc;

	free(v->sid);
	*v = (struct verdict){.e = POLICY_DENY_DEFAULT};
	if ((rc = docs_load(d, id, tenant, &s)) < 0)
		return rc;
	if (!s.active) {
		v->reason = inactive_reason;
		snprintf(v->names, sizeof(v->names), "identity %s", id);
	} else if (s.admin) {
		v->e = POLICY_ALLOW;
	} else if (*s.unreadable) {
		v->e = POLICY_DENY_UNREADABLE;
		v->reason = "policy-unreadable";
		snprintf(v->names, sizeof(v->names), "%s", s.unreadable);
	} else if (!s.wants_budget || (rc = budget_attr(d, tenant, q, pa)) == 0) {
		v->e = policy_decide((const struct policy *const *)s.v, s.n, q, &sid);
		v->sid = sid ? xstrdup(sid) : NULL; /* outlives the documents */
	}
	docs_free(&s);
	return rc;
}

/* A sandbox's own token acts for its agent on the sandboxes of its run
 * only: a sandbox whose run label is the token's run (creating one
 * included, so the new sandbox must carry the run), or, for a token without
 * a run, the sandbox it was given to. Everything else (instances, images,
 * volumes, snapshots, secrets, tokens, policies, events) is refused:
 * ACCESS_DENIED reason token-run-scope. 0 when within its scope. */
static int token_scope(const struct principal *p, const char *action,
		       const struct authz_target *t, const char *resource, bc_error *err)
{
	const char *run = "";

	if (!*p->token_sandbox)
		return 0;
	for (size_t i = 0; i < t->n_attrs; i++)
		if (strcmp(t->attrs[i].name, "run") == 0)
			run = t->attrs[i].value;
	if (strcmp(t->type, "compute-sandbox") == 0 &&
	    (*p->token_run ? strcmp(run, p->token_run) == 0 : strcmp(t->id, p->token_sandbox) == 0))
		return 0;
	log_info("identity %s: %s on %s refused: the token of sandbox %s (run '%s') reaches only "
		 "its run's sandboxes", p->id, action, resource, p->token_sandbox, p->token_run);
	bc_error_set(err, BC_ACCESS_DENIED, "this token belongs to sandbox %s and acts only on "
		     "the sandboxes of its run", p->token_sandbox);
	bc_error_detail(err, "action", "%s", action);
	bc_error_detail(err, "resource", "%s", resource);
	return bc_error_detail(err, "reason", "token-run-scope");
}

int authz_decide(rpc_call *c, struct db *d, const char *action, const struct authz_target *t,
		 bc_error *err)
{
	const struct principal *p = ctl_principal(c);
	char resource[160], tenant_res[96], ancestors_buf[160];
	const char *anc[2];
	struct verdict v = {0};
	struct policy_attr pa[6];
	struct policy_request q;
	size_t n_anc = 0;
	int rc = 0;

	snprintf(resource, sizeof(resource), "%s/%s", t->type, t->id);
	if (!p || p->kind != PRINCIPAL_IDENTITY)
		return bc_error_set(err, BC_UNAUTHENTICATED, "no caller");
	if (auth_is_operator(p))
		return 0;
	if (strcmp(p->tenant_id, t->tenant_id) != 0 ||
	    (*p->user_id && (!t->agent_id || strcmp(t->agent_id, p->id) != 0)))
		return bc_error_set(err, BC_NOT_FOUND, "%s not found", resource);
	if ((rc = token_scope(p, action, t, resource, err)) < 0)
		return rc;
	if (t->parent && *t->parent) {
		snprintf(ancestors_buf, sizeof(ancestors_buf), "%s", t->parent);
		anc[n_anc++] = ancestors_buf;
	}
	snprintf(tenant_res, sizeof(tenant_res), "tenant/%s", t->tenant_id);
	anc[n_anc++] = tenant_res;
	pa[0] = (struct policy_attr){"id", p->id};
	pa[1] = (struct policy_attr){"kind", p->identity_kind};
	pa[2] = (struct policy_attr){"tenantId", p->tenant_id};
	pa[3] = (struct policy_attr){"userId", *p->user_id ? p->user_id : p->id};
	pa[4] = (struct policy_attr){"delegationId", p->delegation_id};
	q = (struct policy_request){.action = action, .resource = resource, .ancestors = anc,
				    .n_ancestors = n_anc, .resource_attrs = t->attrs,
				    .n_resource_attrs = t->n_attrs, .principal_attrs = pa,
				    .n_principal_attrs = 5};
	rc = decide_for(d, p->id, p->tenant_id, &q, pa, "identity-inactive", &v);
	/* an agent: its user must be active and allow it too */
	if (rc == 0 && v.e == POLICY_ALLOW && *p->user_id)
		rc = decide_for(d, p->user_id, p->tenant_id, &q, pa, "delegation-user-inactive", &v);
	if (rc < 0) {
		free(v.sid);
		return db_fail(err, rc);
	}
	if (v.e != POLICY_ALLOW) {
		log_info("identity %s: %s on %s refused (%s)", p->id, action, resource,
			 v.reason ? v.reason : v.e == POLICY_DENY_EXPLICIT ? "explicit deny"
									: "no allow");
		rc = refuse(err, action, resource, &v);
	}
	free(v.sid);
	return rc;
}

/* Append s to buf at used as a JSON string; buf has room for twice s plus
 * the quotes. Control characters (never in our attributes) are dropped. */
static size_t json_quote(char *buf, size_t used, const char *s)
{
	buf[used++] = '"';
	for (; *s; s++) {
		if ((unsigned char)*s < 0x20)
			continue;
		if (*s == '"' || *s == '\\')
			buf[used++] = '\\';
		buf[used++] = *s;
	}
	buf[used++] = '"';
	buf[used] = '\0';
	return used;
}

int authz_stage(rpc_call *c, struct db *d, const struct authz_target *t, bc_error *err)
{
	return authz_stage_as(ctl_principal(c), d, t, err);
}

const char *const AUTHZ_STAGE_SQL =
	"INSERT INTO authz_resources (type, id, tenant_id, parent, owner_id, agent_id, attrs, "
	"draft) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, true)";

void authz_stage_q(struct authz_stage_q *q, const struct principal *p,
		   const struct authz_target *t)
{
	size_t len = 3, used;
	char *json;

	for (size_t i = 0; i < t->n_attrs; i++)
		len += 2 * (strlen(t->names[i]) + strlen(t->values[i])) + 8;
	json = xcalloc(1, len);
	used = (size_t)snprintf(json, len, "{");
	for (size_t i = 0; i < t->n_attrs; i++) {
		used += (size_t)snprintf(json + used, len - used, "%s", i ? ", " : "");
		used = json_quote(json, used, t->names[i]);
		used += (size_t)snprintf(json + used, len - used, ": ");
		used = json_quote(json, used, t->values[i]);
	}
	snprintf(json + used, len - used, "}");
	memset(&q->p, 0, sizeof(q->p));
	q->json = json;
	dbp_str(&q->p, t->type);
	dbp_str(&q->p, t->id);
	dbp_str(&q->p, t->tenant_id);
	dbp_str(&q->p, t->parent ? t->parent : "");
	dbp_str(&q->p, *p->user_id ? p->user_id : p->id);
	dbp_nstr(&q->p, *p->user_id ? p->id : NULL);
	dbp_str(&q->p, json);
}

void authz_stage_q_free(struct authz_stage_q *q)
{
	free(q->json);
	q->json = NULL;
}

int authz_stage_as(const struct principal *p, struct db *d, const struct authz_target *t,
		   bc_error *err)
{
	struct authz_stage_q q;
	int rc;

	authz_stage_q(&q, p, t);
	rc = db_exec(d, NULL, AUTHZ_STAGE_SQL, &q.p);
	authz_stage_q_free(&q);
	return rc < 0 ? db_fail(err, rc) : 0;
}

int authz_decide_staged(rpc_call *c, struct db *d, const char *action, const char *type,
			const char *id, bc_error *err)
{
	struct authz_target t = {.type = type, .id = id};
	char tenant[64], parent[128], agent[64];
	struct dbp q = {0};
	PGresult *r = NULL;
	int rc;

	if (auth_is_operator(ctl_principal(c)))
		return 0; /* allowed everything: no need to read the row */
	dbp_str(&q, type);
	dbp_str(&q, id);
	enum { RES_TENANT_ID, RES_PARENT, RES_AGENT_ID, RES_KEY, RES_VALUE };
	rc = db_exec(d, &r, "SELECT a.tenant_id, a.parent, coalesce(a.agent_id, ''), e.key, e.value "
		     "FROM authz_resources a LEFT JOIN LATERAL jsonb_each_text(a.attrs || "
		     "coalesce(a.pending, '{}')) e ON true WHERE a.type = $1 AND a.id = $2 "
		     "ORDER BY e.key", &q);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return bc_error_set(err, BC_NOT_FOUND, "%s/%s not found", type, id);
	}
	snprintf(tenant, sizeof(tenant), "%s", db_val(r, 0, RES_TENANT_ID));
	snprintf(parent, sizeof(parent), "%s", db_val(r, 0, RES_PARENT));
	snprintf(agent, sizeof(agent), "%s", db_val(r, 0, RES_AGENT_ID));
	t.tenant_id = tenant;
	t.parent = parent;
	t.agent_id = *agent ? agent : NULL;
	for (int i = 0; i < PQntuples(r); i++)
		if (db_val(r, i, RES_KEY))
			authz_attr(&t, db_val(r, i, RES_KEY), db_val(r, i, RES_VALUE));
	PQclear(r);
	return authz_decide(c, d, action, &t, err);
}

int authz_commit(struct db *d, const char *type, const char *id, bc_error *err)
{
	struct dbp q = {0};
	int rc;

	dbp_str(&q, type);
	dbp_str(&q, id);
	rc = db_exec(d, NULL, "UPDATE authz_resources SET draft = false WHERE type = $1 AND id = $2",
		     &q);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* ------------------------------------------------------- pending values */

/* Why staging failed: NOT_FOUND without a row, else CONFLICT with how long
 * until the other hold may be taken over (at least 1 s). */
static int pending_refused(struct db *d, const char *type, const char *id, int takeover_seconds,
			   const char *reason, bc_error *err)
{
	_cleanup_free_ char *left = NULL;
	struct dbp q = {0};
	int rc;

	dbp_str(&q, type);
	dbp_str(&q, id);
	dbp_i64(&q, takeover_seconds);
	rc = db_scalar(d, "SELECT greatest(1, ceil(extract(epoch FROM coalesce(pending_at, now()) + "
		       "make_interval(secs => $3) - now())))::bigint FROM authz_resources WHERE "
		       "type = $1 AND id = $2", &q, &left);
	if (rc == -ENOENT)
		return bc_error_set(err, BC_NOT_FOUND, "%s/%s not found", type, id);
	if (rc < 0)
		return db_fail(err, rc);
	bc_error_set(err, BC_CONFLICT, "another change of %s/%s is being decided; retry in %s s",
		     type, id, left ? left : "1");
	bc_error_detail(err, "reason", "%s", reason);
	return bc_error_detail(err, "retryAfterSeconds", "%s", left ? left : "1");
}

int authz_pending_stage(struct db *d, const char *type, const char *id, const char *attrs_json,
			const char *hold, int takeover_seconds, const char *conflict_reason,
			bc_error *err)
{
	PGresult *r = NULL;
	struct dbp q = {0};
	int rc, staged;

	dbp_str(&q, type);
	dbp_str(&q, id);
	dbp_str(&q, attrs_json);
	dbp_str(&q, hold);
	dbp_i64(&q, takeover_seconds);
	/* a concurrent stage waits for our row lock, then sees our hold */
	rc = db_exec(d, &r, "UPDATE authz_resources SET pending = $3::jsonb, pending_hold = $4, "
		     "pending_at = now() WHERE type = $1 AND id = $2 AND (pending IS NULL OR "
		     "coalesce(pending_at, '-infinity') < now() - make_interval(secs => $5)) "
		     "RETURNING 1", &q);
	if (rc < 0)
		return db_fail(err, rc);
	staged = PQntuples(r);
	PQclear(r);
	if (staged)
		return 0;
	return pending_refused(d, type, id, takeover_seconds, conflict_reason, err);
}

int authz_pending_clear(struct db *d, const char *type, const char *id, const char *hold,
			bc_error *err)
{
	struct dbp q = {0};
	int rc;

	dbp_str(&q, type);
	dbp_str(&q, id);
	dbp_str(&q, hold);
	rc = db_exec(d, NULL, "UPDATE authz_resources SET pending = NULL, pending_hold = NULL, "
		     "pending_at = NULL WHERE type = $1 AND id = $2 AND pending_hold = $3", &q);
	return rc < 0 ? db_fail(err, rc) : 0;
}

int authz_pending_owned(struct db *d, const char *type, const char *id, const char *hold,
			bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp q = {0};
	int rc;

	dbp_str(&q, type);
	dbp_str(&q, id);
	dbp_str(&q, hold);
	rc = db_scalar(d, "SELECT coalesce(pending_hold = $3, false) FROM authz_resources WHERE "
		       "type = $1 AND id = $2", &q, &v);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return db_fail(err, rc);
	return v && v[0] == 't';
}
