/* rpc_internal.h: what the common/rpc*.c files share and nobody else sees.
 *
 * rpc_arena.c     call-scoped bump allocator behind rpc_alloc()/rpc_new()
 * rpc_status.c    google.rpc.Status/ErrorInfo <-> bc_error, method paths,
 *                 byte buffer (un)packing with size limits, clocks
 * rpc_server.c    server lifecycle: workers, completion queues, dispatch,
 *                 stream threads, graceful shutdown
 * rpc_call.c      one server call, whichever transport brought it: metadata,
 *                 peer, pre_call + handler, gRPC send/recv and finishing
 * rpc_detach.c    unary calls handed off by their handler: completion from
 *                 any thread, client cancel/deadline, shutdown
 * rpc_http.c      the JSON/HTTP transport: routes, worker pool, dispatch
 *                 into the same method table, server streams
 * rpc_http_conn.c  its connections: TLS listener, the epoll loop (accept,
 *                 handshake, request reading, caps and timeouts), the
 *                 connection threads
 * rpc_http_parse.c  HTTP/1.1 request heads, routes, JSON error bodies (pure)
 * rpc_http_ws.c   WebSocket routes: the RFC 6455 handshake and frames of a
 *                 bidi call on a JSON/HTTP connection
 * rpc_health.c    grpc.health.v1.Health
 * rpc_client.c    channel, unary calls, client streams
 * rpc_read.c      a stream message's bytes field read in place from its
 *                 byte buffer (rpc_call_read, rpc_stream_read)
 *
 * Every grpc_* call of the project stays in these files. */
#ifndef BC_RPC_INTERNAL_H
#define BC_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>

#include "rpc.h"

/* ------------------------------------------------------------ arena */

struct rpc_arena_chunk;

struct rpc_arena {
	struct rpc_arena_chunk *head;
};

/* 16-byte aligned, zeroed memory living until rpc_arena_free; aborts on OOM. */
void *rpc_arena_alloc(struct rpc_arena *a, size_t n);
char *rpc_arena_strndup(struct rpc_arena *a, const char *s, size_t n);
void rpc_arena_free(struct rpc_arena *a);

/* ------------------------------------------------------ tuning */

/* gRPC's TCP reads, server and client: at most this many bytes per read
 * (gRPC grows its read buffer up to 4 MiB by default, a fresh allocation
 * per read that glibc serves with mmap and munmap: page faults on every
 * read of a bulk stream). */
#define RPC_TCP_READ_CHUNK (64 * 1024)
/* glibc's malloc, set once by rpc_global_init (rpc_status.c): blocks up to
 * RPC_MMAP_THRESHOLD come from the heap, and up to RPC_TRIM_THRESHOLD of
 * free memory at a heap's top stays there, so a stream's per-message
 * buffers (a few hundred KiB) are reused rather than mapped, faulted in
 * and returned to the kernel on every message. */
#define RPC_MMAP_THRESHOLD (1024 * 1024)
#define RPC_TRIM_THRESHOLD (4 * 1024 * 1024)

/* ------------------------------------------------------- status codec */

#define RPC_STATUS_DETAILS_KEY "grpc-status-details-bin"
#define RPC_ERRORINFO_TYPE_URL "type.googleapis.com/google.rpc.ErrorInfo"
#define RPC_ERROR_DOMAIN "bc"

/* Pack e as google.rpc.Status with one ErrorInfo. *ret_buf is malloc'd. */
int rpc_status_pack(const bc_error *e, uint8_t **ret_buf, size_t *ret_len);

/* Fill e from a gRPC status as seen by a client: the packed Status of the
 * grpc-status-details-bin trailer when it carries our ErrorInfo (bin may be
 * NULL), else the status code mapped and msg kept. */
void rpc_status_to_error(int grpc_status, const char *msg, size_t msg_len,
			 const uint8_t *bin, size_t bin_len, bc_error *e);

/* ----------------------------------------------------- byte buffers */

/* A byte buffer holding m packed; caller destroys it. */
grpc_byte_buffer *rpc_bb_pack(const ProtobufCMessage *m);

