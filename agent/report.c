/* report.c: Node.Report, on every change the converge thread publishes and
 * every report_interval_seconds.
 *
 * A complete report lists every instance the host has or the spec names
 * (state and reason), the applied generation, capabilities from the
 * runtime's traits, labels (config labels plus cpu.model), capacity, volume
 * store numbers, command results, and complete=true once the runtime could
 * be listed. It is sent first after start, every report_interval_seconds
 * and after a failed delivery. Every other report is a delta
 * (complete=false): the same host facts, but only the instances whose state,
 * reason or desired state differ from the last report the controller took
 * (delivered, and acked with no newer spec than it applied: a report acked
 * stale leaves what it carried pending, sent again in the next delta),
 * plus the one-shot entries. One-shot entries (instances destroyed because
 * the spec no longer names them, command results) are dropped only after a
 * report carrying them was delivered. */
#include "report.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#include "join.h"
#include "log.h"
#include "pki.h"
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
		m->inst[i].guest_ready_at = st->items[i].guest_ready_at;
		m->inst[i].identity_rebound_ref = (char *)st->items[i].rebound_ref;
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

void report_add_cmd_results(struct report_msg *m, const struct cmds_result *res, size_t n)
{
	size_t k = m->msg.n_results;

	if (!n)
		return;
	m->results = xrealloc(m->results, (k + n) * sizeof(*m->results));
	m->results_p = xrealloc(m->results_p, (k + n) * sizeof(*m->results_p));
	for (size_t i = 0; i < n; i++) {
		Bc__Node__V1__CommandResult *x = &m->results[k + i];
		bc__node__v1__command_result__init(x);
		x->id = (char *)res[i].id;
		x->ok = res[i].ok;
		x->error = (char *)res[i].error;
		if (res[i].result) {
			x->result_json.data = (uint8_t *)res[i].result;
			x->result_json.len = strlen(res[i].result);
		}
	}
	for (size_t i = 0; i < k + n; i++) /* the realloc may have moved them */
		m->results_p[i] = &m->results[i];
	m->msg.n_results = k + n;
	m->msg.results = m->results_p;
}

bool report_cert_warning(int64_t now, int64_t not_after_ms, int64_t warn_ms, char *out,
			 size_t len)
{
	int64_t left = not_after_ms - now;

	if (not_after_ms <= 0 || warn_ms <= 0 || left >= warn_ms)
		return false;
	if (left <= 0)
		snprintf(out, len, "the node certificate expired %" PRId64 " s ago; join the host "
			 "again", -left / 1000);
	else
		snprintf(out, len, "the node certificate expires in %" PRId64 "d %" PRId64 "h %"
			 PRId64 "m and is not renewed yet", left / 86400000, left / 3600000 % 24,
			 left / 60000 % 60);
	return true;
}

static void add_warning(struct report_msg *m, const char *code, const char *text)
{
	size_t n = m->msg.n_warnings;

	bc__node__v1__host_warning__init(&m->warning[n]);
	m->warning[n].code = (char *)code;
	m->warning[n].message = (char *)text;
	m->warning_p[n] = &m->warning[n];
	m->msg.n_warnings = n + 1;
	m->msg.warnings = m->warning_p;
}

/* cert-expiring, then volume-storage (a volume not made for room:
 * volumes.c). */
static void build_warnings(struct report_msg *m, const struct report_info *info,
			   const struct conv_status *st, int64_t now)
{
	if (report_cert_warning(now, info->cert_not_after_ms, info->cert_warn_ms,
				m->warning_text, sizeof(m->warning_text)))
		add_warning(m, "cert-expiring", m->warning_text);
	if (st->has_storage && st->storage.warning[0])
		add_warning(m, "volume-storage", st->storage.warning);
}

void report_build(const struct report_info *info, const struct conv_status *st, int64_t now,
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
	m->msg.tunnel_address = (char *)(info->tunnel_address ? info->tunnel_address : "");
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
		m->storage.allocated_bytes = st->storage.allocated;
		m->msg.volume_storage = &m->storage;
	}
	build_instances(m, st);
	build_labels(m, info);
	build_results(m, st);
	build_warnings(m, info, st, now);
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

