/* rpc_call.c: one server call, from the moment a worker accepts it to its
 * status. Holds what a handler may ask about the caller (metadata, bearer
 * token, verified certificate CN, peer, deadline), the stream operations
 * (send, receive with a timeout, wait for cancellation) and the one place
 * that turns a handler's result into a response and a gRPC status with the
 * google.rpc.Status trailer.
 *
 * A call is bound to its own GRPC_CQ_PLUCK queue and used by one thread, so
 * every operation is a synchronous batch: start, then pluck its tag. */
#include "rpc_internal.h"

#include <errno.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

static grpc_event pluck(rpc_call *c, void *tag, gpr_timespec deadline)
{
	return grpc_completion_queue_pluck(c->cq, tag, deadline, NULL);
}

/* Start ops and wait for them: 0, -ECANCELED if the call is broken, -EIO if
 * the batch was refused (nothing queued). */
static int batch(rpc_call *c, const grpc_op *ops, size_t n)
{
	grpc_call_error ce = grpc_call_start_batch(c->call, ops, n, &c->tag_op, NULL);
	grpc_event ev;

	if (ce != GRPC_CALL_OK) {
		log_debug("rpc: %s: start_batch: %d", c->path, (int)ce);
		return -EIO;
	}
	ev = pluck(c, &c->tag_op, gpr_inf_future(GPR_CLOCK_MONOTONIC));
	return ev.success ? 0 : -ECANCELED;
}

static const struct rpc_method *method_find(const rpc_server *s, const char *path)
{
	for (size_t i = 0; i < s->n_methods; i++)
		if (strcmp(s->methods[i].path, path) == 0)
			return &s->methods[i];
	return NULL;
}

static char *slice_dup(rpc_call *c, grpc_slice s)
{
	return rpc_arena_strndup(&c->arena, (const char *)GRPC_SLICE_START_PTR(s),
				 GRPC_SLICE_LENGTH(s));
}

static void read_metadata(rpc_call *c, const grpc_metadata_array *md)
{
	const char **keys = rpc_arena_alloc(&c->arena, (md->count + 1) * sizeof(char *));
	const char **vals = rpc_arena_alloc(&c->arena, (md->count + 1) * sizeof(char *));

	for (size_t i = 0; i < md->count; i++) {
		keys[i] = slice_dup(c, md->metadata[i].key);
		vals[i] = slice_dup(c, md->metadata[i].value);
	}
	rpc_call_set_metadata(c, md->count, keys, vals);
}

/* A property of a client certificate the TLS handshake verified, else NULL. */
static const char *read_peer_prop(rpc_call *c, const char *name)
{
	grpc_auth_context *ctx = grpc_call_auth_context(c->call);
	grpc_auth_property_iterator it;
	const grpc_auth_property *p;
	const char *cn = NULL;

	if (!ctx)
		return NULL;
	if (grpc_auth_context_peer_is_authenticated(ctx)) {
		it = grpc_auth_context_find_properties_by_name(ctx, name);
		p = grpc_auth_property_iterator_next(&it);
		if (p && p->value)
			cn = rpc_arena_strndup(&c->arena, p->value, p->value_length);
	}
	grpc_auth_context_release(ctx);
	return cn;
}

/* See rpc_internal.h. */
rpc_call *rpc_call_alloc(rpc_server *s, const struct rpc_transport_ops *ops,
			 void *thread_state)
{
	rpc_call *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	c->srv = s;
	c->ops = ops;
	c->thread_state = thread_state;
	c->deadline_ms = INT64_MAX;
	return c;
}

/* See rpc_internal.h. */
void rpc_call_set_metadata(rpc_call *c, size_t n, const char **keys, const char **vals)
{
	const char *auth;

	c->n_md = n;
	c->md_keys = keys;
	c->md_vals = vals;
	c->bearer = NULL;
	auth = rpc_call_metadata(c, "authorization");
	if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
		auth += 7;
		auth += strspn(auth, " ");
		if (*auth)
			c->bearer = auth;
	}
}

static void read_peer(rpc_call *c)
{
	char *peer = grpc_call_get_peer(c->call);

	c->peer = rpc_arena_strndup(&c->arena, peer ? peer : "", peer ? strlen(peer) : 0);
	gpr_free(peer);
	c->peer_cn = read_peer_prop(c, GRPC_X509_CN_PROPERTY_NAME);
	c->peer_cert_pem = read_peer_prop(c, GRPC_X509_PEM_CERT_PROPERTY_NAME);
}

