/* rpc_server.c: the gRPC server's life: configuration, the method table
 * built from protobuf-c service descriptors, worker threads, streaming
 * threads and graceful shutdown.
 *
 * Threads. One acceptor thread owns the GRPC_CQ_NEXT queue registered with
 * the server. Every unary method with a handler is registered with gRPC
 * (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER): gRPC matches such a call to
 * the acceptor's request only once its request message has arrived (or the
 * client half-closed or went away), so a client that opens streams and
 * never sends their message holds no thread of ours. Other paths (streams,
 * unknown methods) come through one generic grpc_server_request_call. The
 * acceptor keeps one request outstanding per registered method and one
 * generic, and queues each call it gets for the workers: a FIFO for
 * authenticated methods, another for the methods that need no credential
 * (rpc_server_opts.open_methods, grpc.health.v1.Health), which at most
 * open_workers workers serve at once, so a flood of those never takes the
 * whole pool. Every requested call gets a fresh GRPC_CQ_PLUCK queue as its
 * bound queue, so a handler does synchronous batches (rpc_call.c). A unary
 * call runs on the worker; a streaming call is authenticated and admitted
 * on the worker (with its thread state: a stranger's stream never costs a
 * database connection or a thread), then moves to a thread of its own
 * without thread state, bounded by max_streams, which the server joins.
 *
 * Shutdown. Set `stopping` (under the lock that guards request_call, so no
 * request starts afterwards), cancel the streaming calls, shutdown and
 * notify, wait grace_ms for unary calls (the workers serve what is queued),
 * then cancel all calls, wait for the notification, destroy the server,
 * shut the acceptor's queue down and let it drain it to
 * GRPC_QUEUE_SHUTDOWN; the workers end once the queues are empty; join
 * everything.
 * Detached unary calls (rpc_detach.c) count as in flight: their owners
 * have the grace to answer them, then they are answered UNAVAILABLE
 * before the remaining calls are cancelled. */
#include "rpc_internal.h"

#include <errno.h>
#include <grpc/grpc_security.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define DEFAULT_WORKERS 4
#define DEFAULT_MAX_STREAMS 1024
#define DEFAULT_MAX_MESSAGE (1u << 20)
#define DEFAULT_RECV_TIMEOUT_MS 10000
#define DEFAULT_CONN_STREAMS 100

struct rpc_worker {
	rpc_server *srv;
	pthread_t tid;
	void *thread_state;
};

/* One outstanding request for a call, generic (grpc_server_request_call,
 * method NULL) or of a registered unary method; its address is the tag.
 * Once it completed, it waits in a queue of the server for a worker. */
struct rpc_request {
	struct rpc_request *next;
	const struct rpc_method *method; /* NULL: generic */
	grpc_call *call;
	grpc_call_details details;      /* generic */
	gpr_timespec deadline;          /* registered */
	grpc_byte_buffer *payload;      /* registered: the request, NULL if none came */
	grpc_metadata_array md;
	grpc_completion_queue *cq; /* becomes the call's bound pluck queue */
};

struct rpc_stream_thread {
	struct rpc_stream_thread *next;
	rpc_server *srv;
	pthread_t tid;
	rpc_call *call;
	grpc_call *gcall;          /* for cancellation; NULL once finishing */
	bool done;
};

/* ---------------------------------------------------------- options */

static int copy_opts(rpc_server *s, const struct rpc_server_opts *o)
{
	const struct rpc_tls *t = o->tls;

	if (!o->listen || o->workers < 0 || o->max_streams < 0 || o->recv_timeout_ms < 0 ||
	    o->max_streams_per_connection < 0 || o->open_workers < 0)
		return -EINVAL;
	if (t && (!t->cert_pem || !t->key_pem || (t->request_client_cert && !t->ca_pem)))
		return -EINVAL;
	s->opts = *o;
	s->opts.tls = NULL;
	s->listen = xstrdup(o->listen);
	s->opts.listen = s->listen;
	if (o->http_listen && *o->http_listen) {
		s->http_listen = xstrdup(o->http_listen);
		s->opts.http_listen = s->http_listen;
	} else {
		s->opts.http_listen = NULL;
	}
	if (!s->opts.workers)
		s->opts.workers = DEFAULT_WORKERS;
	if (!s->opts.max_streams)
		s->opts.max_streams = DEFAULT_MAX_STREAMS;
	if (!s->opts.max_message_bytes)
		s->opts.max_message_bytes = DEFAULT_MAX_MESSAGE;
	if (!s->opts.recv_timeout_ms)
		s->opts.recv_timeout_ms = DEFAULT_RECV_TIMEOUT_MS;
	if (!s->opts.max_streams_per_connection)
		s->opts.max_streams_per_connection = DEFAULT_CONN_STREAMS;
	if (!s->opts.open_workers)
		s->opts.open_workers = s->opts.workers > 4 ? s->opts.workers / 4 : 1;
	if (s->opts.open_workers > s->opts.workers)
		s->opts.open_workers = s->opts.workers;
	for (size_t i = 0; o->open_methods && o->open_methods[i]; i++) {
		s->open_paths = realloc(s->open_paths, (s->n_open_paths + 1) * sizeof(char *));
		if (!s->open_paths)
			abort();
		s->open_paths[s->n_open_paths++] = xstrdup(o->open_methods[i]);
	}
	s->opts.open_methods = NULL;
	if (t) {
		s->tls = true;
		s->request_client_cert = t->request_client_cert;
		s->cert_pem = xstrdup(t->cert_pem);
		s->key_pem = xstrdup(t->key_pem);
		s->ca_pem = xstrdup(t->ca_pem);
	}
	return 0;
}

