/* fuzz_snapshot_args.c: instance.snapshot's arguments (agent/snapshot_args.c,
 * snap_parse_args) on arbitrary bytes. Oracles: no crash, leak or sanitizer
 * report; an accepted object gives a non-empty URL of at most SNAP_URL_MAX
 * bytes with no NUL inside, and parsing it again gives the same answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *url = NULL, *again = NULL;
	bool mem = false, mem2 = false;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (snap_parse_args(text, &url, &mem) == 0) {
		if (!*url || strlen(url) > SNAP_URL_MAX)
			abort();
		if (snap_parse_args(text, &again, &mem2) != 0 || strcmp(url, again) != 0 || mem != mem2)
			abort();
	}
	free(url);
	free(again);
	free(text);
	return 0;
}
