/* node_tunnel.c: the controller's side of Agent.Tunnel.
 *
 * Certificates. Every node gets, beside its node certificate (clientAuth
 * only: a node never serves as the controller), a tunnel certificate for
 * the same key (node_join.c): serverAuth only, CN and subjectAltName = the
 * node id, signed by the node CA. bcd serves Agent.Tunnel with it. The
 * controller dials with its own tunnel client certificate (pki_dir/
 * tunnel-client.pem: clientAuth only, CN bc-controller-tunnel, signed by
 * the API CA, the only CA bcd trusts for the controller), made by init or
 * `bc-controller pki add-tunnel-client`, and checks bcd's certificate
 * against the node CA with the node id as the server name: a node cannot
 * answer for another one, and the controller's API server certificate
 * (serverAuth, API CA) is never taken for a node's.
 *
 * Channels. One rpc_client per node, made at its first dial and kept
 * (gRPC reconnects it); a node whose tunnel address changed gets a new one
 * and the old one is kept on a retired list (streams may still use it)
 * until exit. The client certificate is read at the first dial that finds
 * it, so `pki add-tunnel-client` on a running deployment takes effect
 * without a restart. */
#include "node_tunnel.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "bc/node/v1/agent.pb-c.h"
#include "log.h"
#include "pki.h"
#include "tunnel_raw.h"
#include "util.h"

#define CLIENT_DAYS 825
#define PEM_MAX (1 << 20)
#define CONNECT_WAIT_MS 5000
/* bcd's answer comes after its connect to the guest (5 s at most) */
#define RAW_ANSWER_MS 10000
/* each tunnel's HTTP/2 receive window (rpc.h): bounded memory per tunnel,
 * room for two of bcd's TUNNEL_CHUNK_MAX (256 KiB) messages in flight */
#define NODE_TUNNEL_WINDOW (512 * 1024)

bool node_tunnel_address_ok(const char *s)
{
	const char *colon;
	char *end = NULL;
	long port;

	if (!s || !*s)
		return true;
	if (!str_is_printable(s, 255) || strchr(s, ' ') || !(colon = strrchr(s, ':')) || colon == s)
		return false;
	if (!isdigit((unsigned char)colon[1]))
		return false;
	port = strtol(colon + 1, &end, 10);
	return *end == '\0' && port >= 1 && port <= 65535;
}

int node_tunnel_cert(const struct ctl_app *app, const char *csr_pem, const char *node_id,
		     char **ret_pem)
{
	const char *sans[] = {node_id, NULL};

	return pki_sign_csr_secs(app->node_ca_pem, app->node_ca_key_pem, csr_pem, node_id, sans,
				 PKI_SERVER, app->cfg.node_cert_lifetime_seconds, ret_pem, NULL);
}

/* ------------------------------------------------------- client pair */

static char *pair_path(const struct ctl_app *app, const char *ext)
{
	return xasprintf("%s/%s.%s", app->cfg.pki_dir, NODE_TUNNEL_CLIENT_BASE, ext);
}

