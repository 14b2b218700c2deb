/* snapstore.c: the snapshot store (snapstore.h). The configuration is
 * checked in one place (store_parse) both by serve at start and by every
 * use; the secret access key comes from the sealed store (a secret_refs row
 * of kind snapshot-store-key in the root tenant, migration 0021) and lives
 * in memory only while a struct snapstore does. Presigning is pure
 * (common/sigv4.c); the controller's own requests (DELETE, and the check
 * command's HEAD/PUT/GET) go through one libcurl function, store_http,
 * that never logs: a URL carries a signature, so none reaches a log line
 * or an error message. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "app.h"
#include "sealed.h"
#include "sigv4.h"
#include "snapstore.h"
#include "util.h"
#include "validate.h"

#define BODY_MAX (64 * 1024)          /* bytes of an answer kept */
#define ENDPOINT_MAX 300
#define PREFIX_MAX 512
#define INVALID "snapshot-store-invalid"  /* details.reason of a malformed key */

struct snapstore {
	bool https, path_style, allow_http;
	char host[ENDPOINT_MAX];          /* host[:port], lowercase */
	char *region, *bucket, *prefix, *access_key_id, *ca_file;
	int timeout_seconds;
	char secret[SNAPSTORE_SECRET_MAX + 1];
};

/* ------------------------------------------------------------- the config */

/* localhost, [::1] or an IPv4 address 127.x.y.z (digits: a name such as
 * 127.example.com is not one) */
static bool loopback(const char *host)
{
	size_t n = strcspn(host, ":");

	if (host[0] == '[')
		return strncmp(host, "[::1]", 5) == 0 && (host[5] == '\0' || host[5] == ':');
	return (n == 9 && strncmp(host, "localhost", 9) == 0) ||
	       (n > 4 && strncmp(host, "127.", 4) == 0 && strspn(host, "0123456789.") == n);
}

/* host[:port] or [v6][:port], lowercase, a port 1..65535 */
static bool host_ok(const char *h)
{
	const char *p = h, *port;

	if (*p == '[') {
		p += strspn(p + 1, "0123456789abcdef:.") + 1;
		if (*p++ != ']' || p - h < 4)
			return false;
	} else {
		p += strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789.-");
		if (p == h || h[0] == '.' || h[0] == '-')
			return false;
	}
	if (*p == '\0')
		return true;
	port = p + 1;
	if (*p != ':' || !*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
		return false;
	return atoi(port) >= 1 && atoi(port) <= 65535;
}

static int parse_endpoint(const struct ctl_config *c, struct snapstore *s, bc_error *err)
{
	const char *e = c->snapshot_store_endpoint, *h;
	size_t n;

	if (!e || !*e)
		return invalid_config(err, "snapshot_store_endpoint", "no-snapshot-store",
				      "no snapshot store is configured (config key "
				      "snapshot_store_endpoint, docs/snapshots.md)");
	s->https = strncmp(e, "https://", 8) == 0;
	if (!s->https && strncmp(e, "http://", 7) != 0)
		return invalid_config(err, "snapshot_store_endpoint", INVALID,
				      "snapshot_store_endpoint must be https://HOST[:PORT], "
				      "got '%s'", e);
	h = e + (s->https ? 8 : 7);
	n = strlen(h);
	if (n && h[n - 1] == '/')
		n--;
	if (n == 0 || n >= sizeof(s->host))
		return invalid_config(err, "snapshot_store_endpoint", INVALID,
				      "snapshot_store_endpoint must be https://HOST[:PORT], "
				      "got '%s'", e);
	for (size_t i = 0; i < n; i++)
		s->host[i] = (char)tolower((unsigned char)h[i]);
	s->host[n] = '\0';
	if (!host_ok(s->host))
		return invalid_config(err, "snapshot_store_endpoint", INVALID,
				      "snapshot_store_endpoint must be https://HOST[:PORT] "
				      "(no path), got '%s'", e);
	if (!s->https && !(c->snapshot_store_allow_http_loopback_for_tests && loopback(s->host)))
		return invalid_config(err, "snapshot_store_endpoint", "snapshot-store-insecure",
				      "snapshot_store_endpoint must be https (URLs for hosts carry "
				      "credentials), got '%s'", e);
	return 0;
}

static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	return n >= 3 && n <= 63 && strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n &&
	       isalnum((unsigned char)b[0]) && isalnum((unsigned char)b[n - 1]) &&
	       !strstr(b, "..");
}

