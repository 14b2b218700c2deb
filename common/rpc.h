/* rpc.h: the project's RPC layer, on the gRPC core C API with protobuf-c.
 *
 * Every grpc_* call in the project lives in common/rpc*.c. Services are
 * registered from protobuf-c service descriptors: the method path is
 * "/<desc->name>/<method name>", and request/response (un)packing is driven
 * by each method's input/output descriptors, so there is no per-method glue.
 *
 * Server threads: an acceptor thread takes new calls from gRPC (a unary one
 * only once its request message has arrived) and queues them for `workers`
 * threads. A unary call runs on a worker. A server-streaming or bidi call
 * is authenticated (pre_call) and admitted (stream_admit) on the worker
 * that received it, then runs on a thread of its own (at most max_streams
 * at once; more are refused with RESOURCE_EXHAUSTED) so a long watch never
 * holds a worker. thread_init/thread_fini run on every worker, so each can
 * own a libpq connection (rpc_call_thread()); a stream thread has no state
 * of its own: its handler borrows one while it needs it
 * (rpc_call_set_thread()).
 *
 * Errors: a handler returns 0, or <0 with a filled bc_error. The server
 * answers with the mapped gRPC status, the message, and a trailer
 * grpc-status-details-bin = google.rpc.Status{code, message,
 * details: [Any(google.rpc.ErrorInfo{reason = spec code, domain = "bc",
 * metadata = details})]}. The client decodes the same into a bc_error. */
#ifndef BC_RPC_H
#define BC_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct rpc_server rpc_server;
typedef struct rpc_call rpc_call;
typedef struct rpc_client rpc_client;
typedef struct rpc_stream rpc_stream;

/* ------------------------------------------------------------ TLS */

/* PEM material, NUL-terminated strings, borrowed. */
struct rpc_static_file;

struct rpc_tls {
	const char *cert_pem;      /* our certificate chain */
	const char *key_pem;       /* our private key */
	const char *ca_pem;        /* roots to verify the peer; server: client CAs */
	/* server only: true = a client certificate is requested and, if sent,
	 * verified against ca_pem (calls without one still proceed: bearer
	 * tokens); false = no client certificate is requested. */
	bool request_client_cert;
};

/* ---------------------------------------------------------- server */

enum rpc_kind { RPC_UNARY, RPC_SERVER_STREAM, RPC_BIDI };

/* Unary: req is the unpacked request (owned by the layer). On success set
 * *ret_resp to a message allocated with rpc_alloc()/rpc_new() (owned by the
 * call, freed after it is sent). */
typedef int (*rpc_unary_fn)(rpc_call *call, const ProtobufCMessage *req,
			    ProtobufCMessage **ret_resp, bc_error *err);
/* Server stream: send with rpc_call_send(); return 0 to end with OK. */
typedef int (*rpc_sstream_fn)(rpc_call *call, const ProtobufCMessage *req, bc_error *err);
/* Bidi: rpc_call_recv() and rpc_call_send(). */
typedef int (*rpc_bidi_fn)(rpc_call *call, bc_error *err);

struct rpc_handler {
	const char *method;        /* method name as in the descriptor, e.g. "Create" */
	enum rpc_kind kind;
	union {
		rpc_unary_fn unary;
		rpc_sstream_fn sstream;
		rpc_bidi_fn bidi;
	} fn;
};

/* A WebSocket route of the JSON/HTTP transport (docs/http.md). GET
 * <prefix><rest> with an RFC 6455 opening handshake becomes a call of the
 * bidi method `method` ("/pkg.Service/Method", registered with an RPC_BIDI
 * handler), through the same pre_call (the request headers are its
 * metadata; there may be no bearer token) and stream_admit/stream_done as
 * other streams, counting against max_streams. The method's input must
 * have a string field "path" and a bytes field "data", its output a bytes
 * field "data" (checked at rpc_server_start: -EINVAL). The first
 * rpc_call_recv gives {path = the request target after "/api/<group>/",
 * query included}; each binary message after it gives {data}; each
 * rpc_call_send writes msg.data as one binary message. rpc_call_recv
 * returns 0 once the client sent its close frame; the handler's return
 * closes the WebSocket (1000, or 1011 with the error's message). The
 * prefix must start with "/api/<group>/". */
struct rpc_ws_route {
	const char *prefix;        /* "/api/compute/tunnels/" */
	const char *method;        /* "/bc.compute.v1.Tunnels/Connect" */
};