int node_tunnel_client_create(const struct ctl_app *app, bool refuse_existing)
{
	_cleanup_free_ char *cp = pair_path(app, "pem"), *kp = pair_path(app, "key");
	_cleanup_free_ char *cap = xasprintf("%s/api-ca.pem", app->cfg.pki_dir);
	_cleanup_free_ char *cakp = xasprintf("%s/api-ca.key", app->cfg.pki_dir);
	char *cacert = NULL, *cakey = NULL, *cert = NULL, *key = NULL;
	int r;

	if (access(cp, F_OK) == 0) {
		if (!refuse_existing)
			return 0;
		log_error("pki: %s exists: the deployment has a tunnel client certificate already",
			  cp);
		return -EEXIST;
	}
	if ((r = file_read_all(cap, PEM_MAX, &cacert, NULL)) < 0 ||
	    (r = file_read_all(cakp, PEM_MAX, &cakey, NULL)) < 0) {
		log_error("pki: cannot read the API CA in %s: %s", app->cfg.pki_dir, strerror(-r));
		goto out;
	}
	r = pki_issue(cacert, cakey, NODE_TUNNEL_CLIENT_CN, NULL, PKI_CLIENT, CLIENT_DAYS, &cert,
		      &key);
	if (r == 0)
		r = file_write_atomic(kp, key, strlen(key), 0600);
	if (r == 0)
		r = file_write_atomic(cp, cert, strlen(cert), 0644);
	if (r < 0)
		log_error("pki: cannot write the tunnel client certificate %s: %s", cp, strerror(-r));
	else
		log_info("pki: wrote the tunnel client certificate %s (CN %s, API CA) and its key",
			 cp, NODE_TUNNEL_CLIENT_CN);
out:
	free(cacert);
	pki_free_secret(cakey);
	free(cert);
	pki_free_secret(key);
	return r;
}

int node_tunnel_pki_add(struct ctl_app *app)
{
	if (node_tunnel_client_create(app, true) < 0)
		return 1;
	printf("tunnel client certificate written to %s/%s.pem: no restart needed, the next "
	       "tunnel uses it\n", app->cfg.pki_dir, NODE_TUNNEL_CLIENT_BASE);
	return 0;
}

/* ------------------------------------------------------------ channels */

struct chan {
	char node_id[64];
	char *target;
	rpc_client *client;
	struct chan *next;
};

static struct {
	pthread_mutex_t mu;
	bool loaded;
	char *cert, *key;
	SSL_CTX *raw_ctx;           /* the raw protocol's client context */
	struct chan *chans, *retired;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Read the client pair once it exists. Under T.mu. */
static bool creds_loaded(const struct ctl_app *app)
{
	_cleanup_free_ char *cp = pair_path(app, "pem"), *kp = pair_path(app, "key");
	char *cert = NULL, *key = NULL;

	if (T.loaded)
		return true;
	if (file_read_all(cp, PEM_MAX, &cert, NULL) < 0 ||
	    file_read_all(kp, PEM_MAX, &key, NULL) < 0) {
		free(cert);
		pki_free_secret(key);
		return false;
	}
	T.cert = cert;
	T.key = key;
	T.loaded = true;
	return true;
}

void node_tunnel_check(struct ctl_app *app)
{
	_cleanup_free_ char *cp = pair_path(app, "pem");

	if (access(cp, R_OK) == 0)
		log_info("tunnels: dialling nodes' Agent.Tunnel with %s", cp);
	else
		log_warn("tunnels: no tunnel client certificate (%s): tunnels into instances answer "
			 "UNAVAILABLE; run `bc-controller pki add-tunnel-client`", cp);
}

/* The channel to node at target, made if needed. Under T.mu. */
static rpc_client *chan_get(const struct ctl_app *app, const char *node, const char *target)
{
	struct rpc_tls tls = {.cert_pem = T.cert, .key_pem = T.key, .ca_pem = app->node_ca_pem};
	struct rpc_client_opts o = {.target = target, .tls = &tls, .server_name = node,
				    .stream_window_bytes = NODE_TUNNEL_WINDOW};
	struct chan **pp, *c;

	for (pp = &T.chans; (c = *pp); pp = &c->next) {
		if (strcmp(c->node_id, node) != 0)
			continue;
		if (strcmp(c->target, target) == 0)
			return c->client;
		*pp = c->next;  /* the node moved: a new channel, the old one retired */
		c->next = T.retired;
		T.retired = c;
		break;
	}
	c = xcalloc(1, sizeof(*c));
	snprintf(c->node_id, sizeof(c->node_id), "%s", node);
	c->target = xstrdup(target);
	c->client = rpc_client_new(&o);
	if (!c->client) {
		free(c->target);
		free(c);
		return NULL;
	}
	c->next = T.chans;
	T.chans = c;
	return c->client;
}

/* The node's tunnel address into buf and whether its bcd speaks the raw
 * protocol: 0, or -BC_EDOMAIN. */
static int lookup(struct db *d, const char *node, char *buf, size_t len, bool *raw,
		  bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, node);
	dbp_str(&p, TUNNEL_RAW_CAP);
	enum { NT_ADDRESS, NT_STATE, NT_RAW }; /* the statement's columns */

