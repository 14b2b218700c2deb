/* sandbox.c: "bcctl sandbox-template ..." over bc.compute.v1.SandboxTemplates
 * and "bcctl sandbox ..." over bc.compute.v1.Sandboxes. Lifetimes are
 * given as durations (--ttl 15m, --max-ttl 4h) and sent in seconds;
 * extend sends --by as typed (the server parses 30m, 8h, 7d or
 * milliseconds) and --until as epoch milliseconds, from an RFC 3339 UTC
 * time (2026-10-01T12:00:00Z) or "+DURATION" from now. */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "util.h"

#define TSVC (&bc__compute__v1__sandbox_templates__descriptor)
#define SSVC (&bc__compute__v1__sandboxes__descriptor)
#define TTL_FLAG_MAX (86400LL * 1000)

static const char *const networks[] = {"egress", "private", "none", NULL};

static void show_templates(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "POOL", "RUNTIME", "FLAVOR", "NETWORK",
					  "TTL", "MAX TTL", "WARM", "READY", "BOOTING", "VERSION"};
	const Bc__Compute__V1__ListSandboxTemplatesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__SandboxTemplate *x = l->items[i];
		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->name);
		cli_table_cell(t, "%s", x->pool_id);
		cli_table_cell(t, "%s", x->runtime);
		cli_table_cell(t, "%s", x->flavor);
		cli_table_cell(t, "%s", x->network);
		cli_table_cell(t, "%llds", (long long)x->default_ttl_seconds);
		cli_table_cell(t, "%llds", (long long)x->max_ttl_seconds);
		cli_table_cell(t, "%u..%u", x->warm ? x->warm->min : 0, x->warm ? x->warm->max : 0);
		cli_table_cell(t, "%u", x->warm_ready);
		cli_table_cell(t, "%u", x->warm_booting);
		cli_table_cell(t, "%lld", (long long)x->version);
	}
	cli_table_print(t, out);
	cli_table_free(t);
}

static void show_sandboxes(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "STATE", "TEMPLATE", "INSTANCE", "NODE",
					  "EXPIRES", "CREATED", "REBOUND"};
	const Bc__Compute__V1__ListSandboxesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char a[32], b[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__Sandbox *x = l->items[i];
		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->state);
		cli_table_cell(t, "%s", x->template_id);
		cli_table_cell(t, "%s", x->instance_id);
		cli_table_cell(t, "%s", x->node_id);
		cli_table_cell(t, "%s", cli_fmt_time(x->expires_at, a, sizeof(a)));
		cli_table_cell(t, "%s", cli_fmt_time(x->created_at, b, sizeof(b)));
		/* a memory restore's identity rebind; "-" for other sandboxes */
		cli_table_cell(t, "%s", x->identity_rebound_set_case !=
				   BC__COMPUTE__V1__SANDBOX__IDENTITY_REBOUND_SET_IDENTITY_REBOUND ? "-" :
				   x->identity_rebound ? "yes" : "no");
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

/* Milliseconds given on the command line, as whole seconds (rounded up). */
static int64_t secs(int64_t ms)
{
	return (ms + 999) / 1000;
}

/* --warm-min and --warm-max, as template create and update take them. */
struct warm_args {
	int64_t min, max;
	bool min_seen, max_seen;
};

#define WARM_FLAGS(w)                                                                        \
	{.name = "warm-min", .type = CLI_INT, .dst = &(w)->min, .meta = "N", .min = 0,       \
	 .max = 64, .seen = &(w)->min_seen, .help = "warm instances kept booted"},          \
	{.name = "warm-max", .type = CLI_INT, .dst = &(w)->max, .meta = "N", .min = 0,       \
	 .max = 64, .seen = &(w)->max_seen, .help = "at most this many warm instances"}

/* Point *ret at warm, filled from w, when --warm-min was given (--warm-max
 * defaults to it). 0, or -EINVAL (printed) for --warm-max alone. */
