/* main.c: bcctl's entry point. Parses the global flags, finds "NOUN VERB"
 * in one dispatch table, runs the verb and turns its result into the exit
 * status: 0, 1 for usage, else bc_code_exit_status() of the error, which
 * is printed here (and only here) as text on stderr and, with
 * --format json, as a JSON object on stdout. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "util.h"

static int cli_version(struct cli_ctx *ctx, int argc, char **argv);
static int cli_help(struct cli_ctx *ctx, int argc, char **argv);

static const struct cli_verb verbs[] = {
	{"pool", "create", cli_pool_create,
	 "--name N --runtime RT [--subnet CIDR --gateway IP] [--subnet6 CIDR] [--bridge BR] "
	 "[--recreate-on-host-loss] [--tenant T]... [--key K]",
	 "Create a pool of hosts (Pools.Create)."},
	{"pool", "list", cli_res_list, "[--limit N] [--cursor C]", "List pools.", &cli_pools},
	{"pool", "get", cli_res_call, "ID", "Show one pool.", &cli_pools},
	{"pool", "delete", cli_res_delete, "ID", "Delete a pool.", &cli_pools},
	{"pool", "budget-check", cli_pool_budget_check, "ID none|meter",
	 "Whether new work in the pool is refused on a spent budget (Offers.SetPoolBudgetCheck)."},
	{"flavor", "create", cli_flavor_create,
	 "--name N --vcpus N --memory-mib N --disk-gib N [--gpus N] [--huge-pages 2M|1G] "
	 "[--numa-node N] [--pin-vcpus]",
	 "Create a flavor (Flavors.Create)."},
	{"flavor", "list", cli_res_list, "[--limit N] [--cursor C]", "List flavors.", &cli_flavors},
	{"flavor", "get", cli_res_call, "ID|NAME", "Show one flavor.", &cli_flavors},
	{"flavor", "delete", cli_res_delete, "ID|NAME", "Delete a flavor.", &cli_flavors},
	{"image", "create", cli_image_create,
	 "--name N --format qcow2|raw --url https://... --sha256 HEX --size BYTES",
	 "Register an image (Images.Create)."},
	{"image", "list", cli_res_list, "[--limit N] [--cursor C]", "List images.", &cli_images},
	{"image", "get", cli_res_call, "ID|NAME", "Show one image.", &cli_images},
	{"image", "delete", cli_res_delete, "ID|NAME", "Delete an image.", &cli_images},
	{"node", "join-token", cli_node_join_token, "--pool ID [--ttl 1h]",
	 "Create a single-use join token for bcd and print it (Nodes.CreateJoinToken)."},
	{"node", "list", cli_res_list, "[--pool ID] [--limit N] [--cursor C]",
	 "List nodes.", &cli_nodes},
	{"node", "get", cli_res_call, "ID", "Show one node.", &cli_nodes},
	{"doctor", "run", cli_doctor_run, "",
	 "The control plane's self-check (Doctor.Run): warn and fail findings, e.g. a host "
	 "whose volume store is full, unreported or stale."},
	{"node", "retire", cli_res_call, "ID",
	 "Retire a node: no new placements, certificate refused.", &cli_nodes},
	{"node", "set-capacity", cli_node_set_capacity,
	 "ID [--vcpus N] [--memory-mib N] [--disk-gib N] [--gpus N]",
	 "Set the ceiling of what a node may report as its capacity."},
	{"instance", "create", cli_instance_create,
	 "--pool ID --flavor F --image I [--tenant T] [--ssh-key K]... [--user-data-file F] "
	 "[--network egress|private|none] [--key IDEMPOTENCY] [--wait 20s]",
	 "Create an instance (Instances.Create)."},
	{"instance", "list", cli_res_list,
	 "[--tenant T] [--pool ID] [--deleted] [--limit N] [--cursor C] [--scope mine|all]",
	 "List instances.", &cli_instances},
	{"instance", "get", cli_res_call, "ID [--tenant T]", "Show one instance.", &cli_instances},
	{"instance", "delete", cli_res_delete, "ID [--tenant T]",
	 "Delete an instance.", &cli_instances},
	{"instance", "start", cli_res_call, "ID [--tenant T]",
	 "Start a stopped instance (Instances.Start).", &cli_instances},
	{"instance", "stop", cli_res_call, "ID [--tenant T]",
	 "Stop an instance (Instances.Stop).", &cli_instances},
	{"instance", "pause", cli_res_call, "ID [--tenant T]",
	 "Pause a running instance (Instances.Pause).", &cli_instances},
	{"instance", "resume", cli_res_call, "ID [--tenant T]",
	 "Resume a paused instance (Instances.Resume).", &cli_instances},
	{"secret", "put", cli_secret_put, "NAME [--from-file F] [--fleet] [--tenant T] < VALUE",
	 "Write a secret, or rotate it (Secrets.Put). The value is read from standard input or "
	 "--from-file, never from the command line, and can never be read back."},
	{"secret", "list", cli_res_list, "[--fleet] [--tenant T]",
	 "List secrets: names, versions and times, never values.", &cli_secrets},
	{"secret", "delete", cli_secret_delete, "NAME|ID [--fleet] [--tenant T]",
	 "Delete a secret; warm instances given it are retired."},
	{"sandbox-template", "create", cli_template_create,
	 "--name N --pool ID --flavor F --image I [--user-data-file F] "
	 "[--env NAME=secret://T/SECRET]... [--network egress|private|none] [--default-ttl 1h] "
	 "[--max-ttl 24h] [--warm-min N [--warm-max N]] [--volumes NAME:/PATH[:ro],...] "
	 "[--identity on|off|default] [--tenant T]",
	 "Create a sandbox template (SandboxTemplates.Create)."},
	{"sandbox-template", "update", cli_template_update,
	 "ID [--flavor F] [--image I] [--user-data-file F | --no-user-data] "
	 "[--env NAME=secret://T/SECRET... | --no-env] [--network P] "
	 "[--default-ttl D] [--max-ttl D] [--warm-min N [--warm-max N]] "
	 "[--volumes NAME:/PATH[:ro],...] [--identity on|off|default] [--tenant T]",
	 "Change only the fields given; raises the template's version."},
	{"sandbox-template", "get", cli_res_call, "ID [--tenant T]",
	 "Show one template.", &cli_templates},
	{"sandbox-template", "delete", cli_res_delete, "ID [--tenant T]",
	 "Delete a template: its name is freed, its sandboxes live on.", &cli_templates},
	{"sandbox-volume", "create", cli_volume_create,
	 "--pool ID --name N --size GIB [--key KEY] [--tenant T]",
	 "Create a sandbox volume, a persistent disk on one host of the pool "
	 "(SandboxVolumes.Create); a fresh idempotency key unless --key."},
	{"sandbox-volume", "list", cli_res_list,
	 "[--all] [--pool ID] [--deleted] [--limit N] [--cursor C] [--tenant T]",
	 "List your sandbox volumes (--all: the tenant's), newest first.", &cli_volumes},
	{"sandbox-volume", "get", cli_volume_get, "vol_... [--tenant T]", "Show one sandbox volume."},
	{"sandbox-volume", "resize", cli_volume_resize, "vol_... --size GIB [--tenant T]",
	 "Grow a sandbox volume (never shrinks it)."},
	{"sandbox-volume", "delete", cli_volume_delete, "vol_... [--tenant T]",
	 "Delete a sandbox volume: its data is wiped."},
	{"sandbox", "templates", cli_res_list, "[--tenant T]",
	 "List the tenant's sandbox templates, by name.", &cli_templates},
	{"sandbox", "create", cli_sandbox_create,
	 "--template ID [--ttl 15m] [--key IDEMPOTENCY] [--wait 20s] "
	 "[--task T [--run R] [--agent A]] [--tenant T]",
	 "Create a sandbox (Sandboxes.Create)."},
	{"sandbox", "list", cli_res_list,
	 "[--all] [--deleted] [--template ID] [--limit N] [--cursor C] [--tenant T]",
	 "List sandboxes, newest first.", &cli_sandboxes},
	{"sandbox", "get", cli_res_call, "ID [--tenant T]", "Show one sandbox.", &cli_sandboxes},
	{"sandbox", "snapshot", cli_sandbox_snapshot,
	 "ID [--keep] [--no-memory] [--key K] [--tenant T]",
	 "Snapshot a sandbox's memory and disk (--no-memory: disk only) to the snapshot store "
	 "(Sandboxes.Snapshot); --keep outlives the sandbox."},
	{"sandbox-snapshot", "list", cli_res_list,
	 "[--all] [--sandbox ID] [--limit N] [--cursor C] [--tenant T]",
	 "List your sandbox snapshots (--all: the tenant's), newest first.", &cli_snapshots},
	{"sandbox-snapshot", "get", cli_res_call, "snap_... [--tenant T]",
	 "Show one sandbox snapshot.", &cli_snapshots},
	{"sandbox-snapshot", "delete", cli_res_call, "snap_... [--tenant T]",
	 "Delete a sandbox snapshot; its stored object is removed afterwards.", &cli_snapshots},
	{"sandbox", "extend", cli_sandbox_extend,
	 "ID --by 30m | --until 2026-10-01T12:00:00Z | --until +2h [--tenant T]",
	 "Move a sandbox's expiry later."},
	{"sandbox", "delete", cli_res_delete, "ID [--tenant T]",
	 "Delete a sandbox.", &cli_sandboxes},
	{"sandbox", "exec", cli_sandbox_exec,
	 "ID [--key FILE] [--minutes N] [--ssh PROG] [--accept-host-key] [--tenant T] [-- CMD ...]",
	 "Run a command (or a login shell) in a sandbox over SSH (Sandboxes.Exec)."},
	{"sandbox", "cp", cli_sandbox_cp,
	 "SRC ... DST [--recursive] [--key FILE] [--minutes N] [--scp PROG] [--accept-host-key] [--tenant T]",
	 "Copy files to or from a sandbox (ID:PATH) with scp over the same grant."},
	{"sandbox", "tunnels", cli_sandbox_tunnels, "ID [--all] [--tenant T]",
	 "List the open tunnels into a sandbox (Tunnels.List)."},
	{"sandbox", "close-tunnels", cli_sandbox_close_tunnels, "ID [--tunnel TUN] [--tenant T]",
	 "Close the tunnels into a sandbox, or one (Tunnels.Close)."},
	{"tenant", "create", cli_tenant_create, "ID [--name N]", "Create a tenant (Tenants.Create)."},
	{"tenant", "list", cli_res_list, "[--limit N] [--cursor C]", "List tenants.", &cli_tenants},
	{"tenant", "get", cli_res_call, "ID", "Show one tenant.", &cli_tenants},
	{"tenant", "set-state", cli_tenant_set_state, "ID active|suspended|deleting|deleted",
	 "Suspend, reactivate or delete a tenant."},
	{"tenant", "quota", cli_tenant_quota,
	 "ID [--vcpus N] [--memory-gib N] [--disk-gib N] [--gpus N] [--instances N]",
	 "Show a tenant's quota, or set it (limits not given become unlimited)."},
	{"tenant", "offer", cli_tenant_offer,
	 "ID [--spend-limit-cents N] [--on-budget-exceeded none|stop-new|drain] "
	 "[--price METER=CENTS]...",
	 "Show a tenant's offer (prices, budget and spend), or set it (replaces it whole)."},
	{"identity", "create", cli_identity_create,
	 "[--tenant T] --kind user|service|agent --name N [--admin]", "Create an identity."},
	{"identity", "list", cli_res_list, "[--tenant T] [--limit N] [--cursor C]",
	 "List identities.", &cli_identities},
	{"identity", "get", cli_res_call, "ID", "Show one identity.", &cli_identities},
	{"identity", "set-state", cli_identity_set_state, "ID active|suspended|deleted",
	 "Suspend, reactivate or delete an identity."},
	{"identity", "recognize", cli_identity_recognize, "ADDR",
	 "Which sandbox holds a live workload identity for an address (Identity.Recognize)."},
	{"token", "create", cli_token_create, "--identity ID [--name N] [--ttl D]",
	 "Mint an API token for an identity; it is printed once."},
	{"token", "list", cli_res_list, "--identity ID",
	 "List an identity's tokens (no secrets).", &cli_tokens},
	{"token", "revoke", cli_res_call, "ID", "Revoke a token at once.", &cli_tokens},
	{"delegation", "create", cli_delegation_create, "--agent ID --user ID",
	 "Let an agent identity act for a user."},
	{"delegation", "list", cli_res_list, "[--tenant T]", "List delegations.", &cli_delegations},
	{"delegation", "revoke", cli_res_call, "ID",
	 "Revoke a delegation: the agent is cut off at once.", &cli_delegations},
	{"policy", "create", cli_policy_create, "[--tenant T] --name N --file F",
	 "Create a policy from a JSON document (Policies.Create)."},
	{"policy", "list", cli_res_list, "[--tenant T] [--limit N] [--cursor C]",
	 "List policies.", &cli_policies},
	{"policy", "get", cli_res_call, "ID", "Show one policy.", &cli_policies},
	{"policy", "delete", cli_res_delete, "ID",
	 "Delete a policy and its attachments.", &cli_policies},
	{"policy", "attach", cli_policy_attach, "ID --identity ID | --tenant",
	 "Attach a policy to an identity or to its whole tenant."},
	{"policy", "detach", cli_policy_detach, "ID --identity ID | --tenant", "Detach a policy."},
	{"events", "list", cli_events_list, "[--tenant T] [--after ID] [--type PREFIX] [--limit N]",
	 "List events, oldest first (Events.List)."},
	{"events", "watch", cli_events_watch, "[--tenant T] [--after ID] [--type PREFIX] [--count N]",
	 "Print events as they commit, after ID (Events.Watch); resume with the last id seen."},
	{"usage", "list", cli_usage_list,
	 "[--tenant T] [--meter M] [--identity ID] [--from MS] [--to MS] [--limit N] [--cursor C]",
	 "List metered usage per hourly window, with totals (Usage.List)."},
	{"mcp", NULL, cli_mcp, "[--key FILE] [--ssh PROG] [--accept-host-key]",
	 "Serve MCP over stdio: newline-delimited JSON-RPC, tools calling the API as bcctl does."},
	{"version", NULL, cli_version, "", "Print bcctl's version."},
	{"help", NULL, cli_help, "", "Print this help."},
};

static const char *const formats[] = {"table", "json", NULL};

static void print_commands(const char *noun, FILE *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++) {
		const struct cli_verb *v = &verbs[i];
		if (noun && strcmp(v->noun, noun) != 0)
			continue;
		fprintf(out, "  bcctl %s%s%s%s%s\n", v->noun, v->verb ? " " : "",
			v->verb ? v->verb : "", *v->usage ? " " : "", v->usage);
	}
}

static void print_help(const struct cli_ctx *ctx, FILE *out)
{
	fprintf(out, "usage: bcctl [global flags] NOUN VERB [flags] [args]\n\ncommands:\n");
	print_commands(NULL, out);
	fprintf(out, "\nglobal flags (before the noun or after the verb):\n");
	cli_args_print_flags(ctx->globals, ctx->n_globals, out);
	fprintf(out,
		"\nenvironment: BC_URL, BC_TOKEN, BC_CA_FILE, BC_CONFIG (default "
		"~/.config/bc/config with url =, token =, ca_file = lines)\n"
		"exit codes: 0 ok, 1 usage, 2 INVALID_INPUT, 3 NOT_FOUND, 4 CONFLICT,\n"
		"  5 ACCESS_DENIED, 6 INVALID_STATE, 7 UNSUPPORTED, 8 INVALID_CONFIG,\n"
		"  9 QUOTA_EXCEEDED, 10 CAPACITY_UNAVAILABLE, 11 SPEND_LIMIT_REACHED,\n"
		"  12 CONFIRMATION_REQUIRED, 13 INVALID_RESPONSE, 14 UNAUTHENTICATED,\n"
		"  15 INTERNAL, 16 UNAVAILABLE, 17 DEADLINE_EXCEEDED, 18 RESOURCE_EXHAUSTED\n");
}

int cli_usage_error(const struct cli_ctx *ctx, const char *fmt, ...)
{
	const struct cli_verb *v = ctx->verb;
	va_list ap;

	fprintf(stderr, "error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (v)
		fprintf(stderr, "usage: bcctl %s%s%s %s\n", v->noun, v->verb ? " " : "",
			v->verb ? v->verb : "", v->usage);
	else
		fprintf(stderr, "usage: bcctl [global flags] NOUN VERB [flags] [args] "
			"(bcctl --help lists them)\n");
	return -EINVAL;
}

static int cli_version(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = cli_args_parse(ctx, NULL, 0, argc, argv);

	if (r != 0)
		return r;
	if (ctx->format == CLI_FMT_JSON)
		printf("{\n  \"version\": \"%s\"\n}\n", BC_VERSION);
	else
		printf("bcctl %s\n", BC_VERSION);
	return 0;
}

static int cli_help(struct cli_ctx *ctx, int argc, char **argv)
{
	print_help(ctx, stdout);
	return CLI_DONE;
}

static const struct cli_verb *find_verb(const char *noun, const char *verb)
{
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++) {
		const struct cli_verb *v = &verbs[i];
		if (strcmp(v->noun, noun) != 0)
			continue;
		if (!v->verb || (verb && strcmp(v->verb, verb) == 0))
			return v;
	}
	return NULL;
}

static bool noun_known(const char *noun)
{
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (strcmp(verbs[i].noun, noun) == 0)
			return true;
	return false;
}

/* "bcctl NOUN" or "bcctl NOUN --help": list the noun's verbs. */
static int noun_help(const struct cli_ctx *ctx, const char *noun, const char *word)
{
	bool help = word && (strcmp(word, "--help") == 0 || strcmp(word, "-h") == 0);
	FILE *out = help ? stdout : stderr;

	if (!help) {
		if (word)
			fprintf(stderr, "error: unknown verb '%s' for %s\n", word, noun);
		else
			fprintf(stderr, "error: missing verb for %s\n", noun);
	}
	fprintf(out, "usage:\n");
	print_commands(noun, out);
	return help ? CLI_DONE : -EINVAL;
}