/* No "." or ".." segment and no leading '/': a key names one object. */
static bool segments_ok(const char *k)
{
	if (*k == '/')
		return false;
	for (const char *p = k; p && *p; p = strchr(p, '/') ? strchr(p, '/') + 1 : NULL) {
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
	}
	return true;
}

static bool region_ok(const char *r)
{
	return r && *r && strlen(r) <= 64 &&
	       strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(r);
}


static int parse_rest(const struct ctl_config *c, struct snapstore *s, bc_error *err)
{
	const char *r = c->snapshot_store_region, *b = c->snapshot_store_bucket;
	const char *p = c->snapshot_store_prefix, *k = c->snapshot_store_access_key_id;
	const char *ca = c->snapshot_store_ca_file;

	if (!region_ok(r))
		return invalid_config(err, "snapshot_store_region", INVALID, "snapshot_store_region "
				      "must be a region name (us-east-1), got '%s'", r ? r : "");
	if (!b || !bucket_ok(b))
		return invalid_config(err, "snapshot_store_bucket", INVALID, "snapshot_store_bucket "
				      "must be a bucket name (3 to 63 of a-z 0-9 . -), got '%s'",
				      b ? b : "");
	if (strchr(b, '.') && !c->snapshot_store_path_style)
		return invalid_config(err, "snapshot_store_path_style", INVALID, "bucket '%s' has "
				      "a dot, which no wildcard certificate covers: set "
				      "snapshot_store_path_style = 1", b);
	if (!p || strlen(p) > PREFIX_MAX || !str_is_printable(p, PREFIX_MAX + 1) ||
	    !segments_ok(p))
		return invalid_config(err, "snapshot_store_prefix", INVALID, "snapshot_store_prefix "
				      "must be printable, at most 512 bytes, without a leading '/' "
				      "or a '.' or '..' segment, got '%s'", p ? p : "");
	if (!k || !*k || strlen(k) > 128 || strpbrk(k, " /?#@\\") || !str_is_printable(k, 129))
		return invalid_config(err, "snapshot_store_access_key_id", INVALID,
				      "snapshot_store_access_key_id must be set (the secret goes "
				      "through bc-controller snapshot-store set-secret)");
	if (ca && *ca && access(ca, R_OK) < 0)
		return invalid_config(err, "snapshot_store_ca_file", INVALID,
				      "snapshot_store_ca_file %s cannot be read", ca);
	return 0;
}

static void store_free_fields(struct snapstore *s)
{
	free(s->region);
	free(s->bucket);
	free(s->prefix);
	free(s->access_key_id);
	free(s->ca_file);
	OPENSSL_cleanse(s->secret, sizeof(s->secret));
}

void snapstore_free(struct snapstore *s)
{
	if (!s)
		return;
	store_free_fields(s);
	free(s);
}

/* The configuration checked into a new store without its secret. */
static int store_parse(const struct ctl_config *c, struct snapstore **ret, bc_error *err)
{
	struct snapstore *s = xcalloc(1, sizeof(*s));
	int r;

	if ((r = parse_endpoint(c, s, err)) < 0 || (r = parse_rest(c, s, err)) < 0) {
		snapstore_free(s);
		return r;
	}
	s->path_style = c->snapshot_store_path_style;
	s->allow_http = !s->https;
	s->timeout_seconds = c->snapshot_store_timeout_seconds;
	s->region = xstrdup(c->snapshot_store_region);
	s->bucket = xstrdup(c->snapshot_store_bucket);
	s->prefix = xstrdup(c->snapshot_store_prefix);
	s->access_key_id = xstrdup(c->snapshot_store_access_key_id);
	s->ca_file = xstrdup(c->snapshot_store_ca_file ? c->snapshot_store_ca_file : "");
	*ret = s;
	return 0;
}

int snapstore_require(const struct ctl_config *c, bc_error *err)
{
	struct snapstore *s = NULL;
	int r = store_parse(c, &s, err);

	snapstore_free(s);
	return r;
}

/* ------------------------------------------------------------- the secret */

