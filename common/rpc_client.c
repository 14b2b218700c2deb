/* rpc_client.c: the client side. One channel per rpc_client, shared by
 * any number of threads; every call gets its own GRPC_CQ_PLUCK queue, so
 * calls never see each other's events. gRPC reconnects the channel by
 * itself; short reconnect backoffs (0.2 s .. 2 s, gRPC's jitter) make a
 * restarted server usable again within a second or two, provided someone
 * polls the channel meanwhile (rpc_client_wait_ready).
 *
 * Unary calls are one batch. Streams keep a RECV_STATUS_ON_CLIENT op
 * outstanding from the start and at most one RECV_MESSAGE: a receive that
 * times out leaves its op in flight, and the next receive plucks it. A
 * non-OK status becomes a bc_error (rpc_status.c).
 *
 * One thread may send (rpc_stream_send, rpc_stream_close_send: tag_op)
 * while another receives (rpc_stream_recv: tag_recv, then tag_status):
 * gRPC allows one send and one receive batch in flight on a call, a pluck
 * queue serves several pluckers waiting on different tags, and the only
 * field both touch is status_done, atomic. */
#include "rpc_internal.h"

#include <errno.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define DEFAULT_MAX_MESSAGE (4u << 20)
#define DEFAULT_UNARY_TIMEOUT_MS 30000
/* Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC uses it as the connect
 * (handshake) timeout, which must stay generous. */
#define RECONNECT_MIN_MS 200
#define RECONNECT_MAX_MS 2000
/* Pings while calls are open, so a long watch notices a dead server (no
 * FIN) within KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS. The server allows it. */
#define KEEPALIVE_MS 30000
#define KEEPALIVE_TIMEOUT_MS 10000

struct rpc_client {
	grpc_channel *ch;
	char *auth;                 /* "Bearer <token>" or NULL */
	size_t max;
};

struct rpc_stream {
	rpc_client *c;
	grpc_call *call;
	grpc_completion_queue *cq;
	grpc_metadata_array init_md, trail_md;
	grpc_status_code status;
	grpc_slice details;
	grpc_byte_buffer *bb;
	bool init_md_asked, recv_pending, status_started, eof;
	/* set by the receiving thread, read by a sending one (rpc.h: send and
	 * recv may run at once) */
	atomic_bool status_done;
	int tag_op, tag_recv, tag_status;
};

/* ------------------------------------------------------------ channel */

static grpc_channel_credentials *client_creds(const struct rpc_tls *t)
{
	grpc_ssl_pem_key_cert_pair pair = {.private_key = t ? t->key_pem : NULL,
					   .cert_chain = t ? t->cert_pem : NULL};

	if (!t)
		return grpc_insecure_credentials_create();
	return grpc_ssl_credentials_create(t->ca_pem, t->cert_pem && t->key_pem ? &pair : NULL,
					   NULL, NULL);
}

static void arg_int(grpc_arg *a, const char *key, int v)
{
	a->type = GRPC_ARG_INTEGER;
	a->key = (char *)key;
	a->value.integer = v;
}