/* Unpack bb as d. -EMSGSIZE if longer than max, -EBADMSG if malformed. */
int rpc_bb_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
		  size_t max, ProtobufCMessage **ret);
/* The same for a request a server received, also -EILSEQ if a string
 * field anywhere in it holds a NUL (protobuf-c would cut it there). */
int rpc_bb_unpack_request(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
			  size_t max, ProtobufCMessage **ret);

/* rpc_read.c: hand fn the bytes of length-delimited field `field` of the
 * message in bb (its last occurrence, as an unpack would keep), piece by
 * piece as they lie in bb's slices, without copying; no piece when the
 * field is absent. 0; -EMSGSIZE if bb is longer than max; -EBADMSG if bb
 * is not well-formed protobuf wire data at its top level (a truncated
 * tag, length or value, a group, a wire type 6/7) or the field is not
 * length-delimited; fn's own negative value, which stops it. bb is not
 * destroyed. */
int rpc_bb_read_field(grpc_byte_buffer *bb, size_t max, uint32_t field, rpc_read_fn fn,
		      void *arg);
/* rpc_call.c: the gRPC transport's receive of one message as it came:
 * 1 with *ret (the caller destroys it), 0 once the client half-closed,
 * -ETIMEDOUT, -ECANCELED, -EINVAL. */
int rpc_grpc_recv_bb(rpc_call *c, grpc_byte_buffer **ret, int timeout_ms);
/* rpc_client.c: a client stream's receive of one message as it came: 1
 * with *ret (the caller destroys it), else as rpc_stream_recv. */
int rpc_stream_recv_bb(rpc_stream *st, grpc_byte_buffer **ret, int timeout_ms, bc_error *err);
/* The stream's client's max_message_bytes. */
size_t rpc_stream_max_message(const rpc_stream *st);

/* ----------------------------------------------------------- clocks */

/* Absolute monotonic deadline timeout_ms from now; timeout_ms < 0: never. */
gpr_timespec rpc_deadline_in(int timeout_ms);
/* A gRPC deadline as CLOCK_MONOTONIC ms (util.h mono_ms), INT64_MAX if none. */
int64_t rpc_timespec_mono_ms(gpr_timespec t);

/* ----------------------------------------------------------- client */

/* For tests: a unary call returning the raw gRPC status code and a copy of
 * the grpc-status-details-bin trailer (*ret_bin malloc'd, NULL if absent).
 * 0, or -EIO if the call could not run. */
int rpc_client_unary_raw(rpc_client *c, const char *path, const ProtobufCMessage *req,
			 int timeout_ms, int *ret_status, uint8_t **ret_bin, size_t *ret_bin_len);

/* ----------------------------------------------------------- server */

struct rpc_method {
	char *path;                          /* "/pkg.Service/Method", owned */
	const ProtobufCServiceDescriptor *svc; /* borrowed */
	const ProtobufCMethodDescriptor *md; /* borrowed from the service */
	struct rpc_handler h;
	bool has_handler;
	bool open;                           /* needs no credential: open_workers cap */
	void *registered;                    /* gRPC's handle: request read first */
};

struct rpc_worker;
struct rpc_request;
struct rpc_stream_thread;
struct rpc_http;

struct rpc_server {
	struct rpc_server_opts opts;  /* strings below are our copies */
	char *listen;
	char *http_listen;            /* NULL: no JSON/HTTP transport */
	struct rpc_http *http;
	char *cert_pem, *key_pem, *ca_pem;
	bool tls, request_client_cert;

	struct rpc_method *methods;
	size_t n_methods;
	const ProtobufCServiceDescriptor **services;
	size_t n_services;

	char **open_paths;            /* opts.open_methods, copied */
	size_t n_open_paths;

	grpc_server *server;
	grpc_completion_queue *accept_cq; /* every new call, then to the queues */
	pthread_t acceptor;
	struct rpc_worker *workers;
	int n_workers_started;
	int shutdown_tag;