static int read_secret(struct db *d, struct snapstore *s, bc_error *err)
{
	enum { SK_REF };
	struct dbp p = {0};
	PGresult *r = NULL;
	char *v = NULL;
	size_t n = 0;
	int rc;

	dbp_str(&p, AUTH_ROOT_TENANT);
	dbp_str(&p, SNAPSTORE_SECRET_KIND);
	dbp_str(&p, SNAPSTORE_SECRET_NAME);
	if ((rc = db_exec(d, &r, "SELECT s.sealed_ref FROM secret_refs s WHERE s.tenant_id = $1 "
			  "AND s.kind = $2 AND s.name = $3", &p)) < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1) {
		PQclear(r);
		bc_error_set(err, BC_INVALID_CONFIG, "the snapshot store has no secret access key: "
			     "run bc-controller snapshot-store set-secret");
		return bc_error_detail(err, "reason", "snapshot-store-no-secret");
	}
	rc = sealed_get(d, db_val(r, 0, SK_REF), &v, &n);
	PQclear(r);
	if (rc < 0)
		return bc_error_set(err, BC_INTERNAL, "the snapshot store's secret access key "
				    "cannot be opened: %s", strerror(-rc));
	if (n == 0 || n > SNAPSTORE_SECRET_MAX)
		rc = bc_error_set(err, BC_INTERNAL, "the snapshot store's secret access key is "
				  "malformed: run bc-controller snapshot-store set-secret");
	else
		memcpy(s->secret, v, n + 1);
	OPENSSL_cleanse(v, n);
	free(v);
	return rc < 0 ? rc : 0;
}

int snapstore_open(const struct ctl_config *c, struct db *d, struct snapstore **ret,
		   bc_error *err)
{
	struct snapstore *s = NULL;
	int r;

	if ((r = store_parse(c, &s, err)) < 0)
		return r;
	if ((r = read_secret(d, s, err)) < 0) {
		snapstore_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

/* ------------------------------------------------------------ presigning */

static bool key_ok(const struct snapstore *s, const char *key)
{
	return key && *key && strlen(s->prefix) + strlen(key) <= SIGV4_KEY_MAX &&
	       str_is_printable(key, SIGV4_KEY_MAX + 1) && segments_ok(key);
}

static struct sigv4_req store_req(const struct snapstore *s, const char *method,
				  const char *key, int64_t now)
{
	return (struct sigv4_req){.method = method, .https = s->https, .host = s->host,
				  .region = s->region, .bucket = s->bucket,
				  .path_style = s->path_style, .prefix = key ? s->prefix : NULL,
				  .key = key, .now = now};
}

int snapstore_presign_at(const struct snapstore *s, const char *method, const char *key,
			 int ttl_seconds, int64_t now, char **ret_url)
{
	struct sigv4_req q = store_req(s, method, key, now);
	struct sigv4_cred c = {s->access_key_id, s->secret};

	if (!key_ok(s, key) || (strcmp(method, "PUT") != 0 && strcmp(method, "GET") != 0))
		return -EINVAL;
	return sigv4_presign(&q, &c, ttl_seconds, ret_url, NULL);
}

int snapstore_presign_put(const struct snapstore *s, const char *key, int ttl_seconds,
			  char **ret_url)
{
	return snapstore_presign_at(s, "PUT", key, ttl_seconds, now_ms() / 1000, ret_url);
}

int snapstore_presign_get(const struct snapstore *s, const char *key, int ttl_seconds,
			  char **ret_url)
{
	return snapstore_presign_at(s, "GET", key, ttl_seconds, now_ms() / 1000, ret_url);
}

/* ---------------------------------------------------------- the requests */

struct xfer {
	const char *up;
	size_t up_len, up_off;
	char *body;
	size_t body_len;
};

static size_t on_read(char *buf, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t k = size * n < x->up_len - x->up_off ? size * n : x->up_len - x->up_off;

	memcpy(buf, x->up + x->up_off, k);
	x->up_off += k;
	return k;
}

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t k = size * n;

	if (x->body_len + k > BODY_MAX)
		return 0; /* more than an answer: stop */
	x->body = xrealloc(x->body, x->body_len + k + 1);
	memcpy(x->body + x->body_len, data, k);
	x->body_len += k;
	x->body[x->body_len] = '\0';
	return k;
}

/* The text of <tag>...</tag> in an S3 error document, printable only. */
static void xml_field(const char *xml, const char *tag, char *out, size_t outlen)
{
	char open[32], close[32];
	const char *a, *b;
	size_t n = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	out[0] = '\0';
	if (!xml || !(a = strstr(xml, open)) || !(b = strstr(a, close)))
		return;
	for (a += strlen(open); a < b && n + 1 < outlen; a++)
		out[n++] = (unsigned char)*a >= 0x20 && *a != 0x7f ? *a : '?';
	out[n] = '\0';
}

static CURL *store_handle(const struct snapstore *s, const char *url, struct xfer *x)
{
	CURL *c = curl_easy_init();
	const char *protos = s->allow_http ? "http,https" : "https";

	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, protos);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)s->timeout_seconds);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)s->timeout_seconds);
	if (*s->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, s->ca_file);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	return c;
}