/* See rpc.h. */
rpc_client *rpc_client_new(const struct rpc_client_opts *opts)
{
	grpc_arg args[12];
	grpc_channel_args ca = {.num_args = 0, .args = args};
	grpc_channel_credentials *creds;
	rpc_client *c;

	if (!opts || !opts->target)
		return NULL;
	rpc_global_init();
	c = xcalloc(1, sizeof(*c));
	c->max = opts->max_message_bytes ? opts->max_message_bytes : DEFAULT_MAX_MESSAGE;
	if (opts->bearer)
		c->auth = xasprintf("Bearer %s", opts->bearer);
	arg_int(&args[ca.num_args++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		c->max > INT_MAX ? INT_MAX : (int)c->max);
	arg_int(&args[ca.num_args++], GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, RECONNECT_MIN_MS);
	arg_int(&args[ca.num_args++], GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, RECONNECT_MAX_MS);
	arg_int(&args[ca.num_args++], GRPC_ARG_KEEPALIVE_TIME_MS, KEEPALIVE_MS);
	arg_int(&args[ca.num_args++], GRPC_ARG_KEEPALIVE_TIMEOUT_MS, KEEPALIVE_TIMEOUT_MS);
	arg_int(&args[ca.num_args++], GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
	arg_int(&args[ca.num_args++], GRPC_ARG_TCP_READ_CHUNK_SIZE, RPC_TCP_READ_CHUNK);
	arg_int(&args[ca.num_args++], GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, RPC_TCP_READ_CHUNK);
	if (opts->stream_window_bytes > 0) { /* rpc.h: bounded per stream */
		arg_int(&args[ca.num_args++], GRPC_ARG_HTTP2_BDP_PROBE, 0);
		arg_int(&args[ca.num_args++], GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
			opts->stream_window_bytes);
	}
	if (opts->tls && opts->server_name) {
		args[ca.num_args].type = GRPC_ARG_STRING;
		args[ca.num_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
		args[ca.num_args++].value.string = (char *)opts->server_name;
	}
	creds = client_creds(opts->tls);
	c->ch = grpc_channel_create(opts->target, creds, &ca);
	grpc_channel_credentials_release(creds);
	if (!c->ch) {
		log_debug("rpc: cannot create a channel to %s", opts->target);
		free(c->auth);
		free(c);
		rpc_global_shutdown();
		return NULL;
	}
	return c;
}

/* See rpc.h. Calls and streams of c must be finished. NULL-safe. */
void rpc_client_free(rpc_client *c)
{
	if (!c)
		return;
	grpc_channel_destroy(c->ch);
	if (c->auth) {
		memset(c->auth, 0, strlen(c->auth));
		free(c->auth);
	}
	free(c);
	rpc_global_shutdown();
}

/* See rpc.h. */
int rpc_client_wait_ready(rpc_client *c, int timeout_ms)
{
	grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->ch, 1);
	gpr_timespec deadline = rpc_deadline_in(timeout_ms > 0 ? timeout_ms : 1);
	grpc_completion_queue *cq;

	if (st == GRPC_CHANNEL_READY || timeout_ms <= 0)
		return st == GRPC_CHANNEL_READY ? 0 : -ETIMEDOUT;
	cq = grpc_completion_queue_create_for_next(NULL);
	while (st != GRPC_CHANNEL_READY && st != GRPC_CHANNEL_SHUTDOWN) {
		grpc_channel_watch_connectivity_state(c->ch, st, deadline, cq, NULL);
		if (!grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).success)
			break; /* the deadline passed first */
		st = grpc_channel_check_connectivity_state(c->ch, 1);
	}
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
	       GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	return st == GRPC_CHANNEL_READY ? 0 : -ETIMEDOUT;
}

static grpc_call *call_create(rpc_client *c, grpc_completion_queue *cq, const char *path,
			      gpr_timespec deadline)
{
	grpc_slice method = grpc_slice_from_copied_string(path);
	grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
						   method, NULL, deadline, NULL);

	grpc_slice_unref(method);
	return call;
}

static void op_send_md(const rpc_client *c, grpc_op *op, grpc_metadata *md)
{
	memset(md, 0, sizeof(*md));
	op->op = GRPC_OP_SEND_INITIAL_METADATA;
	if (!c->auth)
		return;
	md->key = grpc_slice_from_static_string("authorization");
	md->value = grpc_slice_from_static_string(c->auth);
	op->data.send_initial_metadata.count = 1;
	op->data.send_initial_metadata.metadata = md;
}

static void status_error(grpc_status_code status, grpc_slice details,
			 const grpc_metadata_array *trail, bc_error *err)
{
	const uint8_t *bin = NULL;
	size_t bin_len = 0;

	for (size_t i = 0; i < trail->count; i++) {
		if (grpc_slice_str_cmp(trail->metadata[i].key, RPC_STATUS_DETAILS_KEY) == 0) {
			bin = GRPC_SLICE_START_PTR(trail->metadata[i].value);
			bin_len = GRPC_SLICE_LENGTH(trail->metadata[i].value);
		}
	}
	rpc_status_to_error((int)status, (const char *)GRPC_SLICE_START_PTR(details),
			    GRPC_SLICE_LENGTH(details), bin, bin_len, err);
}

