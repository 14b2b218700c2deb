/* identity.c: workload identity around a sandbox's life (docs/identity.md).
 *
 *   create:  wid_prepare mints the bootstrap value (identity on) or the
 *            24 h token (identity off) before the instance's boot data is
 *            sealed, so the value travels only there; wid_bind records the
 *            task labels, the lifecycle, the pending epoch (the value as its
 *            SHA-256) or the token row, in the create's transaction.
 *   attest:  identity_api.c (a node forwards the guest's attestation).
 *   delete:  wid_revoke_first revokes before anything is deleted; the
 *            instance is deleted only once the revocation committed and
 *            the recognition cache lifetime passed (identity_revoked_at),
 *            by the leader's wid_pass, so no enforcement point can still
 *            honour the identity when the address could be leased again.
 *
 * Nothing here logs above info; each decision is logged once with the
 * sandbox id. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "identity.h"
#include "log.h"
#include "rowmsg.h"
#include "sandboxes.h"
#include "sealed.h"
#include "secrets.h"
#include "util.h"
#include "validate.h"

int wid_check_labels(const char *task, const char *run, const char *agent, bc_error *err)
{
	const struct {
		const char *field, *v;
	} l[] = {{"task", task}, {"run", run}, {"agent", agent}};

	for (size_t i = 0; i < ARRAY_SIZE(l); i++)
		if (l[i].v && *l[i].v && !str_is_printable(l[i].v, WID_LABEL_MAX))
			return invalid(err, l[i].field, "%s must be at most %d printable characters",
				       l[i].field, WID_LABEL_MAX);
	if ((!task || !*task) && ((run && *run) || (agent && *agent)))
		return invalid(err, "task", "run and agent label a task: give task too");
	return 0;
}

int wid_check_switch(const char *v, bool required, bc_error *err)
{
	if ((!*v && !required) || !strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "default"))
		return 0;
	return invalid(err, "identity", "identity must be on, off or default");
}

int wid_template_set(struct db *d, const char *template_id, const char *v, bool renew)
{
	struct dbp p = {0};

	dbp_str(&p, template_id);
	dbp_str(&p, v);
	dbp_bool(&p, renew);
	/* a changed switch is a new instance_version: warm instances made
	 * before have (or lack) the identity client's wait-for-the-host marker
	 * and are never claimed (the bind check) */
	return db_exec(d, NULL, "UPDATE sandbox_templates SET identity = $2, instance_version = "
		       "instance_version + CASE WHEN $3 AND identity <> $2 THEN 1 ELSE 0 END WHERE id = $1",
		       &p);
}

static void secret_new(const char *prefix, char *out, size_t len)
{
	unsigned char raw[32];
	char hex[65];

	if (random_bytes(raw, sizeof(raw)) < 0)
		abort();
	hex_encode(raw, sizeof(raw), hex);
	snprintf(out, len, "%s%s", prefix, hex);
	OPENSSL_cleanse(raw, sizeof(raw));
	OPENSSL_cleanse(hex, sizeof(hex));
}

int wid_prepare(struct db *d, const struct ctl_app *app, const char *template_id,
		const struct principal *creator, struct wid_mint *m, bc_error *err)
{
	_cleanup_free_ char *sw = NULL;
	struct dbp p = {0};
	int rc;

	memset(m, 0, sizeof(*m));
	dbp_str(&p, template_id);
	rc = db_scalar(d, "SELECT identity FROM sandbox_templates WHERE id = $1", &p, &sw);
	if (rc == -ENOENT)
		return 0; /* the template check that follows answers */
	if (rc < 0)
		return db_fail(err, rc);
	m->identity = strcmp(sw, "on") == 0 ||
		      (strcmp(sw, "default") == 0 && app->cfg.identity_enabled);
	if (m->identity)
		secret_new("bcb_", m->bootstrap, sizeof(m->bootstrap));
	else if (creator->kind == PRINCIPAL_IDENTITY && *creator->user_id)
		auth_token_new(m->token, sizeof(m->token)); /* an agent's: scoped to it */
	return 0;
}

void wid_mint_clear(struct wid_mint *m)
{
	OPENSSL_cleanse(m, sizeof(*m));
}

