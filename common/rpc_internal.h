/* rpc_internal.h: what the common/rpc*.c files share and nobody else sees.
 *
 * rpc_arena.c     call-scoped bump allocator behind rpc_alloc()/rpc_new()
 * rpc_status.c    google.rpc.Status/ErrorInfo <-> bc_error, method paths,
 *                 byte buffer (un)packing with size limits, clocks
 * rpc_server.c    server lifecycle: workers, completion queues, dispatch,
 *                 stream threads, graceful shutdown
 * rpc_call.c      one server call: metadata, peer, send/recv, finishing
 * rpc_health.c    grpc.health.v1.Health
 * rpc_client.c    channel, unary calls, client streams
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
	const ProtobufCMethodDescriptor *md; /* borrowed from the service */
	struct rpc_handler h;
	bool has_handler;
};

struct rpc_worker;
struct rpc_stream_thread;

struct rpc_server {
	struct rpc_server_opts opts;  /* strings below are our copies */
	char *listen;
	char *cert_pem, *key_pem, *ca_pem;
	bool tls, request_client_cert;

	struct rpc_method *methods;
	size_t n_methods;
	const ProtobufCServiceDescriptor **services;
	size_t n_services;

	grpc_server *server;
	struct rpc_worker *workers;
	int n_workers_started;
	int shutdown_tag;

	pthread_mutex_t lock;         /* stopping, shutdown_done, streams */
	pthread_cond_t cond;
	atomic_bool stopping;
	bool started, shutdown_done;
	struct rpc_stream_thread *streams;
	int n_streams;
};

/* Health service registration, done by rpc_server_new. */
int rpc_health_register(rpc_server *s);
/* True if name is "" or the name of a registered service. */
bool rpc_server_has_service(const rpc_server *s, const char *name);

struct rpc_call {
	rpc_server *srv;
	const struct rpc_method *method; /* NULL: unknown path */
	const char *path;
	void *thread_state;
	grpc_call *call;
	grpc_completion_queue *cq;       /* GRPC_CQ_PLUCK, bound to call */
	struct rpc_arena arena;

	size_t n_md;
	const char **md_keys, **md_vals;
	const char *bearer, *peer, *peer_cn;
	int64_t deadline_ms;

	void *principal;
	void (*principal_free)(void *);

	bool sent_initial_md;
	bool close_started, close_done;
	int cancelled;
	bool recv_pending, recv_eof;
	grpc_byte_buffer *recv_bb;
	int tag_op, tag_recv, tag_close; /* their addresses are the tags */
};

/* Take ownership of a new call (its pluck cq too), read its metadata,
 * peer and deadline; method resolved against s. */
rpc_call *rpc_call_new(rpc_server *s, grpc_call *gc, grpc_completion_queue *cq,
		       const grpc_call_details *d, const grpc_metadata_array *md,
		       void *thread_state);

/* Start GRPC_OP_RECV_CLOSE_ON_SERVER so cancellation can be observed. */
void rpc_call_watch_close(rpc_call *c);

/* Send initial metadata if needed, resp if rc >= 0, and the status with
 * the ErrorInfo trailer if rc < 0; wait for every outstanding op. */
void rpc_call_finish(rpc_call *c, int rc, const ProtobufCMessage *resp, bc_error *err);

/* Run the unary method of c (pre_call, receive, handler, finish). */
void rpc_call_run_unary(rpc_call *c);
/* Run the streaming method of c on the current (stream) thread. */
void rpc_call_run_stream(rpc_call *c);

/* Free c after rpc_call_finish: unref the call, destroy its cq, the arena. */
void rpc_call_release(rpc_call *c);

#endif
