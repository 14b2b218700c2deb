/* tunnel.h: bcd's Agent.Tunnel server (proto/bc/node/v1/agent.proto): the
 * controller's ssh tunnels into this node's instances. */
#ifndef BC_AGENT_TUNNEL_H
#define BC_AGENT_TUNNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tunnel_raw.h"

struct conv;

/* The only client certificate CN served (the controller's tunnel client
 * certificate, signed by the API CA). */
#define TUNNEL_CLIENT_CN "bc-controller-tunnel"
/* Largest data chunk sent; a received one may be as large. */
#define TUNNEL_CHUNK_MAX (256 * 1024)

/* TEST ONLY, fake runtime only: state_dir/fake/tunnel_targets maps guest
 * addresses to local TCP targets, one "GUEST_IPV4 HOST:PORT" per line (the
 * fake runs no guest, so the tests relay to a local sshd or echo server).
 * Never read with another runtime. */
#define TUNNEL_FAKE_TARGETS "fake/tunnel_targets"

struct tunnel_opts {
	const char *listen;       /* "[::]:7444" */
	const char *cert_pem;     /* tunnel.pem (serverAuth, SAN = node id) */
	const char *key_pem;      /* node.key */
	const char *ca_pem;       /* ca.pem: the API CA, for the client certificate */
	struct conv *conv;        /* borrowed: the spec and the instances' states */
	const char *state_dir;
	bool fake;                /* the fake runtime: TUNNEL_FAKE_TARGETS */
	uint32_t max;             /* tunnels at once */
	bool raw;                 /* the raw protocol (below), else gRPC Agent.Tunnel */
};

/* The raw protocol (tunnel_protocol = raw, the default): tunnel_raw.h. */

struct tunnel_srv;

/* Bind and serve. 0 with *ret and the bound port, or -errno (logged). */
int tunnel_start(const struct tunnel_opts *o, struct tunnel_srv **ret, int *ret_port);
/* Stop: every tunnel ends. NULL-safe. */
void tunnel_stop(struct tunnel_srv *t);
/* bcd_tunnels_open, bcd_tunnels_total, bcd_tunnels_refused_total{reason}.
 * t NULL: the tunnel port is off (open 0, nothing else). */
void tunnel_metrics_render(FILE *out, struct tunnel_srv *t);

#endif
