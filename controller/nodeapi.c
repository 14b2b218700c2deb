/* nodeapi.c: the Node API that agents call. Join (the one call without a
 * client certificate) spends a join token and signs the node's CSR with the
 * node CA: a client certificate (clientAuth only, never serverAuth, so a
 * node cannot serve as the controller), subject CN = the new node id and
 * no name the node chose; its serial is recorded, and only that serial is
 * accepted afterwards (nodeapi_check_serial). A Join retried with the same
 * token and the same key within join_retry_seconds gets the same answer.
 * RenewCertificate issues the node a new certificate before expiry.
 * WatchSpec streams the node's NodeSpec whenever its generation moves;
 * Report records what the host runs, its capacity capped at the operator's
 * ceiling; GetBootData hands a node the sealed user data of its own
 * instances. */
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/node/v1/node.pb-c.h"
#include "ctl.h"
#include "event_data.h"
#include "log.h"
#include "nodes.h"
#include "nodespec.h"
#include "pki.h"
#include "sealed.h"
#include "util.h"
#include "watch.h"

#define CSR_MAX 16384
#define LABELS_MAX 64
#define REPORT_INSTANCES_MAX 10000

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
	char *cert, *serial;
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
	char subject[96];
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
	/* the capacity at join is the node's ceiling until the operator sets one */
	rc = db_exec(d, NULL, "INSERT INTO nodes (id, pool_id, hostname, address, labels, cap_vcpus, "
		     "cap_memory_mib, cap_disk_gib, cap_gpus, cert_serial, last_report_at, cert_pem, "
		     "cert_not_after, max_vcpus, max_memory_mib, max_disk_gib, max_gpus) VALUES "
		     "($1, $2, $3, $4, jsonb_object(string_to_array($5, E'\\n'), string_to_array($6, "
		     "E'\\n')), $7, $8, $9, $10, $11, now(), $12, to_timestamp($13::bigint / 1000.0), "
		     "$7, $8, $9, $10)", &p);
	p.n = 0;
	dbp_str(&p, a->jt);
	dbp_str(&p, a->node_id);
	if (rc == 0)
		rc = db_exec(d, NULL, "UPDATE join_tokens SET used_at = now(), node_id = $2 WHERE "
			     "id = $1", &p);
	snprintf(subject, sizeof(subject), "node/%s", a->node_id);
	if (rc == 0)
		rc = event_publish(d, "node.joined", subject, NULL, NULL);
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
	a->cert = a->serial = NULL;
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
	if (rc < 0 || a->retried)
		return rc;
	return join_new(d, a, err);
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
		return r;
	}
	resp = rpc_new(c, &bc__node__v1__join_response__descriptor);
	resp->node_id = rpc_strdup(c, a.node_id);
	resp->pool_id = rpc_strdup(c, a.pool_id);
	resp->certificate_pem = rpc_strdup(c, a.cert);
	/* the API CA alone: bcd must never take a node certificate for the
	 * controller's */
	resp->ca_bundle_pem = rpc_strdup(c, a.app->api_ca_pem);
	if (a.retried)
		log_info("node %s: join retried with the same token and key: same answer",
			 a.node_id);
	else
		log_info("node %s: joined pool %s as %s (%s), certificate serial %s", a.node_id,
			 a.pool_id, q->hostname, q->address, a.serial);
	free(a.cert);
	free(a.serial);
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

/* See ctl.h. */
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
	if (PQntuples(r) == 1 && strcmp(db_val(r, 0, 0), serial) == 0)
		rc = 0;
	else if (PQntuples(r) == 1 && strcmp(db_val(r, 0, 1), serial) == 0)
		rc = promote_serial(d, node, serial, not_after, db_val(r, 0, 0));
	else
		rc = -EACCES;
	if (rc == -EACCES)
		log_warn("node %s: certificate serial %s refused: not the one issued (%s)", node,
			 serial, PQntuples(r) == 1 ? db_val(r, 0, 0) : "none");
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
	_cleanup_free_ char *cert = NULL, *serial = NULL;
	struct dbp p = {0};
	int rc;

	if (!*q->csr_pem || strlen(q->csr_pem) > CSR_MAX ||
	    !strstr(q->csr_pem, "-----BEGIN CERTIFICATE REQUEST-----"))
		return invalid(err, "csrPem", "csrPem must be a PEM certificate request");
	if (pki_sign_csr_secs(app->node_ca_pem, app->node_ca_key_pem, q->csr_pem, node, NULL,
			      PKI_CLIENT, app->cfg.node_cert_lifetime_seconds, &cert, &serial) < 0)
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
	*ret = &resp->base;
	return 0;
}

