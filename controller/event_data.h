/* event_data.h: the data of every event the controller publishes from C,
 * built in one place per subject (instance, sandbox) from the row's fields,
 * so each event type carries the same keys wherever it is published (the
 * keys per type: docs/operations.md, "Instance lifecycle", and
 * docs/sandboxes.md, "Events").
 * Events written by SQL statements take their instance keys from
 * EVD_INSTANCE_OWNER_SQL, the same rule spelt in SQL. */
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
	const char *reason;  /* sandbox.withdrawn */
	const char *agent_id; /* sandbox.withdrawn; NULL or "": null */
};

/* The data of sandbox event type (sandbox.created, .deleting, .extended,
 * .withdrawn) for row in. 0 and *ret_json (caller frees), -EINVAL for
 * another type, or the writer's -errno. */
int evd_sandbox(const char *type, const struct evd_sandbox *in, char **ret_json);

/* The same in SQL, for the events written by statements over a sandboxes
 * row's template_id, instance_id and pool_id: extra is more ", 'key',
 * value" pairs (or ""). Migration 0007's trigger spells sandbox.ready and
 * sandbox.failed the same way. */
#define EVD_SANDBOX_SQL(extra)                                                             \
	"jsonb_build_object('templateId', template_id, 'instanceId', instance_id, 'poolId', "  \
	"pool_id" extra ")"

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

#endif