/* The URL and headers of one request: presigned for PUT/GET, signed for
 * HEAD/DELETE (the secret stays in this process either way). */
static int store_sign(const struct snapstore *s, const char *method, const char *key,
		      char **ret_url, struct curl_slist **hdrs)
{
	struct sigv4_req q = store_req(s, method, key, now_ms() / 1000);
	struct sigv4_cred cr = {s->access_key_id, s->secret};
	struct sigv4_signed sg = {0};
	char *h;
	int r;

	if (key && !key_ok(s, key))
		return -EINVAL;
	if (strcmp(method, "PUT") == 0 || strcmp(method, "GET") == 0)
		return key ? sigv4_presign(&q, &cr, 60, ret_url, NULL) : -EINVAL;
	if ((r = sigv4_sign(&q, &cr, &sg, NULL)) < 0)
		return r;
	h = xasprintf("Authorization: %s", sg.authorization);
	*hdrs = curl_slist_append(*hdrs, h);
	OPENSSL_cleanse(h, strlen(h));
	free(h);
	h = xasprintf("x-amz-date: %s", sg.amz_date);
	*hdrs = curl_slist_append(*hdrs, h);
	free(h);
	h = xasprintf("x-amz-content-sha256: %s", sg.content_sha256);
	*hdrs = curl_slist_append(*hdrs, h);
	free(h);
	*ret_url = sg.url;
	sg.url = NULL;
	sigv4_signed_free(&sg);
	return 0;
}

int snapstore_request(const struct snapstore *s, const char *method, const char *key,
		      const void *body, size_t len, struct snapstore_answer *ret)
{
	struct xfer x = {.up = body, .up_len = body ? len : 0};
	struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
	_cleanup_free_ char *url = NULL;
	CURL *c = NULL;
	CURLcode cr;
	int r;

	memset(ret, 0, sizeof(*ret));
	if ((r = store_sign(s, method, key, &url, &hdrs)) < 0 ||
	    !(c = store_handle(s, url, &x))) {
		curl_slist_free_all(hdrs);
		return r < 0 ? r : -ENOMEM;
	}
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	else if (strcmp(method, "PUT") == 0) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, &x);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x.up_len);
	} else if (strcmp(method, "DELETE") == 0)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	cr = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &ret->status);
	curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	if (cr != CURLE_OK) {
		snprintf(ret->code, sizeof(ret->code), "%s", curl_easy_strerror(cr));
		free(x.body);
		return -EIO;
	}
	xml_field(x.body, "Code", ret->code, sizeof(ret->code));
	xml_field(x.body, "Message", ret->message, sizeof(ret->message));
	ret->body = x.body;
	ret->body_len = x.body_len;
	return 0;
}

int snapstore_delete(const struct snapstore *s, const char *key, bc_error *err)
{
	struct snapstore_answer a;
	int r;

	if (!key_ok(s, key))
		return -EINVAL;
	r = snapstore_request(s, "DELETE", key, NULL, 0, &a);
	free(a.body);
	if (r == -EIO)
		bc_error_set(err, BC_UNAVAILABLE, "the snapshot store did not answer a DELETE: %s",
			     a.code);
	else if (r == 0 && a.status != 204 && a.status != 200 && a.status != 404)
		r = bc_error_set(err, BC_UNAVAILABLE, "the snapshot store refused a DELETE: HTTP "
				 "%ld %s%s%s", a.status, a.code, *a.message ? ": " : "",
				 a.message) < 0 ? -EIO : 0;
	return r;
}
