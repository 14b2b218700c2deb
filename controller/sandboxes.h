/* sandboxes.h: sandboxes (sandboxes.c): the lifetimes and the wake channel
 * templates.c, warm.c and the sandbox reconciler share with it, the
 * Sandboxes handlers, and the deletion the reconciler calls. */
#ifndef BC_CTL_SANDBOXES_H
#define BC_CTL_SANDBOXES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "db.h"
#include "err.h"
#include "rpc.h"

#define SBX_TTL_DEFAULT 3600            /* a template's default lifetime */
#define SBX_TTL_MAX 86400               /* and the bound of its maxTtlSeconds */
#define SBX_EXTEND_BY_MAX_MS (30LL * 86400 * 1000)
#define SBX_HOLD_TAKEOVER_SECONDS 60    /* an extend's hold older than this is taken over */
#define SBX_WAKE_CHANNEL "bc_sandboxes"

struct waiter_kind;

/* What the waiter of Sandboxes.Create calls with `wait` reads (waiter.h):
 * a sandbox has settled once it left starting. */
extern const struct waiter_kind sbx_waiter_kind;

/* The handlers of the Sandboxes service (server.c's table). */
const struct rpc_handler *sbx_handlers(size_t *ret_n);

/* What Sandboxes.Exec and the tunnel gateway's re-check read of a sandbox. */
struct sbx_brief {
	char state[16];            /* starting | ready | failed | deleting | deleted */
	char instance_id[64], node_id[64];
	char instance_state[32];
	int64_t expires_at;        /* epoch ms */
};

/* Read sandbox id of tenant and decide action on it for the call's
 * principal, with the same attributes every sandbox decision sees; ctl_db(c)
 * is read. 0 with *b filled, NOT_FOUND, ACCESS_DENIED, or a database
 * failure. Allocates nothing from the call. */
int sbx_decide_brief(rpc_call *c, const char *tenant, const char *id, const char *action,
		     struct sbx_brief *b, bc_error *err);

/* Inside the caller's transaction, with the sandbox row locked: the sandbox
 * becomes deleting, its instance desired deleted (instance.deleting with
 * sandboxId, the node's spec bumped, or finished at once when unplaced),
 * sandbox.deleting is published and the sandbox reconciler woken. expired
 * says whether expiry ended it. */
int sbx_delete_locked(struct db *d, const char *id, bool expired);

/* Guest trust (docs/sandboxes.md, "How the guest trusts it"). serve loads
 * the sandbox SSH CA once (sandbox_ca_serve: app->sandbox_ca,
 * app->sandbox_ca_line): a deployment without one serves without (logged),
 * an unreadable key file stops serve. */
struct ctl_app;
struct inst_new;
struct bootdata_ssh_ca;

/* certifyHostKey: a sandbox CA and sandbox_certify_host_key on. */
bool sbx_certify_host_key(const struct ctl_app *app);

/* Give a new sandbox or warm instance the sandbox SSH CA part (ca filled
 * and pointed to by n->ssh_ca) and, with certifyHostKey, its host
 * certificate (n->host_ca). Nothing without a sandbox CA. INVALID_CONFIG
 * for a CA line the spec refuses, or certifyHostKey without the secret
 * broker (the host key travels only in sealed user data). */
int sbx_guest_trust(const struct ctl_app *app, struct inst_new *n, struct bootdata_ssh_ca *ca,
		    bc_error *err);

#endif