/* ------------------------------------------------------------- watchspec */

/* The node's spec generation; with pending, plus one while change rows
 * wait to be taken (the report fence, struct report). A retired or
 * unknown node: ACCESS_DENIED node-retired. */
static int read_generation(struct db *d, const char *node, bool pending, uint64_t *ret,
			   bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, node);
	rc = db_scalar(d, pending ? "SELECT CASE WHEN state = 'retired' THEN -1 ELSE "
		       "spec_generation + (EXISTS (SELECT 1 FROM node_spec_changes c WHERE "
		       "c.node_id = $1))::int END FROM nodes WHERE id = $1" :
				    "SELECT CASE WHEN state = 'retired' THEN -1 ELSE spec_generation "
				    "END FROM nodes WHERE id = $1", &p, &v);
	if (rc < 0 && rc != -ENOENT)
		return db_fail(err, rc);
	if (rc == -ENOENT || atoll(v) < 0) {
		bc_error_set(err, BC_ACCESS_DENIED, "node %s is retired", node);
		return bc_error_detail(err, "reason", "node-retired");
	}
	*ret = (uint64_t)atoll(v);
	return 0;
}

/* What a node's stream knows between builds: its last build, and what
 * changed since (the instances the taken change rows named, or all). */
struct spec_state {
	struct nodespec_cache cache;
	bool all;
	char *dirty;
};

static int send_spec(rpc_call *c, const char *node, uint64_t *sent, struct spec_state *ss,
		     bc_error *err)
{
	Bc__Node__V1__NodeSpec *spec = NULL;
	Bc__Node__V1__NodeUpdate up = BC__NODE__V1__NODE_UPDATE__INIT;
	bool whole = ss->all || !ss->cache.spec;
	int r = nodespec_build_delta(ctl_db(c), node, &ss->cache, ss->all, ss->dirty, &spec, err);

	if (r < 0)
		return r;
	ss->all = false;
	free(ss->dirty);
	ss->dirty = NULL;
	if (spec->generation > *sent) {
		up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
		up.spec = spec;
		stream_db_give(c); /* a slow reader never holds a pool connection */
		r = rpc_call_send(c, &up.base);
		if (r == 0) {
			*sent = spec->generation;
			log_debug("node %s: sent spec generation %llu (%zu instances, %s)", node,
				  (unsigned long long)spec->generation, spec->n_instances,
				  whole ? "built whole" : "changed ones read again");
		}
	}
	return r == -ECANCELED ? 0 : r;
}

/* Take the node's spec changes and push a new spec if its generation
 * moved past the one sent, on the call's pool connection. */
static int spec_update(rpc_call *c, const char *node, uint64_t *sent, struct spec_state *ss,
		       bc_error *err)
{
	uint64_t gen = 0;
	int r;

	if ((r = spec_take_changes(ctl_db(c), node, &ss->all, &ss->dirty)) < 0)
		return db_fail(err, r);
	if ((r = read_generation(ctl_db(c), node, false, &gen, err)) < 0)
		return r;
	if (gen > *sent)
		return send_spec(c, node, sent, ss, err);
	return 0;
}