/* The pending epoch of a new sandbox. */
static int insert_epoch(struct db *d, const struct ctl_app *app, const struct wid_mint *m,
			const struct wid_bind_in *in)
{
	char id[64], hash[65];
	struct dbp p = {0};

	id_new("ide", id, sizeof(id));
	sha256_hex(m->bootstrap, strlen(m->bootstrap), hash);
	dbp_str(&p, id);
	dbp_str(&p, in->sandbox_id);
	dbp_str(&p, in->tenant_id);
	dbp_str(&p, in->instance_id);
	dbp_str(&p, hash);
	dbp_i64(&p, app->cfg.identity_bootstrap_seconds);
	return db_exec(d, NULL, "INSERT INTO identity_epochs (id, sandbox_id, tenant_id, "
		       "instance_id, bootstrap_hash, bootstrap_expires_at) VALUES ($1, $2, $3, $4, "
		       "$5, now() + make_interval(secs => $6::int))", &p);
}

/* A warm claim: the value goes through the host. Sealed for the instance
 * (never in the NodeSpec, a log, an event or a commands row), named by
 * instances.identity_bootstrap_ref, which the NodeSpec carries; bcd
 * fetches it with Node.GetBootData bound to the instance. The spec
 * generation is bumped by the claim itself. */
static int seal_for_host(struct db *d, const struct wid_mint *m, const struct wid_bind_in *in)
{
	const struct sealed_owner o = {.kind = "instance", .id = in->instance_id,
				       .tenant_id = in->tenant_id};
	char ref[SEALED_REF_MAX], name[96];
	struct dbp p = {0};
	int rc;

	if ((rc = sealed_put(d, &o, m->bootstrap, strlen(m->bootstrap), ref)) < 0)
		return rc;
	/* recorded as platform-minted, so that no template can name it */
	snprintf(name, sizeof(name), "identity-bootstrap.%s", in->instance_id);
	if ((rc = secrets_record_minted(d, in->tenant_id, "sealed-user-data", name, ref)) < 0)
		return rc;
	dbp_str(&p, in->instance_id);
	dbp_str(&p, ref);
	return db_exec(d, NULL, "UPDATE instances SET identity_bootstrap_ref = $2 WHERE id = $1",
		       &p);
}

/* The 24 h token of a sandbox without identity, for its creator. */
static int insert_token(struct db *d, const struct wid_mint *m, const struct wid_bind_in *in)
{
	char id[64], hash[65], name[128];
	struct dbp p = {0};

	id_new("tok", id, sizeof(id));
	sha256_hex(m->token, strlen(m->token), hash);
	snprintf(name, sizeof(name), "sandbox %s", in->sandbox_id);
	dbp_str(&p, id);
	dbp_str(&p, in->creator->id);
	dbp_str(&p, hash);
	dbp_str(&p, name);
	dbp_i64(&p, WID_TOKEN_SECONDS);
	dbp_str(&p, in->sandbox_id);
	dbp_nstr(&p, in->run);
	return db_exec(d, NULL, "INSERT INTO api_tokens (id, identity_id, token_hash, name, "
		       "expires_at, sandbox_id, run_id) VALUES ($1, $2, $3, $4, now() + "
		       "make_interval(secs => $5::int), $6, $7)", &p);
}

