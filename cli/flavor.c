/* flavor.c: "bcctl flavor ..." verbs over bc.admin.v1.Flavors. Flavors are
 * named by id or name; the server resolves either. */
#include "cli.h"

#include <stdint.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__flavors__descriptor)

static void show_list(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "VCPUS", "MEM_MIB", "DISK_GIB", "GPUS",
					  "HUGE_PAGES", "NUMA", "PIN", "CREATED"};
	const Bc__Admin__V1__ListFlavorsResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char when[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Admin__V1__Flavor *f = l->items[i];
		cli_table_cell(t, "%s", f->id);
		cli_table_cell(t, "%s", f->name);
		cli_table_cell(t, "%u", f->vcpus);
		cli_table_cell(t, "%llu", (unsigned long long)f->memory_mib);
		cli_table_cell(t, "%llu", (unsigned long long)f->disk_gib);
		cli_table_cell(t, "%u", f->gpus);
		cli_table_cell(t, "%s", f->huge_pages);
		if (f->numa_node < 0)
			cli_table_cell(t, "%s", "");
		else
			cli_table_cell(t, "%d", f->numa_node);
		cli_table_cell(t, "%s", f->pin_vcpus ? "yes" : "no");
		cli_table_cell(t, "%s", cli_fmt_time(f->created_at, when, sizeof(when)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

static void show_deleted(const ProtobufCMessage *resp, FILE *out)
{
	const Bc__Admin__V1__DeleteFlavorResponse *d = (const void *)resp;

	if (d->flavor)
		cli_print_fields(&d->flavor->base, out);
}

int cli_flavor_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateFlavorRequest req = BC__ADMIN__V1__CREATE_FLAVOR_REQUEST__INIT;
	int64_t vcpus = 0, mem = 0, disk = 0, gpus = 0, numa = -1;
	char *name = NULL, *huge = NULL;
	bool pin = false, numa_set = false;
	const struct cli_flag flags[] = {
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .required = true,
		 .help = "flavor name, e.g. sbx.small"},
		{.name = "vcpus", .type = CLI_INT, .dst = &vcpus, .meta = "N", .required = true,
		 .min = 0, .max = UINT32_MAX, .help = "virtual CPUs"},
		{.name = "memory-mib", .type = CLI_INT, .dst = &mem, .meta = "N", .required = true,
		 .min = 0, .max = INT64_MAX, .help = "memory in MiB"},
		{.name = "disk-gib", .type = CLI_INT, .dst = &disk, .meta = "N", .required = true,
		 .min = 0, .max = INT64_MAX, .help = "root disk in GiB"},
		{.name = "gpus", .type = CLI_INT, .dst = &gpus, .meta = "N", .min = 0,
		 .max = UINT32_MAX, .help = "GPUs (default 0)"},
		{.name = "huge-pages", .type = CLI_STR, .dst = &huge, .meta = "2M|1G",
		 .help = "back memory with huge pages of this size"},
		{.name = "numa-node", .type = CLI_INT, .dst = &numa, .meta = "N", .min = -1,
		 .max = INT32_MAX, .seen = &numa_set, .help = "place on this host NUMA node (-1: none)"},
		{.name = "pin-vcpus", .type = CLI_BOOL, .dst = &pin,
		 .help = "pin each vCPU to a host CPU"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.name = name;
	req.vcpus = (uint32_t)vcpus;
	req.memory_mib = (uint64_t)mem;
	req.disk_gib = (uint64_t)disk;
	req.gpus = (uint32_t)gpus;
	if (huge)
		req.huge_pages = huge;
	req.numa_node = (int32_t)numa;
	req.has_numa_node = numa_set;
	req.pin_vcpus = pin;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	CLI_FIELD_LIMIT(1000, "page size (server default and cap apply)"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_flavors = {
	.svc = SVC, .id = "ID|NAME", .id_field = "flavor", .id_help = "flavor id or name",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
	.show_list = show_list, .show_deleted = show_deleted,
};
