/* test_rpc_http.c: the JSON/HTTP transport against a real in-process server
 * (gRPC and HTTP ports on 127.0.0.1:0) with hand-built test services:
 * bc.compute.v1.Things (exposed at /api/compute/things/...), bc.admin.v1.Ops
 * (/api/admin/ops/...) and bc.node.v1.Secret (never exposed). Requests use
 * google.rpc.Status as request and reply. The client is a raw socket with
 * OpenSSL, so the test controls every byte (limits, pipelining, stalls);
 * no fork after grpc_init. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "google/rpc/status.pb-c.h"
#include "log.h"
#include "rpc.h"
#include "rpc_internal.h"
#include "tap.h"
#include "util.h"

typedef Google__Rpc__Status Msg;
#define MSG_D (&google__rpc__status__descriptor)

/* ------------------------------------------------------ test services */

static const ProtobufCMethodDescriptor thing_methods[] = {
	{"Count", MSG_D, MSG_D}, {"Echo", MSG_D, MSG_D},   {"Fail", MSG_D, MSG_D},
	{"Oops", MSG_D, MSG_D},  {"Slow", MSG_D, MSG_D},   {"Unhandled", MSG_D, MSG_D},
	{"WhoAmI", MSG_D, MSG_D},
};
static const unsigned thing_index[] = {0, 1, 2, 3, 4, 5, 6};
static const ProtobufCServiceDescriptor thing_service = {
	PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC, "bc.compute.v1.Things", "Things",
	"Bc__Compute__V1__Things", "bc.compute.v1", ARRAY_SIZE(thing_methods), thing_methods,
	thing_index,
};
static const ProtobufCMethodDescriptor ops_methods[] = {{"Ping", MSG_D, MSG_D}};
static const unsigned ops_index[] = {0};
static const ProtobufCServiceDescriptor ops_service = {
	PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC, "bc.admin.v1.Ops", "Ops", "Bc__Admin__V1__Ops",
	"bc.admin.v1", 1, ops_methods, ops_index,
};
static const ProtobufCMethodDescriptor secret_methods[] = {{"Get", MSG_D, MSG_D}};
static const ProtobufCServiceDescriptor secret_service = {
	PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC, "bc.node.v1.Secret", "Secret",
	"Bc__Node__V1__Secret", "bc.node.v1", 1, secret_methods, ops_index,
};

static atomic_int n_thread_init, n_thread_fini, principal_freed;
static atomic_long slow_deadline_left;

static Msg *msg_new(rpc_call *call, int code, const char *text)
{
	Msg *m = rpc_new(call, MSG_D);

	m->code = code;
	m->message = rpc_strdup(call, text ? text : "");
	return m;
}

/* Echo calls that could be detached, and that were refused (rpc.h:
 * calls on the JSON/HTTP transport cannot be). */
static atomic_int n_detachable, n_detach_refused;

static int h_echo(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		  bc_error *err)
{
	const Msg *in = (const Msg *)req;

	if (rpc_call_can_detach(call))
		n_detachable++;
	else if (rpc_call_detach(call) == -EOPNOTSUPP)
		n_detach_refused++;
	*ret = &msg_new(call, in->code, in->message)->base;
	return 0;
}

static int h_fail(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		  bc_error *err)
{
	const Msg *in = (const Msg *)req;

	bc_error_set(err, (enum bc_code)in->code, "%s", in->message);
	bc_error_detail(err, "reason", "extend-in-flight");
	return bc_error_detail(err, "retryAfterSeconds", "5");
}

static int h_oops(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		  bc_error *err)
{
	return -EIO;
}

static int h_slow(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		  bc_error *err)
{
	slow_deadline_left = (long)(rpc_call_deadline_mono_ms(call) - mono_ms());
	usleep((useconds_t)((const Msg *)req)->code * 1000);
	*ret = &msg_new(call, 0, "slept")->base;
	return 0;
}

static int h_whoami(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		    bc_error *err)
{
	const char *b = rpc_call_bearer(call), *cn = rpc_call_peer_cn(call);
	const char *rid = rpc_call_metadata(call, "x-request-id");
	char buf[512];

	snprintf(buf, sizeof(buf), "bearer=%s cn=%s rid=%s principal=%s peer=%s method=%s",
		 b ? b : "-", cn ? cn : "-", rid ? rid : "-",
		 rpc_call_principal(call) ? (char *)rpc_call_principal(call) : "-",
		 strncmp(rpc_call_peer(call), "ipv4:127.0.0.1:", 15) == 0 ? "ok" : "bad",
		 rpc_call_method(call));
	*ret = &msg_new(call, rpc_call_thread(call) ? 1 : 0, buf)->base;
	return 0;
}