static int node_watch(rpc_call *c, const ProtobufCMessage *m, bc_error *err)
{
	const Bc__Node__V1__WatchSpecRequest *q = (const void *)m;
	struct ctl_app *app = ctl_app(c);
	const char *node = ctl_principal(c)->id;
	struct watch_entry *e = watch_add(app->watches, node);
	uint64_t sent = q->applied_generation, seen = 0, seq = 1;
	struct spec_state ss = {.all = true};
	int64_t resync = 0;
	int r = 0;

	log_info("node %s: watching its spec from generation %llu", node,
		 (unsigned long long)sent);
	while (!app->stopping && !rpc_call_wait_cancelled(c, 0)) {
		if (seq != seen || mono_ms() >= resync) {
			if (mono_ms() >= resync)
				ss.all = true; /* a whole build now and then, whatever changed */
			seen = seq;
			resync = mono_ms() + app->cfg.spec_resync_seconds * 1000LL;
			/* the changes committed since the last take move the
			 * generation once; the spec is built after, so it
			 * carries all of them. A pool connection only for
			 * this: the stream holds none while it waits. */
			if ((r = stream_db_take(c, err)) < 0)
				break;
			r = spec_update(c, node, &sent, &ss, err);
			stream_db_give(c);
			if (r < 0)
				break;
		}
		seq = watch_wait(app->watches, e, seen, 500);
	}
	nodespec_cache_clear(&ss.cache);
	free(ss.dirty);
	watch_remove(app->watches, e);
	log_info("node %s: spec watch ended", node);
	return r;
}

/* ---------------------------------------------------------------- report */

static const char *const states[] = {"provisioning", "starting", "running", "paused",
				     "stopped",      "error",    "deleted"};

static bool state_ok(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(states); i++)
		if (strcmp(s, states[i]) == 0)
			return true;
	return false;
}

/* Newline-separated values for string_to_array: one line per value, an
 * empty value included (the separator goes by count, not length). */
struct lines {
	char *buf;
	size_t len, cap, n;
};

static void lines_add(struct lines *l, const char *s)
{
	size_t n = strlen(s);

	if (l->len + n + 2 > l->cap) {
		l->cap = (l->len + n + 2) * 2;
		l->buf = realloc(l->buf, l->cap);
		if (!l->buf)
			abort();
	}
	if (l->n++)
		l->buf[l->len++] = '\n';
	for (size_t i = 0; i < n; i++) /* a line never holds a newline */
		l->buf[l->len++] = s[i] == '\n' || s[i] == '\t' ? ' ' : s[i];
	l->buf[l->len] = '\0';
}

static const char *lines_str(const struct lines *l)
{
	return l->buf ? l->buf : "";
}

struct report {
	const Bc__Node__V1__StatusReport *q;
	const char *node;
	/* the node's generation, plus one while changes wait to be taken
	 * (node_spec_changes): a host that applied spec_generation has not
	 * seen them, so its report is not taken as complete, and the ack
	 * tells it a newer spec is due (read first by report_fence, again
	 * by report_node last, for the ack) */
	uint64_t spec_generation;
	struct lines ids, st, reasons, deleted, caps, lkeys, lvals;
	struct lines changed; /* instances whose state this report changed */
};

/* Columns of report_node's RETURNING. */
enum { RN_GEN, RN_OLD_STATE, RN_OLD_VCPUS, RN_OLD_MEM, RN_OLD_DISK, RN_OLD_GPUS, RN_VCPUS,
       RN_MEM, RN_DISK, RN_GPUS };

/* Log a change of the node's capacity, and what the host claimed beyond
 * its ceiling. */
