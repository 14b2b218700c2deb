/* sandbox_exec.c: Sandboxes.Exec, the only way into a sandbox (docs/
 * sandboxes.md, "Run code inside"). One call, decided as
 * compute:sandboxes:exec on the sandbox, answers a short OpenSSH user
 * certificate for the caller's own public key, signed by the deployment's
 * sandbox SSH CA for the principal "<account>@<instanceId>" that the
 * guest's sshd accepts, and a single-use ticket (60 s) for a tunnel to the
 * guest's port 22 through the tunnel gateway (tunnels.c) and the host's
 * bcd. The ticket is stored only as its SHA-256, in the tunnels row that
 * also records who asked (the token's hash), so that the replica relaying
 * the tunnel re-checks the caller every 60 seconds.
 *
 * The certificate ends at most minutes (1..15, default 10) from now, and
 * never after the sandbox's expiry or the caller's token. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "auth.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "log.h"
#include "outbox.h"
#include "rebind.h"
#include "sandbox_exec.h"
#include "sandbox_restore.h"
#include "sandboxes.h"
#include "sshcert.h"
#include "util.h"
#include "validate.h"

#define EXEC_MINUTES_DEFAULT 10
#define EXEC_MINUTES_MAX (SSHCERT_USER_MAX_SECS / 60)
/* a host certificate this close to its end counts as expired */
#define HOST_CERT_MARGIN_MS 60000

/* The request's own checks, before anything is read. */
static int check_exec(const Bc__Compute__V1__ExecSandboxRequest *q, struct sshcert_pubkey *key,
		      int *ret_minutes, bc_error *err)
{
	const char *why = NULL;
	int r;

	if ((r = check_id(err, "sandboxId", "sbx", q->sandbox_id)) < 0)
		return r;
	if (!q->public_key || !*q->public_key)
		return invalid(err, "publicKey", "publicKey is required: one OpenSSH public key "
			       "line (ssh-ed25519 or ecdsa-sha2-nistp256)");
	if (sshcert_pubkey_parse(q->public_key, key, &why) < 0)
		return invalid(err, "publicKey", "publicKey is not usable: %s",
			       why ? why : "not an OpenSSH public key line");
	if (q->minutes == 0)
		*ret_minutes = EXEC_MINUTES_DEFAULT;
	else if (q->minutes < 1 || q->minutes > EXEC_MINUTES_MAX)
		return invalid(err, "minutes", "minutes must be 1..%d", EXEC_MINUTES_MAX);
	else
		*ret_minutes = q->minutes;
	return 0;
}

/* What the grant says of the guest's host certificate. */
struct host_cert {
	bool certified;
	int64_t valid_before; /* epoch ms, 0: none */
};

/* valid, expired (past, or within a minute of, its end) or none. */
static const char *host_cert_state(const struct host_cert *h, int64_t now_ms)
{
	if (!h->certified)
		return "none";
	return h->valid_before - now_ms > HOST_CERT_MARGIN_MS ? "valid" : "expired";
}

/* Everything the tunnels row and the events record of one grant. */
struct grant {
	const char *tenant, *sandbox, *instance, *node, *identity, *token_hash;
	const char *principal_instance; /* whose sshd identity the guest has (rebind.h) */
	char tunnel_id[64], grant_id[64], ticket[80], ticket_hash[65];
	char key_id[SSHCERT_NAME_MAX + 1], principal[SSHCERT_NAME_MAX + 1];
	uint64_t serial;
	int64_t valid_before; /* epoch seconds */
	int64_t ticket_expires_ms;
};

static int publish_grant(struct db *d, const struct grant *g)
{
	struct evd_tunnel ev = {.sandbox_id = g->sandbox, .instance_id = g->instance,
				.node_id = g->node, .tunnel_id = g->tunnel_id,
				.key_id = g->key_id, .principal = g->principal,
				.serial = g->serial, .valid_before = g->valid_before * 1000};
	_cleanup_free_ char *tun = NULL, *exec = NULL, *subj_i = NULL, *subj_s = NULL;
	int r;

	if ((r = evd_tunnel("tunnel.issued", &ev, &tun)) < 0 ||
	    (r = evd_tunnel("sandbox.exec.issued", &ev, &exec)) < 0)
		return r;
	subj_i = xasprintf("instance/%s", g->instance);
	subj_s = xasprintf("sandbox/%s", g->sandbox);
	if ((r = event_publish(d, "tunnel.issued", subj_i, g->tenant, tun)) < 0)
		return r;
	return event_publish(d, "sandbox.exec.issued", subj_s, g->tenant, exec);
}

