/* identity.c: "bcctl identity ..." and "bcctl delegation ..." verbs over
 * bc.admin.v1.Identities and Delegations (operator only). */
#include "cli.h"

#include "bc/admin/v1/iam.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__identities__descriptor)
#define DLG (&bc__admin__v1__delegations__descriptor)

int cli_identity_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateIdentityRequest req = BC__ADMIN__V1__CREATE_IDENTITY_REQUEST__INIT;
	bool admin = false;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &req.tenant_id, .meta = "T",
		 .help = "the identity's tenant (default: the caller's)"},
		{.name = "kind", .type = CLI_STR, .dst = &req.kind, .meta = "K", .required = true,
		 .help = "user | service | agent"},
		{.name = "name", .type = CLI_STR, .dst = &req.name, .meta = "N", .required = true,
		 .help = "display name"},
		{.name = "admin", .type = CLI_BOOL, .dst = &admin,
		 .help = "administrator of its tenant (implicit allow there)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.is_admin = admin;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

int cli_identity_get(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__GetIdentityRequest req = BC__ADMIN__V1__GET_IDENTITY_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.identity_id, .required = true,
		 .help = "identity id"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, SVC, "Get", &req.base, NULL, 0);
}

int cli_identity_list(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__ListIdentitiesRequest req = BC__ADMIN__V1__LIST_IDENTITIES_REQUEST__INIT;
	char *tenant = NULL, *cursor = NULL;
	int64_t limit = 0;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "only this tenant's"},
		{.name = "limit", .type = CLI_INT, .dst = &limit, .meta = "N", .min = 1, .max = 500,
		 .help = "page size"},
		{.name = "cursor", .type = CLI_STR, .dst = &cursor, .meta = "C",
		 .help = "continue after this cursor"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (tenant)
		req.tenant_id = tenant;
	if (cursor)
		req.cursor = cursor;
	req.limit = (int32_t)limit;
	return cli_run(ctx, SVC, "List", &req.base, NULL, 0);
}

int cli_identity_set_state(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__SetIdentityStateRequest req = BC__ADMIN__V1__SET_IDENTITY_STATE_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.identity_id, .required = true,
		 .help = "identity id"},
		{.name = "STATE", .type = CLI_ARG, .dst = &req.state, .required = true,
		 .help = "active | suspended | deleted"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, SVC, "SetState", &req.base, NULL, 0);
}

int cli_delegation_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateDelegationRequest req = BC__ADMIN__V1__CREATE_DELEGATION_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "agent", .type = CLI_STR, .dst = &req.agent_id, .meta = "ID",
		 .required = true, .help = "the agent identity"},
		{.name = "user", .type = CLI_STR, .dst = &req.user_id, .meta = "ID",
		 .required = true, .help = "the user it acts for"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, DLG, "Create", &req.base, NULL, 0);
}

int cli_delegation_list(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__ListDelegationsRequest req = BC__ADMIN__V1__LIST_DELEGATIONS_REQUEST__INIT;
	char *tenant = NULL;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "only this tenant's"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (tenant)
		req.tenant_id = tenant;
	return cli_run(ctx, DLG, "List", &req.base, NULL, 0);
}

int cli_delegation_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__RevokeDelegationRequest req = BC__ADMIN__V1__REVOKE_DELEGATION_REQUEST__INIT;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &req.delegation_id, .required = true,
		 .help = "delegation id"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	return r != 0 ? r : cli_run(ctx, DLG, "Revoke", &req.base, NULL, 0);
}
