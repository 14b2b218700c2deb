/* ipam.h: pure address helpers (ipam.c): IPv4 subnets, IPv6 /64s, MACs. */
#ifndef BC_CTL_IPAM_H
#define BC_CTL_IPAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse a dotted IPv4 address / an IPv4 CIDR / an IPv6 CIDR: 0 or -EINVAL. */
int ipam_parse_ip4(const char *s, uint32_t *ret);
int ipam_parse_cidr4(const char *s, uint32_t *ret_net, int *ret_prefix);
int ipam_parse_cidr6(const char *s, unsigned char ret_net[16], int *ret_prefix);
bool ipam_contains4(uint32_t net, int prefix, uint32_t ip);
/* Number of leasable host addresses (excludes network and broadcast). */
uint32_t ipam_hosts4(int prefix);
void ipam_format4(uint32_t ip, char *out, size_t len);
/* A locally administered unicast MAC from 5 random bytes. */
void ipam_random_mac(char out[18]);
/* The EUI-64 IPv6 address in net/64 for mac; -EINVAL for a bad MAC. */
int ipam_eui64(const unsigned char net[16], const char *mac, char *out, size_t len);
/* Tap name for NIC idx of instance id: "bct" + 11 id chars + idx (<= 15). */
void ipam_tap_name(const char *instance_id, int idx, char out[16]);
/* How long a released address waits before it is leased again (config key
 * ip_quarantine_seconds): set once at start, before any thread; read by
 * lease_nic (placement.c). */
void ipam_set_quarantine(int seconds);
int ipam_quarantine(void);

#endif
