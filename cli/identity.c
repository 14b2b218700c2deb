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

static const struct cli_field list_flags[] = {
	{.flag = {.name = "tenant", .type = CLI_STR, .meta = "T", .help = "only this tenant's"},
	 .field = "tenant_id"},
	CLI_FIELD_LIMIT(500, "page size"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_identities = {
	.svc = SVC, .id_field = "identity_id", .id_help = "identity id",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
};

const struct cli_resource cli_delegations = {
	.svc = DLG, .id_field = "delegation_id", .id_help = "delegation id",
	.list = list_flags, .n_list = 1, /* --tenant only */
};
