/* mcp_internal.h: what common/mcp.c (JSON-RPC framing and methods) and
 * common/mcp_tools.c (the tool table) share: a span-based JSON scanner over
 * the message text and the tool calls; answers are written with jsonw's
 * free-form calls. */
#ifndef BC_MCP_INTERNAL_H
#define BC_MCP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "jsonw.h"
#include "mcp.h"

#define MCP_JSON_DEPTH 32

/* A piece of the message text: one JSON value, unparsed. */
struct mcp_span {
	const char *p;
	size_t n;
};

/* Advance *i past the well-formed JSON value at s[*i] (leading whitespace
 * skipped); -EINVAL for malformed text or nesting deeper than
 * MCP_JSON_DEPTH. */
int mcp_json_skip(const char *s, size_t n, size_t *i, int depth);

/* The next member of the validated object o from *i (start at 0): 1 with
 * *ret_key (malloc'd, decoded) and *ret_val, 0 at the end, -EINVAL or
 * -ENOMEM. */
int mcp_json_next(struct mcp_span o, size_t *i, char **ret_key, struct mcp_span *ret_val);

/* The first member key of the validated object o: true with *ret_val. */
bool mcp_json_get(struct mcp_span o, const char *key, struct mcp_span *ret_val);

/* The JSON string at v decoded (malloc'd, no NUL inside), or NULL when v is
 * not a string or holds a NUL. */
char *mcp_json_str(struct mcp_span v);

/* mcp_tools.c */

/* A tool's annotations. */
#define MCP_HINT_READ_ONLY 1u
#define MCP_HINT_DESTRUCTIVE 2u
#define MCP_HINT_IDEMPOTENT 4u
#define MCP_HINT_OPEN_WORLD 8u

/* Append one tool of tools/list to b: its name, title, description, input
 * and output schemas (JSON text) and annotations (MCP_HINT_*). */
void mcp_tool_put(struct jsonw *b, const char *name, const char *title, const char *description,
		  const char *input, const char *output, unsigned hints);

/* Append the tools/list array to b: every tool, or with gate the ones the
 * API's answers show the caller. */
void mcp_tools_put(struct mcp_server *s, bool gate, struct jsonw *b);

/* Run tool name with the arguments object args (n == 0: none). 0 with
 * *ret_result (a CallToolResult, malloc'd); -ENOENT for an unknown tool;
 * -ENOMEM. A refused call or bad arguments are results with isError. */
int mcp_tool_call(struct mcp_server *s, const char *name, struct mcp_span args,
		  char **ret_result);

/* A CallToolResult holding text; with structured, text (a JSON object)
 * as structuredContent too. 0 and *ret, or -ENOMEM. */
int mcp_tool_result(const char *text, bool structured, bool is_error, char **ret);

/* A refused call as a result with isError: the API's error body
 * ({"error":{code, message, details}}), with key (if not NULL) as
 * idempotencyKey beside it. */
int mcp_tool_error(const bc_error *e, const char *key, char **ret);

/* mcp_exec.c: the tools that run a command (run_command, write_file,
 * read_file), offered only when s->api->exec is set. */
void mcp_exec_tools_put(struct mcp_server *s, struct jsonw *b);
/* As mcp_tool_call, for those tools. */
int mcp_exec_call(struct mcp_server *s, const char *name, struct mcp_span args,
		  char **ret_result);

#endif