struct rpc_server_opts {
	const char *listen;        /* "127.0.0.1:7443", "[::]:7443", "unix:/path" */
	const struct rpc_tls *tls; /* NULL: insecure (tests, benchmarks only) */
	int workers;               /* unary worker threads; 0: 4 */
	int max_streams;           /* concurrent streaming calls; 0: 1024 */
	size_t max_message_bytes;  /* larger requests: INVALID_INPUT; 0: 1 MiB */
	void *user;                /* server-wide pointer, rpc_call_user() */
	/* per-thread state, e.g. a database connection, of every worker
	 * (gRPC and JSON/HTTP; never of a stream thread); may be NULL. */
	void *(*thread_init)(void *user);
	void (*thread_fini)(void *user, void *thread_state);
	/* called on every call before its handler; may refuse it (e.g.
	 * authentication). NULL: accept all. */
	int (*pre_call)(rpc_call *call, bc_error *err);
	/* Streaming calls, on both transports: after pre_call accepted one
	 * (on a worker, with its thread state), before it gets a thread;
	 * 0 admits it, <0 refuses it with err filled (e.g. QUOTA_EXCEEDED,
	 * RESOURCE_EXHAUSTED). An admitted call is given to stream_done once
	 * when it ends (any thread; its principal still set). NULL: admit
	 * all. */
	int (*stream_admit)(rpc_call *call, bc_error *err);
	void (*stream_done)(rpc_call *call);
	/* gRPC transport limits. A unary call reaches a worker only once its
	 * request message has arrived; the request of a server-streaming call
	 * must arrive within recv_timeout_ms (0: 10000) or the call ends
	 * DEADLINE_EXCEEDED. At most max_streams_per_connection HTTP/2
	 * streams are open at once on one connection (0: 100; more are
	 * refused by gRPC). open_methods: NULL-terminated paths
	 * ("/pkg.Service/Method") of methods that need no credential (with
	 * grpc.health.v1.Health's, always); at most open_workers workers (0:
	 * workers / 4, at least 1) serve those at once, the rest wait. */
	int recv_timeout_ms;
	int max_streams_per_connection;
	/* gRPC transport: 0 lets each stream's HTTP/2 receive window grow
	 * with gRPC's bandwidth-delay probing (megabytes held per stream
	 * under a slow consumer); > 0 fixes it at that many bytes with
	 * probing off, so what a stream holds is bounded (tunnels). */
	int stream_window_bytes;
	int open_workers;
	const char *const *open_methods;
	/* The JSON/HTTP transport (docs/http.md): "127.0.0.1:8443",
	 * "[::]:8443"; NULL or "": none. HTTP/1.1 over TLS with the same
	 * certificate (no client certificate: node calls are not served), or
	 * plain HTTP when tls is NULL. Unary and server-streaming methods of
	 * services in packages bc.compute.* and bc.admin.* at POST
	 * /api/<group>/<service>/<method>, through the same pre_call and
	 * handlers, with the same call API: unary calls run on `workers`
	 * threads of its own (thread_init/thread_fini), a server stream is
	 * authenticated and admitted on one of them, then runs on its
	 * connection's thread with no thread state (at most max_streams
	 * streams) and answers a chunked body of newline-delimited JSON
	 * messages. */
	const char *http_listen;
	/* JSON/HTTP connection limits (0: the default in brackets). One event
	 * loop holds every connection that is in its TLS handshake, reading a
	 * request or idle between requests; a connection takes one of
	 * http_threads threads only with a whole request read (server streams
	 * hold theirs but do not count). A connection is closed when its TLS
	 * handshake takes longer than http_handshake_timeout_ms [5000], when
	 * its request head is not complete http_header_timeout_ms [10000]
	 * after the handshake (or after its first byte, between requests),
	 * when it stays idle between requests http_idle_timeout_ms [60000];
	 * new connections beyond http_max_conns [4096] in all or
	 * http_max_conns_per_addr [128] from one IPv4 address or IPv6 /64
	 * are closed at once. */
	int http_max_conns, http_max_conns_per_addr, http_threads;
	int http_handshake_timeout_ms, http_header_timeout_ms, http_idle_timeout_ms;
	/* WebSocket routes of the JSON/HTTP transport (struct rpc_ws_route;
	 * read at rpc_server_start). The opening handshake keeps the limits
	 * and timeouts above; once upgraded, a WebSocket leaves the idle
	 * timeout (it may stay quiet for hours) and holds a thread like a
	 * server stream. rpc_call_send and rpc_call_recv may be called from
	 * two threads at once on such a call; a client that does not read
	 * blocks rpc_call_send (no unbounded buffering). Server shutdown
	 * closes them (1001). */
	const struct rpc_ws_route *ws_routes;
	size_t n_ws_routes;
	/* MCP's Streamable HTTP transport at /mcp of the JSON/HTTP port
	 * (rpc_http_mcp.c, docs/mcp.md): on with mcp_max_sessions > 0, at
	 * most that many sessions, each gone after mcp_idle_timeout_ms [3600000]
	 * unused; a request with an Origin header is refused unless it is one
	 * of mcp_allowed_origins (comma-separated, exact). Needs
	 * bc.compute.v1.SandboxTemplates registered. */
	int mcp_max_sessions, mcp_idle_timeout_ms;
	const char *mcp_allowed_origins;
	/* Static files served by GET under static_prefix of the JSON/HTTP
	 * port (rpc_http_static.c, rpc_static.h): the console. NULL: none. */
	const struct rpc_static_file *static_files;
	size_t n_static_files;
	const char *static_prefix;
};

