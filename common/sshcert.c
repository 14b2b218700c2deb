/* sshcert.c: OpenSSH public keys and certificates, with the OpenSSL 3 EVP API.
 *
 * The wire format is SSH's (RFC 4251 uint32/uint64/string) as
 * PROTOCOL.certkeys lays out a certificate:
 *
 *   string  "<key type>-cert-v01@openssh.com"
 *   string  nonce (32 random bytes)
 *   ...     the subject key's fields (ed25519: string pk; ecdsa: string
 *           curve, string Q)
 *   uint64  serial, uint32 type (1 user, 2 host), string key id,
 *   string  principals (a packed list of strings),
 *   uint64  valid after, uint64 valid before,
 *   string  critical options (always empty here),
 *   string  extensions (name/empty-data pairs, sorted; permit-pty at most),
 *   string  reserved (empty), string signature key (the CA's public blob),
 *   string  signature ("ssh-ed25519", 64 bytes) over everything before it.
 *
 * Only ssh-ed25519 and ecdsa-sha2-nistp256 subject keys are accepted, and an
 * ECDSA point must be on the curve, so a certificate never vouches for a key
 * OpenSSH itself would reject. The CA is always ed25519. Nothing here logs;
 * OpenSSL's error queue is cleared on every failure. */
#include "sshcert.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define T_ED25519 "ssh-ed25519"
#define T_ECDSA "ecdsa-sha2-nistp256"
#define ED25519_PK 32
#define ED25519_SIG 64
#define P256_POINT 65
#define NONCE_LEN 32
#define PEM_MAX (64 * 1024)

struct sshcert_ca {
	EVP_PKEY *key;
	uint8_t pub[ED25519_PK];
};

static void pkeyp(EVP_PKEY **p) { EVP_PKEY_free(*p); }
static void biop(BIO **p) { BIO_free_all(*p); }
static void mdctxp(EVP_MD_CTX **p) { EVP_MD_CTX_free(*p); }
static void pctxp(EVP_PKEY_CTX **p) { EVP_PKEY_CTX_free(*p); }

static int ossl_fail(int err)
{
	ERR_clear_error();
	return err;
}

static int why(const char **ret_why, const char *msg, int err)
{
	if (ret_why)
		*ret_why = msg;
	return err;
}

/* ------------------------------------------------------------ wire reading */

struct rd {
	const uint8_t *p;
	size_t n;
};

static int rd_u32(struct rd *r, uint32_t *v)
{
	if (r->n < 4)
		return -EBADMSG;
	*v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
	r->p += 4;
	r->n -= 4;
	return 0;
}

static int rd_str(struct rd *r, const uint8_t **s, size_t *len)
{
	uint32_t l;

	if (rd_u32(r, &l) < 0 || l > r->n)
		return -EBADMSG;
	*s = r->p;
	*len = l;
	r->p += l;
	r->n -= l;
	return 0;
}

static bool rd_str_is(struct rd *r, const char *want)
{
	const uint8_t *s;
	size_t n;

	return rd_str(r, &s, &n) == 0 && n == strlen(want) && memcmp(s, want, n) == 0;
}

/* ------------------------------------------------------------ wire writing */

struct wr {
	uint8_t *p;
	size_t n, cap;
	bool failed;
};

static void wr_bytes(struct wr *w, const void *b, size_t n)
{
	if (w->failed || n == 0)
		return;
	if (w->n + n > w->cap) {
		size_t cap = (w->n + n) * 2 + 256;
		uint8_t *p = realloc(w->p, cap);
		if (!p) {
			w->failed = true;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->n, b, n);
	w->n += n;
}

static void wr_u32(struct wr *w, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};

	wr_bytes(w, b, 4);
}

static void wr_u64(struct wr *w, uint64_t v)
{
	wr_u32(w, (uint32_t)(v >> 32));
	wr_u32(w, (uint32_t)v);
}

static void wr_str(struct wr *w, const void *s, size_t n)
{
	wr_u32(w, (uint32_t)n);
	wr_bytes(w, s, n);
}

static void wr_cstr(struct wr *w, const char *s)
{
	wr_str(w, s, strlen(s));
}

static void wr_free(struct wr *w)
{
	free(w->p);
}

/* ------------------------------------------------------------------ base64 */

