/* sshcert.h: OpenSSH certificates (PROTOCOL.certkeys) signed with OpenSSL.
 *
 * The deployment's sandbox SSH CA is an ed25519 key. It signs short user
 * certificates for the keys of sandboxes.exec callers (principal
 * "<account>@<instanceId>") and host certificates for sandbox guests
 * (principal: the instance id). Accepted subject keys: ssh-ed25519 and
 * ecdsa-sha2-nistp256, nothing else.
 *
 * Pure functions, nothing logs. They return 0 or a negative errno:
 * -EINVAL for bad input (with a constant reason in *ret_why where the
 * function takes one), -EBADMSG for an unparsable key or PEM, -ERANGE for
 * a validity the rules forbid, -ENOMEM. Out-parameters are written only
 * on success. Private keys are wiped when freed. */
#ifndef BC_SSHCERT_H
#define BC_SSHCERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sshcert_key_type {
	SSHCERT_KEY_ED25519 = 1,
	SSHCERT_KEY_ECDSA_P256,
};

#define SSHCERT_BLOB_MAX 128         /* wire form of an accepted public key */
#define SSHCERT_LINE_MAX 8192        /* a public key line a caller may send */
#define SSHCERT_CA_COMMENT_MAX 64    /* the spec's limit on a CA line's comment */
#define SSHCERT_NAME_MAX 255         /* a principal or a key id */
#define SSHCERT_PRINCIPALS_MAX 16
#define SSHCERT_BACKDATE_SECS 60     /* valid_after = now - this (clock skew) */
#define SSHCERT_USER_MAX_SECS (15 * 60)
#define SSHCERT_HOST_SECS (30 * 86400)

/* A parsed public key: its type and wire-format blob. */
struct sshcert_pubkey {
	enum sshcert_key_type type;
	size_t blob_len;
	uint8_t blob[SSHCERT_BLOB_MAX];
};

/* Parse one OpenSSH public key line "TYPE BASE64 [COMMENT]" (no newline):
 * an ssh-ed25519 key or an ecdsa-sha2-nistp256 key whose point is on the
 * curve. Every other type (ssh-rsa, other curves, security keys,
 * certificates) is refused with a reason naming it. The comment, if any,
 * must be printable and the line at most SSHCERT_LINE_MAX bytes. On
 * failure *ret_why (if not NULL) gets a constant English reason. */
int sshcert_pubkey_parse(const char *line, struct sshcert_pubkey *ret, const char **ret_why);

/* The spec's CA line (sandboxExec.caPublicKey): exactly one accepted key
 * with an optional comment of at most SSHCERT_CA_COMMENT_MAX printable
 * characters (spaces allowed); nothing before the type, no second line.
 * 0 or -EINVAL with *ret_why; callers map the refusal to INVALID_CONFIG. */
int sshcert_ca_line_check(const char *line, const char **ret_why);

/* A POSIX-portable login name, [a-z_][a-z0-9_-]{0,31}: sandbox_account. */
bool sshcert_account_valid(const char *s);

/* The CA: an ed25519 private key. */
struct sshcert_ca;

/* A new ed25519 CA key as PKCS#8 PEM in *ret_pem (free with
 * sshcert_free_secret). */
int sshcert_ca_generate(char **ret_pem);

/* Load a CA key from PEM (unencrypted PKCS#8 ed25519; other key types are
 * -EINVAL, unreadable PEM -EBADMSG). */
int sshcert_ca_load(const char *pem, struct sshcert_ca **ret);

/* Wipe and free. NULL-safe. */
void sshcert_ca_free(struct sshcert_ca *ca);

/* The CA's public key line "ssh-ed25519 BASE64[ COMMENT]" (malloc'd, no
 * newline); comment may be NULL and must pass sshcert_ca_line_check's
 * rules. */
int sshcert_ca_public_line(const struct sshcert_ca *ca, const char *comment, char **ret_line);

/* Certificate types (PROTOCOL.certkeys). */
#define SSHCERT_USER 1
#define SSHCERT_HOST 2

/* Extensions a user certificate may carry: permit-pty only, ever. */
#define SSHCERT_EXT_PERMIT_PTY 1u

/* Everything a certificate says. No critical options are ever written. */
struct sshcert_req {
	int type;                          /* SSHCERT_USER or SSHCERT_HOST */
	const struct sshcert_pubkey *key;  /* the certified key */
	const char *key_id;                /* printable, 1..SSHCERT_NAME_MAX */
	const char *const *principals;     /* 1..SSHCERT_PRINCIPALS_MAX, printable, no ',' */
	size_t n_principals;
	uint64_t serial;
	int64_t valid_after, valid_before; /* epoch seconds, after < before */
	unsigned extensions;               /* SSHCERT_EXT_*; user certificates only */
};

/* Sign req with ca: the certificate as one line "TYPE-cert-v01@openssh.com
 * BASE64 COMMENT" (malloc'd, newline-terminated, as ssh-keygen writes a
 * -cert.pub file); comment = key_id. */
int sshcert_sign(const struct sshcert_ca *ca, const struct sshcert_req *req, char **ret_cert);

/* A sandboxes.exec user certificate. Every id is printable without ':',
 * ',', '@' or a space (-EINVAL otherwise). */
struct sshcert_user {
	const char *account;      /* sshcert_account_valid */
	const char *instance_id;  /* principal "<account>@<instance_id>" */
	const char *identity_id;  /* key id "bc:<identity>:<sandbox>:<grant_id>" */
	const char *sandbox_id;
	const char *grant_id;     /* "ssh_..." */
	uint64_t serial;
	int64_t now;              /* epoch seconds */
	int minutes;              /* asked lifetime, 1..15 */
	int64_t cap;              /* epoch seconds: min(sandbox expiresAt, token
				   * expiry); the certificate ends no later.
				   * 0: no cap. */
};

/* Sign a user certificate: valid from now - SSHCERT_BACKDATE_SECS to
 * min(now + minutes, cap), permit-pty only. -ERANGE when minutes is
 * outside 1..15 or cap is not after now. Its end in *ret_valid_before
 * (may be NULL). */
int sshcert_sign_user(const struct sshcert_ca *ca, const struct sshcert_pubkey *key,
		      const struct sshcert_user *u, char **ret_cert, int64_t *ret_valid_before);

/* Sign a host certificate naming instance_id (its one principal, without
 * capitals since ssh lowercases the HostKeyAlias it matches; key id
 * "host/<instance_id>") valid from now - SSHCERT_BACKDATE_SECS until
 * valid_before, which must be after now and at most now +
 * SSHCERT_HOST_SECS (-ERANGE otherwise); valid_before 0 means exactly
 * now + SSHCERT_HOST_SECS. End in *ret_valid_before (may be NULL). */
int sshcert_sign_host(const struct sshcert_ca *ca, const struct sshcert_pubkey *key,
		      const char *instance_id, uint64_t serial, int64_t now,
		      int64_t valid_before, char **ret_cert, int64_t *ret_valid_before);

/* A random non-zero serial. */
uint64_t sshcert_serial_new(void);

/* Wipe and free a string holding a private key. NULL-safe. */
void sshcert_free_secret(char *s);

#endif