static void log_capacity(const struct report *a, const PGresult *r)
{
	const Bc__Node__V1__Capacity *c = a->q->capacity;
	bool capped;

	if (!c)
		return;
	capped = c->vcpus > (uint64_t)db_i64(r, 0, RN_VCPUS) ||
		 c->memory_mib > (uint64_t)db_i64(r, 0, RN_MEM) ||
		 c->disk_gib > (uint64_t)db_i64(r, 0, RN_DISK) ||
		 c->gpus > (uint64_t)db_i64(r, 0, RN_GPUS);
	for (int i = 0; i < 4; i++) {
		if (db_i64(r, 0, RN_OLD_VCPUS + i) == db_i64(r, 0, RN_VCPUS + i))
			continue;
		log_info("node %s: capacity %s/%s/%s/%s vCPU/MiB/GiB/GPU (was %s/%s/%s/%s)%s",
			 a->node, db_val(r, 0, RN_VCPUS), db_val(r, 0, RN_MEM),
			 db_val(r, 0, RN_DISK), db_val(r, 0, RN_GPUS), db_val(r, 0, RN_OLD_VCPUS),
			 db_val(r, 0, RN_OLD_MEM), db_val(r, 0, RN_OLD_DISK),
			 db_val(r, 0, RN_OLD_GPUS),
			 capped ? ": the host reports more, capped at its ceiling" : "");
		return;
	}
	if (capped)
		log_debug("node %s: reports %u/%llu/%llu/%u, capped at its ceiling", a->node,
			  c->vcpus, (unsigned long long)c->memory_mib,
			  (unsigned long long)c->disk_gib, c->gpus);
}

/* The node's row: its report time, applied generation, capabilities (and
 * their bc.dev/cap.* labels; other labels are the operator's and the
 * join's, never a report's), and its capacity, each resource capped at the
 * node's ceiling (max_*: the value at join or `bcctl node set-capacity`). */
static int report_node(struct db *d, struct report *a, bc_error *err)
{
	const Bc__Node__V1__StatusReport *q = a->q;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->node);
	dbp_u64(&p, q->applied_generation);
	dbp_str(&p, lines_str(&a->caps));
	dbp_str(&p, lines_str(&a->lkeys));
	dbp_str(&p, lines_str(&a->lvals));
	dbp_bool(&p, q->capacity != NULL);
	dbp_u64(&p, q->capacity ? q->capacity->vcpus : 0);
	dbp_u64(&p, q->capacity ? q->capacity->memory_mib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->disk_gib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->gpus : 0);
	rc = db_exec(d, &r,
		     "UPDATE nodes n SET last_report_at = now(), applied_generation = greatest("
		     "n.applied_generation, $2::bigint), capabilities = string_to_array($3, E'\\n'), "
		     "labels = (SELECT coalesce(jsonb_object_agg(key, value), '{}') FROM jsonb_each("
		     "n.labels) WHERE key NOT LIKE 'bc.dev/cap.%') || jsonb_object(string_to_array("
		     "$4, E'\\n'), string_to_array($5, E'\\n')), "
		     "cap_vcpus = CASE WHEN $6 THEN least($7::bigint, n.max_vcpus) ELSE n.cap_vcpus END, "
		     "cap_memory_mib = CASE WHEN $6 THEN least($8::bigint, n.max_memory_mib) ELSE "
		     "n.cap_memory_mib END, cap_disk_gib = CASE WHEN $6 THEN least($9::bigint, "
		     "n.max_disk_gib) ELSE n.cap_disk_gib END, cap_gpus = CASE WHEN $6 THEN least("
		     "$10::bigint, n.max_gpus) ELSE n.cap_gpus END, state = CASE WHEN n.state = 'lost' "
		     "THEN 'ready' ELSE n.state END FROM (SELECT state, cap_vcpus, cap_memory_mib, "
		     "cap_disk_gib, cap_gpus FROM nodes WHERE id = $1 FOR UPDATE) old "
		     "WHERE n.id = $1 AND n.state <> 'retired' RETURNING n.spec_generation + (EXISTS ("
		     "SELECT 1 FROM node_spec_changes c WHERE c.node_id = $1))::int, old.state, "
		     "old.cap_vcpus, old.cap_memory_mib, old.cap_disk_gib, old.cap_gpus, n.cap_vcpus, "
		     "n.cap_memory_mib, n.cap_disk_gib, n.cap_gpus",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		bc_error_set(err, BC_ACCESS_DENIED, "node %s is retired", a->node);
		return bc_error_detail(err, "reason", "node-retired");
	}
	a->spec_generation = (uint64_t)db_i64(r, 0, RN_GEN);
	log_capacity(a, r);
	if (strcmp(db_val(r, 0, RN_OLD_STATE), "lost") == 0) {
		char subject[96];
		log_info("node %s: reporting again, no longer lost", a->node);
		snprintf(subject, sizeof(subject), "node/%s", a->node);
		rc = event_publish(d, "node.recovered", subject, NULL, NULL);
	}
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Record the states the host reports, with an instance.<state> event for
 * each change. A report from a host that has not applied the newest spec
 * yet may predate a change of desired state (a start, a pause): from it,
 * only states that match the desired one and errors are taken, so an
 * instance never flaps back for one report. A host's admission refusal
 * (stopped, "ResourcesExhausted: ...") of an instance that never ran keeps
 * it provisioning, stamps refused_at for the reconciler's re-placement
 * (reconcile.c) and publishes instance.refused once. The node and desired
 * state are checked again in the UPDATE itself: a row another transaction
 * changed meanwhile (re-placed, deleted) is re-read there, never written
 * from this host's stale view. */
