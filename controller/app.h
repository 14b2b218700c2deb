/* app.h: what every API call sees (app.c): the application object, the
 * caller (principal) set by the pre-call hook, and this thread's database. */
#ifndef BC_CTL_APP_H
#define BC_CTL_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "db.h"
#include "rpc.h"

struct watch_registry;
struct waiter;
struct metrics_srv;
struct streams;
struct sshcert_ca;

struct ctl_app {
	struct ctl_config cfg;
	rpc_server *server;
	struct watch_registry *watches;
	char *api_ca_pem, *node_ca_pem, *node_ca_key_pem;
	atomic_bool stopping;
	pthread_t listen_thread, reconcile_thread, sbx_thread;
	struct metrics_srv *metrics;
	int waiting;                 /* calls holding a worker in a create's wait */
	struct waiter *waiter;       /* sandbox creates waiting off the workers (waiter.c) */
	struct waiter *inst_waiter;  /* instance creates waiting off the workers */
	struct streams *streams;     /* stream admission and database pool */
	/* the deployment's sandbox SSH CA, loaded at serve (sandbox_ca.h);
	 * NULL without one: Sandboxes.Exec is UNSUPPORTED */
	struct sshcert_ca *sandbox_ca;
	char *sandbox_ca_line;       /* its public key line */
};

/* The caller of an API call, set by the pre-call hook. */
enum principal_kind { PRINCIPAL_NONE, PRINCIPAL_IDENTITY, PRINCIPAL_NODE };

struct principal {
	enum principal_kind kind;
	char id[64];         /* identity id or node id */
	char tenant_id[64];  /* identities */
	char pool_id[64];    /* nodes */
	bool is_admin;
	char identity_kind[16];  /* user | service | agent */
	/* an agent: the user it acts for and the live delegation; others: "" */
	char user_id[64];
	char delegation_id[64];
	/* identities: the SHA-256 (hex) of the bearer token and its expiry
	 * (epoch seconds, 0: none) */
	char token_hash[65];
	int64_t token_expires_at;
	/* a sandbox's own token (docs/identity.md, "Without workload
	 * identity"): the sandbox it was given to and its run ("" if none);
	 * "" for every other token. authz_decide holds such a token to the
	 * sandboxes of its run. */
	char token_sandbox[64];
	char token_run[129];
};

/* From a call: the app, this thread's database (or the stream pool's
 * connection it holds), the principal; all borrowed. */
struct ctl_app *ctl_app(const rpc_call *call);
struct db *ctl_db(const rpc_call *call);
const struct principal *ctl_principal(const rpc_call *call);

/* The operator: an administrator of the root tenant (the admin API's
 * callers; implicit allow everywhere). */
#define AUTH_ROOT_TENANT "root"
bool auth_is_operator(const struct principal *p);

/* One verb of an admin command (`bc-controller secrets VERB`, `pki VERB`). */
struct ctl_verb {
	const char *name;
	int (*fn)(struct ctl_app *app); /* the process's exit status */
	const char *usage;
};

/* Run the verb of the n in verbs that argv[0] names (argc 0 or 1), or
 * print the usage of command cmd with every verb's line: its exit status,
 * 2 for a missing or unknown verb. */
int ctl_verb_run(struct ctl_app *app, const char *cmd, const struct ctl_verb *verbs, size_t n,
		 int argc, char **argv);

#endif
