/* test_rpc_read.c: rpc_call_read / rpc_stream_read (common/rpc_read.c),
 * a stream message's bytes field read in place.
 *
 * First the wire walk itself (rpc_bb_read_field) on byte buffers cut into
 * slices by hand, tags, lengths and data split across slice boundaries:
 * the field's bytes arrive whole and in order, the last occurrence wins
 * as in an unpack, and malformed or oversized messages give nothing to
 * the caller. Then both ends over a real in-process server on
 * 127.0.0.1:0 (a bidi service built here from bc.compute.v1.TunnelFrame):
 * the server reads each frame's data with rpc_call_read and echoes it,
 * the client reads the echo with rpc_stream_read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/tunnels.pb-c.h"
#include "log.h"
#include "rpc.h"
#include "rpc_internal.h"
#include "tap.h"
#include "util.h"

typedef Bc__Compute__V1__TunnelFrame Frame;
#define FRAME_D (&bc__compute__v1__tunnel_frame__descriptor)
#define DATA 2   /* TunnelFrame.data */
#define TICKET 1 /* TunnelFrame.ticket, a string */
#define WAIT_MS 30000 /* a reply on a loaded machine (5 s ran out once in make check) */

/* ------------------------------------------------------ the sink */

struct sink {
	uint8_t *b;
	size_t n, cap;
	int pieces;
	int fail_after; /* > 0: the piece after that many returns -EPIPE */
};

static int sink_fn(void *arg, const uint8_t *p, size_t n)
{
	struct sink *s = arg;

	if (s->fail_after > 0 && s->pieces == s->fail_after)
		return -EPIPE;
	s->pieces++;
	if (s->n + n > s->cap) {
		s->cap = (s->n + n) * 2;
		s->b = xrealloc(s->b, s->cap);
	}
	memcpy(s->b + s->n, p, n);
	s->n += n;
	return 0;
}

static void sink_reset(struct sink *s)
{
	free(s->b);
	memset(s, 0, sizeof(*s));
}

/* --------------------------------------------- the wire walk itself */

/* A byte buffer of wire[0..len) cut into slices of `cut` bytes (the last
 * one shorter). */
static grpc_byte_buffer *bb_cut(const uint8_t *wire, size_t len, size_t cut)
{
	size_t n = len / cut + 2, k = 0;
	grpc_slice *sl = xcalloc(n, sizeof(*sl));
	grpc_byte_buffer *bb;

	for (size_t off = 0; off < len; off += cut)
		sl[k++] = grpc_slice_from_copied_buffer((const char *)wire + off,
						       len - off < cut ? len - off : cut);
	bb = grpc_raw_byte_buffer_create(sl, k);
	for (size_t i = 0; i < k; i++)
		grpc_slice_unref(sl[i]);
	free(sl);
	return bb;
}

static int read_cut(const uint8_t *wire, size_t len, size_t cut, size_t max, uint32_t field,
		    struct sink *s)
{
	grpc_byte_buffer *bb = bb_cut(wire, len, cut);
	int r = rpc_bb_read_field(bb, max, field, sink_fn, s);

	grpc_byte_buffer_destroy(bb);
	return r;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
	uint8_t *p = xmalloc(n);

	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 131 + seed) ^ (i >> 9));
	return p;
}

static uint8_t *pack_frame(const char *ticket, const uint8_t *data, size_t dlen, const char *path,
			   size_t *ret_len)
{
	Frame f = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	uint8_t *w;

	f.ticket = (char *)(ticket ? ticket : "");
	f.path = (char *)(path ? path : "");
	f.data.data = (uint8_t *)data;
	f.data.len = dlen;
	*ret_len = protobuf_c_message_get_packed_size(&f.base);
	w = xmalloc(*ret_len ? *ret_len : 1);
	protobuf_c_message_pack(&f.base, w);
	return w;
}