static int warm_set(struct cli_ctx *ctx, const struct warm_args *w,
		    Bc__Compute__V1__WarmPool *warm, Bc__Compute__V1__WarmPool **ret)
{
	if (w->max_seen && !w->min_seen)
		return cli_usage_error(ctx, "--warm-max needs --warm-min");
	if (w->min_seen) {
		warm->min = (uint32_t)w->min;
		warm->max = (uint32_t)(w->max_seen ? w->max : w->min);
		*ret = warm;
	}
	return 0;
}

/* -------------------------------------------------------------- templates */

#define ENV_FLAG(v)                                                                          \
	{.name = "env", .type = CLI_STRS, .dst = (v), .meta = "NAME=secret://T/SECRET",       \
	 .help = "an environment variable of /etc/sandbox/env, from a secret of the tenant "     \
		 "(id or name); its value is resolved when each instance boots"}

/* --env NAME=REF values split at the first '=' (in place): the names
 * stay in env->v, *vals the references. 0 or a usage error. */
static int env_split(struct cli_ctx *ctx, struct cli_strv *env, char **vals)
{
	for (size_t i = 0; i < env->n; i++) {
		char *eq = strchr(env->v[i], '=');
		if (!eq || eq == env->v[i])
			return cli_usage_error(ctx, "--env wants NAME=secret://TENANT/SECRET");
		*eq = '\0';
		vals[i] = eq + 1;
	}
	return 0;
}

/* The request's env map from env_split's halves (e, p: its entries). */
#define ENV_FILL(req, e, p, envv, vals, INIT)                                                \
	do {                                                                                 \
		for (size_t i_ = 0; i_ < (envv)->n; i_++) {                                  \
			(e)[i_] = (__typeof__(*(e)))INIT;                                    \
			(e)[i_].key = (envv)->v[i_];                                         \
			(e)[i_].value = (vals)[i_];                                          \
			(p)[i_] = &(e)[i_];                                                  \
		}                                                                            \
		(req)->env = (p);                                                            \
		(req)->n_env = (envv)->n;                                                    \
	} while (0)

int cli_template_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__CreateSandboxTemplateRequest req =
		BC__COMPUTE__V1__CREATE_SANDBOX_TEMPLATE_REQUEST__INIT;
	Bc__Compute__V1__WarmPool warm = BC__COMPUTE__V1__WARM_POOL__INIT;
	char *tenant = NULL, *name = NULL, *pool = NULL, *flavor = NULL, *image = NULL;
	char *vols = NULL;
	Bc__Compute__V1__TemplateVolume vv[CLI_VOLUMES_MAX], *vvp[CLI_VOLUMES_MAX];
	_cleanup_free_ char *user_data = NULL;
	int64_t ttl = 0, max_ttl = 0;
	struct warm_args wa = {0};
	struct cli_strv env = {0};
	char *vals[CLI_MAX_REPEAT];
	Bc__Compute__V1__CreateSandboxTemplateRequest__EnvEntry ev[CLI_MAX_REPEAT];
	Bc__Compute__V1__CreateSandboxTemplateRequest__EnvEntry *evp[CLI_MAX_REPEAT];
	int network = 0;
	char *identity = NULL;
	const struct cli_flag flags[] = {
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .required = true,
		 .help = "template name, unique among the tenant's live templates"},
		{.name = "pool", .type = CLI_STR, .dst = &pool, .meta = "ID", .required = true,
		 .help = "hosted pool the sandboxes run in"},
		{.name = "flavor", .type = CLI_STR, .dst = &flavor, .meta = "F", .required = true,
		 .help = "flavor id or name"},
		{.name = "image", .type = CLI_STR, .dst = &image, .meta = "I", .required = true,
		 .help = "image id or name"},
		{.name = "user-data-file", .type = CLI_FILE, .dst = &user_data, .meta = "F",
		 .max = CLI_USER_DATA_MAX, .help = "cloud-init user data (at most 64 KiB), or a "
		 "file holding secret://T/SECRET to boot with that secret as user data"},
		ENV_FLAG(&env),
		{.name = "network", .type = CLI_CHOICE, .dst = &network, .choices = networks,
		 .meta = "egress|private|none", .help = "network policy (default egress)"},
		{.name = "default-ttl", .type = CLI_DUR, .dst = &ttl, .meta = "D", .min = 1000,
		 .max = TTL_FLAG_MAX, .help = "default lifetime of a sandbox (default 1h)"},
		{.name = "max-ttl", .type = CLI_DUR, .dst = &max_ttl, .meta = "D", .min = 1000,
		 .max = TTL_FLAG_MAX, .help = "longest lifetime, extensions included (default 24h)"},
		{.name = "volumes", .type = CLI_STR, .dst = &vols, .meta = "NAME:/PATH[:ro],...",
		 .help = "volumes to mount, in order (a vol_... id or a name; :ro read-only)"},
		{.name = "identity", .type = CLI_STR, .dst = &identity, .meta = "on|off|default",
		 .help = "workload identity (default: the deployment's; docs/identity.md)"},
		WARM_FLAGS(&wa),
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r == 0)
		r = warm_set(ctx, &wa, &warm, &req.warm);
	if (r == 0)
		r = env_split(ctx, &env, vals);
	if (r == 0 && vols)
		r = cli_volumes_parse(ctx, vols, vv, vvp, &req.n_volumes);
	if (r != 0)
		return r;
	req.volumes = vvp;
	ENV_FILL(&req, ev, evp, &env, vals,
		 BC__COMPUTE__V1__CREATE_SANDBOX_TEMPLATE_REQUEST__ENV_ENTRY__INIT);
	req.tenant_id = tenant ? tenant : (char *)"";
	req.name = name;
	req.pool_id = pool;
	req.flavor = flavor;
	req.image_id = image;
	if (user_data)
		req.user_data = user_data;
	req.network = (char *)networks[network];
	req.default_ttl_seconds = secs(ttl);
	req.max_ttl_seconds = secs(max_ttl);
	if (identity)
		req.identity = identity;
	return cli_run(ctx, TSVC, "Create", &req.base, NULL, 0);
}

