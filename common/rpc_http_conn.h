/* rpc_http_conn.h: what the two files of the JSON/HTTP transport share and
 * nobody else sees: rpc_http_conn.c (the listener, the connections' event
 * loop and threads, their blocking I/O) and rpc_http.c (routing, the
 * workers, unary calls and server streams). */
#ifndef BC_RPC_HTTP_CONN_H
#define BC_RPC_HTTP_CONN_H

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rpc_internal.h"

#define HTTP_IO_TIMEOUT_MS 30000     /* a request body; a response */
#define HTTP_ADDR_BUCKETS 1024
#define HTTP_TICK_MS 200             /* how often blocked reads check shutdown */

struct http_route;
struct http_ws_route;
struct addr_count;

/* A queue entry: the first member of a queued job, a connection's qlink. */
struct http_link {
	struct http_link *next;
};

/* A FIFO of jobs (for the workers) or connections (for the connection
 * threads), under h->lock. */
struct http_fifo {
	struct http_link *head, **tail;
	int n;
};

/* The structure of type holding the link l as member. */
#define http_of(l, type, member) ((type *)(void *)((char *)(l) - offsetof(type, member)))

/* Where a connection stands while the loop owns it. */
enum conn_state {
	CS_HANDSHAKE,                /* TLS handshake */
	CS_WAIT,                     /* no byte of the next request yet */
	CS_HEAD,                     /* part of a request head */
	CS_BODY,                     /* the head, part of the body (want bytes) */
};

struct http_conn {
	struct http_conn *next, *prev; /* the loop's list, or the back queue (next) */
	struct http_link qlink;      /* the ready queue */
	struct rpc_http *h;
	int fd;
	SSL *ssl;
	char peer[96];
	uint8_t addr[16];            /* the per-address cap's key */
	char *buf;                   /* bytes read, not yet consumed */
	size_t len, cap;
	/* loop only: */
	enum conn_state state;
	int64_t deadline;            /* closed when it passes */
	size_t want;                 /* CS_BODY: head + body length */
	uint32_t events;             /* registered with epoll, 0: not */
};

struct rpc_http {
	rpc_server *srv;
	int lfd, port;
	int wake[2];                 /* a byte here stops the accept thread */
	SSL_CTX *ctx;                /* NULL: plain HTTP (tests) */
	struct http_route *routes;
	size_t n_routes;

	/* limits, from the options or their defaults */
	int max_conns, max_per_addr, max_threads;
	int handshake_ms, header_ms, idle_ms;

	int ep;                      /* epoll: the listener, wake[0], connections */
	pthread_t loop_tid;
	struct http_conn *loop_conns; /* owned by the loop (loop thread only) */
	int64_t last_sweep;
	pthread_t *workers;
	int n_workers;
	bool started;
	atomic_bool stopping;

	pthread_mutex_t lock;        /* everything below */
	pthread_cond_t work;         /* a job queued, or workers_stop */
	pthread_cond_t done;         /* a job answered */
	pthread_cond_t room;         /* a connection ended */
	pthread_cond_t ready_cv;     /* a connection is ready, or threads_stop */
	struct http_fifo jobs;       /* struct http_job, for the workers */
	struct http_fifo ready;      /* whole requests for a thread (qlink) */
	struct http_conn *back;      /* keep-alive connections for the loop */
	pthread_t *threads;          /* connection threads */
	int n_threads, n_idle, threads_cap;
	bool threads_stop, loop_done;
	struct addr_count *addrs[HTTP_ADDR_BUCKETS];
	int n_conns;
	int n_streams;               /* server streams and WebSockets being served */
	bool workers_stop;
	/* WebSocket routes (read-only once started) and the bytes their
	 * connections hold in buffers right now */
	struct http_ws_route *ws_routes;
	size_t n_ws_routes;
	struct http_mcp *mcp;        /* /mcp (rpc_http_mcp.c), or NULL: off */
	atomic_size_t ws_buffered;
};

/* ------------------------------------------------ rpc_http_conn.c */

/* An empty queue. */
void http_fifo_init(struct http_fifo *q);
/* Append l to q (h->lock held). */
void http_fifo_push(struct http_fifo *q, struct http_link *l);
/* With mu (h->lock) held, wait on cv until q has an entry or *stop is
 * set; take the first entry. NULL once *stop is set and q is empty. idle
 * (NULL: none) counts the threads waiting here. */