static void server_free_struct(rpc_server *s)
{
	for (size_t i = 0; i < s->n_methods; i++)
		free(s->methods[i].path);
	free(s->methods);
	free(s->services);
	for (size_t i = 0; i < s->n_open_paths; i++)
		free(s->open_paths[i]);
	free(s->open_paths);
	free(s->listen);
	free(s->http_listen);
	free(s->cert_pem);
	free(s->key_pem);
	if (s->ca_pem)
		memset(s->ca_pem, 0, strlen(s->ca_pem));
	free(s->ca_pem);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	pthread_cond_destroy(&s->work_cond);
	free(s);
	rpc_global_shutdown();
}

/* See rpc.h. */
rpc_server *rpc_server_new(const struct rpc_server_opts *opts, int *ret_errno)
{
	pthread_condattr_t ca;
	rpc_server *s;
	int r;

	if (!opts) {
		if (ret_errno)
			*ret_errno = EINVAL;
		return NULL;
	}
	rpc_global_init();
	s = xcalloc(1, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_cond_init(&s->work_cond, &ca);
	pthread_condattr_destroy(&ca);
	s->ready_tail = &s->ready;
	s->open_ready_tail = &s->open_ready;
	r = copy_opts(s, opts);
	if (r >= 0)
		r = rpc_health_register(s);
	if (r < 0) {
		log_debug("rpc: server for %s: %s", opts->listen ? opts->listen : "(null)",
			  strerror(-r));
		if (ret_errno)
			*ret_errno = -r;
		server_free_struct(s);
		return NULL;
	}
	return s;
}

/* ---------------------------------------------------------- services */

static bool service_known(const rpc_server *s, const char *name)
{
	for (size_t i = 0; i < s->n_services; i++)
		if (strcmp(s->services[i]->name, name) == 0)
			return true;
	return false;
}

static int check_handlers(const ProtobufCServiceDescriptor *desc,
			  const struct rpc_handler *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!h[i].method || !h[i].fn.unary || (unsigned)h[i].kind > RPC_BIDI)
			return -EINVAL;
		if (!protobuf_c_service_descriptor_get_method_by_name(desc, h[i].method))
			return -EINVAL;
		for (size_t j = 0; j < i; j++)
			if (strcmp(h[i].method, h[j].method) == 0)
				return -EINVAL;
	}
	return 0;
}

/* See rpc.h. Also -EEXIST for a service registered twice, -EBUSY after
 * start. protobuf-c descriptors do not record streaming, so a handler's
 * kind is taken as declared. */
int rpc_server_add_service(rpc_server *s, const ProtobufCServiceDescriptor *desc,
			   const struct rpc_handler *handlers, size_t n_handlers)
{
	char path[512];
	int r;

	if (!s || !desc || (n_handlers && !handlers))
		return -EINVAL;
	if (s->started)
		return -EBUSY;
	if (service_known(s, desc->name))
		return -EEXIST;
	r = check_handlers(desc, handlers, n_handlers);
	if (r < 0)
		return r;
	s->methods = realloc(s->methods, (s->n_methods + desc->n_methods) * sizeof(*s->methods));
	s->services = realloc(s->services, (s->n_services + 1) * sizeof(*s->services));
	if (!s->methods || !s->services)
		abort();
	s->services[s->n_services++] = desc;
	for (unsigned i = 0; i < desc->n_methods; i++) {
		struct rpc_method *m = &s->methods[s->n_methods++];

		memset(m, 0, sizeof(*m));
		m->svc = desc;
		m->md = &desc->methods[i];
		if (rpc_method_path(desc, m->md->name, path, sizeof(path)) < 0)
			snprintf(path, sizeof(path), "/%s/?", desc->name);
		m->path = xstrdup(path);
		for (size_t j = 0; j < n_handlers; j++) {
			if (strcmp(handlers[j].method, m->md->name) == 0) {
				m->h = handlers[j];
				m->has_handler = true;
			}
		}
	}
	return 0;
}

