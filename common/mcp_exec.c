/* mcp_exec.c: the MCP tools beyond the spec that run code and move files
 * in a sandbox: run_command, write_file and read_file. Each is one command
 * line for the guest's shell, run by the transport's mcp_api.exec (bcctl
 * mcp: the exec grant and stock OpenSSH, as `bcctl sandbox exec` does), so
 * they exist only where the transport can run one; the HTTP transport has
 * no SSH client and leaves them off (docs/mcp.md).
 *
 * Every word that comes from the caller reaches the guest's shell inside
 * single quotes: an argv command stays that argv, a path stays one path.
 * A stream that is valid UTF-8 without NUL comes back as text, anything
 * else as base64 (encoding says which); each is capped, with a flag when
 * more came. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "json_lex.h"
#include "jsonw.h"
#include "mcp_internal.h"
#include "pbjson_internal.h"
#include "util.h"

#define RUN_CAP (1u << 20)          /* stdout, stderr of run_command */
#define READ_CAP (4u << 20)         /* a file read_file answers */
#define FILE_ERR_CAP 4096           /* stderr of the file tools */
#define TIMEOUT_DEFAULT_S 60
#define TIMEOUT_MAX_S 900           /* the exec certificate's longest life */
#define ARGV_MAX 1024

enum exec_kind { EX_RUN, EX_WRITE, EX_READ };

struct exec_tool {
	const char *name, *title, *description, *input, *output;
	enum exec_kind kind;
	unsigned hints;             /* MCP_HINT_*: each reaches into the guest */
};

#define STR(name, what) "\"" name "\":{\"type\":\"string\",\"description\":\"" what "\"}"
#define ENC(name, what) "\"" name "\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"]," \
	"\"description\":\"" what "\"}"
#define OBJ(props, req) "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" req \
	"],\"additionalProperties\":false}"
#define TIMEOUT "\"timeoutSeconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":900," \
	"\"default\":60}"

static const struct exec_tool exec_tools[] = {
	{"run_command", "Run a command in a sandbox",
	 "Run a command in a sandbox over SSH (stdio server only) and answer its exit code and "
	 "output. command is an argv array (run as is) or a string for the guest's shell. "
	 "stdout and stderr are capped at 1 MiB each (stdoutTruncated, stderrTruncated).",
	 OBJ(STR("sandboxId", "sbx_...") ",\"command\":{\"oneOf\":[{\"type\":\"string\"},"
	     "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1}],"
	     "\"description\":\"argv array, or a shell command line\"},"
	     STR("stdin", "bytes for its standard input") ","
	     ENC("stdinEncoding", "how stdin is written (default text)") "," TIMEOUT,
	     "\"sandboxId\",\"command\""),
	 OBJ("\"exitCode\":{\"type\":\"integer\"},\"timedOut\":{\"type\":\"boolean\"},"
	     "\"stdout\":{\"type\":\"string\"},\"stdoutEncoding\":{\"type\":\"string\"},"
	     "\"stdoutTruncated\":{\"type\":\"boolean\"},\"stderr\":{\"type\":\"string\"},"
	     "\"stderrEncoding\":{\"type\":\"string\"},\"stderrTruncated\":{\"type\":\"boolean\"}",
	     "\"exitCode\",\"timedOut\",\"stdout\",\"stderr\""),
	 EX_RUN, MCP_HINT_DESTRUCTIVE | MCP_HINT_OPEN_WORLD},
	{"write_file", "Write a file in a sandbox",
	 "Write content to path in a sandbox (stdio server only), replacing the file; mode "
	 "(octal, such as 0644) is set when given.",
	 OBJ(STR("sandboxId", "sbx_...") "," STR("path", "the file's path in the guest") ","
	     STR("content", "the file's bytes") ","
	     ENC("encoding", "how content is written (default text)") ","
	     "\"mode\":{\"type\":\"string\",\"pattern\":\"^[0-7]{3,4}$\"}",
	     "\"sandboxId\",\"path\",\"content\""),
	 OBJ("\"path\":{\"type\":\"string\"},\"bytes\":{\"type\":\"integer\"}",
	     "\"path\",\"bytes\""),
	 EX_WRITE, MCP_HINT_DESTRUCTIVE | MCP_HINT_OPEN_WORLD},
	{"read_file", "Read a file in a sandbox",
	 "Read a file in a sandbox (stdio server only): text when it is UTF-8, else base64 "
	 "(encoding says which, or ask for one); at most 4 MiB (truncated).",
	 OBJ(STR("sandboxId", "sbx_...") "," STR("path", "the file's path in the guest") ","
	     ENC("encoding", "the answer's encoding (default: text when possible)"),
	     "\"sandboxId\",\"path\""),
	 OBJ("\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"},"
	     "\"encoding\":{\"type\":\"string\"},\"bytes\":{\"type\":\"integer\"},"
	     "\"truncated\":{\"type\":\"boolean\"}",
	     "\"path\",\"content\",\"encoding\",\"bytes\",\"truncated\""),
	 EX_READ, MCP_HINT_READ_ONLY | MCP_HINT_OPEN_WORLD},
};