static int grant_tx(struct db *d, void *arg, bc_error *err)
{
	const struct grant *g = arg;
	struct dbp p = {0};
	char serial[24];
	int rc;

	snprintf(serial, sizeof(serial), "%" PRIu64, g->serial);
	dbp_str(&p, g->tunnel_id);
	dbp_str(&p, g->tenant);
	dbp_str(&p, g->sandbox);
	dbp_str(&p, g->instance);
	dbp_str(&p, g->node);
	dbp_str(&p, g->identity);
	dbp_str(&p, g->token_hash);
	dbp_str(&p, g->grant_id);
	dbp_str(&p, serial);
	dbp_i64(&p, g->valid_before);
	dbp_str(&p, g->ticket_hash);
	dbp_i64(&p, g->ticket_expires_ms);
	rc = db_exec(d, NULL,
		     "INSERT INTO tunnels (id, tenant_id, sandbox_id, instance_id, node_id, "
		     "identity_id, token_hash, grant_id, serial, cert_valid_before, ticket_hash, "
		     "ticket_expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, "
		     "to_timestamp($10), $11, to_timestamp($12 / 1000.0))", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if ((rc = publish_grant(d, g)) < 0)
		return db_fail(err, rc);
	return 0;
}

/* See sandbox_exec.h. */
int sbx_exec_runnable(const char *id, const struct sbx_brief *b, bc_error *err)
{
	if (strcmp(b->state, "ready") != 0) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s is %s: exec needs a ready sandbox",
			     id, b->state);
		return bc_error_detail(err, "state", "%s", b->state);
	}
	if (strcmp(b->instance_state, "running") != 0 || !*b->node_id) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s: its instance %s is %s, not running",
			     id, b->instance_id, b->instance_state);
		return bc_error_detail(err, "instanceState", "%s", b->instance_state);
	}
	return 0;
}

static void fill_answer(rpc_call *c, Bc__Compute__V1__SandboxExecGrant *a, const struct grant *g,
			const struct host_cert *h, int64_t now_ms)
{
	struct ctl_app *app = ctl_app(c);

	a->sandbox_id = rpc_strdup(c, g->sandbox);
	a->instance_id = rpc_strdup(c, g->instance);
	a->node_id = rpc_strdup(c, g->node);
	a->tunnel_id = rpc_strdup(c, g->tunnel_id);
	a->ticket = rpc_strdup(c, g->ticket);
	a->path = rpc_alloc(c, 128 + sizeof(g->ticket));
	snprintf(a->path, 128 + sizeof(g->ticket), "%s?tunnel=%s&ticket=%s", TUNNEL_WS_PATH,
		 g->tunnel_id, g->ticket);
	a->expires_at = g->ticket_expires_ms;
	a->serial = g->serial;
	a->key_id = rpc_strdup(c, g->key_id);
	a->principal = rpc_strdup(c, g->principal);
	a->account = rpc_strdup(c, app->cfg.sandbox_account);
	a->valid_before = g->valid_before * 1000;
	a->host_principal = rpc_strdup(c, g->principal_instance);
	a->host_certificate = rpc_strdup(c, host_cert_state(h, now_ms));
	a->host_certified = strcmp(a->host_certificate, "valid") == 0;
	a->ca_public_key = rpc_strdup(c, app->sandbox_ca_line);
}

/* A new single-use ticket and its hash. */
static void ticket_new(struct grant *g)
{
	unsigned char raw[32];
	char hex[65];

	if (random_bytes(raw, sizeof(raw)) < 0)
		abort();
	hex_encode(raw, sizeof(raw), hex);
	snprintf(g->ticket, sizeof(g->ticket), "bctk_%s", hex);
	sha256_hex(g->ticket, strlen(g->ticket), g->ticket_hash);
}

