/* tenant.c: "bcctl tenant ..." verbs over bc.admin.v1.Tenants and Quotas
 * (operator only). Validation stays with the server. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "bc/admin/v1/iam.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__tenants__descriptor)

int cli_tenant_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateTenantRequest req = BC__ADMIN__V1__CREATE_TENANT_REQUEST__INIT;
	char *name = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.id, .required = true,
		 .help = "tenant id ([a-z0-9][a-z0-9.-]*)"},
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N",
		 .help = "display name (default: the id)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (name)
		req.name = name;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

int cli_tenant_set_state(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__SetTenantStateRequest req = BC__ADMIN__V1__SET_TENANT_STATE_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.tenant_id, .required = true,
		 .help = "tenant id"},
		{.name = "STATE", .type = CLI_ARG, .dst = &req.state, .required = true,
		 .help = "active | suspended | deleting | deleted"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, SVC, "SetState", &req.base, NULL, 0);
}

int cli_tenant_quota(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__Quota req = BC__ADMIN__V1__QUOTA__INIT;
	Bc__Admin__V1__GetQuotaRequest get = BC__ADMIN__V1__GET_QUOTA_REQUEST__INIT;
	int64_t vcpus = -1, mem = -1, disk = -1, gpus = -1, inst = -1;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.tenant_id, .required = true,
		 .help = "tenant id"},
		{.name = "vcpus", .type = CLI_INT, .dst = &vcpus, .meta = "N", .min = 0,
		 .max = 1000000, .help = "vCPU limit"},
		{.name = "memory-gib", .type = CLI_INT, .dst = &mem, .meta = "N", .min = 0,
		 .max = 1LL << 40, .help = "memory limit, GiB"},
		{.name = "disk-gib", .type = CLI_INT, .dst = &disk, .meta = "N", .min = 0,
		 .max = 1LL << 40, .help = "disk limit, GiB"},
		{.name = "gpus", .type = CLI_INT, .dst = &gpus, .meta = "N", .min = 0, .max = 100000,
		 .help = "GPU limit"},
		{.name = "instances", .type = CLI_INT, .dst = &inst, .meta = "N", .min = 0,
		 .max = 1000000, .help = "instance count limit"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (vcpus < 0 && mem < 0 && disk < 0 && gpus < 0 && inst < 0) {
		get.tenant_id = req.tenant_id;
		return cli_run(ctx, &bc__admin__v1__quotas__descriptor, "Get", &get.base, NULL, 0);
	}
	req.has_vcpus = vcpus >= 0;
	req.vcpus = (uint32_t)(vcpus < 0 ? 0 : vcpus);
	req.has_memory_gib = mem >= 0;
	req.memory_gib = (uint64_t)(mem < 0 ? 0 : mem);
	req.has_disk_gib = disk >= 0;
	req.disk_gib = (uint64_t)(disk < 0 ? 0 : disk);
	req.has_gpus = gpus >= 0;
	req.gpus = (uint32_t)(gpus < 0 ? 0 : gpus);
	req.has_instances = inst >= 0;
	req.instances = (uint32_t)(inst < 0 ? 0 : inst);
	return cli_run(ctx, &bc__admin__v1__quotas__descriptor, "Set", &req.base, NULL, 0);
}

int cli_tenant_offer(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__Offer req = BC__ADMIN__V1__OFFER__INIT;
	Bc__Admin__V1__GetOfferRequest get = BC__ADMIN__V1__GET_OFFER_REQUEST__INIT;
	static const char *const modes[] = {"none", "stop-new", "drain", NULL};
	Bc__Admin__V1__Offer__PricesEntry prices[CLI_MAX_REPEAT], *pp[CLI_MAX_REPEAT];
	struct cli_strv price = {0};
	int64_t limit = -1;
	int mode = 0;
	bool mode_seen = false;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.tenant_id, .required = true,
		 .help = "tenant id"},
		{.name = "spend-limit-cents", .type = CLI_INT, .dst = &limit, .meta = "N", .min = 0,
		 .max = INT64_MAX, .help = "the budget (default: none)"},
		{.name = "on-budget-exceeded", .type = CLI_CHOICE, .dst = &mode, .meta = "M",
		 .choices = modes, .seen = &mode_seen,
		 .help = "none (only pools that check budgets refuse) | stop-new | drain"},
		{.name = "price", .type = CLI_STRS, .dst = &price, .meta = "METER=CENTS",
		 .help = "cents per unit of a meter, e.g. vps.vcpu.hours=2.5 (repeatable)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	for (size_t i = 0; i < price.n; i++) {
		char *eq = strchr(price.v[i], '='), *end = NULL;

		if (eq) {
			*eq = '\0';
			errno = 0;
			prices[i] = (Bc__Admin__V1__Offer__PricesEntry)
				BC__ADMIN__V1__OFFER__PRICES_ENTRY__INIT;
			prices[i].value = strtod(eq + 1, &end);
		}
		if (!eq || eq == price.v[i] || !*(eq + 1) || *end || errno)
			return cli_usage_error(ctx, "--price %s: want METER=CENTS", price.v[i]);
		prices[i].key = price.v[i];
		pp[i] = &prices[i];
	}
	req.n_prices = price.n;
	req.prices = pp;
	if (limit < 0 && !mode_seen && !price.n) {
		get.tenant_id = req.tenant_id;
		return cli_run(ctx, &bc__admin__v1__offers__descriptor, "Get", &get.base, NULL, 0);
	}
	req.has_spend_limit_cents = limit >= 0;
	req.spend_limit_cents = limit < 0 ? 0 : limit;
	req.on_budget_exceeded = (char *)modes[mode];
	return cli_run(ctx, &bc__admin__v1__offers__descriptor, "Set", &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	CLI_FIELD_LIMIT(500, "page size"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_tenants = {
	.svc = SVC, .id_field = "tenant_id", .id_help = "tenant id",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
};