static int report_instances(struct db *d, struct report *a, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->node);
	dbp_str(&p, lines_str(&a->ids));
	dbp_str(&p, lines_str(&a->st));
	dbp_str(&p, lines_str(&a->reasons));
	dbp_bool(&p, a->q->applied_generation >= a->spec_generation);
	rc = db_exec(d, &r,
		     "WITH r AS (SELECT * FROM unnest(string_to_array($2, E'\\n'), string_to_array("
		     "$3, E'\\n'), string_to_array($4, E'\\n')) AS r(id, state, reason)), c AS ("
		     "SELECT i.id, r.state AS st, coalesce(r.reason, '') AS why, (r.state = 'stopped' "
		     "AND r.reason LIKE 'ResourcesExhausted:%' AND i.running_at IS NULL AND "
		     "i.desired_state = 'running') AS refused FROM instances i JOIN r ON r.id = i.id "
		     "WHERE i.node_id = $1 AND i.desired_state <> 'deleted' AND r.state <> 'deleted' "
		     "AND ($5 OR r.state = 'error' OR r.state = i.desired_state)), u AS (UPDATE "
		     "instances i SET state = CASE WHEN c.refused THEN i.state ELSE c.st END, reason = "
		     "c.why, refused_at = CASE WHEN c.refused THEN coalesce(i.refused_at, now()) END, "
		     "updated_at = now(), running_at = CASE WHEN c.st = 'running' THEN coalesce("
		     "i.running_at, now()) ELSE i.running_at END FROM c WHERE i.id = c.id AND "
		     "i.node_id = $1 AND i.desired_state <> 'deleted' AND ($5 OR c.st = 'error' OR "
		     "c.st = i.desired_state) AND ("
		     "(i.state, i.reason) IS DISTINCT FROM (CASE WHEN c.refused THEN i.state ELSE c.st "
		     "END, c.why) OR (i.refused_at IS NULL) = c.refused) RETURNING i.id, i.tenant_id, "
		     "i.state, i.reason, c.refused, i.sandbox_id, i.warm_template_id) INSERT INTO "
		     "events (type, subject, tenant_id, data) "
		     "SELECT CASE WHEN u.refused THEN 'instance.refused' ELSE 'instance.' || u.state "
		     "END, 'instance/' || u.id, u.tenant_id, jsonb_build_object('nodeId', $1::text, "
		     "'reason', u.reason) || " EVD_INSTANCE_OWNER_SQL("u") " FROM u "
		     "RETURNING substr(subject, 10)",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	a->changed.len = a->changed.n = 0; /* a retried transaction starts over */
	if (a->changed.buf)
		a->changed.buf[0] = '\0';
	for (int i = 0; i < PQntuples(r); i++)
		lines_add(&a->changed, db_val(r, i, 0));
	PQclear(r);
	return 0;
}

/* Deletions the host confirmed: reported deleted, or missing from a
 * complete report of a host that applied every spec we sent it. */
