/* node_commands.h: host commands (issue 16 item 1; node_commands.c). A
 * command is one thing a node's bcd does once on the controller's behalf
 * (instance.snapshot is the first user). It is a row of commands (0019):
 * enqueued in the caller's transaction, sent on the node's WatchSpec stream
 * in order after the spec it needs, settled by the node's report, failed
 * "timeout" by the reconciler past its deadline. docs/agent.md, "Commands". */
#ifndef BC_CTL_NODE_COMMANDS_H
#define BC_CTL_NODE_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bc/node/v1/node.pb-c.h"
#include "config.h"
#include "db.h"
#include "rpc.h"

#define CMD_ID_LEN 32            /* "cmd_" + 26 + NUL, rounded up */
#define CMD_KIND_MAX 64
#define CMD_ARGS_MAX 65536       /* args_json and result_json, bytes */
#define CMD_TIMEOUT_DEFAULT_MS (10 * 60 * 1000LL)
/* The channel a settled command is announced on, payload its id, in the
 * settling transaction (a reconciler LISTENs to it). */
#define CMD_SETTLED_CHANNEL "bc_command_settled"

struct cmd_new {
	const char *node_id;     /* required */
	const char *instance_id; /* NULL: a command of the node; else sent only
				  * once a spec naming it was sent */
	const char *kind;        /* [a-z0-9._-], 1..64 */
	const char *lane;        /* "control" | "bulk"; NULL: "control" */
	bool retry_safe;         /* bcd may run it again after a restart */
	int64_t timeout_ms;      /* <= 0: CMD_TIMEOUT_DEFAULT_MS */
	const char *key;         /* NULL: none; else unique: enqueueing again
				  * returns the command of that key */
	const char *args_json;   /* NULL: {} */
};

/* Insert the command in d's current transaction (the caller's) and wake
 * the node's stream (NOTIFY bc_node_spec, sent at its COMMIT). ret_id gets
 * its id; *ret_created (may be NULL) false when key named an existing
 * command (its id returned, nothing inserted). 0, -EINVAL (a bad field),
 * or a db_exec failure. */
int cmd_enqueue(struct db *d, const struct cmd_new *c, char ret_id[CMD_ID_LEN],
		bool *ret_created);

struct cmd_info {
	char id[CMD_ID_LEN];
	char node_id[64];
	char instance_id[64];
	char kind[CMD_KIND_MAX + 1];
	char lane[16];
	char state[16];          /* queued|delivered|running|succeeded|failed */
	bool retry_safe;
	char *error;             /* owned; "" when none */
	char *result_json;       /* owned; NULL when none */
};

/* The command id: 0, -ENOENT, or a db_exec failure. cmd_info_clear frees. */
int cmd_get(struct db *d, const char *id, struct cmd_info *ret);
void cmd_info_clear(struct cmd_info *c);

/* The node's WatchSpec stream (node_spec.c), holding no pool connection:
 * send the node's queued commands in order (and, with *resend, the
 * delivered ones not settled: a stream opened again), each only once the
 * spec the node holds (cache: the stream's last build; built whole here
 * if the stream has built none and the node holds generation sent > 0)
 * names its instance; stop at the first that must wait. Marks the sent
 * ones delivered; clears *resend once they were read. 0, or <0 with err. */
struct nodespec_cache;
int cmd_stream_send(rpc_call *c, const char *node, struct nodespec_cache *cache, uint64_t sent,
		    bool *resend, bc_error *err);

/* A report's results (node_report.c, inside its transaction): settle those
 * of node's own unsettled commands (succeeded or failed, the error and
 * result), NOTIFY CMD_SETTLED_CHANNEL for each; others (unknown, another
 * node's, settled already) are ignored and counted. *ret_settled,
 * *ret_ignored: how many. 0 or a db_exec failure. */
int cmd_settle(struct db *d, const char *node, const Bc__Node__V1__StatusReport *q,
	       int *ret_settled, int *ret_ignored);

/* The reconciler's leader pass: fail the commands past their deadline
 * ("timeout", NOTIFY each) and purge settled ones older than
 * cfg->command_retention_seconds (every 30 s). */
void cmd_tick(struct db *d, const struct ctl_config *cfg);

/* better_compute_command_results_ignored_total and the sweeper's count. */
void cmd_metrics_render(FILE *out);

/* `bc-controller command VERB`: main.c hands over the options it does not
 * know (cmd_admin_flag names them) before loading the configuration. */
bool cmd_admin_flag(const char *arg, bool *takes_value);
struct ctl_app;
int cmd_admin(struct ctl_app *app, const char *verb, int argc, char **argv);

#endif