int wid_bind(struct db *d, const struct ctl_app *app, const struct wid_mint *m,
	     const struct wid_bind_in *in, bc_error *err)
{
	const char *life = in->warm ? "bound" : "created-on-demand";
	bool task = in->task && *in->task;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, in->sandbox_id);
	dbp_nstr(&p, in->task);
	dbp_nstr(&p, in->run);
	dbp_nstr(&p, in->agent);
	dbp_bool(&p, m->identity);
	dbp_str(&p, life);
	dbp_bool(&p, task || m->identity);
	/* the lifecycle event only for a sandbox given a task or an identity:
	 * a plain sandbox's life is told by sandbox.created/.ready as before */
	rc = db_exec(d, NULL, "WITH s AS (UPDATE sandboxes SET task_id = $2, run_id = $3, "
		     "agent_label = $4, identity = $5, lifecycle = $6, bound_at = CASE WHEN $2::text "
		     "IS NOT NULL THEN now() END WHERE id = $1 RETURNING *) INSERT INTO events (type, "
		     "subject, tenant_id, data) SELECT CASE WHEN warm THEN 'sandbox.bound' ELSE "
		     "'sandbox.created-on-demand' END, 'sandbox/' || id, "
		     "tenant_id, jsonb_build_object('templateId', template_id, 'instanceId', "
		     "instance_id, 'poolId', pool_id, 'task', task_id, 'run', run_id, 'agent', "
		     "agent_label, 'identity', identity) FROM s WHERE $7", &p);
	if (rc == 0 && m->identity)
		rc = insert_epoch(d, app, m, in);
	if (rc == 0 && m->identity && in->warm)
		rc = seal_for_host(d, m, in);
	else if (rc == 0 && *m->token)
		rc = insert_token(d, m, in);
	if (rc < 0)
		return db_fail(err, rc);
	if (m->identity)
		log_info("sandbox %s: identity epoch pending (bootstrap expires in %d s%s)",
			 in->sandbox_id, app->cfg.identity_bootstrap_seconds,
			 in->warm ? "; delivered through the host" : "");
	return 0;
}

/* ------------------------------------------------------------- revocation */

int wid_revoke_first(struct db *d, const char *sandbox_id)
{
	enum { RV_LIVE, RV_HELD };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, hold;

	dbp_str(&p, sandbox_id);
	/* the open epochs revoked (with whether one was live), the token
	 * revoked, sandbox.identity.revoked for each epoch, and
	 * identity_revoked_at when a live one was revoked (the pass deletes
	 * the instance identity_cache_seconds after it) */
	rc = db_exec(d, &r, "WITH o AS (SELECT id, state FROM identity_epochs WHERE sandbox_id = $1 "
		     "AND state <> 'revoked' FOR UPDATE), e AS (UPDATE identity_epochs x SET state = "
		     "'revoked', revoked_at = now(), revoke_reason = 'sandbox-ended' FROM o WHERE "
		     "x.id = o.id RETURNING x.id, x.address, o.state AS was), t AS (UPDATE api_tokens "
		     "SET revoked_at = now() WHERE sandbox_id = $1 AND revoked_at IS NULL), s AS "
		     "(UPDATE sandboxes SET lifecycle = 'identity-revoked', identity_revoked_at = CASE "
		     "WHEN EXISTS (SELECT 1 FROM e WHERE was = 'live') THEN now() ELSE "
		     "identity_revoked_at END WHERE id = $1 AND EXISTS (SELECT 1 FROM e) RETURNING *), "
		     "v AS (INSERT INTO events (type, subject, tenant_id, data) SELECT "
		     "'sandbox.identity.revoked', 'sandbox/' || s.id, s.tenant_id, jsonb_build_object("
		     "'epochId', e.id, 'instanceId', s.instance_id, 'address', host(e.address), "
		     "'wasLive', e.was = 'live') FROM s, e) SELECT EXISTS (SELECT 1 FROM e WHERE was = "
		     "'live'), coalesce((SELECT identity_revoked_at IS NOT NULL FROM sandboxes WHERE "
		     "id = $1), false)", &p);
	if (rc < 0)
		return rc;
	hold = db_bool(r, 0, RV_LIVE) || db_bool(r, 0, RV_HELD);
	if (db_bool(r, 0, RV_LIVE))
		log_info("sandbox %s: identity revoked; its instance is deleted once the "
			 "recognition cache lifetime has passed", sandbox_id);
	PQclear(r);
	return hold;
}

/* ------------------------------------------------------------------ pass */

#define WID_PASS_BATCH 32

struct wid_pass_arg {
	const struct ctl_app *app;
	int n;
};

/* Deletions held for the recognition cache, finished once it has passed:
 * the mark is cleared so that sbx_delete_locked goes through. */
