/* TEMP stub header (tunnelnode owns it) */
#ifndef BC_CTL_NODE_TUNNEL_H
#define BC_CTL_NODE_TUNNEL_H
#include "app.h"
#include "db.h"
#include "err.h"
#include "rpc.h"
int node_tunnel_dial(struct ctl_app *app, struct db *d, const char *node_id,
		     const char *instance_id, const char *tunnel_id, rpc_stream **ret, bc_error *err);
#endif