/* True if name is "" or a registered service; for the health service. */
bool rpc_server_has_service(const rpc_server *s, const char *name)
{
	return !name || !*name || service_known(s, name);
}

/* ------------------------------------------------------------ streams */

/* Detach the finished stream threads from the list; caller joins them. */
static struct rpc_stream_thread *streams_reap_locked(rpc_server *s)
{
	struct rpc_stream_thread **pp = &s->streams, *st, *dead = NULL;

	while ((st = *pp)) {
		if (st->done) {
			*pp = st->next;
			st->next = dead;
			dead = st;
		} else {
			pp = &st->next;
		}
	}
	return dead;
}

static void streams_join(struct rpc_stream_thread *list)
{
	struct rpc_stream_thread *next;

	for (; list; list = next) {
		next = list->next;
		pthread_join(list->tid, NULL);
		free(list);
	}
}

static void *stream_main(void *arg)
{
	struct rpc_stream_thread *st = arg;
	rpc_server *s = st->srv;
	rpc_call *c = st->call;

	rpc_call_run_stream(c);
	pthread_mutex_lock(&s->lock);
	st->gcall = NULL;
	pthread_mutex_unlock(&s->lock);
	rpc_call_release(c);
	pthread_mutex_lock(&s->lock);
	st->done = true;
	s->n_streams--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Hand c to a new stream thread; false if refused (limit, stopping). */
static bool stream_spawn(rpc_server *s, rpc_call *c)
{
	struct rpc_stream_thread *st = xcalloc(1, sizeof(*st)), *dead;
	bool ok = false;

	st->srv = s;
	st->call = c;
	st->gcall = c->call;
	pthread_mutex_lock(&s->lock);
	dead = streams_reap_locked(s);
	if (!atomic_load(&s->stopping) && s->n_streams < s->opts.max_streams &&
	    pthread_create(&st->tid, NULL, stream_main, st) == 0) {
		st->next = s->streams;
		s->streams = st;
		s->n_streams++;
		ok = true;
	}
	pthread_mutex_unlock(&s->lock);
	streams_join(dead);
	if (!ok)
		free(st);
	return ok;
}

static void refuse(rpc_call *c, enum bc_code code, const char *msg);

/* A streaming call on the worker that received it: authenticate and admit
 * it here, with the worker's thread state; only then does it get a thread
 * of its own, which has none. */
static void stream_start(rpc_server *s, rpc_call *c)
{
	bc_error err;

	bc_error_clear(&err);
	if (rpc_call_stream_admit(c, &err) < 0) {
		rpc_call_finish(c, -BC_EDOMAIN, NULL, &err);
		rpc_call_release(c);
		return;
	}
	c->thread_state = NULL;
	if (!stream_spawn(s, c))
		refuse(c, BC_QUOTA_EXCEEDED, "too many streams");
}

static void streams_cancel_locked(rpc_server *s)
{
	for (struct rpc_stream_thread *st = s->streams; st; st = st->next)
		if (st->gcall)
			grpc_call_cancel_with_status(st->gcall, GRPC_STATUS_UNAVAILABLE,
						     "server shutting down", NULL);
}

/* ------------------------------------------------------------ workers */

static void request_free(struct rpc_request *r)
{
	grpc_call_details_destroy(&r->details);
	grpc_metadata_array_destroy(&r->md);
	if (r->payload)
		grpc_byte_buffer_destroy(r->payload);
	if (r->cq) {
		grpc_completion_queue_shutdown(r->cq);
		grpc_completion_queue_destroy(r->cq);
	}
	free(r);
}

/* Ask for the next call of method m (NULL: any unregistered path) on the
 * acceptor's queue unless the server is stopping. */
static void request_next(rpc_server *s, const struct rpc_method *m)
{
	struct rpc_request *r = xcalloc(1, sizeof(*r));
	grpc_call_error ce = GRPC_CALL_ERROR;

	r->method = m;
	grpc_call_details_init(&r->details);
	grpc_metadata_array_init(&r->md);
	r->cq = grpc_completion_queue_create_for_pluck(NULL);
	pthread_mutex_lock(&s->lock);
	if (!atomic_load(&s->stopping) && m)
		ce = grpc_server_request_registered_call(s->server, m->registered, &r->call,
							 &r->deadline, &r->md, &r->payload,
							 r->cq, s->accept_cq, r);
	else if (!atomic_load(&s->stopping))
		ce = grpc_server_request_call(s->server, &r->call, &r->details, &r->md, r->cq,
					      s->accept_cq, r);
	pthread_mutex_unlock(&s->lock);
	if (ce != GRPC_CALL_OK)
		request_free(r);
}

static void refuse(rpc_call *c, enum bc_code code, const char *msg)
{
	bc_error e;

	bc_error_clear(&e);
	bc_error_set(&e, code, "%s", msg);
	rpc_call_finish(c, -BC_EDOMAIN, NULL, &e);
	rpc_call_release(c);
}

static void serve(struct rpc_worker *w, struct rpc_request *r)
{
	rpc_server *s = w->srv;
	rpc_call *c;

	if (r->method) {
		c = rpc_call_new_registered(s, r->call, r->cq, r->method, r->deadline, &r->md,
					    r->payload, w->thread_state);
		r->payload = NULL;
	} else {
		c = rpc_call_new(s, r->call, r->cq, &r->details, &r->md, w->thread_state);
	}
	r->cq = NULL;
	request_free(r);
	if (!c->method || !c->method->has_handler) {
		log_debug("rpc: %s: unimplemented", c->path);
		refuse(c, BC_UNSUPPORTED, "method not implemented");
	} else if (c->method->h.kind == RPC_UNARY) {
		if (rpc_call_run_unary(c))
			rpc_call_release(c);
	} else {
		stream_start(s, c);
	}
}

/* The next call for a worker, NULL once the acceptor is gone and nothing is
 * left. *ret_open: a call of a method needing no credential, counted in
 * n_open_running until the worker calls open_done. */
static struct rpc_request *ready_pop(rpc_server *s, bool *ret_open)
{
	struct rpc_request *r = NULL;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		if ((r = s->ready)) {
			s->ready = r->next;
			*ret_open = false;
			break;
		}
		if (s->open_ready && s->n_open_running < s->opts.open_workers) {
			r = s->open_ready;
			s->open_ready = r->next;
			s->n_open_running++;
			*ret_open = true;
			break;
		}
		if (s->accept_done && !s->open_ready)
			break;
		pthread_cond_wait(&s->work_cond, &s->lock);
	}
	if (!s->ready)
		s->ready_tail = &s->ready;
	if (!s->open_ready)
		s->open_ready_tail = &s->open_ready;
	pthread_mutex_unlock(&s->lock);
	return r;
}

