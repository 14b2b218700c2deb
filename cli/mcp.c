/* mcp.c: `bcctl mcp`, an MCP server over stdio (the way desktop and CLI
 * agents start servers): one JSON-RPC message per line on stdin, one
 * answer per line on stdout, nothing else on stdout; diagnostics go to
 * stderr. The protocol and the tools are common/mcp.c's; each tool's API
 * call is cli_call() with the CLI's own connection settings and token
 * (flags, BC_* environment, config file), so the server acts exactly as
 * the CLI would. Ends at end of input. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mcp.h"
#include "util.h"

static int api_call(void *arg, const ProtobufCServiceDescriptor *svc, const char *method,
		    const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret,
		    bc_error *err)
{
	struct cli_ctx *ctx = arg;
	int r;

	bc_error_clear(&ctx->err);
	r = cli_call(ctx, svc, method, req, extra_ms, ret);
	if (r == -BC_EDOMAIN || (r < 0 && ctx->err.code != BC_OK))
		*err = ctx->err;
	else if (r < 0) /* a local configuration error, printed on stderr */
		bc_error_set(err, BC_INVALID_CONFIG, "bcctl cannot reach the API: see its stderr");
	return r < 0 ? -BC_EDOMAIN : 0;
}

/* Answer one line; blank lines are skipped. 0, or -EIO once stdout is
 * gone. */
static int serve_line(struct mcp_server *s, const char *line, size_t n)
{
	_cleanup_free_ char *out = NULL;
	int r;

	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	if (n == 0)
		return 0;
	if ((r = mcp_handle(s, line, n, &out)) < 0)
		return r;
	if (!out)
		return 0;
	if (fputs(out, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
		return -EIO;
	return 0;
}

/* Read one line of at most MCP_MESSAGE_MAX bytes into *buf: its length,
 * -E2BIG when it was longer (the rest is read and dropped), -1 at end of
 * input. */
static ssize_t read_line(char **buf, size_t *cap)
{
	size_t n = 0;
	bool big = false;
	int c;

	while ((c = getc_unlocked(stdin)) != EOF) {
		if (c == '\n')
			return big ? -E2BIG : (ssize_t)n;
		if (n >= MCP_MESSAGE_MAX) {
			big = true;
			continue;
		}
		if (n + 1 >= *cap) {
			*cap = *cap ? *cap * 2 : 4096;
			*buf = xrealloc(*buf, *cap);
		}
		(*buf)[n++] = (char)c;
	}
	return big ? -E2BIG : n > 0 ? (ssize_t)n : -1;
}

int cli_mcp(struct cli_ctx *ctx, int argc, char **argv)
{
	struct mcp_api api = {.ctx = ctx, .call = api_call, .server_name = "bc",
			      .server_version = BC_VERSION};
	struct mcp_server s = {.api = &api};
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int r = cli_args_parse(ctx, NULL, 0, argc, argv);

	if (r != 0)
		return r;
	while ((n = read_line(&line, &cap)) != -1) {
		/* a line too long to read is answered as the parse error it
		 * would be cut short */
		r = n == -E2BIG ? serve_line(&s, "[", 1) : serve_line(&s, line, (size_t)n);
		if (r < 0)
			break;
	}
	return r == -EIO ? bc_error_set(&ctx->err, BC_INTERNAL, "writing to stdout failed") : r;
}
