/* client.c: how bcctl reaches the controller. Settings come from flags,
 * then the environment (BC_URL, BC_TOKEN, BC_CA_FILE), then the config file
 * ($BC_CONFIG or ~/.config/bc/config: "key = value" lines), then defaults.
 * The connection is made lazily by the first call, so --help and usage
 * errors never read the config or touch the network. TLS is the default
 * (the controller's CA from ca_file, else the system roots; no client
 * certificate); plaintext only with --insecure. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf.h"
#include "util.h"

#define CONFIG_MAX_BYTES 65536
#define CA_MAX_BYTES (1024 * 1024)

struct config {
	char *path;             /* the file read, or NULL */
	char *url;
	char *token;
	char *ca_file;
	char *tunnel_url;
};

/* The config keys, one typed table: every key is a string. */
static const struct conf_key config_keys[] = {
	{"url", CONF_STR, offsetof(struct config, url)},
	{"token", CONF_STR, offsetof(struct config, token)},
	{"ca_file", CONF_STR, offsetof(struct config, ca_file)},
	{"tunnel_url", CONF_STR, offsetof(struct config, tunnel_url)},
};

/* The file's syntax: '#' starts a comment only after a blank (a token or
 * URL may hold one), values may be in double quotes. */
#define CONFIG_SYNTAX (CONF_HASH_AFTER_BLANK | CONF_UNQUOTE | CONF_BLANKS)

static int local_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int local_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

static void config_free(struct config *cfg)
{
	if (cfg->token)
		explicit_bzero(cfg->token, strlen(cfg->token));
	free(cfg->path);
	free(cfg->url);
	free(cfg->token);
	free(cfg->ca_file);
	free(cfg->tunnel_url);
}

/* A key = value line: an unknown key is -ENOENT, named in *bad_key. */
struct file_ctx {
	struct config *cfg;
	const char *bad_key;
};

static int config_key(void *ctx, const char *key, const char *value)
{
	struct file_ctx *f = ctx;
	int r = conf_set(config_keys, ARRAY_SIZE(config_keys), f->cfg, key, value);

	if (r == -ENOENT)
		f->bad_key = key;
	return r;
}

static int config_parse(struct config *cfg, char *buf)
{
	struct file_ctx f = {.cfg = cfg};
	int r, lineno = 0;

	r = conf_parse(buf, CONFIG_SYNTAX, config_key, &f, &lineno);
	if (r == -EBADMSG)
		return local_error("%s:%d: expected 'key = value'", cfg->path, lineno);
	if (r < 0)
		return local_error("%s:%d: unknown key '%s' (known: url, token, ca_file, tunnel_url)",
				   cfg->path, lineno, f.bad_key);
	return 0;
}

/* A token in a file others can read is worth a warning, not a refusal. */
static void config_check_mode(const struct config *cfg)
{
	struct stat st;

	if (cfg->token && stat(cfg->path, &st) == 0 && (st.st_mode & 077))
		fprintf(stderr, "warning: %s holds a token and is readable by others "
			"(chmod 600 it)\n", cfg->path);
}

/* A relative ca_file in the config is relative to the config's folder. */
static void config_resolve_ca(struct config *cfg)
{
	const char *slash;
	char *abs;

	if (!cfg->ca_file || !*cfg->ca_file || cfg->ca_file[0] == '/')
		return;
	slash = strrchr(cfg->path, '/');
	if (!slash)
		return;
	abs = xasprintf("%.*s/%s", (int)(slash - cfg->path), cfg->path, cfg->ca_file);
	free(cfg->ca_file);
	cfg->ca_file = abs;
}

static int config_load(struct config *cfg)
{
	const char *env = getenv("BC_CONFIG"), *home = getenv("HOME");
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r;

	if (env && *env)
		cfg->path = xstrdup(env);
	else if (home && *home)
		cfg->path = xasprintf("%s/.config/bc/config", home);
	else
		return 0;
	r = file_read_all(cfg->path, CONFIG_MAX_BYTES, &buf, &len);
	if (r == -ENOENT && !(env && *env))
		return 0;
	if (r < 0)
		return local_error("config %s: %s", cfg->path, strerror(-r));
	r = config_parse(cfg, buf);
	explicit_bzero(buf, len);
	if (r < 0)
		return r;
	config_check_mode(cfg);
	config_resolve_ca(cfg);
	return 0;
}

static const char *pick(const char *flag, const char *env_name, const char *cfg)
{
	const char *env = env_name ? getenv(env_name) : NULL;

	if (flag && *flag)
		return flag;
	if (env && *env)
		return env;
	return cfg && *cfg ? cfg : NULL;
}

/* gRPC wants "host:port" or "unix:/path"; accept an https:// URL too. */
static int normalize_target(const char *url, char *buf, size_t len)
{
	size_t n;

	if (strncmp(url, "https://", 8) == 0)
		url += 8;
	else if (strstr(url, "://"))
		return local_error("url %s: use HOST:PORT (plaintext needs --insecure)", url);
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		n--;
	if (n == 0 || n >= len)
		return local_error("url '%s': bad address", url);
	memcpy(buf, url, n);
	buf[n] = '\0';
	return 0;
}