static void open_done(rpc_server *s)
{
	pthread_mutex_lock(&s->lock);
	s->n_open_running--;
	pthread_cond_broadcast(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
}

/* Queue a call whose request (if unary) has arrived, for the workers. */
static void ready_push(rpc_server *s, struct rpc_request *r)
{
	pthread_mutex_lock(&s->lock);
	r->next = NULL;
	if (r->method && r->method->open) {
		*s->open_ready_tail = r;
		s->open_ready_tail = &r->next;
	} else {
		*s->ready_tail = r;
		s->ready_tail = &r->next;
	}
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
}

static void *worker_main(void *arg)
{
	struct rpc_worker *w = arg;
	rpc_server *s = w->srv;
	struct rpc_request *r;
	bool open;

	if (s->opts.thread_init)
		w->thread_state = s->opts.thread_init(s->opts.user);
	while ((r = ready_pop(s, &open))) {
		serve(w, r);
		if (open)
			open_done(s);
	}
	if (s->opts.thread_fini)
		s->opts.thread_fini(s->opts.user, w->thread_state);
	return NULL;
}

static void request_all(rpc_server *s)
{
	for (size_t i = 0; i < s->n_methods; i++)
		if (s->methods[i].registered)
			request_next(s, &s->methods[i]);
	request_next(s, NULL);
}

/* The acceptor: hands every new call to the workers' queues and asks for
 * the next one of its kind; drains its queue at shutdown. */
static void *acceptor_main(void *arg)
{
	rpc_server *s = arg;
	struct rpc_request *r;
	grpc_event ev;

	request_all(s);
	for (;;) {
		ev = grpc_completion_queue_next(s->accept_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
						NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		if (ev.tag == &s->shutdown_tag) {
			pthread_mutex_lock(&s->lock);
			s->shutdown_done = true;
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
			continue;
		}
		r = ev.tag;
		if (!ev.success) {
			request_free(r);
			continue;
		}
		request_next(s, r->method);
		ready_push(s, r);
	}
	pthread_mutex_lock(&s->lock);
	s->accept_done = true;
	pthread_cond_broadcast(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ------------------------------------------------------------ start */

static grpc_server_credentials *server_creds(const rpc_server *s)
{
	grpc_ssl_pem_key_cert_pair pair = {.private_key = s->key_pem, .cert_chain = s->cert_pem};

	if (!s->tls)
		return grpc_insecure_server_credentials_create();
	return grpc_ssl_server_credentials_create_ex(
		s->request_client_cert ? s->ca_pem : NULL, &pair, 1,
		s->request_client_cert ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
				       : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
		NULL);
}

static void wait_shutdown_tag(rpc_server *s)
{
	grpc_event ev;

	do
		ev = grpc_completion_queue_next(s->accept_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
						NULL);
	while (ev.type == GRPC_OP_COMPLETE && ev.tag != &s->shutdown_tag);
}

static void accept_cq_drain_destroy(rpc_server *s)
{
	grpc_completion_queue_shutdown(s->accept_cq);
	while (grpc_completion_queue_next(s->accept_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
		       .type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(s->accept_cq);
	s->accept_cq = NULL;
}

/* Tear down queue and server when no thread runs. */
static void unstarted_teardown(rpc_server *s)
{
	grpc_server_shutdown_and_notify(s->server, s->accept_cq, &s->shutdown_tag);
	wait_shutdown_tag(s);
	grpc_server_destroy(s->server);
	s->server = NULL;
	accept_cq_drain_destroy(s);
}

static bool method_open(const rpc_server *s, const struct rpc_method *m)
{
	if (strcmp(m->svc->name, "grpc.health.v1.Health") == 0)
		return true;
	for (size_t i = 0; i < s->n_open_paths; i++)
		if (strcmp(s->open_paths[i], m->path) == 0)
			return true;
	return false;
}

/* Register every unary method with a handler so that gRPC reads its
 * request before it hands the call over. */
static void register_methods(rpc_server *s)
{
	for (size_t i = 0; i < s->n_methods; i++) {
		struct rpc_method *m = &s->methods[i];

		m->open = method_open(s, m);
		if (!m->has_handler || m->h.kind != RPC_UNARY)
			continue;
		m->registered = grpc_server_register_method(s->server, m->path, NULL,
							    GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
		if (!m->registered)
			log_debug("rpc: %s: cannot register, served generically", m->path);
	}
}

static grpc_server *server_create(const rpc_server *s)
{
	size_t max = s->opts.max_message_bytes;
	/* Our own limit answers INVALID_INPUT; gRPC's at 4x is a backstop.
	 * SO_REUSEPORT off: a second server on a bound port must fail.
	 * Keepalive: ping idle connections so streams of dead clients end, and
	 * accept our clients' pings (every 30 s, rpc_client.c). */
	grpc_arg arg[] = {
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		 .value.integer = max > INT_MAX / 4 ? INT_MAX : (int)(max * 4)},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_ALLOW_REUSEPORT,
		 .value.integer = 0},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS,
		 .value.integer = 60000},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
		 .value.integer = 20000},
		{.type = GRPC_ARG_INTEGER,
		 .key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
		 .value.integer = 10000},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS,
		 .value.integer = s->opts.max_streams_per_connection},
		/* rpc_internal.h: RPC_TCP_READ_CHUNK */
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_TCP_READ_CHUNK_SIZE,
		 .value.integer = RPC_TCP_READ_CHUNK},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE,
		 .value.integer = RPC_TCP_READ_CHUNK},
		/* the last two only with stream_window_bytes (rpc.h) */
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_HTTP2_BDP_PROBE,
		 .value.integer = 0},
		{.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
		 .value.integer = s->opts.stream_window_bytes},
	};
	grpc_channel_args args = {.num_args = sizeof(arg) / sizeof(arg[0]) -
					      (s->opts.stream_window_bytes > 0 ? 0 : 2),
				  .args = arg};

	return grpc_server_create(&args, NULL);
}

