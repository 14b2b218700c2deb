/* snapstore.h: the snapshot store (snapstore.c): an S3-compatible object
 * store the operator runs (AWS S3, MinIO, Ceph RGW; s3rver in tests) that
 * hosts upload snapshots to and restoring hosts download them from, both
 * through short-lived presigned URLs (common/sigv4.h), and that the
 * controller deletes objects from with a signed DELETE (libcurl, never
 * inside a transaction). Configured by the snapshot_store_* keys; the
 * secret access key is never in the config file: it is sealed
 * (controller/sealed.h) by `bc-controller snapshot-store set-secret`
 * (snapstore_cmd.c). Presigned URLs are for hosts, never for an API answer
 * or a log line. docs/snapshots.md. */
#ifndef BC_CTL_SNAPSTORE_H
#define BC_CTL_SNAPSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "app.h"
#include "config.h"
#include "db.h"
#include "err.h"

#define SNAPSTORE_SECRET_MAX 256     /* bytes of a secret access key */
#define SNAPSTORE_SECRET_NAME "snapshot-store.secret-access-key"
#define SNAPSTORE_SECRET_KIND "snapshot-store-key"

/* The store: its configuration, checked, and its secret (wiped by
 * snapstore_free). */
struct snapstore;

/* Whether the configuration names a usable store, without the database:
 * 0, or INVALID_CONFIG with details reason no-snapshot-store (no endpoint:
 * what sandboxes.snapshot answers then), snapshot-store-insecure (an
 * endpoint that is not https, unless
 * snapshot_store_allow_http_loopback_for_tests and a loopback host) or
 * snapshot-store-invalid, and field naming the config key. */
int snapstore_require(const struct ctl_config *c, bc_error *err);

/* The store of config c, its secret read from the sealed store through d
 * (outside or inside the caller's transaction; the KEK loaded): *ret on
 * success. snapstore_require's errors, or INVALID_CONFIG reason
 * snapshot-store-no-secret (never set: run snapshot-store set-secret),
 * INTERNAL for a secret that does not open or a database failure. */
int snapstore_open(const struct ctl_config *c, struct db *d, struct snapstore **ret,
		   bc_error *err);

/* Wipe the secret and free s (NULL-safe). */
void snapstore_free(struct snapstore *s);

/* A presigned PUT (upload) or GET (download) URL of the object key (the
 * configured prefix is prepended) valid ttl_seconds (1 to 604800) from
 * now: *ret_url malloc'd. For a host, never for an answer or a log line.
 * 0, or -EINVAL (a key that is empty, longer than 1024 bytes with the
 * prefix, not printable or with a "." or ".." segment; a ttl out of
 * range). */
int snapstore_presign_put(const struct snapstore *s, const char *key, int ttl_seconds,
			  char **ret_url);
int snapstore_presign_get(const struct snapstore *s, const char *key, int ttl_seconds,
			  char **ret_url);
/* The same at the clock now (seconds since the epoch), for tests. */
int snapstore_presign_at(const struct snapstore *s, const char *method, const char *key,
			 int ttl_seconds, int64_t now, char **ret_url);

/* Delete the object key with a signed DELETE (libcurl, blocking up to
 * snapshot_store_timeout_seconds: call it outside any transaction). An
 * object already gone (404) counts as deleted. 0, -EINVAL (key), or -EIO
 * with err UNAVAILABLE saying what the store answered (its error code and
 * message, never a URL or a signature). */
int snapstore_delete(const struct snapstore *s, const char *key, bc_error *err);

/* What a request to the store came back with. */
struct snapstore_answer {
	long status;          /* HTTP status, 0 when none came */
	char code[64];        /* the S3 error's <Code>, or curl's error */
	char message[256];    /* the S3 error's <Message> */
	char *body;           /* the body (GET), malloc'd; free() it */
	size_t body_len;
};

/* One request to the store: method HEAD, PUT, GET or DELETE on key (NULL:
 * the bucket), presigned (PUT/GET, with body for PUT) or signed with
 * headers (HEAD/DELETE). 0 with *ret filled (whatever the status), or
 * -EINVAL, -EIO (no answer: ret->code says why). For the check command. */
int snapstore_request(const struct snapstore *s, const char *method, const char *key,
		      const void *body, size_t len, struct snapstore_answer *ret);

/* `bc-controller snapshot-store VERB`: set-secret, check, presign, delete
 * (snapstore_cmd.c). args: the verb's own arguments. The exit status. */
int snapstore_command(struct ctl_app *app, const char *verb, int argc, char **argv);

/* Whether arg is one of the snapshot-store command's own flags (main.c
 * hands those to it rather than to the config); *takes_value for --ttl. */
bool snapstore_command_flag(const char *arg, bool *takes_value);

#endif