static int unpack_reply(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d, size_t max,
			ProtobufCMessage **ret, bc_error *err)
{
	int r = rpc_bb_unpack(bb, d, max, ret);

	if (r == -EMSGSIZE)
		return bc_error_set(err, BC_INVALID_RESPONSE, "reply larger than %zu bytes", max);
	if (r < 0)
		return bc_error_set(err, BC_INVALID_RESPONSE, "malformed %s reply", d->name);
	return 0;
}

/* -------------------------------------------------------------- unary */

struct unary_io {
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_metadata auth;
	grpc_byte_buffer *req, *resp;
	grpc_metadata_array init_md, trail_md;
	grpc_status_code status;
	grpc_slice details;
};

/* Run one unary call to completion: 0 with io->status set, or -EIO if it
 * could not run at all. io_done() afterwards in every case. */
static int unary_run(rpc_client *c, const char *path, const ProtobufCMessage *req,
		     int timeout_ms, struct unary_io *io)
{
	grpc_op ops[6];
	grpc_event ev;
	int tag;

	memset(io, 0, sizeof(*io));
	io->details = grpc_empty_slice();
	grpc_metadata_array_init(&io->init_md);
	grpc_metadata_array_init(&io->trail_md);
	io->cq = grpc_completion_queue_create_for_pluck(NULL);
	io->call = call_create(c, io->cq, path, rpc_deadline_in(timeout_ms));
	io->req = rpc_bb_pack(req);
	if (!io->call)
		return -EIO;
	memset(ops, 0, sizeof(ops));
	op_send_md(c, &ops[0], &io->auth);
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = io->req;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &io->init_md;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &io->resp;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &io->trail_md;
	ops[5].data.recv_status_on_client.status = &io->status;
	ops[5].data.recv_status_on_client.status_details = &io->details;
	if (grpc_call_start_batch(io->call, ops, 6, &tag, NULL) != GRPC_CALL_OK)
		return -EIO;
	ev = grpc_completion_queue_pluck(io->cq, &tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
	return ev.success ? 0 : -EIO;
}

static void io_done(struct unary_io *io)
{
	grpc_byte_buffer_destroy(io->req);
	if (io->resp)
		grpc_byte_buffer_destroy(io->resp);
	grpc_metadata_array_destroy(&io->init_md);
	grpc_metadata_array_destroy(&io->trail_md);
	grpc_slice_unref(io->details);
	if (io->call)
		grpc_call_unref(io->call);
	grpc_completion_queue_shutdown(io->cq);
	grpc_completion_queue_destroy(io->cq);
}

/* See rpc.h. */
int rpc_client_unary(rpc_client *c, const char *path, const ProtobufCMessage *req,
		     const ProtobufCMessageDescriptor *resp_desc,
		     ProtobufCMessage **ret_resp, int timeout_ms, bc_error *err)
{
	struct unary_io io;
	int r;

	if (!c || !path || !req || !resp_desc || !ret_resp)
		return bc_error_set(err, BC_INTERNAL, "rpc_client_unary: bad arguments");
	if (unary_run(c, path, req, timeout_ms > 0 ? timeout_ms : DEFAULT_UNARY_TIMEOUT_MS, &io) < 0)
		r = bc_error_set(err, BC_INTERNAL, "call %s could not start", path);
	else if (io.status != GRPC_STATUS_OK)
		r = (status_error(io.status, io.details, &io.trail_md, err), -BC_EDOMAIN);
	else if (!io.resp)
		r = bc_error_set(err, BC_INVALID_RESPONSE, "%s: status OK without a reply", path);
	else
		r = unpack_reply(io.resp, resp_desc, c->max, ret_resp, err);
	io_done(&io);
	return r;
}

/* See rpc_internal.h. */
int rpc_client_unary_raw(rpc_client *c, const char *path, const ProtobufCMessage *req,
			 int timeout_ms, int *ret_status, uint8_t **ret_bin, size_t *ret_bin_len)
{
	struct unary_io io;
	int r = unary_run(c, path, req, timeout_ms, &io);

	*ret_bin = NULL;
	*ret_bin_len = 0;
	if (r == 0)
		*ret_status = (int)io.status;
	for (size_t i = 0; r == 0 && i < io.trail_md.count; i++) {
		grpc_slice v = io.trail_md.metadata[i].value;

		if (grpc_slice_str_cmp(io.trail_md.metadata[i].key, RPC_STATUS_DETAILS_KEY))
			continue;
		free(*ret_bin);
		*ret_bin = xmalloc(GRPC_SLICE_LENGTH(v) + 1);
		memcpy(*ret_bin, GRPC_SLICE_START_PTR(v), GRPC_SLICE_LENGTH(v));
		*ret_bin_len = GRPC_SLICE_LENGTH(v);
	}
	io_done(&io);
	return r;
}

/* ------------------------------------------------------------ streams */

static grpc_event st_pluck(rpc_stream *st, void *tag, gpr_timespec deadline)
{
	return grpc_completion_queue_pluck(st->cq, tag, deadline, NULL);
}

/* Wait for the final status: 0 if OK, else -BC_EDOMAIN with err. */
static int st_status(rpc_stream *st, bc_error *err)
{
	if (!st->status_started)
		return bc_error_set(err, BC_INTERNAL, "stream has no status");
	if (!st->status_done) {
		st_pluck(st, &st->tag_status, gpr_inf_future(GPR_CLOCK_MONOTONIC));
		st->status_done = true;
	}
	if (st->status == GRPC_STATUS_OK)
		return 0;
	status_error(st->status, st->details, &st->trail_md, err);
	return -BC_EDOMAIN;
}

static int st_batch(rpc_stream *st, const grpc_op *ops, size_t n)
{
	grpc_event ev;

	if (grpc_call_start_batch(st->call, ops, n, &st->tag_op, NULL) != GRPC_CALL_OK)
		return -EIO;
	ev = st_pluck(st, &st->tag_op, gpr_inf_future(GPR_CLOCK_MONOTONIC));
	return ev.success ? 0 : -ECANCELED;
}

static int st_start(rpc_stream *st, const ProtobufCMessage *req)
{
	grpc_op ops[3];
	grpc_metadata md;
	grpc_byte_buffer *bb = NULL;
	size_t n = 1;
	int r;

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[0].data.recv_status_on_client.trailing_metadata = &st->trail_md;
	ops[0].data.recv_status_on_client.status = &st->status;
	ops[0].data.recv_status_on_client.status_details = &st->details;
	if (grpc_call_start_batch(st->call, ops, 1, &st->tag_status, NULL) != GRPC_CALL_OK)
		return -EIO;
	st->status_started = true;
	memset(ops, 0, sizeof(ops));
	op_send_md(st->c, &ops[0], &md);
	if (req) {
		bb = rpc_bb_pack(req);
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n++].data.send_message.send_message = bb;
		ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	}
	r = st_batch(st, ops, n);
	if (bb)
		grpc_byte_buffer_destroy(bb);
	return r;
}

