/* event_data.c: which keys each event type carries, as one table per
 * subject (instance, sandbox, node, IAM) and one builder over each. A
 * call site hands over the row's fields and the type; it never spells a key,
 * so two sites publishing the same type cannot disagree, and an instance
 * event of a sandbox's or a warm instance always names it (sandboxId,
 * warmTemplateId). tests/integration/event_payloads.t (instance, sandbox)
 * and event_payloads_iam.t (node, IAM, tenant teardown) check every type's
 * keys against a real stack. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
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
	K_NAME = 1 << 8,     /* name */
	K_KIND = 1 << 9,     /* kind */
	K_STATE = 1 << 10,   /* state */
	K_IDENTITY = 1 << 11, /* identityId */
	K_USER = 1 << 12,    /* agentId and userId */
	K_TARGET = 1 << 13,  /* targetKind, targetId */
	K_OFFER = 1 << 14,   /* onBudgetExceeded */
	K_CHECK = 1 << 15,   /* budgetCheck */
	K_CERT = 1 << 16,    /* instanceId, keyId, serial, principal, validBefore */
	K_REPLICA = 1 << 17, /* replica */
	K_PREVIOUS = 1 << 18, /* previousSizeGiB */
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
	{"sandbox.deleting", K_EXPIRED | K_REASON},
	{"sandbox.extended", K_EXTENDED},
	{"sandbox.withdrawn", K_REASON | K_AGENT},
};

static const struct evd_type node_types[] = {
	{"node.joined", 0},
	{"node.retired", 0},
	{"node.lost", 0},
	{"node.recovered", 0},
};

static const struct evd_type iam_types[] = {
	{"tenant.created", K_NAME},
	{"tenant.state-changed", K_STATE | K_REASON},
	{"identity.created", K_NAME | K_KIND},
	{"identity.state-changed", K_STATE | K_REASON},
	{"token.created", K_NAME | K_IDENTITY},
	{"token.revoked", K_REASON},
	{"delegation.created", K_USER},
	{"delegation.revoked", K_REASON},
	{"policy.created", K_NAME},
	{"policy.attached", K_TARGET},
	{"policy.detached", K_TARGET},
	{"policy.deleted", K_REASON},
	{"quota.set", 0},
	{"offer.set", K_OFFER},
	{"pool.budget-check-set", K_CHECK},
};

static const struct evd_type tunnel_types[] = {
	{"tunnel.issued", K_NODE},
	{"tunnel.opened", K_REPLICA},
	{"tunnel.closed", K_REASON},
	{"sandbox.exec.issued", K_CERT},
};

static const struct evd_type volume_types[] = {
	{"sandbox.volume.created", 0},
	{"sandbox.volume.resized", K_PREVIOUS},
	{"sandbox.volume.deleting", 0},
	{"sandbox.volume.deleted", 0},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

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
	int k = keys_of(instance_types, NELEM(instance_types), type);
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
	int k = keys_of(sandbox_types, NELEM(sandbox_types), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	if (k & K_REASON)
		opt_str(&w, "reason", in->reason);
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

int evd_node(const char *type, const struct evd_node *in, char **ret_json)
{
	int k = keys_of(node_types, NELEM(node_types), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	jsonw_str(&w, "poolId", in->pool_id);
	return jsonw_end(&w, ret_json);
}

int evd_iam(const char *type, const struct evd_iam *in, char **ret_json)
{
	int k = keys_of(iam_types, NELEM(iam_types), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	if (k & K_NAME)
		jsonw_str(&w, "name", in->name);
	if (k & K_KIND)
		jsonw_str(&w, "kind", in->kind);
	if (k & K_STATE)
		jsonw_str(&w, "state", in->state);
	if (k & K_REASON)
		opt_str(&w, "reason", in->reason);
	if (k & K_IDENTITY)
		jsonw_str(&w, "identityId", in->identity_id);
	if (k & K_USER) {
		jsonw_str(&w, "agentId", in->agent_id);
		jsonw_str(&w, "userId", in->user_id);
	}
	if (k & K_TARGET) {
		jsonw_str(&w, "targetKind", in->target_kind);
		jsonw_str(&w, "targetId", in->target_id);
	}
	if (k & K_OFFER)
		jsonw_str(&w, "onBudgetExceeded", in->on_budget_exceeded);
	if (k & K_CHECK)
		jsonw_str(&w, "budgetCheck", in->budget_check);
	return jsonw_end(&w, ret_json);
}

/* secret.put and secret.deleted: name, scope, version; never the value */
static const struct evd_type secret_types[] = {
	{"secret.put", 0},
	{"secret.deleted", 0},
};

int evd_secret(const char *type, const struct evd_secret *in, char **ret_json)
{
	struct jsonw w;

	if (keys_of(secret_types, NELEM(secret_types), type) < 0)
		return -EINVAL;
	jsonw_begin(&w);
	jsonw_str(&w, "name", in->name);
	jsonw_str(&w, "scope", in->scope);
	jsonw_i64(&w, "version", in->version);
	return jsonw_end(&w, ret_json);
}

int evd_tunnel(const char *type, const struct evd_tunnel *in, char **ret_json)
{
	int k = keys_of(tunnel_types, NELEM(tunnel_types), type);
	struct jsonw w;
	char serial[24];

	if (k < 0)
		return k;
	jsonw_begin(&w);
	jsonw_str(&w, "sandboxId", in->sandbox_id);
	jsonw_str(&w, "tunnelId", in->tunnel_id);
	if (k & K_NODE)
		jsonw_str(&w, "nodeId", in->node_id);
	if (k & K_CERT) {
		snprintf(serial, sizeof(serial), "%" PRIu64, in->serial);
		jsonw_str(&w, "instanceId", in->instance_id);
		jsonw_str(&w, "keyId", in->key_id);
		jsonw_str(&w, "serial", serial);
		jsonw_str(&w, "principal", in->principal);
		jsonw_i64(&w, "validBefore", in->valid_before);
	}
	if (k & K_REPLICA)
		jsonw_str(&w, "replica", in->replica);
	if (k & K_REASON)
		jsonw_str(&w, "reason", in->reason ? in->reason : "");
	return jsonw_end(&w, ret_json);
}

int evd_volume(const char *type, const struct evd_volume *in, char **ret_json)
{
	int k = keys_of(volume_types, NELEM(volume_types), type);
	struct jsonw w;

	if (k < 0)
		return k;
	jsonw_begin(&w);
	jsonw_str(&w, "poolId", in->pool_id);
	jsonw_str(&w, "nodeId", in->node_id);
	jsonw_str(&w, "name", in->name);
	jsonw_i64(&w, "sizeGiB", in->size_gib);
	if (k & K_PREVIOUS)
		jsonw_i64(&w, "previousSizeGiB", in->previous_size_gib);
	return jsonw_end(&w, ret_json);
}
