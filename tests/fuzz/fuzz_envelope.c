/* fuzz_envelope.c: common/envelope.c's two parsers of bytes it did not
 * write itself: envelope_open (and envelope_key_id, envelope_rewrap) on an
 * arbitrary envelope, as a row of sealed_blobs could hold, and
 * envelope_ring_parse on an arbitrary key file. Nothing may crash, read
 * out of bounds or leak; an envelope the fuzzer makes up must never open
 * (it would need a valid GCM tag under the ring's key). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"

static const char aad[] = "sealed_01jdzq3m5n8p9r7s6t5v4w3x2y\0acme";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct envelope_ring *ring;
	struct envelope_ring *parsed = NULL;
	unsigned char *re = NULL;
	char kid[ENVELOPE_KID_MAX], *out = NULL, *text;
	size_t n = 0;
	int line = 0;

	if (!ring && envelope_ring_parse("kek_a 00112233445566778899aabbccddeeff00112233445566778899"
					 "aabbccddeeff\n", &ring, NULL) < 0)
		abort();
	if (envelope_open(ring, aad, sizeof(aad), data, size, &out, &n) == 0)
		abort(); /* a forged envelope opened */
	if (envelope_rewrap(ring, aad, sizeof(aad), data, size, &re, &n) == 0)
		abort();
	envelope_key_id(data, size, kid);
	text = malloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	if (envelope_ring_parse(text, &parsed, &line) == 0) {
		char *back = envelope_ring_format(parsed);
		free(back);
		envelope_ring_free(parsed);
	}
	free(text);
	return 0;
}
