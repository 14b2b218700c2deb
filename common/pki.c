/* pki.c: the deployment's X.509 material, with the OpenSSL 3 EVP API.
 *
 * One private CA signs every controller, agent and operator certificate.
 * Keys are ECDSA P-256, signatures ECDSA-SHA256, serials 128 random bits.
 * Certificates start five minutes in the past so that a peer whose clock is
 * a little behind accepts them at once.
 *
 * The subject alternative names are built as GENERAL_NAME values, never
 * through OpenSSL's config-string parser, so a caller-supplied name cannot
 * smuggle in a second entry or another extension. A CSR contributes only its
 * public key: subject and requested extensions are ignored.
 *
 * Private keys leave this file only as PEM produced in a secure-memory BIO
 * and copied once into a malloc'd buffer that pki_free_secret wipes.
 * Library code: nothing here logs; OpenSSL's error queue is cleared on every
 * failure so it does not leak into the caller's next TLS call. */
#include "pki.h"

#include <errno.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define PKI_MAX_DAYS 36500	/* a hundred years; beyond that, a typo */
#define PKI_MIN_SECS 60
#define PKI_MAX_SANS 64
#define PKI_MAX_CN 64		/* ub-common-name */
#define PKI_MAX_DNS 253
#define PKI_MAX_PEM (256 * 1024)
#define PKI_SERIAL_BYTES 16

static void x509p(X509 **p) { X509_free(*p); }
static void reqp(X509_REQ **p) { X509_REQ_free(*p); }
static void pkeyp(EVP_PKEY **p) { EVP_PKEY_free(*p); }
static void biop(BIO **p) { BIO_free_all(*p); }
static void storep(X509_STORE **p) { X509_STORE_free(*p); }
static void sctxp(X509_STORE_CTX **p) { X509_STORE_CTX_free(*p); }
static void stackp(STACK_OF(X509) **p) { sk_X509_pop_free(*p, X509_free); }
static void gnamesp(GENERAL_NAMES **p) { GENERAL_NAMES_free(*p); }
static void bnp(BIGNUM **p) { BN_free(*p); }

/* Map a failed OpenSSL call to an errno and drop its queued errors. */
static int ossl_fail(int err)
{
	ERR_clear_error();
	return err;
}

/* Never prompt for a passphrase: encrypted keys are refused. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

static int pem_input_ok(const char *pem)
{
	return pem && strnlen(pem, PKI_MAX_PEM) < PKI_MAX_PEM;
}

static BIO *pem_bio(const char *pem)
{
	return BIO_new_mem_buf(pem, (int)strlen(pem));
}

static int read_cert(const char *pem, X509 **ret)
{
	_cleanup_(biop) BIO *b = NULL;
	X509 *x;

	if (!pem_input_ok(pem))
		return -EINVAL;
	b = pem_bio(pem);
	if (!b)
		return -ENOMEM;
	x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL);
	if (!x)
		return ossl_fail(-EBADMSG);
	*ret = x;
	return 0;
}

/* Every certificate in a PEM bundle, in order; at least one. */
static int read_certs(const char *pem, STACK_OF(X509) **ret)
{
	_cleanup_(stackp) STACK_OF(X509) *sk = NULL;
	_cleanup_(biop) BIO *b = NULL;
	X509 *x;

	if (!pem_input_ok(pem))
		return -EINVAL;
	b = pem_bio(pem);
	sk = sk_X509_new_null();
	if (!b || !sk)
		return -ENOMEM;
	while ((x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL))) {
		if (!sk_X509_push(sk, x)) {
			X509_free(x);
			return ossl_fail(-ENOMEM);
		}
	}
	ERR_clear_error();	/* the read past the last one always fails */
	if (sk_X509_num(sk) == 0)
		return -EBADMSG;
	*ret = sk;
	sk = NULL;
	return 0;
}