/* See rpc.h. -EALREADY if started, -EADDRINUSE if an address cannot be
 * bound (in use or invalid), -EINVAL for a malformed http_listen, -EIO for
 * TLS material OpenSSL refuses. The HTTP port is bound first so a failure
 * there leaves no gRPC state behind. */
int rpc_server_start(rpc_server *s, int *ret_port)
{
	grpc_server_credentials *creds;
	int port, r;

	if (!s || s->started || s->server)
		return -EALREADY;
	if (s->http_listen && (r = rpc_http_new(s, &s->http)) < 0) {
		log_debug("rpc: cannot serve HTTP on %s: %s", s->http_listen, strerror(-r));
		return r;
	}
	s->server = server_create(s);
	s->accept_cq = grpc_completion_queue_create_for_next(NULL);
	grpc_server_register_completion_queue(s->server, s->accept_cq, NULL);
	register_methods(s);
	creds = server_creds(s);
	port = grpc_server_add_http2_port(s->server, s->listen, creds);
	grpc_server_credentials_release(creds);
	if (port <= 0) {
		log_debug("rpc: cannot listen on %s", s->listen);
		unstarted_teardown(s);
		rpc_http_free(s->http);
		s->http = NULL;
		return -EADDRINUSE;
	}
	grpc_server_start(s->server);
	s->started = true;
	rpc_detach_start(s);
	s->workers = xcalloc(s->opts.workers, sizeof(*s->workers));
	for (int i = 0; i < s->opts.workers; i++) {
		s->workers[i].srv = s;
		if (pthread_create(&s->workers[i].tid, NULL, worker_main, &s->workers[i]) != 0)
			abort();
	}
	s->n_workers_started = s->opts.workers;
	if (pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0)
		abort();
	if (s->http)
		rpc_http_start(s->http);
	if (ret_port)
		*ret_port = port;
	return 0;
}

