/* join.c: enrolment with a join token, then mTLS for everything else.
 *
 * The first start with an empty state_dir generates a key (node.key, 0600,
 * written before the call) and CSR, calls Node.Join over TLS (the
 * controller is verified with ca_file; no client certificate), and writes
 * ca.pem (the API CA alone), node.id, pool.id and finally node.pem, each
 * atomically. A crash or a lost answer before node.pem is written leaves a
 * node that calls Join again with the same token and the same key: within
 * the controller's join_retry_seconds it gets the same answer. Later starts
 * only load, after finishing a certificate renewal a crash interrupted
 * (renew.pem) and dropping the node CA from a ca.pem written by an older
 * bcd (join_repair_ca). */
#include "join.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "pki.h"
#include "report.h"
#include "runtime.h"
#include "state.h"
#include "util.h"

#define PEM_MAX (256 * 1024)
#define JOIN_TIMEOUT_MS 30000
#define CLIENT_MAX_MESSAGE (64u << 20)

static int read_pem(const char *dir, const char *name, char **ret)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
	char *buf = NULL;
	int e;

	e = file_read_all(path, PEM_MAX, &buf, NULL);
	if (e < 0)
		return e;
	if (!strstr(buf, "-----BEGIN ")) {
		pki_free_secret(buf);
		return -EBADMSG;
	}
	*ret = buf;
	return 0;
}

/* A renewal writes renew.key then renew.pem, then renames them over
 * node.key and node.pem: renew.pem present means the pair is whole, and the
 * switch is finished here; renew.key alone is a renewal that never got its
 * certificate, dropped. */
/* renew-tunnel.pem over tunnel.pem, or (empty: the controller sent none)
 * tunnel.pem removed and tunnel.none written. Gone already: done before. */