/* Strict standard base64: length a multiple of 4, '=' only at the end. */
static int b64_decode(const char *s, size_t n, uint8_t *out, size_t cap, size_t *ret_len)
{
	size_t pad = 0, len;
	int r;

	if (n == 0 || n % 4 || n / 4 * 3 > cap)
		return -EBADMSG;
	while (pad < 2 && s[n - 1 - pad] == '=')
		pad++;
	for (size_t i = 0; i < n - pad; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '/'))
			return -EBADMSG;
	r = EVP_DecodeBlock(out, (const unsigned char *)s, (int)n);
	if (r < 0 || (size_t)r < pad)
		return ossl_fail(-EBADMSG);
	len = (size_t)r - pad;
	*ret_len = len;
	return 0;
}

static char *b64_encode(const uint8_t *b, size_t n)
{
	char *s = malloc(4 * ((n + 2) / 3) + 1);

	if (s)
		EVP_EncodeBlock((unsigned char *)s, b, (int)n);
	return s;
}

/* ------------------------------------------------------------- public keys */

/* 0 if Q is a point on P-256 (uncompressed). */
static int p256_point_ok(const uint8_t *q, size_t n)
{
	_cleanup_(pctxp) EVP_PKEY_CTX *ctx = NULL, *chk = NULL;
	_cleanup_(pkeyp) EVP_PKEY *k = NULL;
	OSSL_PARAM params[3];

	if (n != P256_POINT || q[0] != 0x04)
		return -EBADMSG;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
						      (char *)"prime256v1", 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)q, n);
	params[2] = OSSL_PARAM_construct_end();
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (!ctx || EVP_PKEY_fromdata_init(ctx) <= 0 ||
	    EVP_PKEY_fromdata(ctx, &k, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		return ossl_fail(-EBADMSG);
	chk = EVP_PKEY_CTX_new_from_pkey(NULL, k, NULL);
	if (!chk || EVP_PKEY_public_check(chk) <= 0)
		return ossl_fail(-EBADMSG);
	return 0;
}

/* Check a decoded key blob against the type its line named. */
static int blob_check(enum sshcert_key_type t, const uint8_t *b, size_t n, const char **ret_why)
{
	struct rd r = {b, n};
	const uint8_t *pk;
	size_t pk_len;

	if (t == SSHCERT_KEY_ED25519) {
		if (!rd_str_is(&r, T_ED25519) || rd_str(&r, &pk, &pk_len) < 0 ||
		    pk_len != ED25519_PK || r.n)
			return why(ret_why, "the ssh-ed25519 key data is malformed", -EBADMSG);
		return 0;
	}
	if (!rd_str_is(&r, T_ECDSA) || !rd_str_is(&r, "nistp256") ||
	    rd_str(&r, &pk, &pk_len) < 0 || r.n)
		return why(ret_why, "the ecdsa-sha2-nistp256 key data is malformed", -EBADMSG);
	if (p256_point_ok(pk, pk_len) < 0)
		return why(ret_why, "the ecdsa-sha2-nistp256 key is not a point on P-256",
			   -EBADMSG);
	return 0;
}

/* The key type a line starts with, or a reason it is refused. */
static int line_type(const char *s, size_t n, enum sshcert_key_type *ret, const char **ret_why)
{
	if (n == strlen(T_ED25519) && memcmp(s, T_ED25519, n) == 0)
		*ret = SSHCERT_KEY_ED25519;
	else if (n == strlen(T_ECDSA) && memcmp(s, T_ECDSA, n) == 0)
		*ret = SSHCERT_KEY_ECDSA_P256;
	else if (n == 7 && memcmp(s, "ssh-rsa", 7) == 0)
		return why(ret_why, "ssh-rsa keys are not accepted (use ssh-ed25519 or "
			   "ecdsa-sha2-nistp256)", -EINVAL);
	else if (memmem(s, n, "-cert-v01@openssh.com", 21))
		return why(ret_why, "a certificate is not a public key", -EINVAL);
	else if (n >= 3 && memcmp(s, "sk-", 3) == 0)
		return why(ret_why, "security-key (sk-) keys are not accepted", -EINVAL);
	else if (n > 11 && memcmp(s, "ecdsa-sha2-", 11) == 0)
		return why(ret_why, "only the nistp256 curve is accepted for ECDSA keys", -EINVAL);
	else
		return why(ret_why, "not an ssh-ed25519 or ecdsa-sha2-nistp256 public key line",
			   -EINVAL);
	return 0;
}

/* Parse "TYPE BASE64[ COMMENT]"; the comment's start (or NULL) in *ret_comment. */
static int parse_line(const char *line, struct sshcert_pubkey *ret, const char **ret_comment,
		      const char **ret_why)
{
	struct sshcert_pubkey k = {0};
	const char *sp, *b64, *end;
	int r;

	if (!line || !*line)
		return why(ret_why, "the public key line is empty", -EINVAL);
	if (!str_is_printable(line, SSHCERT_LINE_MAX))
		return why(ret_why, "the public key line is too long or holds a control "
			   "character (one line only)", -EINVAL);
	if (!(sp = strchr(line, ' ')))
		return why(ret_why, "expected \"TYPE BASE64 [COMMENT]\"", -EINVAL);
	if ((r = line_type(line, (size_t)(sp - line), &k.type, ret_why)) < 0)
		return r;
	b64 = sp + 1;
	end = strchr(b64, ' ');
	if (!end)
		end = b64 + strlen(b64);
	if (b64_decode(b64, (size_t)(end - b64), k.blob, sizeof(k.blob), &k.blob_len) < 0)
		return why(ret_why, "the key data is not valid base64 of a key", -EBADMSG);
	if ((r = blob_check(k.type, k.blob, k.blob_len, ret_why)) < 0)
		return r;
	*ret = k;
	*ret_comment = *end ? end + 1 : NULL;
	return 0;
}

int sshcert_pubkey_parse(const char *line, struct sshcert_pubkey *ret, const char **ret_why)
{
	const char *comment;

	return parse_line(line, ret, &comment, ret_why);
}

int sshcert_ca_line_check(const char *line, const char **ret_why)
{
	struct sshcert_pubkey k;
	const char *comment = NULL;
	int r = parse_line(line, &k, &comment, ret_why);

	if (r < 0)
		return -EINVAL;
	if (comment && (!*comment || strlen(comment) > SSHCERT_CA_COMMENT_MAX))
		return why(ret_why, "the CA line's comment must be 1 to 64 printable characters",
			   -EINVAL);
	return 0;
}

bool sshcert_account_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

/* ---------------------------------------------------------------------- CA */

void sshcert_free_secret(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

int sshcert_ca_generate(char **ret_pem)
{
	_cleanup_(pkeyp) EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	_cleanup_(biop) BIO *b = BIO_new(BIO_s_secmem());
	char *data = NULL, *s;
	long n;

	if (!k || !b || !PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL))
		return ossl_fail(-ENOMEM);
	n = BIO_get_mem_data(b, &data);
	if (n <= 0 || !data || !(s = malloc((size_t)n + 1)))
		return ossl_fail(-ENOMEM);
	memcpy(s, data, (size_t)n);
	s[n] = '\0';
	*ret_pem = s;
	return 0;
}

static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

int sshcert_ca_load(const char *pem, struct sshcert_ca **ret)
{
	_cleanup_(biop) BIO *b = NULL;
	struct sshcert_ca *ca;
	EVP_PKEY *k;
	size_t len = ED25519_PK;

	if (!pem || strnlen(pem, PEM_MAX) >= PEM_MAX)
		return -EINVAL;
	if (!(b = BIO_new_mem_buf(pem, (int)strlen(pem))))
		return ossl_fail(-ENOMEM);
	if (!(k = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL)))
		return ossl_fail(-EBADMSG);
	if (EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(k);
		return -EINVAL;
	}
	if (!(ca = calloc(1, sizeof(*ca))) ||
	    EVP_PKEY_get_raw_public_key(k, ca->pub, &len) <= 0 || len != ED25519_PK) {
		free(ca);
		EVP_PKEY_free(k);
		return ossl_fail(-ENOMEM);
	}
	ca->key = k;
	*ret = ca;
	return 0;
}

