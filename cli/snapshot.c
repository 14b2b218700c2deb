/* snapshot.c: "bcctl sandbox snapshot SBX" (Sandboxes.Snapshot) and
 * "bcctl sandbox-snapshot list|get|delete" over
 * bc.compute.v1.SandboxSnapshots. snapshot takes memory and disk unless
 * --no-memory; --key makes a retry return the same snapshot. */
#include "cli.h"

#include <errno.h>
#include <string.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "util.h"

#define SNSVC (&bc__compute__v1__sandbox_snapshots__descriptor)

static void show_snapshots(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "SANDBOX", "STATE", "MEMORY", "KEEP", "SIZE",
					  "OWNER", "CREATED"};
	const Bc__Compute__V1__ListSandboxSnapshotsResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char a[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__SandboxSnapshot *x = l->items[i];
		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->sandbox_id);
		cli_table_cell(t, "%s", x->state);
		cli_table_cell(t, "%s", x->include_memory ? "yes" : "no");
		cli_table_cell(t, "%s", x->keep ? "yes" : "no");
		cli_table_cell(t, "%llu", (unsigned long long)x->size_bytes);
		cli_table_cell(t, "%s", x->owner_identity_id);
		cli_table_cell(t, "%s", cli_fmt_time(x->created_at, a, sizeof(a)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

int cli_sandbox_snapshot(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__SnapshotSandboxRequest req =
		BC__COMPUTE__V1__SNAPSHOT_SANDBOX_REQUEST__INIT;
	char *tenant = NULL, *id = NULL, *key = NULL;
	bool keep = false, no_memory = false;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &id, .required = true, .help = "sandbox id"},
		{.name = "keep", .type = CLI_BOOL, .dst = &keep,
		 .help = "keep the snapshot after the sandbox is deleted"},
		{.name = "no-memory", .type = CLI_BOOL, .dst = &no_memory,
		 .help = "disk only: its restores boot fresh"},
		{.name = "key", .type = CLI_STR, .dst = &key, .meta = "K",
		 .help = "idempotency key: a retry with the same key returns the same snapshot"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (!id_valid("sbx", id))
		return cli_usage_error(ctx, "%s is not a sandbox id (sbx_...)", id);
	req.tenant_id = tenant ? tenant : (char *)"";
	req.sandbox_id = id;
	req.keep = keep;
	req.include_memory_set_case =
		BC__COMPUTE__V1__SNAPSHOT_SANDBOX_REQUEST__INCLUDE_MEMORY_SET_INCLUDE_MEMORY;
	req.include_memory = !no_memory;
	if (key)
		req.idempotency_key = key;
	return cli_run(ctx, &bc__compute__v1__sandboxes__descriptor, "Snapshot", &req.base, NULL,
		       0);
}

static const struct cli_field snapshot_list_flags[] = {
	{.flag = {.name = "all", .type = CLI_BOOL,
		  .help = "the tenant's snapshots you may read (default: yours)"},
	 .field = "scope", .on = "all", .off = "mine"},
	{.flag = {.name = "sandbox", .type = CLI_STR, .meta = "ID",
		  .help = "only this sandbox's snapshots"},
	 .field = "sandbox_id"},
	CLI_FIELD_LIMIT(200, "page size, 1..200 (default 50)"),
	CLI_FIELD_CURSOR,
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
};

const struct cli_resource cli_snapshots = {
	.svc = SNSVC, .id_field = "snapshot_id", .id_help = "snapshot id", .tenant = true,
	.list = snapshot_list_flags, .n_list = ARRAY_SIZE(snapshot_list_flags),
	.show_list = show_snapshots,
};
