/* test_agent_join.c: the node's credentials on disk (what Join writes, in
 * which modes, what a later start loads, what a half-written or unusable
 * answer leaves), with real PKI material, and how controller refusals are
 * classified. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/join.h"
#include "agent/renew.h"
#include "pki.h"
#include "tap.h"
#include "util.h"

static char tmpdir[64];

static char *sub(const char *name)
{
	char *d = xasprintf("%s/%s", tmpdir, name);

	mkdir_p(d, 0700);
	return d;
}

static int mode_of(const char *dir, const char *name)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, name);
	struct stat st;

	return stat(p, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

static bool exists(const char *dir, const char *name)
{
	return mode_of(dir, name) >= 0;
}

struct material {
	char *ca_cert, *ca_key, *csr, *key, *cert;
};

static int make_material(struct material *m)
{
	int e = pki_ca_new("test node CA", 1, &m->ca_cert, &m->ca_key);

	if (e == 0)
		e = pki_csr_new("host1", &m->csr, &m->key);
	if (e == 0)
		e = pki_sign_csr(m->ca_cert, m->ca_key, m->csr, "node_01testtesttesttesttesttest",
				 NULL, PKI_CLIENT | PKI_SERVER, 1, &m->cert, NULL);
	return e;
}

static void free_material(struct material *m)
{
	free(m->ca_cert);
	pki_free_secret(m->ca_key);
	free(m->csr);
	pki_free_secret(m->key);
	free(m->cert);
}

static void test_save_load(const struct material *m)
{
	_cleanup_free_ char *dir = sub("ok");
	Bc__Node__V1__JoinResponse r = BC__NODE__V1__JOIN_RESPONSE__INIT;
	struct join_creds c = {0};

	is_int(join_load(dir, &c), -ENOENT, "empty state_dir: not joined");
	r.node_id = "node_01testtesttesttesttesttest";
	r.pool_id = "pool_01x";
	r.certificate_pem = m->cert;
	r.ca_bundle_pem = m->ca_cert;
	is_int(join_save(dir, &r, m->key, NULL), 0, "Join answer saved");
	is_int(mode_of(dir, JOIN_KEY_FILE), 0600, "node.key is 0600");
	is_int(mode_of(dir, JOIN_CERT_FILE), 0644, "node.pem is 0644");
	ok(exists(dir, JOIN_CA_FILE) && exists(dir, JOIN_NODE_ID_FILE) &&
	   exists(dir, JOIN_POOL_ID_FILE), "ca.pem, node.id, pool.id written");
	is_int(join_load(dir, &c), 0, "credentials load");
	is_str(c.node_id, "node_01testtesttesttesttesttest", "node id");
	is_str(c.pool_id, "pool_01x", "pool id");
	is_str(c.cert_pem, m->cert, "certificate");
	is_str(c.key_pem, m->key, "key");
	is_str(c.ca_pem, m->ca_cert, "CA bundle");
	is_int(pki_verify(c.ca_pem, c.cert_pem), 0, "loaded certificate chains to the loaded CA");
	join_creds_free(&c);
	ok(c.key_pem == NULL && c.node_id == NULL, "freed and zeroed");
}

static void test_fallback_ca(const struct material *m)
{
	_cleanup_free_ char *dir = sub("fallback");
	Bc__Node__V1__JoinResponse r = BC__NODE__V1__JOIN_RESPONSE__INIT;
	struct join_creds c = {0};

	r.node_id = "node_01testtesttesttesttesttest";
	r.certificate_pem = m->cert;
	is_int(join_save(dir, &r, m->key, m->ca_cert), 0, "answer without a bundle saved");
	is_int(join_load(dir, &c), 0, "loads");
	is_str(c.ca_pem, m->ca_cert, "ca_file used as ca.pem");
	is_str(c.pool_id, "", "no pool id: empty");
	join_creds_free(&c);
}

static void test_unusable(const struct material *m)
{
	_cleanup_free_ char *dir = sub("bad");
	Bc__Node__V1__JoinResponse r = BC__NODE__V1__JOIN_RESPONSE__INIT;

	r.node_id = "../../etc/passwd";
	r.certificate_pem = m->cert;
	r.ca_bundle_pem = m->ca_cert;
	is_int(join_save(dir, &r, m->key, NULL), -EBADMSG, "node id that is a path refused");
	r.node_id = "node_ok";
	r.certificate_pem = "not a certificate";
	is_int(join_save(dir, &r, m->key, NULL), -EBADMSG, "answer without a certificate refused");
	r.certificate_pem = m->cert;
	r.ca_bundle_pem = "";
	is_int(join_save(dir, &r, m->key, NULL), -EBADMSG, "no bundle and no ca_file refused");
	ok(!exists(dir, JOIN_KEY_FILE) && !exists(dir, JOIN_CERT_FILE),
	   "nothing written for an unusable answer");
}

/* A crash after node.key and before node.pem: the node is not joined. */
static void test_half_written(const struct material *m)
{
	_cleanup_free_ char *dir = sub("half");
	_cleanup_free_ char *key = xasprintf("%s/%s", dir, JOIN_KEY_FILE);
	_cleanup_free_ char *cert = xasprintf("%s/%s", dir, JOIN_CERT_FILE);
	struct join_creds c = {0};

	file_write_atomic(key, m->key, strlen(m->key), 0600);
	is_int(join_load(dir, &c), -ENOENT, "key without node.pem: not joined (joins again)");
	file_write_atomic(cert, m->cert, strlen(m->cert), 0644);
	is_int(join_load(dir, &c), -EBADMSG, "node.pem without node.id: broken, not 'not joined'");
}

