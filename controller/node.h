/* node.h: instance lifecycle steps shared by the API, the node API and the
 * reconciler: placement (booking capacity on a node), address leases, the
 * end of a deletion, and abandoning a node that is lost or retired. Every
 * function runs inside the caller's transaction. */
#ifndef BC_CTL_NODE_H
#define BC_CTL_NODE_H

#include <stdbool.h>

#include "db.h"
#include "err.h"

struct place_req {
	const char *instance_id;
	const char *tenant_id;
	const char *pool_id;
	int vcpus;
	int64_t memory_mib, disk_gib;
	int gpus;
	const char *const *labels;   /* node labels required (keys), NULL-terminated */
};

/* Book capacity for an instance on the best node of its pool that has room
 * and carries every required label; sets instances.node_id. *ret_node is
 * the node id (malloc'd) or NULL when no node has room (the instance stays
 * unplaced, reason "Unschedulable: ..."). Bumps the node's spec. */
int place_instance(struct db *d, const struct place_req *q, char **ret_node, bc_error *err);

/* Place an instance waiting unplaced (provisioning, no node), locked with
 * SKIP LOCKED (a row another transaction holds is left for later): as
 * place_instance with the labels its network policy and ssh-host-only
 * need, and instance.placed when it found a node (*ret_node, malloc'd). */
int place_pending(struct db *d, const char *id, char **ret_node, bc_error *err);

/* Release an instance's booking (its open allocation) and, with address,
 * its IP leases. 0 or a db_exec error. */
int release_placement(struct db *d, const char *id, bool address);

/* replace.c, leader only: re-place instances whose host refused them for
 * after_seconds (host admission), failing them after REPLACE_MAX
 * re-placements; and recreate the instances of recreateOnHostLoss pools
 * whose node is lost. Each instance in its own transaction. */
#define REPLACE_MAX 3
void replace_refused(struct db *d, int after_seconds);
void recreate_lost(struct db *d);

/* Lease an IPv4 address for NIC 0 (if the pool has IPAM), bound to the
 * instance's MAC (already on its row). A MAC collision makes it pick
 * another MAC, written back to mac and to the row. */
int lease_nic(struct db *d, const char *pool_id, const char *instance_id, char mac[18],
	      bc_error *err);

/* Finish deletions: instances among ids (or, with ids NULL, all deleting
 * instances of node_id) become deleted, their allocation and leases are
 * released, instance.deleted is published. Returns how many, or <0. */
int finish_deletions(struct db *d, const char *node_id, const char *ids_lines);

/* A node is lost or retired: its deleting instances finish, its live
 * instances become lost. */
int nodes_abandon(struct db *d, const char *node_id, const char *reason);

#endif
