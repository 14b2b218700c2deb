/* instance_actions.c: Instances.Start, Stop, Pause and Resume. Each one is
 * a change of the instance's desired state, decided as
 * compute:instances:<verb> on the instance, checked against the instance's
 * state under its row lock, written with its event (instance.starting,
 * .stopping, .pausing, .resuming) and a bump of its node's spec in one
 * transaction; the host then converges and its reports move `state`
 * (docs/operations.md, "Instance lifecycle").
 *
 * A call that asks for what is already desired answers the instance
 * unchanged, without an event. A transition that makes no sense (pause a
 * stopped instance, resume one that is not paused, start a paused one),
 * an instance being deleted, deleted or lost, and the instance of a sandbox
 * or a warm pool are INVALID_STATE with details.reason. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "db.h"
#include "event_data.h"
#include "instance_actions.h"
#include "instances.h"
#include "log.h"
#include "node.h"
#include "outbox.h"
#include "util.h"
#include "validate.h"

/* The row as the checks see it, read FOR UPDATE. */
struct inst_row {
	const char *id, *state, *desired, *node, *sandbox, *warm;
};

/* 1: change to the action's desired state; 0: already so; <0: refused. */
typedef int (*act_check)(const struct inst_row *r, bc_error *err);

struct act {
	const char *verb;       /* method name */
	const char *iam;        /* action decided */
	const char *event;      /* published on a change */
	const char *desired;    /* the new desired state */
	bool shows_starting;    /* a stopped (or failed) placed instance shows
				   "starting" until its host reports */
	act_check check;
};

static int refuse(bc_error *err, const struct inst_row *r, const char *reason,
		  const char *what)
{
	bc_error_set(err, BC_INVALID_STATE, "instance %s %s", r->id, what);
	bc_error_detail(err, "state", "%s", r->state);
	bc_error_detail(err, "desiredState", "%s", r->desired);
	return bc_error_detail(err, "reason", "%s", reason);
}

/* What refuses every action: deletion, loss, a sandbox or warm pool. */
static int check_common(const struct inst_row *r, bc_error *err)
{
	int rc = instance_managed(r->id, r->sandbox, r->warm, err);

	if (rc < 0)
		return rc;
	if (strcmp(r->state, "deleted") == 0)
		return refuse(err, r, "deleted", "is deleted");
	if (strcmp(r->desired, "deleted") == 0)
		return refuse(err, r, "deleting", "is being deleted");
	if (strcmp(r->state, "lost") == 0)
		return refuse(err, r, "lost", "is lost with its node");
	return 0;
}

static int check_start(const struct inst_row *r, bc_error *err)
{
	if (strcmp(r->desired, "paused") == 0)
		return refuse(err, r, "paused", "is paused: resume it");
	return strcmp(r->desired, "running") != 0;
}

static int check_stop(const struct inst_row *r, bc_error *err)
{
	return strcmp(r->desired, "stopped") != 0;
}

static int check_pause(const struct inst_row *r, bc_error *err)
{
	if (strcmp(r->desired, "paused") == 0)
		return 0;
	if (strcmp(r->desired, "running") != 0 || strcmp(r->state, "running") != 0)
		return refuse(err, r, "not-running", "is not running: only a running instance "
			      "can be paused");
	return 1;
}

static int check_resume(const struct inst_row *r, bc_error *err)
{
	if (strcmp(r->desired, "paused") == 0)
		return 1;
	if (strcmp(r->desired, "running") == 0 && strcmp(r->state, "running") == 0)
		return 0;
	return refuse(err, r, "not-paused", "is not paused: start a stopped instance instead");
}

static const struct act acts[] = {
	{"Start", "compute:instances:start", "instance.starting", "running", true, check_start},
	{"Stop", "compute:instances:stop", "instance.stopping", "stopped", false, check_stop},
	{"Pause", "compute:instances:pause", "instance.pausing", "paused", false, check_pause},
	{"Resume", "compute:instances:resume", "instance.resuming", "running", false,
	 check_resume},
};

struct act_tx {
	const struct act *a;
	const char *tenant, *id;
	bool changed;
};

/* Write the new desired state; a start of a placed instance that is not
 * running shows "starting" until the host reports. */
