/* instances.h: the instance create path shared by Instances.Create and
 * Sandboxes.Create, and what other API files read of an instance (see
 * instances.c). */
#ifndef BC_CTL_INSTANCES_H
#define BC_CTL_INSTANCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "bootdata.h"
#include "app.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define CAP_NETWORK_POLICY "bc.dev/cap.instance.network-policy"
#define CAP_SSH_HOST_ONLY "bc.dev/cap.instance.ssh-host-only"
#define CAP_IDENTITY "bc.dev/cap.instance.identity"   /* workload identity (identity.c) */

/* One instance to create, already validated by the caller. */
struct inst_new {
	const char *tenant, *pool_id, *flavor, *image_id;
	const char *policy;              /* egress | private | none */
	const char *user_data;           /* the caller's part, checked (bootdata_check_user) */
	const struct bootdata_ssh_ca *ssh_ca;   /* the sandbox SSH CA part, or NULL */
	/* certifyHostKey (with ssh_ca): the sandbox SSH CA that certifies a
	 * fresh host key for the new instance, or NULL; the key travels only
	 * in the sealed user data, the row records host_certified and
	 * host_cert_valid_before */
	const struct sshcert_ca *host_ca;
	int64_t host_cert_valid_before;  /* out: epoch s, 0 when not certified */
	const struct bootdata_env *env;  /* /etc/sandbox/env (a template's resolved env) */
	size_t n_env;
	const char *const *ssh_keys;
	size_t n_ssh_keys;
	const char *sandbox_id;          /* the sandbox it drives, or NULL */
	/* workload identity (identity.h), in the sealed boot data only: the
	 * bootstrap value, or the 24 h token; "" or NULL for none */
	const char *identity_bootstrap, *sandbox_token;
	bool identity_host;              /* a warm instance of a template with identity */
	/* a warm instance: its template and the instance_version it is made
	 * from (never both with sandbox_id); the budget is the pool's to
	 * check (warm.c), not the create's */
	const char *warm_template_id;
	int warm_instance_version;
	/* who it is created for when there is no call (c NULL: the warm pool
	 * reconciler creates for the template's author), else the caller */
	const struct principal *owner;
	bool ssh_from_host_only;         /* placed only on nodes that enforce it */
	const char *restore_cpu_model;   /* a memory restore: only nodes of this cpu.model */
	/* the volumes it attaches (volume_attach.h: locked and checked by
	 * va_prepare_tx), or NULL: recorded before placement, in its
	 * cloud-config, and it is placed only on their host */
	const struct va_attach *volumes;
	/* the action decided on the staged instance (compute:instances:create),
	 * or NULL when the caller decided on its own resource (a sandbox) */
	const char *decide_action;
	char pool_gateway[16];           /* internal: the pool's IPv4 gateway, "" if none */
	char id[64];                     /* out: the new instance */
	char mac[18];
	char *node;                      /* out: malloc'd node id, or NULL when unplaced */
};

/* c may be NULL when n->owner is set and n->decide_action is NULL.
 * Inside the caller's READ COMMITTED transaction: check the pool (visible
 * to the tenant; IPAM for private/none: INVALID_STATE), insert the instance,
 * stage its authorization row (and decide decide_action on it), charge the
 * quota and check the budget, lease its NIC, commit the projection row,
 * place it (or leave it Unschedulable) and publish instance.created. Any
 * refusal is returned with the spec's code; the caller rolls back. */
int instance_create_tx(rpc_call *c, struct db *d, struct inst_new *n, bc_error *err);

/* INVALID_STATE ("managed by sandbox ...", reason sandbox-managed) for the
 * instance behind a sandbox or a warm instance (either id may be NULL or
 * ""), else 0. Every instance method that moves an instance (Start, Stop,
 * Pause, Resume, Resize, Delete) refuses such an instance with it. */
int instance_managed(const char *id, const char *sandbox_id, const char *warm_template_id,
		     bc_error *err);

/* Read one instance of tenant into the call's arena; NOT_FOUND for another
 * tenant's or a draft. ret_agent (64 bytes, may be NULL) is the agent that
 * created it, or "". */
int inst_fetch(rpc_call *c, const char *tenant, const char *id,
	       Bc__Compute__V1__Instance **ret, char *ret_agent, bc_error *err);

/* Decide action (e.g. "compute:instances:stop") on a fetched instance, with
 * its shape, pool and creator as the resource's attributes. */
int inst_decide(rpc_call *c, const char *action, const Bc__Compute__V1__Instance *x,
		const char *agent, bc_error *err);

/* What the waiter of Instances.Create calls with `wait` reads (waiter.h):
 * an instance has settled once it left provisioning and starting. */
struct waiter_kind;
extern const struct waiter_kind inst_waiter_kind;

/* The handlers of Create, Get, List and Delete of the Instances service
 * (server.c's table; Start, Stop, Pause and Resume: instance_actions.h). */
const struct rpc_handler *inst_handlers(size_t *ret_n);

#endif
