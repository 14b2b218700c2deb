/* envelope.h: envelope encryption of opaque blobs (controller/sealed.c keeps
 * them in PostgreSQL). Each blob is AES-256-GCM under its own random data
 * key (DEK); the DEK is AES-256-GCM-wrapped by a key-encryption key (KEK)
 * that lives in a file outside the database, named by a key id written in
 * the envelope. The caller's authenticated data (the blob's ref and tenant)
 * binds both the data and the wrapped DEK, so an envelope copied to another
 * row does not open. Rotating the KEK rewraps the DEK only: the data part
 * of an envelope never changes.
 *
 * The KEK file ("keyring") is text, one key a line, the last line current:
 *
 *     # comment
 *     kek_01jdzq3m5n8p9r7s6t5v4w3x2y 64-hex-digit key
 *
 * Library code: nothing logs; keys are wiped when freed. */
#ifndef BC_ENVELOPE_H
#define BC_ENVELOPE_H

#include <stddef.h>

#define ENVELOPE_KEY_LEN 32
#define ENVELOPE_KID_MAX 40          /* a key id with its NUL */
#define ENVELOPE_KEYS_MAX 256        /* keys one file may hold */
#define ENVELOPE_OVERHEAD(kid_len) (4 + 1 + (kid_len) + 12 + 32 + 16 + 12 + 16)

struct envelope_key {
	char id[ENVELOPE_KID_MAX];
	unsigned char key[ENVELOPE_KEY_LEN];
};

struct envelope_ring {
	struct envelope_key *keys;   /* room for ENVELOPE_KEYS_MAX; keys[n - 1] is current */
	size_t n;
};

/* Parse a keyring file's text. 0 and *ret (envelope_ring_free it), or
 * -EBADMSG with *ret_line the 1-based line at fault (0 for an empty
 * ring), -E2BIG past ENVELOPE_KEYS_MAX, -EEXIST for a key id twice. */
int envelope_ring_parse(const char *text, struct envelope_ring **ret, int *ret_line);

/* The ring as file text: malloc'd; the caller wipes (OPENSSL_cleanse) and
 * frees it. */
char *envelope_ring_format(const struct envelope_ring *r);

/* Append a new random key, which becomes current; its id into ret_id. 0,
 * -E2BIG when the ring is full, -EIO when no randomness. */
int envelope_ring_add(struct envelope_ring *r, char ret_id[ENVELOPE_KID_MAX]);

/* The key named id, or NULL. */
const struct envelope_key *envelope_ring_find(const struct envelope_ring *r, const char *id);

/* The current key (the last), or NULL for an empty ring. */
const struct envelope_key *envelope_ring_current(const struct envelope_ring *r);

/* Wipe and free; NULL is fine. */
void envelope_ring_free(struct envelope_ring *r);

/* Seal len bytes (len > 0) under a new DEK wrapped by the ring's current
 * key, binding aad: *ret (malloc'd, *ret_len bytes) is the envelope.
 * 0, -ENOKEY (empty ring), -EIO (OpenSSL failed). */
int envelope_seal(const struct envelope_ring *r, const void *aad, size_t aad_len,
		  const void *data, size_t len, unsigned char **ret, size_t *ret_len);

/* Open an envelope sealed with the same aad: *ret malloc'd, NUL-terminated
 * (not counted in *ret_len); the caller wipes and frees it. -EBADMSG when
 * it is malformed, tampered with or sealed for other aad; -ENOKEY when
 * its key id is not in the ring (envelope_key_id names it). */
int envelope_open(const struct envelope_ring *r, const void *aad, size_t aad_len,
		  const unsigned char *env, size_t env_len, char **ret, size_t *ret_len);

/* The same envelope with its DEK wrapped by the ring's current key instead
 * (the data part is kept byte for byte): *ret malloc'd. Errors as
 * envelope_open. */
int envelope_rewrap(const struct envelope_ring *r, const void *aad, size_t aad_len,
		    const unsigned char *env, size_t env_len, unsigned char **ret,
		    size_t *ret_len);

/* The key id an envelope names, into ret_id. 0 or -EBADMSG. */
int envelope_key_id(const unsigned char *env, size_t env_len, char ret_id[ENVELOPE_KID_MAX]);

#endif
