/* image.c: "bcctl image ..." verbs over bc.admin.v1.Images. Images are
 * registered by URL and digest; hosts fetch and verify them, bcctl never
 * downloads anything. */
#include "cli.h"

#include <stdint.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "util.h"

#define SVC (&bc__admin__v1__images__descriptor)

static void show_list(const ProtobufCMessage *resp, FILE *out)
{
	static const char *const hdr[] = {"ID", "NAME", "FORMAT", "SIZE", "SHA256", "CREATED",
					  "URL"};
	const Bc__Admin__V1__ListImagesResponse *l = (const void *)resp;
	struct cli_table *t = cli_table_new(hdr, ARRAY_SIZE(hdr));
	char when[32];

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Admin__V1__Image *im = l->items[i];
		cli_table_cell(t, "%s", im->id);
		cli_table_cell(t, "%s", im->name);
		cli_table_cell(t, "%s", im->format);
		cli_table_cell(t, "%llu", (unsigned long long)im->size_bytes);
		cli_table_cell(t, "%.12s", im->sha256);
		cli_table_cell(t, "%s", cli_fmt_time(im->created_at, when, sizeof(when)));
		cli_table_cell(t, "%s", im->url);
	}
	cli_table_print(t, out);
	cli_table_free(t);
	cli_print_more(l->cursor);
}

static void show_deleted(const ProtobufCMessage *resp, FILE *out)
{
	const Bc__Admin__V1__DeleteImageResponse *d = (const void *)resp;

	if (d->image)
		cli_print_fields(&d->image->base, out);
}

int cli_image_create(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Admin__V1__CreateImageRequest req = BC__ADMIN__V1__CREATE_IMAGE_REQUEST__INIT;
	char *name = NULL, *format = NULL, *url = NULL, *sha = NULL;
	int64_t size = 0;
	const struct cli_flag flags[] = {
		{.name = "name", .type = CLI_STR, .dst = &name, .meta = "N", .required = true,
		 .help = "image name"},
		{.name = "format", .type = CLI_STR, .dst = &format, .meta = "qcow2|raw",
		 .required = true, .help = "disk format"},
		{.name = "url", .type = CLI_STR, .dst = &url, .meta = "https://...",
		 .required = true, .help = "where hosts download the image"},
		{.name = "sha256", .type = CLI_STR, .dst = &sha, .meta = "HEX", .required = true,
		 .help = "64 lowercase hex digits of the file's SHA-256"},
		{.name = "size", .type = CLI_INT, .dst = &size, .meta = "BYTES", .required = true,
		 .min = 0, .max = INT64_MAX, .help = "file size in bytes"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.name = name;
	req.format = format;
	req.url = url;
	req.sha256 = sha;
	req.size_bytes = (uint64_t)size;
	return cli_run(ctx, SVC, "Create", &req.base, NULL, 0);
}

static const struct cli_field list_flags[] = {
	CLI_FIELD_LIMIT(1000, "page size (server default and cap apply)"),
	CLI_FIELD_CURSOR,
};

const struct cli_resource cli_images = {
	.svc = SVC, .id = "ID|NAME", .id_field = "image", .id_help = "image id or name",
	.list = list_flags, .n_list = ARRAY_SIZE(list_flags),
	.show_list = show_list, .show_deleted = show_deleted,
};