/* See rpc.h. NULL with err filled on failure. */
rpc_stream *rpc_stream_open(rpc_client *c, const char *path, const ProtobufCMessage *req,
			    int timeout_ms, bc_error *err)
{
	rpc_stream *st;
	int r;

	if (!c || !path) {
		bc_error_set(err, BC_INTERNAL, "rpc_stream_open: bad arguments");
		return NULL;
	}
	st = xcalloc(1, sizeof(*st));
	st->c = c;
	st->details = grpc_empty_slice();
	grpc_metadata_array_init(&st->init_md);
	grpc_metadata_array_init(&st->trail_md);
	st->cq = grpc_completion_queue_create_for_pluck(NULL);
	st->call = call_create(c, st->cq, path, rpc_deadline_in(timeout_ms > 0 ? timeout_ms : -1));
	if (!st->call) {
		bc_error_set(err, BC_INTERNAL, "cannot create a call for %s", path);
		rpc_stream_free(st);
		return NULL;
	}
	r = st_start(st, req);
	if (r < 0) {
		if (r == -EIO) /* nothing queued: end the call so its status comes */
			grpc_call_cancel(st->call, NULL);
		if (st_status(st, err) == 0)
			bc_error_set(err, BC_UNAVAILABLE, "stream %s failed to start", path);
		rpc_stream_free(st);
		return NULL;
	}
	return st;
}

