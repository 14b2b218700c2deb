/* rpc_http_static.c: static files on the JSON/HTTP port (rpc_static.h),
 * the web console at /console/ (docs/console.md).
 *
 * The files are a table compiled into the binary (contrib/embed-static.sh
 * from console/): a request is answered only when its path is exactly one
 * of the table's, so there is nothing to traverse. Every answer carries a
 * strict Content-Security-Policy (no inline script or style, same-origin
 * fetches only, no framing) and the headers that go with it; files are
 * revalidated by ETag (304). The console authenticates by a token in the
 * Authorization header of its fetches, never a cookie, so these pages
 * hold no credential a cross-site request could ride. */
#include "rpc_http_conn.h"
#include "rpc_static.h"

#include <string.h>

#include "util.h"

const char rpc_static_security_headers[] =
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
	"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
	"frame-ancestors 'none'\r\n"
	"X-Content-Type-Options: nosniff\r\n"
	"Referrer-Policy: no-referrer\r\n"
	"X-Frame-Options: DENY\r\n"
	"Cross-Origin-Opener-Policy: same-origin\r\n"
	"Cross-Origin-Resource-Policy: same-origin\r\n";

/* See rpc_static.h. */
bool rpc_static_under(const char *prefix, const char *target)
{
	size_t n = strlen(prefix);

	if (strncmp(target, prefix, n) == 0)
		return true;
	return n > 1 && strncmp(target, prefix, n - 1) == 0 && target[n - 1] == '\0';
}

/* One entity tag of an If-None-Match list, [p, p + n), matches etag. */
static bool etag_is(const char *p, size_t n, const char *etag)
{
	if (n >= 2 && strncmp(p, "W/", 2) == 0) {
		p += 2;
		n -= 2;
	}
	return (n == 1 && *p == '*') || (n == strlen(etag) && strncmp(p, etag, n) == 0);
}

static bool inm_matches(const char *inm, const char *etag)
{
	while (inm && *inm) {
		size_t n;

		inm += strspn(inm, " \t,");
		n = strcspn(inm, ",");
		while (n && (inm[n - 1] == ' ' || inm[n - 1] == '\t'))
			n--;
		if (n && etag_is(inm, n, etag))
			return true;
		inm = strchr(inm, ',');
	}
	return false;
}

/* See rpc_static.h. */
void rpc_static_decide(const struct rpc_static_file *files, size_t n, const char *prefix,
		       const char *method, const char *target, const char *inm,
		       struct rpc_static_reply *ret)
{
	bool head = strcmp(method, "HEAD") == 0;

	*ret = (struct rpc_static_reply){.status = 404};
	if (strncmp(target, prefix, strlen(prefix)) != 0 && rpc_static_under(prefix, target)) {
		ret->status = 301;
		ret->location = prefix;
		return;
	}
	for (size_t i = 0; i < n && !ret->file; i++)
		if (strcmp(files[i].path, target) == 0)
			ret->file = &files[i];
	if (!ret->file)
		return;
	if (!head && strcmp(method, "GET") != 0)
		ret->status = 405;
	else if (inm_matches(inm, ret->file->etag))
		ret->status = 304;
	else {
		ret->status = 200;
		ret->body = !head;
	}
}

/* See rpc_static.h. */
char *rpc_static_head(const struct rpc_static_reply *r, bool keep_alive)
{
	const struct rpc_static_file *f = r->file;

	if (r->status == 304)
		return xasprintf("HTTP/1.1 304 Not Modified\r\nETag: %s\r\nCache-Control: no-cache\r\n"
				 "%sConnection: %s\r\n\r\n",
				 f->etag, rpc_static_security_headers,
				 keep_alive ? "keep-alive" : "close");
	return xasprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "ETag: %s\r\nCache-Control: no-cache\r\n%sConnection: %s\r\n\r\n",
			 f->type, f->len, f->etag, rpc_static_security_headers,
			 keep_alive ? "keep-alive" : "close");
}

/* See rpc_http_conn.h. */
bool http_static_wants(const struct rpc_http *h, const struct rpc_http_request *req)
{
	const struct rpc_server_opts *o = &h->srv->opts;

	return o->static_files && o->static_prefix && rpc_static_under(o->static_prefix, req->target);
}

/* See rpc_http_conn.h. */
int http_static_serve(struct http_conn *c, const struct rpc_http_request *req)
{
	const struct rpc_server_opts *o = &c->h->srv->opts;
	bool ka = req->keep_alive && !atomic_load(&c->h->stopping);
	int64_t deadline = mono_ms() + HTTP_IO_TIMEOUT_MS;
	struct rpc_static_reply r;
	_cleanup_free_ char *head = NULL;
	int rc;

	rpc_static_decide(o->static_files, o->n_static_files, o->static_prefix, req->method,
			  req->target, rpc_http_header(req, "if-none-match"), &r);
	switch (r.status) {
	case 301:
		head = xasprintf("Location: %s\r\n%s", r.location, rpc_static_security_headers);
		return http_respond(c, 301, head, "{}", ka);
	case 404:
		return http_respond_error(c, 404, rpc_static_security_headers, ka, BC_NOT_FOUND, NULL,
					  "no such file: %.200s", req->target);
	case 405:
		head = xasprintf("Allow: GET, HEAD\r\n%s", rpc_static_security_headers);
		return http_respond_error(c, 405, head, ka, BC_INVALID_INPUT, NULL,
					  "method %s not allowed: use GET", req->method);
	}
	head = rpc_static_head(&r, ka);
	rc = http_conn_write(c, head, strlen(head), deadline);
	if (rc == 0 && r.body)
		rc = http_conn_write(c, (const char *)r.file->data, r.file->len, deadline);
	return rc;
}