static int dispatch(struct cli_ctx *ctx, int argc, char **argv)
{
	const struct cli_verb *v;
	int i, r;

	for (i = 0; i < argc && strncmp(argv[i], "-", 1) == 0; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			print_help(ctx, stdout);
			return CLI_DONE;
		}
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strncmp(argv[i], "--", 2) != 0)
			return cli_usage_error(ctx, "unknown flag %s", argv[i]);
		r = cli_args_global(ctx, argc, argv, &i);
		if (r < 0)
			return r;
	}
	if (i == argc)
		return cli_usage_error(ctx, "missing command");
	if (!noun_known(argv[i]))
		return cli_usage_error(ctx, "unknown command '%s'", argv[i]);
	v = find_verb(argv[i], i + 1 < argc ? argv[i + 1] : NULL);
	if (!v)
		return noun_help(ctx, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
	ctx->verb = v;
	i += v->verb ? 2 : 1;
	return v->fn(ctx, argc - i, argv + i);
}

/* The one place a result becomes output and an exit status. */
static int exit_status(struct cli_ctx *ctx, int r)
{
	if (r == -BC_EDOMAIN) {
		if (ctx->err.code == BC_OK)
			bc_error_set(&ctx->err, BC_INTERNAL, "failed without a reason");
		cli_print_error(&ctx->err, stderr, ctx->format == CLI_FMT_JSON ? stdout : NULL);
		fflush(stdout);
		return bc_code_exit_status(ctx->err.code);
	}
	if (r < 0)
		return 1;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "error: writing output: %s\n", strerror(errno));
		return 1;
	}
	return ctx->exit_code;
}

