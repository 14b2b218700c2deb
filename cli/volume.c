/* volume.c: "bcctl sandbox-volume ..." over bc.compute.v1.SandboxVolumes.
 * create sends a fresh idempotency key unless --key is given (repeat it
 * with the same --key to retry safely); get, resize and delete take a
 * volume id and refuse anything that is not vol_... before calling. */
#include "cli.h"

#include <errno.h>
#include <string.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/compute/v1/volumes.pb-c.h"
#include "util.h"

#define VSVC (&bc__compute__v1__sandbox_volumes__descriptor)

static void show_volumes(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "SIZE", "STATE", "POOL", "NODE",
					  "SERIAL", "CREATED"};
	const Bc__Compute__V1__ListSandboxVolumesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char a[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__SandboxVolume *x = l->items[i];
		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->name);
		cli_table_cell(t, "%lldGiB", (long long)x->size_gib);
		cli_table_cell(t, "%s", x->state);
		cli_table_cell(t, "%s", x->pool_id);
		cli_table_cell(t, "%s", x->node_id);
		cli_table_cell(t, "%s", x->serial);
		cli_table_cell(t, "%s", cli_fmt_time(x->created_at, a, sizeof(a)));
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

static int check_vol_id(struct cli_ctx *ctx, const char *id)
{
	if (!id_valid("vol", id))
		return cli_usage_error(ctx, "%s is not a volume id (vol_...)", id);
	return 0;
}

int cli_volume_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__CreateSandboxVolumeRequest req =
		BC__COMPUTE__V1__CREATE_SANDBOX_VOLUME_REQUEST__INIT;
	char *tenant = NULL, *pool = NULL, *name = NULL, *key = NULL;
	char fresh[64];
	int64_t size = 0;
	const struct cli_flag flags[] = {
		{.name = "pool", .type = CLI_STR, .dst = &pool, .meta = "ID", .required = true,
		 .help = "the pool whose host keeps the volume"},
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .required = true,
		 .help = "unique among the tenant's volumes"},
		{.name = "size", .type = CLI_INT, .dst = &size, .meta = "GIB", .required = true,
		 .min = 1, .max = 16384, .help = "size in GiB, 1 to 16,384"},
		{.name = "key", .type = CLI_STR, .dst = &key, .meta = "KEY",
		 .help = "idempotency key (default: a fresh one); repeat it to retry safely"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (!key) {
		id_new("cli", fresh, sizeof(fresh));
		key = fresh;
	}
	req.tenant_id = tenant ? tenant : (char *)"";
	req.pool_id = pool;
	req.name = name;
	req.size_gib = size;
	req.idempotency_key = key;
	return cli_run(ctx, VSVC, "Create", &req.base, NULL, 0);
}

/* get and delete: the positional id, checked, and --tenant. */
static int by_id(struct cli_ctx *ctx, int argc, char **argv, const char *method)
{
	Bc__Compute__V1__GetSandboxVolumeRequest get =
		BC__COMPUTE__V1__GET_SANDBOX_VOLUME_REQUEST__INIT;
	Bc__Compute__V1__DeleteSandboxVolumeRequest del =
		BC__COMPUTE__V1__DELETE_SANDBOX_VOLUME_REQUEST__INIT;
	char *tenant = NULL, *id = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &id, .required = true, .help = "volume id"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0 || (r = check_vol_id(ctx, id)) != 0)
		return r;
	if (strcmp(method, "Get") == 0) {
		get.tenant_id = tenant ? tenant : (char *)"";
		get.volume_id = id;
		return cli_run(ctx, VSVC, method, &get.base, NULL, 0);
	}
	del.tenant_id = tenant ? tenant : (char *)"";
	del.volume_id = id;
	return cli_run(ctx, VSVC, method, &del.base, NULL, 0);
}

int cli_volume_get(struct cli_ctx *ctx, int argc, char **argv)
{
	return by_id(ctx, argc, argv, "Get");
}

int cli_volume_delete(struct cli_ctx *ctx, int argc, char **argv)
{
	return by_id(ctx, argc, argv, "Delete");
}

int cli_volume_resize(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__ResizeSandboxVolumeRequest req =
		BC__COMPUTE__V1__RESIZE_SANDBOX_VOLUME_REQUEST__INIT;
	char *tenant = NULL, *id = NULL;
	int64_t size = 0;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &id, .required = true, .help = "volume id"},
		{.name = "size", .type = CLI_INT, .dst = &size, .meta = "GIB", .required = true,
		 .min = 1, .max = 16384, .help = "the new size in GiB (grow only)"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0 || (r = check_vol_id(ctx, id)) != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.volume_id = id;
	req.size_gib = size;
	return cli_run(ctx, VSVC, "Resize", &req.base, NULL, 0);
}

static const struct cli_field volume_list_flags[] = {
	{.flag = {.name = "all", .type = CLI_BOOL,
		  .help = "the tenant's volumes you may read (default: yours)"},
	 .field = "scope", .on = "all", .off = "mine"},
	{.flag = {.name = "deleted", .type = CLI_BOOL, .help = "include deleted volumes"},
	 .field = "deleted"},
	{.flag = {.name = "pool", .type = CLI_STR, .meta = "ID", .help = "only volumes of this pool"},
	 .field = "pool_id"},
	CLI_FIELD_LIMIT(200, "page size, 1..200 (default 50)"),
	CLI_FIELD_CURSOR,
	{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
};

const struct cli_resource cli_volumes = {
	.svc = VSVC, .id_field = "volume_id", .id_help = "volume id", .tenant = true,
	.list = volume_list_flags, .n_list = ARRAY_SIZE(volume_list_flags),
	.show_list = show_volumes,
};

/* --volumes NAME:/path[:ro],... for sandbox-template create and update: in
 * place (list is split), into v (and its pointers vp), at most
 * CLI_VOLUMES_MAX entries. An entry that looks like a volume id (vol_...)
 * is sent as volumeId, anything else as name. "" is no volume. 0, or a
 * usage error for an entry without a name, an absolute path, or with a
 * mode other than ro. */
int cli_volumes_parse(struct cli_ctx *ctx, char *list, Bc__Compute__V1__TemplateVolume *v,
		      Bc__Compute__V1__TemplateVolume **vp, size_t *ret_n)
{
	char *save = NULL, *e;
	size_t n = 0;

	for (e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *path = strchr(e, ':'), *mode;
		if (n == CLI_VOLUMES_MAX)
			return cli_usage_error(ctx, "--volumes takes at most %d entries",
					       CLI_VOLUMES_MAX);
		if (!path || path == e || path[1] != '/')
			return cli_usage_error(ctx, "--volumes wants NAME:/mount/path[:ro], not "
					       "'%s'", e);
		*path++ = '\0';
		mode = strchr(path, ':');
		if (mode) {
			*mode++ = '\0';
			if (strcmp(mode, "ro") != 0)
				return cli_usage_error(ctx, "--volumes: mode '%s' of %s is not ro",
						       mode, e);
		}
		bc__compute__v1__template_volume__init(&v[n]);
		if (strncmp(e, "vol_", 4) == 0)
			v[n].volume_id = e;
		else
			v[n].name = e;
		v[n].mount_path = path;
		v[n].read_only = mode != NULL;
		vp[n] = &v[n];
		n++;
	}
	*ret_n = n;
	return 0;
}
