/* token.c: "bcctl token ..." verbs over bc.admin.v1.ApiTokens (operator
 * only). create prints the token once; the server keeps only its hash. */
#include "cli.h"

#include "bc/admin/v1/iam.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__api_tokens__descriptor)

int cli_token_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateApiTokenRequest req = BC__ADMIN__V1__CREATE_API_TOKEN_REQUEST__INIT;
	char *name = NULL;
	int64_t ttl = 0;
	const struct cli_flag flags[] = {
		{.name = "identity", .type = CLI_STR, .dst = &req.identity_id, .meta = "ID",
		 .required = true, .help = "the identity the token authenticates"},
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .help = "a label"},
		{.name = "ttl", .type = CLI_DUR, .dst = &ttl, .meta = "D", .min = 1000,
		 .max = 400LL * 86400 * 1000, .help = "expire after D (default: never)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (name)
		req.name = name;
	req.ttl_seconds = ttl / 1000;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	{.flag = {.name = "identity", .type = CLI_STR, .meta = "ID", .required = true,
		  .help = "the identity"},
	 .field = "identity_id"},
};

const struct cli_resource cli_tokens = {
	.svc = SVC, .id_field = "token_id", .id_help = "token id (tok_...)",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
};
