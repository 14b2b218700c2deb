/* test_pki.c: the deployment PKI. Chains are checked twice, by pki_verify
 * and by the real `openssl verify`, so a mistake in both the code and our
 * reading of OpenSSL does not cancel out. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pki.h"
#include "tap.h"
#include "util.h"

static char tmpdir[] = "/tmp/bc-test-pki-XXXXXX";

static char *tmp_write(const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		abort();
	return path;
}

/* Output (stdout and stderr) of a shell command; exit status in *status. */
static char *run(const char *cmd, int *status)
{
	char buf[4096];
	size_t n = 0;
	FILE *p = popen(cmd, "r");
	int st;

	if (!p)
		abort();
	n = fread(buf, 1, sizeof(buf) - 1, p);
	buf[n] = '\0';
	st = pclose(p);
	if (status)
		*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return xstrdup(buf);
}

static int openssl_verify(const char *ca_path, const char *cert_path, const char *purpose)
{
	char *cmd = xasprintf("openssl verify %s%s -CAfile %s %s 2>&1", purpose ? "-purpose " : "",
			      purpose ? purpose : "", ca_path, cert_path);
	char *out;
	int st;

	out = run(cmd, &st);
	if (st != 0)
		for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
			printf("#   %s\n", l);
	free(out);
	free(cmd);
	return st;
}

static char *openssl_ext(const char *cert_path, const char *ext)
{
	char *cmd = xasprintf("openssl x509 -noout -ext %s -in %s 2>&1", ext, cert_path);
	char *out = run(cmd, NULL);

	free(cmd);
	return out;
}

static char *bio_string(BIO *b)
{
	char *data = NULL;
	long n = BIO_get_mem_data(b, &data);
	char *s = xmalloc((size_t)n + 1);

	memcpy(s, data, (size_t)n);
	s[n] = '\0';
	return s;
}

/* A CSR that asks for CN=evil, CA:TRUE and a SAN of its choosing. */
static char *evil_csr(void)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509_REQ *req = X509_REQ_new();
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	BIO *b = BIO_new(BIO_s_mem());
	char *pem;

	X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(req), "CN", MBSTRING_ASC,
				   (const unsigned char *)"evil", -1, -1, 0);
	sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints,
							 "critical,CA:TRUE"));
	sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name,
							 "DNS:evil.example,IP:6.6.6.6"));
	X509_REQ_add_extensions(req, exts);
	X509_REQ_set_pubkey(req, k);
	X509_REQ_sign(req, k, EVP_sha256());
	PEM_write_bio_X509_REQ(b, req);
	pem = bio_string(b);
	BIO_free(b);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_REQ_free(req);
	EVP_PKEY_free(k);
	return pem;
}

/* A CSR signed by an RSA key: valid, but not a key bc certifies. */
static char *rsa_csr(void)
{
	EVP_PKEY *k = EVP_RSA_gen(1024);
	X509_REQ *req = X509_REQ_new();
	BIO *b = BIO_new(BIO_s_mem());
	char *pem;

	X509_REQ_set_pubkey(req, k);
	X509_REQ_sign(req, k, EVP_sha256());
	PEM_write_bio_X509_REQ(b, req);
	pem = bio_string(b);
	BIO_free(b);
	X509_REQ_free(req);
	EVP_PKEY_free(k);
	return pem;
}

/* The same PEM object with the last byte of its DER flipped: for a CSR that
 * is inside the signature's s value, so it still parses but does not verify. */
static char *flip_last_byte(const char *pem)
{
	BIO *in = BIO_new_mem_buf(pem, -1), *out = BIO_new(BIO_s_mem());
	char *name = NULL, *header = NULL, *s;
	unsigned char *data = NULL;
	long len = 0;

	if (!PEM_read_bio(in, &name, &header, &data, &len) || len < 1)
		abort();
	data[len - 1] ^= 0x01;
	PEM_write_bio(out, name, header, data, len);
	s = bio_string(out);
	OPENSSL_free(name);
	OPENSSL_free(header);
	OPENSSL_free(data);
	BIO_free(in);
	BIO_free(out);
	return s;
}

