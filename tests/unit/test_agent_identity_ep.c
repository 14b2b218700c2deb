/* test_agent_identity_ep.c: the identity endpoint's pure parts: the
 * request parser (exactly four small requests, strictly HTTP/1.x, one per
 * connection), the per-instance rate bucket, and the controller code to
 * HTTP status mapping. */
#include <stdio.h>
#include <string.h>

#include "agent/identity_ep.h"
#include "err.h"
#include "tap.h"

static int parse(const char *req, struct ie_req *q)
{
	memset(q, 0, sizeof(*q));
	return ie_parse(req, strlen(req), q);
}

static void test_valid(void)
{
	const char *attest = "POST /bc/identity/attest HTTP/1.1\r\nHost: 10.77.0.1:9470\r\n"
			     "Content-Type: text/plain\r\nContent-Length: 9\r\n\r\nbcb_0123\n";
	struct ie_req q;

	is_int(parse(attest, &q), 1, "attest: a whole request parses");
	is_int(q.route, IE_ROUTE_ATTEST, "attest: its route");
	is_str(q.body, "bcb_0123", "attest: the body without its trailing newline");
	for (size_t k = 0; k < strlen(attest); k++) {
		struct ie_req p;

		if (ie_parse(attest, k, &p) != 0) {
			ok(0, "every proper prefix needs more (%zu bytes)", k);
			return;
		}
	}
	ok(1, "every proper prefix of a valid request needs more bytes");
	is_int(parse("POST /bc/identity/renew HTTP/1.0\ncontent-length:   6\n\nbcc_ab", &q), 1,
	       "renew: HTTP/1.0, bare newlines, header name in lower case");
	is_int(q.route, IE_ROUTE_RENEW, "renew: its route");
	is_str(q.body, "bcc_ab", "renew: its body");
	is_int(parse("GET /bc/identity/bootstrap HTTP/1.1\r\nHost: x\r\n\r\n", &q), 1,
	       "bootstrap: a GET without a body");
	is_int(q.route, IE_ROUTE_BOOTSTRAP, "bootstrap: its route");
	is_str(q.body, "", "bootstrap: no body");
	is_int(parse("GET /bc/identity/bootstrap HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &q), 1,
	       "bootstrap: Content-Length 0 is no body");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 14\r\n\r\nrunning:bcc_ab", &q),
	       1, "state: a POST with its body");
	is_int(q.route, IE_ROUTE_STATE, "state: its route");
	is_str(q.body, "running:bcc_ab", "state: the body whole (bcd splits it)");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 4\r\n\r\nab\r\n", &q), 1,
	       "a CRLF after the body");
	is_str(q.body, "ab", "without it");
}