/* See rpc_internal.h. */
rpc_call *rpc_call_new(rpc_server *s, grpc_call *gc, grpc_completion_queue *cq,
		       const grpc_call_details *d, const grpc_metadata_array *md,
		       void *thread_state)
{
	rpc_call *c = rpc_call_alloc(s, &rpc_grpc_ops, thread_state);

	c->call = gc;
	c->cq = cq;
	c->path = slice_dup(c, d->method);
	c->method = method_find(s, c->path);
	c->deadline_ms = rpc_timespec_mono_ms(d->deadline);
	read_metadata(c, md);
	read_peer(c);
	return c;
}

/* See rpc_internal.h. */
rpc_call *rpc_call_new_registered(rpc_server *s, grpc_call *gc, grpc_completion_queue *cq,
				  const struct rpc_method *m, gpr_timespec deadline,
				  const grpc_metadata_array *md, grpc_byte_buffer *payload,
				  void *thread_state)
{
	rpc_call *c = rpc_call_alloc(s, &rpc_grpc_ops, thread_state);

	c->call = gc;
	c->cq = cq;
	c->path = m->path;
	c->method = m;
	c->deadline_ms = rpc_timespec_mono_ms(deadline);
	c->prefetched = true;
	c->prefetch_bb = payload;
	read_metadata(c, md);
	read_peer(c);
	return c;
}

/* See rpc_internal.h. Idempotent. */
void rpc_call_watch_close(rpc_call *c)
{
	grpc_op op;

	if (c->close_started)
		return;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	op.data.recv_close_on_server.cancelled = &c->cancelled;
	if (grpc_call_start_batch(c->call, &op, 1, &c->tag_close, NULL) == GRPC_CALL_OK)
		c->close_started = true;
}

static void finish_wait_outstanding(rpc_call *c)
{
	gpr_timespec inf = gpr_inf_future(GPR_CLOCK_MONOTONIC);

	if (c->close_started && !c->close_done) {
		pluck(c, &c->tag_close, inf);
		c->close_done = true;
	}
	if (c->recv_pending) {
		pluck(c, &c->tag_recv, inf);
		c->recv_pending = false;
	}
	if (c->recv_bb) {
		grpc_byte_buffer_destroy(c->recv_bb);
		c->recv_bb = NULL;
	}
	if (c->prefetch_bb) {
		grpc_byte_buffer_destroy(c->prefetch_bb);
		c->prefetch_bb = NULL;
	}
}

/* See rpc_internal.h. A negative rc without a code is INTERNAL. */
void rpc_call_finish(rpc_call *c, int rc, const ProtobufCMessage *resp, bc_error *err)
{
	grpc_op ops[4];
	grpc_metadata trailer;
	grpc_byte_buffer *bb = NULL;
	grpc_slice details = grpc_empty_slice();
	uint8_t *bin = NULL;
	size_t n = 0, bin_len = 0;
	bool own_close = false;

	memset(ops, 0, sizeof(ops));
	memset(&trailer, 0, sizeof(trailer));
	if (rc >= 0 && resp && c->method && resp->descriptor != c->method->md->output) {
		log_debug("rpc: %s: handler answered a %s", c->path, resp->descriptor->name);
		rc = bc_error_set(err, BC_INTERNAL, "internal error");
	}
	if (rc < 0 && err->code == BC_OK)
		bc_error_set(err, BC_INTERNAL, "internal error");
	if (!c->sent_initial_md)
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
	if (rc >= 0 && resp) {
		bb = rpc_bb_pack(resp);
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n++].data.send_message.send_message = bb;
	}
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
	if (rc < 0) {
		details = grpc_slice_from_copied_string(err->message);
		ops[n].data.send_status_from_server.status = bc_code_grpc_status(err->code);
		if (rpc_status_pack(err, &bin, &bin_len) == 0) {
			trailer.key = grpc_slice_from_static_string(RPC_STATUS_DETAILS_KEY);
			trailer.value = grpc_slice_from_copied_buffer((const char *)bin, bin_len);
			ops[n].data.send_status_from_server.trailing_metadata_count = 1;
			ops[n].data.send_status_from_server.trailing_metadata = &trailer;
		}
	}
	ops[n++].data.send_status_from_server.status_details = &details;
	if (!c->close_started) {
		ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
		ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
		own_close = true;
	}
	if (batch(c, ops, n) != -EIO) {
		c->sent_initial_md = true;
		if (own_close)
			c->close_started = c->close_done = true;
	}
	finish_wait_outstanding(c);
	if (bb)
		grpc_byte_buffer_destroy(bb);
	grpc_slice_unref(trailer.value);
	grpc_slice_unref(details);
	free(bin);
}