int cli_template_update(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__UpdateSandboxTemplateRequest req =
		BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__INIT;
	Bc__Compute__V1__WarmPool warm = BC__COMPUTE__V1__WARM_POOL__INIT;
	char *tenant = NULL, *id = NULL, *flavor = NULL, *image = NULL, *vols = NULL;
	Bc__Compute__V1__TemplateVolume vv[CLI_VOLUMES_MAX], *vvp[CLI_VOLUMES_MAX];
	_cleanup_free_ char *user_data = NULL;
	int64_t ttl = 0, max_ttl = 0;
	bool ttl_seen = false, max_seen = false, net_seen = false, no_ud = false, no_env = false;
	struct warm_args wa = {0};
	struct cli_strv env = {0};
	char *vals[CLI_MAX_REPEAT];
	Bc__Compute__V1__UpdateSandboxTemplateRequest__EnvEntry ev[CLI_MAX_REPEAT];
	Bc__Compute__V1__UpdateSandboxTemplateRequest__EnvEntry *evp[CLI_MAX_REPEAT];
	int network = 0;
	char *identity = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &id, .required = true, .help = "template id"},
		{.name = "flavor", .type = CLI_STR, .dst = &flavor, .meta = "F",
		 .help = "new flavor id or name"},
		{.name = "image", .type = CLI_STR, .dst = &image, .meta = "I",
		 .help = "new image id or name"},
		{.name = "user-data-file", .type = CLI_FILE, .dst = &user_data, .meta = "F",
		 .max = CLI_USER_DATA_MAX, .help = "new cloud-init user data"},
		{.name = "no-user-data", .type = CLI_BOOL, .dst = &no_ud,
		 .help = "clear the user data"},
		ENV_FLAG(&env),
		{.name = "no-env", .type = CLI_BOOL, .dst = &no_env,
		 .help = "clear the env (--env replaces it whole)"},
		{.name = "network", .type = CLI_CHOICE, .dst = &network, .choices = networks,
		 .meta = "egress|private|none", .seen = &net_seen, .help = "new network policy"},
		{.name = "default-ttl", .type = CLI_DUR, .dst = &ttl, .meta = "D", .min = 1000,
		 .max = TTL_FLAG_MAX, .seen = &ttl_seen, .help = "new default lifetime"},
		{.name = "max-ttl", .type = CLI_DUR, .dst = &max_ttl, .meta = "D", .min = 1000,
		 .max = TTL_FLAG_MAX, .seen = &max_seen, .help = "new longest lifetime"},
		{.name = "volumes", .type = CLI_STR, .dst = &vols, .meta = "NAME:/PATH[:ro],...",
		 .help = "the volumes, replacing the list (\"\": none)"},
		{.name = "identity", .type = CLI_STR, .dst = &identity, .meta = "on|off|default",
		 .help = "workload identity (default: the deployment's; docs/identity.md)"},
		WARM_FLAGS(&wa),
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (user_data && no_ud)
		return cli_usage_error(ctx, "--user-data-file and --no-user-data exclude each other");
	if (env.n && no_env)
		return cli_usage_error(ctx, "--env and --no-env exclude each other");
	r = warm_set(ctx, &wa, &warm, &req.warm);
	if (r == 0)
		r = env_split(ctx, &env, vals);
	if (r == 0 && vols)
		r = cli_volumes_parse(ctx, vols, vv, vvp, &req.n_volumes);
	if (r != 0)
		return r;
	req.volumes = vvp;
	req.clear_volumes = vols && req.n_volumes == 0;
	ENV_FILL(&req, ev, evp, &env, vals,
		 BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__ENV_ENTRY__INIT);
	req.clear_env = no_env;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.template_id = id;
	if (flavor) {
		req.flavor_set_case = BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__FLAVOR_SET_FLAVOR;
		req.flavor = flavor;
	}
	if (image) {
		req.image_id_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__IMAGE_ID_SET_IMAGE_ID;
		req.image_id = image;
	}
	if (user_data || no_ud) {
		req.user_data_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__USER_DATA_SET_USER_DATA;
		req.user_data = user_data ? user_data : (char *)"";
	}
	if (identity) {
		req.identity_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__IDENTITY_SET_IDENTITY;
		req.identity = identity;
	}
	if (net_seen) {
		req.network_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__NETWORK_SET_NETWORK;
		req.network = (char *)networks[network];
	}
	if (ttl_seen) {
		req.default_ttl_seconds_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__DEFAULT_TTL_SECONDS_SET_DEFAULT_TTL_SECONDS;
		req.default_ttl_seconds = secs(ttl);
	}
	if (max_seen) {
		req.max_ttl_seconds_set_case =
			BC__COMPUTE__V1__UPDATE_SANDBOX_TEMPLATE_REQUEST__MAX_TTL_SECONDS_SET_MAX_TTL_SECONDS;
		req.max_ttl_seconds = secs(max_ttl);
	}
	return cli_run(ctx, TSVC, "Update", &req.base, NULL, 0);
}

