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

/* The decision and the head are rpc_static.c's (pure); this file writes
 * them on a connection. */

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