static int report_deletions(struct db *d, struct report *a, bc_error *err)
{
	_cleanup_free_ char *gone = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, a->node);
	dbp_str(&p, lines_str(&a->deleted));
	dbp_str(&p, lines_str(&a->ids));
	dbp_bool(&p, a->q->complete && a->q->applied_generation >= a->spec_generation);
	rc = db_scalar(d, "SELECT string_agg(id, E'\\n') FROM instances WHERE node_id = $1 AND "
		       "desired_state = 'deleted' AND state <> 'deleted' AND (id = ANY "
		       "(string_to_array($2, E'\\n')) OR ($4 AND NOT (id = ANY (string_to_array($3, "
		       "E'\\n')))))", &p, &gone);
	if (rc < 0)
		return db_fail(err, rc);
	if (!gone)
		return 0;
	rc = finish_deletions(d, a->node, gone);
	if (rc > 0)
		log_info("node %s: %d instance deletion(s) finished", a->node, rc);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* The fence a report is judged by (struct report), read without a lock:
 * the node's row is locked only by report_node, last, so a spec push
 * (spec_take_changes bumps the generation on that row) never waits for a
 * report's instance updates. A change committed after this read is one
 * the host's report cannot have seen either way (changes are rows of
 * their own, which no lock on the node holds back). */
static int report_fence(struct db *d, struct report *a, bc_error *err)
{
	return read_generation(d, a->node, true, &a->spec_generation, err);
}

static int report_tx(struct db *d, void *arg, bc_error *err)
{
	struct report *a = arg;
	int rc;

	if ((rc = report_fence(d, a, err)) < 0 || (rc = report_instances(d, a, err)) < 0 ||
	    (rc = report_deletions(d, a, err)) < 0)
		return rc;
	return report_node(d, a, err);
}

static int prepare_report(struct report *a, bc_error *err)
{
	const Bc__Node__V1__StatusReport *q = a->q;

	if (q->n_instances > REPORT_INSTANCES_MAX)
		return invalid(err, "instances", "at most %d instances", REPORT_INSTANCES_MAX);
	for (size_t i = 0; i < q->n_instances; i++) {
		const Bc__Node__V1__InstanceStatus *s = q->instances[i];
		if (!id_valid("inst", s->id) || !state_ok(s->state))
			return invalid(err, "instances", "instances[%zu] has a bad id or state", i);
		if (strcmp(s->state, "deleted") == 0) {
			lines_add(&a->deleted, s->id);
			continue;
		}
		lines_add(&a->ids, s->id);
		lines_add(&a->st, s->state);
		lines_add(&a->reasons, str_is_printable(s->reason, 512) ? s->reason : "");
	}
	for (size_t i = 0; i < q->n_capabilities && i < 64; i++) {
		char key[160];
		if (!str_is_printable(q->capabilities[i], 128))
			return invalid(err, "capabilities", "capabilities[%zu] is not valid", i);
		lines_add(&a->caps, q->capabilities[i]);
		snprintf(key, sizeof(key), "bc.dev/cap.%s", q->capabilities[i]);
		lines_add(&a->lkeys, key);
		lines_add(&a->lvals, "1");
	}
	/* a report's labels are not taken: a node's labels are those it
	 * joined with, so a host cannot relabel itself to draw work */
	return 0;
}

static void report_free(struct report *a)
{
	free(a->ids.buf);
	free(a->st.buf);
	free(a->reasons.buf);
	free(a->deleted.buf);
	free(a->caps.buf);
	free(a->lkeys.buf);
	free(a->lvals.buf);
	free(a->changed.buf);
}

/* Wake the creates waiting in this controller on an instance whose state
 * the report changed (sandbox creates in waiter.c, instance creates in
 * instances.c wait_settled). */
