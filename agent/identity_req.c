/* identity_req.c: the identity endpoint's pure parts (identity_ep.h): the
 * request parser, the per-instance rate bucket, the controller code to HTTP
 * status mapping. Apart from identity_ep.c so the fuzzer
 * (tests/fuzz/fuzz_identity_req.c) links them alone. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "err.h"
#include "guest_ready.h"
#include "identity_ep.h"
#include "util.h"

static const struct {
	const char *line;   /* the request line up to the version */
	enum ie_route route;
} routes[] = {
	{"POST " BC_IDENTITY_ATTEST_PATH " ", IE_ROUTE_ATTEST},
	{"POST " BC_IDENTITY_RENEW_PATH " ", IE_ROUTE_RENEW},
	{"POST " BC_IDENTITY_STATE_PATH " ", IE_ROUTE_STATE},
	{"GET " BC_IDENTITY_BOOTSTRAP_PATH " ", IE_ROUTE_BOOTSTRAP},
};

/* The route whose request line buf[0..n) starts (or could still start):
 * 1 and *ret when whole, 0 when a prefix of one, -1 when none. */
static int route_of(const char *buf, size_t n, enum ie_route *ret)
{
	bool prefix = false;

	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		size_t l = strlen(routes[i].line);

		if (n >= l && memcmp(buf, routes[i].line, l) == 0) {
			*ret = routes[i].route;
			return 1;
		}
		if (n < l && memcmp(buf, routes[i].line, n) == 0)
			prefix = true;
	}
	return prefix ? 0 : -1;
}

/* The end of the headers (the index after the empty line) or 0. */
static size_t head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] == '\n' && buf[i + 1] == '\n')
			return i + 2;
		if (i + 3 < len && memcmp(buf + i, "\r\n\r\n", 4) == 0)
			return i + 4;
	}
	return 0;
}

/* Content-Length and Transfer-Encoding of the header lines in
 * buf[0..end): 0 with *ret_cl (-1: none), or -1 when malformed. */
static int headers(const char *buf, size_t end, long *ret_cl)
{
	static const char cl_name[] = "content-length:", te_name[] = "transfer-encoding:";
	const char *p = memchr(buf, '\n', end), *stop = buf + end;
	long cl = -1;

	for (p = p ? p + 1 : stop; p < stop;) {
		const char *eol = memchr(p, '\n', (size_t)(stop - p));
		size_t n = eol ? (size_t)(eol - p) : (size_t)(stop - p);

		if (n >= sizeof(te_name) - 1 && strncasecmp(p, te_name, sizeof(te_name) - 1) == 0)
			return -1;
		if (n >= sizeof(cl_name) - 1 && strncasecmp(p, cl_name, sizeof(cl_name) - 1) == 0) {
			const char *v = p + sizeof(cl_name) - 1, *e = p + n;
			long x = 0;
			int digits = 0;

			if (cl >= 0)
				return -1;   /* repeated */
			while (v < e && (*v == ' ' || *v == '\t'))
				v++;
			while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
				e--;
			for (; v < e; v++, digits++) {
				if (*v < '0' || *v > '9' || digits >= 5)
					return -1;
				x = x * 10 + (*v - '0');
			}
			if (!digits)
				return -1;
			cl = x;
		}
		p += n + 1;
	}
	*ret_cl = cl;
	return 0;
}

/* A state report's body: "STATE:TOKEN", STATE 1..IE_STATE_MAX bytes,
 * TOKEN not empty (what they say is the controller's to judge). */
static bool state_body_ok(const char *body, size_t n)
{
	const char *colon = memchr(body, ':', n);

	return colon && colon > body && (size_t)(colon - body) <= IE_STATE_MAX &&
	       colon + 1 < body + n;
}

int ie_parse(const char *buf, size_t len, struct ie_req *ret)
{
	enum ie_route route = IE_ROUTE_ATTEST;
	size_t line = 0, end, blen;
	const char *ver, *body;
	long cl = -1;
	int r;

	if (len > IE_REQUEST_MAX || memchr(buf, '\0', len))
		return -1;
	if ((r = route_of(buf, len, &route)) <= 0)
		return r;
	if (!(end = head_end(buf, len)))
		return len >= IE_REQUEST_MAX ? -1 : 0;
	line = strcspn(buf, "\r\n");
	ver = strchr(buf, ' ');
	ver = ver ? strchr(ver + 1, ' ') : NULL;
	if (!ver || buf + line - (ver + 1) != 8 || strncmp(ver + 1, "HTTP/1.", 7) != 0 ||
	    (ver[8] != '0' && ver[8] != '1'))
		return -1;
	if (headers(buf, end, &cl) < 0)
		return -1;
	if (route == IE_ROUTE_BOOTSTRAP ? cl > 0 : (cl <= 0 || cl > IE_BODY_MAX + 2))
		return -1;
	if (cl < 0)
		cl = 0;
	if (end + (size_t)cl > IE_REQUEST_MAX)
		return -1;
	if (len < end + (size_t)cl)
		return 0;
	if (len > end + (size_t)cl)
		return -1;   /* bytes after the body: one request per connection */
	body = buf + end;
	blen = (size_t)cl;
	if (blen && body[blen - 1] == '\n')
		blen--;
	if (blen && body[blen - 1] == '\r')
		blen--;
	if (route != IE_ROUTE_BOOTSTRAP && (blen == 0 || blen > IE_BODY_MAX))
		return -1;
	for (size_t i = 0; i < blen; i++)
		if (body[i] <= ' ' || body[i] > '~')
			return -1;
	if (route == IE_ROUTE_STATE && !state_body_ok(body, blen))
		return -1;
	ret->route = route;
	memcpy(ret->body, body, blen);
	ret->body[blen] = '\0';
	return 1;
}

bool ie_rate_take(struct ie_rate *r, int64_t now)
{
	if (!r->started) {
		*r = (struct ie_rate){.started = true, .tokens = IE_RATE_BURST,
				      .refill_at = now + IE_RATE_REFILL_MS};
	}
	while (r->tokens < IE_RATE_BURST && now >= r->refill_at) {
		r->tokens++;
		r->refill_at += IE_RATE_REFILL_MS;
	}
	if (r->tokens == IE_RATE_BURST && now >= r->refill_at)
		r->refill_at = now + IE_RATE_REFILL_MS;
	if (r->tokens == 0)
		return false;
	r->tokens--;
	return true;
}

int ie_http_status(int code)
{
	switch (code) {
	case BC_INVALID_INPUT:
		return 400;
	case BC_ACCESS_DENIED:
		return 403;
	case BC_NOT_FOUND:
		return 404;
	case BC_CONFLICT:
	case BC_INVALID_STATE:
		return 409;
	case BC_RESOURCE_EXHAUSTED:
		return 429;
	default:
		return 503;
	}
}