	/* calls ready for a worker (request read), under lock: authenticated
	 * methods and others, and those needing no credential (at most
	 * opts.open_workers of them served at once) */
	struct rpc_request *ready, **ready_tail;
	struct rpc_request *open_ready, **open_ready_tail;
	int n_open_running;
	bool accept_done;             /* the acceptor is gone: no more calls */
	pthread_cond_t work_cond;

	pthread_mutex_t lock;         /* stopping, shutdown_done, streams */
	pthread_cond_t cond;
	atomic_bool stopping;
	bool started, shutdown_done;
	struct rpc_stream_thread *streams;
	int n_streams;

	/* detached unary calls (rpc_detach.c), under rpc_detach_mu */
	rpc_call *detached;
	int n_detached;
	bool reaper_stop;             /* under lock */
	pthread_t reaper;
	bool reaper_started;
};

/* Health service registration, done by rpc_server_new. */
int rpc_health_register(rpc_server *s);
/* True if name is "" or the name of a registered service. */
bool rpc_server_has_service(const rpc_server *s, const char *name);

/* What a transport does for the transport-neutral call (rpc_call.c): each
 * call points at its transport's table from rpc_call_alloc on, so the call
 * object never asks which transport it is. The public entry points
 * (rpc.h) check their arguments, then land here. */
struct rpc_transport_ops {
	const char *name;
	/* rpc_call_send of a streaming call, message type already checked:
	 * 0, -EINVAL (no stream to send on), -ECANCELED, -EIO */
	int (*send)(rpc_call *c, const ProtobufCMessage *msg);
	/* rpc_call_recv: 1 with *ret, 0 once the client half-closed,
	 * -ETIMEDOUT, -ECANCELED, -EINVAL (the transport cannot receive) */
	int (*recv)(rpc_call *c, ProtobufCMessage **ret, int timeout_ms);
	/* rpc_call_wait_cancelled: true once the call is over */
	bool (*wait_cancelled)(rpc_call *c, int timeout_ms);
	/* rpc_call_release: drop the transport's side of c (not the struct,
	 * not its arena) */
	void (*release)(rpc_call *c);
	/* rpc_call_cancel, from any thread; NULL: not supported */
	void (*cancel)(rpc_call *c);
	/* the transport can answer a unary call later (rpc_detach.c) */
	bool can_detach;
};

/* rpc_call.c and rpc_http.c: the two transports. */
extern const struct rpc_transport_ops rpc_grpc_ops, rpc_http_ops;

/* One call, whichever transport brought it: handlers and pre_call see the
 * same structure. Everything below `grpc:` is used by the gRPC transport
 * only (an HTTP call has call == NULL and never streams). */
struct rpc_call {
	rpc_server *srv;
	const struct rpc_transport_ops *ops; /* its transport */
	const struct rpc_method *method; /* NULL: unknown path */
	const char *path;
	void *thread_state;
	/* grpc: */
	grpc_call *call;
	grpc_completion_queue *cq;       /* GRPC_CQ_PLUCK, bound to call */
	struct rpc_arena arena;

	size_t n_md;
	const char **md_keys, **md_vals;
	const char *bearer, *peer, *peer_cn;
	const char *peer_cert_pem;
	int64_t deadline_ms;

	void *principal;
	void (*principal_free)(void *);
	/* streams: pre_call already ran (on the worker); stream_admit
	 * admitted the call, so stream_done runs at release */
	bool pre_done, admitted;

	bool sent_initial_md;
	bool close_started, close_done;
	int cancelled;
	bool recv_pending, recv_eof;
	grpc_byte_buffer *recv_bb;
	/* a registered unary call: its request as gRPC read it before the call
	 * was handed over (NULL: none came), taken by the first receive */
	bool prefetched;
	grpc_byte_buffer *prefetch_bb;
	int tag_op, tag_recv, tag_close; /* their addresses are the tags */
	/* detached (rpc_detach.c): list links and who ended it, under
	 * rpc_detach_mu; `claimed` once the owner or the layer took the
	 * answer, `layer_done` once the layer has sent its own and let go */
	bool detached, claimed, layer_done;
	rpc_call *dnext, *dprev;
	/* JSON/HTTP server stream: its connection (struct http_conn) and state */
	void *http_conn;
	bool http_head_sent, http_chunked, http_gone, http_deadline_hit;
	/* a WebSocket (rpc_http_ws.c): its state */
	void *http_ws;
};

