/* mcp.c: one JSON-RPC 2.0 message of the Model Context Protocol in, its
 * answer out (mcp.h). The message is validated whole first (a parse error
 * is -32700), then read member by member as spans of the original text, so
 * the request's id goes back byte for byte whatever number or string it
 * is. Batches (a JSON array) are refused: revision 2025-06-18 dropped
 * them. The tools themselves live in mcp_tools.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_lex.h"
#include "jsonw.h"
#include "mcp_internal.h"
#include "util.h"

/* ---- the scanner ---- */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && json_lex_ws(s[i]))
		i++;
	return i;
}

static int skip_string(const char *s, size_t n, size_t *i)
{
	struct json_lex_fault f;
	size_t len, used;
	char *out;

	if (*i >= n || s[*i] != '"' ||
	    json_lex_string(s + *i + 1, n - *i - 1, JSON_LEX_UTF8, &out, &len, &used, &f) < 0)
		return -EINVAL;
	free(out);
	*i += 1 + used;
	return 0;
}

static size_t digits(const char *s, size_t n, size_t i)
{
	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++;
	return i;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(const char *s, size_t n, size_t *i)
{
	size_t j = *i, k;

	if (j < n && s[j] == '-')
		j++;
	if (j < n && s[j] == '0')
		j++;
	else if ((k = digits(s, n, j)) > j)
		j = k;
	else
		return -EINVAL;
	if (j < n && s[j] == '.') {
		if ((k = digits(s, n, j + 1)) == j + 1)
			return -EINVAL;
		j = k;
	}
	if (j < n && (s[j] == 'e' || s[j] == 'E')) {
		j++;
		if (j < n && (s[j] == '+' || s[j] == '-'))
			j++;
		if ((k = digits(s, n, j)) == j)
			return -EINVAL;
		j = k;
	}
	*i = j;
	return 0;
}

static int skip_word(const char *s, size_t n, size_t *i, const char *w)
{
	size_t l = strlen(w);

	if (n - *i < l || memcmp(s + *i, w, l) != 0)
		return -EINVAL;
	*i += l;
	return 0;
}

static int skip_container(const char *s, size_t n, size_t *i, int depth)
{
	bool obj = s[*i] == '{';
	char close = obj ? '}' : ']';

	if (depth >= MCP_JSON_DEPTH)
		return -EINVAL;
	*i = skip_ws(s, n, *i + 1);
	if (*i < n && s[*i] == close) {
		(*i)++;
		return 0;
	}
	for (;;) {
		if (obj) {
			*i = skip_ws(s, n, *i);
			if (skip_string(s, n, i) < 0)
				return -EINVAL;
			*i = skip_ws(s, n, *i);
			if (*i >= n || s[*i] != ':')
				return -EINVAL;
			(*i)++;
		}
		if (mcp_json_skip(s, n, i, depth + 1) < 0)
			return -EINVAL;
		*i = skip_ws(s, n, *i);
		if (*i < n && s[*i] == ',') {
			(*i)++;
			continue;
		}
		if (*i < n && s[*i] == close) {
			(*i)++;
			return 0;
		}
		return -EINVAL;
	}
}

int mcp_json_skip(const char *s, size_t n, size_t *i, int depth)
{
	*i = skip_ws(s, n, *i);
	if (*i >= n)
		return -EINVAL;
	switch (s[*i]) {
	case '"':
		return skip_string(s, n, i);
	case '{':
	case '[':
		return skip_container(s, n, i, depth);
	case 't':
		return skip_word(s, n, i, "true");
	case 'f':
		return skip_word(s, n, i, "false");
	case 'n':
		return skip_word(s, n, i, "null");
	default:
		return skip_number(s, n, i);
	}
}

int mcp_json_next(struct mcp_span o, size_t *i, char **ret_key, struct mcp_span *ret_val)
{
	struct json_lex_fault f;
	size_t len, used, start;
	char *key;

	*i = skip_ws(o.p, o.n, *i == 0 ? skip_ws(o.p, o.n, 0) + 1 : *i);
	if (*i < o.n && o.p[*i] == ',')
		*i = skip_ws(o.p, o.n, *i + 1);
	if (*i >= o.n || o.p[*i] == '}')
		return 0;
	if (o.p[*i] != '"' || json_lex_string(o.p + *i + 1, o.n - *i - 1, JSON_LEX_UTF8, &key,
					      &len, &used, &f) < 0)
		return -EINVAL;
	*i = skip_ws(o.p, o.n, *i + 1 + used) + 1; /* past ':' */
	start = skip_ws(o.p, o.n, *i);
	*i = start;
	if (mcp_json_skip(o.p, o.n, i, 0) < 0) {
		free(key);
		return -EINVAL;
	}
	*ret_key = key;
	*ret_val = (struct mcp_span){o.p + start, *i - start};
	return 1;
}

bool mcp_json_get(struct mcp_span o, const char *key, struct mcp_span *ret_val)
{
	struct mcp_span v;
	size_t i = 0;
	char *k;

	while (mcp_json_next(o, &i, &k, &v) == 1) {
		bool hit = strcmp(k, key) == 0;

		free(k);
		if (hit) {
			*ret_val = v;
			return true;
		}
	}
	return false;
}

char *mcp_json_str(struct mcp_span v)
{
	struct json_lex_fault f;
	size_t len, used;
	char *s;

	if (v.n < 2 || v.p[0] != '"' ||
	    json_lex_string(v.p + 1, v.n - 1, JSON_LEX_UTF8 | JSON_LEX_NO_NUL, &s, &len, &used,
			    &f) < 0)
		return NULL;
	return s;
}

/* ---- JSON-RPC ---- */

/* One incoming request: its id's text (NULL for a notification) and
 * params (n == 0 when absent). */
struct mcp_req {
	const char *id;
	size_t id_n;
	struct mcp_span params;
};

static int reply(const struct mcp_req *q, const char *member, const char *raw, char **ret)
{
	struct jsonw b = {0};

	jsonw_text(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
	if (q && q->id)
		jsonw_text_n(&b, q->id, q->id_n);
	else
		jsonw_text(&b, "null");
	jsonw_text(&b, ",\"");
	jsonw_text(&b, member);
	jsonw_text(&b, "\":");
	jsonw_text(&b, raw);
	jsonw_text(&b, "}");
	return jsonw_take(&b, ret);
}

static int rpc_error(const struct mcp_req *q, int code, const char *message, char **ret)
{
	struct jsonw w;
	char *e = NULL;
	int r;

	jsonw_begin(&w);
	jsonw_i64(&w, "code", code);
	jsonw_str(&w, "message", message);
	if ((r = jsonw_end(&w, &e)) < 0)
		return r;
	r = reply(q, "error", e, ret);
	free(e);
	return r;
}

static int result_owned(const struct mcp_req *q, char *raw, int r, char **ret)
{
	if (r == 0)
		r = reply(q, "result", raw, ret);
	free(raw);
	return r;
}

static int m_initialize(struct mcp_server *s, const struct mcp_req *q, char **ret)
{
	struct mcp_span v;
	char *ver = NULL, *info = NULL, *res = NULL;
	struct jsonw w;
	int r;

	if (!q->params.n || !mcp_json_get(q->params, "protocolVersion", &v) ||
	    !(ver = mcp_json_str(v)))
		return rpc_error(q, MCP_INVALID_PARAMS, "params.protocolVersion: a string is required",
				 ret);
	/* We speak one revision; a client that asked for another decides
	 * whether it can use ours. */
	snprintf(s->client_version, sizeof(s->client_version), "%s", MCP_PROTOCOL_VERSION);
	free(ver);
	jsonw_begin(&w);
	jsonw_str(&w, "name", s->api->server_name);
	jsonw_str(&w, "version", s->api->server_version);
	if ((r = jsonw_end(&w, &info)) < 0)
		return r;
	jsonw_begin(&w);
	jsonw_str(&w, "protocolVersion", MCP_PROTOCOL_VERSION);
	jsonw_raw(&w, "capabilities", "{\"tools\":{\"listChanged\":false}}");
	jsonw_raw(&w, "serverInfo", info);
	jsonw_str(&w, "instructions",
		  "bc sandboxes: create one from a template (list_sandbox_templates), use it, "
		  "extend or delete it. Every call is decided by bc's API with your credential; "
		  "a refused call is a tool result with isError and the API's code and details.");
	r = jsonw_end(&w, &res);
	free(info);
	return result_owned(q, res, r, ret);
}

static int m_ping(struct mcp_server *s, const struct mcp_req *q, char **ret)
{
	(void)s;
	return reply(q, "result", "{}", ret);
}

static int m_tools_list(struct mcp_server *s, const struct mcp_req *q, char **ret)
{
	char *res = NULL;
	int r = mcp_tools_list(s, true, &res);

	return result_owned(q, res, r, ret);
}

static int m_tools_call(struct mcp_server *s, const struct mcp_req *q, char **ret)
{
	struct mcp_span v, args = {0};
	char *name = NULL, *res = NULL;
	int r;

	if (!q->params.n || !mcp_json_get(q->params, "name", &v) || !(name = mcp_json_str(v)))
		return rpc_error(q, MCP_INVALID_PARAMS, "params.name: a string is required", ret);
	if (mcp_json_get(q->params, "arguments", &args) && args.p[0] != '{') {
		free(name);
		return rpc_error(q, MCP_INVALID_PARAMS, "params.arguments: an object is required",
				 ret);
	}
	r = mcp_tool_call(s, name, args, &res);
	if (r == -ENOENT) {
		char *m = NULL;
		struct jsonw b = {0};

		jsonw_text(&b, "unknown tool: ");
		jsonw_text(&b, name);
		free(name);
		if ((r = jsonw_take(&b, &m)) < 0)
			return r;
		r = rpc_error(q, MCP_INVALID_PARAMS, m, ret);
		free(m);
		return r;
	}
	free(name);
	return result_owned(q, res, r, ret);
}

typedef int (*mcp_method_fn)(struct mcp_server *s, const struct mcp_req *q, char **ret);

static const struct {
	const char *name;
	mcp_method_fn fn;
} methods[] = {
	{"initialize", m_initialize},
	{"ping", m_ping},
	{"tools/list", m_tools_list},
	{"tools/call", m_tools_call},
};

/* A notification never gets an answer; initialized is the only one that
 * changes anything. */
static int notification(struct mcp_server *s, const char *method, char **ret)
{
	if (strcmp(method, "notifications/initialized") == 0)
		s->initialized = true;
	*ret = NULL;
	return 0;
}

static int dispatch(struct mcp_server *s, struct mcp_span o, char **ret)
{
	struct mcp_span v;
	struct mcp_req q = {0};
	_cleanup_free_ char *method = NULL;
	bool has_id = mcp_json_get(o, "id", &v);

	if (has_id && (v.p[0] == '"' || v.p[0] == '-' || (v.p[0] >= '0' && v.p[0] <= '9'))) {
		q.id = v.p;
		q.id_n = v.n;
	} else if (has_id) {
		return rpc_error(NULL, MCP_INVALID_REQUEST, "id must be a string or a number", ret);
	}
	if (!mcp_json_get(o, "jsonrpc", &v) || v.n != 5 || memcmp(v.p, "\"2.0\"", 5) != 0)
		return rpc_error(&q, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"", ret);
	if (!mcp_json_get(o, "method", &v)) {
		if (!has_id || mcp_json_get(o, "result", &v) || mcp_json_get(o, "error", &v)) {
			*ret = NULL; /* a response to us: we send no requests */
			return 0;
		}
		return rpc_error(&q, MCP_INVALID_REQUEST, "method is required", ret);
	}
	if (!(method = mcp_json_str(v)))
		return rpc_error(&q, MCP_INVALID_REQUEST, "method must be a string", ret);
	if (!has_id)
		return notification(s, method, ret);
	if (mcp_json_get(o, "params", &q.params) && q.params.p[0] != '{')
		return rpc_error(&q, MCP_INVALID_PARAMS, "params must be an object", ret);
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(methods[i].name, method) == 0)
			return methods[i].fn(s, &q, ret);
	return rpc_error(&q, MCP_METHOD_NOT_FOUND, "method not found", ret);
}

int mcp_handle(struct mcp_server *s, const char *msg, size_t len, char **ret_reply)
{
	size_t i = 0;

	if (len > MCP_MESSAGE_MAX)
		return rpc_error(NULL, MCP_INVALID_REQUEST, "message too large", ret_reply);
	if (mcp_json_skip(msg, len, &i, 0) < 0 || skip_ws(msg, len, i) != len)
		return rpc_error(NULL, MCP_PARSE_ERROR, "parse error", ret_reply);
	i = skip_ws(msg, len, 0);
	if (msg[i] == '[')
		return rpc_error(NULL, MCP_INVALID_REQUEST, "batches are not supported", ret_reply);
	if (msg[i] != '{')
		return rpc_error(NULL, MCP_INVALID_REQUEST, "a request is an object", ret_reply);
	return dispatch(s, (struct mcp_span){msg + i, len - i}, ret_reply);
}

int mcp_tools_list(struct mcp_server *s, bool gate, char **ret_json)
{
	struct jsonw b = {0};

	jsonw_text(&b, "{\"tools\":");
	mcp_tools_put(s, gate, &b);
	jsonw_text(&b, "}");
	return jsonw_take(&b, ret_json);
}
