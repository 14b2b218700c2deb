/* recognize.c: `bcctl identity recognize ADDR` (Identity.Recognize): which
 * sandbox a source address belongs to, by the live identity epoch bound to
 * it (docs/identity.md). One call, no cache: an enforcement point keeps
 * the answer for at most the cacheSeconds it carries. */
#include "cli.h"

#include "bc/compute/v1/identity.pb-c.h"
#include "util.h"

static void show_recognition(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__Recognition *a = (const void *)m;

	fprintf(out, "address   %s\nsandbox   %s\ntenant    %s\nagent     %s\ntask      %s\n"
		"run       %s\nepoch     %s\ninstance  %s\ncache     %llds\n", a->address,
		a->sandbox_id, a->tenant_id, a->agent, a->task, a->run, a->epoch_id,
		a->instance_id, (long long)a->cache_seconds);
}

int cli_identity_recognize(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__RecognizeRequest req = BC__COMPUTE__V1__RECOGNIZE_REQUEST__INIT;
	char *addr = NULL;
	const struct cli_flag flags[] = {
		{.name = "ADDR", .type = CLI_ARG, .dst = &addr, .required = true,
		 .help = "the source address (IPv4 or IPv6)"},
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.address = addr;
	return cli_run(ctx, &bc__compute__v1__identity__descriptor, "Recognize", &req.base,
		       show_recognition, 0);
}
