/* report.c: Node.Report, on every change the converge thread publishes and
 * every report_interval_seconds.
 *
 * A report lists every instance the host has or the spec names (state and
 * reason), the applied generation, capabilities from the runtime's traits,
 * labels (config labels plus cpu.model), capacity, volume store numbers,
 * command results, and complete=true once the runtime could be listed.
 * One-shot entries (instances destroyed because the spec no longer names
 * them, command results) are dropped only after a report carrying them was
 * delivered. */
#include "report.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#include "join.h"
#include "log.h"
#include "util.h"
#include "watch.h"

#define CPU_MODEL_MAX 255

static void build_instances(struct report_msg *m, const struct conv_status *st)
{
	size_t n = st->n_items;

	m->inst = xcalloc(n ? n : 1, sizeof(*m->inst));
	m->inst_p = xcalloc(n ? n : 1, sizeof(*m->inst_p));
	for (size_t i = 0; i < n; i++) {
		bc__node__v1__instance_status__init(&m->inst[i]);
		m->inst[i].id = (char *)st->items[i].id;
		m->inst[i].state = (char *)st->items[i].state;
		m->inst[i].reason = (char *)st->items[i].reason;
		m->inst_p[i] = &m->inst[i];
	}
	m->msg.n_instances = n;
	m->msg.instances = m->inst_p;
}

static bool has_label(const struct report_info *info, const char *key)
{
	for (size_t i = 0; i < info->n_labels; i++)
		if (strcmp(info->labels[i].key, key) == 0)
			return true;
	return false;
}

static void build_labels(struct report_msg *m, const struct report_info *info)
{
	bool cpu = info->cpu_model && *info->cpu_model && !has_label(info, "cpu.model");
	size_t n = info->n_labels + (cpu ? 1 : 0);

	m->labels = xcalloc(n ? n : 1, sizeof(*m->labels));
	m->labels_p = xcalloc(n ? n : 1, sizeof(*m->labels_p));
	for (size_t i = 0; i < n; i++) {
		bc__node__v1__status_report__labels_entry__init(&m->labels[i]);
		m->labels_p[i] = &m->labels[i];
	}
	for (size_t i = 0; i < info->n_labels; i++) {
		m->labels[i].key = info->labels[i].key;
		m->labels[i].value = info->labels[i].value;
	}
	if (cpu) {
		m->labels[n - 1].key = "cpu.model";
		m->labels[n - 1].value = (char *)info->cpu_model;
	}
	m->msg.n_labels = n;
	m->msg.labels = m->labels_p;
}

static void build_results(struct report_msg *m, const struct conv_status *st)
{
	size_t n = st->n_results;

	m->results = xcalloc(n ? n : 1, sizeof(*m->results));
	m->results_p = xcalloc(n ? n : 1, sizeof(*m->results_p));
	for (size_t i = 0; i < n; i++) {
		bc__node__v1__command_result__init(&m->results[i]);
		m->results[i].id = (char *)st->results[i].id;
		m->results[i].ok = st->results[i].ok;
		m->results[i].error = (char *)st->results[i].error;
		m->results_p[i] = &m->results[i];
	}
	m->msg.n_results = n;
	m->msg.results = m->results_p;
}

void report_build(const struct report_info *info, const struct conv_status *st,
		  struct report_msg *m)
{
	memset(m, 0, sizeof(*m));
	bc__node__v1__status_report__init(&m->msg);
	bc__node__v1__capacity__init(&m->cap);
	bc__node__v1__volume_storage__init(&m->storage);
	m->msg.applied_generation = st->applied_generation;
	m->msg.complete = st->complete;
	m->msg.hostname = (char *)info->hostname;
	m->msg.agent_version = (char *)info->agent_version;
	m->msg.n_capabilities = info->n_caps;
	m->msg.capabilities = (char **)info->caps;
	m->cap.vcpus = info->vcpus;
	m->cap.memory_mib = info->memory_mib;
	m->cap.disk_gib = info->disk_gib;
	m->msg.capacity = &m->cap;
	if (st->has_storage) {
		m->storage.available_bytes = st->storage.available;
		m->storage.reserved_bytes = st->storage.reserved;
		m->storage.outstanding_bytes = st->storage.outstanding;
		m->storage.committed_bytes = st->storage.committed;
		m->msg.volume_storage = &m->storage;
	}
	build_instances(m, st);
	build_labels(m, info);
	build_results(m, st);
}

void report_msg_clear(struct report_msg *m)
{
	free(m->inst);
	free(m->inst_p);
	free(m->labels);
	free(m->labels_p);
	free(m->results);
	free(m->results_p);
	memset(m, 0, sizeof(*m));
}

char *report_cpu_model(const char *cpuinfo)
{
	const char *p = cpuinfo ? strstr(cpuinfo, "model name") : NULL;
	const char *colon, *end;
	size_t n;
	char *out;

	if (!p || !(colon = strchr(p, ':')))
		return NULL;
	for (colon++; *colon == ' ' || *colon == '\t'; colon++)
		;
	end = strchr(colon, '\n');
	n = end ? (size_t)(end - colon) : strlen(colon);
	while (n > 0 && isspace((unsigned char)colon[n - 1]))
		n--;
	if (n == 0)
		return NULL;
	if (n > CPU_MODEL_MAX)
		n = CPU_MODEL_MAX;
	out = xcalloc(1, n + 1);
	for (size_t i = 0; i < n; i++)  /* the controller wants printable, no tabs */
		out[i] = (unsigned char)colon[i] < 0x20 || colon[i] == 0x7f ? ' ' : colon[i];
	return out;
}