static int is_hex(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

static const char *const server_sans[] = {"bc-controller", "localhost", "10.0.0.1", "fd00::1",
					  NULL};
static const char *const node_sans[] = {"node-1.internal", "192.0.2.7", NULL};

static char *ca_cert, *ca_key, *ca_path;

static void test_chain(void)
{
	char *srv = NULL, *srv_key = NULL, *cli = NULL, *cli_key = NULL;
	char *srv_path, *cli_path, *out;

	is_int(pki_issue(ca_cert, ca_key, "bc-controller", server_sans, PKI_SERVER, 30, &srv,
			 &srv_key), 0, "issue server cert");
	is_int(pki_issue(ca_cert, ca_key, "operator", NULL, PKI_CLIENT, 30, &cli, &cli_key), 0,
	       "issue client cert without SANs");
	ok(srv_key && strncmp(srv_key, "-----BEGIN PRIVATE KEY-----", 27) == 0,
	   "key is unencrypted PKCS#8 PEM");
	is_int(pki_verify(ca_cert, srv), 0, "server cert verifies");
	is_int(pki_verify(ca_cert, cli), 0, "client cert verifies");
	is_int(pki_verify(ca_cert, ca_cert), 0, "CA verifies against itself");

	srv_path = tmp_write("server.pem", srv);
	cli_path = tmp_write("client.pem", cli);
	is_int(openssl_verify(ca_path, srv_path, NULL), 0, "openssl verify: server");
	is_int(openssl_verify(ca_path, cli_path, NULL), 0, "openssl verify: client");
	is_int(openssl_verify(ca_path, srv_path, "sslserver"), 0, "openssl: server is sslserver");
	is_int(openssl_verify(ca_path, cli_path, "sslclient"), 0, "openssl: client is sslclient");
	ok(openssl_verify(ca_path, srv_path, "sslclient") != 0, "openssl: server is not sslclient");
	ok(openssl_verify(ca_path, cli_path, "sslserver") != 0, "openssl: client is not sslserver");

	out = openssl_ext(srv_path, "subjectAltName");
	ok(strstr(out, "DNS:bc-controller") && strstr(out, "DNS:localhost"), "SAN DNS names");
	ok(strstr(out, "IP Address:10.0.0.1"), "SAN IPv4 literal as IP");
	ok(strstr(out, "IP Address:FD00:0:0:0:0:0:0:1"), "SAN IPv6 literal as IP");
	ok(!strstr(out, "DNS:10.0.0.1") && !strstr(out, "DNS:fd00"), "IP literals not as DNS");
	free(out);
	out = openssl_ext(srv_path, "basicConstraints,keyUsage,extendedKeyUsage");
	ok(strstr(out, "critical") && strstr(out, "CA:FALSE"), "leaf is CA:FALSE, critical");
	ok(strstr(out, "Digital Signature") && !strstr(out, "Certificate Sign"),
	   "leaf keyUsage digitalSignature only");
	ok(strstr(out, "TLS Web Server Authentication") &&
	   !strstr(out, "TLS Web Client Authentication"), "server EKU");
	free(out);
	out = openssl_ext(srv_path, "subjectKeyIdentifier,authorityKeyIdentifier");
	ok(strstr(out, "Subject Key Identifier") && strstr(out, "Authority Key Identifier"),
	   "SKI and AKI present");
	free(out);
	out = openssl_ext(ca_path, "basicConstraints,keyUsage");
	ok(strstr(out, "critical") && strstr(out, "CA:TRUE") && strstr(out, "Certificate Sign"),
	   "CA is CA:TRUE critical with keyCertSign");
	free(out);

	unlink(srv_path);
	unlink(cli_path);
	free(srv_path);
	free(cli_path);
	free(srv);
	free(cli);
	pki_free_secret(srv_key);
	pki_free_secret(cli_key);
}

static void test_csr(void)
{
	char *csr = NULL, *csr_key = NULL, *cert = NULL, *serial = NULL, *cn = NULL;
	char *info_serial = NULL, *evil = evil_csr(), *path, *out, *cmd;

	is_int(pki_sign_csr(ca_cert, ca_key, evil, "node-1", node_sans, PKI_SERVER | PKI_CLIENT,
			    7, &cert, &serial), 0, "sign a CSR that asks for too much");
	is_int(pki_verify(ca_cert, cert), 0, "signed CSR cert verifies");
	is_int(pki_cert_info(cert, &cn, NULL, &info_serial), 0, "cert_info of signed cert");
	is_str(cn, "node-1", "CN is ours, not the CSR's");
	is_str(info_serial, serial, "sign_csr serial matches cert_info");
	path = tmp_write("node.pem", cert);
	is_int(openssl_verify(ca_path, path, "sslserver"), 0, "openssl verify: node as server");
	is_int(openssl_verify(ca_path, path, "sslclient"), 0, "openssl verify: node as client");
	out = openssl_ext(path, "subjectAltName,basicConstraints");
	ok(strstr(out, "DNS:node-1.internal") && strstr(out, "IP Address:192.0.2.7"),
	   "SANs are ours");
	ok(!strstr(out, "evil") && !strstr(out, "6.6.6.6"), "CSR's SANs ignored");
	ok(strstr(out, "CA:FALSE") && !strstr(out, "CA:TRUE"), "CSR's CA:TRUE ignored");
	free(out);
	cmd = xasprintf("openssl x509 -noout -subject -in %s", path);
	out = run(cmd, NULL);
	ok(strstr(out, "CN = node-1") && !strstr(out, "evil"), "openssl sees subject CN=node-1");
	free(out);
	free(cmd);
	unlink(path);
	free(path);
	free(cert);
	free(serial);
	free(cn);
	free(info_serial);
	cert = serial = cn = NULL;

	is_int(pki_csr_new("evil", &csr, &csr_key), 0, "pki_csr_new");
	ok(csr && strstr(csr, "BEGIN CERTIFICATE REQUEST"), "CSR is PEM");
	is_int(pki_sign_csr(ca_cert, ca_key, csr, "agent-7", NULL, PKI_CLIENT, 7, &cert, NULL), 0,
	       "sign own CSR, no serial wanted");
	is_int(pki_cert_info(cert, &cn, NULL, NULL), 0, "cert_info CN only");
	is_str(cn, "agent-7", "CN overridden");
	free(cert);
	free(cn);
	cert = NULL;

	free(evil);
	evil = flip_last_byte(csr);
	is_int(pki_sign_csr(ca_cert, ca_key, evil, "agent-7", NULL, PKI_CLIENT, 7, &cert, NULL),
	       -EACCES, "CSR with a bad signature refused");
	ok(cert == NULL, "no cert on refusal");
	free(evil);
	evil = rsa_csr();
	is_int(pki_sign_csr(ca_cert, ca_key, evil, "agent-7", NULL, PKI_CLIENT, 7, &cert, NULL),
	       -EINVAL, "CSR with a non-P-256 key refused");
	is_int(pki_sign_csr(ca_cert, ca_key, "garbage", "agent-7", NULL, PKI_CLIENT, 7, &cert,
			    NULL), -EBADMSG, "garbage CSR");
	free(evil);
	free(csr);
	pki_free_secret(csr_key);
}

static void test_refusals(void)
{
	char *ca2 = NULL, *ca2_key = NULL, *c = NULL, *k = NULL;
	char *cn = NULL, *serial = NULL;
	int64_t na = 0;
	static const char *const comma[] = {"a.example,IP:1.2.3.4", NULL};
	static const char *const zone[] = {"fe80::1%eth0", NULL};
	static const char *const empty[] = {"", NULL};
	static const char *const nul_cn = "x\x01y";

	is_int(pki_ca_new("other-ca", 30, &ca2, &ca2_key), 0, "second CA");
	is_int(pki_issue(ca2, ca2_key, "x", NULL, PKI_SERVER, 1, &c, &k), 0, "cert from other CA");
	is_int(pki_verify(ca_cert, c), -EACCES, "other CA's cert refused");
	is_int(pki_verify(ca2, c), 0, "other CA's cert verifies against it");
	free(c);
	pki_free_secret(k);
	c = k = NULL;
	is_int(pki_issue(ca_cert, ca2_key, "x", NULL, PKI_SERVER, 1, &c, &k), -EINVAL,
	       "CA cert and key mismatch");

	is_int(pki_verify(ca_cert, "garbage"), -EBADMSG, "verify: garbage cert");
	is_int(pki_verify("garbage", ca_cert), -EBADMSG, "verify: garbage CA");
	is_int(pki_cert_info("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
			     &cn, &na, &serial), -EBADMSG, "cert_info: bad base64 body");
	is_int(pki_cert_info("", &cn, &na, &serial), -EBADMSG, "cert_info: empty");
	ok(cn == NULL && serial == NULL && na == 0, "outputs untouched on failure");
	is_int(pki_issue(ca_cert, "garbage", "x", NULL, PKI_SERVER, 1, &c, &k), -EBADMSG,
	       "issue: garbage CA key");

	is_int(pki_issue(ca_cert, ca_key, "x", NULL, 0, 1, &c, &k), -EINVAL, "usage 0");
	is_int(pki_issue(ca_cert, ca_key, "x", NULL, 4, 1, &c, &k), -EINVAL, "unknown usage bit");
	is_int(pki_issue(ca_cert, ca_key, "x", NULL, PKI_SERVER, 0, &c, &k), -EINVAL, "days 0");
	is_int(pki_issue(ca_cert, ca_key, "", NULL, PKI_SERVER, 1, &c, &k), -EINVAL, "empty CN");
	is_int(pki_issue(ca_cert, ca_key, nul_cn, NULL, PKI_SERVER, 1, &c, &k), -EINVAL,
	       "control char in CN");
	is_int(pki_issue(ca_cert, ca_key,
			 "a-common-name-that-is-longer-than-sixty-four-bytes-which-x509-forbids",
			 NULL, PKI_SERVER, 1, &c, &k), -EINVAL, "CN over 64 bytes");
	is_int(pki_issue(ca_cert, ca_key, "x", comma, PKI_SERVER, 1, &c, &k), -EINVAL,
	       "SAN cannot inject a second name");
	is_int(pki_issue(ca_cert, ca_key, "x", zone, PKI_SERVER, 1, &c, &k), -EINVAL,
	       "SAN with a zone id refused");
	is_int(pki_issue(ca_cert, ca_key, "x", empty, PKI_SERVER, 1, &c, &k), -EINVAL,
	       "empty SAN refused");
	is_int(pki_ca_new("x", 0, &c, &k), -EINVAL, "CA with days 0");
	ok(c == NULL && k == NULL, "nothing returned on refusals");
	free(ca2);
	pki_free_secret(ca2_key);
	pki_free_secret(NULL);
	ok(1, "pki_free_secret(NULL) is a no-op");
}

static void test_info(void)
{
	char *c = NULL, *k = NULL, *c2 = NULL, *k2 = NULL, *cn = NULL, *s = NULL, *s2 = NULL;
	char *path, *out, *cmd;
	int64_t na = 0, want = now_ms() + 90LL * 86400 * 1000;

	is_int(pki_issue(ca_cert, ca_key, "svc", NULL, PKI_SERVER, 90, &c, &k), 0, "issue for info");
	is_int(pki_issue(ca_cert, ca_key, "svc", NULL, PKI_SERVER, 90, &c2, &k2), 0, "issue again");
	is_int(pki_cert_info(c, &cn, &na, &s), 0, "cert_info");
	is_str(cn, "svc", "cert_info CN");
	ok(na > want - 60000 && na <= want + 1000, "notAfter is now + 90 days (%lld vs %lld)",
	   (long long)na, (long long)want);
	ok(is_hex(s) && strlen(s) >= 16 && strlen(s) <= 32, "serial is hex of <= 128 bits: %s",
	   s ? s : "(null)");
	is_int(pki_cert_info(c2, NULL, NULL, &s2), 0, "cert_info serial only");
	ok(s && s2 && strcmp(s, s2) != 0, "serials differ");

	path = tmp_write("svc.pem", c);
	cmd = xasprintf("openssl x509 -noout -serial -in %s", path);
	out = run(cmd, NULL);
	for (char *p = out; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	ok(strstr(out, s) != NULL, "serial matches openssl's (%s)", s);
	free(out);
	free(cmd);
	cmd = xasprintf("date -u -d \"$(openssl x509 -noout -enddate -in %s | cut -d= -f2)\" +%%s",
			path);
	out = run(cmd, NULL);
	is_int(strtoll(out, NULL, 10) * 1000, na, "notAfter matches openssl's");
	free(out);
	free(cmd);
	unlink(path);
	free(path);
	free(cn);
	free(s);
	free(s2);
	free(c);
	free(c2);
	pki_free_secret(k);
	pki_free_secret(k2);
}

/* Node identity (issue 12): validity in seconds, the key a CSR holds, a
 * CSR for an existing key, and a bundle without the CA that issued a
 * certificate (bcd's ca.pem repair). */
static void test_identity(void)
{
	char *csr = NULL, *key = NULL, *csr2 = NULL, *key2 = NULL, *again = NULL, *cert = NULL;
	char *ca2 = NULL, *ca2_key = NULL, *bundle = NULL, *left = NULL, *other = NULL;
	int64_t issued = 0, not_after = 0;
	int dropped = -1;

	is_int(pki_csr_new("bcd", &csr, &key), 0, "CSR for identity tests");
	is_int(pki_csr_new("bcd", &csr2, &key2), 0, "a second key");
	is_int(pki_sign_csr_secs(ca_cert, ca_key, csr, "node-9", NULL, PKI_CLIENT, 59, &cert, NULL),
	       -EINVAL, "a validity under 60 s is refused");
	is_int(pki_sign_csr_secs(ca_cert, ca_key, csr, "node-9", NULL, PKI_CLIENT, 120, &cert, NULL),
	       0, "a certificate valid 120 s");
	is_int(pki_cert_validity(cert, &issued, &not_after), 0, "its validity");
	ok(not_after - issued == 120000, "issued (notBefore + backdate) to notAfter is 120 s");
	ok(issued <= now_ms() + 1000 && issued >= now_ms() - 60000, "issued about now");
	is_int(pki_csr_matches_cert(csr, cert), 0, "the CSR holds the certificate's key");
	is_int(pki_csr_matches_cert(csr2, cert), -EACCES, "another CSR does not");
	is_int(pki_csr_matches_cert("garbage", cert), -EBADMSG, "garbage CSR");
	is_int(pki_csr_for_key("bcd", key, &again), 0, "a CSR for the existing key");
	is_int(pki_csr_matches_cert(again, cert), 0, "it holds the same key");
	is_int(pki_csr_for_key("bcd", "garbage", &other), -EBADMSG, "CSR for a garbage key");

	is_int(pki_ca_new("bc other CA", 30, &ca2, &ca2_key), 0, "a second CA");
	bundle = xasprintf("%s%s", ca2, ca_cert);
	is_int(pki_bundle_drop_issuer(bundle, cert, &left, &dropped), 0, "drop the issuer");
	is_int(dropped, 1, "one dropped");
	is_int(pki_verify(left, cert), -EACCES, "what is left does not verify the certificate");
	is_str(left, ca2, "the other CA is left, unchanged");
	free(left);
	left = NULL;
	is_int(pki_bundle_drop_issuer(ca2, cert, &left, &dropped), 0, "a bundle without the issuer");
	is_int(dropped, 0, "nothing dropped");
	is_str(left, ca2, "bundle kept");
	free(left);
	left = NULL;
	is_int(pki_bundle_drop_issuer(ca_cert, cert, &left, &dropped), 0, "only the issuer");
	ok(dropped == 1 && left && !*left, "everything dropped: an empty bundle");
	is_int(pki_bundle_drop_issuer("garbage", cert, &other, &dropped), -EBADMSG, "garbage bundle");

	free(left);
	free(bundle);
	free(ca2);
	pki_free_secret(ca2_key);
	free(cert);
	free(again);
	free(csr);
	free(csr2);
	pki_free_secret(key);
	pki_free_secret(key2);
}

int main(void)
{
	char *cn = NULL;

	if (!mkdtemp(tmpdir))
		return 1;
	is_int(pki_ca_new("bc test CA", 365, &ca_cert, &ca_key), 0, "CA created");
	ok(ca_cert && strstr(ca_cert, "BEGIN CERTIFICATE"), "CA cert is PEM");
	is_int(pki_cert_info(ca_cert, &cn, NULL, NULL), 0, "CA info");
	is_str(cn, "bc test CA", "CA CN");
	free(cn);
	ca_path = tmp_write("ca.pem", ca_cert);

	test_chain();
	test_csr();
	test_refusals();
	test_info();
	test_identity();

	unlink(ca_path);
	rmdir(tmpdir);
	free(ca_path);
	free(ca_cert);
	pki_free_secret(ca_key);
	done_testing();
}
