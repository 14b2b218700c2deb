/* netlink.h: the links of instance networking over rtnetlink (libmnl):
 * one bridge per pool carrying the host's addresses, one tap per NIC
 * enslaved to it before any VMM starts. Every call is idempotent and needs
 * CAP_NET_ADMIN in the current network namespace. */
#ifndef BC_AGENT_NETLINK_H
#define BC_AGENT_NETLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NL_ADDR_MAX 64   /* "addr/prefix" text */

/* The bridge name exists as a bridge and is up, with addr ("10.0.0.1/24",
 * "fd00::1/64"; NULL or "" = none) on it. -EEXIST if name is a link of
 * another kind. */
int nl_bridge_ensure(const char *name, const char *addr4, const char *addr6);

/* A persistent tap name exists (created through /dev/net/tun if absent),
 * is enslaved to bridge and up. */
int nl_tap_ensure(const char *name, const char *bridge);

/* The port security of a tap already enslaved to its bridge: the port never
 * learns source MACs (so a guest cannot move another's MAC to itself nor
 * fill the table); with mac, a static sticky FDB entry for it on the port;
 * with lock, only frames whose source MAC has an FDB entry on this port are
 * taken (kernel 5.18 on; older kernels ignore it). Unknown unicast is
 * flooded into the port only without mac and lock (its guest's MAC is
 * never learned: flooding is how frames reach it). */
int nl_port_secure(const char *port, const uint8_t *mac, bool lock);

/* Bound the FDB entries the bridge learns (from ports that learn: the
 * uplinks) to max, 0 = no bound. Kernel 6.8 on; older kernels ignore it. */
int nl_bridge_fdb_max_learned(const char *bridge, uint32_t max);
/* Set the link name up or down (a fenced instance's tap goes down; the
 * next nl_tap_ensure brings it up). -ENODEV if no such link. */
int nl_link_set_up(const char *name, bool up);

/* Remove the link name; 0 if it does not exist. */
int nl_link_delete(const char *name);

/* True if a link called name exists. */
bool nl_link_exists(const char *name);

/* The addresses on link name (without prefix, "10.0.0.1", "fe80::1"),
 * at most max into out; *ret_n how many. -ENODEV if no such link. */
int nl_addrs(const char *name, char (*out)[NL_ADDR_MAX], size_t max, size_t *ret_n);

#endif