	rc = db_exec(d, &r, "SELECT tunnel_address, state, coalesce($2 = ANY(capabilities), false) "
		     "FROM nodes WHERE id = $1", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0)
		rc = bc_error_set(err, BC_NOT_FOUND, "node %s not found", node);
	else if (strcmp(db_val(r, 0, NT_STATE), "retired") == 0)
		rc = bc_error_set(err, BC_UNAVAILABLE, "node %s is retired", node);
	else if (!*db_val(r, 0, NT_ADDRESS))
		rc = bc_error_set(err, BC_UNAVAILABLE, "node %s has no tunnel endpoint (its bcd has "
				  "no tunnel_advertise, or predates Agent.Tunnel)", node);
	else
		snprintf(buf, len, "%s", db_val(r, 0, NT_ADDRESS));
	if (rc == 0)
		*raw = db_bool(r, 0, NT_RAW);
	PQclear(r);
	return rc;
}

/* The raw protocol's client context, made once. Under T.mu. */
static SSL_CTX *raw_ctx(const struct ctl_app *app)
{
	char ebuf[256];

	if (!T.raw_ctx && !(T.raw_ctx = tlsc_ctx_new(false, T.cert, T.key, app->node_ca_pem, ebuf,
						      sizeof(ebuf))))
		log_error("tunnels: the tunnel client certificate: %s", ebuf);
	return T.raw_ctx;
}

/* bcd's answer line: 0 for "OK", else bcd's refusal in err. */
static int raw_answer(const char *node_id, char *line, bc_error *err)
{
	char code[40], why[64];
	int n = 0;

	if (strcmp(line, "OK") == 0)
		return 0;
	if (sscanf(line, "ERR %39s %63s %n", code, why, &n) != 2 || n == 0)
		return bc_error_set(err, BC_UNAVAILABLE, "node %s answered the tunnel request "
				    "with %.80s", node_id, line);
	bc_error_set(err, bc_code_from_name(code), "%s", line + n);
	if (strcmp(why, "-") != 0)
		bc_error_detail(err, "reason", "%s", why);
	return -BC_EDOMAIN;
}