void sshcert_ca_free(struct sshcert_ca *ca)
{
	if (!ca)
		return;
	EVP_PKEY_free(ca->key);	/* OpenSSL wipes the private key it frees */
	OPENSSL_cleanse(ca, sizeof(*ca));
	free(ca);
}

static void ca_blob(const struct sshcert_ca *ca, struct wr *w)
{
	wr_cstr(w, T_ED25519);
	wr_str(w, ca->pub, ED25519_PK);
}

int sshcert_ca_public_line(const struct sshcert_ca *ca, const char *comment, char **ret_line)
{
	struct wr w = {0};
	_cleanup_free_ char *b64 = NULL;
	char *line;

	if (comment && (!*comment || !str_is_printable(comment, SSHCERT_CA_COMMENT_MAX + 1)))
		return -EINVAL;
	ca_blob(ca, &w);
	if (w.failed || !(b64 = b64_encode(w.p, w.n))) {
		wr_free(&w);
		return -ENOMEM;
	}
	wr_free(&w);
	if (asprintf(&line, "%s %s%s%s", T_ED25519, b64, comment ? " " : "",
		     comment ? comment : "") < 0)
		return -ENOMEM;
	*ret_line = line;
	return 0;
}

/* ------------------------------------------------------------ certificates */

static bool name_ok(const char *s, bool principal)
{
	return s && *s && str_is_printable(s, SSHCERT_NAME_MAX + 1) &&
	       !(principal && strchr(s, ','));
}

