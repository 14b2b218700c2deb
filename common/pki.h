/* pki.h: X.509 material for the deployment, with OpenSSL.
 *
 * Keys are ECDSA P-256. Every output is a malloc'd NUL-terminated PEM string
 * the caller frees (keys with pki_free_secret, which wipes). Functions return
 * 0 or a negative errno (-EINVAL for bad input, -EBADMSG for unparsable PEM,
 * -EACCES for a signature that does not verify). */
#ifndef BC_PKI_H
#define BC_PKI_H

#include <stddef.h>
#include <stdint.h>

/* A self-signed CA certificate (CA:TRUE, keyCertSign) valid for days. */
int pki_ca_new(const char *common_name, int days, char **ret_cert_pem, char **ret_key_pem);

/* A new key and a certificate signed by the CA. sans: NULL-terminated list
 * of DNS names or IP literals (both v4 and v6), may be NULL. usage bits:
 * PKI_SERVER (serverAuth), PKI_CLIENT (clientAuth), both allowed. */
#define PKI_SERVER 1
#define PKI_CLIENT 2
int pki_issue(const char *ca_cert_pem, const char *ca_key_pem, const char *common_name,
	      const char *const *sans, int usage, int days, char **ret_cert_pem,
	      char **ret_key_pem);

/* A new key and a PKCS#10 CSR for common_name. */
int pki_csr_new(const char *common_name, char **ret_csr_pem, char **ret_key_pem);

/* Sign a CSR: verifies the CSR's self-signature, IGNORES its subject and
 * extensions, and issues a certificate with CN = common_name, the given
 * sans and usage. Serial (hex) returned in ret_serial if not NULL. */
int pki_sign_csr(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem,
		 const char *common_name, const char *const *sans, int usage, int days,
		 char **ret_cert_pem, char **ret_serial);

/* Facts of one certificate: CN (malloc'd), notAfter (epoch ms), serial hex. */
int pki_cert_info(const char *cert_pem, char **ret_cn, int64_t *ret_not_after_ms,
		  char **ret_serial);

/* 0 if cert_pem chains to ca_pem and is valid now, -EACCES otherwise. */
int pki_verify(const char *ca_pem, const char *cert_pem);

/* Wipe and free. NULL-safe. */
void pki_free_secret(char *pem);

#endif
