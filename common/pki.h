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

/* A PKCS#10 CSR for common_name and an existing P-256 key (PEM). */
int pki_csr_for_key(const char *common_name, const char *key_pem, char **ret_csr_pem);

/* Sign a CSR: verifies the CSR's self-signature, IGNORES its subject and
 * extensions, and issues a certificate with CN = common_name, the given
 * sans and usage. Serial (hex) returned in ret_serial if not NULL. */
int pki_sign_csr(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem,
		 const char *common_name, const char *const *sans, int usage, int days,
		 char **ret_cert_pem, char **ret_serial);

/* pki_sign_csr with a validity of seconds rather than days (at least 60). */
int pki_sign_csr_secs(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem,
		      const char *common_name, const char *const *sans, int usage,
		      int64_t seconds, char **ret_cert_pem, char **ret_serial);

/* Certificates start this long before they are issued (clock skew). */
#define PKI_BACKDATE_SECS (5 * 60)

/* When cert_pem was issued (notBefore + PKI_BACKDATE_SECS) and when it
 * expires (notAfter), epoch ms. */
int pki_cert_validity(const char *cert_pem, int64_t *ret_issued_ms, int64_t *ret_not_after_ms);

/* 0 if the CSR (self-signature checked) and the certificate hold the same
 * public key, -EACCES if not, -EBADMSG/-EINVAL for bad input. */
int pki_csr_matches_cert(const char *csr_pem, const char *cert_pem);

/* bundle_pem without the certificates that issued cert_pem (subject matches
 * its issuer and its signature verifies with their key), as a malloc'd PEM
 * string in *ret_bundle (may be "" when every one was dropped); how many
 * were dropped in *ret_dropped. */
int pki_bundle_drop_issuer(const char *bundle_pem, const char *cert_pem, char **ret_bundle,
			   int *ret_dropped);

/* Facts of one certificate: CN (malloc'd), notAfter (epoch ms), serial hex. */
int pki_cert_info(const char *cert_pem, char **ret_cn, int64_t *ret_not_after_ms,
		  char **ret_serial);

/* 0 if cert_pem chains to ca_pem and is valid now, -EACCES otherwise. */
int pki_verify(const char *ca_pem, const char *cert_pem);

/* Wipe and free. NULL-safe. */
void pki_free_secret(char *pem);

#endif