void report_set_cert(struct report *r, const char *cert_pem, uint32_t warn_seconds)
{
	int64_t issued = 0, not_after = 0;

	if (pki_cert_validity(cert_pem, &issued, &not_after) < 0)
		return;
	r->info.cert_not_after_ms = not_after;
	r->info.cert_warn_ms = (int64_t)warn_seconds * 1000;
}

void report_fini(struct report *r)
{
	free((char *)r->info.cpu_model);
	r->info.cpu_model = NULL;
}

/* ------------------------------------------------------------- deltas */

static int cmp_item_id(const void *a, const void *b)
{
	return strcmp(((const struct conv_item *)a)->id, ((const struct conv_item *)b)->id);
}

void report_track_init(struct report_track *t)
{
	*t = (struct report_track){.need_complete = true};
}

void report_track_clear(struct report_track *t)
{
	free(t->taken);
	*t = (struct report_track){0};
}

bool report_track_complete(const struct report_track *t, int64_t now_ms)
{
	return t->need_complete || now_ms >= t->complete_due;
}

/* True if the controller already holds it as it is. */
static bool taken_same(const struct report_track *t, const struct conv_item *it)
{
	const struct conv_item *k;

	if (it->once || !t->n_taken)
		return false;
	k = bsearch(it, t->taken, t->n_taken, sizeof(*t->taken), cmp_item_id);
	return k && strcmp(k->state, it->state) == 0 && strcmp(k->reason, it->reason) == 0 &&
	       k->desired == it->desired && k->guest_ready_at == it->guest_ready_at &&
	       strcmp(k->rebound_ref, it->rebound_ref) == 0;
}

void report_delta(const struct report_track *t, const struct conv_status *st,
		  struct conv_status *ret)
{
	struct conv_status d = *st;

	d.complete = false;
	d.items = xcalloc(st->n_items ? st->n_items : 1, sizeof(*d.items));
	d.n_items = 0;
	for (size_t i = 0; i < st->n_items; i++)
		if (!taken_same(t, &st->items[i]))
			d.items[d.n_items++] = st->items[i];
	d.results = xcalloc(st->n_results ? st->n_results : 1, sizeof(*d.results));
	if (st->n_results)
		memcpy(d.results, st->results, st->n_results * sizeof(*d.results));
	*ret = d;
}

void report_track_done(struct report_track *t, const struct conv_status *st, bool complete,
		       bool delivered, uint64_t ack_generation, int64_t now_ms, int interval_ms)
{
	if (complete)
		t->complete_due = now_ms + interval_ms;
	if (!delivered) {
		t->need_complete = true;
		return;
	}
	/* delivered, but the controller holds a newer spec than it applied,
	 * so it took only the states that match the desired ones: what the
	 * report carried stays pending (the taken list is kept, so the next
	 * delta carries it again) until a report is taken under the newest
	 * spec. A complete report here would say the same, larger: a burst of
	 * claims keeps changes waiting, and a host holds hundreds. */
	if (ack_generation > st->applied_generation)
		return;
	free(t->taken);
	t->taken = xcalloc(st->n_items ? st->n_items : 1, sizeof(*t->taken));
	if (st->n_items)
		memcpy(t->taken, st->items, st->n_items * sizeof(*t->taken));
	t->n_taken = st->n_items;
	if (t->n_taken > 1)  /* the snapshot is sorted; a cheap guard for bsearch */
		qsort(t->taken, t->n_taken, sizeof(*t->taken), cmp_item_id);
	t->need_complete = false;
}

