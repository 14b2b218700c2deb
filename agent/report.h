/* report.h: the report thread and the pure StatusReport builder. */
#ifndef BC_AGENT_REPORT_H
#define BC_AGENT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "commands.h"
#include "config.h"
#include "converge.h"
#include "rpc.h"

/* The build's version (Makefile BC_VERSION), reported as agent_version. */
#ifdef BC_VERSION
#define BCD_VERSION BC_VERSION
#else
#define BCD_VERSION "0.0.0-unknown"
#endif

#define REPORT_TIMEOUT_MS 10000
#define REPORT_MAX_CAPS 8
#define REPORT_CMDS_POLL_MS 200 /* how soon a finished command is reported */
#define REPORT_KICK_AFTER 3   /* reports showing a newer controller generation */

/* The host facts every report carries (all borrowed). */
struct report_info {
	const char *hostname;
	const char *agent_version;
	const struct cfg_label *labels;
	size_t n_labels;
	const char *cpu_model;        /* label cpu.model unless labels has it; may be NULL */
	const char *caps[REPORT_MAX_CAPS];
	size_t n_caps;
	uint32_t vcpus;
	uint64_t memory_mib;
	uint64_t disk_gib;
	int64_t cert_not_after_ms;    /* the node certificate's expiry (0: unknown) */
	int64_t cert_warn_ms;         /* warn when it expires within this (0: never) */
	const char *tunnel_address;   /* Agent.Tunnel's host:port; NULL or "": none */
};

/* A built StatusReport: msg and the arrays it points into. Strings are
 * borrowed from the report_info and conv_status it was built from. */
struct report_msg {
	Bc__Node__V1__StatusReport msg;
	Bc__Node__V1__Capacity cap;
	Bc__Node__V1__VolumeStorage storage;
	Bc__Node__V1__InstanceStatus *inst, **inst_p;
	Bc__Node__V1__StatusReport__LabelsEntry *labels, **labels_p;
	Bc__Node__V1__CommandResult *results, **results_p;
	Bc__Node__V1__HostWarning warning[2], *warning_p[2]; /* cert, volume store */
	char warning_text[128];
};

/* The cert-expiring warning's text into out, if a certificate expiring at
 * not_after_ms is within warn_ms of now (all wall-clock ms): true then.
 * Nothing (false) for an unknown expiry or warn_ms 0. Pure. */
bool report_cert_warning(int64_t now, int64_t not_after_ms, int64_t warn_ms, char *out,
			 size_t len);

/* Build the report of st at wall-clock now (which decides the warnings).
 * Pure; release with report_msg_clear. */
void report_build(const struct report_info *info, const struct conv_status *st, int64_t now,
		  struct report_msg *ret);
/* Free the arrays of a built report (not the borrowed strings). */
void report_msg_clear(struct report_msg *m);
/* Append the command runner's results (commands.h) to m's; they point
 * into res, which must outlive m. */
void report_add_cmd_results(struct report_msg *m, const struct cmds_result *res, size_t n);

/* What the report thread knows the controller holds. A report that is not
 * complete carries only what changed since the last report the controller
 * took: delivered, and acknowledged with a spec generation no newer than the
 * report's applied generation (a host that has not applied the newest spec
 * gets only states matching the desired ones taken, nodeapi.c). */
struct report_track {
	struct conv_item *taken;   /* sorted by id: the items of that report */
	size_t n_taken;
	bool need_complete;        /* first report, after a failed delivery or a stale ack */
	int64_t complete_due;      /* mono ms: the periodic complete report */
};

/* A fresh track: the next report is complete. */
void report_track_init(struct report_track *t);
/* Free the taken list and zero t. */
void report_track_clear(struct report_track *t);

/* True if the report sent at now_ms must list everything. */
bool report_track_complete(const struct report_track *t, int64_t now_ms);

/* The delta of st against t's taken list: a copy of st (complete = false)
 * whose items are those that differ from the taken ones in state, reason or
 * desired state, or are not taken, plus every one-shot entry. An id taken
 * but gone from st is left out (never a deletion by omission). Results are
 * copied whole. Pure; free ret with conv_status_clear. */
void report_delta(const struct report_track *t, const struct conv_status *st,
		  struct conv_status *ret);

/* A report built from snapshot st (complete or delta) was delivered or not;
 * ack_generation is the ack's spec_generation when delivered. The snapshot
 * becomes the taken list only if the controller took it under the newest
 * spec; otherwise the next report is complete. */
void report_track_done(struct report_track *t, const struct conv_status *st, bool complete,
		       bool delivered, uint64_t ack_generation, int64_t now_ms, int interval_ms);

/* The "model name" of /proc/cpuinfo text (malloc'd, trimmed), or NULL. */
char *report_cpu_model(const char *cpuinfo);

struct watch;

struct report {
	rpc_client *client;          /* borrowed; mTLS */
	struct conv *conv;           /* borrowed; status and change signal */
	struct watch *watch;         /* borrowed, may be NULL; kicked when stale */
	struct cmds *cmds;           /* borrowed, may be NULL; command results */
	struct report_info info;
	int interval_ms;
	uint64_t n_complete, n_delta; /* reports delivered (atomic; report_counts) */
};

/* Reports delivered so far, complete and delta. Any thread. */
void report_counts(const struct report *r, uint64_t *ret_complete, uint64_t *ret_delta);

/* Fill r->info from cfg and the runtime's traits (cpu model read from
 * /proc/cpuinfo; freed by report_fini). */
void report_init(struct report *r, const struct agent_config *cfg, const struct rt_traits *traits);
/* Warn in every report once the certificate cert_pem nears its expiry
 * (within warn_seconds; 0: never). An unreadable certificate: no warning
 * (renew.c logs it). */
void report_set_cert(struct report *r, const char *cert_pem, uint32_t warn_seconds);
/* Free what report_init allocated. */
void report_fini(struct report *r);

/* Thread body: send Node.Report on every status change (a delta when the
 * track allows it) and a complete one every interval_ms, until conv_stop.
 * Failures are logged and retried next tick. */
void report_run(struct report *r);

#endif
