/* rpc_http_parse.c: the pure parts of the JSON/HTTP transport: HTTP/1.1
 * request heads (RFC 9112, strictly: no obs-fold, no whitespace before the
 * colon, one Content-Length, no Transfer-Encoding), the route of a method
 * and the JSON error body. No I/O, no allocation except the error body, so
 * a fuzzer can drive it. */
#include "rpc_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


/* See rpc_internal.h. */
size_t rpc_http_head_len(const char *buf, size_t len)
{
	const char *p = buf && len >= 4 ? memmem(buf, len, "\r\n\r\n", 4) : NULL;

	return p ? (size_t)(p - buf) + 4 : 0;
}

/* RFC 9110 token characters (method and header names). */
static bool is_tchar(unsigned char c)
{
	return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c);
}

static bool all_tchars(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!is_tchar((unsigned char)*s))
			return false;
	return true;
}

/* Split the next line off *p (CRLF-terminated; a bare CR or LF is refused). */
static char *next_line(char **p, bool *bad)
{
	char *line = *p, *crlf = strstr(line, "\r\n");

	if (!crlf) {
		*bad = true;
		return NULL;
	}
	*crlf = '\0';
	*p = crlf + 2;
	if (strpbrk(line, "\r\n"))
		*bad = true;
	return line;
}

static int parse_request_line(char *line, struct rpc_http_request *req, const char **why)
{
	char *sp1 = strchr(line, ' '), *sp2, *q;

	if (!sp1 || !(sp2 = strchr(sp1 + 1, ' ')) || strchr(sp2 + 1, ' ')) {
		*why = "malformed request line";
		return 400;
	}
	*sp1 = *sp2 = '\0';
	if (!all_tchars(line)) {
		*why = "malformed method";
		return 400;
	}
	if (strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)sp2[8]) || sp2[9]) {
		*why = strncmp(sp2 + 1, "HTTP/", 5) == 0 ? "HTTP version not supported"
							   : "malformed request line";
		return strncmp(sp2 + 1, "HTTP/", 5) == 0 ? 505 : 400;
	}
	req->method = line;
	req->minor = sp2[8] - '0';
	req->target = sp1 + 1;
	for (const char *t = req->target; *t; t++)
		if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f) {
			*why = "malformed request target";
			return 400;
		}
	if (req->target[0] != '/') {
		*why = "request target must be a path";
		return 400;
	}
	if ((q = strchr(sp1 + 1, '?'))) {
		*q = '\0';
		req->query = q + 1;
	}
	return 0;
}

static char *trim_ows(char *s)
{
	char *e;

	s += strspn(s, " \t");
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return s;
}

static int parse_header(char *line, struct rpc_http_request *req, const char **why)
{
	char *colon = strchr(line, ':'), *value;

	if (line[0] == ' ' || line[0] == '\t') {
		*why = "folded header lines are not accepted";
		return 400;
	}
	if (!colon) {
		*why = "malformed header line";
		return 400;
	}
	*colon = '\0';
	if (!all_tchars(line)) {
		*why = "malformed header name";
		return 400;
	}
	value = trim_ows(colon + 1);
	for (const char *v = value; *v; v++)
		if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f) {
			*why = "control character in a header value";
			return 400;
		}
	if (req->n_headers == RPC_HTTP_MAX_HEADERS) {
		*why = "too many header fields";
		return 431;
	}
	for (char *n = line; *n; n++)
		*n = (char)tolower((unsigned char)*n);
	req->headers[req->n_headers].name = line;
	req->headers[req->n_headers++].value = value;
	return 0;
}

/* Content-Length: digits only, at most once (equal repeats refused too). */
static int parse_length(const char *v, struct rpc_http_request *req, const char **why)
{
	size_t n = 0;

	if (req->has_length || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 15) {
		*why = "invalid Content-Length";
		return 400;
	}
	for (; *v; v++)
		n = n * 10 + (size_t)(*v - '0');
	req->has_length = true;
	req->content_length = n;
	return 0;
}

