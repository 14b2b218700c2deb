/* fuzz_pki.c: the PEM parsers in pki.c on arbitrary input: pki_cert_info,
 * pki_verify against a fixed CA, and pki_sign_csr, whose certificate, when
 * it issues one, must verify against that CA. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pki.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *ca_cert, *ca_key;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if (pki_ca_new("fuzz CA", 1, &ca_cert, &ca_key) < 0)
		abort();
	return 0;
}

static void cert_info(const char *pem)
{
	char *cn = NULL, *serial = NULL;
	int64_t not_after = 0;

	if (pki_cert_info(pem, &cn, &not_after, &serial) < 0)
		return;
	if (!cn || !serial)
		abort();
	free(cn);
	free(serial);
}

static void sign_csr(const char *pem)
{
	static const char *const sans[] = {"node.example", "192.0.2.1", NULL};
	char *cert = NULL, *serial = NULL;

	if (pki_sign_csr(ca_cert, ca_key, pem, "fuzz", sans, PKI_CLIENT, 1, &cert, &serial) < 0)
		return;
	if (!serial || pki_verify(ca_cert, cert) != 0)
		abort();
	free(cert);
	free(serial);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *pem = malloc(size + 1);

	if (!pem)
		return 0;
	memcpy(pem, data, size);
	pem[size] = '\0';
	cert_info(pem);
	(void)pki_verify(ca_cert, pem);
	sign_csr(pem);
	free(pem);
	return 0;
}
