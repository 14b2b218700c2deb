/* fuzz_policy.c: the policy parser (controller/policy.c, controller/json.c)
 * on arbitrary bytes; a document that parses is also evaluated once. */
#include <stddef.h>
#include <stdint.h>

#include "controller/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct policy_attr attrs[] = {{"ttlSeconds", "600"}, {"gpus", "0"}, {"id", "x"}};
	const char *const anc[] = {"compute-pool/pool_a", "tenant/t1"};
	struct policy_request q = {.action = "compute:instances:create",
				   .resource = "compute-instance/inst_1", .ancestors = anc,
				   .n_ancestors = 2, .resource_attrs = attrs, .n_resource_attrs = 3,
				   .principal_attrs = attrs, .n_principal_attrs = 3};
	struct policy *p = NULL;
	char field[128], msg[128];

	if (policy_parse((const char *)data, size, &p, field, msg, sizeof(field)) == 0) {
		const struct policy *const docs[] = {p};
		policy_decide(docs, 1, &q, NULL);
		policy_free(p);
	}
	return 0;
}