/* Send one message on a bidi stream: 0, -ECANCELED if the stream is over. */
int rpc_stream_send(rpc_stream *st, const ProtobufCMessage *msg)
{
	grpc_byte_buffer *bb;
	grpc_op op;
	int r;

	if (!st || !msg)
		return -EINVAL;
	if (st->status_done)
		return -ECANCELED;
	memset(&op, 0, sizeof(op));
	bb = rpc_bb_pack(msg);
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	r = st_batch(st, &op, 1);
	grpc_byte_buffer_destroy(bb);
	return r < 0 ? -ECANCELED : 0;
}

/* Half-close a bidi stream: 0, -ECANCELED if the stream is over. */
int rpc_stream_close_send(rpc_stream *st)
{
	grpc_op op;

	if (!st)
		return -EINVAL;
	if (st->status_done)
		return -ECANCELED;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	return st_batch(st, &op, 1) < 0 ? -ECANCELED : 0;
}

static int st_recv_start(rpc_stream *st)
{
	grpc_op ops[2];
	size_t n = 0;

	memset(ops, 0, sizeof(ops));
	if (!st->init_md_asked) {
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n++].data.recv_initial_metadata.recv_initial_metadata = &st->init_md;
	}
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n++].data.recv_message.recv_message = &st->bb;
	if (grpc_call_start_batch(st->call, ops, n, &st->tag_recv, NULL) != GRPC_CALL_OK)
		return -EIO;
	st->init_md_asked = true;
	st->recv_pending = true;
	return 0;
}

/* See rpc_internal.h. timeout_ms < 0 waits without limit, 0 polls. */
int rpc_stream_recv_bb(rpc_stream *st, grpc_byte_buffer **ret, int timeout_ms, bc_error *err)
{
	grpc_byte_buffer *bb;
	grpc_event ev;

	if (st->eof)
		return st_status(st, err);
	if (!st->recv_pending && st_recv_start(st) < 0) {
		grpc_call_cancel(st->call, NULL);
		st->eof = true;
		return st_status(st, err);
	}
	ev = st_pluck(st, &st->tag_recv, rpc_deadline_in(timeout_ms));
	if (ev.type == GRPC_QUEUE_TIMEOUT)
		return -ETIMEDOUT;
	st->recv_pending = false;
	bb = st->bb;
	st->bb = NULL;
	if (ev.success && bb) {
		*ret = bb;
		return 1;
	}
	if (bb)
		grpc_byte_buffer_destroy(bb);
	st->eof = true;
	return st_status(st, err);
}

/* See rpc.h. */
int rpc_stream_recv(rpc_stream *st, const ProtobufCMessageDescriptor *d,
		    ProtobufCMessage **ret, int timeout_ms, bc_error *err)
{
	grpc_byte_buffer *bb = NULL;
	int r;

	if (!st || !d || !ret)
		return bc_error_set(err, BC_INTERNAL, "rpc_stream_recv: bad arguments");
	r = rpc_stream_recv_bb(st, &bb, timeout_ms, err);
	if (r <= 0)
		return r;
	r = unpack_reply(bb, d, st->c->max, ret, err);
	grpc_byte_buffer_destroy(bb);
	return r < 0 ? r : 1;
}

/* See rpc_internal.h. */
size_t rpc_stream_max_message(const rpc_stream *st)
{
	return st->c->max;
}

/* See rpc.h. grpc_call_cancel may be called from any thread. */
void rpc_stream_cancel(rpc_stream *st)
{
	if (st && st->call)
		grpc_call_cancel(st->call, NULL);
}

/* See rpc.h. */
void rpc_stream_free(rpc_stream *st)
{
	gpr_timespec inf = gpr_inf_future(GPR_CLOCK_MONOTONIC);

	if (!st)
		return;
	if (st->call && !st->status_done)
		grpc_call_cancel(st->call, NULL);
	if (st->recv_pending)
		st_pluck(st, &st->tag_recv, inf);
	if (st->status_started && !st->status_done)
		st_pluck(st, &st->tag_status, inf);
	if (st->bb)
		grpc_byte_buffer_destroy(st->bb);
	grpc_metadata_array_destroy(&st->init_md);
	grpc_metadata_array_destroy(&st->trail_md);
	grpc_slice_unref(st->details);
	if (st->call)
		grpc_call_unref(st->call);
	grpc_completion_queue_shutdown(st->cq);
	grpc_completion_queue_destroy(st->cq);
	free(st);
}
