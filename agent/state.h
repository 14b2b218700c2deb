/* state.h: what bcd keeps in its state directory between runs: the applied
 * NodeSpec (spec.pb), the ids of the commands it has started (commands),
 * and small identity files (node.id, pool.id). */
#ifndef BC_AGENT_STATE_H
#define BC_AGENT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"

#define STATE_SPEC_FILE "spec.pb"
#define STATE_CMDS_FILE "commands"
#define STATE_MAX_SPEC_BYTES (64u << 20)
#define STATE_MAX_INSTANCES 10000
#define STATE_MAX_VOLUMES 10000

/* The acceptance rule (fencing): incoming is accepted only if its
 * generation is greater than applied_generation, so an old controller
 * replica can never roll the host back. Returns 0 to accept, -ESTALE for an
 * older or equal generation, -EINVAL for a NULL or oversized spec (more than
 * STATE_MAX_INSTANCES instances or STATE_MAX_VOLUMES volumes). Pure. */
int state_accept_spec(uint64_t applied_generation, const Bc__Node__V1__NodeSpec *incoming);

/* Write spec to dir/spec.pb atomically (0600): a temporary file renamed
 * over it, so a bcd started after a crash of this one reads the old spec or
 * the new one, whole. Not yet flushed to the disk: state_sync_spec does
 * that (a host that loses power loses its VMs too, and the controller
 * sends the current spec again), so the converge thread can start on the
 * spec while it runs. 0 or -errno. */
int state_save_spec(const char *dir, const Bc__Node__V1__NodeSpec *spec);

/* Flush dir/spec.pb and its directory entry to the disk. 0 or -errno. */
int state_sync_spec(const char *dir);

/* Read dir/spec.pb. *ret is owned (free with state_spec_free). -ENOENT when
 * no spec was ever saved, -EBADMSG if it does not unpack. */
int state_load_spec(const char *dir, Bc__Node__V1__NodeSpec **ret);

/* An independent deep copy of spec (owned; state_spec_free), or NULL. */
Bc__Node__V1__NodeSpec *state_spec_dup(const Bc__Node__V1__NodeSpec *spec);

/* Free a spec from state_load_spec/state_spec_dup. NULL-safe. */
void state_spec_free(Bc__Node__V1__NodeSpec *spec);

/* The whole of "receive a spec": check it against *applied_generation,
 * persist it, and on success set *applied_generation to its generation and
 * *ret_copy to an owned copy for the converge thread. Returns 0, -ESTALE
 * (refused: nothing written), -EINVAL, or -errno from the write (nothing
 * applied). */
int state_take_spec(const char *dir, uint64_t *applied_generation,
		    const Bc__Node__V1__NodeSpec *incoming, Bc__Node__V1__NodeSpec **ret_copy);

/* The set of command ids this host has started, persisted as one id per
 * line in dir/commands. A torn last line (crash during an append) is
 * dropped on open: that command was never started. */
struct state_cmds;

/* Load dir/commands (missing: an empty set). *ret owned (state_cmds_free).
 * 0 or -errno. */
int state_cmds_open(const char *dir, struct state_cmds **ret);
/* True if id was recorded (in this run or an earlier one). NULL-safe. */
bool state_cmds_has(const struct state_cmds *s, const char *id);
/* Record id on disk (append + fsync) before returning 0; call before
 * starting the command. -EEXIST if already recorded, -EINVAL for an id that
 * is not 1..128 printable characters without spaces. */
int state_cmds_add(struct state_cmds *s, const char *id);
/* How many ids are recorded. */
size_t state_cmds_count(const struct state_cmds *s);
/* Free the in-memory set (the file stays). NULL-safe. */
void state_cmds_free(struct state_cmds *s);

/* The state a pass moves an instance to: desired, except that a PAUSED
 * instance with pause_after_ready (a warm instance) is kept RUNNING (and
 * started if stopped) until its guest reported up this boot (ready_at,
 * gr_get, != 0); paused from the first pass after. Pure. */
Bc__Node__V1__DesiredState state_effective_desired(Bc__Node__V1__DesiredState desired,
						   bool pause_after_ready, int64_t ready_at);

/* A host joined as a new node must not adopt the old node's spec or
 * command record: set aside (rename to NAME.<owner>.<seconds>, never
 * delete) dir/spec.pb and dir/commands when spec.pb names another node than
 * node_id, or, when joined_now (this start enrolled the node), whatever
 * is there. Returns how many files were set aside (0: none), with the old
 * owner's node id in *ret_owner (malloc'd; "before-join" when unknown) if
 * any were, or -errno. */
int state_set_aside_foreign(const char *dir, const char *node_id, bool joined_now,
			    char **ret_owner);

/* Read a small one-line file dir/name (node.id, pool.id) without its
 * trailing newline. *ret malloc'd. -ENOENT, -EBADMSG if empty or not
 * printable. */
int state_read_line(const char *dir, const char *name, char **ret);

#endif
