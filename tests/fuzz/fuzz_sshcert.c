/* fuzz_sshcert.c: the OpenSSH public key line parser and the CA line check
 * (common/sshcert.c) on arbitrary text. Oracles: answers are only 0,
 * -EINVAL or -EBADMSG, with a reason; a CA line that passes is a key line
 * that parses; a parsed key re-encoded parses to the same blob; and a
 * parsed key can be certified by a fixed CA. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sshcert.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sshcert_ca *ca;

static void roundtrip(const struct sshcert_pubkey *k)
{
	struct sshcert_pubkey k2;
	char b64[4 * (SSHCERT_BLOB_MAX / 3 + 1) + 1], line[256], *cert = NULL;
	const char *w = NULL;

	EVP_EncodeBlock((unsigned char *)b64, k->blob, (int)k->blob_len);
	snprintf(line, sizeof(line), "%s %s",
		 k->type == SSHCERT_KEY_ED25519 ? "ssh-ed25519" : "ecdsa-sha2-nistp256", b64);
	if (sshcert_pubkey_parse(line, &k2, &w) != 0 || k2.type != k->type ||
	    k2.blob_len != k->blob_len || memcmp(k2.blob, k->blob, k->blob_len) != 0)
		abort();
	if (sshcert_sign_host(ca, k, "inst_fuzz", 1, 1700000000, 0, &cert, NULL) != 0 || !cert)
		abort();
	free(cert);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sshcert_pubkey k;
	const char *w = NULL;
	char *s, *pem = NULL;
	int r, c;

	if (!ca && (sshcert_ca_generate(&pem) != 0 || sshcert_ca_load(pem, &ca) != 0))
		abort();
	sshcert_free_secret(pem);
	if (!(s = malloc(size + 1)))
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	r = sshcert_pubkey_parse(s, &k, &w);
	if ((r != 0 && r != -EINVAL && r != -EBADMSG) || (r != 0 && !w))
		abort();
	if (r == 0 && (k.blob_len > SSHCERT_BLOB_MAX ||
		       (k.type != SSHCERT_KEY_ED25519 && k.type != SSHCERT_KEY_ECDSA_P256)))
		abort();
	w = NULL;
	c = sshcert_ca_line_check(s, &w);
	if ((c != 0 && c != -EINVAL) || (c != 0 && !w) || (c == 0 && r != 0))
		abort();
	if (r == 0)
		roundtrip(&k);
	free(s);
	return 0;
}
