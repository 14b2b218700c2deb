/* envelope.c: envelope encryption (see envelope.h), OpenSSL EVP AES-256-GCM.
 *
 * An envelope, all lengths in bytes:
 *
 *     "bcE1"  kid_len(1)  kid  | wrap_iv(12)  wrapped DEK(32)  wrap_tag(16)
 *     | data_iv(12)  data_tag(16)  ciphertext(as long as the data)
 *
 * The DEK is wrapped under the KEK named kid with authenticated data
 * "bc-envelope-v1 dek\0" kid_len kid aad; the data is sealed under the DEK
 * with "bc-envelope-v1 data\0" aad. Every byte is therefore checked: the
 * magic and lengths by the parser, the key id by the wrap's tag (and by the
 * lookup), the rest by one of the two tags. Nonces are random: each DEK
 * seals one message, and a KEK wraps far fewer than 2^32 keys. */
#include "envelope.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAGIC "bcE1"
#define IV_LEN 12
#define TAG_LEN 16
#define DEK_CTX "bc-envelope-v1 dek"
#define DATA_CTX "bc-envelope-v1 data"

/* An envelope's parts, pointing into it. */
struct parsed {
	const unsigned char *kid;   /* kid_len bytes, not NUL-terminated */
	size_t kid_len;
	const unsigned char *wrap_iv, *wrapped, *wrap_tag;
	const unsigned char *data_iv, *data_tag, *ct;
	size_t ct_len;
};

static bool kid_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool kid_valid(const char *s, size_t n)
{
	if (n == 0 || n >= ENVELOPE_KID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!kid_char((unsigned char)s[i]))
			return false;
	return true;
}

static int parse(const unsigned char *env, size_t len, struct parsed *p)
{
	size_t off;

	if (len < ENVELOPE_OVERHEAD(1) + 1 || memcmp(env, MAGIC, 4) != 0)
		return -EBADMSG;
	p->kid_len = env[4];
	if (len < ENVELOPE_OVERHEAD(p->kid_len) + 1 || !kid_valid((const char *)env + 5, p->kid_len))
		return -EBADMSG;
	p->kid = env + 5;
	off = 5 + p->kid_len;
	p->wrap_iv = env + off;
	p->wrapped = p->wrap_iv + IV_LEN;
	p->wrap_tag = p->wrapped + ENVELOPE_KEY_LEN;
	p->data_iv = p->wrap_tag + TAG_LEN;
	p->data_tag = p->data_iv + IV_LEN;
	p->ct = p->data_tag + TAG_LEN;
	p->ct_len = len - ENVELOPE_OVERHEAD(p->kid_len);
	return 0;
}

static void ctxp(EVP_CIPHER_CTX **c) { EVP_CIPHER_CTX_free(*c); }

/* One piece of authenticated data. */
struct aad { const void *p; size_t n; };

/* AES-256-GCM of len bytes in -> out under key/iv with the AAD pieces;
 * sealing writes tag, opening checks it. 0, -EBADMSG (tag), -EIO. */
static int gcm(bool seal, const unsigned char *key, const unsigned char *iv,
	       const struct aad *aad, size_t n_aad, const unsigned char *in, size_t len,
	       unsigned char *out, unsigned char *tag)
{
	_cleanup_(ctxp) EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int outl = 0, r;

	if (!c || len > INT32_MAX ||
	    EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, iv, seal ? 1 : 0) != 1)
		goto fail;
	for (size_t i = 0; i < n_aad; i++)
		if (aad[i].n && EVP_CipherUpdate(c, NULL, &outl, aad[i].p, (int)aad[i].n) != 1)
			goto fail;
	if (EVP_CipherUpdate(c, out, &outl, in, (int)len) != 1)
		goto fail;
	if (!seal && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) != 1)
		goto fail;
	r = EVP_CipherFinal_ex(c, out + outl, &outl);
	if (r != 1) {
		ERR_clear_error();
		return seal ? -EIO : -EBADMSG;
	}
	if (seal && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) != 1)
		goto fail;
	return 0;
fail:
	ERR_clear_error();
	return -EIO;
}

/* Wrap (seal) or unwrap the DEK at dek/wrapped under kek. */
static int wrap(bool seal, const unsigned char *kek, const unsigned char *kid, size_t kid_len,
		const void *aad, size_t aad_len, const unsigned char *iv, const unsigned char *in,
		unsigned char *out, unsigned char *tag)
{
	const unsigned char kl = (unsigned char)kid_len;
	const struct aad a[] = {{DEK_CTX, sizeof(DEK_CTX)}, {&kl, 1}, {kid, kid_len},
				{aad, aad_len}};

	return gcm(seal, kek, iv, a, ARRAY_SIZE(a), in, ENVELOPE_KEY_LEN, out, tag);
}