/* See rpc_internal.h. */
bool rpc_http_list_has(const char *v, const char *token)
{
	size_t n = strlen(token);

	while (v && *v) {
		v += strspn(v, " \t,");
		if (strncasecmp(v, token, n) == 0 && (v[n] == '\0' || strchr(" \t,", v[n])))
			return true;
		v = strchr(v, ',');
	}
	return false;
}

/* The framing headers, after every header was read. */
static int parse_framing(struct rpc_http_request *req, const char **why)
{
	const char *conn = NULL;
	int r, n_types = 0;

	req->keep_alive = req->minor >= 1;
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct rpc_http_header *h = &req->headers[i];

		if (strcmp(h->name, "content-length") == 0 && (r = parse_length(h->value, req, why)))
			return r;
		if (strcmp(h->name, "transfer-encoding") == 0)
			req->chunked = true;
		if (strcmp(h->name, "content-type") == 0 && ++n_types > 1) {
			*why = "more than one Content-Type";
			return 400;
		}
		if (strcmp(h->name, "connection") == 0)
			conn = h->value;
		if (strcmp(h->name, "expect") == 0) {
			if (strcasecmp(h->value, "100-continue") != 0) {
				*why = "unsupported expectation";
				return 417;
			}
			req->expect_continue = true;
		}
	}
	if (req->chunked) {
		*why = req->has_length ? "both Transfer-Encoding and Content-Length"
				       : "chunked bodies are not accepted: send Content-Length";
		return req->has_length ? 400 : 411;
	}
	if (rpc_http_list_has(conn, "close"))
		req->keep_alive = false;
	else if (rpc_http_list_has(conn, "keep-alive"))
		req->keep_alive = true;
	if (req->minor >= 1 && !rpc_http_header(req, "host")) {
		*why = "missing Host header";
		return 400;
	}
	return 0;
}

/* See rpc_internal.h. buf[head_len - 4 .. head_len) is the blank line.
 * Single-valued framing headers (Content-Length, Content-Type) may appear
 * once. */
int rpc_http_parse_head(char *buf, size_t head_len, struct rpc_http_request *req,
			const char **ret_why)
{
	char *p = buf, *line;
	bool bad = false;
	int r = 0;

	memset(req, 0, sizeof(*req));
	*ret_why = "malformed request";
	if (head_len < 4 || head_len > RPC_HTTP_MAX_HEAD)
		return head_len > RPC_HTTP_MAX_HEAD ? 431 : 400;
	if (memchr(buf, '\0', head_len))
		return 400;
	buf[head_len - 2] = '\0'; /* keep the last header's CRLF */
	line = next_line(&p, &bad);
	if (bad || (r = parse_request_line(line, req, ret_why)))
		return r ? r : 400;
	while (*p) {
		line = next_line(&p, &bad);
		if (bad)
			return 400;
		if ((r = parse_header(line, req, ret_why)))
			return r;
	}
	return parse_framing(req, ret_why);
}

/* See rpc_internal.h. */
const char *rpc_http_header(const struct rpc_http_request *req, const char *name)
{
	for (size_t i = 0; i < req->n_headers; i++)
		if (strcmp(req->headers[i].name, name) == 0)
			return req->headers[i].value;
	return NULL;
}

/* See rpc_internal.h. */
bool rpc_http_is_json(const char *ct)
{
	static const char json[] = "application/json";

	if (!ct || strncasecmp(ct, json, sizeof(json) - 1) != 0)
		return false;
	ct += sizeof(json) - 1;
	ct += strspn(ct, " \t");
	return *ct == '\0' || *ct == ';';
}

/* See rpc_internal.h. "bc.compute.v1" gives the group "compute". */
int rpc_http_route(const ProtobufCServiceDescriptor *svc, const ProtobufCMethodDescriptor *md,
		   char *lower, char *exact, size_t len)
{
	const char *group;
	int n;

	if (!svc->package || !svc->short_name)
		return -ENOENT;
	if (strncmp(svc->package, "bc.compute.", 11) == 0 || strcmp(svc->package, "bc.compute") == 0)
		group = "compute";
	else if (strncmp(svc->package, "bc.admin.", 9) == 0 || strcmp(svc->package, "bc.admin") == 0)
		group = "admin";
	else
		return -ENOENT;
	n = snprintf(exact, len, "/api/%s/%s/%s", group, svc->short_name, md->name);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	for (int i = 0; i <= n; i++)
		lower[i] = (char)tolower((unsigned char)exact[i]);
	return 0;
}

