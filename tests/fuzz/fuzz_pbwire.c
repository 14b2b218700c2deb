/* fuzz_pbwire.c: pbwire_find_nul on arbitrary bytes (the first byte picks
 * the descriptor), walked as request messages the controller reads (nested
 * messages, repeated fields, map entries, oneofs). Beyond memory safety and
 * termination: the answer is one of 0, -EILSEQ, -EBADMSG; bytes protobuf-c
 * unpacks are never called malformed; and protobuf-c's own packed output of
 * what it unpacked (strings as C strings) always walks clean. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descs[] = {
	&bc__compute__v1__create_sandbox_template_request__descriptor,
	&bc__compute__v1__update_sandbox_template_request__descriptor,
	&bc__compute__v1__create_instance_request__descriptor,
	&bc__node__v1__status_report__descriptor,
	&bc__node__v1__join_request__descriptor,
	&bc__node__v1__node_update__descriptor,
};

static void check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t size)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size, data);
	int r = pbwire_find_nul(d, data, size);
	uint8_t *buf;
	size_t n;

	if (r != 0 && r != -EILSEQ && r != -EBADMSG)
		abort();
	if (!m)
		return;
	if (r == -EBADMSG) {
		fprintf(stderr, "fuzz_pbwire: %s: protobuf-c unpacks what the walker refuses\n",
			d->name);
		abort();
	}
	/* protobuf-c's own output carries strings as C strings: never a NUL */
	n = protobuf_c_message_get_packed_size(m);
	buf = malloc(n + 1);
	if (!buf || protobuf_c_message_pack(m, buf) != n)
		abort();
	r = pbwire_find_nul(d, buf, n);
	if (r != 0) {
		fprintf(stderr, "fuzz_pbwire: %s: packed output walks as %d\n", d->name, r);
		abort();
	}
	free(buf);
	protobuf_c_message_free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCMessageDescriptor *d;

	if (size < 1 || size > 65536)
		return 0;
	d = descs[data[0] % (sizeof(descs) / sizeof(descs[0]))];
	check(d, data + 1, size - 1);
	return 0;
}
