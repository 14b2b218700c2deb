/* test_rpc_static.c: static files on the JSON/HTTP port (rpc_http_static.c,
 * rpc_static.h): the decision table (exact names only, 301, 304, 404 on
 * traversal and unknown names, 405), the headers, and the real answers of
 * an in-process server over plain HTTP serving a small table and the
 * console's generated one (build/gen/console_static.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc.h"
#include "rpc_static.h"
#include "tap.h"
#include "util.h"

static const unsigned char hello[] = "<p>hi</p>";
static const unsigned char js[] = "export const x = 1;";
static const struct rpc_static_file files[] = {
	{"/c/", "text/html; charset=utf-8", hello, sizeof(hello) - 1, "\"aaaa\""},
	{"/c/app.js", "text/javascript; charset=utf-8", js, sizeof(js) - 1, "\"bbbb\""},
};

static int decide(const char *method, const char *target, const char *inm,
		  struct rpc_static_reply *r)
{
	rpc_static_decide(files, ARRAY_SIZE(files), "/c/", method, target, inm, r);
	return r->status;
}

static void test_decide(void)
{
	struct rpc_static_reply r;

	is_int(decide("GET", "/c/", NULL, &r), 200, "GET /c/: 200");
	ok(r.file == &files[0] && r.body, "... the index, with a body");
	is_int(decide("HEAD", "/c/app.js", NULL, &r), 200, "HEAD /c/app.js: 200");
	ok(r.file == &files[1] && !r.body, "... no body for HEAD");
	is_int(decide("GET", "/c", NULL, &r), 301, "GET /c: 301");
	is_str(r.location, "/c/", "... to /c/");
	is_int(decide("GET", "/cc", NULL, &r), 404, "/cc is not under /c/");
	ok(!rpc_static_under("/c/", "/cc") && !rpc_static_under("/c/", "/api/x"),
	   "rpc_static_under: /cc and /api/x are not under /c/");
	is_int(decide("GET", "/c/nope.js", NULL, &r), 404, "an unknown name: 404");
	is_int(decide("GET", "/c/../c/app.js", NULL, &r), 404, "traversal with ..: 404");
	is_int(decide("GET", "/c/%2e%2e/etc/passwd", NULL, &r), 404, "traversal with %%2e: 404");
	is_int(decide("GET", "/c//app.js", NULL, &r), 404, "a doubled slash: 404");
	is_int(decide("GET", "/c/app.js/", NULL, &r), 404, "a trailing slash: 404");
	is_int(decide("GET", "/c/APP.JS", NULL, &r), 404, "names are case-sensitive: 404");
	is_int(decide("POST", "/c/app.js", NULL, &r), 405, "POST: 405");
	is_int(decide("DELETE", "/c/", NULL, &r), 405, "DELETE: 405");
	is_int(decide("GET", "/c/app.js", "\"bbbb\"", &r), 304, "If-None-Match with its ETag: 304");
	is_int(decide("GET", "/c/app.js", "\"x\", W/\"bbbb\"", &r), 304,
	       "... a weak tag in a list: 304");
	is_int(decide("GET", "/c/app.js", "*", &r), 304, "... *: 304");
	is_int(decide("GET", "/c/app.js", "\"aaaa\"", &r), 200, "another file's ETag: 200");
	is_int(decide("GET", "/c/app.js", "\"bbbb", &r), 200, "a truncated ETag: 200");
	is_int(decide("GET", "/c/app.js", "", &r), 200, "an empty If-None-Match: 200");
}

static void test_head(void)
{
	struct rpc_static_reply r;
	char *h;

	decide("GET", "/c/app.js", NULL, &r);
	h = rpc_static_head(&r, true);
	ok(strncmp(h, "HTTP/1.1 200 OK\r\n", 17) == 0, "head: 200 OK");
	ok(strstr(h, "Content-Type: text/javascript; charset=utf-8\r\n") != NULL, "... its type");
	ok(strstr(h, "Content-Length: 19\r\n") != NULL, "... its length");
	ok(strstr(h, "ETag: \"bbbb\"\r\n") != NULL, "... its ETag");
	ok(strstr(h, "Content-Security-Policy: default-src 'none'; script-src 'self'; "
		     "style-src 'self';") != NULL, "... a strict CSP (no unsafe-inline)");
	ok(strstr(h, "frame-ancestors 'none'") != NULL, "... frame-ancestors 'none'");
	ok(!strstr(h, "unsafe"), "... nothing unsafe");
	ok(strstr(h, "X-Content-Type-Options: nosniff\r\n") != NULL, "... nosniff");
	ok(strstr(h, "Referrer-Policy: no-referrer\r\n") != NULL, "... no-referrer");
	ok(strstr(h, "X-Frame-Options: DENY\r\n") != NULL, "... X-Frame-Options DENY");
	ok(strstr(h, "Connection: keep-alive\r\n\r\n") != NULL, "... ends the head");
	ok(!strstr(h, "Set-Cookie"), "... no cookie");
	free(h);
	decide("GET", "/c/app.js", "\"bbbb\"", &r);
	h = rpc_static_head(&r, false);
	ok(strncmp(h, "HTTP/1.1 304 Not Modified\r\n", 27) == 0, "304 head");
	ok(!strstr(h, "Content-Length") && strstr(h, "ETag: \"bbbb\"") &&
	   strstr(h, "Connection: close"), "... no length, the ETag, close");
	free(h);
}

/* ------------------------------------------------- a real server */

static int http_port;