static void test_walk(void)
{
	const size_t cuts[] = {1, 2, 3, 7, 8192, 1 << 20};
	size_t dlen = 100 * 1024 + 3, wlen, len;
	uint8_t *data = pattern(dlen, 7), *wire, w[64];
	struct sink s = {0};
	bool all_same = true;
	int r;

	/* ticket, data and path around it: only the data comes out, whole */
	wire = pack_frame("tkt_123", data, dlen, "tunnels/x?ticket=y", &wlen);
	for (size_t i = 0; i < ARRAY_SIZE(cuts); i++) {
		r = read_cut(wire, wlen, cuts[i], 1 << 20, DATA, &s);
		all_same &= r == 0 && s.n == dlen && memcmp(s.b, data, dlen) == 0;
		if (cuts[i] == 8192)
			ok(s.pieces > 10, "8 KiB slices: the data comes in pieces (%d), not copied "
			   "into one", s.pieces);
		if (cuts[i] == 1 << 20)
			is_int(s.pieces, 1, "one slice: one piece");
		sink_reset(&s);
	}
	ok(all_same, "the data field read whole and in order with slices of 1, 2, 3, 7, "
	   "8192 bytes and one slice");

	/* every truncation of the message is malformed and gives nothing:
	 * the cut inside the tag, the length and the bytes of each field */
	all_same = true;
	for (len = 0; len < wlen; len += len < 64 ? 1 : 4099) {
		r = read_cut(wire, len, 5, 1 << 20, DATA, &s);
		if (len == 0 || len == 9) /* nothing, or the whole ticket field */
			all_same &= r == 0 && s.pieces == 0;
		else
			all_same &= r == -EBADMSG && s.pieces == 0;
		sink_reset(&s);
	}
	ok(all_same, "every truncated message: -EBADMSG and no piece given (empty, or cut "
	   "after a whole field: 0)");

	/* the size limit: the whole buffer, and a length claiming more */
	r = read_cut(wire, wlen, 8192, dlen - 1, DATA, &s);
	is_int(r, -EMSGSIZE, "a message longer than max: -EMSGSIZE");
	is_int(s.pieces, 0, "... nothing given");
	sink_reset(&s);
	/* data = 2<<3|2, length 2^40 as a varint, no bytes behind it */
	memcpy(w, "\x12\x80\x80\x80\x80\x80\x20", 7);
	r = read_cut(w, 7, 3, 1 << 20, DATA, &s);
	is_int(r, -EMSGSIZE, "a length past max: -EMSGSIZE");
	sink_reset(&s);

	/* fn's own error stops the walk and comes back as is */
	s.fail_after = 2;
	r = read_cut(wire, wlen, 8192, 1 << 20, DATA, &s);
	is_int(r, -EPIPE, "fn's -EPIPE comes back as is");
	is_int(s.pieces, 2, "... after the pieces it took");
	sink_reset(&s);

	/* asking for the ticket (a string, also length-delimited) works: the
	 * walk is by wire type, rpc_call_read checks the descriptor */
	r = read_cut(wire, wlen, 3, 1 << 20, TICKET, &s);
	ok(r == 0 && s.n == 7 && memcmp(s.b, "tkt_123", 7) == 0, "another field read the same way");
	sink_reset(&s);
	free(wire);

	/* the field twice: the last one wins, as in an unpack */
	memcpy(w, "\x12\x03" "abc" "\x0a\x01" "t" "\x12\x04" "wxyz", 14);
	r = read_cut(w, 14, 1, 1 << 20, DATA, &s);
	ok(r == 0 && s.n == 4 && memcmp(s.b, "wxyz", 4) == 0, "the field twice: the last one");
	sink_reset(&s);

	/* absent or empty: no piece, 0 */
	memcpy(w, "\x0a\x01" "t" "\x08\x96\x01" "\x1d\x01\x02\x03\x04"
	       "\x21\x01\x02\x03\x04\x05\x06\x07\x08", 20);
	r = read_cut(w, 20, 2, 1 << 20, DATA, &s);
	ok(r == 0 && s.pieces == 0, "no data field (varint, fixed32, fixed64 fields skipped): "
	   "0, no piece");
	sink_reset(&s);
	memcpy(w, "\x12\x00", 2);
	r = read_cut(w, 2, 1, 1 << 20, DATA, &s);
	ok(r == 0 && s.pieces == 0, "an empty data field: 0, no piece");
	sink_reset(&s);

	/* malformed framing */
	memcpy(w, "\x10\x05", 2); /* data as a varint */
	is_int(read_cut(w, 2, 1, 1 << 20, DATA, &s), -EBADMSG, "the field with another wire type");
	memcpy(w, "\x1b\x1c", 2); /* field 3 as a group */
	is_int(read_cut(w, 2, 1, 1 << 20, DATA, &s), -EBADMSG, "a group");
	memcpy(w, "\x1e\x00", 2); /* wire type 6 */
	is_int(read_cut(w, 2, 1, 1 << 20, DATA, &s), -EBADMSG, "wire type 6");
	memcpy(w, "\x02\x00", 2); /* field number 0 */
	is_int(read_cut(w, 2, 1, 1 << 20, DATA, &s), -EBADMSG, "field number 0");
	memset(w, 0x80, 11);
	w[11] = 0x01; /* a tag varint of 12 bytes */
	is_int(read_cut(w, 12, 4, 1 << 20, DATA, &s), -EBADMSG, "a varint longer than 10 bytes");
	memcpy(w, "\x0a\x01" "t" "\x12\x05" "ab", 7); /* data cut short, after the ticket */
	is_int(read_cut(w, 7, 2, 1 << 20, DATA, &s), -EBADMSG, "data shorter than its length");
	is_int(s.pieces, 0, "... nothing of any of them given");
	sink_reset(&s);
	free(data);
}