int envelope_seal(const struct envelope_ring *r, const void *aad, size_t aad_len,
		  const void *data, size_t len, unsigned char **ret, size_t *ret_len)
{
	const struct envelope_key *k = envelope_ring_current(r);
	const struct aad da[] = {{DATA_CTX, sizeof(DATA_CTX)}, {aad, aad_len}};
	unsigned char dek[ENVELOPE_KEY_LEN], *env;
	size_t kid_len, n;
	struct parsed p;
	int rc;

	if (!k)
		return -ENOKEY;
	if (len == 0)
		return -EINVAL;
	kid_len = strlen(k->id);
	n = ENVELOPE_OVERHEAD(kid_len) + len;
	env = xmalloc(n);
	memcpy(env, MAGIC, 4);
	env[4] = (unsigned char)kid_len;
	memcpy(env + 5, k->id, kid_len);
	if (parse(env, n, &p) < 0) /* lays out the parts; cannot fail */
		abort();
	rc = -EIO;
	if (RAND_bytes(dek, sizeof(dek)) == 1 &&
	    RAND_bytes((unsigned char *)p.wrap_iv, IV_LEN) == 1 &&
	    RAND_bytes((unsigned char *)p.data_iv, IV_LEN) == 1)
		rc = wrap(true, k->key, p.kid, kid_len, aad, aad_len, p.wrap_iv, dek,
			  (unsigned char *)p.wrapped, (unsigned char *)p.wrap_tag);
	if (rc == 0)
		rc = gcm(true, dek, p.data_iv, da, ARRAY_SIZE(da), data, len, (unsigned char *)p.ct,
			 (unsigned char *)p.data_tag);
	OPENSSL_cleanse(dek, sizeof(dek));
	if (rc < 0) {
		ERR_clear_error();
		free(env);
		return rc;
	}
	*ret = env;
	*ret_len = n;
	return 0;
}

/* Parse env and unwrap its DEK into dek. */
static int unwrap(const struct envelope_ring *r, const void *aad, size_t aad_len,
		  const unsigned char *env, size_t env_len, struct parsed *p,
		  unsigned char dek[ENVELOPE_KEY_LEN])
{
	char kid[ENVELOPE_KID_MAX];
	const struct envelope_key *k;
	int rc;

	if ((rc = parse(env, env_len, p)) < 0)
		return rc;
	memcpy(kid, p->kid, p->kid_len);
	kid[p->kid_len] = '\0';
	if (!(k = envelope_ring_find(r, kid)))
		return -ENOKEY;
	rc = wrap(false, k->key, p->kid, p->kid_len, aad, aad_len, p->wrap_iv, p->wrapped, dek,
		  (unsigned char *)p->wrap_tag);
	if (rc < 0)
		OPENSSL_cleanse(dek, ENVELOPE_KEY_LEN);
	return rc;
}

int envelope_open(const struct envelope_ring *r, const void *aad, size_t aad_len,
		  const unsigned char *env, size_t env_len, char **ret, size_t *ret_len)
{
	const struct aad da[] = {{DATA_CTX, sizeof(DATA_CTX)}, {aad, aad_len}};
	unsigned char dek[ENVELOPE_KEY_LEN];
	struct parsed p;
	char *out;
	int rc;

	if ((rc = unwrap(r, aad, aad_len, env, env_len, &p, dek)) < 0)
		return rc;
	out = xmalloc(p.ct_len + 1);
	rc = gcm(false, dek, p.data_iv, da, ARRAY_SIZE(da), p.ct, p.ct_len, (unsigned char *)out,
		 (unsigned char *)p.data_tag);
	OPENSSL_cleanse(dek, sizeof(dek));
	if (rc < 0) {
		OPENSSL_cleanse(out, p.ct_len);
		free(out);
		return rc;
	}
	out[p.ct_len] = '\0';
	*ret = out;
	*ret_len = p.ct_len;
	return 0;
}

int envelope_rewrap(const struct envelope_ring *r, const void *aad, size_t aad_len,
		    const unsigned char *env, size_t env_len, unsigned char **ret,
		    size_t *ret_len)
{
	const struct envelope_key *k = envelope_ring_current(r);
	unsigned char dek[ENVELOPE_KEY_LEN], *out;
	struct parsed p, q;
	size_t kid_len, n;
	int rc;

	if (!k)
		return -ENOKEY;
	if ((rc = unwrap(r, aad, aad_len, env, env_len, &p, dek)) < 0)
		return rc;
	kid_len = strlen(k->id);
	n = ENVELOPE_OVERHEAD(kid_len) + p.ct_len;
	out = xmalloc(n);
	memcpy(out, MAGIC, 4);
	out[4] = (unsigned char)kid_len;
	memcpy(out + 5, k->id, kid_len);
	if (parse(out, n, &q) < 0)
		abort();
	/* the data part (iv, tag, ciphertext) is kept as it is */
	memcpy((unsigned char *)q.data_iv, p.data_iv, IV_LEN + TAG_LEN + p.ct_len);
	rc = RAND_bytes((unsigned char *)q.wrap_iv, IV_LEN) == 1 ? 0 : -EIO;
	if (rc == 0)
		rc = wrap(true, k->key, q.kid, kid_len, aad, aad_len, q.wrap_iv, dek,
			  (unsigned char *)q.wrapped, (unsigned char *)q.wrap_tag);
	OPENSSL_cleanse(dek, sizeof(dek));
	if (rc < 0) {
		ERR_clear_error();
		free(out);
		return rc;
	}
	*ret = out;
	*ret_len = n;
	return 0;
}

