/* fuzz_identity_req.c: the identity endpoint's request parser
 * (agent/identity_req.c, ie_parse) on arbitrary bytes, as a guest may send
 * them. Oracles: no crash or sanitizer report; an accepted request has one
 * of the four routes, a body of printable ASCII without spaces, at most
 * IE_BODY_MAX bytes, empty exactly for the GET, a state report's
 * "STATE:TOKEN" with 1..IE_STATE_MAX bytes of state and a token; every proper prefix of an
 * accepted request asks for more bytes (never accepted, never refused), and
 * parsing again gives the same answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/identity_ep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ie_req q, again;
	size_t n;
	int r;

	memset(&q, 0, sizeof(q));
	r = ie_parse((const char *)data, size, &q);
	if (r != 1)
		return 0;
	n = strlen(q.body);
	if (n > IE_BODY_MAX || (q.route == IE_ROUTE_BOOTSTRAP) != (n == 0))
		abort();
	for (size_t i = 0; i < n; i++)
		if (q.body[i] <= ' ' || q.body[i] > '~')
			abort();
	if (q.route == IE_ROUTE_STATE) {
		const char *colon = strchr(q.body, ':');

		if (!colon || colon == q.body || colon - q.body > IE_STATE_MAX || !colon[1])
			abort();
	}
	if (ie_parse((const char *)data, size, &again) != 1 || again.route != q.route ||
	    strcmp(again.body, q.body) != 0)
		abort();
	for (size_t k = 0; k < size; k++)
		if (ie_parse((const char *)data, k, &again) != 0)
			abort();
	return 0;
}