void report_counts(const struct report *r, uint64_t *ret_complete, uint64_t *ret_delta)
{
	*ret_complete = __atomic_load_n(&r->n_complete, __ATOMIC_RELAXED);
	*ret_delta = __atomic_load_n(&r->n_delta, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------- sending */

struct send_state {
	struct report_track track;
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

/* Deliver m; 0 and *ret_ack set, or a negative errno (logged). */
static int deliver(struct report *r, struct send_state *s, const struct report_msg *m,
		   ProtobufCMessage **ret_ack)
{
	bc_error err = {0};
	char path[128];
	int e;

	rpc_method_path(&bc__node__v1__node__descriptor, "Report", path, sizeof(path));
	e = rpc_client_unary(r->client, path, &m->msg.base, &bc__node__v1__report_ack__descriptor,
			     ret_ack, REPORT_TIMEOUT_MS, &err);
	log_outcome(s, e, &err);
	return e;
}

/* Snapshot, build (complete, or the delta against what the controller
 * took), send; returns the status seq it reported. */
static uint64_t send_once(struct report *r, struct send_state *s)
{
	struct conv_status st = {0}, delta = {0};
	const struct conv_status *sent = &st;
	const Bc__Node__V1__ReportAck *ack = NULL;
	ProtobufCMessage *ackm = NULL;
	struct report_msg m;
	bool complete = report_track_complete(&s->track, mono_ms());
	struct cmds_result *cr = NULL;
	size_t n_cr = 0;
	uint64_t seq;
	int e;

	/* command results ride in every report until the ack names them */
	if (r->cmds)
		cmds_results(r->cmds, &cr, &n_cr);
	conv_snapshot(r->conv, &st);
	if (!complete) {
		report_delta(&s->track, &st, &delta);
		sent = &delta;
	}
	report_build(&r->info, sent, now_ms(), &m);
	report_add_cmd_results(&m, cr, n_cr);
	e = deliver(r, s, &m, &ackm);
	if (e == 0) {
		ack = (const Bc__Node__V1__ReportAck *)ackm;
		log_debug("report: generation %" PRIu64 ", %zu instances delivered (%s)",
			  st.applied_generation, sent->n_items, complete ? "complete" : "delta");
		__atomic_fetch_add(complete ? &r->n_complete : &r->n_delta, 1, __ATOMIC_RELAXED);
		conv_report_sent(r->conv, st.seq);
		if (r->cmds && ack->n_settled)
			cmds_settled(r->cmds, ack->settled, ack->n_settled);
		/* the controller holds the spec we converged: a fence may lift */
		if (ack->spec_generation == st.applied_generation)
			conv_confirm(r->conv);
		check_ack(r, s, ack);
	}
	report_track_done(&s->track, &st, complete, e == 0, ack ? ack->spec_generation : 0,
			  mono_ms(), r->interval_ms);
	if (ackm)
		protobuf_c_message_free_unpacked(ackm, NULL);
	seq = st.seq;
	report_msg_clear(&m);
	cmds_results_free(cr, n_cr);
	conv_status_clear(&delta);
	conv_status_clear(&st);
	return seq;
}

/* Reports go out on every status change, and at the latest when the
 * periodic complete report is due (report_interval after the last one). */
void report_run(struct report *r)
{
	struct send_state s = {0};
	uint64_t seen = 0, cmds_seen = 0;

	report_track_init(&s.track);
	s.track.complete_due = mono_ms() + r->interval_ms;
	while (!conv_stopping(r->conv)) {
		int64_t wait = s.track.complete_due - mono_ms();
		/* a finished command does not move the converger's seq: its
		 * runner's is looked at every REPORT_CMDS_POLL_MS */
		if (r->cmds && wait > REPORT_CMDS_POLL_MS)
			wait = REPORT_CMDS_POLL_MS;
		if (wait > 0 && !conv_wait_change(r->conv, seen, (int)wait) &&
		    mono_ms() < s.track.complete_due && cmds_seq(r->cmds) == cmds_seen)
			continue;  /* stopping, or woken early without a change */
		if (conv_stopping(r->conv))
			break;
		cmds_seen = cmds_seq(r->cmds);
		seen = send_once(r, &s);
	}
	report_track_clear(&s.track);
	log_info("report: stopped");
}
