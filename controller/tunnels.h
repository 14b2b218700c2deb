/* tunnels.h: the tunnel gateway (tunnels.c): Tunnels.Connect relays one
 * exec grant's SSH bytes between its caller and the sandbox's host;
 * Tunnels.List and Tunnels.Close show and end the tunnels into a sandbox. */
#ifndef BC_CTL_TUNNELS_H
#define BC_CTL_TUNNELS_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

#define TUNNEL_CONNECT_METHOD "/bc.compute.v1.Tunnels/Connect"
/* The WebSocket route of the JSON/HTTP transport (docs/http.md). */
#define TUNNEL_WS_PREFIX "/api/compute/tunnels/"
/* Tunnels.Close and a deleted or expired sandbox are noticed this often. */
#define TUNNEL_POLL_SECONDS 2
/* The ticket must come within this many ms of the stream's start. */
#define TUNNEL_FIRST_MESSAGE_MS 10000
/* The most bytes one message carries to the host (bcd's chunk limit):
 * large, because each message costs a round of wake-ups on every hop
 * (gRPC core sends one message at a time per call), bounded, because each
 * tunnel holds up to a chunk per direction. */
#define TUNNEL_CHUNK_MAX (256 * 1024)

/* The handlers of the Tunnels service (server.c's table). */
const struct rpc_handler *tunnels_handlers(size_t *ret_n);
/* The retention pass: delete up to TUNNELS_PURGE_BATCH tunnels rows that
 * closed (or whose ticket expired unused) more than retention_seconds ago
 * (events_retention_seconds). The number deleted, or -errno. */
#define TUNNELS_PURGE_BATCH 1000
struct db;
int tunnels_purge(struct db *d, int retention_seconds);
/* Tunnels this replica relays now (for /metrics). */
int64_t tunnels_open_count(void);

#endif
