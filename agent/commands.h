/* commands.h: host commands, bcd's side (commands.c; docs/agent.md,
 * "Commands"). A Command from the spec stream is persisted
 * (state_dir/commands.d/<id>: written, fsynced, renamed) before anything
 * else, then run by its lane's workers, off the converge pass; its start
 * and its end are written to the same file before and after the run. Its
 * result rides in every report until the controller's ack names it settled
 * (or CMDS_KEEP_MS passed), then the file goes. After a restart: finished
 * but not acked -> reported; started, not finished and not retry-safe ->
 * failed "agent restarted during the command"; retry-safe, or never
 * started -> run (again). An id is recorded in state_cmds too, so one that
 * comes again after its file went never runs twice. */
#ifndef BC_AGENT_COMMANDS_H
#define BC_AGENT_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "runtime.h"
#include "state.h"

#define CMDS_DIR "commands.d"
#define CMDS_ID_MAX 128
#define CMDS_KIND_MAX 64
#define CMDS_ERROR_MAX 256
#define CMDS_BLOB_MAX 65536             /* args_json, result_json */
#define CMDS_KEEP_MS (24 * 3600 * 1000LL) /* a result not acked: dropped after */
#define CMDS_CONTROL_WORKERS 2
#define CMDS_BULK_WORKERS 1
#define CMDS_RESTARTED_ERROR "agent restarted during the command"

/* One command as its file holds it. */
struct cmd_rec {
	char id[CMDS_ID_MAX + 1];
	char kind[CMDS_KIND_MAX + 1];
	char instance_id[RT_ID_MAX + 1];
	char lane[16];             /* control | bulk */
	bool retry_safe;
	int64_t deadline;          /* unix ms (the controller's) */
	char *args;                /* owned, NUL-terminated; "" when none */
	int64_t received_ms;       /* unix ms: persisted */
	int64_t started_ms;        /* unix ms of the last start; 0: never */
	uint32_t runs;             /* how many times it was started */
	int64_t finished_ms;       /* 0: not finished */
	bool ok;
	char error[CMDS_ERROR_MAX];
	char *result;              /* owned JSON, or NULL */
};

/* The file's text (*ret malloc'd, NUL-terminated) / the record it holds
 * (-EBADMSG for anything that is not a whole file of this format; a
 * decoded rec is cmd_rec_clear'ed by the caller). */
int cmd_rec_encode(const struct cmd_rec *r, char **ret, size_t *ret_len);
int cmd_rec_decode(const char *buf, size_t len, struct cmd_rec *ret);
void cmd_rec_clear(struct cmd_rec *r);
/* An id that may name a command and its file: [A-Za-z0-9_-], 1..128. */
bool cmd_id_ok(const char *id);

/* What a restart does with a command found in its file. */
enum cmd_recovery {
	CMD_RECOVER_RUN,    /* never started, or retry-safe: run it (again) */
	CMD_RECOVER_REPORT, /* finished: report its result */
	CMD_RECOVER_FAIL,   /* started, not finished, not retry-safe */
};
enum cmd_recovery cmd_recover(const struct cmd_rec *r);

struct cmds;

struct cmds_opts {
	const char *state_dir;     /* borrowed */
	struct state_cmds *seen;   /* borrowed: every id ever received */
	struct rt *rt;             /* borrowed; NULL: instance.probe fails */
	bool fake;                 /* the fake runtime: fake.sleep exists */
	struct snap *snap;         /* borrowed; NULL: instance.snapshot fails */
};

/* Open state_dir/commands.d and apply the restart rules (logged). Workers
 * start with cmds_start. 0 or -errno. */
int cmds_open(const struct cmds_opts *o, struct cmds **ret);
void cmds_start(struct cmds *c);
/* Stop the workers (a running handler is asked to stop: its command stays
 * started, not finished, in its file). NULL-safe. */
void cmds_stop(struct cmds *c);
void cmds_free(struct cmds *c);

/* A Command from the stream (watch thread): ignored if its id was seen
 * before; else persisted, recorded, queued on its lane (an unknown kind
 * finishes at once: ok=false "UNSUPPORTED: <kind>"). 0, or -errno when it
 * could not be persisted (not run). */
int cmds_receive(struct cmds *c, const Bc__Node__V1__Command *cmd);

/* The results to report (finished, not acked), owned by the caller:
 * cmds_results_free. Drops the ones older than CMDS_KEEP_MS first. */
struct cmds_result {
	char id[CMDS_ID_MAX + 1];
	bool ok;
	char error[CMDS_ERROR_MAX];
	char *result; /* JSON or NULL */
};
void cmds_results(struct cmds *c, struct cmds_result **ret, size_t *ret_n);
void cmds_results_free(struct cmds_result *r, size_t n);
/* The controller holds these settled: forget them and delete their files. */
void cmds_settled(struct cmds *c, char **ids, size_t n);
/* Moves whenever a command finishes (the report thread polls it). */
uint64_t cmds_seq(struct cmds *c);
/* How many commands wait for a worker, run, or wait to be acked. */
void cmds_counts(struct cmds *c, size_t *queued, size_t *running, size_t *finished);

#endif
