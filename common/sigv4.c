/* sigv4.c: AWS Signature Version 4 for S3 (sigv4.h). The steps are AWS's:
 *
 *   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n PAYLOAD
 *   string to sign    = AWS4-HMAC-SHA256 \n DATE-TIME \n SCOPE \n hex(SHA256(creq))
 *   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" secret, date), region), "s3"),
 *                       "aws4_request")
 *   signature         = hex(HMAC(signing key, string to sign))
 *
 * A presigned URL signs only the host header and leaves the payload
 * unsigned; a signed request signs host, x-amz-content-sha256 and
 * x-amz-date over an empty body. Strings are built with open_memstream. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "sigv4.h"
#include "util.h"

#define SERVICE "s3"
#define ALGORITHM "AWS4-HMAC-SHA256"

static bool unreserved(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

int sigv4_uri_encode(const char *s, size_t len, bool keep_slash, char **ret)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(len * 3 + 1), *p = out;

	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (unreserved(ch) || (keep_slash && ch == '/')) {
			*p++ = (char)ch;
		} else {
			*p++ = '%';
			*p++ = hex[ch >> 4];
			*p++ = hex[ch & 15];
		}
	}
	*p = '\0';
	*ret = out;
	return 0;
}

static bool field_ok(const char *s, size_t max)
{
	return s && *s && strlen(s) <= max && str_is_printable(s, max) && !strpbrk(s, " /?#@\\");
}

static bool host_ok(const char *h)
{
	if (!field_ok(h, 255))
		return false;
	for (const char *p = h; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			return false;
	return true;
}

static bool method_ok(const char *m)
{
	static const char *const methods[] = {"GET", "PUT", "DELETE", "HEAD"};

	for (size_t i = 0; m && i < ARRAY_SIZE(methods); i++)
		if (strcmp(m, methods[i]) == 0)
			return true;
	return false;
}

static bool req_ok(const struct sigv4_req *q, const struct sigv4_cred *c)
{
	size_t klen = (q->prefix ? strlen(q->prefix) : 0) + (q->key ? strlen(q->key) : 0);

	return method_ok(q->method) && host_ok(q->host) && field_ok(q->region, 64) &&
	       field_ok(q->bucket, 63) && (q->path_style || !strchr(q->bucket, '.')) &&
	       klen <= SIGV4_KEY_MAX && q->now > 0 &&
	       field_ok(c->access_key_id, 128) && c->secret && *c->secret &&
	       strlen(c->secret) <= 256 && (!q->query || str_is_printable(q->query, 4096));
}

/* The host a request goes to (url_host: the bucket first when
 * virtual-hosted) and the one it signs (the scheme's default port dropped,
 * as botocore signs it; the URL keeps it). */
static void req_hosts(const struct sigv4_req *q, char **ret_url_host, char **ret_sign_host)
{
	const char *port = strrchr(q->host, ':');
	size_t n = strlen(q->host);
	const char *b = q->path_style ? "" : q->bucket, *dot = q->path_style ? "" : ".";

	if (port && strcmp(port + 1, q->https ? "443" : "80") == 0)
		n = (size_t)(port - q->host);
	*ret_url_host = xasprintf("%s%s%s", b, dot, q->host);
	*ret_sign_host = xasprintf("%s%s%.*s", b, dot, (int)n, q->host);
}