int main(int argc, char **argv)
{
	struct cli_ctx ctx = {.timeout_ms = CLI_DEFAULT_TIMEOUT_MS};
	const struct cli_flag globals[] = {
		{.name = "url", .type = CLI_STR, .dst = &ctx.url, .meta = "HOST:PORT",
		 .help = "controller address (else BC_URL, config url, " CLI_DEFAULT_URL ")"},
		{.name = "ca-file", .type = CLI_STR, .dst = &ctx.ca_file, .meta = "FILE",
		 .help = "CA to verify the controller (else BC_CA_FILE, config ca_file, system roots)"},
		{.name = "format", .type = CLI_CHOICE, .dst = &ctx.format, .meta = "table|json",
		 .choices = formats, .help = "output format (default table)"},
		{.name = "timeout", .type = CLI_DUR, .dst = &ctx.timeout_ms, .meta = "DURATION",
		 .min = 1, .max = 86400000, .help = "deadline of each call (default 30s)"},
		{.name = "insecure", .type = CLI_BOOL, .dst = &ctx.insecure,
		 .help = "plaintext, no TLS (tests and benchmarks only)"},
	};
	int r, status;

	ctx.globals = globals;
	ctx.n_globals = ARRAY_SIZE(globals);
	r = dispatch(&ctx, argc - 1, argv + 1);
	status = exit_status(&ctx, r);
	rpc_client_free(ctx.client);
	if (ctx.rpc_inited)
		rpc_global_shutdown();
	free(ctx.ca_pem);
	free(ctx.tunnel_url);
	return status;
}
