/* sealed.h: the sealed store. Opaque blobs (an instance's rendered user
 * data today; secrets later) are put, read and deleted by reference, inside
 * the caller's transaction. The only code that knows how they are kept:
 * table sealed_blobs, scheme "envelope-v1": AES-256-GCM under a data key of
 * their own wrapped by the key-encryption key (common/envelope.h), with the
 * blob's ref and tenant as authenticated data. The KEK file is made by
 * `bc-controller init` and rotated by `bc-controller secrets rotate-kek`
 * (controller/kek.c); rows of the old scheme "plain" are sealed by
 * `bc-controller secrets migrate` (sealed_migrate). */
#ifndef BC_CTL_SEALED_H
#define BC_CTL_SEALED_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"

#define SEALED_REF_MAX 64            /* "sealed_" + 26 chars + NUL fits */
#define SEALED_DATA_MAX (1u << 20)   /* one blob, bytes */

/* Who a blob belongs to; it is deleted with its owner. */
struct sealed_owner {
	const char *kind;       /* "instance" */
	const char *id;
	const char *tenant_id;  /* may be NULL */
};

/* Seal len bytes of data for owner; ret_ref (SEALED_REF_MAX bytes) names
 * it. 0, -EINVAL (empty or above SEALED_DATA_MAX), -ENOKEY (no key file
 * loaded: sealed_keys_load), or a db_exec error. */
int sealed_put(struct db *d, const struct sealed_owner *o, const void *data, size_t len,
	       char ret_ref[SEALED_REF_MAX]);

/* The bytes ref names: *ret malloc'd (NUL-terminated for convenience,
 * not counted in *ret_len); wipe and free() it. -ENOENT if there is no
 * such blob; -ENOKEY when its key id is not in the key file, -EBADMSG when
 * it does not open (tampered with, or copied from another row), -EPROTO for
 * a plain row (each logged with the ref, never the bytes). */
int sealed_get(struct db *d, const char *ref, char **ret, size_t *ret_len);

/* Delete the blobs named by refs (newline-separated; empty lines ignored).
 * Returns how many were deleted, or <0. */
int sealed_delete(struct db *d, const char *refs);

/* Load the key-encryption keys from path (kept for the process; the file
 * is read again whenever it changes, so a rotation by another process is
 * seen by the next put). 0, -ENOENT (no file: run `bc-controller init` or
 * `bc-controller secrets init-kek`), -EPERM (readable by group or others),
 * -EBADMSG (malformed; logged with the line). */
int sealed_keys_load(const char *path);

/* Forget the loaded keys (wiped). */
void sealed_keys_unload(void);

/* How many blobs are stored plain (*ret_plain) and how many under a key
 * other than the current one (*ret_stale). 0 or a db error. */
int sealed_count(struct db *d, int64_t *ret_plain, int64_t *ret_stale);

/* Seal every plain row in place, in batches: *ret_n rows sealed. 0 or <0
 * (a db error; the rows done so far stay done). */
int sealed_migrate(struct db *d, int64_t *ret_n);

/* One pass rewrapping every blob whose data key is wrapped by another key
 * than the current one: *ret_n rewrapped, *ret_failed that would not open
 * (logged by ref). Online: puts and gets go on meanwhile. 0 or a db error. */
int sealed_rewrap(struct db *d, int64_t *ret_n, int64_t *ret_failed);

#endif