/* See rpc_internal.h. */
void rpc_call_release_grpc(rpc_call *c)
{
	if (c->prefetch_bb)
		grpc_byte_buffer_destroy(c->prefetch_bb);
	c->prefetch_bb = NULL;
	if (c->call)
		grpc_call_unref(c->call);
	if (c->cq) {
		grpc_completion_queue_shutdown(c->cq);
		grpc_completion_queue_destroy(c->cq);
	}
	c->call = NULL;
	c->cq = NULL;
}

/* See rpc_internal.h. */
void rpc_call_release(rpc_call *c)
{
	if (!c)
		return;
	if (c->admitted && c->srv->opts.stream_done)
		c->srv->opts.stream_done(c);
	if (c->principal_free && c->principal)
		c->principal_free(c->principal);
	c->ops->release(c);
	rpc_arena_free(&c->arena);
	free(c);
}

/* ------------------------------------------------------ handler flow */

/* See rpc_internal.h. */
int rpc_call_pre(rpc_call *c, bc_error *err)
{
	if (!c->srv->opts.pre_call)
		return 0;
	return c->srv->opts.pre_call(c, err) < 0 ? -BC_EDOMAIN : 0;
}

/* See rpc_internal.h. */
int rpc_call_stream_admit(rpc_call *c, bc_error *err)
{
	if (rpc_call_pre(c, err) < 0)
		return -BC_EDOMAIN;
	c->pre_done = true;
	if (c->srv->opts.stream_admit && c->srv->opts.stream_admit(c, err) < 0)
		return -BC_EDOMAIN;
	c->admitted = true;
	return 0;
}

/* Receive the single request of a unary or server-streaming call, within
 * recv_timeout_ms (a registered unary call has it already). */
static int recv_request(rpc_call *c, ProtobufCMessage **ret, bc_error *err)
{
	int r = rpc_call_recv(c, ret, c->srv->opts.recv_timeout_ms);

	switch (r) {
	case 1:
		return 0;
	case 0:
		return bc_error_set(err, BC_INVALID_INPUT, "request message missing");
	case -EMSGSIZE:
		bc_error_set(err, BC_INVALID_INPUT, "request larger than %zu bytes",
			     c->srv->opts.max_message_bytes);
		return bc_error_detail(err, "maxBytes", "%zu", c->srv->opts.max_message_bytes);
	case -EBADMSG:
		return bc_error_set(err, BC_INVALID_INPUT, "malformed request message");
	case -EILSEQ:
		/* the JSON/HTTP transport's words (pbjson_read.c) */
		return bc_error_set(err, BC_INVALID_INPUT, "NUL character in string");
	case -ETIMEDOUT:
		return bc_error_set(err, BC_DEADLINE_EXCEEDED,
				    "request message not received within %d ms",
				    c->srv->opts.recv_timeout_ms);
	default:
		return bc_error_set(err, BC_UNAVAILABLE, "call cancelled");
	}
}

/* See rpc_internal.h. The one place a unary handler runs, for both
 * transports. */
int rpc_call_invoke_unary(rpc_call *c, const ProtobufCMessage *req,
			  ProtobufCMessage **ret_resp, bc_error *err)
{
	ProtobufCMessage *resp = NULL;
	int r = c->method->h.fn.unary(c, req, &resp, err);

	/* A detached call may be answered and gone already: do not look at
	 * it (whatever the handler returned). */
	if (rpc_detach_taken(c))
		return RPC_DETACHED;
	if (r >= 0 && resp && resp->descriptor != c->method->md->output) {
		log_debug("rpc: %s: handler answered a %s", c->path, resp->descriptor->name);
		r = bc_error_set(err, BC_INTERNAL, "internal error");
	}
	if (r < 0) {
		if (err->code == BC_OK)
			bc_error_set(err, BC_INTERNAL, "internal error");
		return r;
	}
	*ret_resp = resp ? resp : rpc_new(c, c->method->md->output);
	return 0;
}