static void test_classify(void)
{
	bc_error e = {0};

	bc_error_set(&e, BC_UNAVAILABLE, "down");
	ok(join_err_transient(&e), "UNAVAILABLE is transient");
	bc_error_set(&e, BC_DEADLINE_EXCEEDED, "slow");
	ok(join_err_transient(&e), "DEADLINE_EXCEEDED is transient");
	bc_error_set(&e, BC_ACCESS_DENIED, "token used");
	bc_error_detail(&e, "reason", "join-token-used");
	ok(!join_err_transient(&e), "a used token is final");
	ok(!join_err_retired(&e), "a used token is not retirement");
	bc_error_set(&e, BC_ACCESS_DENIED, "node retired");
	bc_error_detail(&e, "reason", "node-retired");
	ok(join_err_retired(&e), "ACCESS_DENIED reason=node-retired is retirement");
	bc_error_set(&e, BC_UNAUTHENTICATED, "no cert");
	ok(join_err_retired(&e), "UNAUTHENTICATED: the certificate is refused");
	bc_error_set(&e, BC_INVALID_INPUT, "bad");
	ok(!join_err_transient(&e) && !join_err_retired(&e), "INVALID_INPUT is a plain refusal");
}

static void test_enrol_config(void)
{
	struct agent_config cfg;
	struct join_creds c = {0};
	bc_error e = {0};
	_cleanup_free_ char *dir = sub("enrol");

	cfg_init(&cfg);
	free(cfg.state_dir);
	cfg.state_dir = xstrdup(dir);
	cfg.controller = xstrdup("127.0.0.1:1");
	is_int(join_enrol(&cfg, &c, &e), -BC_EDOMAIN, "no join token: refused");
	is_int(e.code, BC_INVALID_CONFIG, "as INVALID_CONFIG");
	cfg.join_token = xstrdup("bcjt_x.y");
	is_int(join_enrol(&cfg, &c, &e), -BC_EDOMAIN, "no ca_file: refused");
	ok(strstr(e.message, "ca_file") != NULL, "message names ca_file");
	cfg.ca_file = xstrdup("/nonexistent/ca.pem");
	is_int(join_enrol(&cfg, &c, &e), -BC_EDOMAIN, "unreadable ca_file: refused");
	is_int(e.code, BC_INVALID_CONFIG, "as INVALID_CONFIG");
	ok(!exists(dir, JOIN_KEY_FILE), "nothing written");
	cfg_free(&cfg);
}

/* When a certificate is renewed: a share of its life after issue. */
static void test_renew_due(void)
{
	is_int((int)(renew_due_ms(1000, 101000, 67) - 1000), 67000, "67 percent of 100 s: 67 s in");
	is_int((int)(renew_due_ms(0, 120000, 50)), 60000, "half of 120 s");
	ok(renew_due_ms(0, 365LL * 86400000, 67) == 365LL * 86400000 / 100 * 67,
	   "a year: no overflow");
	is_int((int)renew_due_ms(5000, 5000, 67), 5000, "no life: due at once");
}

