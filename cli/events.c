/* events.c: "bcctl events list|watch" over bc.compute.v1.Events. In table
 * format watch prints one line per event, "ID TYPE SUBJECT DATA", flushed
 * as it arrives, so a script can resume with the last ID it saw. */
#include <inttypes.h>

#include "cli.h"

#include "bc/compute/v1/events.pb-c.h"
#include "util.h"

#define SVC (&bc__compute__v1__events__descriptor)

static void show_one(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__Event *e = (const void *)m;

	fprintf(out, "%" PRIu64 "\t%s\t%s\t%s\n", e->id, e->type, e->subject, e->data);
}

static void show_list(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__ListEventsResponse *l = (const void *)m;

	for (size_t i = 0; i < l->n_items; i++)
		show_one(&l->items[i]->base, out);
	if (l->cursor)
		fprintf(stderr, "more: --after %" PRIu64 "\n", l->cursor);
}

int cli_events_list(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__ListEventsRequest req = BC__COMPUTE__V1__LIST_EVENTS_REQUEST__INIT;
	char *tenant = NULL, *prefix = NULL;
	int64_t after = 0, limit = 0;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "the tenant (default: the caller's)"},
		{.name = "after", .type = CLI_INT, .dst = &after, .meta = "ID", .min = 0,
		 .max = INT64_MAX, .help = "events after this id"},
		{.name = "type", .type = CLI_STR, .dst = &prefix, .meta = "PREFIX",
		 .help = "only types starting with PREFIX, e.g. instance."},
		{.name = "limit", .type = CLI_INT, .dst = &limit, .meta = "N", .min = 1, .max = 1000,
		 .help = "page size (default 100)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (tenant)
		req.tenant_id = tenant;
	if (prefix)
		req.type_prefix = prefix;
	req.after_id = (uint64_t)after;
	req.limit = (int32_t)limit;
	return cli_run(ctx, SVC, "List", &req.base, show_list, 0);
}

int cli_events_watch(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__WatchEventsRequest req = BC__COMPUTE__V1__WATCH_EVENTS_REQUEST__INIT;
	char *tenant = NULL, *prefix = NULL;
	int64_t after = 0, count = 0;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "the tenant (default: the caller's)"},
		{.name = "after", .type = CLI_INT, .dst = &after, .meta = "ID", .min = 0,
		 .max = INT64_MAX, .help = "resume after this id (default: from the start)"},
		{.name = "type", .type = CLI_STR, .dst = &prefix, .meta = "PREFIX",
		 .help = "only types starting with PREFIX"},
		{.name = "count", .type = CLI_INT, .dst = &count, .meta = "N", .min = 1,
		 .max = INT64_MAX, .help = "exit after N events"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (tenant)
		req.tenant_id = tenant;
	if (prefix)
		req.type_prefix = prefix;
	req.after_id = (uint64_t)after;
	return cli_stream(ctx, SVC, "Watch", &req.base, show_one, count);
}
