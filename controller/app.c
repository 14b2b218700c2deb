/* app.c: what every API call sees. The server's user pointer is the
 * application (struct ctl_app); each worker thread owns a database
 * connection (a stream holds one of the pool's while it reads: streams.c);
 * the pre-call hook (auth.c) sets the caller, a principal. Handlers reach
 * all three through the call, never through globals. */
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
	return p && p->kind == PRINCIPAL_IDENTITY && p->is_admin &&
	       strcmp(p->tenant_id, AUTH_ROOT_TENANT) == 0;
}