/* --------------------------------------------- over a real server */

static const ProtobufCMethodDescriptor echo_methods[] = {
	{"Echo", FRAME_D, FRAME_D},
	{"Wrong", FRAME_D, FRAME_D},
};
static const unsigned echo_index[] = {0, 1};
static const ProtobufCServiceDescriptor echo_service = {
	PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC,
	"bc.test.Read", "Read", "Bc__Test__Read", "bc.test",
	ARRAY_SIZE(echo_methods), echo_methods, echo_index,
};

/* Echo each frame's data back as one frame; the reader's errors as a
 * frame whose ticket names them. */
static int h_echo(rpc_call *call, bc_error *err)
{
	Frame out = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	struct sink s = {0};
	char why[32];
	int r;

	(void)err;
	while ((r = rpc_call_read(call, DATA, sink_fn, &s, 5000)) == 1) {
		out.data.data = s.b;
		out.data.len = s.n;
		out.ticket = "";
		if (rpc_call_send(call, &out.base) < 0)
			break;
		s.n = 0;
	}
	if (r < 0) {
		snprintf(why, sizeof(why), "err %d", r);
		out.data.len = 0;
		out.ticket = why;
		rpc_call_send(call, &out.base);
	}
	sink_reset(&s);
	return 0;
}

/* rpc_call_read of the ticket, a string field: -EINVAL. */
static int h_wrong(rpc_call *call, bc_error *err)
{
	Frame out = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	struct sink s = {0};
	char why[32];

	(void)err;
	snprintf(why, sizeof(why), "err %d", rpc_call_read(call, TICKET, sink_fn, &s, 5000));
	out.ticket = why;
	rpc_call_send(call, &out.base);
	sink_reset(&s);
	return 0;
}

static const struct rpc_handler echo_handlers[] = {
	{.method = "Echo", .kind = RPC_BIDI, .fn.bidi = h_echo},
	{.method = "Wrong", .kind = RPC_BIDI, .fn.bidi = h_wrong},
};

