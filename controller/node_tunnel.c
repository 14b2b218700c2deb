/* TEMP stub (tunnelnode owns it) */
#include "node_tunnel.h"
int node_tunnel_dial(struct ctl_app *app, struct db *d, const char *node_id,
		     const char *instance_id, const char *tunnel_id, rpc_stream **ret, bc_error *err)
{
	(void)app; (void)d; (void)instance_id; (void)tunnel_id; (void)ret;
	return bc_error_set(err, BC_UNAVAILABLE, "node %s: no tunnel (stub)", node_id);
}