/* Create a server, not yet serving. Adds grpc.health.v1.Health (Check and
 * Watch) answering SERVING while running. NULL on failure (logged at debug,
 * reason in *ret_errno if not NULL). */
rpc_server *rpc_server_new(const struct rpc_server_opts *opts, int *ret_errno);

/* Register a service: handlers for some or all methods of desc (by name);
 * a method without a handler answers UNIMPLEMENTED. Before start only.
 * -EINVAL if a handler names no method of desc or its kind mismatches.
 * (protobuf-c descriptors do not record streaming, so a handler's kind is
 * taken as declared; -EEXIST for a service added twice, -EBUSY after start.) */
int rpc_server_add_service(rpc_server *s, const ProtobufCServiceDescriptor *desc,
			   const struct rpc_handler *handlers, size_t n_handlers);

/* Bind and start the threads. The bound port (useful with ":0") in *ret_port. */
int rpc_server_start(rpc_server *s, int *ret_port);

/* The bound JSON/HTTP port once started, 0 without http_listen. */
int rpc_server_http_port(const rpc_server *s);

/* Graceful shutdown: stop accepting, cancel streams, wait up to grace_ms
 * for unary calls, join every thread, destroy everything. NULL-safe. */
void rpc_server_free(rpc_server *s, int grace_ms);

/* True once shutdown began; streaming handlers should return. */
bool rpc_server_stopping(const rpc_server *s);

/* ------------------------------------------------------- per call */

void *rpc_call_user(const rpc_call *call);
void *rpc_call_thread(const rpc_call *call);
/* A streaming handler lends its call a thread state (e.g. a database
 * connection taken from a pool) for as long as it needs one, so the code
 * it calls finds it with rpc_call_thread(); NULL takes it back. The
 * layer never frees it. */
void rpc_call_set_thread(rpc_call *call, void *state);
/* "/pkg.Service/Method" */
const char *rpc_call_method(const rpc_call *call);
/* The bearer token from "authorization: Bearer <t>", or NULL. */
const char *rpc_call_bearer(const rpc_call *call);
/* Any other request metadata value (first), or NULL. Keys are lowercase. */
const char *rpc_call_metadata(const rpc_call *call, const char *key);
/* The verified client certificate's common name, or NULL without one
 * (always NULL on the JSON/HTTP transport). */
const char *rpc_call_peer_cn(const rpc_call *call);
/* That certificate as PEM, or NULL without one (JSON/HTTP: always NULL). */
const char *rpc_call_peer_cert_pem(const rpc_call *call);
/* The peer address ("ipv4:127.0.0.1:5555"). */
const char *rpc_call_peer(const rpc_call *call);
/* Absolute deadline in CLOCK_MONOTONIC ms, or INT64_MAX if none. */
int64_t rpc_call_deadline_mono_ms(const rpc_call *call);
/* Set by pre_call for the handler: an opaque principal pointer. */
void rpc_call_set_principal(rpc_call *call, void *principal, void (*free_fn)(void *));
void *rpc_call_principal(const rpc_call *call);

/* Call-scoped allocation, freed when the call ends; never NULL (aborts).
 * Not thread-safe: only the handler's thread allocates from its call. */