/* See rpc_internal.h. */
bool rpc_call_run_unary(rpc_call *c)
{
	ProtobufCMessage *req = NULL, *resp = NULL;
	bc_error err;
	int r;

	bc_error_clear(&err);
	r = rpc_call_pre(c, &err);
	if (r >= 0)
		r = recv_request(c, &req, &err);
	if (r >= 0)
		r = rpc_call_invoke_unary(c, req, &resp, &err);
	if (r != RPC_DETACHED)
		rpc_call_finish(c, r, resp, &err);
	if (req)
		protobuf_c_message_free_unpacked(req, NULL);
	return r != RPC_DETACHED;
}

/* See rpc_internal.h. */
void rpc_call_run_stream(rpc_call *c)
{
	ProtobufCMessage *req = NULL;
	bc_error err;
	int r;

	bc_error_clear(&err);
	rpc_call_watch_close(c);
	r = c->pre_done ? 0 : rpc_call_pre(c, &err);
	if (r >= 0 && c->method->h.kind == RPC_SERVER_STREAM) {
		r = recv_request(c, &req, &err);
		if (r >= 0)
			r = c->method->h.fn.sstream(c, req, &err);
	} else if (r >= 0) {
		r = c->method->h.fn.bidi(c, &err);
	}
	/* A stream that ended because the server is going away must not look
	 * like a finished one to the client: the handler may have seen
	 * `stopping` before the shutdown's cancel reached its call. */
	if (r >= 0 && c->srv && rpc_server_stopping(c->srv))
		r = bc_error_set(&err, BC_UNAVAILABLE, "server shutting down");
	rpc_call_finish(c, r, NULL, &err);
	if (req)
		protobuf_c_message_free_unpacked(req, NULL);
}

/* ------------------------------------------------------ public API */

/* See rpc.h. */
void *rpc_call_user(const rpc_call *call)
{
	return call->srv->opts.user;
}

/* See rpc.h. */
void *rpc_call_thread(const rpc_call *call)
{
	return call->thread_state;
}

/* See rpc.h. */
void rpc_call_set_thread(rpc_call *call, void *state)
{
	call->thread_state = state;
}

/* See rpc.h. */
const char *rpc_call_method(const rpc_call *call)
{
	return call->path;
}

/* See rpc.h. */
const char *rpc_call_bearer(const rpc_call *call)
{
	return call->bearer;
}

/* See rpc.h. */
const char *rpc_call_metadata(const rpc_call *call, const char *key)
{
	for (size_t i = 0; i < call->n_md; i++)
		if (strcmp(call->md_keys[i], key) == 0)
			return call->md_vals[i];
	return NULL;
}

/* See rpc.h. */
const char *rpc_call_peer_cn(const rpc_call *call)
{
	return call->peer_cn;
}

/* See rpc.h. */
const char *rpc_call_peer_cert_pem(const rpc_call *call)
{
	return call->peer_cert_pem;
}

/* See rpc.h. */
const char *rpc_call_peer(const rpc_call *call)
{
	return call->peer;
}

/* See rpc.h. */
int64_t rpc_call_deadline_mono_ms(const rpc_call *call)
{
	return call->deadline_ms;
}

/* See rpc.h. A previous principal is freed. */
void rpc_call_set_principal(rpc_call *call, void *principal, void (*free_fn)(void *))
{
	if (call->principal_free && call->principal && call->principal != principal)
		call->principal_free(call->principal);
	call->principal = principal;
	call->principal_free = free_fn;
}

/* See rpc.h. */
void *rpc_call_principal(const rpc_call *call)
{
	return call->principal;
}

/* See rpc.h. -EINVAL on a unary call or a message of the wrong type. */
int rpc_call_send(rpc_call *call, const ProtobufCMessage *msg)
{
	if (!call->method || call->method->h.kind == RPC_UNARY || !msg ||
	    msg->descriptor != call->method->md->output)
		return -EINVAL;
	return call->ops->send(call, msg);
}

/* The gRPC transport's send: one message, after the initial metadata if
 * none went yet. */
static int grpc_send(rpc_call *call, const ProtobufCMessage *msg)
{
	grpc_op ops[2];
	grpc_byte_buffer *bb;
	size_t n = 0;
	int r;

	if (!call->call)
		return -EINVAL;
	if (rpc_server_stopping(call->srv))
		return -ECANCELED;
	memset(ops, 0, sizeof(ops));
	bb = rpc_bb_pack(msg);
	if (!call->sent_initial_md)
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n++].data.send_message.send_message = bb;
	r = batch(call, ops, n);
	if (r != -EIO)
		call->sent_initial_md = true;
	grpc_byte_buffer_destroy(bb);
	return r < 0 ? -ECANCELED : 0;
}