static void wake_waiters(struct ctl_app *app, const struct lines *changed)
{
	char *ids = xstrdup(lines_str(changed)), *save = NULL;

	for (char *id = strtok_r(ids, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
		watch_notify(app->watches, id);
	free(ids);
}

static int node_report(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	struct report a = {.q = (const void *)m, .node = ctl_principal(c)->id};
	Bc__Node__V1__ReportAck *ack;
	int r = prepare_report(&a, err);

	if (r == 0)
		r = db_tx(ctl_db(c), "READ COMMITTED", report_tx, &a, err);
	if (r == 0) {
		log_debug("node %s: report of generation %llu taken, %zu instance(s) changed",
			  a.node, (unsigned long long)a.q->applied_generation, a.changed.n);
		wake_waiters(ctl_app(c), &a.changed);
	}
	report_free(&a);
	if (r < 0)
		return r;
	ack = rpc_new(c, &bc__node__v1__report_ack__descriptor);
	ack->spec_generation = a.spec_generation;
	*ret = &ack->base;
	return 0;
}

/* ------------------------------------------------------------- boot data */

/* The user data of an instance placed on the calling node and not being
 * deleted, named by the ref its InstanceSpec carries. Anything else (another
 * node's instance, a wrong ref, a deleted one) is the same NOT_FOUND, so a
 * node learns nothing about instances that are not its own. The broker
 * releases nothing for a tenant that is not active (suspended, deleting,
 * deleted): ACCESS_DENIED, reason tenant-inactive. */
static int node_boot_data(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	const Bc__Node__V1__GetBootDataRequest *q = (const void *)m;
	const char *node = ctl_principal(c)->id;
	Bc__Node__V1__BootData *bd;
	_cleanup_free_ char *ref = NULL;
	char *data = NULL;
	struct dbp p = {0};
	size_t len = 0;
	int rc;

	if (!id_valid("inst", q->instance_id))
		return invalid(err, "instanceId", "instanceId is not an instance id");
	if (!*q->ref || !str_is_printable(q->ref, SEALED_REF_MAX - 1))
		return invalid(err, "ref", "ref is not a boot data reference");
	dbp_str(&p, q->instance_id);
	dbp_str(&p, node);
	dbp_str(&p, q->ref);
	rc = db_scalar(ctl_db(c), "SELECT CASE WHEN t.state = 'active' THEN i.user_data_ref ELSE "
		       "'' END FROM instances i JOIN tenants t ON t.id = i.tenant_id WHERE i.id = $1 "
		       "AND i.node_id = $2 AND i.user_data_ref = $3 AND i.desired_state <> 'deleted' "
		       "AND i.state NOT IN ('deleting', 'deleted')", &p, &ref);
	if (rc == 0 && !*ref) {
		/* the broker releases nothing for a tenant that is not active */
		log_info("node %s: boot data of instance %s refused: its tenant is not active", node,
			 q->instance_id);
		bc_error_set(err, BC_ACCESS_DENIED, "the tenant of instance %s is not active",
			     q->instance_id);
		return bc_error_detail(err, "reason", "tenant-inactive");
	}
	if (rc == 0)
		rc = sealed_get(ctl_db(c), ref, &data, &len);
	if (rc == -ENOENT) {
		log_info("node %s: boot data of instance %s refused: not its own", node,
			 q->instance_id);
		return bc_error_set(err, BC_NOT_FOUND, "no boot data %s for instance %s on node %s",
				    q->ref, q->instance_id, node);
	}
	if (rc < 0)
		return db_fail(err, rc);
	bd = rpc_new(c, &bc__node__v1__boot_data__descriptor);
	bd->user_data.data = rpc_alloc(c, len ? len : 1);
	memcpy(bd->user_data.data, data, len);
	bd->user_data.len = len;
	OPENSSL_cleanse(data, len);
	free(data);
	log_debug("node %s: boot data of instance %s sent (%zu bytes)", node, q->instance_id, len);
	*ret = &bd->base;
	return 0;
}

int nodeapi_register(rpc_server *s)
{
	static const struct rpc_handler h[] = {
		{"Join", RPC_UNARY, {.unary = node_join}},
		{"WatchSpec", RPC_SERVER_STREAM, {.sstream = node_watch}},
		{"Report", RPC_UNARY, {.unary = node_report}},
		{"GetBootData", RPC_UNARY, {.unary = node_boot_data}},
		{"RenewCertificate", RPC_UNARY, {.unary = node_renew}},
	};

	return rpc_server_add_service(s, &bc__node__v1__node__descriptor, h, ARRAY_SIZE(h));
}
