/* node_join.c: how a host becomes a node and keeps its credential. Join
 * (the one Node call without a client certificate) spends a join token and
 * signs the node's CSR with the node CA: a client certificate (clientAuth
 * only, never serverAuth, so a node cannot serve as the controller),
 * subject CN = the new node id and no name the node chose; its serial is
 * recorded, and only that serial is accepted afterwards
 * (nodeapi_check_serial, asked by auth.c on every node call). A Join
 * retried with the same token and the same key within join_retry_seconds
 * gets the same answer. RenewCertificate issues the node a new certificate
 * before expiry, accepted beside the current one until its first use.
 *
 * Both also sign the CSR's key a second time as the node's tunnel
 * certificate (node_tunnel_cert): serverAuth only, CN and subjectAltName =
 * the node id, for bcd's Agent.Tunnel port, where the controller dials the
 * node and checks that name (controller/node_tunnel.c). Its serial is not
 * recorded: it serves, it never authenticates a node to the controller. */
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "log.h"
#include "node.h"
#include "node_tunnel.h"
#include "outbox.h"
#include "pki.h"
#include "util.h"
#include "validate.h"

#define CSR_MAX 16384
#define LABELS_MAX 64

/* ------------------------------------------------------------------ join */

static bool label_ok(const char *k, const char *v)
{
	if (!*k || strlen(k) > 128 || strncmp(k, "bc.dev/cap.", 11) == 0)
		return false;
	for (const char *p = k; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("./_-", *p))
			return false;
	return str_is_printable(v, 256) && !strchr(v, '\t');
}

static int check_join(const Bc__Node__V1__JoinRequest *q, char *jt, char *secret, bc_error *err)
{
	const char *dot;

	if (strncmp(q->token, "bcjt_", 5) != 0 || !(dot = strchr(q->token, '.')) ||
	    dot - q->token != 5 + 26 || strlen(dot + 1) != 48)
		return invalid(err, "token", "token is not a join token");
	snprintf(jt, 64, "jt_%.26s", q->token + 5);
	snprintf(secret, 64, "%s", dot + 1);
	if (!id_valid("jt", jt))
		return invalid(err, "token", "token is not a join token");
	if (!*q->csr_pem || strlen(q->csr_pem) > CSR_MAX ||
	    !strstr(q->csr_pem, "-----BEGIN CERTIFICATE REQUEST-----"))
		return invalid(err, "csrPem", "csrPem must be a PEM certificate request");
	if (!*q->hostname || !str_is_printable(q->hostname, 253) || strchr(q->hostname, ' '))
		return invalid(err, "hostname", "hostname must be 1-253 printable characters");
	if (!*q->address || !str_is_printable(q->address, 255) || strchr(q->address, ' '))
		return invalid(err, "address", "address must be 1-255 printable characters");
	if (!node_tunnel_address_ok(q->tunnel_address))
		return invalid(err, "tunnelAddress", "tunnelAddress must be host:port (at most 255 "
			       "printable characters) or empty");
	if (q->n_labels > LABELS_MAX)
		return invalid(err, "labels", "at most %d labels", LABELS_MAX);
	for (size_t i = 0; i < q->n_labels; i++)
		if (!label_ok(q->labels[i]->key, q->labels[i]->value))
			return invalid(err, "labels", "label %.64s is not allowed", q->labels[i]->key);
	if (q->capacity && (q->capacity->vcpus > 65536 || q->capacity->gpus > 1024))
		return invalid(err, "capacity", "capacity is out of range");
	return 0;
}

struct join {
	const Bc__Node__V1__JoinRequest *q;
	struct ctl_app *app;
	char jt[64], secret[64], node_id[64], pool_id[64];
	char *cert, *serial, *tunnel_cert;
	int64_t not_after;
	bool retried;        /* the answer of an earlier Join, given again */
};

/* Columns of join_tx's SELECT of the token. */
enum { JT_POOL, JT_HASH, JT_LIVE, JT_USED, JT_POOL_LIVE, JT_RETRY_OPEN, JT_NODE, JT_CERT };

