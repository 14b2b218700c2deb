/* usage.c: "bcctl usage list" over bc.compute.v1.Usage: the tenant's
 * metered lines per hourly window. In table format one line per usage
 * line, "WINDOW METER QUANTITY COST_CENTS RESOURCE IDENTITY", then the
 * totals of every matching line. */
#include <inttypes.h>
#include <time.h>

#include "cli.h"

#include "bc/compute/v1/usage.pb-c.h"
#include "util.h"

#define SVC (&bc__compute__v1__usage__descriptor)

static void show_list(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__ListUsageResponse *l = (const void *)m;

	for (size_t i = 0; i < l->n_items; i++) {
		const Bc__Compute__V1__UsageLine *u = l->items[i];
		time_t t = (time_t)(u->window_start / 1000);
		char when[32] = "-";
		struct tm tm;

		if (u->window_start && gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%MZ", &tm);
		fprintf(out, "%s\t%s\t%.6f\t%.4f\t%s\t%s\n", when, u->meter, u->quantity,
			u->cost_cents, *u->resource ? u->resource : "-",
			*u->identity_id ? u->identity_id : "-");
	}
	fprintf(out, "total\t\t%.6f\t%.4f\n", l->total_quantity, l->total_cost_cents);
	if (l->cursor)
		fprintf(stderr, "more: --cursor %" PRIu64 "\n", l->cursor);
}

int cli_usage_list(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__ListUsageRequest req = BC__COMPUTE__V1__LIST_USAGE_REQUEST__INIT;
	char *tenant = NULL, *meter = NULL, *identity = NULL;
	int64_t from = 0, to = 0, limit = 0, cursor = 0;
	const struct cli_flag flags[] = {
		{.name = "tenant", .type = CLI_STR, .dst = &tenant, .meta = "T",
		 .help = "the tenant (default: the caller's)"},
		{.name = "meter", .type = CLI_STR, .dst = &meter, .meta = "M",
		 .help = "only this meter, e.g. vps.vcpu.hours"},
		{.name = "identity", .type = CLI_STR, .dst = &identity, .meta = "ID",
		 .help = "only lines owned by this identity"},
		{.name = "from", .type = CLI_INT, .dst = &from, .meta = "MS", .min = 0,
		 .max = INT64_MAX, .help = "windows starting at or after (epoch ms)"},
		{.name = "to", .type = CLI_INT, .dst = &to, .meta = "MS", .min = 0,
		 .max = INT64_MAX, .help = "windows starting before (epoch ms)"},
		{.name = "limit", .type = CLI_INT, .dst = &limit, .meta = "N", .min = 1, .max = 1000,
		 .help = "page size (default 100)"},
		{.name = "cursor", .type = CLI_INT, .dst = &cursor, .meta = "C", .min = 0,
		 .max = INT64_MAX, .help = "the previous page's cursor"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (tenant)
		req.tenant_id = tenant;
	if (meter)
		req.meter = meter;
	if (identity)
		req.identity_id = identity;
	req.from = from;
	req.to = to;
	req.limit = (int32_t)limit;
	req.cursor = (uint64_t)cursor;
	return cli_run(ctx, SVC, "List", &req.base, show_list, 0);
}
