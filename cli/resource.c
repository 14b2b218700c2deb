/* resource.c: the generic verbs of bcctl. Most nouns have the same list,
 * get and delete (and revoke, retire, start, ...) verbs, which differ only
 * in their service, the request field their ID fills and the flags of their
 * list. Each noun describes itself once as a struct cli_resource (in its
 * own file, beside the table printers it uses) and main.c's verb table
 * points those verbs at the functions here, which build the request by
 * field name through the protobuf-c descriptors:
 *
 *	bcctl flavor list --limit 5   ->  Flavors.List {limit: 5}, show_list
 *	bcctl flavor get small        ->  Flavors.Get {flavor: "small"}
 *	bcctl flavor delete small     ->  Flavors.Delete {flavor: "small"}, show_deleted
 *	bcctl node retire nd_...      ->  Nodes.Retire {node_id: "nd_..."}
 *
 * The method is the verb capitalised; the output and exit codes are
 * cli_run()'s, as for any verb. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "util.h"

/* The value a generic flag parses into. */
union cli_value {
	char *s;
	int64_t i;
	bool b;
};

static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessage *msg, const char *name)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field_by_name(msg->descriptor, name);

	return f && f->label == PROTOBUF_C_LABEL_NONE ? f : NULL;
}

/* Write v, parsed as flag type t, into msg's field name (strings
 * borrowed). 0, or -ENOENT when the request has no such field of a type
 * the flag can fill. */
static int set_field(ProtobufCMessage *msg, const struct cli_field *cf, const union cli_value *v)
{
	const ProtobufCFieldDescriptor *f = field_of(msg, cf->field);
	void *at = f ? (char *)msg + f->offset : NULL;

	if (!f)
		return -ENOENT;
	if (f->type == PROTOBUF_C_TYPE_STRING && cf->flag.type == CLI_BOOL && cf->on) {
		*(const char **)at = v->b ? cf->on : cf->off;
		return 0;
	}
	switch (cf->flag.type) {
	case CLI_STR:
	case CLI_ARG:
		if (f->type != PROTOBUF_C_TYPE_STRING)
			return -ENOENT;
		if (v->s)
			*(char **)at = v->s;
		return 0;
	case CLI_BOOL:
		if (f->type != PROTOBUF_C_TYPE_BOOL)
			return -ENOENT;
		*(protobuf_c_boolean *)at = v->b;
		return 0;
	case CLI_INT:
		if (f->type == PROTOBUF_C_TYPE_INT32)
			*(int32_t *)at = (int32_t)v->i;
		else if (f->type == PROTOBUF_C_TYPE_INT64)
			*(int64_t *)at = v->i;
		else
			return -ENOENT;
		return 0;
	default:
		return -ENOENT;
	}
}

/* Parse argv against fields[0..n) and call res's method with the request
 * they fill, printing the answer with show. */
static int run_fields(struct cli_ctx *ctx, int argc, char **argv, const struct cli_resource *res,
		      const char *method, const struct cli_field *fields, size_t n,
		      cli_show_fn show)
{
	const ProtobufCMethodDescriptor *md =
		protobuf_c_service_descriptor_get_method_by_name(res->svc, method);
	_cleanup_free_ ProtobufCMessage *req = NULL;
	union cli_value vals[CLI_MAX_FLAGS] = {{0}};
	struct cli_flag flags[CLI_MAX_FLAGS];
	int r;

	if (n > CLI_MAX_FLAGS)
		return bc_error_set(&ctx->err, BC_INTERNAL, "%s: too many flags", method);
	for (size_t i = 0; i < n; i++) {
		flags[i] = fields[i].flag;
		flags[i].dst = &vals[i];
	}
	if ((r = cli_args_parse(ctx, flags, n, argc, argv)) != 0)
		return r;
	if (!md)
		return bc_error_set(&ctx->err, BC_INTERNAL, "no method %s.%s", res->svc->name, method);
	req = xcalloc(1, md->input->sizeof_message);
	protobuf_c_message_init(md->input, req);
	for (size_t i = 0; i < n; i++)
		if (set_field(req, &fields[i], &vals[i]) < 0)
			return bc_error_set(&ctx->err, BC_INTERNAL, "%s has no field %s for --%s",
					    md->input->name, fields[i].field, fields[i].flag.name);
	return cli_run(ctx, res->svc, method, req, show, 0);
}

/* An ID verb of res: the positional ID, and --tenant where res takes it. */
static int run_by_id(struct cli_ctx *ctx, int argc, char **argv, const char *method,
		     cli_show_fn show)
{
	const struct cli_resource *res = ctx->verb->res;
	const struct cli_field fields[] = {
		{.flag = {.name = res->id ? res->id : "ID", .type = CLI_ARG, .required = true,
			  .help = res->id_help},
		 .field = res->id_field},
		{.flag = CLI_FLAG_TENANT(NULL), .field = "tenant_id"},
	};

	return run_fields(ctx, argc, argv, res, method, fields, res->tenant ? 2 : 1, show);
}

int cli_res_list(struct cli_ctx *ctx, int argc, char **argv)
{
	const struct cli_resource *res = ctx->verb->res;

	return run_fields(ctx, argc, argv, res, "List", res->list, res->n_list, res->show_list);
}

int cli_res_call(struct cli_ctx *ctx, int argc, char **argv)
{
	char method[32];

	snprintf(method, sizeof(method), "%s", ctx->verb->verb);
	method[0] = (char)toupper((unsigned char)method[0]);
	return run_by_id(ctx, argc, argv, method, NULL);
}

int cli_res_delete(struct cli_ctx *ctx, int argc, char **argv)
{
	return run_by_id(ctx, argc, argv, "Delete", ctx->verb->res->show_deleted);
}