/* ca.pem of an older bcd (the API CA and the node CA): the node CA goes;
 * only the node CA: refused, nothing written. */
static void test_repair_ca(const struct material *m)
{
	_cleanup_free_ char *dir = sub("repair");
	_cleanup_free_ char *both = NULL, *path = xasprintf("%s/%s", dir, JOIN_CA_FILE);
	char *api = NULL, *api_key = NULL, *disk = NULL;
	struct join_creds c = {0};
	int dropped = -1;

	is_int(pki_ca_new("test API CA", 1, &api, &api_key), 0, "an API CA");
	both = xasprintf("%s%s", api, m->ca_cert);
	c.cert_pem = m->cert;
	c.ca_pem = xstrdup(both);
	is_int(file_write_atomic(path, both, strlen(both), 0644), 0, "old ca.pem written");
	is_int(join_repair_ca(dir, &c, &dropped), 0, "repaired");
	is_int(dropped, 1, "the node CA dropped");
	is_str(c.ca_pem, api, "the API CA is left in memory");
	is_int(file_read_all(path, 1 << 20, &disk, NULL), 0, "ca.pem readable");
	is_str(disk, api, "and on disk");
	free(disk);
	disk = NULL;
	is_int(join_repair_ca(dir, &c, &dropped), 0, "again");
	is_int(dropped, 0, "nothing more to drop");
	free(c.ca_pem);
	c.ca_pem = xstrdup(m->ca_cert);
	is_int(file_write_atomic(path, m->ca_cert, strlen(m->ca_cert), 0644), 0, "ca.pem: node CA only");
	is_int(join_repair_ca(dir, &c, &dropped), -ENOKEY, "nothing but the node CA: refused");
	is_int(file_read_all(path, 1 << 20, &disk, NULL), 0, "ca.pem readable");
	is_str(disk, m->ca_cert, "and left as it was");
	free(disk);
	free(c.ca_pem);
	free(api);
	pki_free_secret(api_key);
}

/* A renewal that a stop interrupted: renew.pem present finishes the
 * switch at load, renew.key alone is dropped. */
static void test_renew_files(const struct material *m)
{
	_cleanup_free_ char *dir = sub("renew");
	Bc__Node__V1__JoinResponse r = BC__NODE__V1__JOIN_RESPONSE__INIT;
	_cleanup_free_ char *rk = xasprintf("%s/%s", dir, JOIN_RENEW_KEY_FILE);
	_cleanup_free_ char *rc = xasprintf("%s/%s", dir, JOIN_RENEW_CERT_FILE);
	char *csr = NULL, *key = NULL, *cert = NULL;
	struct join_creds c = {0};

	r.node_id = "node_01testtesttesttesttesttest";
	r.certificate_pem = m->cert;
	r.ca_bundle_pem = m->ca_cert;
	is_int(join_save(dir, &r, m->key, NULL), 0, "joined");
	is_int(pki_csr_new("bcd", &csr, &key), 0, "a new key");
	is_int(pki_sign_csr(m->ca_cert, m->ca_key, csr, "node_01testtesttesttesttesttest", NULL,
			    PKI_CLIENT, 1, &cert, NULL), 0, "its certificate");
	is_int(file_write_atomic(rk, key, strlen(key), 0600), 0, "renew.key");
	is_int(join_load(dir, &c), 0, "renew.key alone: loads");
	is_str(c.key_pem, m->key, "the old key");
	ok(!exists(dir, JOIN_RENEW_KEY_FILE), "renew.key alone is dropped");
	join_creds_free(&c);
	is_int(file_write_atomic(rk, key, strlen(key), 0600), 0, "renew.key");
	is_int(file_write_atomic(rc, cert, strlen(cert), 0644), 0, "renew.pem");
	is_int(join_load(dir, &c), 0, "loads");
	is_str(c.key_pem, key, "the new key");
	is_str(c.cert_pem, cert, "the new certificate");
	ok(!exists(dir, JOIN_RENEW_KEY_FILE) && !exists(dir, JOIN_RENEW_CERT_FILE),
	   "both renamed into place");
	is_int(mode_of(dir, JOIN_KEY_FILE), 0600, "node.key still 0600");
	join_creds_free(&c);
	free(csr);
	pki_free_secret(key);
	free(cert);
}

