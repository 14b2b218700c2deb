/* policy.c: "bcctl policy ..." verbs over bc.admin.v1.Policies (operator
 * only). The document is read from a file; the server validates it and
 * names the offending field when it refuses. */
#include <stdlib.h>

#include "cli.h"

#include "bc/admin/v1/iam.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__policies__descriptor)
#define POLICY_FILE_MAX (256 * 1024)

int cli_policy_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreatePolicyRequest req = BC__ADMIN__V1__CREATE_POLICY_REQUEST__INIT;
	char *doc = NULL;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &req.tenant_id, .meta = "T",
		 .help = "the policy's tenant (default: the caller's)"},
		{.name = "name", .type = CLI_STR, .dst = &req.name, .meta = "N", .required = true,
		 .help = "unique in the tenant"},
		{.name = "file", .type = CLI_FILE, .dst = &doc, .meta = "F", .required = true,
		 .max = POLICY_FILE_MAX, .help = "the JSON document"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r == 0) {
		req.document = doc;
		r = cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
	}
	free(doc);
	return r;
}

static int attach(struct cli_ctx *ctx, int argc, char **argv, const char *method)
{
	Bc__Admin__V1__AttachPolicyRequest req = BC__ADMIN__V1__ATTACH_POLICY_REQUEST__INIT;
	char *identity = NULL;
	bool tenant = false;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.policy_id, .required = true,
		 .help = "policy id"},
		{.name = "identity", .type = CLI_STR, .dst = &identity, .meta = "ID",
		 .help = "attach to this identity"},
		{.name = "tenant", .type = CLI_BOOL, .dst = &tenant,
		 .help = "attach to every identity of the policy's tenant"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (!identity == !tenant)
		return cli_usage_error(ctx, "give exactly one of --identity or --tenant");
	if (identity)
		req.identity_id = identity;
	req.tenant = tenant;
	return cli_run(ctx, SVC, method, &req.base, NULL, 0);
}

int cli_policy_attach(struct cli_ctx *ctx, int argc, char **argv)
{
	return attach(ctx, argc, argv, "Attach");
}

int cli_policy_detach(struct cli_ctx *ctx, int argc, char **argv)
{
	return attach(ctx, argc, argv, "Detach");
}

static const struct cli_field list_flags[] = {
	{.flag = {.name = "tenant", .type = CLI_STR, .meta = "T", .help = "only this tenant's"},
	 .field = "tenant_id"},
	CLI_FIELD_LIMIT(500, "page size"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_policies = {
	.svc = SVC, .id_field = "policy_id", .id_help = "policy id",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
};
