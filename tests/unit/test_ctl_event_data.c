/* test_ctl_event_data.c: controller/event_data.c gives each event type its
 * keys and no others: an instance event of a sandbox's or a warm instance
 * names it, whatever the type; nodeId is null for an unplaced instance;
 * a node event names its pool; an IAM event carries its type's keys, and
 * reason only when there is one (the teardown's); an unknown type is
 * refused; values are escaped; a volume event carries its size, and its
 * previous size when resized. */
#include <errno.h>
#include <stdlib.h>

#include "controller/event_data.h"
#include "tap.h"

static void is_data(int rc, char *got, const char *want, const char *what)
{
	is_int(rc, 0, "%s: built", what);
	is_str(got, want, "%s", what);
	free(got);
}

static void test_instance(void)
{
	char *s = NULL;
	int rc;

	rc = evd_instance("instance.created", &(struct evd_instance){.pool_id = "pool_1",
			  .node_id = NULL, .warm_template_id = "sbxt_1"}, &s);
	is_data(rc, s, "{\"poolId\": \"pool_1\", \"nodeId\": null, \"warmTemplateId\": \"sbxt_1\"}",
		"instance.created of an unplaced warm instance");
	rc = evd_instance("instance.placed", &(struct evd_instance){.node_id = "node_1",
			  .pool_id = "pool_1", .sandbox_id = "sbx_1", .reason = "r"}, &s);
	is_data(rc, s, "{\"nodeId\": \"node_1\", \"sandboxId\": \"sbx_1\"}",
		"instance.placed: nodeId and the sandbox, nothing else given");
	rc = evd_instance("instance.pausing", &(struct evd_instance){.node_id = "node_1",
			  .desired_state = "paused"}, &s);
	is_data(rc, s, "{\"nodeId\": \"node_1\", \"desiredState\": \"paused\"}",
		"instance.pausing of a plain instance");
	rc = evd_instance("instance.deleting", &(struct evd_instance){0}, &s);
	is_data(rc, s, "{}", "instance.deleting of a plain instance");
	rc = evd_instance("instance.deleting", &(struct evd_instance){.sandbox_id = "sbx_1",
			  .reason = "expired"}, &s);
	is_data(rc, s, "{\"reason\": \"expired\", \"sandboxId\": \"sbx_1\"}",
		"instance.deleting of an expired sandbox's instance");
	s = (char *)"untouched";
	is_int(evd_instance("instance.exploded", &(struct evd_instance){0}, &s), -EINVAL,
	       "an unknown instance type is refused");
	is_str(s, "untouched", "and nothing is returned");
}

static void test_sandbox(void)
{
	const struct evd_sandbox row = {.template_id = "sbxt_1", .instance_id = "inst_1",
					.pool_id = "pool_1", .warm = true, .expires_at = 5,
					.ttl_seconds = 60, .reason = "agent-suspended"};
	char *s = NULL;
	int rc;

	rc = evd_sandbox("sandbox.created", &row, &s);
	is_data(rc, s, "{\"templateId\": \"sbxt_1\", \"instanceId\": \"inst_1\", \"poolId\": "
		"\"pool_1\", \"warm\": true}", "sandbox.created");
	rc = evd_sandbox("sandbox.deleting", &(struct evd_sandbox){.template_id = "sbxt_1",
			 .instance_id = "inst_1", .pool_id = "pool_1", .expired = true}, &s);
	is_data(rc, s, "{\"templateId\": \"sbxt_1\", \"instanceId\": \"inst_1\", \"poolId\": "
		"\"pool_1\", \"expired\": true}", "sandbox.deleting on expiry");
	rc = evd_sandbox("sandbox.deleting", &(struct evd_sandbox){.reason = "tenant deleted"}, &s);
	is_data(rc, s, "{\"reason\": \"tenant deleted\", \"templateId\": null, \"instanceId\": "
		"null, \"poolId\": null, \"expired\": false}",
		"sandbox.deleting of the teardown (its statement merges the row's ids over it)");
	rc = evd_sandbox("sandbox.extended", &row, &s);
	is_data(rc, s, "{\"templateId\": \"sbxt_1\", \"instanceId\": \"inst_1\", \"poolId\": "
		"\"pool_1\", \"expiresAt\": 5, \"ttlSeconds\": 60}", "sandbox.extended");
	rc = evd_sandbox("sandbox.withdrawn", &row, &s);
	is_data(rc, s, "{\"reason\": \"agent-suspended\", \"agentId\": null, \"templateId\": "
		"\"sbxt_1\", \"instanceId\": \"inst_1\", \"poolId\": \"pool_1\"}",
		"sandbox.withdrawn without an agent");
	rc = evd_sandbox("sandbox.withdrawn", &(struct evd_sandbox){.template_id = "t\"1",
			 .instance_id = "i", .pool_id = "p", .reason = "x", .agent_id = "idn_1"}, &s);
	is_data(rc, s, "{\"reason\": \"x\", \"agentId\": \"idn_1\", \"templateId\": \"t\\\"1\", "
		"\"instanceId\": \"i\", \"poolId\": \"p\"}", "values escaped");
	is_int(evd_sandbox("sandbox.ready", &row, &s), -EINVAL,
	       "sandbox.ready is written by SQL, not here");
}

