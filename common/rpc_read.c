/* rpc_read.c: one bytes field of a received stream message, read where
 * gRPC left it (rpc.h: rpc_call_read, rpc_stream_read).
 *
 * A tunnel's message is a frame whose data field is all that matters.
 * Unpacking it costs two copies (gRPC's slices into one contiguous buffer,
 * then protobuf-c's copy of the field) and two allocations per message;
 * here the message's top-level wire data is walked across the byte
 * buffer's slices (gRPC's TLS layer hands them over in pieces of a few
 * KiB) and the field's bytes go to the caller as they lie. Two passes: the
 * first checks the framing and finds the field's last occurrence (what
 * protobuf-c would keep), the second hands it over, so nothing of a
 * malformed message reaches the caller. The JSON/HTTP transport's
 * messages are unpacked already: their field is given in one piece. */
#include <errno.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>

#include "rpc_internal.h"

/* A position in a byte buffer: the rest of the current slice, and how
 * many bytes came before. */
struct cur {
	grpc_byte_buffer_reader rd;
	const uint8_t *p;
	size_t left;
	uint64_t pos;
};

/* True with a byte under the cursor, false at the end of the buffer. */
static bool cur_more(struct cur *c)
{
	grpc_slice *s;

	while (c->left == 0) {
		if (!grpc_byte_buffer_reader_peek(&c->rd, &s))
			return false;
		c->p = GRPC_SLICE_START_PTR(*s);
		c->left = GRPC_SLICE_LENGTH(*s);
	}
	return true;
}

static int cur_varint(struct cur *c, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		if (!cur_more(c))
			return -EBADMSG;
		b = *c->p++;
		c->left--;
		c->pos++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*ret = v;
			return 0;
		}
	}
	return -EBADMSG;
}

/* Move over n bytes, giving them to fn when it is not NULL. */
static int cur_skip(struct cur *c, uint64_t n, rpc_read_fn fn, void *arg)
{
	while (n > 0) {
		size_t k;

		if (!cur_more(c))
			return -EBADMSG;
		k = n < c->left ? (size_t)n : c->left;
		if (fn) {
			int r = fn(arg, c->p, k);

			if (r < 0)
				return r;
		}
		c->p += k;
		c->left -= k;
		c->pos += k;
		n -= k;
	}
	return 0;
}

/* The first pass: the framing of every top-level field; where the last
 * occurrence of `field` starts and how long it is (*ret_len 0 and
 * *ret_found false without one). */
static int scan(struct cur *c, size_t max, uint32_t field, uint64_t *ret_off, uint64_t *ret_len,
		bool *ret_found)
{
	while (cur_more(c)) {
		uint64_t tag, v;
		int r = cur_varint(c, &tag);

		if (r < 0)
			return r;
		if (tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
			return -EBADMSG;
		if (tag >> 3 == field && (tag & 7) != 2)
			return -EBADMSG;
		switch (tag & 7) {
		case 0:
			r = cur_varint(c, &v);
			break;
		case 1:
			r = cur_skip(c, 8, NULL, NULL);
			break;
		case 5:
			r = cur_skip(c, 4, NULL, NULL);
			break;
		case 2:
			r = cur_varint(c, &v);
			if (r < 0)
				return r;
			if (v > max)
				return -EMSGSIZE;
			if (tag >> 3 == field) {
				*ret_off = c->pos;
				*ret_len = v;
				*ret_found = true;
			}
			r = cur_skip(c, v, NULL, NULL);
			break;
		default: /* groups (protobuf-c has none), 6 and 7 do not exist */
			return -EBADMSG;
		}
		if (r < 0)
			return r;
		if (c->pos > max)
			return -EMSGSIZE;
	}
	return 0;
}

/* See rpc_internal.h. */
int rpc_bb_read_field(grpc_byte_buffer *bb, size_t max, uint32_t field, rpc_read_fn fn,
		      void *arg)
{
	struct cur c = {0};
	uint64_t off = 0, len = 0;
	bool found = false;
	int r;

	if (grpc_byte_buffer_length(bb) > max)
		return -EMSGSIZE;
	if (!grpc_byte_buffer_reader_init(&c.rd, bb))
		return -EBADMSG;
	r = scan(&c, max, field, &off, &len, &found);
	grpc_byte_buffer_reader_destroy(&c.rd);
	if (r < 0 || !found || len == 0)
		return r;
	memset(&c, 0, sizeof(c));
	if (!grpc_byte_buffer_reader_init(&c.rd, bb))
		return -EBADMSG;
	r = cur_skip(&c, off, NULL, NULL);
	if (r == 0)
		r = cur_skip(&c, len, fn, arg);
	grpc_byte_buffer_reader_destroy(&c.rd);
	return r;
}

/* The singular bytes field `field` of d, or NULL. */
static const ProtobufCFieldDescriptor *bytes_field(const ProtobufCMessageDescriptor *d,
						   uint32_t field)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, field);

	if (!f || f->type != PROTOBUF_C_TYPE_BYTES || f->label == PROTOBUF_C_LABEL_REPEATED)
		return NULL;
	return f;
}

/* An unpacked message's field to fn, in one piece. */
static int give_unpacked(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			 rpc_read_fn fn, void *arg)
{
	const ProtobufCBinaryData *b = (const void *)((const char *)m + f->offset);

	return b->len ? fn(arg, b->data, b->len) : 0;
}

/* See rpc.h. */
int rpc_call_read(rpc_call *call, uint32_t field, rpc_read_fn fn, void *arg, int timeout_ms)
{
	const ProtobufCFieldDescriptor *f;
	grpc_byte_buffer *bb = NULL;
	int r;

	if (!call->method || call->method->h.kind == RPC_UNARY || !fn ||
	    !(f = bytes_field(call->method->md->input, field)))
		return -EINVAL;
	if (call->ops != &rpc_grpc_ops) {
		ProtobufCMessage *m = NULL;

		r = call->ops->recv(call, &m, timeout_ms);
		if (r <= 0)
			return r;
		r = give_unpacked(m, f, fn, arg);
		protobuf_c_message_free_unpacked(m, NULL);
		return r < 0 ? r : 1;
	}
	r = rpc_grpc_recv_bb(call, &bb, timeout_ms);
	if (r <= 0)
		return r;
	r = rpc_bb_read_field(bb, call->srv->opts.max_message_bytes, field, fn, arg);
	grpc_byte_buffer_destroy(bb);
	return r < 0 ? r : 1;
}

/* See rpc.h. */
int rpc_stream_read(rpc_stream *st, const ProtobufCMessageDescriptor *d, uint32_t field,
		    rpc_read_fn fn, void *arg, int timeout_ms, bc_error *err)
{
	grpc_byte_buffer *bb = NULL;
	int r;

	if (!st || !d || !fn || !bytes_field(d, field))
		return bc_error_set(err, BC_INTERNAL, "rpc_stream_read: bad arguments");
	r = rpc_stream_recv_bb(st, &bb, timeout_ms, err);
	if (r <= 0)
		return r;
	r = rpc_bb_read_field(bb, rpc_stream_max_message(st), field, fn, arg);
	grpc_byte_buffer_destroy(bb);
	if (r == -EMSGSIZE)
		return bc_error_set(err, BC_INVALID_RESPONSE, "reply larger than %zu bytes",
				    rpc_stream_max_message(st));
	if (r == -EBADMSG)
		return bc_error_set(err, BC_INVALID_RESPONSE, "malformed %s reply", d->name);
	return r < 0 ? r : 1;
}