/* One part of a principal or key id we compose: an id, so no ':', ',', '@'
 * or space that would make the result ambiguous. */
static bool part_ok(const char *s)
{
	return name_ok(s, true) && !strpbrk(s, ":@ ");
}

static int req_check(const struct sshcert_req *q)
{
	if ((q->type != SSHCERT_USER && q->type != SSHCERT_HOST) || !q->key ||
	    !name_ok(q->key_id, false) || q->n_principals == 0 ||
	    q->n_principals > SSHCERT_PRINCIPALS_MAX || q->valid_after < 0 ||
	    q->valid_after >= q->valid_before ||
	    (q->extensions & ~SSHCERT_EXT_PERMIT_PTY) ||
	    (q->type == SSHCERT_HOST && q->extensions))
		return -EINVAL;
	for (size_t i = 0; i < q->n_principals; i++)
		if (!name_ok(q->principals[i], true))
			return -EINVAL;
	return 0;
}

/* The subject key's fields: its blob without the leading type string. */
static void wr_subject(struct wr *w, const struct sshcert_pubkey *k)
{
	struct rd r = {k->blob, k->blob_len};
	const uint8_t *t;
	size_t tn;

	rd_str(&r, &t, &tn);
	wr_bytes(w, r.p, r.n);
}

/* Everything the CA signs, up to and including the signature key. */
static void wr_tbs(struct wr *w, const struct sshcert_ca *ca, const struct sshcert_req *q,
		   const uint8_t nonce[NONCE_LEN])
{
	struct wr list = {0};

	wr_cstr(w, q->key->type == SSHCERT_KEY_ED25519 ? T_ED25519 "-cert-v01@openssh.com"
						      : T_ECDSA "-cert-v01@openssh.com");
	wr_str(w, nonce, NONCE_LEN);
	wr_subject(w, q->key);
	wr_u64(w, q->serial);
	wr_u32(w, (uint32_t)q->type);
	wr_cstr(w, q->key_id);
	for (size_t i = 0; i < q->n_principals; i++)
		wr_cstr(&list, q->principals[i]);
	wr_str(w, list.p, list.n);
	wr_u64(w, (uint64_t)q->valid_after);
	wr_u64(w, (uint64_t)q->valid_before);
	wr_str(w, NULL, 0);			/* critical options: none */
	list.n = 0;
	if (q->extensions & SSHCERT_EXT_PERMIT_PTY) {
		wr_cstr(&list, "permit-pty");
		wr_str(&list, NULL, 0);
	}
	wr_str(w, list.p, list.n);
	wr_str(w, NULL, 0);			/* reserved */
	w->failed |= list.failed;
	wr_free(&list);
	list = (struct wr){0};
	ca_blob(ca, &list);
	wr_str(w, list.p, list.n);
	w->failed |= list.failed;
	wr_free(&list);
}

static int ed25519_sign(const struct sshcert_ca *ca, const uint8_t *tbs, size_t n,
			uint8_t sig[ED25519_SIG])
{
	_cleanup_(mdctxp) EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t len = ED25519_SIG;

	if (!ctx || EVP_DigestSignInit(ctx, NULL, NULL, NULL, ca->key) <= 0 ||
	    EVP_DigestSign(ctx, sig, &len, tbs, n) <= 0 || len != ED25519_SIG)
		return ossl_fail(-ENOMEM);
	return 0;
}

