/* pbwire.c: a descriptor-driven walk over protobuf wire bytes (pbwire.h).
 *
 * The wire format: a message is a sequence of (key, value); the key is a
 * varint, field number << 3 | wire type. Wire types: 0 varint, 1 eight
 * bytes, 2 a varint length then that many bytes (strings, bytes, nested
 * messages, packed scalars), 5 four bytes; 3 and 4 (groups) are refused as
 * protobuf-c refuses them. */
#include "pbwire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

struct cursor {
	const uint8_t *p, *end;
};

/* A varint of at most 10 bytes: 0, or -EBADMSG. */
static int rd_varint(struct cursor *c, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < 10; i++) {
		uint8_t b;

		if (c->p >= c->end)
			return -EBADMSG;
		b = *c->p++;
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*ret = v;
			return 0;
		}
	}
	return -EBADMSG;
}

static int skip(struct cursor *c, uint64_t n)
{
	if (n > (uint64_t)(c->end - c->p))
		return -EBADMSG;
	c->p += n;
	return 0;
}

static int walk(const ProtobufCMessageDescriptor *d, struct cursor *c, unsigned depth);

/* A length-delimited value of field number num, its n bytes at c->p. */
static int check_delimited(const ProtobufCMessageDescriptor *d, uint32_t num,
			   const struct cursor *c, size_t n, unsigned depth)
{
	const ProtobufCFieldDescriptor *f = d ? protobuf_c_message_descriptor_get_field(d, num) : NULL;
	struct cursor sub = {c->p, c->p + n};

	if (!f)
		return 0;
	if (f->type == PROTOBUF_C_TYPE_STRING)
		return memchr(c->p, 0, n) ? -EILSEQ : 0;
	if (f->type == PROTOBUF_C_TYPE_MESSAGE)
		return walk(f->descriptor, &sub, depth + 1);
	return 0;
}

static int walk(const ProtobufCMessageDescriptor *d, struct cursor *c, unsigned depth)
{
	uint64_t key, v;
	int r;

	if (depth > PBWIRE_MAX_DEPTH)
		return -EBADMSG;
	while (c->p < c->end) {
		if (rd_varint(c, &key) < 0 || (key >> 3) > UINT32_MAX)
			return -EBADMSG;
		switch (key & 7) {
		case 0:
			r = rd_varint(c, &v);
			break;
		case 1:
			r = skip(c, 8);
			break;
		case 5:
			r = skip(c, 4);
			break;
		case 2:
			r = rd_varint(c, &v);
			if (r >= 0 && v > (uint64_t)(c->end - c->p))
				r = -EBADMSG;
			if (r >= 0)
				r = check_delimited(d, (uint32_t)(key >> 3), c, (size_t)v, depth);
			if (r >= 0)
				r = skip(c, v);
			break;
		default:
			r = -EBADMSG;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* See pbwire.h. */
int pbwire_find_nul(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len)
{
	struct cursor c = {buf, buf + len};

	if (!d || (!buf && len))
		return -EBADMSG;
	return walk(d, &c, 0);
}