void mcp_exec_tools_put(struct mcp_server *s, struct jsonw *b)
{
	(void)s;
	for (size_t i = 0; i < ARRAY_SIZE(exec_tools); i++) {
		const struct exec_tool *t = &exec_tools[i];

		if (i)
			jsonw_text(b, ",");
		mcp_tool_put(b, t->name, t->title, t->description, t->input, t->output, t->hints);
	}
}

/* ---- arguments ---- */

struct exec_args {
	char *sandbox, *path, *shell, *stdin_, *content, *mode;
	char *argv[ARGV_MAX];
	size_t argc;
	int stdin_b64, content_b64, want_b64;   /* -1: not given */
	int64_t timeout_s;
};

static void args_free(struct exec_args *a)
{
	free(a->sandbox);
	free(a->path);
	free(a->shell);
	free(a->stdin_);
	free(a->content);
	free(a->mode);
	for (size_t i = 0; i < a->argc; i++)
		free(a->argv[i]);
}

static int bad(bc_error *err, const char *field, const char *why)
{
	bc_error_set(err, BC_INVALID_INPUT, "%s %s", field, why);
	return bc_error_detail(err, "field", "%s", field);
}

static int arg_string(struct mcp_span v, const char *name, char **dst, bc_error *err)
{
	free(*dst);
	if (!(*dst = mcp_json_str(v)))
		return bad(err, name, "must be a string without NUL");
	return 0;
}

static int arg_encoding(struct mcp_span v, const char *name, int *dst, bc_error *err)
{
	_cleanup_free_ char *s = mcp_json_str(v);

	if (!s || (strcmp(s, "text") != 0 && strcmp(s, "base64") != 0))
		return bad(err, name, "must be text or base64");
	*dst = strcmp(s, "base64") == 0;
	return 0;
}

static int arg_command(struct mcp_span v, struct exec_args *a, bc_error *err)
{
	struct mcp_span o;
	size_t i = 1;

	if (v.p[0] == '"')
		return arg_string(v, "command", &a->shell, err);
	if (v.p[0] != '[')
		return bad(err, "command", "must be a string or an array of strings");
	/* walk the array as an object's values would be walked */
	for (;;) {
		size_t start;

		while (i < v.n && (json_lex_ws(v.p[i]) || v.p[i] == ','))
			i++;
		if (i >= v.n || v.p[i] == ']')
			break;
		if (a->argc == ARGV_MAX)
			return bad(err, "command", "has too many words");
		start = i;
		if (mcp_json_skip(v.p, v.n, &i, 1) < 0)
			return bad(err, "command", "is malformed");
		o = (struct mcp_span){v.p + start, i - start};
		if (!(a->argv[a->argc] = mcp_json_str(o)))
			return bad(err, "command", "words must be strings without NUL");
		a->argc++;
	}
	return a->argc ? 0 : bad(err, "command", "must not be empty");
}

