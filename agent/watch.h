/* watch.h: the spec-watch thread. It holds one Node.WatchSpec stream open,
 * accepts only newer generations, persists each before handing it to the
 * converge thread, and reconnects with capped backoff. */
#ifndef BC_AGENT_WATCH_H
#define BC_AGENT_WATCH_H

#include <stdatomic.h>
#include <stdint.h>

#include "backoff.h"
#include "commands.h"
#include "bc/node/v1/node.pb-c.h"
#include "converge.h"
#include "rpc.h"
#include "state.h"

#define WATCH_BACKOFF_MIN_MS 200
#define WATCH_BACKOFF_MAX_MS 5000
#define WATCH_REFUSED_MS 30000   /* retry pace while the node is refused */
#define WATCH_HEALTHY_MS 10000   /* a stream this old resets the backoff */

struct watch {
	rpc_client *client;           /* borrowed; mTLS */
	struct conv *conv;            /* borrowed; accepted specs go here */
	const char *state_dir;        /* borrowed */
	const char *node_id;          /* borrowed; specs for another node are refused */
	struct state_cmds *cmds;      /* borrowed */
	struct cmds *commands;        /* borrowed; runs the commands (commands.h) */
	struct backoff_stop *stop;    /* borrowed */
	_Atomic uint64_t applied;     /* newest persisted generation */
	atomic_bool kick;             /* reopen the stream */
	_Atomic uint64_t superseded;  /* specs skipped: a newer one came in the same burst */
};

/* Thread body: until stop is requested. w->applied must hold the
 * generation of the spec loaded at start (0 if none). */
void watch_run(struct watch *w);

/* Handle one NodeUpdate (watch thread): a spec goes through the acceptance
 * rule, is persisted, then submitted to converge; a command is persisted
 * and queued (cmds_receive). 0; -ESTALE/-EINVAL for a refused spec (logged; the stream goes
 * on); another -errno when persisting failed (the caller reconnects so the
 * controller sends it again). */
int watch_handle(struct watch *w, const Bc__Node__V1__NodeUpdate *u);

/* Ask the watch thread to reopen its stream (e.g. the controller reports a
 * newer generation than we hold). Any thread. */
void watch_kick(struct watch *w);

/* The newest generation accepted and persisted. Any thread. */
uint64_t watch_applied(struct watch *w);

#endif