/* A server stream: code messages, then per message: "fail" ends with an
 * error, "wait" waits until the call is over (deadline, client gone). */
static int h_count(rpc_call *call, const ProtobufCMessage *req, bc_error *err)
{
	const Msg *in = (const Msg *)req;

	for (int i = 1; i <= in->code; i++)
		if (rpc_call_send(call, &msg_new(call, i, "tick")->base) < 0)
			return 0;
	if (strcmp(in->message, "fail") == 0) {
		bc_error_set(err, BC_CONFLICT, "late failure");
		return bc_error_detail(err, "reason", "late");
	}
	if (strcmp(in->message, "wait") == 0)
		while (!rpc_call_wait_cancelled(call, 100))
			;
	return 0;
}

static const struct rpc_handler thing_handlers[] = {
	{.method = "Count", .kind = RPC_SERVER_STREAM, .fn.sstream = h_count},
	{.method = "Echo", .kind = RPC_UNARY, .fn.unary = h_echo},
	{.method = "Fail", .kind = RPC_UNARY, .fn.unary = h_fail},
	{.method = "Oops", .kind = RPC_UNARY, .fn.unary = h_oops},
	{.method = "Slow", .kind = RPC_UNARY, .fn.unary = h_slow},
	{.method = "WhoAmI", .kind = RPC_UNARY, .fn.unary = h_whoami},
};
static const struct rpc_handler ops_handlers[] = {
	{.method = "Ping", .kind = RPC_UNARY, .fn.unary = h_echo},
};
static const struct rpc_handler secret_handlers[] = {
	{.method = "Get", .kind = RPC_UNARY, .fn.unary = h_echo},
};

static void *t_init(void *user)
{
	n_thread_init++;
	return xstrdup("thread-state");
}

static void t_fini(void *user, void *st)
{
	n_thread_fini++;
	free(st);
}

static void principal_free(void *p)
{
	principal_freed++;
	free(p);
}

/* Bearer "deny" is refused; any other is the principal. */
static int pre_call(rpc_call *call, bc_error *err)
{
	const char *b = rpc_call_bearer(call);

	if (b && strcmp(b, "deny") == 0)
		return bc_error_set(err, BC_UNAUTHENTICATED, "token refused");
	if (b)
		rpc_call_set_principal(call, xstrdup(b), principal_free);
	return 0;
}

/* ---------------------------------------------------------- fixtures */

static char tmpdir[64] = "/tmp/test_rpc_http.XXXXXX";
static char *ca_pem, *srv_pem, *srv_key;

static char *slurp(const char *name)
{
	char path[256], *buf = NULL;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	if (file_read_all(path, 1 << 20, &buf, NULL) < 0)
		return NULL;
	return buf;
}

static int make_certs(void)
{
	static const char script[] =
		"exec >/dev/null 2>&1 && "
		"openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		"-keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca && "
		"printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > srv.ext && "
		"openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		"-keyout srv.key -out srv.csr -subj /CN=localhost && "
		"openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		"-out srv.pem -days 2 -extfile srv.ext";
	char cmd[2048];

	if (!mkdtemp(tmpdir))
		return -errno;
	snprintf(cmd, sizeof(cmd), "cd %s && %s", tmpdir, script);
	if (system(cmd) != 0)
		return -EIO;
	ca_pem = slurp("ca.pem");
	srv_pem = slurp("srv.pem");
	srv_key = slurp("srv.key");
	return ca_pem && srv_pem && srv_key ? 0 : -EIO;
}

static void remove_certs(void)
{
	static const char *names[] = {"ca.key", "ca.pem", "ca.srl", "srv.ext",
				      "srv.key", "srv.csr", "srv.pem"};
	char path[256];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	rmdir(tmpdir);
	free(ca_pem);
	free(srv_pem);
	free(srv_key);
}

static int grpc_port, http_port;
static bool use_tls = true;

static rpc_server *server_up(const struct rpc_tls *tls, int workers, const char *http_listen,
			     int *ret_err)
{
	struct rpc_server_opts o = {
		.listen = "127.0.0.1:0", .tls = tls, .workers = workers,
		.max_message_bytes = 64 * 1024, .thread_init = t_init, .thread_fini = t_fini,
		.pre_call = pre_call, .http_listen = http_listen,
	};
	rpc_server *s = rpc_server_new(&o, NULL);
	int r = -ENOMEM;

	if (s && (r = rpc_server_add_service(s, &thing_service, thing_handlers,
					     ARRAY_SIZE(thing_handlers))) == 0 &&
	    (r = rpc_server_add_service(s, &ops_service, ops_handlers, 1)) == 0 &&
	    (r = rpc_server_add_service(s, &secret_service, secret_handlers, 1)) == 0)
		r = rpc_server_start(s, &grpc_port);
	if (ret_err)
		*ret_err = r;
	if (r < 0) {
		rpc_server_free(s, 0);
		return NULL;
	}
	http_port = rpc_server_http_port(s);
	return s;
}