/* A new, empty call of server s on the current thread (transport-neutral:
 * arena, principal; the caller fills method, path, peer, deadline). */
rpc_call *rpc_call_alloc(rpc_server *s, const struct rpc_transport_ops *ops,
			 void *thread_state);

/* Set the request metadata (n arena-owned lowercase keys and values; the
 * arrays themselves arena-owned too) and take the bearer token from
 * "authorization: Bearer <t>". */
void rpc_call_set_metadata(rpc_call *c, size_t n, const char **keys, const char **vals);

/* The server's pre_call hook: 0, or -BC_EDOMAIN with err filled. */
int rpc_call_pre(rpc_call *c, bc_error *err);
/* A streaming call, on the thread that received it: pre_call, then the
 * server's stream_admit; 0, or -BC_EDOMAIN with err filled. Once admitted,
 * rpc_call_release runs stream_done. */
int rpc_call_stream_admit(rpc_call *c, bc_error *err);

/* Run c's unary handler on req: 0 with *ret_resp (of the method's output
 * type, an empty one if the handler gave none; owned by the call), or <0
 * with err filled (INTERNAL when the handler left it empty). */
int rpc_call_invoke_unary(rpc_call *c, const ProtobufCMessage *req,
			  ProtobufCMessage **ret_resp, bc_error *err);

/* Take ownership of a new call (its pluck cq too), read its metadata,
 * peer and deadline; method resolved against s. */
rpc_call *rpc_call_new(rpc_server *s, grpc_call *gc, grpc_completion_queue *cq,
		       const grpc_call_details *d, const grpc_metadata_array *md,
		       void *thread_state);

/* The same for a call of registered method m whose request gRPC already
 * read: payload (owned by the call from now on; NULL if the client sent
 * none) is what the first rpc_call_recv returns. */
rpc_call *rpc_call_new_registered(rpc_server *s, grpc_call *gc, grpc_completion_queue *cq,
				  const struct rpc_method *m, gpr_timespec deadline,
				  const grpc_metadata_array *md, grpc_byte_buffer *payload,
				  void *thread_state);

/* Start GRPC_OP_RECV_CLOSE_ON_SERVER so cancellation can be observed. */
void rpc_call_watch_close(rpc_call *c);

/* Send initial metadata if needed, resp if rc >= 0, and the status with
 * the ErrorInfo trailer if rc < 0; wait for every outstanding op. */
void rpc_call_finish(rpc_call *c, int rc, const ProtobufCMessage *resp, bc_error *err);

/* Run the unary method of c (pre_call, receive, handler, finish). False
 * if the handler detached c (it is no longer the caller's to release). */
bool rpc_call_run_unary(rpc_call *c);

/* Drop c's gRPC side (unref the call, destroy its queue); the struct and
 * its arena stay. */
void rpc_call_release_grpc(rpc_call *c);

/* rpc_detach.c: true (once) if the handler that just returned on this
 * thread detached c; compares the pointer only, never reads c. */
bool rpc_detach_taken(const rpc_call *c);
/* The detached calls of a server. Start the thread that
 * ends those whose client went away or whose deadline passed. */
void rpc_detach_start(rpc_server *s);
/* Answer every detached call not yet answered UNAVAILABLE "server
 * shutting down", wait until none is left, stop the thread. */
void rpc_detach_stop(rpc_server *s);
/* Run the streaming method of c on the current (stream) thread. */
void rpc_call_run_stream(rpc_call *c);

/* Free c (after rpc_call_finish for gRPC: unref the call, destroy its cq),
 * its principal and its arena. NULL-safe. */
void rpc_call_release(rpc_call *c);

/* ------------------------------------------------------- JSON/HTTP */

/* Bind s->http_listen (no threads yet): 0, -EINVAL for a bad address,
 * -EADDRINUSE if it cannot be bound, -EIO for unusable TLS material. */
