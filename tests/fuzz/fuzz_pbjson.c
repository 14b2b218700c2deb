/* fuzz_pbjson.c: pbjson_read on arbitrary bytes as four message types (a
 * plain request, nested lists, a oneof, a map). Whatever it accepts must
 * write (compact, and pretty with defaults), read back, and pack to the
 * same protobuf bytes; a mismatch aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "pbjson.h"

#define MAX_JSON 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descs[] = {
	&bc__compute__v1__create_instance_request__descriptor,
	&bc__node__v1__node_spec__descriptor,
	&bc__node__v1__node_update__descriptor,
	&bc__node__v1__status_report__descriptor,
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

static void __attribute__((noreturn)) mismatch(const char *what, const char *json, const bc_error *err)
{
	fprintf(stderr, "fuzz_pbjson: %s\njson: %s\nerror: %s\n", what, json,
		err ? err->message : "-");
	abort();
}

static void check_roundtrip(const ProtobufCMessage *m, int flags)
{
	ProtobufCMessage *back = NULL;
	char *json = NULL, *again = NULL;
	bc_error err = {0};
	uint8_t *a, *b;
	size_t na, nb;

	if (pbjson_write(m, flags, &json) < 0)
		abort();
	if (pbjson_read(m->descriptor, json, strlen(json), strlen(json), &back, &err) < 0)
		mismatch("own output refused", json, &err);
	a = packed(m, &na);
	b = packed(back, &nb);
	if (na != nb || memcmp(a, b, na) != 0)
		mismatch("packed bytes differ after a round trip", json, NULL);
	if (pbjson_write(back, flags, &again) < 0)
		abort();
	if (strcmp(json, again) != 0)
		mismatch("second write differs", json, NULL);
	free(a);
	free(b);
	free(json);
	free(again);
	protobuf_c_message_free_unpacked(back, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
		ProtobufCMessage *m = NULL;
		bc_error err = {0};

		if (pbjson_read(descs[i], (const char *)data, size, MAX_JSON, &m, &err) < 0)
			continue;
		check_roundtrip(m, 0);
		check_roundtrip(m, PBJSON_PRETTY | PBJSON_EMIT_DEFAULTS);
		protobuf_c_message_free_unpacked(m, NULL);
	}
	return 0;
}