static int dial_raw(const struct ctl_app *app, const char *node_id, const char *target,
		    const char *instance_id, const char *tunnel_id, struct tlsc **ret,
		    bc_error *err)
{
	char ebuf[300], line[700];
	struct tlsc *c = NULL;
	SSL_CTX *ctx;
	int r;

	pthread_mutex_lock(&T.mu);
	ctx = raw_ctx(app);
	if (ctx)
		SSL_CTX_up_ref(ctx);
	pthread_mutex_unlock(&T.mu);
	if (!ctx)
		return bc_error_set(err, BC_UNAVAILABLE, "the tunnel client certificate cannot "
				    "be loaded");
	r = tlsc_connect(ctx, target, node_id, CONNECT_WAIT_MS, &c, ebuf, sizeof(ebuf));
	tlsc_ctx_free(ctx);
	if (r < 0) {
		log_info("tunnels: node %s at %s: %s", node_id, target, ebuf);
		return bc_error_set(err, BC_UNAVAILABLE, "node %s cannot be reached at %s (no "
				    "answer, or not with its tunnel certificate): %.120s", node_id,
				    target, ebuf);
	}
	snprintf(line, sizeof(line), TUNNEL_RAW_MAGIC " %s 22 %s\n", instance_id,
		 tunnel_id && *tunnel_id ? tunnel_id : "-");
	if (tlsc_write_all(c, line, strlen(line)) < 0 ||
	    tlsc_read_line(c, line, sizeof(line), RAW_ANSWER_MS) < 0) {
		tlsc_free(c);
		return bc_error_set(err, BC_UNAVAILABLE, "node %s ended the tunnel at once "
				    "(no answer to its request)", node_id);
	}
	if ((r = raw_answer(node_id, line, err)) < 0) {
		tlsc_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

int node_tunnel_dial(struct ctl_app *app, struct db *d, const char *node_id,
		     const char *instance_id, const char *tunnel_id, struct node_tun *ret,
		     bc_error *err)
{
	Bc__Node__V1__TunnelChunk chunk = BC__NODE__V1__TUNNEL_CHUNK__INIT;
	Bc__Node__V1__TunnelTarget open = BC__NODE__V1__TUNNEL_TARGET__INIT;
	char target[256], path[96];
	rpc_client *cl = NULL;
	rpc_stream *st;
	bool raw = false;
	int r;

	memset(ret, 0, sizeof(*ret));
	if ((r = lookup(d, node_id, target, sizeof(target), &raw, err)) < 0)
		return r;
	pthread_mutex_lock(&T.mu);
	if (creds_loaded(app) && !raw)
		cl = chan_get(app, node_id, target);
	r = T.loaded;
	pthread_mutex_unlock(&T.mu);
	if (!r)
		return bc_error_set(err, BC_UNAVAILABLE, "this controller has no tunnel client "
				    "certificate: run `bc-controller pki add-tunnel-client`");
	if (raw)
		return dial_raw(app, node_id, target, instance_id, tunnel_id, &ret->raw, err);
	if (!cl)
		return bc_error_set(err, BC_UNAVAILABLE, "cannot make a channel to node %s at %s",
				    node_id, target);
	if (rpc_client_wait_ready(cl, CONNECT_WAIT_MS) < 0)
		return bc_error_set(err, BC_UNAVAILABLE, "node %s cannot be reached at %s (no "
				    "answer, or not with its tunnel certificate)", node_id, target);
	rpc_method_path(&bc__node__v1__agent__descriptor, "Tunnel", path, sizeof(path));
	st = rpc_stream_open(cl, path, NULL, 0, err);
	if (!st)
		return -BC_EDOMAIN;
	open.instance_id = (char *)instance_id;
	open.port = 22;
	open.tunnel_id = (char *)(tunnel_id ? tunnel_id : "");
	chunk.open = &open;
	if (rpc_stream_send(st, &chunk.base) < 0) {
		ProtobufCMessage *m = NULL;
		r = rpc_stream_recv(st, &bc__node__v1__tunnel_chunk__descriptor, &m, 1000, err);
		if (m)
			protobuf_c_message_free_unpacked(m, NULL);
		if (r >= 0 || r == -ETIMEDOUT)
			bc_error_set(err, BC_UNAVAILABLE, "node %s ended the tunnel at once", node_id);
		rpc_stream_free(st);
		return -BC_EDOMAIN;
	}
	ret->st = st;
	return 0;
}

void node_tun_free(struct node_tun *t)
{
	rpc_stream_free(t->st);
	tlsc_free(t->raw);
	t->st = NULL;
	t->raw = NULL;
}

static void chans_free(struct chan *c)
{
	while (c) {
		struct chan *next = c->next;
		rpc_client_free(c->client);
		free(c->target);
		free(c);
		c = next;
	}
}

void node_tunnel_shutdown(void)
{
	pthread_mutex_lock(&T.mu);
	chans_free(T.chans);
	chans_free(T.retired);
	T.chans = T.retired = NULL;
	tlsc_ctx_free(T.raw_ctx);
	T.raw_ctx = NULL;
	free(T.cert);
	pki_free_secret(T.key);
	T.cert = T.key = NULL;
	T.loaded = false;
	pthread_mutex_unlock(&T.mu);
}