/* The tunnel certificate: saved at join, renamed into place with a
 * renewal's pair, or, when the controller sent none (empty
 * renew-tunnel.pem), removed and tunnel.none written so bcd does not
 * renew at every start for it; a later one with a certificate clears it. */
static void test_tunnel_files(const struct material *m)
{
	_cleanup_free_ char *dir = sub("tunnel");
	Bc__Node__V1__JoinResponse r = BC__NODE__V1__JOIN_RESPONSE__INIT;
	_cleanup_free_ char *rk = xasprintf("%s/%s", dir, JOIN_RENEW_KEY_FILE);
	_cleanup_free_ char *rc = xasprintf("%s/%s", dir, JOIN_RENEW_CERT_FILE);
	_cleanup_free_ char *rt = xasprintf("%s/%s", dir, JOIN_RENEW_TUNNEL_FILE);
	struct join_creds c = {0};

	r.node_id = "node_01testtesttesttesttesttest";
	r.certificate_pem = m->cert;
	r.ca_bundle_pem = m->ca_cert;
	is_int(join_save(dir, &r, m->key, NULL), 0, "joined without a tunnel certificate");
	is_int(join_load(dir, &c), 0, "loads");
	ok(c.tunnel_cert_pem == NULL, "no tunnel certificate");
	ok(join_tunnel_wanted(dir, &c), "a renewal is wanted for one");
	join_creds_free(&c);
	/* a renewal answered without one */
	is_int(file_write_atomic(rk, m->key, strlen(m->key), 0600), 0, "renew.key");
	is_int(file_write_atomic(rt, "", 0, 0644), 0, "empty renew-tunnel.pem");
	is_int(file_write_atomic(rc, m->cert, strlen(m->cert), 0644), 0, "renew.pem");
	is_int(join_load(dir, &c), 0, "loads");
	ok(exists(dir, JOIN_TUNNEL_NONE_FILE) && !exists(dir, JOIN_RENEW_TUNNEL_FILE),
	   "tunnel.none written, renew-tunnel.pem gone");
	ok(!join_tunnel_wanted(dir, &c), "no renewal wanted at start any more");
	join_creds_free(&c);
	/* one answered with one */
	is_int(file_write_atomic(rk, m->key, strlen(m->key), 0600), 0, "renew.key");
	is_int(file_write_atomic(rt, m->cert, strlen(m->cert), 0644), 0, "renew-tunnel.pem");
	is_int(file_write_atomic(rc, m->cert, strlen(m->cert), 0644), 0, "renew.pem");
	is_int(join_load(dir, &c), 0, "loads");
	is_str(c.tunnel_cert_pem ? c.tunnel_cert_pem : "", m->cert, "tunnel.pem in place");
	ok(!exists(dir, JOIN_TUNNEL_NONE_FILE), "tunnel.none removed");
	ok(!join_tunnel_wanted(dir, &c), "nothing wanted");
	join_creds_free(&c);
	/* a join answer carrying one */
	r.tunnel_certificate_pem = m->cert;
	_cleanup_free_ char *dir2 = sub("tunnel2");
	is_int(join_save(dir2, &r, m->key, NULL), 0, "joined with a tunnel certificate");
	ok(exists(dir2, JOIN_TUNNEL_CERT_FILE), "tunnel.pem written");
	r.tunnel_certificate_pem = "garbage";
	_cleanup_free_ char *dir3 = sub("tunnel3");
	is_int(join_save(dir3, &r, m->key, NULL), -EBADMSG, "a tunnel certificate that is no PEM: refused");
}

int main(void)
{
	struct material m = {0};

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-join-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	if (make_material(&m) < 0) {
		printf("Bail out! cannot make test PKI material\n");
		return 1;
	}
	test_save_load(&m);
	test_fallback_ca(&m);
	test_unusable(&m);
	test_half_written(&m);
	test_classify();
	test_enrol_config();
	test_repair_ca(&m);
	test_renew_files(&m);
	test_tunnel_files(&m);
	test_renew_due();
	free_material(&m);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "# cannot remove %s\n", tmpdir);
	}
	done_testing();
}
