/* rpc_static.c: what to answer to a request for a static file
 * (rpc_static.h), as pure functions: the exact-name lookup, the redirect of
 * the bare prefix, the methods, If-None-Match, and the head with the
 * security headers. rpc_http_static.c writes the answer on a connection;
 * tests/unit/test_rpc_static.c and tests/fuzz/fuzz_static.c drive these. */
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