void *rpc_alloc(rpc_call *call, size_t n);
char *rpc_strdup(rpc_call *call, const char *s);
/* Allocate and init a message of descriptor d. */
void *rpc_new(rpc_call *call, const ProtobufCMessageDescriptor *d);

/* Streams. send: 0, or -ECANCELED once the client went away/server stops.
 * Threads: on a bidi call, one thread may rpc_call_send while another
 * rpc_call_recv at the same time (the handler's thread and one it
 * started, which it joins before returning), on either transport; two
 * senders or two receivers at once are not allowed. */
int rpc_call_send(rpc_call *call, const ProtobufCMessage *msg);
/* bidi receive: 1 with *ret (free with protobuf_c_message_free_unpacked),
 * 0 when the client half-closed, -ETIMEDOUT, -ECANCELED, -EMSGSIZE, -EBADMSG,
 * -EILSEQ (a string field holds a NUL).
 * timeout_ms < 0: no limit; 0: poll. After -ETIMEDOUT the call stays usable. */
int rpc_call_recv(rpc_call *call, ProtobufCMessage **ret, int timeout_ms);
/* Bidi receive of one bytes field without unpacking the message (relays:
 * a tunnel's data). fn gets the bytes of the input message's singular
 * bytes field number `field` (its last occurrence, as rpc_call_recv would
 * keep) in one or more pieces, straight from the transport's buffers,
 * and returns 0 to go on or <0 to stop; the pieces are valid during the
 * call only. Fields other than `field` are skipped unread. 1 once the
 * whole message was given (no piece when the field is absent or empty),
 * else rpc_call_recv's 0, -ETIMEDOUT, -ECANCELED, -EMSGSIZE, -EBADMSG,
 * -EINVAL (`field` is not a singular bytes field of the method's input,
 * or a unary call), or fn's own negative value as is (pick one no other
 * case returns, e.g. -EPIPE). */
typedef int (*rpc_read_fn)(void *arg, const uint8_t *p, size_t n);
int rpc_call_read(rpc_call *call, uint32_t field, rpc_read_fn fn, void *arg, int timeout_ms);
/* Server stream idle check: true if the client cancelled or the server
 * stops (on the JSON/HTTP transport also: the client closed the
 * connection, or the call's deadline passed). Waits up to timeout_ms for
 * that to happen (0: poll; < 0: no limit). A unary call: true at once. */
bool rpc_call_wait_cancelled(rpc_call *call, int timeout_ms);

/* A streaming handler ends its call from another thread: a send or
 * receive blocked on the call returns an error at once (the gRPC
 * transport cancels the call; a transport that cannot does nothing). The
 * handler still returns as usual. */
void rpc_call_cancel(rpc_call *call);

/* Detached unary calls. A unary handler that would otherwise wait (e.g.
 * for a resource to become ready) can hand its call to another thread and
 * free its worker:
 *
 *	if (rpc_call_can_detach(call) && rpc_call_detach(call) == 0) {
 *		hand call to its new owner;      // may complete it at once
 *		return RPC_DETACHED;             // never touch call again
 *	}
 *
 * The request message is freed when the handler returns: copy what the
 * owner needs into the call (rpc_strdup); rpc_call_thread() still names
 * the worker's state, which the owner must not use. The owner then calls
 * rpc_call_complete() exactly once, from any thread, even after the server
 * was freed. Until then the layer watches the call: a client that went
 * away or a deadline that passed ends it (rpc_call_detached_over() turns
 * true; the answer given later is dropped); rpc_server_free() waits up to
 * its grace for the owners to complete their calls (rpc_server_stopping()
 * is true), then answers the rest UNAVAILABLE "server shutting down".
 * Only gRPC unary calls can be detached: on the JSON/HTTP transport,
 * while the server stops, or for a streaming call rpc_call_can_detach()
 * is false and the handler answers inline as usual. */
#define RPC_DETACHED 1

/* True if call may be detached now. */
bool rpc_call_can_detach(const rpc_call *call);
/* Detach call from its worker: 0, or -EOPNOTSUPP when it cannot be
 * (nothing changed; answer inline). On 0 the handler must return
 * RPC_DETACHED without touching call again. */
int rpc_call_detach(rpc_call *call);
/* Answer a detached call (rc, resp, err as a handler's result; resp
 * allocated from the call) and free it. Exactly once per detached call;
 * call is invalid afterwards. */
void rpc_call_complete(rpc_call *call, int rc, const ProtobufCMessage *resp, bc_error *err);
/* True once the layer ended a detached call (client gone, deadline
 * passed, server shutting down): its owner should complete it now. */
