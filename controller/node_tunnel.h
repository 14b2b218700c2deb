/* node_tunnel.h: the controller's side of bcd's Agent.Tunnel
 * (proto/bc/node/v1/agent.proto): the certificates (the node's tunnel
 * server certificate, the controller's tunnel client certificate) and the
 * dialer a tunnel relay uses to reach an instance's sshd through its node. */
#ifndef BC_CTL_NODE_TUNNEL_H
#define BC_CTL_NODE_TUNNEL_H

#include <stdbool.h>

#include "app.h"
#include "db.h"
#include "err.h"
#include "rpc.h"
#include "tlsconn.h"

/* The controller's tunnel client certificate in pki_dir: clientAuth only,
 * CN NODE_TUNNEL_CLIENT_CN, signed by the API CA. bcd accepts exactly that
 * CN on its tunnel port. */
#define NODE_TUNNEL_CLIENT_CN "bc-controller-tunnel"
#define NODE_TUNNEL_CLIENT_BASE "tunnel-client"  /* tunnel-client.pem/.key */

/* True for "" or a "host:port" bcd may advertise (printable, at most 255
 * characters, no space, a port 1-65535 after the last ':'). */
bool node_tunnel_address_ok(const char *s);

/* The tunnel certificate of node_id for the key of csr_pem: serverAuth
 * only, CN and subjectAltName (DNS) = node_id, signed by the node CA, as
 * long-lived as node certificates. 0 or -errno (the CSR is bad). */
int node_tunnel_cert(const struct ctl_app *app, const char *csr_pem, const char *node_id,
		     char **ret_pem);

/* Write tunnel-client.pem/.key into pki_dir from the API CA. An existing
 * pair is kept (0) unless refuse_existing (-EEXIST, logged). 0 or -errno,
 * logged. `bc-controller init` and `pki add-tunnel-client`. */
int node_tunnel_client_create(const struct ctl_app *app, bool refuse_existing);

/* `bc-controller pki add-tunnel-client`: its exit status. */
int node_tunnel_pki_add(struct ctl_app *app);

/* serve's start: logs once whether tunnels can be dialled (the client
 * certificate exists) and, if not, which command adds it. */
void node_tunnel_check(struct ctl_app *app);

/* An open tunnel to a guest's port 22: exactly one of the two is set. */
struct node_tun {
	rpc_stream *st;           /* gRPC Agent.Tunnel: TunnelChunk{data} both ways */
	struct tlsc *raw;         /* the raw protocol (agent/tunnel.h): bytes both ways */
};

/* Open a tunnel to port 22 of instance_id through node_id's bcd: looks up
 * the node's tunnel endpoint (nodes.tunnel_address) and whether its bcd
 * reports the capability tunnel.raw. With it: a TLS connection (common/
 * tlsconn.h) with the tunnel client certificate, verifying bcd's
 * certificate against the node CA with the node id as the server name,
 * the request line and bcd's answer: its refusal (e.g. NOT_FOUND for an
 * instance not there) is this call's error. Without it: Agent.Tunnel over
 * gRPC (one cached channel per node, thread-safe), the same checks, and
 * TunnelChunk{open} sent; bcd's refusal then arrives at the first
 * rpc_stream_recv. 0 with *ret; -BC_EDOMAIN with err UNAVAILABLE when the
 * node has no tunnel endpoint, the controller no tunnel client
 * certificate, or the node cannot be reached; NOT_FOUND for an unknown
 * node. A raw connection's reads and writes, like a stream's sends and
 * receives, may run on two threads at once. */
int node_tunnel_dial(struct ctl_app *app, struct db *d, const char *node_id,
		     const char *instance_id, const char *tunnel_id, struct node_tun *ret,
		     bc_error *err);
/* Close and free what a dial opened. */
void node_tun_free(struct node_tun *t);

/* Free every cached channel and the client pair (process exit; no stream
 * of a dial may be open). */
void node_tunnel_shutdown(void);

#endif
