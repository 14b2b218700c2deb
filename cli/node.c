/* node.c: "bcctl node ..." verbs over bc.admin.v1.Nodes: join tokens for
 * enrolling hosts, and the view, capacity ceiling and retirement of joined
 * nodes. */
#include "cli.h"

#include <inttypes.h>
#include <stdint.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__nodes__descriptor)
#define TTL_MAX_MS (365LL * 86400 * 1000)

/* "booked/capacity" of one resource; "-" before the first report. */
static void usage_cell(struct cli_table *t, bool known, uint64_t booked, uint64_t cap)
{
	if (known)
		cli_table_cell(t, "%" PRIu64 "/%" PRIu64, booked, cap);
	else
		cli_table_cell(t, "%s", "");
}

static void show_list(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "POOL", "STATE", "HOSTNAME", "ADDRESS",
					  "VCPUS", "MEM_MIB", "DISK_GIB", "INSTANCES",
					  "GEN", "LAST_REPORT"};
	const Bc__Admin__V1__ListNodesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char when[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Admin__V1__Node *n = l->items[i];
		const Bc__Admin__V1__Capacity *c = n->capacity, *b = n->booked;
		cli_table_cell(t, "%s", n->id);
		cli_table_cell(t, "%s", n->pool_id);
		cli_table_cell(t, "%s", n->state);
		cli_table_cell(t, "%s", n->hostname);
		cli_table_cell(t, "%s", n->address);
		usage_cell(t, c, b ? b->vcpus : 0, c ? c->vcpus : 0);
		usage_cell(t, c, b ? b->memory_mib : 0, c ? c->memory_mib : 0);
		usage_cell(t, c, b ? b->disk_gib : 0, c ? c->disk_gib : 0);
		cli_table_cell(t, "%u", n->instances);
		cli_table_cell(t, "%" PRIu64 "/%" PRIu64, n->applied_generation,
			       n->spec_generation);
		cli_table_cell(t, "%s", cli_fmt_time(n->last_report_at, when, sizeof(when)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

/* The token alone on stdout, so TOKEN=$(bcctl node join-token ...) works;
 * when it expires on stderr. */
static void show_token(const ProtobufCMessage *resp, FILE *out)
{
	const Bc__Admin__V1__JoinToken *jt = (const void *)resp;
	char when[32];

	fprintf(out, "%s\n", jt->token);
	fprintf(stderr, "# join token %s for pool %s, single use, expires %s\n", jt->id,
		jt->pool_id, cli_fmt_time(jt->expires_at, when, sizeof(when)));
}

int cli_node_join_token(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateJoinTokenRequest req = BC__ADMIN__V1__CREATE_JOIN_TOKEN_REQUEST__INIT;
	char *pool = NULL;
	int64_t ttl = 0;
	const struct cli_flag flags[] = {
		{.name = "pool", .type = CLI_STR, .dst = &pool, .meta = "ID", .required = true,
		 .help = "the pool the node joins"},
		{.name = "ttl", .type = CLI_DUR, .dst = &ttl, .meta = "DURATION", .min = 1000,
		 .max = TTL_MAX_MS, .help = "validity (default 1h, at most 7d)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (ttl % 1000)
		return cli_usage_error(ctx, "--ttl: whole seconds only");
	req.pool_id = pool;
	req.ttl_seconds = ttl / 1000;
	return cli_run(ctx, SVC, "CreateJoinToken", &req.base, show_token, 0);
}

int cli_node_set_capacity(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__SetNodeCapacityRequest req = BC__ADMIN__V1__SET_NODE_CAPACITY_REQUEST__INIT;
	Bc__Admin__V1__Capacity cap = BC__ADMIN__V1__CAPACITY__INIT;
	int64_t vcpus = 0, mem = 0, disk = 0, gpus = 0;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.node_id, .required = true,
		 .help = "node id"},
		{.name = "vcpus", .type = CLI_INT, .dst = &vcpus, .meta = "N", .min = 1,
		 .max = 65536, .help = "at most this many vCPUs"},
		{.name = "memory-mib", .type = CLI_INT, .dst = &mem, .meta = "N", .min = 1,
		 .max = 1LL << 40, .help = "at most this much memory, MiB"},
		{.name = "disk-gib", .type = CLI_INT, .dst = &disk, .meta = "N", .min = 1,
		 .max = 1LL << 30, .help = "at most this much disk, GiB"},
		{.name = "gpus", .type = CLI_INT, .dst = &gpus, .meta = "N", .min = 1, .max = 1024,
		 .help = "at most this many GPUs"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (!vcpus && !mem && !disk && !gpus)
		return cli_usage_error(ctx, "set at least one of --vcpus, --memory-mib, "
					    "--disk-gib, --gpus");
	cap.vcpus = (uint32_t)vcpus;
	cap.memory_mib = (uint64_t)mem;
	cap.disk_gib = (uint64_t)disk;
	cap.gpus = (uint32_t)gpus;
	req.ceiling = &cap;
	return cli_run(ctx, SVC, "SetCapacity", &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	{.flag = {.name = "pool", .type = CLI_STR, .meta = "ID", .help = "only nodes of this pool"},
	 .field = "pool_id"},
	CLI_FIELD_LIMIT(1000, "page size (server default and cap apply)"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_nodes = {
	.svc = SVC, .id_field = "node_id", .id_help = "node id",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags), .show_list = show_list,
};

static void show_doctor(const ProtobufCMessage *resp, FILE *out)
{
	const Bc__Admin__V1__DoctorReport *rep = (const void *)resp;

	for (size_t i = 0; i < rep->n_findings; i++)
		fprintf(out, "%s %s %s: %s\n", rep->findings[i]->severity, rep->findings[i]->check,
			rep->findings[i]->node_id, rep->findings[i]->message);
	if (rep->n_findings == 0)
		fprintf(out, "ok\n");
}

/* bcctl doctor run: the control plane's self-check (Doctor.Run). */
int cli_doctor_run(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__RunDoctorRequest req = BC__ADMIN__V1__RUN_DOCTOR_REQUEST__INIT;
	int r = cli_args_parse(ctx, NULL, 0, argc, argv);

	if (r != 0)
		return r;
	return cli_run(ctx, &bc__admin__v1__doctor__descriptor, "Run", &req.base, show_doctor, 0);
}