static int sign_cert(rpc_call *c, const struct sshcert_pubkey *key, int minutes, int64_t now,
		     struct grant *g, const struct sbx_brief *b, char **ret_cert, bc_error *err)
{
	const struct principal *p = ctl_principal(c);
	struct ctl_app *app = ctl_app(c);
	int64_t cap = b->expires_at / 1000;
	struct sshcert_user u;
	int r;

	if (p->token_expires_at > 0 && p->token_expires_at < cap)
		cap = p->token_expires_at;
	if (cap <= now) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox %s expires now: no certificate can be "
			     "issued", g->sandbox);
		return bc_error_detail(err, "reason", "expired");
	}
	u = (struct sshcert_user){.account = app->cfg.sandbox_account,
				  .instance_id = g->principal_instance,
				  .identity_id = g->identity, .sandbox_id = g->sandbox,
				  .grant_id = g->grant_id, .serial = g->serial, .now = now,
				  .minutes = minutes, .cap = cap};
	r = sshcert_sign_user(app->sandbox_ca, key, &u, ret_cert, &g->valid_before);
	if (r < 0)
		return bc_error_set(err, BC_INTERNAL, "cannot sign the certificate: %s",
				    strerror(-r));
	snprintf(g->principal, sizeof(g->principal), "%s@%s", app->cfg.sandbox_account,
		 g->principal_instance);
	snprintf(g->key_id, sizeof(g->key_id), "bc:%s:%s:%s", g->identity, g->sandbox,
		 g->grant_id);
	return 0;
}

int sbx_exec(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret, bc_error *err)
{
	const Bc__Compute__V1__ExecSandboxRequest *q = (const void *)m;
	const struct principal *p = ctl_principal(c);
	Bc__Compute__V1__SandboxExecGrant *a;
	struct sshcert_pubkey key;
	struct sbx_brief b;
	struct rebind_identity who;
	struct host_cert h;
	struct grant g;
	const char *tenant;
	_cleanup_free_ char *cert = NULL;
	int64_t now = now_ms();
	int minutes = 0, r;

	if ((r = auth_tenant(c, q->tenant_id, &tenant, err)) < 0 ||
	    (r = check_exec(q, &key, &minutes, err)) < 0)
		return r;
	if (!ctl_app(c)->sandbox_ca) {
		bc_error_set(err, BC_UNSUPPORTED, "this deployment has no sandbox SSH CA (the "
			     "operator adds one with bc-controller pki add-sandbox-ca)");
		return bc_error_detail(err, "reason", "no-sandbox-ca");
	}
	if ((r = sbx_decide_brief(c, tenant, q->sandbox_id, "compute:sandboxes:exec", &b, err)) < 0 ||
	    (r = sbx_exec_runnable(q->sandbox_id, &b, err)) < 0 ||
	    (r = restore_shares_identity(ctl_db(c), q->sandbox_id, b.instance_id, err)) < 0 ||
	    (r = rebind_exec_identity(ctl_db(c), b.instance_id, &who, err)) < 0)
		return r;
	h = (struct host_cert){.certified = who.host_certified,
			       .valid_before = who.host_cert_valid_before};
	memset(&g, 0, sizeof(g));
	g.principal_instance = who.principal_instance;
	g.tenant = tenant;
	g.sandbox = q->sandbox_id;
	g.instance = b.instance_id;
	g.node = b.node_id;
	g.identity = p->id;
	g.token_hash = p->token_hash;
	g.serial = sshcert_serial_new();
	id_new("tun", g.tunnel_id, sizeof(g.tunnel_id));
	id_new("ssh", g.grant_id, sizeof(g.grant_id));
	ticket_new(&g);
	g.ticket_expires_ms = now + TUNNEL_TICKET_SECONDS * 1000;
	if ((r = sign_cert(c, &key, minutes, now / 1000, &g, &b, &cert, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", grant_tx, &g, err)) < 0)
		return r;
	log_info("exec: sandbox %s instance %s: certificate serial %" PRIu64 " (%s) for %s, "
		 "tunnel %s", g.sandbox, g.instance, g.serial, g.key_id, p->id, g.tunnel_id);
	a = rpc_new(c, &bc__compute__v1__sandbox_exec_grant__descriptor);
	fill_answer(c, a, &g, &h, now);
	a->certificate = rpc_strdup(c, cert);
	*ret = &a->base;
	return 0;
}
