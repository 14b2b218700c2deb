/* test_ctl_event_data.c: controller/event_data.c gives each event type its
 * keys and no others: an instance event of a sandbox's or a warm instance
 * names it, whatever the type; nodeId is null for an unplaced instance;
 * an unknown type is refused; values are escaped. */
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
	rc = evd_sandbox("sandbox.deleting", &row, &s);
	is_data(rc, s, "{\"templateId\": \"sbxt_1\", \"instanceId\": \"inst_1\", \"poolId\": "
		"\"pool_1\", \"expired\": false}", "sandbox.deleting");
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

int main(void)
{
	test_instance();
	test_sandbox();
	done_testing();
}