/* ------------------------------------------------------------ client */

static SSL_CTX *cli_ctx;

struct cli {
	int fd;
	SSL *ssl;
	char buf[256 * 1024];
	size_t len;
};

static int cli_tls_init(void)
{
	BIO *b = BIO_new_mem_buf(ca_pem, -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);

	cli_ctx = SSL_CTX_new(TLS_client_method());
	X509_STORE_add_cert(SSL_CTX_get_cert_store(cli_ctx), x);
	SSL_CTX_set_verify(cli_ctx, SSL_VERIFY_PEER, NULL);
	X509_free(x);
	BIO_free(b);
	return 0;
}

static struct cli *cli_open(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port)};
	struct cli *c = xcalloc(1, sizeof(*c));

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	if (use_tls) {
		c->ssl = SSL_new(cli_ctx);
		SSL_set_fd(c->ssl, c->fd);
		SSL_set_tlsext_host_name(c->ssl, "localhost");
		SSL_set1_host(c->ssl, "localhost");
		if (SSL_connect(c->ssl) != 1)
			goto fail;
	}
	return c;
fail:
	ERR_clear_error();
	SSL_free(c->ssl);
	close(c->fd);
	free(c);
	return NULL;
}

static void cli_close(struct cli *c)
{
	if (!c)
		return;
	if (c->ssl) {
		SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	close(c->fd);
	free(c);
}

static int cli_send(struct cli *c, const char *p, size_t n)
{
	if (c->ssl)
		return SSL_write(c->ssl, p, (int)n) == (int)n ? 0 : -EIO;
	return send(c->fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -EIO;
}

/* More bytes within timeout_ms: >0, 0 at EOF, <0 on error/timeout. */
static ssize_t cli_read(struct cli *c, int timeout_ms)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	ssize_t n;

	if (c->len >= sizeof(c->buf) - 1)
		return -ENOSPC;
	if (!(c->ssl && SSL_pending(c->ssl)) && poll(&p, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	if (c->ssl)
		n = SSL_read(c->ssl, c->buf + c->len, (int)(sizeof(c->buf) - 1 - c->len));
	else
		n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
	if (n <= 0) {
		ERR_clear_error();
		return n == 0 || c->ssl ? 0 : -errno;
	}
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	return n;
}

struct resp {
	int status;
	char head[4096];
	char body[128 * 1024];
};

/* Read one response (status, head, body by Content-Length). 0 or <0. */
static int cli_response(struct cli *c, struct resp *r)
{
	char *end, *cl;
	size_t head, blen;

	memset(r, 0, sizeof(*r));
	while (!(end = strstr(c->buf, "\r\n\r\n")))
		if (cli_read(c, 10000) <= 0)
			return -EIO;
	head = (size_t)(end - c->buf) + 4;
	snprintf(r->head, sizeof(r->head), "%.*s", (int)head, c->buf);
	r->status = atoi(c->buf + 9);
	cl = strcasestr(r->head, "\r\nContent-Length:");
	blen = cl ? strtoul(cl + 17, NULL, 10) : 0;
	while (c->len < head + blen)
		if (cli_read(c, 10000) <= 0)
			return -EIO;
	snprintf(r->body, sizeof(r->body), "%.*s", (int)blen, c->buf + head);
	c->len -= head + blen;
	memmove(c->buf, c->buf + head + blen, c->len + 1);
	return 0;
}

/* One request on c; extra is header lines ("X: y\r\n"); body NULL: none. */
static int req_on(struct cli *c, const char *method, const char *path, const char *extra,
		  const char *body, struct resp *r)
{
	char *ct = body ? xasprintf("Content-Type: application/json\r\nContent-Length: %zu\r\n",
				    strlen(body)) : NULL;
	char *all = xasprintf("%s %s HTTP/1.1\r\nHost: localhost\r\n%s%s\r\n%s", method, path,
			      extra ? extra : "", ct ? ct : "", body ? body : "");
	int e = cli_send(c, all, strlen(all));

	free(ct);
	free(all);
	return e < 0 ? e : cli_response(c, r);
}

/* One request on a fresh connection. */
static int req1(const char *method, const char *path, const char *extra, const char *body,
		struct resp *r)
{
	struct cli *c = cli_open();
	int e = c ? req_on(c, method, path, extra, body, r) : -ECONNREFUSED;

	cli_close(c);
	return e;
}

/* Raw bytes on a fresh connection, then one response. */
static int raw1(const char *bytes, size_t n, struct resp *r)
{
	struct cli *c = cli_open();
	int e = c ? cli_send(c, bytes, n) : -ECONNREFUSED;

	if (e == 0)
		e = cli_response(c, r);
	cli_close(c);
	return e;
}

static bool has(const char *hay, const char *needle)
{
	return strstr(hay, needle) != NULL;
}

/* -------------------------------------------------------------- tests */

static void test_routing(void)
{
	struct resp r;

	is_int(req1("POST", "/api/compute/things/echo", NULL, "{\"code\":7,\"message\":\"hi\"}", &r),
	       0, "POST /api/compute/things/echo answers");
	is_int(r.status, 200, "... 200");
	is_str(r.body, "{\"code\":7,\"message\":\"hi\",\"details\":[]}\n", "... JSON round trip");
	ok(has(r.head, "Content-Type: application/json"), "... Content-Type application/json");
	req1("POST", "/api/compute/Things/Echo", NULL, "{\"message\":\"x\"}", &r);
	is_int(r.status, 200, "exact-case spelling /api/compute/Things/Echo served");
	req1("POST", "/api/compute/THINGS/echo", NULL, "{}", &r);
	is_int(r.status, 404, "other spellings are 404");
	req1("POST", "/api/admin/ops/ping", NULL, "{\"message\":\"pong\"}", &r);
	is_int(r.status, 200, "admin group: /api/admin/ops/ping");
	ok(has(r.body, "\"pong\""), "... answered");
	req1("POST", "/api/node/secret/get", NULL, "{}", &r);
	is_int(r.status, 404, "bc.node.* is never exposed: 404");
	ok(has(r.body, "\"code\":\"NOT_FOUND\""), "... NOT_FOUND body");
	req1("POST", "/api/compute/things/nope", NULL, "{}", &r);
	is_int(r.status, 404, "unknown method 404");
	is_str(r.body, "{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"no such method: "
		       "/api/compute/things/nope\",\"details\":{}}}\n", "... JSON error body");
	req1("GET", "/api/compute/things/echo", NULL, NULL, &r);
	is_int(r.status, 405, "GET on a method: 405");
	ok(has(r.head, "Allow: POST"), "... Allow: POST");
	req1("GET", "/healthz", NULL, NULL, &r);
	is_int(r.status, 200, "GET /healthz 200");
	is_str(r.body, "{\"status\":\"SERVING\"}\n", "... SERVING");
	req1("POST", "/healthz", NULL, "{}", &r);
	is_int(r.status, 405, "POST /healthz 405");
	req1("POST", "/api/compute/things/echo?x=1", NULL, "{}", &r);
	is_int(r.status, 200, "a query string is ignored");
	req1("POST", "/api/compute/things/echo", NULL, "", &r);
	is_int(r.status, 200, "empty body is an empty message");
	is_str(r.body, "{\"code\":0,\"message\":\"\",\"details\":[]}\n",
	       "... defaults are emitted");
}

static void test_errors(void)
{
	struct resp r;

	req1("POST", "/api/compute/things/fail", NULL,
	     "{\"code\":3,\"message\":\"extend already running\"}", &r);
	is_int(r.status, 409, "CONFLICT is 409");
	is_str(r.body, "{\"error\":{\"code\":\"CONFLICT\",\"message\":\"extend already running\","
		       "\"details\":{\"reason\":\"extend-in-flight\",\"retryAfterSeconds\":\"5\"}}}\n",
	       "... code, message and details as in ErrorInfo");
	req1("POST", "/api/compute/things/fail", NULL, "{\"code\":1,\"message\":\"q\\\"\\u0001\"}",
	     &r);
	is_int(r.status, 400, "INVALID_INPUT is 400");
	ok(has(r.body, "\"message\":\"q\\\"\\u0001\""), "... message escaped in JSON");
	req1("POST", "/api/compute/things/oops", NULL, "{}", &r);
	is_int(r.status, 500, "handler error without a code: 500");
	ok(has(r.body, "\"code\":\"INTERNAL\",\"message\":\"internal error\""), "... INTERNAL");
	req1("POST", "/api/compute/things/unhandled", NULL, "{}", &r);
	is_int(r.status, 501, "method without handler: 501");
	ok(has(r.body, "UNSUPPORTED"), "... UNSUPPORTED");
}

/* A stream's whole body: read to EOF after the head. */
static int stream1(const char *extra, const char *body, bool http10, struct resp *r)
{
	struct cli *c = cli_open();
	char *all;
	int e;

	if (!c)
		return -ECONNREFUSED;
	all = xasprintf("POST /api/compute/things/count HTTP/1.%d\r\nHost: x\r\n%sContent-Type: "
			"application/json\r\nContent-Length: %zu\r\n\r\n%s", http10 ? 0 : 1,
			extra ? extra : "", strlen(body), body);
	e = cli_send(c, all, strlen(all));
	free(all);
	if (e == 0)
		e = cli_response(c, r);
	while (e == 0 && !has(r->head, "Content-Length:") && cli_read(c, 10000) > 0)
		;
	if (e == 0 && !has(r->head, "Content-Length:"))
		snprintf(r->body, sizeof(r->body), "%.*s", (int)(sizeof(r->body) - 1), c->buf);
	cli_close(c);
	return e;
}

static void test_stream(void)
{
	struct resp r;

	stream1(NULL, "{\"code\":3}", false, &r);
	is_int(r.status, 200, "server stream: 200");
	ok(has(r.head, "Content-Type: application/x-ndjson"), "... newline-delimited JSON");
	ok(has(r.head, "Transfer-Encoding: chunked"), "... chunked");
	is_str(r.body, "29\r\n{\"code\":1,\"message\":\"tick\",\"details\":[]}\n\r\n"
		       "29\r\n{\"code\":2,\"message\":\"tick\",\"details\":[]}\n\r\n"
		       "29\r\n{\"code\":3,\"message\":\"tick\",\"details\":[]}\n\r\n0\r\n\r\n",
	       "... one message a chunk and a line, then the end");
	stream1(NULL, "{\"code\":1,\"message\":\"fail\"}", false, &r);
	is_int(r.status, 200, "an error after a message: the stream had begun (200)");
	ok(has(r.body, "{\"error\":{\"code\":\"CONFLICT\",\"message\":\"late failure\","
		       "\"details\":{\"reason\":\"late\"}}}\n\r\n0\r\n\r\n"),
	   "... ends with a line carrying the error: %s", r.body);
	stream1(NULL, "{\"message\":\"fail\"}", false, &r);
	is_int(r.status, 409, "an error before any message: an ordinary error response");
	ok(has(r.head, "Content-Length:") && has(r.body, "\"reason\":\"late\""),
	   "... with its JSON body");
	stream1("X-Timeout-Ms: 300\r\n", "{\"code\":1,\"message\":\"wait\"}", false, &r);
	is_int(r.status, 200, "a waiting stream with x-timeout-ms: 200");
	ok(has(r.body, "\"code\":\"DEADLINE_EXCEEDED\""), "... ended by its deadline: %s",
	   r.body);
	stream1(NULL, "{\"code\":2}", true, &r);
	is_int(r.status, 200, "HTTP/1.0 stream: 200");
	ok(!has(r.head, "chunked"), "... not chunked");
	is_str(r.body, "{\"code\":1,\"message\":\"tick\",\"details\":[]}\n"
		       "{\"code\":2,\"message\":\"tick\",\"details\":[]}\n",
	       "... bare lines until the connection closes");
	stream1(NULL, "{\"code\":\"x\"}", false, &r);
	is_int(r.status, 400, "a malformed stream request: 400");
}

static void test_bad_json(void)
{
	struct resp r;

	req1("POST", "/api/compute/things/echo", NULL, "{\"code\":\"abc\"}", &r);
	is_int(r.status, 400, "wrong type: 400");
	ok(has(r.body, "\"code\":\"INVALID_INPUT\""), "... INVALID_INPUT");
	ok(has(r.body, "\"details\":{\"field\":\"code\"}"), "... naming the field");
	req1("POST", "/api/compute/things/echo", NULL, "{\"nope\":1}", &r);
	is_int(r.status, 400, "unknown field: 400");
	ok(has(r.body, "\"field\":\"nope\""), "... naming it");
	req1("POST", "/api/compute/things/echo", NULL, "{\"code\":", &r);
	is_int(r.status, 400, "truncated JSON: 400");
	req1("POST", "/api/compute/things/echo", NULL, "[1]", &r);
	is_int(r.status, 400, "not an object: 400");
	{
		static const char s[] = "POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\n"
					"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}";

		raw1(s, sizeof(s) - 1, &r);
		is_int(r.status, 415, "other Content-Type: 415");
	}
	{
		static const char s[] = "POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\n"
					"Content-Type: Application/JSON; charset=utf-8\r\n"
					"Content-Length: 4\r\n\r\n \r\n ";

		raw1(s, sizeof(s) - 1, &r);
		is_int(r.status, 200, "Content-Type with a charset, whitespace-only body: 200");
	}
	req1("POST", "/api/compute/things/echo", "X-Pad: 1\r\n",
	     "{\"message\":\"ok\"}", &r);
	is_int(r.status, 200, "application/json is accepted");
}

static void test_auth(void)
{
	struct resp r;
	int before = principal_freed;

	req1("POST", "/api/compute/things/whoami", "Authorization: Bearer tok123\r\n"
	     "X-Request-ID: rq-1\r\n", "{}", &r);
	is_int(r.status, 200, "bearer call succeeds");
	ok(has(r.body, "\"code\":1,"), "handler has its worker's thread state");
	ok(has(r.body, "bearer=tok123 cn=- rid=rq-1 principal=tok123 peer=ok "
		       "method=/bc.compute.v1.Things/WhoAmI"),
	   "handler sees bearer, metadata, principal, peer and the gRPC method path");
	if (!has(r.body, "method="))
		printf("# %s", r.body);
	for (int i = 0; i < 100 && principal_freed == before; i++)
		usleep(10 * 1000);
	is_int(principal_freed, before + 1, "principal freed after the call");
	req1("POST", "/api/compute/things/echo", "Authorization: Bearer deny\r\n", "{}", &r);
	is_int(r.status, 401, "pre_call refusal: 401");
	is_str(r.body, "{\"error\":{\"code\":\"UNAUTHENTICATED\",\"message\":\"token refused\","
		       "\"details\":{}}}\n", "... with pre_call's message");
	req1("POST", "/api/compute/things/echo", "Authorization: Bearer deny\r\n", "{\"x\":", &r);
	is_int(r.status, 401, "pre_call runs before the body is parsed");
}

static void test_limits(void)
{
	struct resp r;
	size_t big = 70 * 1024;
	char *body = xmalloc(big + 64), *head;

	memset(body, ' ', big);
	strcpy(body + big, "{}");
	req1("POST", "/api/compute/things/echo", NULL, body, &r);
	is_int(r.status, 413, "body over max_message_bytes: 413");
	ok(has(r.body, "\"code\":\"INVALID_INPUT\""), "... INVALID_INPUT");
	ok(has(r.body, "\"maxBytes\":\"65536\""), "... details maxBytes");
	ok(has(r.head, "Connection: close"), "... and the connection closes");
	free(body);

	head = xmalloc(20 * 1024);
	strcpy(head, "POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nX-Big: ");
	{
		size_t n = strlen(head);

		memset(head + n, 'a', 17 * 1024);
		head[n + 17 * 1024] = '\0';
	}
	strcat(head, "\r\nContent-Length: 2\r\n\r\n{}");
	raw1(head, strlen(head), &r);
	is_int(r.status, 431, "head over 16 KiB: 431");
	free(head);

#define RAW(s, want, name)                                                   \
	do {                                                                 \
		raw1(s, sizeof(s) - 1, &r);                                  \
		is_int(r.status, want, name);                                \
	} while (0)
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Type: application/json\r\n\r\n{}", 411, "POST without Content-Length: 411");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411, "chunked body: 411");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "Content-Length: 2\r\n\r\n{}", 400, "Transfer-Encoding with Content-Length: 400");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
	    "Content-Length: 2\r\n\r\n{}", 400, "two Content-Length: 400");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
	    "Content-Type: application/json\r\nContent-Type: text/plain\r\n\r\n{}", 400,
	    "two Content-Type: 400");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
	    400, "negative Content-Length: 400");
	RAW("GARBAGE\r\n\r\n", 400, "garbage request line: 400");
	RAW("GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/2.0 request line: 505");
	RAW("GET /healthz HTTP/1.1\r\n\r\n", 400, "HTTP/1.1 without Host: 400");
	RAW("GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "obs-fold: 400");
	RAW("GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400, "space before colon: 400");
	RAW("GET /healthz HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400, "bare LF: 400");
	RAW("GET /healthz HTTP/1.0\r\n\r\n", 200, "HTTP/1.0 without Host: 200");
	RAW("POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nX-Timeout-Ms: abc\r\n"
	    "Content-Length: 0\r\n\r\n", 400, "bad x-timeout-ms: 400");
#undef RAW
}

static void test_deadline(void)
{
	struct resp r;

	req1("POST", "/api/compute/things/slow", "X-Timeout-Ms: 500\r\n", "{\"code\":10}", &r);
	is_int(r.status, 200, "call within x-timeout-ms: 200");
	ok(slow_deadline_left > 0 && slow_deadline_left <= 500, "handler saw the deadline (%ld)",
	   (long)slow_deadline_left);
	req1("POST", "/api/compute/things/slow", NULL, "{\"code\":1}", &r);
	ok(slow_deadline_left > 29000 && slow_deadline_left <= 30000,
	   "default deadline 30 s (%ld)", (long)slow_deadline_left);
	req1("POST", "/api/compute/things/slow", "X-Timeout-Ms: 100\r\n", "{\"code\":300}", &r);
	is_int(r.status, 504, "handler past the deadline: 504");
	ok(has(r.body, "DEADLINE_EXCEEDED"), "... DEADLINE_EXCEEDED");
}

static void test_keepalive(void)
{
	static const char two[] =
		"POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
		"\r\nContent-Length: 15\r\n\r\n{\"message\":\"a\"}"
		"POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
		"\r\nContent-Length: 15\r\n\r\n{\"message\":\"b\"}";
	struct cli *c = cli_open();
	struct resp r;

	ok(c != NULL, "connection opens");
	if (!c)
		return;
	is_int(req_on(c, "POST", "/api/compute/things/echo", NULL, "{\"message\":\"one\"}", &r), 0,
	       "first request on the connection");
	ok(has(r.body, "\"one\"") && has(r.head, "Connection: keep-alive"), "... keep-alive");
	is_int(req_on(c, "POST", "/api/compute/things/echo", NULL, "{\"message\":\"two\"}", &r), 0,
	       "second request on the same connection");
	ok(has(r.body, "\"two\""), "... answered");
	is_int(req_on(c, "GET", "/api/compute/things/nope", NULL, NULL, &r), 0,
	       "an error answer keeps the connection");
	is_int(r.status, 404, "... 404");
	is_int(cli_send(c, two, sizeof(two) - 1), 0, "two pipelined requests in one write");
	cli_response(c, &r);
	ok(has(r.body, "\"a\""), "... first answer");
	cli_response(c, &r);
	ok(has(r.body, "\"b\""), "... second answer, in order");
	is_int(req_on(c, "GET", "/healthz", "Connection: close\r\n", NULL, &r), 0,
	       "Connection: close");
	ok(has(r.head, "Connection: close"), "... echoed");
	ok(cli_read(c, 2000) == 0, "... and the server closes");
	cli_close(c);
}

static void test_expect_continue(void)
{
	static const char head[] =
		"POST /api/compute/things/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
		"\r\nContent-Length: 16\r\nExpect: 100-continue\r\n\r\n";
	struct cli *c = cli_open();
	struct resp r;

	cli_send(c, head, sizeof(head) - 1);
	cli_response(c, &r);
	is_int(r.status, 100, "Expect: 100-continue gets 100 Continue");
	cli_send(c, "{\"message\":\"xy\"}", 16);
	cli_response(c, &r);
	is_int(r.status, 200, "... then the answer");
	cli_close(c);
}

struct conc {
	int ok;
};

static void *conc_main(void *arg)
{
	struct conc *k = arg;
	struct cli *c = cli_open();
	char body[64], want[64];
	struct resp *r = xmalloc(sizeof(*r));

	for (int i = 0; c && i < 50; i++) {
		snprintf(body, sizeof(body), "{\"message\":\"%p-%d\"}", (void *)k, i);
		snprintf(want, sizeof(want), "\"%p-%d\"", (void *)k, i);
		if (req_on(c, "POST", "/api/compute/things/echo", NULL, body, r) == 0 &&
		    r->status == 200 && has(r->body, want))
			k->ok++;
	}
	free(r);
	cli_close(c);
	return NULL;
}

static void test_concurrency(void)
{
	pthread_t t[8];
	struct conc k[8];
	int total = 0;

	for (int i = 0; i < 8; i++) {
		k[i] = (struct conc){0};
		pthread_create(&t[i], NULL, conc_main, &k[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		total += k[i].ok;
	}
	is_int(total, 400, "8 clients x 50 requests, each on its own keep-alive connection");
}

/* Stalled clients (half a head) hold connections, not workers. */
static void test_stalled(void)
{
	struct cli *stall[6];
	struct resp r;
	int64_t t0;

	for (int i = 0; i < 6; i++) {
		stall[i] = cli_open();
		if (stall[i])
			cli_send(stall[i], "POST /api/compute/things/echo HTTP/1.1\r\nHo",
				 strlen("POST /api/compute/things/echo HTTP/1.1\r\nHo"));
	}
	t0 = mono_ms();
	req1("POST", "/api/compute/things/echo", NULL, "{}", &r);
	is_int(r.status, 200, "6 stalled connections do not block a request (2 workers)");
	ok(mono_ms() - t0 < 2000, "... answered at once");
	for (int i = 0; i < 6; i++)
		cli_close(stall[i]);
}

static void test_grpc_beside(void)
{
	char target[64];
	struct rpc_tls t = {.ca_pem = ca_pem};
	struct rpc_client_opts o = {.target = target, .tls = &t, .server_name = "localhost"};
	Msg req = GOOGLE__RPC__STATUS__INIT;
	ProtobufCMessage *resp = NULL;
	rpc_client *c;
	bc_error err;
	int r;

	snprintf(target, sizeof(target), "127.0.0.1:%d", grpc_port);
	c = rpc_client_new(&o);
	req.message = "grpc";
	r = rpc_client_unary(c, "/bc.compute.v1.Things/Echo", &req.base, MSG_D, &resp, 5000, &err);
	is_int(r, 0, "the gRPC port serves the same method");
	if (resp)
		protobuf_c_message_free_unpacked(resp, NULL);
	r = rpc_client_unary(c, "/bc.compute.v1.Things/Fail", &req.base, MSG_D, &resp, 5000, &err);
	is_int(err.code, BC_INTERNAL, "... and the same errors (code 0 from Fail is INTERNAL)");
	rpc_client_free(c);
}

/* Shutdown with an idle keep-alive connection and a stalled one is quick. */
static void test_shutdown(rpc_server *s)
{
	struct cli *idle = cli_open(), *stall = cli_open();
	struct resp r;
	int64_t t0;

	req_on(idle, "GET", "/healthz", NULL, NULL, &r);
	cli_send(stall, "POST /x HTTP/1.1\r\n", 18);
	usleep(100 * 1000);
	t0 = mono_ms();
	rpc_server_free(s, 2000);
	ok(mono_ms() - t0 < 3000, "shutdown does not wait for idle or stalled clients (%lld ms)",
	   (long long)(mono_ms() - t0));
	ok(cli_read(idle, 2000) == 0, "idle connection closed by the server");
	cli_close(idle);
	cli_close(stall);
}

static void test_plain_and_bind(void)
{
	struct resp r;
	rpc_server *s, *s2;
	int e = 0;

	use_tls = false;
	s = server_up(NULL, 2, "127.0.0.1:0", &e);
	ok(s != NULL && http_port > 0, "plain HTTP without TLS material (tests)");
	req1("POST", "/api/compute/things/echo", NULL, "{\"message\":\"plain\"}", &r);
	is_int(r.status, 200, "... serves");
	{
		char addr[64];

		snprintf(addr, sizeof(addr), "127.0.0.1:%d", http_port);
		s2 = server_up(NULL, 1, addr, &e);
		ok(s2 == NULL, "a second server on the bound HTTP port fails");
		is_int(e, -EADDRINUSE, "... -EADDRINUSE");
		rpc_server_free(s2, 0);
	}
	rpc_server_free(s, 1000);
	s = server_up(NULL, 1, "nonsense", &e);
	ok(s == NULL && e == -EINVAL, "malformed http_listen: -EINVAL");
	s = server_up(NULL, 1, "", &e);
	ok(s != NULL && rpc_server_http_port(s) == 0, "empty http_listen: no HTTP port");
	rpc_server_free(s, 0);
	use_tls = true;
}

int main(void)
{
	struct rpc_tls tls;
	rpc_server *s;
	int r, e = 0;

	signal(SIGPIPE, SIG_IGN);
	if (getenv("TEST_RPC_DEBUG"))
		log_init("test_rpc_http", LOG_LVL_DEBUG);
	r = make_certs();
	is_int(r, 0, "test certificates generated with openssl");
	if (r < 0)
		done_testing();
	rpc_global_init();
	cli_tls_init();
	tls = (struct rpc_tls){.cert_pem = srv_pem, .key_pem = srv_key};
	s = server_up(&tls, 2, "127.0.0.1:0", &e);
	ok(s != NULL && http_port > 0 && http_port != grpc_port, "TLS server with HTTP on :%d",
	   http_port);
	if (!s)
		printf("# start: %s\n", strerror(-e));
	if (s) {
		test_routing();
		test_errors();
		test_stream();
		test_bad_json();
		test_auth();
		test_limits();
		test_deadline();
		test_keepalive();
		test_expect_continue();
		test_concurrency();
		is_int(n_detachable, 0, "no JSON/HTTP call can be detached");
		ok(n_detach_refused > 0, "rpc_call_detach refuses them (%d)", (int)n_detach_refused);
		test_stalled();
		test_grpc_beside();
		test_shutdown(s);
	}
	test_plain_and_bind();
	is_int(n_thread_init, n_thread_fini, "thread_init and thread_fini balanced (%d)",
	       (int)n_thread_init);
	SSL_CTX_free(cli_ctx);
	rpc_global_shutdown();
	remove_certs();
	done_testing();
}