/* -------------------------------------------------------------- sandboxes */

int cli_sandbox_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__CreateSandboxRequest req = BC__COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT;
	Bc__Compute__V1__Wait wait = BC__COMPUTE__V1__WAIT__INIT;
	char *tenant = NULL, *tmpl = NULL, *key = NULL, *snap = NULL;
	char *task = NULL, *run = NULL, *agent = NULL;
	int64_t ttl = 0, wait_ms = 0;
	bool waiting = false;
	const struct cli_flag flags[] = {
		{.name = "template", .type = CLI_STR, .dst = &tmpl, .meta = "ID", .required = true,
		 .help = "sandbox template id"},
		{.name = "ttl", .type = CLI_DUR, .dst = &ttl, .meta = "D", .min = 1000,
		 .max = TTL_FLAG_MAX, .help = "lifetime (default: the template's)"},
		{.name = "key", .type = CLI_STR, .dst = &key, .meta = "IDEMPOTENCY",
		 .help = "idempotency key: a retry with the same key returns the same sandbox"},
		{.name = "wait", .type = CLI_DUR, .dst = &wait_ms, .meta = "D", .min = 0,
		 .max = 30000, .seen = &waiting,
		 .help = "let the server wait up to this long for readiness (max 30s)"},
		{.name = "from-snapshot", .type = CLI_STR, .dst = &snap, .meta = "ID",
		 .help = "restore one of your ready snapshots (snap_...)"},
		{.name = "task", .type = CLI_STR, .dst = &task, .meta = "T",
		 .help = "bind the sandbox to a task (deleted two days after)"},
		{.name = "run", .type = CLI_STR, .dst = &run, .meta = "R", .help = "the task's run"},
		{.name = "agent", .type = CLI_STR, .dst = &agent, .meta = "A",
		 .help = "the agent working the task"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.template_id = tmpl;
	req.ttl_seconds = secs(ttl);
	if (key)
		req.idempotency_key = key;
	if (snap)
		req.from_snapshot = snap;
	req.task = task ? task : (char *)"";
	req.run = run ? run : (char *)"";
	req.agent = agent ? agent : (char *)"";
	if (waiting) {
		wait.timeout_ms = (int32_t)wait_ms;
		req.wait = &wait;
	}
	return cli_run(ctx, SSVC, "Create", &req.base, NULL, wait_ms);
}

/* --until: "2026-10-01T12:00:00Z" (UTC) or "+2h" from now, as epoch ms. */
static int parse_until(const char *s, int64_t *ret)
{
	struct tm tm = {0};
	const char *end;
	int64_t ms;

	if (*s == '+') {
		if (duration_parse_ms(s + 1, &ms) < 0 || ms <= 0)
			return -EINVAL;
		*ret = now_ms() + ms;
		return 0;
	}
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end || strcmp(end, "Z") != 0)
		return -EINVAL;
	*ret = (int64_t)timegm(&tm) * 1000;
	return 0;
}