int envelope_key_id(const unsigned char *env, size_t env_len, char ret_id[ENVELOPE_KID_MAX])
{
	struct parsed p;
	int rc = parse(env, env_len, &p);

	if (rc < 0)
		return rc;
	memcpy(ret_id, p.kid, p.kid_len);
	ret_id[p.kid_len] = '\0';
	return 0;
}

/* ------------------------------------------------------------- keyring */

/* One "id hex" line (comments and blanks already skipped) into k. */
static int parse_line(const char *s, size_t n, struct envelope_key *k)
{
	const char *sp = memchr(s, ' ', n), *hex;
	size_t idn;

	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		n--;
	if (!sp || sp >= s + n)
		return -EBADMSG;
	idn = (size_t)(sp - s);
	hex = sp;
	while (hex < s + n && *hex == ' ')
		hex++;
	if (!kid_valid(s, idn) || (size_t)(s + n - hex) != 2 * ENVELOPE_KEY_LEN)
		return -EBADMSG;
	if (hex_decode(hex, ENVELOPE_KEY_LEN, k->key) < 0)
		return -EBADMSG;
	memcpy(k->id, s, idn);
	k->id[idn] = '\0';
	return 0;
}

int envelope_ring_parse(const char *text, struct envelope_ring **ret, int *ret_line)
{
	struct envelope_ring *r = xcalloc(1, sizeof(*r));
	const char *s = text;
	int line = 0, rc = 0;

	r->keys = xcalloc(ENVELOPE_KEYS_MAX, sizeof(*r->keys));
	while (*s && rc == 0) {
		const char *e = strchr(s, '\n');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		line++;
		if (n && *s != '#') {
			if (r->n == ENVELOPE_KEYS_MAX)
				rc = -E2BIG;
			else if ((rc = parse_line(s, n, &r->keys[r->n])) == 0 &&
				 envelope_ring_find(r, r->keys[r->n].id))
				rc = -EEXIST;
			else if (rc == 0)
				r->n++;
		}
		s = e ? e + 1 : s + n;
	}
	if (rc == 0 && r->n == 0) {
		rc = -EBADMSG;
		line = 0;
	}
	if (rc < 0) {
		envelope_ring_free(r);
		if (ret_line)
			*ret_line = line;
		return rc;
	}
	*ret = r;
	return 0;
}

char *envelope_ring_format(const struct envelope_ring *r)
{
	static const char head[] =
		"# bc key-encryption keys (docs/secrets.md): one \"key-id hex-key\" a line, the\n"
		"# last one current. Mode 0600; back it up apart from the database.\n";
	size_t cap = sizeof(head) + r->n * (ENVELOPE_KID_MAX + 2 * ENVELOPE_KEY_LEN + 2), used;
	char *s = xmalloc(cap);

	used = (size_t)snprintf(s, cap, "%s", head);
	for (size_t i = 0; i < r->n; i++) {
		used += (size_t)snprintf(s + used, cap - used, "%s ", r->keys[i].id);
		hex_encode(r->keys[i].key, ENVELOPE_KEY_LEN, s + used);
		used += 2 * ENVELOPE_KEY_LEN;
		s[used++] = '\n';
		s[used] = '\0';
	}
	return s;
}

int envelope_ring_add(struct envelope_ring *r, char ret_id[ENVELOPE_KID_MAX])
{
	struct envelope_key *k;

	if (r->n == ENVELOPE_KEYS_MAX)
		return -E2BIG;
	k = &r->keys[r->n];
	do
		id_new("kek", k->id, sizeof(k->id));
	while (envelope_ring_find(r, k->id));
	if (RAND_bytes(k->key, sizeof(k->key)) != 1) {
		ERR_clear_error();
		OPENSSL_cleanse(k, sizeof(*k));
		return -EIO;
	}
	r->n++;
	memcpy(ret_id, k->id, ENVELOPE_KID_MAX);
	return 0;
}

const struct envelope_key *envelope_ring_find(const struct envelope_ring *r, const char *id)
{
	for (size_t i = 0; r && i < r->n; i++)
		if (strcmp(r->keys[i].id, id) == 0)
			return &r->keys[i];
	return NULL;
}

const struct envelope_key *envelope_ring_current(const struct envelope_ring *r)
{
	return r && r->n ? &r->keys[r->n - 1] : NULL;
}

void envelope_ring_free(struct envelope_ring *r)
{
	if (!r)
		return;
	OPENSSL_cleanse(r->keys, ENVELOPE_KEYS_MAX * sizeof(*r->keys));
	free(r->keys);
	free(r);
}