int sshcert_sign(const struct sshcert_ca *ca, const struct sshcert_req *q, char **ret_cert)
{
	struct wr w = {0}, sw = {0};
	uint8_t nonce[NONCE_LEN], sig[ED25519_SIG];
	_cleanup_free_ char *b64 = NULL;
	char *line = NULL;
	int r;

	if (!ca || !q || (r = req_check(q)) < 0)
		return -EINVAL;
	if ((r = random_bytes(nonce, sizeof(nonce))) < 0)
		return r;
	wr_tbs(&w, ca, q, nonce);
	r = w.failed ? -ENOMEM : ed25519_sign(ca, w.p, w.n, sig);
	if (r == 0) {
		wr_cstr(&sw, T_ED25519);
		wr_str(&sw, sig, sizeof(sig));
		wr_str(&w, sw.p, sw.n);
		r = w.failed || sw.failed || !(b64 = b64_encode(w.p, w.n)) ? -ENOMEM : 0;
	}
	if (r == 0 && asprintf(&line, "%s-cert-v01@openssh.com %s %s\n",
			       q->key->type == SSHCERT_KEY_ED25519 ? T_ED25519 : T_ECDSA, b64,
			       q->key_id) < 0)
		r = -ENOMEM;
	wr_free(&w);
	wr_free(&sw);
	if (r == 0)
		*ret_cert = line;
	return r;
}

int sshcert_sign_user(const struct sshcert_ca *ca, const struct sshcert_pubkey *key,
		      const struct sshcert_user *u, char **ret_cert, int64_t *ret_valid_before)
{
	_cleanup_free_ char *principal = NULL, *key_id = NULL;
	const char *principals[1];
	struct sshcert_req q = {0};
	int64_t before;
	int r;

	if (!u || !sshcert_account_valid(u->account) || !part_ok(u->instance_id) ||
	    !part_ok(u->identity_id) || !part_ok(u->sandbox_id) || !part_ok(u->grant_id) ||
	    strncmp(u->grant_id, "ssh_", 4) != 0)
		return -EINVAL;
	if (u->minutes < 1 || u->minutes * 60 > SSHCERT_USER_MAX_SECS || u->now <= 0 ||
	    (u->cap && u->cap <= u->now))
		return -ERANGE;
	before = u->now + (int64_t)u->minutes * 60;
	if (u->cap && u->cap < before)
		before = u->cap;
	principal = xasprintf("%s@%s", u->account, u->instance_id);
	key_id = xasprintf("bc:%s:%s:%s", u->identity_id, u->sandbox_id, u->grant_id);
	principals[0] = principal;
	q = (struct sshcert_req){SSHCERT_USER, key, key_id, principals, 1, u->serial,
				 u->now - SSHCERT_BACKDATE_SECS, before, SSHCERT_EXT_PERMIT_PTY};
	if ((r = sshcert_sign(ca, &q, ret_cert)) == 0 && ret_valid_before)
		*ret_valid_before = before;
	return r;
}

int sshcert_sign_host(const struct sshcert_ca *ca, const struct sshcert_pubkey *key,
		      const char *instance_id, uint64_t serial, int64_t now,
		      int64_t valid_before, char **ret_cert, int64_t *ret_valid_before)
{
	_cleanup_free_ char *key_id = NULL;
	const char *principals[1] = {instance_id};
	struct sshcert_req q;
	int r;

	if (!part_ok(instance_id) || now <= 0)
		return -EINVAL;
	for (const char *c = instance_id; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			return -EINVAL;	/* ssh lowercases HostKeyAlias: it would never match */
	if (valid_before == 0)
		valid_before = now + SSHCERT_HOST_SECS;
	if (valid_before <= now || valid_before > now + SSHCERT_HOST_SECS)
		return -ERANGE;
	key_id = xasprintf("host/%s", instance_id);
	q = (struct sshcert_req){SSHCERT_HOST, key, key_id, principals, 1, serial,
				 now - SSHCERT_BACKDATE_SECS, valid_before, 0};
	if ((r = sshcert_sign(ca, &q, ret_cert)) == 0 && ret_valid_before)
		*ret_valid_before = valid_before;
	return r;
}

uint64_t sshcert_serial_new(void)
{
	uint64_t s = 0;

	while (s == 0)
		if (random_bytes(&s, sizeof(s)) < 0)
			s = (uint64_t)now_ms();
	return s;
}
