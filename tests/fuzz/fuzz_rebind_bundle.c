/* fuzz_rebind_bundle.c: the identity rebind bundle (agent/rebind_bundle.c,
 * rb_bundle_parse) on arbitrary bytes, and the archive of what it accepts.
 * Oracles: no crash, leak or sanitizer report; an accepted bundle has a
 * valid-looking account, principals ending in a newline, a key with its
 * certificate or neither, at most RB_NICS_MAX NICs; parsing it again gives
 * the same answer; its archive builds, in whole blocks, clear of the
 * acknowledgement area. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rebind_bundle.h"

#define ID "inst_01jdzq3m5n8p9r7s6t5v4w3x2y"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rb_bundle b, again;
	char why[RB_WHY_MAX];
	void *tar = NULL;
	size_t len = 0;

	if (rb_bundle_parse((const char *)data, size, ID, &b, why) != 0)
		return 0;
	if (!*b.account || !b.principals || b.principals[strlen(b.principals) - 1] != '\n' ||
	    !b.host_key != !b.host_cert || b.n_nics > RB_NICS_MAX)
		abort();
	if (rb_bundle_parse((const char *)data, size, ID, &again, why) != 0 ||
	    strcmp(b.principals, again.principals) != 0 || b.n_nics != again.n_nics)
		abort();
	if (rb_tar(&b, "0123456789abcdef0123456789abcdef", &tar, &len) != 0 || len % 512 ||
	    len > RB_DISK_BYTES - RB_ACK_BYTES)
		abort();
	free(tar);
	rb_bundle_clear(&again);
	rb_bundle_clear(&b);
	return 0;
}