static int read_key(const char *pem, EVP_PKEY **ret)
{
	_cleanup_(biop) BIO *b = NULL;
	EVP_PKEY *k;

	if (!pem_input_ok(pem))
		return -EINVAL;
	b = pem_bio(pem);
	if (!b)
		return -ENOMEM;
	k = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
	if (!k)
		return ossl_fail(-EBADMSG);
	*ret = k;
	return 0;
}

/* Copy a memory BIO's contents into a malloc'd NUL-terminated string. */
static int bio_to_str(BIO *b, char **ret)
{
	char *data = NULL, *s;
	long n = BIO_get_mem_data(b, &data);

	if (n < 0 || !data)
		return -ENOMEM;
	s = malloc((size_t)n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, data, (size_t)n);
	s[n] = '\0';
	*ret = s;
	return 0;
}

static int cert_to_pem(X509 *x, char **ret)
{
	_cleanup_(biop) BIO *b = BIO_new(BIO_s_mem());

	if (!b || !PEM_write_bio_X509(b, x))
		return ossl_fail(-ENOMEM);
	return bio_to_str(b, ret);
}

/* PKCS#8, unencrypted, staged in secure memory that is wiped on free. */
static int key_to_pem(EVP_PKEY *k, char **ret)
{
	_cleanup_(biop) BIO *b = BIO_new(BIO_s_secmem());

	if (!b || !PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL))
		return ossl_fail(-ENOMEM);
	return bio_to_str(b, ret);
}

static int key_new(EVP_PKEY **ret)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");

	if (!k)
		return ossl_fail(-ENOMEM);
	*ret = k;
	return 0;
}

/* Only P-256 keys are certified: that is what every bc component makes,
 * and it keeps a hostile CSR from asking for work on a huge RSA key. */
static int key_is_p256(EVP_PKEY *k)
{
	char group[32];

	if (!EVP_PKEY_is_a(k, "EC"))
		return 0;
	if (!EVP_PKEY_get_utf8_string_param(k, "group", group, sizeof(group), NULL))
		return ossl_fail(0);
	return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0;
}

static int set_serial(X509 *x)
{
	unsigned char buf[PKI_SERIAL_BYTES];
	_cleanup_(bnp) BIGNUM *bn = NULL;
	ASN1_INTEGER *ai;
	int r;

	r = random_bytes(buf, sizeof(buf));
	if (r < 0)
		return r;
	buf[PKI_SERIAL_BYTES - 1] |= 1;	/* never zero */
	bn = BN_bin2bn(buf, sizeof(buf), NULL);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (!bn)
		return ossl_fail(-ENOMEM);
	ai = X509_get_serialNumber(x);
	if (!BN_to_ASN1_INTEGER(bn, ai))
		return ossl_fail(-ENOMEM);
	return 0;
}

static int valid_cn(const char *cn)
{
	return cn && *cn && strlen(cn) <= PKI_MAX_CN && str_is_printable(cn, PKI_MAX_CN + 1);
}

static int set_subject_cn(X509_NAME *name, const char *cn)
{
	if (!valid_cn(cn))
		return -EINVAL;
	if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn,
					-1, -1, 0))
		return ossl_fail(-EINVAL);
	return 0;
}

static int valid_days(int days)
{
	return days > 0 && days <= PKI_MAX_DAYS;
}

static int valid_secs(int64_t secs)
{
	return secs >= PKI_MIN_SECS && secs <= (int64_t)PKI_MAX_DAYS * 86400;
}

/* A fresh v3 certificate: serial, subject CN, issuer, validity, key. */
static int cert_skeleton(X509 *x, X509 *issuer, const char *cn, int64_t secs, EVP_PKEY *pub)
{
	int r;

	if (!X509_set_version(x, X509_VERSION_3))
		return ossl_fail(-ENOMEM);
	r = set_serial(x);
	if (r < 0)
		return r;
	r = set_subject_cn(X509_get_subject_name(x), cn);
	if (r < 0)
		return r;
	if (!X509_set_issuer_name(x, X509_get_subject_name(issuer ? issuer : x)))
		return ossl_fail(-ENOMEM);
	if (!X509_gmtime_adj(X509_getm_notBefore(x), -PKI_BACKDATE_SECS) ||
	    !X509_time_adj_ex(X509_getm_notAfter(x), (int)(secs / 86400), (long)(secs % 86400),
			      NULL))
		return ossl_fail(-ENOMEM);
	if (!X509_set_pubkey(x, pub))
		return ossl_fail(-ENOMEM);
	return 0;
}

