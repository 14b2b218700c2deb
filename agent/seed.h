/* seed.h: the NoCloud boot-data seed of an instance.
 *
 * cloud-init's NoCloud datasource reads a filesystem labelled "cidata"
 * holding user-data, meta-data and network-config. The three texts come
 * from pure builders (unit-tested); seed_write_iso puts them on an ISO9660
 * volume with that label (genisoimage, no shell). */
#ifndef BC_AGENT_SEED_H
#define BC_AGENT_SEED_H

#include <stddef.h>

#include "bc/node/v1/node.pb-c.h"

#define SEED_REASON_MAX 160
#define SEED_USER_DATA_MAX (16u << 20)  /* cloud-init's own limit is far below */

/* meta-data: instance-id (the instance id) and local-hostname (the id with
 * '_' turned into '-', a valid host name), as YAML. Pure; malloc'd. */
char *seed_meta_data(const char *instance_id);

/* network-config version 2: one ethernet per NIC matched by MAC, DHCP off,
 * its static IPv4/IPv6 addresses with their prefixes, and on the first NIC
 * with an IPv4 address the default route via gateway4 (the pool gateway;
 * NULL/"" for none). -EINVAL if a MAC or address is malformed. Pure;
 * *ret malloc'd. */
int seed_network_config(const Bc__Node__V1__InstanceSpec *s, const char *gateway4, char **ret);

/* Write the ISO at iso (mode 0600) from the three texts (user_data may be
 * NULL: an empty user-data), using work_dir (created, then removed) for the
 * files. 0, or -errno with reason (SEED_REASON_MAX) "SeedFailed: ...". */
int seed_write_iso(const char *work_dir, const char *iso, const void *user_data, size_t ud_len,
		   const char *meta_data, const char *network_config, char *reason);

#endif
