/* pool.c: "bcctl pool ..." verbs over bc.admin.v1.Pools. Each verb maps
 * its flags onto the request and leaves validation (names, CIDRs, runtimes)
 * to the server, which owns the rules and reports them as INVALID_INPUT. */
#include "cli.h"

#include "bc/admin/v1/admin.pb-c.h"
#include "bc/admin/v1/iam.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__pools__descriptor)

/* The last column: "all", or the tenant ids joined by commas. */
static void tenants_cell(struct cli_table *t, const Bc__Admin__V1__Pool *p)
{
	char buf[1024] = "all";
	size_t used = 0;

	for (size_t i = 0; i < p->n_tenant_ids && used < sizeof(buf); i++)
		used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? "," : "",
					 p->tenant_ids[i]);
	cli_table_cell(t, "%s", buf);
}

static void show_list(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "RUNTIME", "SUBNET", "GATEWAY",
					  "BRIDGE", "RECREATE", "CREATED", "TENANTS"};
	const Bc__Admin__V1__ListPoolsResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char when[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Admin__V1__Pool *p = l->items[i];
		cli_table_cell(t, "%s", p->id);
		cli_table_cell(t, "%s", p->name);
		cli_table_cell(t, "%s", p->runtime);
		cli_table_cell(t, "%s", p->ipam_subnet);
		cli_table_cell(t, "%s", p->ipam_gateway);
		cli_table_cell(t, "%s", p->bridge);
		cli_table_cell(t, "%s", p->recreate_on_host_loss ? "yes" : "no");
		cli_table_cell(t, "%s", cli_fmt_time(p->created_at, when, sizeof(when)));
		tenants_cell(t, p);
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

static void show_deleted(const ProtobufCMessage *resp, FILE *out)
{
	const Bc__Admin__V1__DeletePoolResponse *d = (const void *)resp;

	if (d->pool)
		cli_print_fields(&d->pool->base, out);
}

int cli_pool_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreatePoolRequest req = BC__ADMIN__V1__CREATE_POOL_REQUEST__INIT;
	char *name = NULL, *runtime = NULL, *subnet = NULL, *gateway = NULL, *subnet6 = NULL;
	char *bridge = NULL, *key = NULL;
	struct cli_strv tenants = {0};
	bool recreate = false;
	const struct cli_flag flags[] = {
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .required = true,
		 .help = "unique pool name"},
		{.name = "runtime", .type = CLI_STR, .dst = &runtime, .meta = "RT", .required = true,
		 .help = "fake | libvirt | cloud-hypervisor"},
		{.name = "subnet", .type = CLI_STR, .dst = &subnet, .meta = "CIDR",
		 .help = "IPv4 IPAM subnet, e.g. 10.80.0.0/24 (none: no IPAM)"},
		{.name = "gateway", .type = CLI_STR, .dst = &gateway, .meta = "IP",
		 .help = "gateway inside the subnet, never leased"},
		{.name = "subnet6", .type = CLI_STR, .dst = &subnet6, .meta = "CIDR",
		 .help = "optional IPv6 /64 for NIC addresses"},
		{.name = "bridge", .type = CLI_STR, .dst = &bridge, .meta = "BR",
		 .help = "Linux bridge on every host of the pool"},
		{.name = "recreate-on-host-loss", .type = CLI_BOOL, .dst = &recreate,
		 .help = "recreate instances elsewhere when their host is lost"},
		{.name = "tenant", .type = CLI_STRS, .dst = &tenants, .meta = "T",
		 .help = "offer the pool to this tenant only (default: every tenant)"},
		{.name = "key", .type = CLI_STR, .dst = &key, .meta = "K",
		 .help = "idempotency key"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.name = name;
	req.runtime = runtime;
	if (subnet)
		req.ipam_subnet = subnet;
	if (gateway)
		req.ipam_gateway = gateway;
	if (subnet6)
		req.ipam_subnet6 = subnet6;
	if (bridge)
		req.bridge = bridge;
	if (key)
		req.idempotency_key = key;
	req.recreate_on_host_loss = recreate;
	req.n_tenant_ids = tenants.n;
	req.tenant_ids = tenants.v;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

int cli_pool_budget_check(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__SetPoolBudgetCheckRequest req =
		BC__ADMIN__V1__SET_POOL_BUDGET_CHECK_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.pool_id, .required = true,
		 .help = "pool id"},
		{.name = "CHECK", .type = CLI_ARG, .dst = &req.budget_check, .required = true,
		 .help = "none | meter (refuse new work on a spent budget)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, &bc__admin__v1__offers__descriptor, "SetPoolBudgetCheck",
				    &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	CLI_FIELD_LIMIT(1000, "page size (server default and cap apply)"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_pools = {
	.svc = SVC, .id_field = "pool_id", .id_help = "pool id",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
	.show_list = show_list, .show_deleted = show_deleted,
};