/* ---------------------------------------------------------- shutdown */

/* Wait for the shutdown notification; timeout_ms < 0: without limit. */
static bool wait_shutdown_done(rpc_server *s, int timeout_ms)
{
	struct timespec ts = deadline_ts(timeout_ms < 0 ? 0 : timeout_ms);
	bool done;

	pthread_mutex_lock(&s->lock);
	while (!s->shutdown_done) {
		if (timeout_ms < 0)
			pthread_cond_wait(&s->cond, &s->lock);
		else if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT)
			break;
	}
	done = s->shutdown_done;
	pthread_mutex_unlock(&s->lock);
	return done;
}

static void server_stop(rpc_server *s, int grace_ms)
{
	struct rpc_stream_thread *all;
	bool done;

	pthread_mutex_lock(&s->lock);
	atomic_store(&s->stopping, true);
	streams_cancel_locked(s);
	pthread_mutex_unlock(&s->lock);
	grpc_server_shutdown_and_notify(s->server, s->accept_cq, &s->shutdown_tag);
	done = wait_shutdown_done(s, grace_ms > 0 ? grace_ms : 0);
	/* detached calls their owners did not answer within the grace */
	rpc_detach_stop(s);
	if (!done) {
		grpc_server_cancel_all_calls(s->server);
		wait_shutdown_done(s, -1);
	}
	grpc_server_destroy(s->server);
	s->server = NULL;
	grpc_completion_queue_shutdown(s->accept_cq);
	pthread_join(s->acceptor, NULL);
	grpc_completion_queue_destroy(s->accept_cq);
	s->accept_cq = NULL;
	for (int i = 0; i < s->n_workers_started; i++)
		pthread_join(s->workers[i].tid, NULL);
	free(s->workers);
	s->workers = NULL;
	pthread_mutex_lock(&s->lock);
	all = s->streams;
	s->streams = NULL;
	pthread_mutex_unlock(&s->lock);
	streams_join(all);
}

/* See rpc.h. The HTTP side stops accepting first; its requests in flight
 * finish while gRPC drains, then its threads are joined. */
void rpc_server_free(rpc_server *s, int grace_ms)
{
	if (!s)
		return;
	if (s->http) {
		atomic_store(&s->stopping, true);
		rpc_http_stop(s->http);
	}
	if (s->started)
		server_stop(s, grace_ms);
	rpc_http_free(s->http);
	s->http = NULL;
	server_free_struct(s);
}

/* See rpc.h. */
int rpc_server_http_port(const rpc_server *s)
{
	return s && s->http ? rpc_http_port(s->http) : 0;
}

/* See rpc.h. */
bool rpc_server_stopping(const rpc_server *s)
{
	return atomic_load((atomic_bool *)&s->stopping);
}
