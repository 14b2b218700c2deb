/* test_agent_guestsig.c: the guest-up signal's pure parts: the request
 * parser (what counts as "POST /bc/ready/<id>") and the attribution rule
 * (a guest speaks only for itself, once, while it runs). */
#include <string.h>

#include "agent/guestsig.h"
#include "tap.h"

static int parse(const char *req, char id[RT_ID_MAX + 1])
{
	id[0] = '\0';
	return gs_parse(req, strlen(req), id);
}

static void test_parse(void)
{
	char id[RT_ID_MAX + 1], big[GS_REQUEST_MAX + 16];
	const char *full = "POST /bc/ready/inst_01abc HTTP/1.1\r\nHost: 10.77.0.1:9469\r\n"
			   "Content-Length: 0\r\n\r\n";

	is_int(parse(full, id), 1, "a whole request parses");
	is_str(id, "inst_01abc", "its id");
	is_int(parse("POST /bc/ready/inst-2 HTTP/1.0\n\n", id), 1, "HTTP/1.0 with bare newlines");
	is_str(id, "inst-2", "its id");
	for (size_t k = 0; k < strlen(full); k++) {
		char part[256];

		memcpy(part, full, k);
		id[0] = '\0';
		if (gs_parse(part, k, id) != 0) {
			ok(0, "every proper prefix needs more (%zu bytes)", k);
			return;
		}
	}
	ok(1, "every proper prefix of a valid request needs more bytes");
	is_int(parse("GET /bc/ready/inst_a HTTP/1.1\r\n\r\n", id), -1, "GET: malformed");
	is_int(parse("GET ", id), -1, "a wrong method is malformed at once");
	is_int(parse("POST /bc/ready/ HTTP/1.1\r\n\r\n", id), -1, "no id");
	is_int(parse("POST /bc/ready/inst_a/x HTTP/1.1\r\n\r\n", id), -1, "a longer path");
	is_int(parse("POST /bc/ready/inst%20a HTTP/1.1\r\n\r\n", id), -1, "an escape in the id");
	is_int(parse("POST /bc/ready/inst_a HTTP/2.0\r\n\r\n", id), -1, "not HTTP/1.x");
	is_int(parse("POST /bc/ready/inst_a HTTP/1.1 x\r\n\r\n", id), -1, "trailing junk");
	is_int(parse("POST /bc/readyx/inst_a HTTP/1.1\r\n\r\n", id), -1, "another path");
	is_int(gs_parse("POST /bc/ready/a\0 HTTP/1.1\r\n\r\n", 30, id), -1, "a NUL byte");
	memset(big, 'a', sizeof(big));
	memcpy(big, "POST /bc/ready/", 15);
	is_int(gs_parse(big, RT_ID_MAX + 40, id), -1, "an id longer than RT_ID_MAX");
	memcpy(big, "POST /bc/ready/a HTTP/1.1\r\nX: ", 30);
	is_int(gs_parse(big, GS_REQUEST_MAX - 1, id), 0, "headers short of the bound: more");
	is_int(gs_parse(big, GS_REQUEST_MAX, id), -1, "no end of headers within the bound");
}

static void test_attribute(void)
{
	const struct gs_addr v[] = {
		{"inst_a", "10.77.0.10", "running"}, {"inst_a", "fd77::a", "running"},
		{"inst_b", "10.77.0.11", "running"}, {"inst_c", "10.77.0.12", "starting"},
		{"inst_d", "10.77.0.13", "paused"},  {"inst_e", "10.77.0.20", "running"},
		{"inst_f", "10.77.0.20", "running"},
	};
	const size_t n = sizeof(v) / sizeof(v[0]);

	is_int(gs_attribute(v, n, "10.77.0.10", "inst_a", false), GS_ACCEPTED, "its own address");
	is_int(gs_attribute(v, n, "fd77:0::a", "inst_a", false), GS_ACCEPTED,
	       "its IPv6 address, written otherwise");
	is_int(gs_attribute(v, n, "::ffff:10.77.0.10", "inst_a", false), GS_ACCEPTED,
	       "its IPv4 address as v4-mapped");
	is_int(gs_attribute(v, n, "10.77.0.10", "inst_a", true), GS_REPEATED, "already marked");
	is_int(gs_attribute(v, n, "10.77.0.11", "inst_a", false), GS_OTHER_INSTANCE,
	       "another instance's guest speaks for inst_a");
	is_int(gs_attribute(v, n, "10.77.0.99", "inst_a", false), GS_UNKNOWN_SOURCE,
	       "an address no instance holds");
	is_int(gs_attribute(v, n, "10.77.0.20", "inst_e", false), GS_UNKNOWN_SOURCE,
	       "an address two instances hold");
	is_int(gs_attribute(v, n, "nonsense", "inst_a", false), GS_UNKNOWN_SOURCE, "no address");
	is_int(gs_attribute(v, n, "10.77.0.12", "inst_c", false), GS_EARLY, "not running yet");
	is_int(gs_attribute(v, n, "10.77.0.13", "inst_d", false), GS_EARLY, "paused");
	is_int(gs_attribute(NULL, 0, "10.77.0.10", "inst_a", false), GS_UNKNOWN_SOURCE,
	       "no spec");
	is_str(gs_result_name(GS_OTHER_INSTANCE), "other-instance", "result names");
	/* the rule identity_ep.c shares: the source's one instance */
	ok(gs_source(v, n, "fd77::a") == &v[1], "gs_source: the entry holding the address");
	ok(gs_source(v, n, "10.77.0.20") == NULL, "gs_source: none when two instances hold it");
	ok(gs_source(v, n, "10.77.0.98") == NULL, "gs_source: none for a stranger");
}

int main(void)
{
	test_parse();
	test_attribute();
	done_testing();
}
