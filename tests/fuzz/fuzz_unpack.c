/* fuzz_unpack.c: protobuf_c_message_unpack of arbitrary bytes as the
 * messages bc reads from the network, then the checks that follow from it:
 * packing gives a size within reason and is a fixed point (unpack + pack
 * again yields the same bytes), and pbjson_write of whatever unpack builds
 * (invalid UTF-8, duplicate map keys, unknown enum values) is JSON that
 * pbjson_read accepts and that writes back identically. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "pbjson.h"

#define UNPACK_MAX_BYTES 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descs[] = {
	&bc__node__v1__node_spec__descriptor,
	&bc__node__v1__status_report__descriptor,
	&bc__node__v1__join_request__descriptor,
	&bc__compute__v1__create_instance_request__descriptor,
	&bc__node__v1__node_update__descriptor,
};

static uint8_t *packed(const ProtobufCMessage *m, size_t *ret_n)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n + 1);

	if (!buf || protobuf_c_message_pack(m, buf) != n)
		abort();
	*ret_n = n;
	return buf;
}

static void __attribute__((noreturn, format(printf, 2, 3)))
fail(const ProtobufCMessage *m, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_unpack: %s: ", m->descriptor->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* Whether m or any message inside it kept unknown fields. */
static bool has_unknown(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	if (m->n_unknown_fields)
		return true;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)m;

		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)(base + f->quantifier_offset) != f->id)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + f->offset);

			for (size_t j = 0; j < n; j++)
				if (has_unknown(arr[j]))
					return true;
		} else if (*(ProtobufCMessage *const *)(base + f->offset) &&
			   has_unknown(*(ProtobufCMessage *const *)(base + f->offset))) {
			return true;
		}
	}
	return false;
}

/* Re-encoding may grow a value (a negative int32 sent as a 5-byte varint
 * is packed as 10 bytes), never by more than twice. */
static void check_pack(const ProtobufCMessage *m, size_t in_size)
{
	ProtobufCMessage *again;
	uint8_t *a, *b;
	size_t na, nb;

	/* protobuf-c 1.4.1 keeps a field numbered 0 sent as the over-long tag
	 * 0x80 0x00 as an unknown field, packs it back as 0x00 and then refuses
	 * its own output: that (upstream) case is let through when unknown
	 * fields are present. */
	a = packed(m, &na);
	if (na > 2 * in_size + 16)
		fail(m, "packed %zu bytes from %zu", na, in_size);
	again = protobuf_c_message_unpack(m->descriptor, NULL, na, a);
	if (!again && has_unknown(m)) {
		free(a);
		return;
	}
	if (!again)
		fail(m, "own packed output (%zu bytes) does not unpack", na);
	b = packed(again, &nb);
	if (na != nb || memcmp(a, b, na) != 0)
		fail(m, "pack is not a fixed point: %zu then %zu bytes", na, nb);
	free(a);
	free(b);
	protobuf_c_message_free_unpacked(again, NULL);
}

static void check_json(const ProtobufCMessage *m)
{
	ProtobufCMessage *back = NULL;
	char *json = NULL, *again = NULL;
	bc_error err = {0};

	if (pbjson_write(m, 0, &json) < 0)
		abort();
	if (pbjson_read(m->descriptor, json, strlen(json), strlen(json), &back, &err) < 0) {
		fprintf(stderr, "fuzz_unpack: own JSON refused: %s\njson: %s\n", err.message, json);
		abort();
	}
	if (pbjson_write(back, 0, &again) < 0 || strcmp(json, again) != 0) {
		fprintf(stderr, "fuzz_unpack: JSON not stable\n1: %s\n2: %s\n", json, again);
		abort();
	}
	free(json);
	free(again);
	protobuf_c_message_free_unpacked(back, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > UNPACK_MAX_BYTES)
		return 0;
	for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
		ProtobufCMessage *m = protobuf_c_message_unpack(descs[i], NULL, size, data);

		if (!m)
			continue;
		check_pack(m, size);
		check_json(m);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	return 0;
}
