/* node.h: the node plane, one header for the node_*.c files.
 *
 *   node_join.c     Node.Join, Node.RenewCertificate, the serial check
 *   node_spec.c     "push a NodeSpec": change rows, the build, WatchSpec,
 *                   GetBootData
 *   node_report.c   Node.Report: "report host state"
 *   node_admin.c    the operator's Nodes service
 *   node_place.c    placement, address leases, finished deletions, lost nodes
 *   node_replace.c  re-placing refused and lost instances (leader)
 *
 * Placement and its kin run inside the caller's transaction. */
#ifndef BC_CTL_NODE_H
#define BC_CTL_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

/* ------------------------------------------------------------ node_join.c */

/* Join and RenewCertificate of the Node service (server.c's table). */
const struct rpc_handler *node_join_handlers(size_t *ret_n);

/* 0 if cert_pem (the node's verified client certificate) carries the
 * serial issued to node last, or a renewed one not presented before,
 * which becomes the only one accepted; -EACCES for any other (or none),
 * -errno from the database. */
int nodeapi_check_serial(struct db *d, const char *node, const char *cert_pem);

/* ------------------------------------------------------------ node_spec.c */

/* WatchSpec and GetBootData of the Node service (server.c's table). */
const struct rpc_handler *node_spec_handlers(size_t *ret_n);

/* Record a change to what a node runs, inside the caller's transaction: a
 * node_spec_changes row naming no instance (so the next build is whole) and
 * a NOTIFY on NODE_SPEC_CHANNEL; a no-op for node_id NULL. 0 or -errno. */
int spec_bump(struct db *d, const char *node_id);
/* The same for a change to that one instance's entry alone (its desired
 * state, its placement, its deletion): the next build reads only it. */
int spec_bump_instance(struct db *d, const char *node_id, const char *instance_id);
/* The node's stream takes every change row it sees and bumps the
 * generation once if there was any: 1 if it moved, 0 if not, -errno. The
 * instances the rows named are appended to *dirty (newline-separated,
 * malloc'd); *all is set when a row named none. */
int spec_take_changes(struct db *d, const char *node_id, bool *all, char **dirty);
/* The node's spec generation into *ret; with pending, plus one while
 * change rows wait to be taken (the report fence, node_report.c). A
 * retired or unknown node: ACCESS_DENIED, reason node-retired. */
int spec_read_generation(struct db *d, const char *node, bool pending, uint64_t *ret,
			 bc_error *err);

/* The channel a change's NOTIFY goes to, with the node id (watch.c). */
#define NODE_SPEC_CHANNEL "bc_node_spec"
/* spec_bump_instance's change row for a statement of its own: the body of
 * a CTE recording a change of each (node_id, id) row of the CTE named cte
 * (e.g. the instances a warm claim took, warm.h). Insert-only, so writers
 * on one node never wait for each other; the statement must also select
 * pg_notify(NODE_SPEC_CHANNEL, node_id). */
#define NODE_SPEC_CHANGES_FROM(cte) \
	"INSERT INTO node_spec_changes (node_id, instance_id) SELECT node_id, id FROM " cte

/* A node's spec stream keeps its last build, so the next one need read
 * again only the instances changed since. */
struct nodespec_cache {
	Bc__Node__V1__NodeSpec *spec; /* owned; NULL: nothing built yet */
};

/* Build node_id's spec into c, *ret borrowing it (valid until the next
 * build or nodespec_cache_clear): whole when all is set or c holds no
 * build yet; otherwise the node's header and the instances named in dirty
 * (newline-separated; spec_take_changes) are read again and every other
 * instance is kept from c (the change rows say nothing else changed). A
 * failure leaves c as it was. */
int nodespec_build_delta(struct db *d, const char *node_id, struct nodespec_cache *c, bool all,
			 const char *dirty, Bc__Node__V1__NodeSpec **ret, bc_error *err);
/* Free c's build; c is empty after. */
void nodespec_cache_clear(struct nodespec_cache *c);

/* ---------------------------------------------------------- node_report.c */

/* Report of the Node service (server.c's table). */
const struct rpc_handler *node_report_handlers(size_t *ret_n);

/* ----------------------------------------------------------- node_admin.c */

/* The operator's Nodes service: CreateJoinToken, Get, List, Retire,
 * SetCapacity (server.c's table). */
const struct rpc_handler *node_admin_handlers(size_t *ret_n);

/* Publish node event type (node.joined, .retired, .lost, .recovered) about
 * node_id of pool_id, with its data from event_data.c. 0 or -errno. */
int node_publish(struct db *d, const char *type, const char *node_id, const char *pool_id);

/* ----------------------------------------------------------- node_place.c */

/* The node label a memory snapshot records and its restores must match. */
#define PLACE_CPU_MODEL_LABEL "cpu.model"

struct place_req {
	const char *instance_id;
	const char *tenant_id;
	const char *pool_id;
	int vcpus;
	int64_t memory_mib, disk_gib;
	int gpus;
	const char *const *labels;   /* node labels required (keys), NULL-terminated */
	/* a memory restore: only nodes whose cpu.model label is this; NULL
	 * or "": any (sandbox_restore.c) */
	const char *cpu_model;
	const char *only_node;       /* NULL or "": any node of the pool; else only this one
				      * (an instance's volumes' host) */
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

/* --------------------------------------------------------- node_replace.c */

/* Leader only: re-place instances whose host refused them for
 * after_seconds (host admission), failing them after REPLACE_MAX
 * re-placements; and recreate the instances of recreateOnHostLoss pools
 * whose node is lost. Each instance in its own transaction. */
#define REPLACE_MAX 3
struct ctl_app;
void replace_refused(struct db *d, const struct ctl_app *app, int after_seconds);
void recreate_lost(struct db *d, const struct ctl_app *app);

#endif
