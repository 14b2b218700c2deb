/* event_data.h: the data of every event the controller publishes, built in
 * one place per subject (instance, sandbox, node, IAM) from the row's
 * fields, so each event type carries the same keys wherever it is published
 * (the keys per type: docs/operations.md, "Instance lifecycle" and "Node
 * events", docs/sandboxes.md, "Events", docs/iam.md, "Events").
 * Events written by SQL statements take their instance keys from
 * EVD_INSTANCE_OWNER_SQL, the same rule spelt in SQL; IAM and node events
 * written by statements take their data as a parameter built here. */
#ifndef BC_EVENT_DATA_H
#define BC_EVENT_DATA_H

#include <stdbool.h>
#include <stdint.h>

/* An instance row's fields an instance.* event may carry. NULL fields are
 * left out, except nodeId where the type always names it (null: unplaced). */
struct evd_instance {
	const char *pool_id;          /* instance.created */
	const char *node_id;          /* NULL: not placed */
	const char *desired_state;    /* instance.starting, ... */
	const char *reason;           /* instance.deleting, when there is one */
	const char *sandbox_id;       /* the sandbox it runs, if any */
	const char *warm_template_id; /* the template it is a warm instance of */
};

/* The data of instance event type (instance.created, .placed, .starting,
 * .stopping, .pausing, .resuming, .deleting) for row in: the type's own keys,
 * then sandboxId or warmTemplateId when the instance has one. 0 and the JSON
 * object in *ret_json (caller frees), -EINVAL for another type, or the
 * writer's -errno. */
int evd_instance(const char *type, const struct evd_instance *in, char **ret_json);

/* The same owner keys in SQL, from the instances row (or a RETURNING of its
 * sandbox_id and warm_template_id) aliased row: a jsonb object to merge
 * (||) into the statement's own jsonb_build_object(...). */
#define EVD_INSTANCE_OWNER_SQL(row)                                                 \
	"jsonb_strip_nulls(jsonb_build_object('sandboxId', " row ".sandbox_id, "    \
	"'warmTemplateId', " row ".warm_template_id))"

/* A sandbox row's fields a sandbox.* event may carry: templateId,
 * instanceId and poolId always, the others by type. */
struct evd_sandbox {
	const char *template_id, *instance_id, *pool_id;
	bool warm;           /* sandbox.created: a warm instance was claimed */
	bool expired;        /* sandbox.deleting: expiry ended it */
	int64_t expires_at;  /* sandbox.extended: epoch ms */
	int64_t ttl_seconds; /* sandbox.extended */
	const char *reason;  /* sandbox.withdrawn; sandbox.deleting, when there is one */
	const char *agent_id; /* sandbox.withdrawn; NULL or "": null */
};

/* The data of sandbox event type (sandbox.created, .deleting, .extended,
 * .withdrawn) for row in (a NULL id is null: a statement may merge the
 * row's ids over it with EVD_SANDBOX_SQL). 0 and *ret_json (caller frees), -EINVAL for
 * another type, or the writer's -errno. */
int evd_sandbox(const char *type, const struct evd_sandbox *in, char **ret_json);

/* The same in SQL, for the events written by statements over a sandboxes
 * row's template_id, instance_id and pool_id: extra is more ", 'key',
 * value" pairs (or ""). Migration 0007's trigger spells sandbox.ready and
 * sandbox.failed the same way. */
#define EVD_SANDBOX_SQL(extra)                                                             \
	"jsonb_build_object('templateId', template_id, 'instanceId', instance_id, 'poolId', "  \
	"pool_id" extra ")"

/* A node row's fields a node.* event carries. */
struct evd_node {
	const char *pool_id;
};

/* The data of node event type (node.joined, .retired, .lost, .recovered):
 * the node's poolId. 0 and *ret_json (caller frees),
 * -EINVAL for another type, or the writer's -errno. */
int evd_node(const char *type, const struct evd_node *in, char **ret_json);

/* An IAM change's fields its event may carry; the subject names the row
 * (tenant/<id>, identity/<id>, ...). NULL fields a type has are null, except
 * reason, which is left out when there is none. */
struct evd_iam {
	const char *name;               /* tenant, identity, token, policy .created */
	const char *kind;               /* identity.created: user, agent, service */
	const char *state;              /* tenant/identity .state-changed */
	const char *reason;             /* .state-changed, .revoked, policy.deleted */
	const char *identity_id;        /* token.created */
	const char *agent_id, *user_id; /* delegation.created */
	const char *target_kind;        /* policy.attached/.detached: tenant, identity */
	const char *target_id;
	const char *on_budget_exceeded; /* offer.set */
	const char *budget_check;       /* pool.budget-check-set */
};

/* The data of IAM event type (tenant.created, tenant.state-changed,
 * identity.created, identity.state-changed, token.created, token.revoked,
 * delegation.created, delegation.revoked, policy.created, policy.attached,
 * policy.detached, policy.deleted, quota.set, offer.set,
 * pool.budget-check-set). 0 and *ret_json (caller frees), -EINVAL for
 * another type, or the writer's -errno. */
int evd_iam(const char *type, const struct evd_iam *in, char **ret_json);

/* A secret's fields its events carry: the name, scope and version, never
 * the value (secret.put, secret.deleted). */
struct evd_secret {
	const char *name, *scope;
	int64_t version;
};

/* The data of secret event type (secret.put, secret.deleted). 0 and
 * *ret_json (caller frees), -EINVAL for another type, or the writer's
 * -errno. */
int evd_secret(const char *type, const struct evd_secret *in, char **ret_json);

/* A tunnel's fields its events carry (tunnels.c, sandbox_exec.c): every
 * type names the sandbox and the tunnel; tunnel.issued also the instance's
 * node; sandbox.exec.issued the certificate (instanceId, keyId, serial as a
 * decimal string, principal, validBefore in epoch ms); tunnel.opened the
 * replica; tunnel.closed the reason. */
struct evd_tunnel {
	const char *sandbox_id, *instance_id, *node_id, *tunnel_id;
	const char *key_id, *principal;
	uint64_t serial;
	int64_t valid_before;
	const char *replica;  /* tunnel.opened */
	const char *reason;   /* tunnel.closed */
};

/* The data of tunnel event type (tunnel.issued, tunnel.opened,
 * tunnel.closed, sandbox.exec.issued). 0 and *ret_json (caller frees),
 * -EINVAL for another type, or the writer's -errno. */
int evd_tunnel(const char *type, const struct evd_tunnel *in, char **ret_json);

/* A volume row's fields a sandbox.volume.* event carries: poolId, nodeId,
 * name and sizeGiB always; previousSizeGiB for sandbox.volume.resized. */
struct evd_volume {
	const char *pool_id, *node_id, *name;
	int64_t size_gib, previous_size_gib;
};

/* The data of sandbox.volume.created, .resized, .deleting, .deleted. 0
 * and *ret_json (caller frees), -EINVAL for another type, or -errno. */
int evd_volume(const char *type, const struct evd_volume *in, char **ret_json);

#endif