static int join_refuse(bc_error *err, const char *reason, const char *msg)
{
	bc_error_set(err, BC_ACCESS_DENIED, "%s", msg);
	return bc_error_detail(err, "reason", "%s", reason);
}

static char *label_lines(const Bc__Node__V1__JoinRequest *q, int which)
{
	size_t len = 1;
	char *s;

	for (size_t i = 0; i < q->n_labels; i++)
		len += strlen(which ? q->labels[i]->value : q->labels[i]->key) + 1;
	s = xcalloc(1, len);
	for (size_t i = 0; i < q->n_labels; i++)
		strcat(strcat(s, i ? "\n" : ""), which ? q->labels[i]->value : q->labels[i]->key);
	return s;
}

static int join_insert(struct db *d, struct join *a, bc_error *err)
{
	const Bc__Node__V1__JoinRequest *q = a->q;
	_cleanup_free_ char *keys = label_lines(q, 0), *vals = label_lines(q, 1);
	struct dbp p = {0};
	int rc;

	dbp_str(&p, a->node_id);
	dbp_str(&p, a->pool_id);
	dbp_str(&p, q->hostname);
	dbp_str(&p, q->address);
	dbp_str(&p, keys);
	dbp_str(&p, vals);
	dbp_u64(&p, q->capacity ? q->capacity->vcpus : 0);
	dbp_u64(&p, q->capacity ? q->capacity->memory_mib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->disk_gib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->gpus : 0);
	dbp_str(&p, a->serial);
	dbp_str(&p, a->cert);
	dbp_i64(&p, a->not_after);
	dbp_str(&p, q->tunnel_address);
	/* the capacity at join is the node's ceiling until the operator sets one */
	rc = db_exec(d, NULL, "INSERT INTO nodes (id, pool_id, hostname, address, labels, cap_vcpus, "
		     "cap_memory_mib, cap_disk_gib, cap_gpus, cert_serial, last_report_at, cert_pem, "
		     "cert_not_after, max_vcpus, max_memory_mib, max_disk_gib, max_gpus, "
		     "tunnel_address) VALUES ($1, $2, $3, $4, jsonb_object(string_to_array($5, "
		     "E'\\n'), string_to_array($6, E'\\n')), $7, $8, $9, $10, $11, now(), $12, "
		     "to_timestamp($13::bigint / 1000.0), $7, $8, $9, $10, $14)", &p);
	p.n = 0;
	dbp_str(&p, a->jt);
	dbp_str(&p, a->node_id);
	if (rc == 0)
		rc = db_exec(d, NULL, "UPDATE join_tokens SET used_at = now(), node_id = $2 WHERE "
			     "id = $1", &p);
	if (rc == 0)
		rc = node_publish(d, "node.joined", a->node_id, a->pool_id);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* A Join retried with the same token: the same answer when it comes within
 * join_retry_seconds of the first and its CSR holds the key the node's
 * certificate was issued for (bcd lost the answer and asks again), else
 * join-token-used. */
static int join_retry(struct join *a, const PGresult *r, bc_error *err)
{
	if (!db_bool(r, 0, JT_RETRY_OPEN) || !*db_val(r, 0, JT_CERT) ||
	    pki_csr_matches_cert(a->q->csr_pem, db_val(r, 0, JT_CERT)) < 0)
		return join_refuse(err, "join-token-used", "join token was already used");
	snprintf(a->node_id, sizeof(a->node_id), "%s", db_val(r, 0, JT_NODE));
	a->cert = xstrdup(db_val(r, 0, JT_CERT));
	a->retried = true;
	return 0;
}

/* A new node: its certificate (clientAuth only, CN = the node id, no
 * names), then its row. */
static int join_new(struct db *d, struct join *a, bc_error *err)
{
	id_new("node", a->node_id, sizeof(a->node_id));
	if (pki_sign_csr_secs(a->app->node_ca_pem, a->app->node_ca_key_pem, a->q->csr_pem,
			      a->node_id, NULL, PKI_CLIENT, a->app->cfg.node_cert_lifetime_seconds,
			      &a->cert, &a->serial) < 0 ||
	    pki_cert_info(a->cert, NULL, &a->not_after, NULL) < 0)
		return invalid(err, "csrPem", "csrPem is not a valid, self-signed request");
	return join_insert(d, a, err);
}

static int join_tx(struct db *d, void *arg, bc_error *err)
{
	struct join *a = arg;
	struct dbp p = {0};
	PGresult *r = NULL;
	char hash[65];
	int rc;

	free(a->cert);
	free(a->serial);
	free(a->tunnel_cert);
	a->cert = a->serial = a->tunnel_cert = NULL;
	a->retried = false;
	dbp_str(&p, a->jt);
	dbp_i64(&p, a->app->cfg.join_retry_seconds);
	rc = db_exec(d, &r, "SELECT t.pool_id, t.secret_hash, t.expires_at > now(), t.used_at IS "
		     "NOT NULL, p.deleted_at IS NULL, t.used_at > now() - make_interval(secs => $2), "
		     "coalesce(t.node_id, ''), coalesce(n.cert_pem, '') FROM join_tokens t JOIN pools "
		     "p ON p.id = t.pool_id LEFT JOIN nodes n ON n.id = t.node_id AND n.state <> "
		     "'retired' WHERE t.id = $1 FOR UPDATE OF t", &p);
	if (rc < 0)
		return db_fail(err, rc);
	sha256_hex(a->secret, strlen(a->secret), hash);
	if (PQntuples(r) == 0 || CRYPTO_memcmp(hash, db_val(r, 0, JT_HASH), 64) != 0)
		rc = join_refuse(err, "join-token-invalid", "join token is not valid");
	else if (db_bool(r, 0, JT_USED))
		rc = join_retry(a, r, err);
	else if (!db_bool(r, 0, JT_LIVE))
		rc = join_refuse(err, "join-token-expired", "join token has expired");
	else if (!db_bool(r, 0, JT_POOL_LIVE))
		rc = bc_error_set(err, BC_NOT_FOUND, "the join token's pool was deleted");
	if (rc == 0)
		snprintf(a->pool_id, sizeof(a->pool_id), "%s", db_val(r, 0, JT_POOL));
	PQclear(r);
	if (rc == 0 && !a->retried)
		rc = join_new(d, a, err);
	if (rc == 0 && node_tunnel_cert(a->app, a->q->csr_pem, a->node_id, &a->tunnel_cert) < 0)
		rc = invalid(err, "csrPem", "csrPem is not a valid, self-signed request");
	return rc;
}

static int node_join(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Node__V1__JoinRequest *q = (const void *)m;
	Bc__Node__V1__JoinResponse *resp;
	struct join a = {.q = q, .app = ctl_app(c)};
	int r;

	if ((r = check_join(q, a.jt, a.secret, err)) < 0)
		return r;
	r = db_tx(ctl_db(c), "READ COMMITTED", join_tx, &a, err);
	OPENSSL_cleanse(a.secret, sizeof(a.secret));
	if (r < 0) {
		log_warn("join refused from %s: %s", rpc_call_peer(c), err->message);
		free(a.cert);
		free(a.serial);
		free(a.tunnel_cert);
		return r;
	}
	resp = rpc_new(c, &bc__node__v1__join_response__descriptor);
	resp->node_id = rpc_strdup(c, a.node_id);
	resp->pool_id = rpc_strdup(c, a.pool_id);
	resp->certificate_pem = rpc_strdup(c, a.cert);
	/* the API CA alone: bcd must never take a node certificate for the
	 * controller's */
	resp->ca_bundle_pem = rpc_strdup(c, a.app->api_ca_pem);
	resp->tunnel_certificate_pem = rpc_strdup(c, a.tunnel_cert);
	if (a.retried)
		log_info("node %s: join retried with the same token and key: same answer",
			 a.node_id);
	else
		log_info("node %s: joined pool %s as %s (%s), certificate serial %s", a.node_id,
			 a.pool_id, q->hostname, q->address, a.serial);
	free(a.cert);
	free(a.serial);
	free(a.tunnel_cert);
	*ret = &resp->base;
	return 0;
}

/* ----------------------------------------------------------- certificate */

/* Make a renewed certificate the only one: its first use. */
static int promote_serial(struct db *d, const char *node, const char *serial, int64_t not_after,
			  const char *old)
{
	struct dbp p = {0};
	int rc;

	dbp_str(&p, node);
	dbp_str(&p, serial);
	dbp_i64(&p, not_after);
	rc = db_exec(d, NULL, "UPDATE nodes SET cert_serial = $2, cert_serial_next = NULL, "
		     "cert_not_after = to_timestamp($3::bigint / 1000.0) WHERE id = $1 AND "
		     "cert_serial_next = $2", &p);
	if (rc == 0)
		log_info("node %s: renewed certificate %s in use; serial %s refused from now on",
			 node, serial, old);
	return rc;
}

/* The columns of nodeapi_check_serial's SELECT. */
enum { SER_CURRENT, SER_NEXT };

/* See node.h. */
int nodeapi_check_serial(struct db *d, const char *node, const char *cert_pem)
{
	_cleanup_free_ char *serial = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	int64_t not_after = 0;
	int rc;

	if (!cert_pem || pki_cert_info(cert_pem, NULL, &not_after, &serial) < 0)
		return -EACCES;
	dbp_str(&p, node);
	rc = db_exec(d, &r, "SELECT cert_serial, coalesce(cert_serial_next, '') FROM nodes WHERE "
		     "id = $1", &p);
	if (rc < 0)
		return rc;
	if (PQntuples(r) == 1 && strcmp(db_val(r, 0, SER_CURRENT), serial) == 0)
		rc = 0;
	else if (PQntuples(r) == 1 && strcmp(db_val(r, 0, SER_NEXT), serial) == 0)
		rc = promote_serial(d, node, serial, not_after, db_val(r, 0, SER_CURRENT));
	else
		rc = -EACCES;
	if (rc == -EACCES)
		log_warn("node %s: certificate serial %s refused: not the one issued (%s)", node,
			 serial, PQntuples(r) == 1 ? db_val(r, 0, SER_CURRENT) : "none");
	PQclear(r);
	return rc;
}

/* A new certificate for the calling node and the key of its CSR: recorded
 * as the next serial, accepted beside the current one until first used. */
static int node_renew(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Node__V1__RenewCertificateRequest *q = (const void *)m;
	struct ctl_app *app = ctl_app(c);
	const char *node = ctl_principal(c)->id;
	Bc__Node__V1__RenewCertificateResponse *resp;
	_cleanup_free_ char *cert = NULL, *serial = NULL, *tunnel = NULL;
	struct dbp p = {0};
	int rc;

	if (!*q->csr_pem || strlen(q->csr_pem) > CSR_MAX ||
	    !strstr(q->csr_pem, "-----BEGIN CERTIFICATE REQUEST-----"))
		return invalid(err, "csrPem", "csrPem must be a PEM certificate request");
	if (pki_sign_csr_secs(app->node_ca_pem, app->node_ca_key_pem, q->csr_pem, node, NULL,
			      PKI_CLIENT, app->cfg.node_cert_lifetime_seconds, &cert, &serial) < 0 ||
	    node_tunnel_cert(app, q->csr_pem, node, &tunnel) < 0)
		return invalid(err, "csrPem", "csrPem is not a valid, self-signed request");
	dbp_str(&p, node);
	dbp_str(&p, serial);
	dbp_str(&p, cert);
	rc = db_exec(ctl_db(c), NULL, "UPDATE nodes SET cert_serial_next = $2, cert_pem = $3 "
		     "WHERE id = $1 AND state <> 'retired'", &p);
	if (rc < 0)
		return db_fail(err, rc);
	log_info("node %s: certificate renewed, serial %s (in force at its first use)", node,
		 serial);
	resp = rpc_new(c, &bc__node__v1__renew_certificate_response__descriptor);
	resp->certificate_pem = rpc_strdup(c, cert);
	resp->tunnel_certificate_pem = rpc_strdup(c, tunnel);
	*ret = &resp->base;
	return 0;
}

const struct rpc_handler *node_join_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Join", RPC_UNARY, {.unary = node_join}},
		{"RenewCertificate", RPC_UNARY, {.unary = node_renew}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
