/* secret.c: "bcctl secret put|list|delete" over bc.compute.v1.Secrets. A
 * value is read from standard input or --from-file, never from the
 * command line (argv is visible to every user of the machine through
 * /proc and lands in shell history), and is wiped once sent. No command
 * prints a value: the API never answers with one. */
#include "cli.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/secrets.pb-c.h"
#include "util.h"

#define SECSVC (&bc__compute__v1__secrets__descriptor)
#define SECRET_FILE_MAX (64 * 1024)   /* the server refuses more: fail early */

static void show_secrets(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "SCOPE", "VERSION", "UPDATED", "CREATED"};
	const Bc__Compute__V1__ListSecretsResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char a[32], b[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__Secret *x = l->items[i];
		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->name);
		cli_table_cell(t, "%s", x->scope);
		cli_table_cell(t, "%lld", (long long)x->version);
		cli_table_cell(t, "%s", cli_fmt_time(x->updated_at, a, sizeof(a)));
		cli_table_cell(t, "%s", cli_fmt_time(x->created_at, b, sizeof(b)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
}

/* The value: the file's bytes, or standard input's ("-" or no file). */
static int read_value(struct cli_ctx *ctx, const char *file, char **ret, size_t *ret_len)
{
	const char *path = file && strcmp(file, "-") != 0 ? file : "/dev/stdin";
	int r = file_read_all(path, SECRET_FILE_MAX, ret, ret_len);

	if (r == -EFBIG)
		return cli_usage_error(ctx, "the value is larger than %d bytes", SECRET_FILE_MAX);
	if (r < 0)
		return cli_usage_error(ctx, "cannot read the value from %s: %s",
				       file ? file : "standard input", strerror(-r));
	if (*ret_len == 0) {
		free(*ret);
		return cli_usage_error(ctx, "the value is empty (give it on standard input or with "
				       "--from-file)");
	}
	return 0;
}

int cli_secret_put(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__PutSecretRequest req = BC__COMPUTE__V1__PUT_SECRET_REQUEST__INIT;
	char *tenant = NULL, *name = NULL, *file = NULL, *value = NULL;
	bool fleet = false;
	size_t len = 0;
	const struct cli_flag flags[] = {
		{.name = "NAME", .type = CLI_ARG, .dst = &name, .required = true,
		 .help = "secret name: lowercase letters, digits, '-' and '.'; an existing name is "
			 "rotated (its version raised)"},
		{.name = "from-file", .type = CLI_STR, .dst = &file, .meta = "F",
		 .help = "read the value from file F (default: standard input). The value is "
			 "never taken from the command line"},
		{.name = "fleet", .type = CLI_BOOL, .dst = &fleet,
		 .help = "a fleet secret of the root tenant (operators only)"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0 || (r = read_value(ctx, file, &value, &len)) != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.name = name;
	req.scope = fleet ? (char *)"fleet" : (char *)"tenant";
	req.value.data = (uint8_t *)value;
	req.value.len = len;
	r = cli_run(ctx, SECSVC, "Put", &req.base, NULL, 0);
	OPENSSL_cleanse(value, len);
	free(value);
	return r;
}

int cli_secret_delete(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__DeleteSecretRequest req = BC__COMPUTE__V1__DELETE_SECRET_REQUEST__INIT;
	char *tenant = NULL, *name = NULL;
	bool fleet = false;
	const struct cli_flag flags[] = {
		{.name = "NAME", .type = CLI_ARG, .dst = &name, .required = true,
		 .help = "secret name or sec_ id"},
		{.name = "fleet", .type = CLI_BOOL, .dst = &fleet,
		 .help = "a fleet secret (operators only)"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.name = name;
	req.scope = fleet ? (char *)"fleet" : (char *)"tenant";
	return cli_run(ctx, SECSVC, "Delete", &req.base, NULL, 0);
}

static const struct cli_field secret_list_flags[] = {
	{.flag = {.name = "fleet", .type = CLI_BOOL,
		  .help = "the fleet secrets (operators only)"},
	 .field = "scope", .on = "fleet", .off = "tenant"},
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
};

const struct cli_resource cli_secrets = {
	.svc = SECSVC, .id_field = "name", .id_help = "secret name or sec_ id", .tenant = true,
	.list = secret_list_flags, .n_list = ARRAY_SIZE(secret_list_flags),
	.show_list = show_secrets,
};