static int arg_timeout(struct mcp_span v, int64_t *dst, bc_error *err)
{
	char buf[8], *end;

	if (v.n == 0 || v.n >= sizeof(buf) || v.p[0] < '0' || v.p[0] > '9')
		return bad(err, "timeoutSeconds", "must be a whole number from 1 to 900");
	memcpy(buf, v.p, v.n);
	buf[v.n] = '\0';
	*dst = strtoll(buf, &end, 10);
	if (*end || *dst < 1 || *dst > TIMEOUT_MAX_S)
		return bad(err, "timeoutSeconds", "must be a whole number from 1 to 900");
	return 0;
}

/* One member of the arguments, if the tool takes it. */
static int arg_one(const struct exec_tool *t, const char *k, struct mcp_span v,
		   struct exec_args *a, bc_error *err)
{
	if (strcmp(k, "sandboxId") == 0)
		return arg_string(v, k, &a->sandbox, err);
	if (t->kind == EX_RUN && strcmp(k, "command") == 0)
		return arg_command(v, a, err);
	if (t->kind == EX_RUN && strcmp(k, "stdin") == 0)
		return arg_string(v, k, &a->stdin_, err);
	if (t->kind == EX_RUN && strcmp(k, "stdinEncoding") == 0)
		return arg_encoding(v, k, &a->stdin_b64, err);
	if (t->kind == EX_RUN && strcmp(k, "timeoutSeconds") == 0)
		return arg_timeout(v, &a->timeout_s, err);
	if (t->kind != EX_RUN && strcmp(k, "path") == 0)
		return arg_string(v, k, &a->path, err);
	if (t->kind == EX_WRITE && strcmp(k, "content") == 0)
		return arg_string(v, k, &a->content, err);
	if (t->kind == EX_WRITE && strcmp(k, "encoding") == 0)
		return arg_encoding(v, k, &a->content_b64, err);
	if (t->kind == EX_WRITE && strcmp(k, "mode") == 0)
		return arg_string(v, k, &a->mode, err);
	if (t->kind == EX_READ && strcmp(k, "encoding") == 0)
		return arg_encoding(v, k, &a->want_b64, err);
	bc_error_set(err, BC_INVALID_INPUT, "%s takes no argument %s", t->name, k);
	return bc_error_detail(err, "field", "%s", k);
}

static bool mode_ok(const char *m)
{
	size_t n = strlen(m);

	return (n == 3 || n == 4) && strspn(m, "01234567") == n;
}

static int args_read(const struct exec_tool *t, struct mcp_span args, struct exec_args *a,
		     bc_error *err)
{
	struct mcp_span v;
	size_t i = 0;
	char *k;
	int r = 0;

	while (r == 0 && args.n && (r = mcp_json_next(args, &i, &k, &v)) == 1) {
		r = arg_one(t, k, v, a, err);
		free(k);
	}
	if (r < 0)
		return r == -BC_EDOMAIN ? r : bad(err, "arguments", "are malformed");
	if (!a->sandbox)
		return bad(err, "sandboxId", "is required");
	if (t->kind == EX_RUN && !a->shell && !a->argc)
		return bad(err, "command", "is required");
	if (t->kind != EX_RUN && (!a->path || !*a->path))
		return bad(err, "path", "is required");
	if (t->kind == EX_WRITE && !a->content)
		return bad(err, "content", "is required");
	if (a->mode && !mode_ok(a->mode))
		return bad(err, "mode", "must be octal digits such as 0644");
	return 0;
}

/* ---- the command line ---- */

/* s in single quotes for a POSIX shell. */
static void quote(struct jsonw *b, const char *s)
{
	jsonw_text(b, "'");
	for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
		jsonw_text_n(b, s, (size_t)(q - s));
		jsonw_text(b, "'\\''");
	}
	jsonw_text(b, s);
	jsonw_text(b, "'");
}