static void test_malformed(void)
{
	char big[IE_REQUEST_MAX + 64], body[IE_BODY_MAX + 2];
	struct ie_req q;
	int n;

	is_int(parse("PUT ", &q), -1, "another method: malformed at once");
	is_int(parse("POST /bc/identity/attesx", &q), -1, "another path: malformed at once");
	is_int(parse("POST /bc/identity/attest/x HTTP/1.1\r\nContent-Length: 1\r\n\r\na", &q), -1,
	       "a longer path");
	is_int(parse("GET /bc/identity/attest HTTP/1.1\r\n\r\n", &q), -1, "GET of attest");
	is_int(parse("POST /bc/identity/bootstrap HTTP/1.1\r\nContent-Length: 1\r\n\r\na", &q), -1,
	       "POST of bootstrap");
	is_int(parse("POST /bc/identity/attest HTTP/2.0\r\nContent-Length: 1\r\n\r\na", &q), -1,
	       "not HTTP/1.x");
	is_int(parse("POST /bc/identity/attest HTTP/1.1 x\r\nContent-Length: 1\r\n\r\na", &q), -1,
	       "trailing junk on the request line");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\n\r\n", &q), -1, "a POST without a body");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\n\r\n", &q), -1, "a state without a body");
	is_int(parse("GET /bc/identity/state HTTP/1.1\r\n\r\n", &q), -1, "GET of state");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 9\r\n\r\nidle: bcc", &q),
	       -1, "a space in a state body");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 6\r\n\r\nbcc_ab", &q), -1,
	       "a state body without its state");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 7\r\n\r\n:bcc_ab", &q), -1,
	       "an empty state");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 5\r\n\r\nidle:", &q), -1,
	       "an empty token");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 21\r\n\r\n"
		     "aaaaaaaaaaaaaaaa:bcc_", &q), -1, "a state longer than IE_STATE_MAX");
	is_int(parse("POST /bc/identity/state HTTP/1.1\r\nContent-Length: 20\r\n\r\n"
		     "aaaaaaaaaaaaaaa:bcc_", &q), 1, "a state of IE_STATE_MAX bytes");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &q), -1,
	       "a POST with an empty body");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 1\r\n\r\n\n", &q), -1,
	       "a body of only a newline");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 1x\r\n\r\na", &q), -1,
	       "a Content-Length that is not a number");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: -1\r\n\r\na", &q), -1,
	       "a negative Content-Length");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length:\r\n\r\na", &q), -1,
	       "an empty Content-Length");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1"
		     "\r\n\r\na", &q), -1, "a repeated Content-Length");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		     "Content-Length: 1\r\n\r\na", &q), -1, "Transfer-Encoding");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 99999\r\n\r\na", &q), -1,
	       "a Content-Length beyond the body bound");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 1\r\n\r\nab", &q), -1,
	       "bytes after the body");
	is_int(parse("GET /bc/identity/bootstrap HTTP/1.1\r\n\r\nGET /", &q), -1,
	       "a second request on the connection");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 3\r\n\r\na b", &q), -1,
	       "a space in the body");
	is_int(parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 2\r\n\r\n\xc3\xa9", &q), -1,
	       "a body that is not ASCII");
	is_int(ie_parse("POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 1\r\n\r\n\0", 57, &q),
	       -1, "a NUL byte");
	memset(body, 'a', sizeof(body));
	n = snprintf(big, sizeof(big), "POST /bc/identity/attest HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
		     "%.*s", IE_BODY_MAX + 1, IE_BODY_MAX + 1, body);
	is_int(ie_parse(big, (size_t)n, &q), -1, "a body of IE_BODY_MAX + 1 bytes");
	n = snprintf(big, sizeof(big), "POST /bc/identity/attest HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
		     "%.*s", IE_BODY_MAX, IE_BODY_MAX, body);
	is_int(ie_parse(big, (size_t)n, &q), 1, "a body of IE_BODY_MAX bytes");
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /bc/identity/bootstrap HTTP/1.1\r\nX: ", 40);
	is_int(ie_parse(big, IE_REQUEST_MAX - 1, &q), 0, "headers short of the bound: more");
	is_int(ie_parse(big, IE_REQUEST_MAX, &q), -1, "no end of headers within the bound");
}

static void test_rate(void)
{
	struct ie_rate r = {0};
	int taken = 0;

	for (int i = 0; i < IE_RATE_BURST + 5; i++)
		taken += ie_rate_take(&r, 1000);
	is_int(taken, IE_RATE_BURST, "a burst of IE_RATE_BURST, then refused");
	ok(!ie_rate_take(&r, 1000 + IE_RATE_REFILL_MS - 1), "still empty just before a refill");
	ok(ie_rate_take(&r, 1000 + IE_RATE_REFILL_MS), "one token after IE_RATE_REFILL_MS");
	ok(!ie_rate_take(&r, 1000 + IE_RATE_REFILL_MS), "and only one");
	taken = 0;
	for (int i = 0; i < IE_RATE_BURST + 5; i++)
		taken += ie_rate_take(&r, 1000000);
	is_int(taken, IE_RATE_BURST, "after a long pause: a full bucket, never more");
}

static void test_status(void)
{
	is_int(ie_http_status(BC_INVALID_INPUT), 400, "INVALID_INPUT: 400");
	is_int(ie_http_status(BC_ACCESS_DENIED), 403, "ACCESS_DENIED: 403");
	is_int(ie_http_status(BC_CONFLICT), 409, "CONFLICT: 409");
	is_int(ie_http_status(BC_INVALID_STATE), 409, "INVALID_STATE: 409");
	is_int(ie_http_status(BC_UNAVAILABLE), 503, "UNAVAILABLE: 503");
	is_int(ie_http_status(BC_OK), 503, "no code (transport): 503");
	is_str(ie_result_name(IE_RATE_LIMITED), "rate-limited", "result names");
	is_str(ie_result_name(IE_UNKNOWN_SOURCE), "unknown-source", "result names");
	is_str(ie_result_name(IE_REPORTED), "reported", "result names");
	is_str(ie_result_name(IE_SERVED), "served", "result names");
}

int main(void)
{
	test_valid();
	test_malformed();
	test_rate();
	test_status();
	done_testing();
}