void report_init(struct report *r, const struct agent_config *cfg, const struct rt_traits *traits)
{
	_cleanup_free_ char *cpuinfo = NULL;
	struct report_info *i = &r->info;

	memset(i, 0, sizeof(*i));
	i->hostname = cfg->hostname;
	i->agent_version = BCD_VERSION;
	i->labels = cfg->label_list;
	i->n_labels = cfg->n_labels;
	if (file_read_all("/proc/cpuinfo", 1 << 22, &cpuinfo, NULL) == 0)
		i->cpu_model = report_cpu_model(cpuinfo);
	i->n_caps = rt_capabilities(traits, i->caps, REPORT_MAX_CAPS);
	i->vcpus = cfg->capacity_vcpus;
	i->memory_mib = cfg->capacity_memory_mib;
	i->disk_gib = cfg->capacity_disk_gib;
	r->interval_ms = (int)cfg->report_interval_seconds * 1000;
}

void report_fini(struct report *r)
{
	free((char *)r->info.cpu_model);
	r->info.cpu_model = NULL;
}

/* ------------------------------------------------------------- sending */

struct send_state {
	bool failing;
	int stale;     /* consecutive acks with a newer controller generation */
	uint64_t stale_applied; /* what we had applied when stale counting began */
	bool behind;   /* the controller holds an older generation than we do */
};

static void log_outcome(struct send_state *s, int r, const bc_error *err)
{
	if (r == 0 && s->failing)
		log_info("report: delivered again");
	else if (r < 0 && !s->failing && join_err_retired(err))
		log_error("report: controller refuses this node: %s: %s; retrying every tick",
			  bc_code_name(err->code), err->message);
	else if (r < 0 && !s->failing)
		log_warn("report: %s: %s; retrying every tick", bc_code_name(err->code),
			 err->message);
	else if (r < 0)
		log_debug("report: still failing: %s: %s", bc_code_name(err->code), err->message);
	s->failing = r < 0;
}

/* If the controller keeps holding a newer generation than we accepted and
 * no newer spec arrives meanwhile, the watch stream may be wedged: reopen it. */
static void check_ack(struct report *r, struct send_state *s, const Bc__Node__V1__ReportAck *ack)
{
	uint64_t applied = r->watch ? watch_applied(r->watch) : 0;
	bool behind = ack->spec_generation < applied;

	if (behind && !s->behind)
		log_warn("report: controller holds spec generation %" PRIu64 ", older than applied %"
			 PRIu64 ": its specs will be refused until it passes %" PRIu64,
			 ack->spec_generation, applied, applied);
	s->behind = behind;
	/* specs still arriving (a burst of changes) is a busy watch, not a
	 * wedged one: count only while nothing new was applied */
	if (!r->watch || ack->spec_generation <= applied || applied != s->stale_applied) {
		s->stale = 0;
		s->stale_applied = applied;
		return;
	}
	if (++s->stale < REPORT_KICK_AFTER)
		return;
	log_warn("report: controller holds spec generation %" PRIu64 ", we have %" PRIu64
		 ": reopening the watch", ack->spec_generation, applied);
	watch_kick(r->watch);
	s->stale = 0;
}

/* Snapshot, build, send; returns the status seq it reported. */
static uint64_t send_once(struct report *r, struct send_state *s)
{
	uint64_t seq;
	struct conv_status st = {0};
	struct report_msg m;
	ProtobufCMessage *ack = NULL;
	bc_error err = {0};
	char path[128];
	int e;

	conv_snapshot(r->conv, &st);
	report_build(&r->info, &st, &m);
	rpc_method_path(&bc__node__v1__node__descriptor, "Report", path, sizeof(path));
	e = rpc_client_unary(r->client, path, &m.msg.base, &bc__node__v1__report_ack__descriptor,
			     &ack, REPORT_TIMEOUT_MS, &err);
	log_outcome(s, e, &err);
	if (e == 0) {
		log_debug("report: generation %" PRIu64 ", %zu instances delivered",
			  st.applied_generation, st.n_items);
		conv_report_sent(r->conv, st.seq);
		check_ack(r, s, (const Bc__Node__V1__ReportAck *)ack);
		protobuf_c_message_free_unpacked(ack, NULL);
	}
	seq = st.seq;
	report_msg_clear(&m);
	conv_status_clear(&st);
	return seq;
}

void report_run(struct report *r)
{
	struct send_state s = {0};
	int64_t next = mono_ms() + r->interval_ms;
	uint64_t seen = 0;

	while (!conv_stopping(r->conv)) {
		int64_t wait = next - mono_ms();
		if (wait > 0 && !conv_wait_change(r->conv, seen, (int)wait) && mono_ms() < next)
			continue;  /* stopping, or woken early without a change */
		if (conv_stopping(r->conv))
			break;
		seen = send_once(r, &s);
		next = mono_ms() + r->interval_ms;
	}
	log_info("report: stopped");
}
