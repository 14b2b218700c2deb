/* event_data.c: which keys each event type published from C carries, as
 * two tables (instance, sandbox) and one builder per subject over them. A
 * call site hands over the row's fields and the type; it never spells a key,
 * so two sites publishing the same type cannot disagree, and an instance
 * event of a sandbox's or a warm instance always names it (sandboxId,
 * warmTemplateId). tests/integration/event_payloads.t checks every type's
 * keys against a real stack. */
#include <errno.h>
#include <string.h>

#include "event_data.h"
#include "jsonw.h"

enum {
	K_POOL = 1 << 0,     /* poolId */
	K_NODE = 1 << 1,     /* nodeId, null when unplaced */
	K_DESIRED = 1 << 2,  /* desiredState */
	K_REASON = 1 << 3,   /* reason, when the row has one */
	K_WARM = 1 << 4,     /* warm */
	K_EXPIRED = 1 << 5,  /* expired */
	K_EXTENDED = 1 << 6, /* expiresAt, ttlSeconds */
	K_AGENT = 1 << 7,    /* agentId, null when none */
};

struct evd_type {
	const char *type;
	unsigned keys;
};

static const struct evd_type instance_types[] = {
	{"instance.created", K_POOL | K_NODE},
	{"instance.placed", K_NODE},
	{"instance.starting", K_NODE | K_DESIRED},
	{"instance.stopping", K_NODE | K_DESIRED},
	{"instance.pausing", K_NODE | K_DESIRED},
	{"instance.resuming", K_NODE | K_DESIRED},
	{"instance.deleting", K_REASON},
};

static const struct evd_type sandbox_types[] = {
	{"sandbox.created", K_WARM},
	{"sandbox.deleting", K_EXPIRED},
	{"sandbox.extended", K_EXTENDED},
	{"sandbox.withdrawn", K_REASON | K_AGENT},
};

/* The keys of type in table t of n rows, or -EINVAL. */
static int keys_of(const struct evd_type *t, size_t n, const char *type)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(t[i].type, type) == 0)
			return (int)t[i].keys;
	return -EINVAL;
}

static void opt_str(struct jsonw *w, const char *key, const char *val)
{
	if (val)
		jsonw_str(w, key, val);
}

int evd_instance(const char *type, const struct evd_instance *in, char **ret_json)
{
	int k = keys_of(instance_types, sizeof(instance_types) / sizeof(instance_types[0]), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	if (k & K_POOL)
		jsonw_str(&w, "poolId", in->pool_id);
	if (k & K_NODE)
		jsonw_str(&w, "nodeId", in->node_id);
	if (k & K_DESIRED)
		jsonw_str(&w, "desiredState", in->desired_state);
	if (k & K_REASON)
		opt_str(&w, "reason", in->reason);
	opt_str(&w, "sandboxId", in->sandbox_id);
	opt_str(&w, "warmTemplateId", in->warm_template_id);
	return jsonw_end(&w, ret_json);
}

int evd_sandbox(const char *type, const struct evd_sandbox *in, char **ret_json)
{
	int k = keys_of(sandbox_types, sizeof(sandbox_types) / sizeof(sandbox_types[0]), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	if (k & K_REASON)
		jsonw_str(&w, "reason", in->reason);
	if (k & K_AGENT)
		jsonw_str(&w, "agentId", in->agent_id && *in->agent_id ? in->agent_id : NULL);
	jsonw_str(&w, "templateId", in->template_id);
	jsonw_str(&w, "instanceId", in->instance_id);
	jsonw_str(&w, "poolId", in->pool_id);
	if (k & K_WARM)
		jsonw_bool(&w, "warm", in->warm);
	if (k & K_EXPIRED)
		jsonw_bool(&w, "expired", in->expired);
	if (k & K_EXTENDED) {
		jsonw_i64(&w, "expiresAt", in->expires_at);
		jsonw_i64(&w, "ttlSeconds", in->ttl_seconds);
	}
	return jsonw_end(&w, ret_json);
}

int evd_secret(const char *type, const struct evd_secret *in, char **ret_json)
{
	struct jsonw w;

	if (strcmp(type, "secret.put") != 0 && strcmp(type, "secret.deleted") != 0)
		return -EINVAL;
	jsonw_begin(&w);
	jsonw_str(&w, "name", in->name);
	jsonw_str(&w, "scope", in->scope);
	jsonw_i64(&w, "version", in->version);
	return jsonw_end(&w, ret_json);
}