int cli_sandbox_extend(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__ExtendSandboxRequest req = BC__COMPUTE__V1__EXTEND_SANDBOX_REQUEST__INIT;
	char *tenant = NULL, *id = NULL, *by = NULL, *until = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &id, .required = true, .help = "sandbox id"},
		{.name = "by", .type = CLI_STR, .dst = &by, .meta = "D",
		 .help = "add to the current expiry: 30m, 8h, 7d or milliseconds (at most 30 days)"},
		{.name = "until", .type = CLI_STR, .dst = &until, .meta = "TIME",
		 .help = "new expiry: 2026-10-01T12:00:00Z, or +2h from now"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (!by == !until)
		return cli_usage_error(ctx, "give exactly one of --by and --until");
	if (until && parse_until(until, &req.until) < 0)
		return cli_usage_error(ctx, "--until: not YYYY-MM-DDTHH:MM:SSZ or +DURATION");
	req.tenant_id = tenant ? tenant : (char *)"";
	req.sandbox_id = id;
	if (by)
		req.by = by;
	return cli_run(ctx, SSVC, "Extend", &req.base, NULL, 0);
}

static const struct cli_field template_list_flags[] = {
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
};

/* Get and Delete of templates, and of sandboxes, take (tenant, id). */
const struct cli_resource cli_templates = {
	.svc = TSVC, .id_field = "template_id", .id_help = "template id", .tenant = true,
	.list = template_list_flags, .n_list = ARRAY_SIZE(template_list_flags),
	.show_list = show_templates,
};

static const struct cli_field sandbox_list_flags[] = {
	{.flag = {.name = "all", .type = CLI_BOOL,
		  .help = "the tenant's sandboxes you may read (default: yours)"},
	 .field = "scope", .on = "all", .off = "mine"},
	{.flag = {.name = "deleted", .type = CLI_BOOL, .help = "include deleted sandboxes"},
	 .field = "deleted"},
	{.flag = {.name = "template", .type = CLI_STR, .meta = "ID",
		  .help = "only sandboxes of this template"},
	 .field = "template_id"},
	CLI_FIELD_LIMIT(200, "page size, 1..200 (default 50)"),
	CLI_FIELD_CURSOR,
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
};

const struct cli_resource cli_sandboxes = {
	.svc = SSVC, .id_field = "sandbox_id", .id_help = "sandbox id", .tenant = true,
	.list = sandbox_list_flags, .n_list = ARRAY_SIZE(sandbox_list_flags),
	.show_list = show_sandboxes,
};