struct http_link *http_fifo_wait(struct http_fifo *q, pthread_mutex_t *mu, pthread_cond_t *cv,
				 const bool *stop, int *idle);

/* Write all n bytes of p to c, blocking until deadline (mono_ms): 0, or
 * <0 (-ETIMEDOUT, -EPIPE, -EIO, -errno). Any thread that owns c. */
int http_conn_write(struct http_conn *c, const char *p, size_t n, int64_t deadline);
/* Read until c->buf holds want bytes: 0, or <0 (EOF is -EPIPE; -ECANCELED
 * once the server stops). */
int http_conn_fill(struct http_conn *c, size_t want, int64_t deadline);

/* ------------------------------------------------------ rpc_http.c */

/* Write one response with a JSON body; extra is more header lines ("" or
 * "Allow: POST\r\n"). 0 or <0 (the connection failed). */
int http_respond(struct http_conn *c, int status, const char *extra, const char *json,
		 bool keep_alive);
/* A transport-level refusal: the JSON error body with an explicit status. */
int http_respond_error(struct http_conn *c, int status, const char *extra, bool keep_alive,
		       enum bc_code code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
/* The request headers as call metadata (lowercase keys), in the arena. */
void http_call_metadata(rpc_call *c, const struct rpc_http_request *req);
/* Take (delta 1) or give back (-1) a stream slot: at most max_streams
 * server streams and WebSockets at once; false when none is free. */
bool http_stream_slot(struct rpc_http *h, int delta);
/* Authenticate and admit a stream on a worker (pre_call needs its thread
 * state: a database connection): 0 or -BC_EDOMAIN with err filled. */
int http_stream_admit(struct rpc_http *h, rpc_call *call, bc_error *err);

/* h->routes from the methods of h's server that have a JSON/HTTP route. */
void http_routes_build(struct rpc_http *h);
/* A worker thread (arg: the struct rpc_http): runs queued jobs until
 * workers_stop. */
void *http_worker_main(void *arg);
/* On a connection thread: read, answer and consume one request of c. 1:
 * keep the connection, 0: close it, -1: close it after a refusal sent
 * before the body was read (linger). */
int http_serve_one(struct http_conn *c);

/* On a worker: fn(arg, the worker's thread state); returns once it ran. */
void http_run_on_worker(struct rpc_http *h, void (*fn)(void *arg, void *thread_state),
			void *arg);

/* ---------------------------------------------------- rpc_http_mcp.c */

/* h->mcp from the server's options (NULL when off): 0. */
int http_mcp_init(struct rpc_http *h);
void http_mcp_free(struct rpc_http *h);
/* True if req is for /mcp and it is on. */
bool http_mcp_wants(const struct rpc_http *h, const struct rpc_http_request *req);
/* Answer one /mcp request (body read whole). Returns as http_respond. */
int http_mcp_serve(struct http_conn *c, const struct rpc_http_request *req, const char *body);

/* ------------------------------------------------ rpc_http_static.c */

/* True if req is under the static prefix (rpc_server_opts static_files). */
bool http_static_wants(const struct rpc_http *h, const struct rpc_http_request *req);
/* Answer one request for a static file. Returns as http_respond. */
int http_static_serve(struct http_conn *c, const struct rpc_http_request *req);

/* ---------------------------------------------------- rpc_http_ws.c */

/* h->ws_routes from the server's ws_routes: 0, or -EINVAL (logged) when a
 * route names no registered bidi method, or its messages lack the mapped
 * fields. */
int http_ws_routes_build(struct rpc_http *h);
void http_ws_routes_free(struct rpc_http *h);
/* True if req is a GET under a WebSocket route (answered by http_ws_serve,
 * handshake errors included). */
bool http_ws_wants(const struct rpc_http *h, const struct rpc_http_request *req);
/* On a connection thread: check the opening handshake, admit the call,
 * answer 101 and run the bidi handler over the WebSocket until it ends;
 * c->buf holds what came after the head. Returns as http_serve_one. */
int http_ws_serve(struct http_conn *c, const struct rpc_http_request *req);

#endif