static int connect_with(struct cli_ctx *ctx, const struct config *cfg)
{
	const char *url = pick(ctx->url, "BC_URL", cfg->url);
	const char *ca_file = pick(ctx->ca_file, "BC_CA_FILE", cfg->ca_file);
	struct rpc_tls tls = {0};
	struct rpc_client_opts opts = {0};
	char target[512];
	int r;

	r = normalize_target(url ? url : CLI_DEFAULT_URL, target, sizeof(target));
	if (r < 0)
		return r;
	if (!ctx->insecure && ca_file) {
		r = file_read_all(ca_file, CA_MAX_BYTES, &ctx->ca_pem, NULL);
		if (r < 0)
			return local_error("CA file %s: %s", ca_file, strerror(-r));
		tls.ca_pem = ctx->ca_pem;
	}
	if (pick(NULL, "BC_TUNNEL_URL", cfg->tunnel_url))
		ctx->tunnel_url = xstrdup(pick(NULL, "BC_TUNNEL_URL", cfg->tunnel_url));
	opts.target = target;
	opts.tls = ctx->insecure ? NULL : &tls;
	opts.bearer = pick(NULL, "BC_TOKEN", cfg->token);
	rpc_global_init();
	ctx->rpc_inited = true;
	ctx->client = rpc_client_new(&opts);
	if (!ctx->client)
		return bc_error_set(&ctx->err, BC_UNAVAILABLE, "cannot open a channel to %s", target);
	return 0;
}

/* Connect once; later calls reuse the channel. */
static int cli_connect(struct cli_ctx *ctx)
{
	struct config cfg = {0};
	int r;

	if (ctx->client)
		return 0;
	r = config_load(&cfg);
	if (r == 0)
		r = connect_with(ctx, &cfg);
	config_free(&cfg);
	return r;
}

int cli_call(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	     const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret)
{
	const ProtobufCMethodDescriptor *md =
		protobuf_c_service_descriptor_get_method_by_name(svc, method);
	int64_t timeout = ctx->timeout_ms + extra_ms;
	char path[256];
	int r;

	if (!md || rpc_method_path(svc, method, path, sizeof(path)) < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "no method %s.%s", svc->name, method);
	r = cli_connect(ctx);
	if (r < 0)
		return r;
	r = rpc_client_unary(ctx->client, path, req, md->output, ret,
			     timeout > INT_MAX ? INT_MAX : (int)timeout, &ctx->err);
	if (r == -BC_EDOMAIN)
		return r;
	if (r < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "%s: %s", path, strerror(-r));
	return 0;
}

int cli_run(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	    const ProtobufCMessage *req, cli_show_fn show, int64_t extra_ms)
{
	ProtobufCMessage *resp = NULL;
	int r = cli_call(ctx, svc, method, req, extra_ms, &resp);

	if (r < 0)
		return r;
	if (ctx->format == CLI_FMT_JSON)
		r = cli_print_json(resp, stdout);
	else if (show)
		show(resp, stdout);
	else
		cli_print_fields(resp, stdout);
	protobuf_c_message_free_unpacked(resp, NULL);
	if (r < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "writing JSON: %s", strerror(-r));
	return 0;
}

rpc_stream *cli_bidi_open(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc,
			  const char *method)
{
	char path[256];

	if (rpc_method_path(svc, method, path, sizeof(path)) < 0) {
		bc_error_set(&ctx->err, BC_INTERNAL, "no method %s.%s", svc->name, method);
		return NULL;
	}
	if (cli_connect(ctx) < 0)
		return NULL;
	return rpc_stream_open(ctx->client, path, NULL, 0, &ctx->err);
}

int cli_stream(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	       const ProtobufCMessage *req, cli_show_fn show, int64_t max_msgs)
{
	const ProtobufCMethodDescriptor *md =
		protobuf_c_service_descriptor_get_method_by_name(svc, method);
	rpc_stream *st = NULL;
	int64_t got = 0;
	char path[256];
	int r;

	if (!md || rpc_method_path(svc, method, path, sizeof(path)) < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "no method %s.%s", svc->name, method);
	if ((r = cli_connect(ctx)) < 0)
		return r;
	if (!(st = rpc_stream_open(ctx->client, path, req, 0, &ctx->err)))
		return -BC_EDOMAIN;
	while (max_msgs <= 0 || got < max_msgs) {
		ProtobufCMessage *m = NULL;
		r = rpc_stream_recv(st, md->output, &m, -1, &ctx->err);
		if (r <= 0)
			break;
		if (ctx->format == CLI_FMT_JSON)
			cli_print_json(m, stdout);
		else
			show(m, stdout);
		fflush(stdout);
		protobuf_c_message_free_unpacked(m, NULL);
		got++;
	}
	rpc_stream_free(st);
	return r < 0 ? r : 0;
}
