/* fuzz_static.c: the static files' decision (common/rpc_static.c) on
 * arbitrary method, path and If-None-Match (the input split at NUL bytes).
 * Oracles: the status is one of 200, 301, 304, 404, 405; a file is served
 * (200, 304) only for a path equal to one of the table's byte for byte, and
 * only to GET or HEAD; 304 only with an If-None-Match; 301 only for the
 * prefix without its slash; the head of a 200 or 304 carries the CSP and
 * names the file's ETag. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_static.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned char body[] = "x";
static const struct rpc_static_file files[] = {
	{"/console/", "text/html", body, 1, "\"aa\""},
	{"/console/app.js", "text/javascript", body, 1, "\"bb\""},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 3), *part[3];
	struct rpc_static_reply r;
	size_t k = 0;

	memcpy(buf, data, size);
	buf[size] = buf[size + 1] = buf[size + 2] = '\0';
	part[0] = buf;
	for (size_t i = 0; i < size + 2 && k < 2; i++)
		if (buf[i] == '\0')
			part[++k] = buf + i + 1;
	while (k < 2)
		part[++k] = buf + size + 2;
	rpc_static_decide(files, 2, "/console/", part[0], part[1], *part[2] ? part[2] : NULL, &r);
	switch (r.status) {
	case 200:
	case 304: {
		char *h = rpc_static_head(&r, true);

		if (!r.file || strcmp(r.file->path, part[1]) != 0 ||
		    (strcmp(part[0], "GET") && strcmp(part[0], "HEAD")) ||
		    (r.status == 304 && !*part[2]) || !strstr(h, "Content-Security-Policy: ") ||
		    !strstr(h, r.file->etag))
			abort();
		free(h);
		break;
	}
	case 301:
		if (strcmp(part[1], "/console") != 0)
			abort();
		break;
	case 404:
	case 405:
		break;
	default:
		abort();
	}
	free(buf);
	return 0;
}