static int command_line(const struct exec_tool *t, const struct exec_args *a, char **ret)
{
	struct jsonw b = {0};

	switch (t->kind) {
	case EX_RUN:
		if (a->shell)
			jsonw_text(&b, a->shell);
		for (size_t i = 0; i < a->argc; i++) {
			if (i)
				jsonw_text(&b, " ");
			quote(&b, a->argv[i]);
		}
		break;
	case EX_WRITE:
		jsonw_text(&b, "cat > ");
		quote(&b, a->path);
		if (a->mode) {
			jsonw_text(&b, " && chmod ");
			quote(&b, a->mode);
			jsonw_text(&b, " ");
			quote(&b, a->path);
		}
		break;
	case EX_READ:
		jsonw_text(&b, "cat -- ");
		quote(&b, a->path);
		break;
	}
	return jsonw_take(&b, ret);
}

/* The guest's own deadline around the command: killing the local ssh
 * client past timeoutSeconds closes the channel, but sshd leaves a command
 * that neither reads nor writes running. So the guest runs it under
 * coreutils' timeout (its whole process group: TERM, then KILL 2 s on),
 * GUEST_GRACE_S after the local deadline so the local one always answers
 * first; a guest without timeout(1) runs it bare. */
#define GUEST_GRACE_S 2

static int guest_deadline(const char *cmd, int64_t timeout_s, char **ret)
{
	struct jsonw b = {0};
	char n[32];

	snprintf(n, sizeof(n), "%lld", (long long)(timeout_s + GUEST_GRACE_S));
	jsonw_text(&b, "command -v timeout >/dev/null 2>&1 && exec timeout -k 2 ");
	jsonw_text(&b, n);
	jsonw_text(&b, " sh -c ");
	quote(&b, cmd);
	jsonw_text(&b, "; exec sh -c ");
	quote(&b, cmd);
	return jsonw_take(&b, ret);
}

/* ---- the answer ---- */

/* Valid UTF-8 without NUL: JSON text can carry it as it is. */
static bool is_text(const uint8_t *p, size_t n)
{
	for (size_t i = 0, k; i < n; i += k) {
		if (p[i] == 0)
			return false;
		k = p[i] < 0x80 ? 1 : json_lex_utf8_seq(p + i, n - i);
		if (k == 0)
			return false;
	}
	return true;
}

static char *b64(const uint8_t *p, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);

	EVP_EncodeBlock((unsigned char *)out, p, (int)n);
	return out;
}

/* "key" and "keyEncoding": the bytes as text when they can be, else
 * base64 (or base64 when force). */
static void put_bytes(struct jsonw *w, const char *key, const char *enc_key, const uint8_t *p,
		      size_t n, bool force_b64)
{
	bool text = !force_b64 && is_text(p, n);
	_cleanup_free_ char *s = text ? strndup(p ? (const char *)p : "", n) : b64(p, n);

	jsonw_str(w, key, s);
	jsonw_str(w, enc_key, text ? "text" : "base64");
}

static int answer(struct jsonw *w, char **ret)
{
	_cleanup_free_ char *json = NULL;
	int r = jsonw_end(w, &json);

	return r < 0 ? r : mcp_tool_result(json, true, false, ret);
}

/* A file tool's command failed: INVALID_STATE with its status and stderr. */
static int failed(const struct exec_args *a, const struct mcp_exec_out *o, char **ret)
{
	bc_error e = {0};
	size_t n = o->err_len;

	while (n && (o->err[n - 1] == '\n' || o->err[n - 1] == '\r'))
		n--;
	bc_error_set(&e, BC_INVALID_STATE, "%s: %.*s", a->path, (int)(n > 400 ? 400 : n),
		     is_text(o->err, n) ? (const char *)o->err : "(binary error output)");
	bc_error_detail(&e, "reason", "command-failed");
	bc_error_detail(&e, "exitCode", "%d", o->exit_code);
	if (o->timed_out)
		bc_error_detail(&e, "timedOut", "true");
	return mcp_tool_error(&e, NULL, ret);
}