/* A received message, destroyed: 1 with *ret, or rpc_bb_unpack_request's
 * error. */
static int recv_unpack(rpc_call *call, grpc_byte_buffer *bb, ProtobufCMessage **ret)
{
	int r;

	r = rpc_bb_unpack_request(bb, call->method->md->input, call->srv->opts.max_message_bytes,
				  ret);
	grpc_byte_buffer_destroy(bb);
	return r < 0 ? r : 1;
}

/* See rpc.h. */
int rpc_call_recv(rpc_call *call, ProtobufCMessage **ret, int timeout_ms)
{
	return call->ops->recv(call, ret, timeout_ms);
}

/* See rpc_internal.h. One RECV_MESSAGE stays outstanding across a
 * timeout, so the next call picks up the same message. A registered unary
 * call's request, read by gRPC before the call was handed over, is the
 * first message. */
int rpc_grpc_recv_bb(rpc_call *call, grpc_byte_buffer **ret, int timeout_ms)
{
	grpc_byte_buffer *bb;
	grpc_event ev;
	grpc_op op;

	if (!call->call || !call->method)
		return -EINVAL;
	if (call->recv_eof)
		return 0;
	if (call->prefetched) {
		call->prefetched = false;
		bb = call->prefetch_bb;
		call->prefetch_bb = NULL;
		goto got;
	}
	if (!call->recv_pending) {
		memset(&op, 0, sizeof(op));
		op.op = GRPC_OP_RECV_MESSAGE;
		op.data.recv_message.recv_message = &call->recv_bb;
		if (grpc_call_start_batch(call->call, &op, 1, &call->tag_recv, NULL) != GRPC_CALL_OK)
			return -ECANCELED;
		call->recv_pending = true;
	}
	ev = pluck(call, &call->tag_recv, rpc_deadline_in(timeout_ms));
	if (ev.type == GRPC_QUEUE_TIMEOUT)
		return -ETIMEDOUT;
	call->recv_pending = false;
	bb = call->recv_bb;
	call->recv_bb = NULL;
	if (!ev.success) {
		if (bb)
			grpc_byte_buffer_destroy(bb);
		return -ECANCELED;
	}
got:
	if (!bb) {
		call->recv_eof = true;
		return 0;
	}
	*ret = bb;
	return 1;
}

/* The gRPC transport's receive: one message, unpacked. */
static int grpc_recv(rpc_call *call, ProtobufCMessage **ret, int timeout_ms)
{
	grpc_byte_buffer *bb = NULL;
	int r = rpc_grpc_recv_bb(call, &bb, timeout_ms);

	return r <= 0 ? r : recv_unpack(call, bb, ret);
}

/* See rpc.h. timeout_ms < 0 waits without limit. */
bool rpc_call_wait_cancelled(rpc_call *call, int timeout_ms)
{
	return call->ops->wait_cancelled(call, timeout_ms);
}

/* The gRPC transport's wait: on the RECV_CLOSE_ON_SERVER watch. */
static bool grpc_wait_cancelled(rpc_call *call, int timeout_ms)
{
	grpc_event ev;

	if (rpc_server_stopping(call->srv) || !call->call)
		return true;
	rpc_call_watch_close(call);
	if (!call->close_started)
		return true;
	if (!call->close_done) {
		ev = pluck(call, &call->tag_close, rpc_deadline_in(timeout_ms));
		if (ev.type == GRPC_OP_COMPLETE)
			call->close_done = true;
	}
	return call->close_done || rpc_server_stopping(call->srv);
}

/* See rpc.h. */
void rpc_call_cancel(rpc_call *call)
{
	if (call->ops->cancel)
		call->ops->cancel(call);
}

static void grpc_cancel(rpc_call *call)
{
	if (call->call)
		grpc_call_cancel(call->call, NULL);
}

/* The gRPC transport (grpc_call, its pluck queue): see rpc_internal.h. */
const struct rpc_transport_ops rpc_grpc_ops = {
	.name = "grpc",
	.send = grpc_send,
	.recv = grpc_recv,
	.wait_cancelled = grpc_wait_cancelled,
	.release = rpc_call_release_grpc,
	.cancel = grpc_cancel,
	.can_detach = true,
};