int rpc_http_new(rpc_server *s, struct rpc_http **ret);
/* Start the accept thread and the worker pool. */
void rpc_http_start(struct rpc_http *h);
/* The bound port. */
int rpc_http_port(const struct rpc_http *h);
/* Stop accepting; idle connections close, requests in flight finish. */
void rpc_http_stop(struct rpc_http *h);
/* Stop (if not yet), join every thread, close everything. NULL-safe. */
void rpc_http_free(struct rpc_http *h);

/* For tests: the bytes the WebSocket connections of s hold in their
 * buffers right now (read buffers, messages being reassembled). */
size_t rpc_http_ws_buffered(const rpc_server *s);

/* rpc_http_parse.c: pure helpers (request heads, WebSocket frame headers),
 * exposed for tests and fuzzing. */

#define RPC_HTTP_MAX_HEAD 16384
#define RPC_HTTP_MAX_HEADERS 64

struct rpc_http_header {
	const char *name;          /* lowercased */
	const char *value;         /* trimmed */
};

struct rpc_http_request {
	const char *method, *target; /* target without the query string */
	const char *query;         /* after the '?', NULL without one */
	int minor;                 /* HTTP/1.<minor> */
	size_t n_headers;
	struct rpc_http_header headers[RPC_HTTP_MAX_HEADERS];
	bool has_length, chunked, keep_alive, expect_continue;
	size_t content_length;
};

/* Where the head of a request ends in buf[0..len): its length including
 * the blank line, 0 if not complete yet. */
size_t rpc_http_head_len(const char *buf, size_t len);

/* Parse a complete head in place (buf is modified: NULs, lowercased names;
 * the request points into it). 0, or the HTTP status to refuse it with
 * (400, 411, 413 never: the caller compares content_length, 431, 501, 505)
 * and a reason in *ret_why. */
int rpc_http_parse_head(char *buf, size_t head_len, struct rpc_http_request *req,
			const char **ret_why);

/* First value of a header, or NULL. */
const char *rpc_http_header(const struct rpc_http_request *req, const char *name);

/* True if a Content-Type value is application/json (parameters allowed). */
bool rpc_http_is_json(const char *content_type);

/* A comma-separated header value (NULL: none) holds token, compared
 * case-insensitively. */
bool rpc_http_list_has(const char *v, const char *token);

/* WebSocket opcodes (RFC 6455 5.2). */
enum {
	RPC_WS_CONT = 0x0, RPC_WS_TEXT = 0x1, RPC_WS_BINARY = 0x2,
	RPC_WS_CLOSE = 0x8, RPC_WS_PING = 0x9, RPC_WS_PONG = 0xa,
};

/* The header of a frame from a client. */
struct rpc_ws_frame {
	bool fin;
	int op;                    /* RPC_WS_* */
	uint8_t mask[4];
	uint64_t len;              /* payload bytes */
	size_t head_len;           /* header bytes before the payload */
};

/* Parse the frame header at p[0..n): its length (> 0) with *f filled, 0
 * while more bytes are needed, or minus the close code to refuse it with
 * (reason in *ret_why): -1002 (reserved bits, unmasked, unknown opcode, a
 * control frame fragmented, over 125 bytes or a 1-byte close, a length
 * with the top bit set), -1003 (a text frame). The fragment sequence and
 * size limits are the caller's. */
int rpc_ws_frame_parse(const uint8_t *p, size_t n, struct rpc_ws_frame *f, const char **ret_why);

/* The route of a method for the JSON transport: "/api/<group>/<service>/<method>"
 * lowercased into lower and as spelled in the descriptor into exact. -ENOENT
 * if the method's package is not bc.compute.* or bc.admin.*, -ENOSPC. */
int rpc_http_route(const ProtobufCServiceDescriptor *svc, const ProtobufCMethodDescriptor *md,
		   char *lower, char *exact, size_t len);

/* The JSON error body {"error":{"code":..,"message":..,"details":{..}}},
 * malloc'd. */
char *rpc_http_error_json(const bc_error *e);

#endif