static int run_answer(const struct exec_tool *t, const struct exec_args *a,
		      const struct mcp_exec_out *o, size_t in_len, char **ret)
{
	struct jsonw w;

	if (t->kind != EX_RUN && (o->exit_code != 0 || o->timed_out))
		return failed(a, o, ret);
	if (t->kind == EX_READ && a->want_b64 == 0 && !is_text(o->out, o->out_len)) {
		bc_error e = {0};

		bad(&e, "encoding", "text cannot carry this file: it is not UTF-8");
		return mcp_tool_error(&e, NULL, ret);
	}
	jsonw_begin(&w);
	switch (t->kind) {
	case EX_RUN:
		jsonw_i64(&w, "exitCode", o->exit_code); /* -1: it did not exit */
		jsonw_bool(&w, "timedOut", o->timed_out);
		put_bytes(&w, "stdout", "stdoutEncoding", o->out, o->out_len, false);
		jsonw_bool(&w, "stdoutTruncated", o->out_trunc);
		put_bytes(&w, "stderr", "stderrEncoding", o->err, o->err_len, false);
		jsonw_bool(&w, "stderrTruncated", o->err_trunc);
		break;
	case EX_WRITE:
		jsonw_str(&w, "path", a->path);
		jsonw_i64(&w, "bytes", (int64_t)in_len);
		break;
	case EX_READ:
		jsonw_str(&w, "path", a->path);
		put_bytes(&w, "content", "encoding", o->out, o->out_len, a->want_b64 == 1);
		jsonw_i64(&w, "bytes", (int64_t)o->out_len);
		jsonw_bool(&w, "truncated", o->out_trunc);
		break;
	}
	return answer(&w, ret);
}

/* stdin's bytes: write_file's content or run_command's stdin, decoded. */
static int input_bytes(const struct exec_tool *t, const struct exec_args *a,
		       ProtobufCBinaryData *ret, bc_error *err)
{
	const char *s = t->kind == EX_WRITE ? a->content : a->stdin_;
	bool b64in = (t->kind == EX_WRITE ? a->content_b64 : a->stdin_b64) == 1;
	int r;

	*ret = (ProtobufCBinaryData){0};
	if (!s)
		return 0;
	if (!b64in) {
		ret->len = strlen(s);
		ret->data = (uint8_t *)xstrdup(s);
		return 0;
	}
	r = pbj_b64_decode(s, strlen(s), ret);
	if (r == -EINVAL)
		return bad(err, t->kind == EX_WRITE ? "content" : "stdin", "is not base64");
	return r;
}

static int exec_tool(struct mcp_server *s, const struct exec_tool *t, struct mcp_span args,
		     char **ret)
{
	struct exec_args a = {.stdin_b64 = -1, .content_b64 = -1, .want_b64 = -1,
			      .timeout_s = TIMEOUT_DEFAULT_S};
	struct mcp_exec_out o = {.exit_code = -1};
	ProtobufCBinaryData in = {0};
	_cleanup_free_ char *line = NULL, *cmd = NULL;
	bc_error err = {0};
	int r;

	if ((r = args_read(t, args, &a, &err)) < 0 || (r = input_bytes(t, &a, &in, &err)) < 0)
		goto out;
	if ((r = command_line(t, &a, &line)) < 0 ||
	    (r = guest_deadline(line, a.timeout_s, &cmd)) < 0)
		goto out;
	{
		struct mcp_exec_req q = {.sandbox_id = a.sandbox, .command = cmd, .in = in.data,
					 .in_len = in.len, .timeout_ms = a.timeout_s * 1000,
					 .cap = t->kind == EX_RUN ? RUN_CAP :
						t->kind == EX_READ ? READ_CAP : FILE_ERR_CAP};

		r = s->api->exec(s->api->ctx, &q, &o, &err);
	}
	if (r == 0)
		r = run_answer(t, &a, &o, in.len, ret);
out:
	if (r == -BC_EDOMAIN)
		r = mcp_tool_error(&err, NULL, ret);
	free(o.out);
	free(o.err);
	free(in.data);
	args_free(&a);
	return r;
}

int mcp_exec_call(struct mcp_server *s, const char *name, struct mcp_span args,
		  char **ret_result)
{
	for (size_t i = 0; i < ARRAY_SIZE(exec_tools); i++)
		if (strcmp(exec_tools[i].name, name) == 0)
			return exec_tool(s, &exec_tools[i], args, ret_result);
	return -ENOENT;
}
