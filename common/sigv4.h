/* sigv4.h: AWS Signature Version 4 for S3-compatible object stores
 * (sigv4.c). Pure functions: the clock is an argument, nothing is sent.
 *
 * Two forms, as S3 defines them:
 *   - a presigned URL (query-string auth: X-Amz-Algorithm, -Credential,
 *     -Date, -Expires, -SignedHeaders=host, -Signature; the payload
 *     UNSIGNED-PAYLOAD), which whoever holds it may use until it expires;
 *   - a signed request (Authorization, x-amz-date and x-amz-content-sha256
 *     headers over an empty body) for the controller's own DELETE or HEAD.
 * Path-style (https://host/bucket/key) or virtual-hosted-style
 * (https://bucket.host/key; not for a bucket with a dot, which no
 * wildcard certificate covers: botocore goes path-style then, we refuse).
 * The object key is URI-encoded as S3 wants it:
 * every byte but A-Z a-z 0-9 - . _ ~ as %XX (uppercase), '/' kept. The
 * layout is botocore's byte for byte (tests/integration/sigv4_boto3.t). */
#ifndef BC_SIGV4_H
#define BC_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIGV4_EXPIRES_MAX 604800   /* seconds: S3 refuses longer presigned URLs */
#define SIGV4_KEY_MAX 1024         /* bytes of an object key (S3's limit) */
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The credentials: borrowed; the secret is never copied except into the
 * derived keys, which are wiped. */
struct sigv4_cred {
	const char *access_key_id;
	const char *secret;
};

/* One request to sign. All borrowed. */
struct sigv4_req {
	const char *method;   /* "PUT", "GET", "DELETE", "HEAD" */
	bool https;           /* the URL's scheme */
	const char *host;     /* the endpoint's host[:port], lowercase (not signing a default port) */
	const char *region;   /* "us-east-1" */
	const char *bucket;
	bool path_style;
	const char *prefix;   /* prepended to key as is (NULL: none) */
	const char *key;      /* the object's key; NULL or "": the bucket itself */
	const char *query;    /* signed requests only: an extra canonical query
			       * ("lifecycle=", "max-keys=2&prefix=J"), or NULL */
	int64_t now;          /* the clock, seconds since the epoch (UTC) */
};

/* What was signed, for tests: each malloc'd; sigv4_trace_free. */
struct sigv4_trace {
	char *canonical_request;
	char *string_to_sign;
};

/* A signed request: the URL to send it to and its three headers' values
 * (sigv4_signed_free). */
struct sigv4_signed {
	char *url;
	char *authorization;
	char amz_date[17];        /* 20130524T000000Z */
	char content_sha256[65];  /* SIGV4_EMPTY_SHA256 */
};

/* The presigned URL for q valid expires seconds from q->now: *ret_url
 * malloc'd. trace may be NULL. 0, or -EINVAL (a field missing or
 * malformed, a virtual-hosted bucket with a dot, expires outside
 * 1..SIGV4_EXPIRES_MAX, key longer than SIGV4_KEY_MAX), -ENOMEM. */
int sigv4_presign(const struct sigv4_req *q, const struct sigv4_cred *c, int expires,
		  char **ret_url, struct sigv4_trace *trace);

/* Sign q (empty body) with headers: ret filled on success. trace may be
 * NULL. 0, -EINVAL, -ENOMEM. */
int sigv4_sign(const struct sigv4_req *q, const struct sigv4_cred *c, struct sigv4_signed *ret,
	       struct sigv4_trace *trace);

/* S3's URI encoding of len bytes of s (keep_slash: '/' stays, as in a
 * key; else %2F, as in a query value): *ret malloc'd. 0 or -ENOMEM. */
int sigv4_uri_encode(const char *s, size_t len, bool keep_slash, char **ret);

void sigv4_signed_free(struct sigv4_signed *s);
void sigv4_trace_free(struct sigv4_trace *t);

#endif