/* Add one extension from a constant OpenSSL config value. */
static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!ext)
		return ossl_fail(-EINVAL);
	ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok ? 0 : ossl_fail(-ENOMEM);
}

static int dns_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '*';
}

static int valid_dns(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > PKI_MAX_DNS)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!dns_char_ok(s[i]))
			return 0;
	return 1;
}

/* One SAN: an IP literal (v4 or v6) becomes iPAddress, anything else must
 * look like a DNS name and becomes dNSName. */
static int general_name(const char *s, GENERAL_NAME **ret)
{
	GENERAL_NAME *gn = NULL;
	ASN1_OCTET_STRING *ip;
	ASN1_IA5STRING *dns;

	ip = a2i_IPADDRESS(s);
	ERR_clear_error();
	if (ip) {
		gn = GENERAL_NAME_new();
		if (!gn) {
			ASN1_OCTET_STRING_free(ip);
			return -ENOMEM;
		}
		GENERAL_NAME_set0_value(gn, GEN_IPADD, ip);
		*ret = gn;
		return 0;
	}
	if (!valid_dns(s))
		return -EINVAL;
	dns = ASN1_IA5STRING_new();
	gn = GENERAL_NAME_new();
	if (!dns || !gn || !ASN1_STRING_set(dns, s, (int)strlen(s))) {
		ASN1_IA5STRING_free(dns);
		GENERAL_NAME_free(gn);
		return ossl_fail(-ENOMEM);
	}
	GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
	*ret = gn;
	return 0;
}

static int add_sans(X509 *x, const char *const *sans)
{
	_cleanup_(gnamesp) GENERAL_NAMES *names = NULL;
	size_t n = 0;
	int r;

	if (!sans || !sans[0])
		return 0;
	names = sk_GENERAL_NAME_new_null();
	if (!names)
		return -ENOMEM;
	for (; sans[n]; n++) {
		GENERAL_NAME *gn = NULL;

		if (n >= PKI_MAX_SANS)
			return -EINVAL;
		r = general_name(sans[n], &gn);
		if (r < 0)
			return r;
		if (!sk_GENERAL_NAME_push(names, gn)) {
			GENERAL_NAME_free(gn);
			return ossl_fail(-ENOMEM);
		}
	}
	if (X509_add1_ext_i2d(x, NID_subject_alt_name, names, 0, X509V3_ADD_DEFAULT) != 1)
		return ossl_fail(-ENOMEM);
	return 0;
}

static const char *eku_value(int usage)
{
	switch (usage) {
	case PKI_SERVER:
		return "serverAuth";
	case PKI_CLIENT:
		return "clientAuth";
	case PKI_SERVER | PKI_CLIENT:
		return "serverAuth,clientAuth";
	default:
		return NULL;
	}
}