/* ------------------------------------------------- WebSocket frames */

static uint64_t be_read(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* See rpc_internal.h. */
int rpc_ws_frame_parse(const uint8_t *p, size_t n, struct rpc_ws_frame *f, const char **ret_why)
{
	size_t hl = 2;

	if (n < 2)
		return 0;
	f->fin = p[0] & 0x80;
	f->op = p[0] & 0x0f;
	f->len = p[1] & 0x7f;
	*ret_why = NULL;
	if (p[0] & 0x70)
		*ret_why = "reserved bits set";
	else if (!(p[1] & 0x80))
		*ret_why = "unmasked client frame";
	else if ((f->op & 0x8) && f->op != RPC_WS_CLOSE && f->op != RPC_WS_PING &&
		 f->op != RPC_WS_PONG)
		*ret_why = "unknown opcode";
	else if ((f->op & 0x8) && (!f->fin || f->len > 125 || (f->op == RPC_WS_CLOSE && f->len == 1)))
		*ret_why = "malformed control frame";
	else if (f->op == RPC_WS_TEXT)
		return *ret_why = "text frames not accepted", -1003;
	else if (!(f->op & 0x8) && f->op != RPC_WS_CONT && f->op != RPC_WS_BINARY)
		*ret_why = "unknown opcode";
	if (*ret_why)
		return -1002;
	if (f->len == 126) {
		hl = 4;
		f->len = n < hl ? 0 : be_read(p + 2, 2);
	} else if (f->len == 127) {
		hl = 10;
		f->len = n < hl ? 0 : be_read(p + 2, 8);
		if (f->len >> 63)
			return *ret_why = "bad frame length", -1002;
	}
	if (n < hl + 4)
		return 0;
	memcpy(f->mask, p + hl, 4);
	f->head_len = hl + 4;
	return (int)f->head_len;
}

/* ------------------------------------------------------ error bodies */

struct jbuf {
	char *p;
	size_t len, cap;
};

static void jb_put(struct jbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void jb_puts(struct jbuf *b, const char *s)
{
	jb_put(b, s, strlen(s));
}

/* Length of a valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t k = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;

	if (!k || k > n)
		return 0;
	for (size_t i = 1; i < k; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return k;
}

/* A JSON string: control characters escaped, invalid UTF-8 as U+FFFD. */
static void jb_string(struct jbuf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str), k;
	char esc[8];

	jb_put(b, "\"", 1);
	for (size_t i = 0; i < n; i += k ? k : 1) {
		k = utf8_len(s + i, n - i);
		if (!k) {
			jb_puts(b, "\xef\xbf\xbd");
		} else if (s[i] == '"' || s[i] == '\\') {
			esc[0] = '\\';
			esc[1] = (char)s[i];
			jb_put(b, esc, 2);
		} else if (s[i] < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", s[i]);
			jb_puts(b, esc);
		} else {
			jb_put(b, (const char *)s + i, k);
		}
	}
	jb_put(b, "\"", 1);
}

/* See rpc_internal.h. Detail values stay strings, as in ErrorInfo.metadata. */
char *rpc_http_error_json(const bc_error *e)
{
	struct jbuf b = {0};
	size_t n = e->n_details < BC_ERR_MAX_DETAILS ? e->n_details : BC_ERR_MAX_DETAILS;

	jb_puts(&b, "{\"error\":{\"code\":");
	jb_string(&b, bc_code_name(e->code));
	jb_puts(&b, ",\"message\":");
	jb_string(&b, e->message);
	jb_puts(&b, ",\"details\":{");
	for (size_t i = 0; i < n; i++) {
		if (i)
			jb_put(&b, ",", 1);
		jb_string(&b, e->details[i].key);
		jb_put(&b, ":", 1);
		jb_string(&b, e->details[i].value);
	}
	jb_puts(&b, "}}}");
	return b.p;
}
