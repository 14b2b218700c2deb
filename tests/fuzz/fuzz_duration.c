/* fuzz_duration.c: duration_parse_ms on arbitrary text. It must only ever
 * answer 0 with a non-negative value, -EINVAL or -ERANGE, and agree with
 * itself on a plain number of milliseconds. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	int64_t ms = -1;
	int r;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	r = duration_parse_ms(s, &ms);
	if (r != 0 && r != -EINVAL && r != -ERANGE)
		abort();
	if (r == 0 && ms < 0)
		abort();
	if (r == 0 && size > 0 && size == strspn(s, "0123456789") && ms != strtoll(s, NULL, 10))
		abort();
	free(s);
	return 0;
}
