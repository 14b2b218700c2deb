/* report.h: the report thread and the pure StatusReport builder. */
#ifndef BC_AGENT_REPORT_H
#define BC_AGENT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
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
};

/* Build the report of st. Pure; release with report_msg_clear. */
void report_build(const struct report_info *info, const struct conv_status *st,
		  struct report_msg *ret);
/* Free the arrays of a built report (not the borrowed strings). */
void report_msg_clear(struct report_msg *m);

/* The "model name" of /proc/cpuinfo text (malloc'd, trimmed), or NULL. */
char *report_cpu_model(const char *cpuinfo);

struct watch;

struct report {
	rpc_client *client;          /* borrowed; mTLS */
	struct conv *conv;           /* borrowed; status and change signal */
	struct watch *watch;         /* borrowed, may be NULL; kicked when stale */
	struct report_info info;
	int interval_ms;
};

/* Fill r->info from cfg and the runtime's traits (cpu model read from
 * /proc/cpuinfo; freed by report_fini). */
void report_init(struct report *r, const struct agent_config *cfg, const struct rt_traits *traits);
/* Free what report_init allocated. */
void report_fini(struct report *r);

/* Thread body: send Node.Report on every status change and every
 * interval_ms, until conv_stop. Failures are logged and retried next tick. */
void report_run(struct report *r);

#endif