/* The reply's ticket (an error report), into buf. */
static int reply_ticket(rpc_stream *st, char *buf, size_t len)
{
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	int r = rpc_stream_recv(st, FRAME_D, &m, WAIT_MS, &err);

	buf[0] = '\0';
	if (r == 1) {
		snprintf(buf, len, "%s", ((Frame *)m)->ticket);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	return r;
}

static void test_server(void)
{
	struct rpc_server_opts so = {.listen = "127.0.0.1:0", .max_message_bytes = 2 << 20};
	struct rpc_client_opts co = {.max_message_bytes = 2 << 20};
	Frame f = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	size_t sizes[] = {1, 1000, 64 * 1024, (1 << 20) + 17, 0, 300 * 1024};
	char target[64], path[64], ticket[64];
	struct sink s = {0};
	bc_error err = {0};
	rpc_server *srv;
	rpc_client *c;
	rpc_stream *st;
	bool same = true;
	int port = 0, r, n = 0;

	srv = rpc_server_new(&so, NULL);
	ok(srv && rpc_server_add_service(srv, &echo_service, echo_handlers,
					 ARRAY_SIZE(echo_handlers)) == 0 &&
	   rpc_server_start(srv, &port) == 0, "echo server listens on 127.0.0.1:%d", port);
	snprintf(target, sizeof(target), "127.0.0.1:%d", port);
	co.target = target;
	c = rpc_client_new(&co);
	rpc_method_path(&echo_service, "Echo", path, sizeof(path));
	st = rpc_stream_open(c, path, NULL, 20000, &err);
	ok(st != NULL, "bidi stream opens");
	for (size_t i = 0; st && i < ARRAY_SIZE(sizes); i++) {
		uint8_t *data = pattern(sizes[i], (unsigned)i);

		f.data.data = data;
		f.data.len = sizes[i];
		f.ticket = i == 2 ? "a ticket beside the data" : "";
		r = rpc_stream_send(st, &f.base);
		if (r == 0)
			r = rpc_stream_read(st, FRAME_D, DATA, sink_fn, &s, WAIT_MS, &err);
		same &= r == 1 && s.n == sizes[i] && (!s.n || memcmp(s.b, data, s.n) == 0);
		n += r == 1;
		s.n = 0;
		free(data);
	}
	is_int(n, (int)ARRAY_SIZE(sizes), "every message echoed");
	ok(same, "... byte for byte, both ends reading in place (1 B to 1 MiB, and empty)");
	r = rpc_stream_read(st, FRAME_D, TICKET + 2, sink_fn, &s, WAIT_MS, &err);
	ok(r < 0 && err.code == BC_INTERNAL, "client: a field that is not bytes: BC_INTERNAL");
	/* one byte over the server's limit: the server's reader says so */
	{
		uint8_t *data = pattern((2 << 20) + 1, 1);

		f.data.data = data;
		f.data.len = (2 << 20) + 1;
		f.ticket = "";
		r = rpc_stream_send(st, &f.base);
		free(data);
	}
	if (r == 0)
		r = reply_ticket(st, ticket, sizeof(ticket));
	ok(r == 1 && strcmp(ticket, "err -90") == 0,
	   "server: a message over max_message_bytes: -EMSGSIZE (%s)", ticket);
	rpc_stream_free(st);

	/* half-close: 0 at the server, then the stream ends OK */
	st = rpc_stream_open(c, path, NULL, 20000, &err);
	is_int(st ? rpc_stream_close_send(st) : -1, 0, "half-close");
	r = st ? rpc_stream_read(st, FRAME_D, DATA, sink_fn, &s, WAIT_MS, &err) : -1;
	is_int(r, 0, "client's read: 0 at the end of an OK stream (the server read 0)");
	rpc_stream_free(st);

	rpc_method_path(&echo_service, "Wrong", path, sizeof(path));
	st = rpc_stream_open(c, path, NULL, 20000, &err);
	f.data.len = 0;
	f.ticket = "x";
	r = st ? rpc_stream_send(st, &f.base) : -1;
	if (r == 0)
		r = reply_ticket(st, ticket, sizeof(ticket));
	ok(r == 1 && strcmp(ticket, "err -22") == 0, "server: a string field: -EINVAL (%s)",
	   ticket);
	rpc_stream_free(st);
	sink_reset(&s);
	rpc_client_free(c);
	rpc_server_free(srv, 2000);
}

int main(void)
{
	if (getenv("TEST_RPC_DEBUG"))
		log_init("test_rpc_read", LOG_LVL_DEBUG);
	rpc_global_init();
	test_walk();
	test_server();
	rpc_global_shutdown();
	done_testing();
}
