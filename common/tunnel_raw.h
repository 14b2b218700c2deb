/* tunnel_raw.h: the raw tunnel protocol between the controller
 * (controller/node_tunnel.c) and bcd (agent/tunnel.c), replacing gRPC
 * Agent.Tunnel on bcd's tunnel_listen port.
 *
 * On the same port, TLS with the same certificates and checks, then one request line
 *   "BCTUNNEL/1 INSTANCE PORT TUNNEL_ID\n"
 * and one answer line, "OK\n" or "ERR CODE REASON MESSAGE\n" (CODE a
 * bc_code_name, REASON the refusal's reason), then the bytes both ways;
 * half-close is TLS close_notify. bcd reports the capability TUNNEL_RAW_CAP
 * (the node label bc.dev/cap.tunnel.raw) so the controller dials it raw;
 * a bcd without it is dialled with gRPC Agent.Tunnel. */

#ifndef BC_TUNNEL_RAW_H
#define BC_TUNNEL_RAW_H

#define TUNNEL_RAW_MAGIC "BCTUNNEL/1"
#define TUNNEL_RAW_CAP "tunnel.raw"
#define TUNNEL_REQUEST_MAX 256

#endif