static int finish_held_tx(struct db *d, void *arg, bc_error *err)
{
	enum { FH_ID, FH_EXPIRED };
	struct wid_pass_arg *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_i64(&p, a->app->cfg.identity_cache_seconds);
	dbp_i64(&p, WID_PASS_BATCH);
	rc = db_exec(d, &r, "WITH c AS (SELECT id FROM sandboxes WHERE identity_revoked_at IS NOT "
		     "NULL AND deleting_at IS NULL AND identity_revoked_at + make_interval(secs => "
		     "$1::int) <= now() ORDER BY identity_revoked_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
		     "UPDATE sandboxes s SET identity_revoked_at = NULL FROM c WHERE s.id = c.id "
		     "RETURNING s.id, s.expired_at IS NOT NULL", &p);
	a->n = 0;
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		rc = sbx_delete_locked(d, db_val(r, i, FH_ID), db_bool(r, i, FH_EXPIRED));
		if (rc == 0)
			log_info("sandbox %s: recognition cache lifetime passed; instance deleted",
				 db_val(r, i, FH_ID));
		a->n++;
	}
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Task-bound sandboxes past their whole life (bound + the max age). */
static int task_age_tx(struct db *d, void *arg, bc_error *err)
{
	struct wid_pass_arg *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_i64(&p, a->app->cfg.sandbox_task_max_age_seconds);
	dbp_i64(&p, WID_PASS_BATCH);
	rc = db_exec(d, &r, "SELECT id FROM sandboxes WHERE bound_at IS NOT NULL AND deleting_at IS "
		     "NULL AND identity_revoked_at IS NULL AND bound_at <= now() - make_interval("
		     "secs => $1::int) ORDER BY bound_at LIMIT $2 FOR UPDATE SKIP LOCKED", &p);
	a->n = 0;
	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		rc = sbx_delete_locked(d, db_val(r, i, COL_ONLY), false);
		if (rc == 0)
			log_info("sandbox %s: bound to its task for %d s: deleted",
				 db_val(r, i, COL_ONLY), a->app->cfg.sandbox_task_max_age_seconds);
		a->n++;
	}
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Live epochs whose capability lease lapsed (never renewed): revoked. */
static int lapsed_tx(struct db *d, void *arg, bc_error *err)
{
	struct wid_pass_arg *a = arg;
	PGresult *r = NULL;
	int rc;

	rc = db_exec(d, &r, "WITH e AS (UPDATE identity_epochs SET state = 'revoked', revoked_at = "
		     "now(), revoke_reason = 'lease-expired' WHERE state = 'live' AND "
		     "lease_expires_at < now() RETURNING *) INSERT INTO events (type, subject, "
		     "tenant_id, data) SELECT 'sandbox.identity.revoked', 'sandbox/' || sandbox_id, "
		     "tenant_id, jsonb_build_object('epochId', id, 'instanceId', instance_id, "
		     "'address', host(address), 'wasLive', true) FROM e RETURNING subject", NULL);
	a->n = rc == 0 ? PQntuples(r) : 0;
	for (int i = 0; i < a->n; i++)
		log_info("%s: identity lease lapsed: revoked", db_val(r, i, COL_ONLY));
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

void wid_pass(struct db *d, const struct ctl_app *app)
{
	static const struct {
		db_tx_fn fn;
		const char *what;
	} steps[] = {
		{finish_held_tx, "held deletions"},
		{task_age_tx, "task-bound sandboxes past their age"},
		{lapsed_tx, "lapsed identity leases"},
	};
	struct wid_pass_arg a = {.app = app};
	bc_error err = {0};

	for (size_t i = 0; i < ARRAY_SIZE(steps); i++)
		if (db_tx(d, "READ COMMITTED", steps[i].fn, &a, &err) < 0)
			log_warn("identity pass: %s: %s", steps[i].what, err.message);
}

void wid_sbx_fill(rpc_call *c, const PGresult *r, int i, int col, Bc__Compute__V1__Sandbox *x)
{
	x->lifecycle = row_str(c, r, i, col + WID_SBX_LIFECYCLE);
	x->task = row_str(c, r, i, col + WID_SBX_TASK);
	x->run = row_str(c, r, i, col + WID_SBX_RUN);
	x->agent = row_str(c, r, i, col + WID_SBX_AGENT);
	x->identity = db_bool(r, i, col + WID_SBX_IDENTITY);
}