static void test_node(void)
{
	char *s = NULL;
	int rc;

	for (int i = 0; i < 4; i++) {
		static const char *const types[] = {"node.joined", "node.lost", "node.recovered",
						    "node.retired"};
		rc = evd_node(types[i], &(struct evd_node){.pool_id = "pool_1"}, &s);
		is_data(rc, s, "{\"poolId\": \"pool_1\"}", types[i]);
	}
	is_int(evd_node("node.exploded", &(struct evd_node){0}, &s), -EINVAL,
	       "an unknown node type is refused");
}

static void test_iam(void)
{
	const struct evd_iam all = {.name = "n", .kind = "agent", .state = "suspended",
				    .identity_id = "idn_1", .agent_id = "idn_a", .user_id = "idn_u",
				    .target_kind = "tenant", .target_id = "acme",
				    .on_budget_exceeded = "drain", .budget_check = "meter"};
	static const struct {
		const char *type, *want;
	} t[] = {
		{"tenant.created", "{\"name\": \"n\"}"},
		{"tenant.state-changed", "{\"state\": \"suspended\"}"},
		{"identity.created", "{\"name\": \"n\", \"kind\": \"agent\"}"},
		{"identity.state-changed", "{\"state\": \"suspended\"}"},
		{"token.created", "{\"name\": \"n\", \"identityId\": \"idn_1\"}"},
		{"token.revoked", "{}"},
		{"delegation.created", "{\"agentId\": \"idn_a\", \"userId\": \"idn_u\"}"},
		{"delegation.revoked", "{}"},
		{"policy.created", "{\"name\": \"n\"}"},
		{"policy.attached", "{\"targetKind\": \"tenant\", \"targetId\": \"acme\"}"},
		{"policy.detached", "{\"targetKind\": \"tenant\", \"targetId\": \"acme\"}"},
		{"policy.deleted", "{}"},
		{"quota.set", "{}"},
		{"offer.set", "{\"onBudgetExceeded\": \"drain\"}"},
		{"pool.budget-check-set", "{\"budgetCheck\": \"meter\"}"},
	};
	char *s = NULL;
	int rc;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		rc = evd_iam(t[i].type, &all, &s);
		is_data(rc, s, t[i].want, t[i].type);
	}
	rc = evd_iam("tenant.state-changed", &(struct evd_iam){.state = "deleted",
		     .reason = "teardown"}, &s);
	is_data(rc, s, "{\"state\": \"deleted\", \"reason\": \"teardown\"}",
		"tenant.state-changed of the teardown");
	rc = evd_iam("token.revoked", &(struct evd_iam){.reason = "tenant deleted"}, &s);
	is_data(rc, s, "{\"reason\": \"tenant deleted\"}", "token.revoked of the teardown");
	is_int(evd_iam("secret.put", &all, &s), -EINVAL, "a type of another subject is refused");
}

static void test_volume(void)
{
	const struct evd_volume row = {.pool_id = "pool_1", .node_id = "node_1", .name = "mem",
				       .size_gib = 20, .previous_size_gib = 10};
	char *s = NULL;
	int rc;

	rc = evd_volume("sandbox.volume.created", &row, &s);
	is_data(rc, s, "{\"poolId\": \"pool_1\", \"nodeId\": \"node_1\", \"name\": \"mem\", "
		"\"sizeGiB\": 20}", "sandbox.volume.created: no previous size");
	rc = evd_volume("sandbox.volume.resized", &row, &s);
	is_data(rc, s, "{\"poolId\": \"pool_1\", \"nodeId\": \"node_1\", \"name\": \"mem\", "
		"\"sizeGiB\": 20, \"previousSizeGiB\": 10}", "sandbox.volume.resized");
	rc = evd_volume("sandbox.volume.deleted", &row, &s);
	is_data(rc, s, "{\"poolId\": \"pool_1\", \"nodeId\": \"node_1\", \"name\": \"mem\", "
		"\"sizeGiB\": 20}", "sandbox.volume.deleted");
	is_int(evd_volume("sandbox.created", &row, &s), -EINVAL,
	       "a sandbox type is not a volume's");
}

int main(void)
{
	test_instance();
	test_sandbox();
	test_node();
	test_iam();
	test_volume();
	done_testing();
}