static int finish_tunnel(const char *dir)
{
	_cleanup_free_ char *rt = xasprintf("%s/%s", dir, JOIN_RENEW_TUNNEL_FILE);
	_cleanup_free_ char *t = xasprintf("%s/%s", dir, JOIN_TUNNEL_CERT_FILE);
	_cleanup_free_ char *none = xasprintf("%s/%s", dir, JOIN_TUNNEL_NONE_FILE);
	struct stat st;

	if (stat(rt, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (st.st_size > 0) {
		if (unlink(none) < 0 && errno != ENOENT)
			return -errno;
		return rename(rt, t) < 0 ? -errno : 0;
	}
	if ((unlink(t) < 0 && errno != ENOENT) || file_write_atomic(none, "", 0, 0644) < 0)
		return -EIO;
	return unlink(rt) < 0 ? -errno : 0;
}

static int finish_renewal(const char *dir)
{
	_cleanup_free_ char *rk = xasprintf("%s/%s", dir, JOIN_RENEW_KEY_FILE);
	_cleanup_free_ char *rc = xasprintf("%s/%s", dir, JOIN_RENEW_CERT_FILE);
	_cleanup_free_ char *rt = xasprintf("%s/%s", dir, JOIN_RENEW_TUNNEL_FILE);
	_cleanup_free_ char *k = xasprintf("%s/%s", dir, JOIN_KEY_FILE);
	_cleanup_free_ char *c = xasprintf("%s/%s", dir, JOIN_CERT_FILE);
	int e;

	if (access(rc, F_OK) < 0) {
		if ((unlink(rk) < 0 && errno != ENOENT) || (unlink(rt) < 0 && errno != ENOENT))
			return -errno;
		return 0;
	}
	if (rename(rk, k) < 0 && errno != ENOENT)
		return -errno;
	if ((e = finish_tunnel(dir)) < 0)
		return e;
	if (rename(rc, c) < 0)
		return -errno;
	log_info("%s: finished a certificate renewal a stop interrupted", dir);
	return 0;
}

int join_load(const char *state_dir, struct join_creds *ret)
{
	_cleanup_free_ char *cert_path = xasprintf("%s/%s", state_dir, JOIN_CERT_FILE);
	struct join_creds c = {0};
	int e;

	if ((e = finish_renewal(state_dir)) < 0)
		return e;
	if (access(cert_path, F_OK) < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if ((e = read_pem(state_dir, JOIN_CERT_FILE, &c.cert_pem)) < 0 ||
	    (e = read_pem(state_dir, JOIN_KEY_FILE, &c.key_pem)) < 0 ||
	    (e = read_pem(state_dir, JOIN_CA_FILE, &c.ca_pem)) < 0 ||
	    (e = state_read_line(state_dir, JOIN_NODE_ID_FILE, &c.node_id)) < 0)
		goto fail;
	/* pool.id is informational; a node joined by an older bcd may lack it */
	if (state_read_line(state_dir, JOIN_POOL_ID_FILE, &c.pool_id) < 0)
		c.pool_id = xstrdup("");
	/* a node joined before Agent.Tunnel has none until its next renewal */
	if ((e = read_pem(state_dir, JOIN_TUNNEL_CERT_FILE, &c.tunnel_cert_pem)) < 0 && e != -ENOENT)
		goto fail;
	*ret = c;
	return 0;
fail:
	/* -ENOENT here means a half-written state_dir, not "not joined" */
	join_creds_free(&c);
	return e == -ENOENT ? -EBADMSG : e;
}

static int write_file(const char *dir, const char *name, const char *text, int mode)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
	_cleanup_free_ char *line = NULL;

	if (mode != 0600 && !strchr(text, '\n'))
		text = line = xasprintf("%s\n", text);
	return file_write_atomic(path, text, strlen(text), mode);
}

static bool answer_ok(const Bc__Node__V1__JoinResponse *r)
{
	return rt_id_valid(r->node_id) && strstr(r->certificate_pem, "-----BEGIN CERTIFICATE-----") &&
	       strlen(r->certificate_pem) < PEM_MAX && strlen(r->ca_bundle_pem) < PEM_MAX &&
	       strlen(r->tunnel_certificate_pem) < PEM_MAX &&
	       (!*r->tunnel_certificate_pem ||
		strstr(r->tunnel_certificate_pem, "-----BEGIN CERTIFICATE-----")) &&
	       str_is_printable(r->pool_id, 128);
}

int join_save(const char *state_dir, const Bc__Node__V1__JoinResponse *resp, const char *key_pem,
	      const char *ca_fallback)
{
	const char *ca = *resp->ca_bundle_pem ? resp->ca_bundle_pem : ca_fallback;
	int e;

	if (!answer_ok(resp) || !ca || !strstr(ca, "-----BEGIN CERTIFICATE-----"))
		return -EBADMSG;
	if ((e = write_file(state_dir, JOIN_KEY_FILE, key_pem, 0600)) < 0 ||
	    (e = write_file(state_dir, JOIN_CA_FILE, ca, 0644)) < 0 ||
	    (e = write_file(state_dir, JOIN_NODE_ID_FILE, resp->node_id, 0644)) < 0 ||
	    (*resp->pool_id && (e = write_file(state_dir, JOIN_POOL_ID_FILE, resp->pool_id, 0644)) < 0) ||
	    (*resp->tunnel_certificate_pem &&
	     (e = write_file(state_dir, JOIN_TUNNEL_CERT_FILE, resp->tunnel_certificate_pem, 0644)) < 0))
		return e;
	return write_file(state_dir, JOIN_CERT_FILE, resp->certificate_pem, 0644);
}

/* The JoinRequest of cfg; labels point into entries (n_labels of them,
 * plus cpu.model when the config names none: the host's model from
 * /proc/cpuinfo, which memory restores are placed by; the controller takes
 * a node's labels only from its join). */
static void join_request(const struct agent_config *cfg, const char *csr, const char *cpu_model,
			 Bc__Node__V1__JoinRequest *q, Bc__Node__V1__Capacity *cap,
			 Bc__Node__V1__JoinRequest__LabelsEntry *entries,
			 Bc__Node__V1__JoinRequest__LabelsEntry **ptrs)
{
	size_t n = cfg->n_labels;
	bool has_cpu = false;

	q->token = cfg->join_token;
	q->csr_pem = (char *)csr;
	q->hostname = cfg->hostname;
	q->address = cfg->address;
	q->tunnel_address = cfg->tunnel_advertise ? cfg->tunnel_advertise : "";
	cap->vcpus = cfg->capacity_vcpus;
	cap->memory_mib = cfg->capacity_memory_mib;
	cap->disk_gib = cfg->capacity_disk_gib;
	q->capacity = cap;
	for (size_t i = 0; i < cfg->n_labels; i++) {
		bc__node__v1__join_request__labels_entry__init(&entries[i]);
		entries[i].key = cfg->label_list[i].key;
		entries[i].value = cfg->label_list[i].value;
		ptrs[i] = &entries[i];
		has_cpu = has_cpu || strcmp(entries[i].key, "cpu.model") == 0;
	}
	if (!has_cpu && cpu_model && *cpu_model) {
		bc__node__v1__join_request__labels_entry__init(&entries[n]);
		entries[n].key = "cpu.model";
		entries[n].value = (char *)cpu_model;
		ptrs[n] = &entries[n];
		n++;
	}
	q->n_labels = n;
	q->labels = ptrs;
}

/* The key of this enrolment and a CSR for it. node.key is written before
 * the call and kept: a Join retried after a lost answer (or a crash) sends
 * the same key, and the controller gives the same answer. The controller
 * ignores the CSR subject and names the node itself; a fixed CN also spares
 * hostnames longer than X.509 allows. */
static int join_csr(const char *dir, char **ret_csr, char **ret_key)
{
	char *key = NULL;
	int e = read_pem(dir, JOIN_KEY_FILE, &key);

	if (e == 0 && pki_csr_for_key("bcd", key, ret_csr) == 0) {
		*ret_key = key;
		return 0;
	}
	pki_free_secret(key);
	if ((e = pki_csr_new("bcd", ret_csr, ret_key)) < 0)
		return e;
	e = write_file(dir, JOIN_KEY_FILE, *ret_key, 0600);
	if (e < 0) {
		free(*ret_csr);
		pki_free_secret(*ret_key);
	}
	return e;
}

/* The Join call proper: CSR in, answer saved. */
static int join_call(const struct agent_config *cfg, const char *ca, bc_error *err)
{
	Bc__Node__V1__JoinRequest q = BC__NODE__V1__JOIN_REQUEST__INIT;
	Bc__Node__V1__Capacity cap = BC__NODE__V1__CAPACITY__INIT;
	Bc__Node__V1__JoinRequest__LabelsEntry entries[CFG_MAX_LABELS + 1], *ptrs[CFG_MAX_LABELS + 1];
	_cleanup_free_ char *cpuinfo = NULL, *cpu_model = NULL;
	struct rpc_tls tls = {.ca_pem = ca};
	struct rpc_client_opts o = {.target = cfg->controller, .tls = &tls,
				    .max_message_bytes = CLIENT_MAX_MESSAGE};
	ProtobufCMessage *resp = NULL;
	char *csr = NULL, *key = NULL, path[128];
	rpc_client *cl = NULL;
	int e;

	e = join_csr(cfg->state_dir, &csr, &key);
	if (e < 0)
		return bc_error_set(err, BC_INTERNAL, "cannot make a key and CSR: %s", strerror(-e));
	cl = rpc_client_new(&o);
	if (!cl) {
		e = bc_error_set(err, BC_INVALID_CONFIG, "cannot make a client for %s", cfg->controller);
		goto out;
	}
	if (file_read_all("/proc/cpuinfo", 1 << 22, &cpuinfo, NULL) == 0)
		cpu_model = report_cpu_model(cpuinfo);
	join_request(cfg, csr, cpu_model, &q, &cap, entries, ptrs);
	rpc_method_path(&bc__node__v1__node__descriptor, "Join", path, sizeof(path));
	e = rpc_client_unary(cl, path, &q.base, &bc__node__v1__join_response__descriptor, &resp,
			     JOIN_TIMEOUT_MS, err);
	if (e < 0)
		goto out;
	e = join_save(cfg->state_dir, (const Bc__Node__V1__JoinResponse *)resp, key, ca);
	if (e == -EBADMSG)
		e = bc_error_set(err, BC_INVALID_RESPONSE, "Join answer unusable");
	else if (e < 0)
		e = bc_error_set(err, BC_INTERNAL, "cannot write credentials to %s: %s",
				 cfg->state_dir, strerror(-e));
out:
	if (resp)
		protobuf_c_message_free_unpacked(resp, NULL);
	rpc_client_free(cl);
	free(csr);
	pki_free_secret(key);
	return e;
}

int join_enrol(const struct agent_config *cfg, struct join_creds *ret, bc_error *err)
{
	_cleanup_free_ char *ca = NULL;
	int e;

	if (!cfg->join_token || !*cfg->join_token)
		return bc_error_set(err, BC_INVALID_CONFIG,
				    "%s holds no node certificate and no join_token is set",
				    cfg->state_dir);
	if (!cfg->ca_file || !*cfg->ca_file)
		return bc_error_set(err, BC_INVALID_CONFIG, "ca_file is required to join");
	e = file_read_all(cfg->ca_file, PEM_MAX, &ca, NULL);
	if (e < 0)
		return bc_error_set(err, BC_INVALID_CONFIG, "cannot read ca_file %s: %s",
				    cfg->ca_file, strerror(-e));
	e = join_call(cfg, ca, err);
	if (e < 0)
		return e;
	e = join_load(cfg->state_dir, ret);
	if (e < 0)
		return bc_error_set(err, BC_INTERNAL, "credentials written but unreadable: %s",
				    strerror(-e));
	return 0;
}

int join_repair_ca(const char *state_dir, struct join_creds *c, int *ret_dropped)
{
	char *bundle = NULL;
	int dropped = 0, e;

	e = pki_bundle_drop_issuer(c->ca_pem, c->cert_pem, &bundle, &dropped);
	if (e < 0)
		return e;
	if (dropped == 0) {
		free(bundle);
		*ret_dropped = 0;
		return 0;
	}
	if (!strstr(bundle, "-----BEGIN CERTIFICATE-----")) {
		free(bundle);
		return -ENOKEY;
	}
	e = write_file(state_dir, JOIN_CA_FILE, bundle, 0644);
	if (e < 0) {
		free(bundle);
		return e;
	}
	free(c->ca_pem);
	c->ca_pem = bundle;
	*ret_dropped = dropped;
	return 0;
}

/* The answer is a certificate for this node and this key. */
static bool renewal_ok(const struct join_creds *c, const char *csr, const char *cert)
{
	_cleanup_free_ char *cn = NULL;

	return strlen(cert) < PEM_MAX && pki_csr_matches_cert(csr, cert) == 0 &&
	       pki_cert_info(cert, &cn, NULL, NULL) == 0 && strcmp(cn, c->node_id) == 0 &&
	       pki_verify(c->ca_pem, cert) != 0; /* never one the controller's CA signs */
}

/* renew.key, renew-tunnel.pem and renew.pem, then renamed into place
 * (finish_renewal). */
static int renewal_save(const char *dir, const char *key, const char *cert, const char *tunnel)
{
	_cleanup_free_ char *rt = xasprintf("%s/%s", dir, JOIN_RENEW_TUNNEL_FILE);
	int e;

	if ((e = write_file(dir, JOIN_RENEW_KEY_FILE, key, 0600)) < 0 ||
	    (e = file_write_atomic(rt, tunnel, strlen(tunnel), 0644)) < 0 ||
	    (e = write_file(dir, JOIN_RENEW_CERT_FILE, cert, 0644)) < 0)
		return e;
	return finish_renewal(dir);
}

bool join_tunnel_wanted(const char *state_dir, const struct join_creds *c)
{
	_cleanup_free_ char *none = xasprintf("%s/%s", state_dir, JOIN_TUNNEL_NONE_FILE);

	return !c->tunnel_cert_pem && access(none, F_OK) < 0;
}

int join_renew(const char *state_dir, rpc_client *cl, const struct join_creds *c,
	       bc_error *err)
{
	Bc__Node__V1__RenewCertificateRequest q = BC__NODE__V1__RENEW_CERTIFICATE_REQUEST__INIT;
	Bc__Node__V1__RenewCertificateResponse *resp = NULL;
	char *csr = NULL, *key = NULL, path[128];
	int e;

	e = pki_csr_new("bcd", &csr, &key);
	if (e < 0)
		return bc_error_set(err, BC_INTERNAL, "cannot make a key and CSR: %s", strerror(-e));
	q.csr_pem = csr;
	rpc_method_path(&bc__node__v1__node__descriptor, "RenewCertificate", path, sizeof(path));
	e = rpc_client_unary(cl, path, &q.base, &bc__node__v1__renew_certificate_response__descriptor,
			     (ProtobufCMessage **)&resp, JOIN_TIMEOUT_MS, err);
	if (e < 0)
		goto out;
	if (!renewal_ok(c, csr, resp->certificate_pem) ||
	    (*resp->tunnel_certificate_pem && !renewal_ok(c, csr, resp->tunnel_certificate_pem))) {
		e = bc_error_set(err, BC_INVALID_RESPONSE, "RenewCertificate answer unusable");
		goto out;
	}
	e = renewal_save(state_dir, key, resp->certificate_pem, resp->tunnel_certificate_pem);
	if (e < 0)
		e = bc_error_set(err, BC_INTERNAL, "cannot write the new certificate to %s: %s",
				 state_dir, strerror(-e));
out:
	if (resp)
		protobuf_c_message_free_unpacked(&resp->base, NULL);
	free(csr);
	pki_free_secret(key);
	return e;
}

bool join_err_transient(const bc_error *err)
{
	return err->code == BC_UNAVAILABLE || err->code == BC_DEADLINE_EXCEEDED;
}

bool join_err_retired(const bc_error *err)
{
	const char *reason = bc_error_get_detail(err, "reason");

	if (err->code == BC_UNAUTHENTICATED)
		return true;
	return err->code == BC_ACCESS_DENIED && reason && strcmp(reason, "node-retired") == 0;
}

rpc_client *join_client_new(const struct agent_config *cfg, const struct join_creds *creds)
{
	struct rpc_tls tls = {.cert_pem = creds->cert_pem, .key_pem = creds->key_pem,
			      .ca_pem = creds->ca_pem};
	struct rpc_client_opts o = {.target = cfg->controller, .tls = &tls,
				    .max_message_bytes = CLIENT_MAX_MESSAGE};

	return rpc_client_new(&o);
}

void join_creds_free(struct join_creds *c)
{
	if (!c)
		return;
	free(c->node_id);
	free(c->pool_id);
	free(c->cert_pem);
	pki_free_secret(c->key_pem);
	free(c->ca_pem);
	free(c->tunnel_cert_pem);
	*c = (struct join_creds){0};
}