/* One request on a fresh connection with Connection: close; the whole
 * answer (head and body) into buf. Its length, or <0. */
static ssize_t get(const char *method, const char *path, const char *extra, char *buf,
		   size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port)};
	char *req = xasprintf("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", method,
			      path, extra ? extra : "");
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t len = 0;
	ssize_t n;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		close(fd);
		free(req);
		return -errno;
	}
	free(req);
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(fd);
	return (ssize_t)len;
}

static int status_of(const char *resp)
{
	int s = 0;

	return sscanf(resp, "HTTP/1.1 %d", &s) == 1 ? s : -1;
}

static const char *body_of(const char *resp)
{
	const char *p = strstr(resp, "\r\n\r\n");

	return p ? p + 4 : "";
}

static rpc_server *server(const struct rpc_static_file *f, size_t n, const char *prefix)
{
	struct rpc_server_opts o = {
		.listen = "127.0.0.1:0", .http_listen = "127.0.0.1:0", .workers = 1,
		.max_message_bytes = 64 * 1024, .static_files = f, .n_static_files = n,
		.static_prefix = prefix,
	};
	rpc_server *s = rpc_server_new(&o, NULL);
	int port;

	if (!s || rpc_server_start(s, &port) < 0) {
		rpc_server_free(s, 0);
		return NULL;
	}
	http_port = rpc_server_http_port(s);
	return s;
}

static void test_served(void)
{
	static char buf[512 * 1024];
	rpc_server *s = server(files, ARRAY_SIZE(files), "/c/");

	ok(s != NULL, "a server with a static table started");
	if (!s)
		return;
	ok(get("GET", "/c/", NULL, buf, sizeof(buf)) > 0 && status_of(buf) == 200, "GET /c/: 200");
	is_str(body_of(buf), "<p>hi</p>", "... the file's bytes");
	ok(strstr(buf, "Content-Security-Policy: default-src 'none'") && strstr(buf, "ETag: \"aaaa\""),
	   "... with the CSP and the ETag");
	get("GET", "/c/", "If-None-Match: \"aaaa\"\r\n", buf, sizeof(buf));
	is_int(status_of(buf), 304, "If-None-Match: 304");
	is_str(body_of(buf), "", "... no body");
	get("HEAD", "/c/app.js", NULL, buf, sizeof(buf));
	ok(status_of(buf) == 200 && strstr(buf, "Content-Length: 19\r\n") && !*body_of(buf),
	   "HEAD: 200, the length, no body");
	get("GET", "/c", NULL, buf, sizeof(buf));
	ok(status_of(buf) == 301 && strstr(buf, "Location: /c/\r\n"), "GET /c: 301 to /c/");
	get("GET", "/c/../etc/passwd", NULL, buf, sizeof(buf));
	ok(status_of(buf) == 404 && strstr(buf, "\"NOT_FOUND\"") &&
	   strstr(buf, "X-Content-Type-Options: nosniff"), "traversal: 404 NOT_FOUND, nosniff");
	get("GET", "/c/x.js?v=1", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 404, "an unknown name with a query: 404");
	get("GET", "/c/app.js?v=1", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 200, "a known name with a query: 200 (the query is ignored)");
	get("PUT", "/c/app.js", "Content-Length: 0\r\n", buf, sizeof(buf));
	ok(status_of(buf) == 405 && strstr(buf, "Allow: GET, HEAD\r\n"), "PUT: 405, Allow: GET, HEAD");
	get("GET", "/healthz", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 200, "/healthz still answers beside it");
	get("GET", "/cx", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 404, "/cx is not the table's");
	rpc_server_free(s, 0);

	s = server(NULL, 0, NULL);
	get("GET", "/c/", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 404, "without a table (console = 0): 404");
	rpc_server_free(s, 0);
}

/* The console's own table: every file has a type and an ETag, the pages
 * are the index, and a script never comes back as text/html. */
static void test_console_table(void)
{
	static char buf[512 * 1024];
	bool index = false, app = false, vols = false, shapes = true;
	rpc_server *s;

	for (size_t i = 0; i < console_files_count; i++) {
		const struct rpc_static_file *f = &console_files[i];

		shapes &= strncmp(f->path, "/console/", 9) == 0 && f->etag[0] == '"' &&
			  strlen(f->etag) == 34 && f->type && f->len > 0 && !strstr(f->path, "..");
		index |= strcmp(f->path, "/console/") == 0;
		vols |= strcmp(f->path, "/console/volumes") == 0;
		app |= strcmp(f->path, "/console/app.js") == 0 &&
		       strncmp(f->type, "text/javascript", 15) == 0;
	}
	ok(shapes, "console table: every file under /console/, typed, non-empty, a 32-digit ETag");
	ok(index && vols && app, "... /console/, /console/volumes and /console/app.js");
	s = server(console_files, console_files_count, "/console/");
	get("GET", "/console/", NULL, buf, sizeof(buf));
	ok(status_of(buf) == 200 && strstr(buf, "<script type=\"module\" src=\"/console/app.js\">"),
	   "GET /console/: the page loading app.js as a module");
	ok(!strstr(body_of(buf), "<script>") && !strstr(body_of(buf), "style=\"") &&
	   !strstr(body_of(buf), "onclick"), "... no inline script, style or handler");
	get("GET", "/console/index.html/../../etc/passwd", NULL, buf, sizeof(buf));
	is_int(status_of(buf), 404, "traversal under /console/: 404");
	rpc_server_free(s, 0);
}

int main(void)
{
	test_decide();
	test_head();
	test_served();
	test_console_table();
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
