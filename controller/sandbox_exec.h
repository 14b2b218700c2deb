/* sandbox_exec.h: Sandboxes.Exec (sandbox_exec.c): a user certificate from
 * the sandbox SSH CA and a single-use tunnel ticket. */
#ifndef BC_CTL_SANDBOX_EXEC_H
#define BC_CTL_SANDBOX_EXEC_H

#include "err.h"
#include "rpc.h"

/* A ticket opens one tunnel within this many seconds of its grant. */
#define TUNNEL_TICKET_SECONDS 60
/* The WebSocket route of a grant's path (under /api/compute/). */
#define TUNNEL_WS_PATH "tunnels/connect"

struct sbx_brief;
/* The sandbox's state allows exec (and an open tunnel into it): ready, its
 * instance running on a node. 0, or INVALID_STATE naming what is not. */
int sbx_exec_runnable(const char *id, const struct sbx_brief *b, bc_error *err);

/* The Exec handler of the Sandboxes service (sandboxes.c's table). */
int sbx_exec(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret, bc_error *err);

#endif
