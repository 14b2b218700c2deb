/* instance.c: "bcctl instance ..." verbs over bc.compute.v1.Instances.
 * --tenant is optional everywhere: an empty tenant_id makes the server use
 * the caller's own tenant. --wait asks the server to hold the Create reply
 * until the instance runs (or the wait ends), so the call's deadline grows
 * by the same amount. */
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "util.h"

#define SVC (&bc__compute__v1__instances__descriptor)

static void show_list(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "STATE", "POOL", "NODE", "FLAVOR", "IPV4",
					  "CREATED"};
	const Bc__Compute__V1__ListInstancesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char when[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__Instance *in = l->items[i];
		cli_table_cell(t, "%s", in->id);
		cli_table_cell(t, "%s", in->state);
		cli_table_cell(t, "%s", in->pool_id);
		cli_table_cell(t, "%s", in->node_id);
		cli_table_cell(t, "%s", in->flavor);
		cli_table_cell(t, "%s", in->n_nics ? in->nics[0]->ipv4 : "");
		cli_table_cell(t, "%s", cli_fmt_time(in->created_at, when, sizeof(when)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

/* Length of the UTF-8 sequence at p (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	unsigned lo = 0x80, hi = 0xbf;
	size_t len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/* proto3 strings must be UTF-8: servers in other languages refuse the rest. */
static bool utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);

	while (n > 0) {
		size_t k = utf8_len(p, n);
		if (k == 0)
			return false;
		p += k;
		n -= k;
	}
	return true;
}

int cli_instance_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__CreateInstanceRequest req = BC__COMPUTE__V1__CREATE_INSTANCE_REQUEST__INIT;
	Bc__Compute__V1__Wait wait = BC__COMPUTE__V1__WAIT__INIT;
	char *tenant = NULL, *pool = NULL, *flavor = NULL, *image = NULL, *network = NULL;
	char *key = NULL;
	_cleanup_free_ char *user_data = NULL;
	struct cli_strv keys = {0};
	int64_t wait_ms = 0;
	bool waiting = false;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "owning tenant (default: the caller's)"},
		{.name = "pool", .type = CLI_STR, .dst = &pool, .meta = "ID", .required = true,
		 .help = "pool to place the instance in"},
		{.name = "flavor", .type = CLI_STR, .dst = &flavor, .meta = "F", .required = true,
		 .help = "flavor id or name"},
		{.name = "image", .type = CLI_STR, .dst = &image, .meta = "I", .required = true,
		 .help = "image id or name"},
		{.name = "ssh-key", .type = CLI_STRS, .dst = &keys, .meta = "K",
		 .help = "authorized OpenSSH public key line"},
		{.name = "user-data-file", .type = CLI_FILE, .dst = &user_data, .meta = "F",
		 .max = CLI_USER_DATA_MAX, .help = "cloud-init user data (at most 64 KiB, UTF-8)"},
		{.name = "network", .type = CLI_STR, .dst = &network, .meta = "POLICY",
		 .help = "egress (default) | private | none"},
		{.name = "key", .type = CLI_STR, .dst = &key, .meta = "IDEMPOTENCY",
		 .help = "idempotency key: a retry with the same key returns the same instance"},
		{.name = "wait", .type = CLI_DUR, .dst = &wait_ms, .meta = "DURATION", .min = 0,
		 .max = INT32_MAX, .seen = &waiting,
		 .help = "let the server wait up to this long for the instance to run (max 30s)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (user_data && !utf8_valid(user_data))
		return cli_usage_error(ctx, "--user-data-file: not UTF-8 text");
	if (tenant)
		req.tenant_id = tenant;
	req.pool_id = pool;
	req.flavor = flavor;
	req.image_id = image;
	req.n_ssh_keys = keys.n;
	req.ssh_keys = keys.v;
	if (user_data)
		req.user_data = user_data;
	if (network)
		req.network_policy = network;
	if (key)
		req.idempotency_key = key;
	if (waiting) {
		wait.timeout_ms = (int32_t)wait_ms;
		req.wait = &wait;
	}
	return cli_run(ctx, SVC, "Create", &req.base, NULL, wait_ms);
}

static const struct cli_field list_flags[] = {
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
	{.flag = {.name = "pool", .type = CLI_STR, .meta = "ID",
		  .help = "only instances of this pool"},
	 .field = "pool_id"},
	{.flag = {.name = "deleted", .type = CLI_BOOL, .help = "include deleted instances"},
	 .field = "deleted"},
	CLI_FIELD_LIMIT(200, "page size, 1..200 (default 50)"),
	CLI_FIELD_CURSOR,
	{.flag = {.name = "scope", .type = CLI_STR, .meta = "S",
		  .help = "mine (default: what you created) | all (the tenant's you may read)"},
	 .field = "scope"},
};

/* Get, Delete, Start, Stop, Pause and Resume take (tenant, instance id). */
const struct cli_resource cli_instances = {
	.svc = SVC, .id_field = "instance_id", .id_help = "instance id", .tenant = true,
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags), .show_list = show_list,
};
