/* app.c: what every API call sees. The server's user pointer is the
 * application (struct ctl_app); each worker thread owns a database
 * connection (a stream holds one of the pool's while it reads: streams.c);
 * the pre-call hook (auth.c) sets the caller, a principal. Handlers reach
 * all three through the call, never through globals. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "db.h"
#include "rpc.h"

/* See app.h. */
struct ctl_app *ctl_app(const rpc_call *call)
{
	return rpc_call_user(call);
}

/* See app.h. */
struct db *ctl_db(const rpc_call *call)
{
	return rpc_call_thread(call);
}

/* See app.h. */
const struct principal *ctl_principal(const rpc_call *call)
{
	return rpc_call_principal(call);
}

/* See app.h. */
bool auth_is_operator(const struct principal *p)
{
	/* a sandbox's own token is never the operator's, whoever made it */
	return p && p->kind == PRINCIPAL_IDENTITY && p->is_admin && !*p->token_sandbox &&
	       strcmp(p->tenant_id, AUTH_ROOT_TENANT) == 0;
}

int ctl_verb_run(struct ctl_app *app, const char *cmd, const struct ctl_verb *verbs, size_t n,
		 int argc, char **argv)
{
	for (size_t i = 0; argc > 0 && i < n; i++)
		if (strcmp(argv[0], verbs[i].name) == 0)
			return verbs[i].fn(app);
	fprintf(stderr, "usage: bc-controller %s VERB [--config FILE]\n", cmd);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "  %-15s %s\n", verbs[i].name, verbs[i].usage);
	return 2;
}
