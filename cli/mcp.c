/* mcp.c: `bcctl mcp`, an MCP server over stdio (the way desktop and CLI
 * agents start servers): one JSON-RPC message per line on stdin, one
 * answer per line on stdout, nothing else on stdout; diagnostics go to
 * stderr. The protocol and the tools are common/mcp.c's; each tool's API
 * call is cli_call() with the CLI's own connection settings and token
 * (flags, BC_* environment, config file), so the server acts exactly as
 * the CLI would. run_command, write_file and read_file run their command
 * through cli_sandbox_run(): `sandbox exec`'s grant, tunnel and stock ssh
 * with --key, --ssh and --accept-host-key as there. Ends at end of
 * input. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mcp.h"
#include "util.h"

/* What the API calls and the exec tools need. */
struct mcp_cli {
	struct cli_ctx *ctx;
	struct cli_exec_opts exec;
};

static int api_call(void *arg, const ProtobufCServiceDescriptor *svc, const char *method,
		    const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret,
		    bc_error *err)
{
	struct cli_ctx *ctx = ((struct mcp_cli *)arg)->ctx;
	int r;

	bc_error_clear(&ctx->err);
	r = cli_call(ctx, svc, method, req, extra_ms, ret);
	if (r == -BC_EDOMAIN || (r < 0 && ctx->err.code != BC_OK))
		*err = ctx->err;
	else if (r < 0) /* a local configuration error, printed on stderr */
		bc_error_set(err, BC_INVALID_CONFIG, "bcctl cannot reach the API: see its stderr");
	return r < 0 ? -BC_EDOMAIN : 0;
}

static int api_exec(void *arg, const struct mcp_exec_req *q, struct mcp_exec_out *ret,
		    bc_error *err)
{
	struct mcp_cli *m = arg;
	int r;

	bc_error_clear(&m->ctx->err);
	r = cli_sandbox_run(m->ctx, &m->exec, q, ret);
	if (r < 0)
		*err = m->ctx->err;
	if (r < 0 && err->code == BC_OK)
		bc_error_set(err, BC_INTERNAL, "the command could not run: see bcctl's stderr");
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
	struct mcp_cli m = {.ctx = ctx};
	struct mcp_api api = {.ctx = &m, .call = api_call, .exec = api_exec, .server_name = "bc",
			      .server_version = BC_VERSION};
	struct mcp_server s = {.api = &api};
	const struct cli_flag flags[] = {
		{.name = "key", .type = CLI_STR, .dst = &m.exec.key, .meta = "FILE",
		 .help = "private key for run_command and the file tools; its FILE.pub is "
			 "certified (default ~/.ssh/id_ed25519)"},
		{.name = "ssh", .type = CLI_STR, .dst = &m.exec.prog, .meta = "PROG",
		 .help = "the OpenSSH client to run (default ssh)"},
		{.name = "accept-host-key", .type = CLI_BOOL, .dst = &m.exec.accept_host_key,
		 .help = "trust a guest without a host certificate on first use"},
	};
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	signal(SIGPIPE, SIG_IGN); /* a closed pipe is an error to return, not a death */
	while ((n = read_line(&line, &cap)) != -1) {
		/* a line too long to read is answered as the parse error it
		 * would be cut short */
		r = n == -E2BIG ? serve_line(&s, "[", 1) : serve_line(&s, line, (size_t)n);
		if (r < 0)
			break;
	}
	return r == -EIO ? bc_error_set(&ctx->err, BC_INTERNAL, "writing to stdout failed") : r;
}
