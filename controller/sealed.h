/* sealed.h: the sealed store. Opaque blobs (an instance's rendered user
 * data today; secrets later) are put, read and deleted by reference, inside
 * the caller's transaction. The only code that knows how they are kept:
 * today as given (scheme "plain", table sealed_blobs); the secret broker
 * adds AES-256-GCM behind these same calls. */
#ifndef BC_CTL_SEALED_H
#define BC_CTL_SEALED_H

#include <stddef.h>

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
 * it. 0, -EINVAL (empty or above SEALED_DATA_MAX), or a db_exec error. */
int sealed_put(struct db *d, const struct sealed_owner *o, const void *data, size_t len,
	       char ret_ref[SEALED_REF_MAX]);

/* The bytes ref names: *ret malloc'd (NUL-terminated for convenience,
 * not counted in *ret_len); free() it. -ENOENT if there is no such blob. */
int sealed_get(struct db *d, const char *ref, char **ret, size_t *ret_len);

/* Delete the blobs named by refs (newline-separated; empty lines ignored).
 * Returns how many were deleted, or <0. */
int sealed_delete(struct db *d, const char *refs);

#endif