/* The request's path, already encoded: /bucket/key or /key. */
static int req_path(const struct sigv4_req *q, char **ret)
{
	_cleanup_free_ char *key = xasprintf("%s%s", q->prefix ? q->prefix : "",
					     q->key ? q->key : "");
	_cleanup_free_ char *enc = NULL;
	int r;

	if ((r = sigv4_uri_encode(key, strlen(key), true, &enc)) < 0)
		return r;
	if (!q->path_style)
		*ret = xasprintf("/%s", enc);
	else
		*ret = *enc ? xasprintf("/%s/%s", q->bucket, enc) : xasprintf("/%s", q->bucket);
	return 0;
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
	unsigned int n = 32;

	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

/* hex(HMAC(signing key, sts)) into sig; the derived keys are wiped. */
static void signature(const struct sigv4_cred *c, const char *date, const char *region,
		      const char *sts, char sig[65])
{
	unsigned char k[32], mac[32];
	char *first = xasprintf("AWS4%s", c->secret);

	hmac(first, strlen(first), date, k);
	OPENSSL_cleanse(first, strlen(first));
	free(first);
	hmac(k, 32, region, k);
	hmac(k, 32, SERVICE, k);
	hmac(k, 32, "aws4_request", k);
	hmac(k, 32, sts, mac);
	OPENSSL_cleanse(k, sizeof(k));
	hex_encode(mac, 32, sig);
}

struct parts {
	char amz_date[17], date[9];
	char *url_host, *host, *path, *scope, *creq, *sts;
	char sig[65];
};

static void parts_free(struct parts *p)
{
	free(p->url_host);
	free(p->host);
	free(p->path);
	free(p->scope);
	free(p->creq);
	free(p->sts);
}

static int parts_begin(const struct sigv4_req *q, struct parts *p)
{
	time_t t = (time_t)q->now;
	struct tm tm;
	int r;

	memset(p, 0, sizeof(*p));
	if (!gmtime_r(&t, &tm))
		return -EINVAL;
	strftime(p->amz_date, sizeof(p->amz_date), "%Y%m%dT%H%M%SZ", &tm);
	strftime(p->date, sizeof(p->date), "%Y%m%d", &tm);
	req_hosts(q, &p->url_host, &p->host);
	p->scope = xasprintf("%s/%s/" SERVICE "/aws4_request", p->date, q->region);
	if ((r = req_path(q, &p->path)) < 0)
		return r;
	return 0;
}

/* The canonical request, the string to sign and the signature of it. */
static void parts_sign(const struct sigv4_req *q, const struct sigv4_cred *c, struct parts *p,
		       const char *query, const char *headers, const char *signed_headers,
		       const char *payload)
{
	char h[65];

	p->creq = xasprintf("%s\n%s\n%s\n%s\n%s\n%s", q->method, p->path, query, headers,
			    signed_headers, payload);
	sha256_hex(p->creq, strlen(p->creq), h);
	p->sts = xasprintf(ALGORITHM "\n%s\n%s\n%s", p->amz_date, p->scope, h);
	signature(c, p->date, q->region, p->sts, p->sig);
}

static void trace_take(struct sigv4_trace *t, struct parts *p)
{
	if (!t)
		return;
	t->canonical_request = p->creq;
	t->string_to_sign = p->sts;
	p->creq = p->sts = NULL;
}

int sigv4_presign(const struct sigv4_req *q, const struct sigv4_cred *c, int expires,
		  char **ret_url, struct sigv4_trace *trace)
{
	struct parts p;
	_cleanup_free_ char *cred = NULL, *ecred = NULL, *query = NULL, *headers = NULL;
	int r;

	if (!req_ok(q, c) || q->query || expires < 1 || expires > SIGV4_EXPIRES_MAX)
		return -EINVAL;
	if ((r = parts_begin(q, &p)) < 0)
		goto out;
	cred = xasprintf("%s/%s", c->access_key_id, p.scope);
	if ((r = sigv4_uri_encode(cred, strlen(cred), false, &ecred)) < 0)
		goto out;
	/* already in the order of their names, as the canonical form wants */
	query = xasprintf("X-Amz-Algorithm=" ALGORITHM "&X-Amz-Credential=%s&X-Amz-Date=%s"
			  "&X-Amz-Expires=%d&X-Amz-SignedHeaders=host", ecred, p.amz_date, expires);
	headers = xasprintf("host:%s\n", p.host);
	parts_sign(q, c, &p, query, headers, "host", "UNSIGNED-PAYLOAD");
	*ret_url = xasprintf("%s://%s%s?%s&X-Amz-Signature=%s", q->https ? "https" : "http",
			     p.url_host, p.path, query, p.sig);
	trace_take(trace, &p);
out:
	parts_free(&p);
	return r;
}

int sigv4_sign(const struct sigv4_req *q, const struct sigv4_cred *c, struct sigv4_signed *ret,
	       struct sigv4_trace *trace)
{
	struct parts p;
	_cleanup_free_ char *headers = NULL;
	const char *query = q->query ? q->query : "";
	int r;

	if (!req_ok(q, c))
		return -EINVAL;
	if ((r = parts_begin(q, &p)) < 0)
		goto out;
	headers = xasprintf("host:%s\nx-amz-content-sha256:" SIGV4_EMPTY_SHA256
			    "\nx-amz-date:%s\n", p.host, p.amz_date);
	parts_sign(q, c, &p, query, headers, "host;x-amz-content-sha256;x-amz-date",
		   SIGV4_EMPTY_SHA256);
	memset(ret, 0, sizeof(*ret));
	ret->url = xasprintf("%s://%s%s%s%s", q->https ? "https" : "http", p.url_host, p.path,
			     *query ? "?" : "", query);
	ret->authorization = xasprintf(ALGORITHM " Credential=%s/%s, SignedHeaders=host;"
				       "x-amz-content-sha256;x-amz-date, Signature=%s",
				       c->access_key_id, p.scope, p.sig);
	memcpy(ret->amz_date, p.amz_date, sizeof(ret->amz_date));
	memcpy(ret->content_sha256, SIGV4_EMPTY_SHA256, sizeof(ret->content_sha256));
	trace_take(trace, &p);
out:
	parts_free(&p);
	return r;
}

void sigv4_signed_free(struct sigv4_signed *s)
{
	if (!s)
		return;
	free(s->url);
	free(s->authorization);
	s->url = s->authorization = NULL;
}

void sigv4_trace_free(struct sigv4_trace *t)
{
	if (!t)
		return;
	free(t->canonical_request);
	free(t->string_to_sign);
	t->canonical_request = t->string_to_sign = NULL;
}