/* Extensions of a leaf: not a CA, signs only, the given EKU and SANs. */
static int leaf_extensions(X509 *x, X509 *ca, const char *const *sans, int usage)
{
	int r;

	if ((r = add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE")) < 0 ||
	    (r = add_ext(x, ca, NID_key_usage, "critical,digitalSignature")) < 0 ||
	    (r = add_ext(x, ca, NID_ext_key_usage, eku_value(usage))) < 0 ||
	    (r = add_ext(x, ca, NID_subject_key_identifier, "hash")) < 0 ||
	    (r = add_ext(x, ca, NID_authority_key_identifier, "keyid:always")) < 0)
		return r;
	return add_sans(x, sans);
}

static int sign_cert(X509 *x, EVP_PKEY *key)
{
	if (X509_sign(x, key, EVP_sha256()) <= 0)
		return ossl_fail(-EIO);
	return 0;
}

/* The CA certificate and its key, checked to belong together. */
static int load_ca(const char *ca_cert_pem, const char *ca_key_pem, X509 **ret_cert,
		   EVP_PKEY **ret_key)
{
	_cleanup_(x509p) X509 *ca = NULL;
	_cleanup_(pkeyp) EVP_PKEY *key = NULL;
	int r;

	r = read_cert(ca_cert_pem, &ca);
	if (r < 0)
		return r;
	r = read_key(ca_key_pem, &key);
	if (r < 0)
		return r;
	if (X509_check_private_key(ca, key) != 1 || X509_check_ca(ca) == 0)
		return ossl_fail(-EINVAL);
	*ret_cert = ca;
	*ret_key = key;
	ca = NULL;
	key = NULL;
	return 0;
}

/* A certificate for pub, signed by the CA, with the given facts. */
static int issue_for_key(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *pub, const char *cn,
			 const char *const *sans, int usage, int64_t secs, X509 **ret)
{
	_cleanup_(x509p) X509 *x = NULL;
	int r;

	if (!valid_secs(secs) || !eku_value(usage))
		return -EINVAL;
	x = X509_new();
	if (!x)
		return -ENOMEM;
	r = cert_skeleton(x, ca, cn, secs, pub);
	if (r < 0)
		return r;
	r = leaf_extensions(x, ca, sans, usage);
	if (r < 0)
		return r;
	r = sign_cert(x, ca_key);
	if (r < 0)
		return r;
	*ret = x;
	x = NULL;
	return 0;
}

/* Serial as lowercase hex without a sign, e.g. "5f0c..."; malloc'd. */
static int serial_hex(X509 *x, char **ret)
{
	_cleanup_(bnp) BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	char *h, *s;

	if (!bn)
		return ossl_fail(-EBADMSG);
	h = BN_bn2hex(bn);
	if (!h)
		return ossl_fail(-ENOMEM);
	s = strdup(h);
	OPENSSL_free(h);
	if (!s)
		return -ENOMEM;
	for (char *p = s; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	*ret = s;
	return 0;
}

int pki_ca_new(const char *common_name, int days, char **ret_cert_pem, char **ret_key_pem)
{
	_cleanup_(x509p) X509 *x = NULL;
	_cleanup_(pkeyp) EVP_PKEY *key = NULL;
	char *cert_pem = NULL, *key_pem = NULL;
	int r;

	if (!valid_days(days) || !ret_cert_pem || !ret_key_pem)
		return -EINVAL;
	r = key_new(&key);
	if (r < 0)
		return r;
	x = X509_new();
	if (!x)
		return -ENOMEM;
	r = cert_skeleton(x, NULL, common_name, (int64_t)days * 86400, key);
	if (r < 0)
		return r;
	if ((r = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE")) < 0 ||
	    (r = add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature")) < 0 ||
	    (r = add_ext(x, x, NID_subject_key_identifier, "hash")) < 0 ||
	    (r = add_ext(x, x, NID_authority_key_identifier, "keyid:always")) < 0)
		return r;
	r = sign_cert(x, key);
	if (r < 0)
		return r;
	r = cert_to_pem(x, &cert_pem);
	if (r < 0)
		return r;
	r = key_to_pem(key, &key_pem);
	if (r < 0) {
		free(cert_pem);
		return r;
	}
	*ret_cert_pem = cert_pem;
	*ret_key_pem = key_pem;
	return 0;
}

int pki_issue(const char *ca_cert_pem, const char *ca_key_pem, const char *common_name,
	      const char *const *sans, int usage, int days, char **ret_cert_pem,
	      char **ret_key_pem)
{
	_cleanup_(x509p) X509 *ca = NULL, *x = NULL;
	_cleanup_(pkeyp) EVP_PKEY *ca_key = NULL, *key = NULL;
	char *cert_pem = NULL, *key_pem = NULL;
	int r;

	if (!ret_cert_pem || !ret_key_pem)
		return -EINVAL;
	r = load_ca(ca_cert_pem, ca_key_pem, &ca, &ca_key);
	if (r < 0)
		return r;
	r = key_new(&key);
	if (r < 0)
		return r;
	if (!valid_days(days))
		return -EINVAL;
	r = issue_for_key(ca, ca_key, key, common_name, sans, usage, (int64_t)days * 86400, &x);
	if (r < 0)
		return r;
	r = cert_to_pem(x, &cert_pem);
	if (r < 0)
		return r;
	r = key_to_pem(key, &key_pem);
	if (r < 0) {
		free(cert_pem);
		return r;
	}
	*ret_cert_pem = cert_pem;
	*ret_key_pem = key_pem;
	return 0;
}

/* A PEM CSR for key, subject CN = common_name. */
static int csr_for_key(const char *common_name, EVP_PKEY *key, char **ret)
{
	_cleanup_(reqp) X509_REQ *req = NULL;
	_cleanup_(biop) BIO *b = NULL;
	int r;

	req = X509_REQ_new();
	if (!req || !X509_REQ_set_version(req, X509_REQ_VERSION_1))
		return ossl_fail(-ENOMEM);
	r = set_subject_cn(X509_REQ_get_subject_name(req), common_name);
	if (r < 0)
		return r;
	if (!X509_REQ_set_pubkey(req, key) || X509_REQ_sign(req, key, EVP_sha256()) <= 0)
		return ossl_fail(-EIO);
	b = BIO_new(BIO_s_mem());
	if (!b || !PEM_write_bio_X509_REQ(b, req))
		return ossl_fail(-ENOMEM);
	return bio_to_str(b, ret);
}

int pki_csr_new(const char *common_name, char **ret_csr_pem, char **ret_key_pem)
{
	_cleanup_(pkeyp) EVP_PKEY *key = NULL;
	char *csr_pem = NULL, *key_pem = NULL;
	int r;

	if (!ret_csr_pem || !ret_key_pem)
		return -EINVAL;
	r = key_new(&key);
	if (r < 0)
		return r;
	r = csr_for_key(common_name, key, &csr_pem);
	if (r < 0)
		return r;
	r = key_to_pem(key, &key_pem);
	if (r < 0) {
		free(csr_pem);
		return r;
	}
	*ret_csr_pem = csr_pem;
	*ret_key_pem = key_pem;
	return 0;
}

int pki_csr_for_key(const char *common_name, const char *key_pem, char **ret_csr_pem)
{
	_cleanup_(pkeyp) EVP_PKEY *key = NULL;
	int r;

	if (!ret_csr_pem)
		return -EINVAL;
	r = read_key(key_pem, &key);
	if (r < 0)
		return r;
	if (!key_is_p256(key))
		return -EINVAL;
	return csr_for_key(common_name, key, ret_csr_pem);
}

/* The CSR's public key, after checking the CSR is signed by its key. */
static int csr_public_key(const char *csr_pem, EVP_PKEY **ret)
{
	_cleanup_(biop) BIO *b = NULL;
	_cleanup_(reqp) X509_REQ *req = NULL;
	EVP_PKEY *pub;

	if (!pem_input_ok(csr_pem))
		return -EINVAL;
	b = pem_bio(csr_pem);
	if (!b)
		return -ENOMEM;
	req = PEM_read_bio_X509_REQ(b, NULL, no_passphrase, NULL);
	if (!req)
		return ossl_fail(-EBADMSG);
	pub = X509_REQ_get_pubkey(req);
	if (!pub)
		return ossl_fail(-EBADMSG);
	if (!key_is_p256(pub)) {
		EVP_PKEY_free(pub);
		return -EINVAL;
	}
	if (X509_REQ_verify(req, pub) != 1) {
		EVP_PKEY_free(pub);
		return ossl_fail(-EACCES);
	}
	*ret = pub;
	return 0;
}

int pki_sign_csr(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem,
		 const char *common_name, const char *const *sans, int usage, int days,
		 char **ret_cert_pem, char **ret_serial)
{
	if (!valid_days(days))
		return -EINVAL;
	return pki_sign_csr_secs(ca_cert_pem, ca_key_pem, csr_pem, common_name, sans, usage,
				 (int64_t)days * 86400, ret_cert_pem, ret_serial);
}

int pki_sign_csr_secs(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem,
		      const char *common_name, const char *const *sans, int usage,
		      int64_t seconds, char **ret_cert_pem, char **ret_serial)
{
	_cleanup_(x509p) X509 *ca = NULL, *x = NULL;
	_cleanup_(pkeyp) EVP_PKEY *ca_key = NULL, *pub = NULL;
	char *cert_pem = NULL, *serial = NULL;
	int r;

	if (!ret_cert_pem)
		return -EINVAL;
	r = csr_public_key(csr_pem, &pub);
	if (r < 0)
		return r;
	r = load_ca(ca_cert_pem, ca_key_pem, &ca, &ca_key);
	if (r < 0)
		return r;
	r = issue_for_key(ca, ca_key, pub, common_name, sans, usage, seconds, &x);
	if (r < 0)
		return r;
	if (ret_serial && (r = serial_hex(x, &serial)) < 0)
		return r;
	r = cert_to_pem(x, &cert_pem);
	if (r < 0) {
		free(serial);
		return r;
	}
	*ret_cert_pem = cert_pem;
	if (ret_serial)
		*ret_serial = serial;
	return 0;
}

/* The first CN of the subject as a malloc'd UTF-8 string ("" if none). */
static int subject_cn(X509 *x, char **ret)
{
	X509_NAME *name = X509_get_subject_name(x);
	int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
	unsigned char *utf8 = NULL;
	char *s;
	int n;

	if (i < 0) {
		s = strdup("");
		if (!s)
			return -ENOMEM;
		*ret = s;
		return 0;
	}
	n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i)));
	if (n < 0)
		return ossl_fail(-EBADMSG);
	if (memchr(utf8, '\0', (size_t)n)) {	/* "good.example\0.evil" */
		OPENSSL_free(utf8);
		return -EBADMSG;
	}
	s = strndup((char *)utf8, (size_t)n);
	OPENSSL_free(utf8);
	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

static int asn1_time_ms(const ASN1_TIME *at, int64_t *ret)
{
	struct tm tm;
	time_t t;

	memset(&tm, 0, sizeof(tm));
	if (!ASN1_TIME_to_tm(at, &tm))
		return ossl_fail(-EBADMSG);
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EBADMSG;
	*ret = (int64_t)t * 1000;
	return 0;
}

int pki_cert_info(const char *cert_pem, char **ret_cn, int64_t *ret_not_after_ms,
		  char **ret_serial)
{
	_cleanup_(x509p) X509 *x = NULL;
	_cleanup_free_ char *cn = NULL;
	_cleanup_free_ char *serial = NULL;
	int64_t na = 0;
	int r;

	r = read_cert(cert_pem, &x);
	if (r < 0)
		return r;
	if (ret_cn && (r = subject_cn(x, &cn)) < 0)
		return r;
	if ((r = asn1_time_ms(X509_get0_notAfter(x), &na)) < 0)
		return r;
	if (ret_serial && (r = serial_hex(x, &serial)) < 0)
		return r;
	if (ret_cn) {
		*ret_cn = cn;
		cn = NULL;
	}
	if (ret_not_after_ms)
		*ret_not_after_ms = na;
	if (ret_serial) {
		*ret_serial = serial;
		serial = NULL;
	}
	return 0;
}

int pki_cert_validity(const char *cert_pem, int64_t *ret_issued_ms, int64_t *ret_not_after_ms)
{
	_cleanup_(x509p) X509 *x = NULL;
	int64_t nb = 0, na = 0;
	int r;

	if ((r = read_cert(cert_pem, &x)) < 0 ||
	    (r = asn1_time_ms(X509_get0_notBefore(x), &nb)) < 0 ||
	    (r = asn1_time_ms(X509_get0_notAfter(x), &na)) < 0)
		return r;
	if (ret_issued_ms)
		*ret_issued_ms = nb + PKI_BACKDATE_SECS * 1000LL;
	if (ret_not_after_ms)
		*ret_not_after_ms = na;
	return 0;
}

int pki_csr_matches_cert(const char *csr_pem, const char *cert_pem)
{
	_cleanup_(pkeyp) EVP_PKEY *pub = NULL;
	_cleanup_(x509p) X509 *x = NULL;
	int r;

	if ((r = csr_public_key(csr_pem, &pub)) < 0 || (r = read_cert(cert_pem, &x)) < 0)
		return r;
	if (EVP_PKEY_eq(pub, X509_get0_pubkey(x)) != 1)
		return ossl_fail(-EACCES);
	return 0;
}

/* 1 if ca issued x: names match and x's signature verifies with ca's key. */
static int issued(X509 *ca, X509 *x)
{
	EVP_PKEY *k = X509_get0_pubkey(ca);
	int ok = X509_NAME_cmp(X509_get_subject_name(ca), X509_get_issuer_name(x)) == 0 && k &&
		 X509_verify(x, k) == 1;

	ERR_clear_error();
	return ok;
}

int pki_bundle_drop_issuer(const char *bundle_pem, const char *cert_pem, char **ret_bundle,
			   int *ret_dropped)
{
	_cleanup_(stackp) STACK_OF(X509) *cas = NULL;
	_cleanup_(x509p) X509 *x = NULL;
	_cleanup_(biop) BIO *b = NULL;
	int r, dropped = 0;

	if (!ret_bundle || !ret_dropped)
		return -EINVAL;
	if ((r = read_certs(bundle_pem, &cas)) < 0 || (r = read_cert(cert_pem, &x)) < 0)
		return r;
	b = BIO_new(BIO_s_mem());
	if (!b)
		return -ENOMEM;
	for (int i = 0; i < sk_X509_num(cas); i++) {
		X509 *ca = sk_X509_value(cas, i);
		if (issued(ca, x))
			dropped++;
		else if (!PEM_write_bio_X509(b, ca))
			return ossl_fail(-ENOMEM);
	}
	if ((r = bio_to_str(b, ret_bundle)) < 0) {
		/* an empty memory BIO has no data pointer */
		if (BIO_pending(b) != 0)
			return r;
		if (!(*ret_bundle = strdup("")))
			return -ENOMEM;
	}
	*ret_dropped = dropped;
	return 0;
}

int pki_verify(const char *ca_pem, const char *cert_pem)
{
	_cleanup_(stackp) STACK_OF(X509) *cas = NULL, *chain = NULL;
	_cleanup_(storep) X509_STORE *store = NULL;
	_cleanup_(sctxp) X509_STORE_CTX *ctx = NULL;
	X509 *leaf;
	int r;

	r = read_certs(ca_pem, &cas);
	if (r < 0)
		return r;
	r = read_certs(cert_pem, &chain);
	if (r < 0)
		return r;
	store = X509_STORE_new();
	ctx = X509_STORE_CTX_new();
	if (!store || !ctx)
		return ossl_fail(-ENOMEM);
	for (int i = 0; i < sk_X509_num(cas); i++)
		if (!X509_STORE_add_cert(store, sk_X509_value(cas, i)))
			return ossl_fail(-ENOMEM);
	/* The first certificate is the one verified; any that follow are
	 * untrusted intermediates. */
	leaf = sk_X509_shift(chain);
	r = X509_STORE_CTX_init(ctx, store, leaf, chain) ? 0 : -ENOMEM;
	if (r == 0)
		r = X509_verify_cert(ctx) == 1 ? 0 : -EACCES;
	X509_STORE_CTX_cleanup(ctx);
	X509_free(leaf);
	if (r < 0)
		ERR_clear_error();
	return r;
}

void pki_free_secret(char *pem)
{
	if (!pem)
		return;
	OPENSSL_cleanse(pem, strlen(pem));
	free(pem);
}
