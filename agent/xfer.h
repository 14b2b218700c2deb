/* xfer.h: bcd's bulk HTTP transfers over libcurl, written once for the
 * images (image.c) and the snapshots (snapshot.c).
 *
 * Downloads stream into a temporary name in the target directory
 * (".<sha256>.part.<pid>"), hashed with SHA-256 as they arrive, and get
 * their final name <sha256> only when the digest matched: a file under
 * that name always holds those bytes, and a partial file never has it.
 * Uploads stream a file with PUT in curl's fixed-size blocks (constant
 * memory whatever the size), hashing what was sent; a failed attempt is
 * retried from byte 0 with a fresh digest, never resumed in the middle.
 *
 * https only; a test may allow http to a loopback address (127.0.0.1,
 * [::1], localhost) with allow_http_loopback, which only test-named
 * configuration keys set. */
#ifndef BC_AGENT_XFER_H
#define BC_AGENT_XFER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XFER_SHA_HEX 65          /* 64 hex digits and the NUL */
#define XFER_PUT_ATTEMPTS 3      /* an upload is tried at most this often */
#define XFER_BLOCK (256 * 1024)  /* curl's upload buffer: the memory an upload holds */

/* Options (borrowed for the call). */
struct xfer_opts {
	const char *ca_file;          /* NULL/"": the system's CAs */
	bool allow_http_loopback;     /* tests only: http to 127.0.0.1/[::1]/localhost */
	const atomic_bool *cancel;    /* set: the transfer stops (-ECANCELED); may be NULL */
	uint32_t retry_delay_ms;      /* before a retried upload; 0: 1000 */
};

/* True if url is one these options allow: https://..., or with
 * allow_http_loopback http://127.0.0.1, http://[::1] or http://localhost. */
bool xfer_url_ok(const struct xfer_opts *o, const char *url);

/* Make dir/<sha256> hold the bytes at url whose SHA-256 is sha256 (64
 * lowercase hex digits): 0 at once if the file exists; otherwise a
 * download through dir/.<sha256>.part.<pid>, renamed (mode 0644) only once
 * the digest matched. Failures leave no file and say why (whylen bytes,
 * no prefix): -EBADMSG the digest differs, -EFBIG more than max_bytes,
 * -EIO the transfer or the disk failed, -ECANCELED, -EINVAL a URL
 * xfer_url_ok refuses or a bad digest string. *ret_path malloc'd. */
int xfer_get_verified(const struct xfer_opts *o, const char *url, const char *dir,
		      const char *sha256, uint64_t max_bytes, char **ret_path, char *why,
		      size_t whylen);

/* PUT the file at path to url, at most XFER_PUT_ATTEMPTS times (a 4xx
 * answer other than 408/429 is not retried: the URL is refused), each
 * from byte 0. On success ret_sha (XFER_SHA_HEX) holds the SHA-256 of the
 * bytes sent and *ret_size their count, *ret_attempts how many attempts it
 * took. -EINVAL a refused URL, -ENOENT no file, -EIO every attempt failed,
 * -ECANCELED; why says what. */
int xfer_put_file(const struct xfer_opts *o, const char *url, const char *path, char *ret_sha,
		  uint64_t *ret_size, unsigned *ret_attempts, char *why, size_t whylen);

/* True if name is a partial download ".<...>.part.<pid>" of a process
 * other than this one (a killed bcd's): safe to remove. */
bool xfer_stale_part(const char *name);

#endif