bool rpc_call_detached_over(const rpc_call *call);

/* ---------------------------------------------------------- client */

struct rpc_client_opts {
	const char *target;        /* "host:port" or "unix:/path" */
	const struct rpc_tls *tls; /* NULL: insecure */
	const char *server_name;   /* TLS name override; NULL: host of target */
	size_t max_message_bytes;  /* 0: 4 MiB */
	const char *bearer;        /* default bearer token, copied; may be NULL */
	int stream_window_bytes;   /* as rpc_server_opts' (0: gRPC's) */
};

/* One channel; thread-safe; calls from many threads share it. gRPC
 * reconnects by itself. NULL on failure. */
rpc_client *rpc_client_new(const struct rpc_client_opts *opts);
void rpc_client_free(rpc_client *c);

/* Wait up to timeout_ms (0: only look) for c's channel to be connected,
 * asking it to connect. The wait drives the connection attempt: without a
 * call in progress gRPC advances a connecting channel only from its backup
 * poller, every 5 s, so a caller that retries after a failure waits here
 * rather than sleeping. 0 when connected, -ETIMEDOUT otherwise. */
int rpc_client_wait_ready(rpc_client *c, int timeout_ms);

/* "/<service>/<method>" for the named method of desc, into the caller's
 * buffer. 0, -ENOENT if desc has no such method, -ENOSPC if len is short. */
int rpc_method_path(const ProtobufCServiceDescriptor *desc, const char *method,
		    char *buf, size_t len);

/* Unary call. On success *ret_resp is the unpacked reply (free with
 * protobuf_c_message_free_unpacked(..., NULL)). On failure returns
 * -BC_EDOMAIN with err filled from the status (ErrorInfo if present,
 * else mapped from the status code). timeout_ms <= 0: 30 s. */
int rpc_client_unary(rpc_client *c, const char *path, const ProtobufCMessage *req,
		     const ProtobufCMessageDescriptor *resp_desc,
		     ProtobufCMessage **ret_resp, int timeout_ms, bc_error *err);

/* Streaming calls. Server stream: req sent and half-closed at open. Bidi:
 * req NULL, then rpc_stream_send/rpc_stream_close_send. timeout_ms <= 0:
 * no deadline.
 * Threads: on one bidi stream, one thread may send (rpc_stream_send, then
 * rpc_stream_close_send) while another receives (rpc_stream_recv) at the
 * same time, e.g. one pumping each direction of a tunnel; two senders or
 * two receivers at once are not allowed, and rpc_stream_free only once
 * both are done. */
rpc_stream *rpc_stream_open(rpc_client *c, const char *path, const ProtobufCMessage *req,
			    int timeout_ms, bc_error *err);
/* 0, or -ECANCELED once the stream is over (its status comes from recv). */
int rpc_stream_send(rpc_stream *st, const ProtobufCMessage *msg);
int rpc_stream_close_send(rpc_stream *st);
/* 1 with *ret, 0 at the end of an OK stream, -ETIMEDOUT if nothing arrived
 * in timeout_ms (the stream stays usable), else -BC_EDOMAIN with err.
 * timeout_ms < 0: no limit (the stream's deadline still applies); 0: poll.
 * A server's refusal (pre_call, max_streams) arrives here, not at open. */
int rpc_stream_recv(rpc_stream *st, const ProtobufCMessageDescriptor *d,
		    ProtobufCMessage **ret, int timeout_ms, bc_error *err);
/* rpc_call_read's client side, on a stream whose replies are of type d:
 * 1 once fn had the whole message, else rpc_stream_recv's results
 * (-BC_EDOMAIN with err: BC_INVALID_RESPONSE for an oversized or
 * malformed message, BC_INTERNAL when `field` is not a singular bytes
 * field of d), or fn's own negative value as is. */
int rpc_stream_read(rpc_stream *st, const ProtobufCMessageDescriptor *d, uint32_t field,
		    rpc_read_fn fn, void *arg, int timeout_ms, bc_error *err);
/* Cancel if still open and free. NULL-safe. */
void rpc_stream_free(rpc_stream *st);
/* Cancel without freeing, from any thread: a send or receive blocked on
 * another thread returns an error at once. NULL-safe. */
void rpc_stream_cancel(rpc_stream *st);

/* Process-wide init/shutdown of gRPC (refcounted by gRPC itself). */
void rpc_global_init(void);
void rpc_global_shutdown(void);

#endif