static int apply(struct db *d, struct act_tx *t, const struct inst_row *r)
{
	char subject[96];
	_cleanup_free_ char *data = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, t->id);
	dbp_str(&p, t->a->desired);
	dbp_bool(&p, t->a->shows_starting && r->node &&
		     (strcmp(r->state, "stopped") == 0 || strcmp(r->state, "error") == 0));
	rc = db_exec(d, NULL, "UPDATE instances SET desired_state = $2, state = CASE WHEN $3 THEN "
		     "'starting' ELSE state END, reason = CASE WHEN $3 THEN '' ELSE reason END, "
		     "updated_at = now() WHERE id = $1", &p);
	snprintf(subject, sizeof(subject), "instance/%s", t->id);
	if (rc == 0)
		rc = evd_instance(t->a->event, &(struct evd_instance){.node_id = r->node,
				  .desired_state = t->a->desired}, &data);
	if (rc == 0)
		rc = event_publish(d, t->a->event, subject, t->tenant, data);
	if (rc == 0)
		rc = spec_bump_instance(d, r->node, t->id);
	return rc;
}

static int act_tx_fn(struct db *d, void *arg, bc_error *err)
{
	enum { ACT_STATE, ACT_DESIRED_STATE, ACT_NODE_ID, ACT_SANDBOX_ID, ACT_WARM_TEMPLATE_ID };
	struct act_tx *t = arg;
	struct inst_row row;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	t->changed = false;
	dbp_str(&p, t->id);
	dbp_str(&p, t->tenant);
	if ((rc = db_one(d, &r, "SELECT state, desired_state, node_id, sandbox_id, "
			 "warm_template_id FROM instances WHERE id = $1 AND tenant_id = $2 FOR "
			 "UPDATE", &p, err, "instance %s not found", t->id)) < 0)
		return rc;
	row = (struct inst_row){.id = t->id, .state = db_val(r, 0, ACT_STATE),
				.desired = db_val(r, 0, ACT_DESIRED_STATE),
				.node = db_val(r, 0, ACT_NODE_ID),
				.sandbox = db_val(r, 0, ACT_SANDBOX_ID),
				.warm = db_val(r, 0, ACT_WARM_TEMPLATE_ID)};
	if ((rc = check_common(&row, err)) == 0 && (rc = t->a->check(&row, err)) == 1) {
		t->changed = true;
		rc = apply(d, t, &row);
		if (rc < 0)
			rc = db_fail(err, rc);
	}
	PQclear(r);
	return rc < 0 ? rc : 0;
}

/* The handler of every action: validate, read, decide, change, answer. */
static int act_run(rpc_call *c, const struct act *a, const char *tenant_id, const char *id,
		   ProtobufCMessage **ret, bc_error *err)
{
	Bc__Compute__V1__Instance *inst = NULL;
	struct act_tx t = {.a = a, .id = id};
	char agent[64];
	int r;

	if ((r = auth_tenant(c, tenant_id, &t.tenant, err)) < 0 ||
	    (r = check_id(err, "instanceId", "inst", id)) < 0 ||
	    (r = inst_fetch(c, t.tenant, id, &inst, agent, err)) < 0 ||
	    (r = inst_decide(c, a->iam, inst, agent, err)) < 0 ||
	    (r = db_tx(ctl_db(c), "READ COMMITTED", act_tx_fn, &t, err)) < 0 ||
	    (r = inst_fetch(c, t.tenant, id, &inst, NULL, err)) < 0)
		return r;
	if (t.changed)
		log_info("instance %s: %s requested (desired %s)", id, a->verb, a->desired);
	*ret = &inst->base;
	return 0;
}

static int inst_start(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__StartInstanceRequest *q = (const void *)m;

	return act_run(c, &acts[0], q->tenant_id, q->instance_id, ret, err);
}

static int inst_stop(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Compute__V1__StopInstanceRequest *q = (const void *)m;

	return act_run(c, &acts[1], q->tenant_id, q->instance_id, ret, err);
}

static int inst_pause(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Compute__V1__PauseInstanceRequest *q = (const void *)m;

	return act_run(c, &acts[2], q->tenant_id, q->instance_id, ret, err);
}

static int inst_resume(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__ResumeInstanceRequest *q = (const void *)m;

	return act_run(c, &acts[3], q->tenant_id, q->instance_id, ret, err);
}

const struct rpc_handler *inst_actions(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Start", RPC_UNARY, {.unary = inst_start}},
		{"Stop", RPC_UNARY, {.unary = inst_stop}},
		{"Pause", RPC_UNARY, {.unary = inst_pause}},
		{"Resume", RPC_UNARY, {.unary = inst_resume}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
