/* fuzz_http: the JSON/HTTP transport's request-head parser, which reads
 * bytes from anyone who can reach the port. Whatever the input, the parser
 * must stay inside the head, either refuse it with an HTTP status or
 * produce a request whose every string lies inside the buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

static int inside(const char *p, const char *buf, size_t len)
{
	return p >= buf && p < buf + len && memchr(p, '\0', (size_t)(buf + len - p)) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rpc_http_request req;
	const char *why = NULL;
	size_t head;
	char *buf;
	int r;

	if (size > RPC_HTTP_MAX_HEAD * 2)
		return 0;
	head = rpc_http_head_len((const char *)data, size);
	if (head == 0 || head > size)
		return 0;
	buf = malloc(head + 1);
	memcpy(buf, data, head);
	buf[head] = '\0';
	memset(&req, 0, sizeof(req));
	r = rpc_http_parse_head(buf, head, &req, &why);
	if (r == 0) {
		if (!inside(req.method, buf, head + 1) || !inside(req.target, buf, head + 1) ||
		    (req.query && !inside(req.query, buf, head + 1)))
			abort();
		if (req.n_headers > RPC_HTTP_MAX_HEADERS)
			abort();
		for (size_t i = 0; i < req.n_headers; i++)
			if (!inside(req.headers[i].name, buf, head + 1) ||
			    !inside(req.headers[i].value, buf, head + 1))
				abort();
		(void)rpc_http_header(&req, "content-type");
		(void)rpc_http_is_json(rpc_http_header(&req, "content-type"));
	} else if (r < 400 || r > 599 || !why) {
		abort();
	}
	free(buf);
	return 0;
}
