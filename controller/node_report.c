/* node_report.c: Node.Report, what a host says it runs. A report records
 * the instances' states (an instance.<state> event for each change, a
 * host's admission refusal), finishes the deletions the host confirmed,
 * marks a lost node ready again and records the host's capabilities and
 * capacity, capped at the operator's ceiling. It is judged by the node's
 * generation (the fence: spec_read_generation, node_spec.c) read without a
 * lock, and updates the node's row last, so a spec push never waits for a
 * report's instance updates. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "log.h"
#include "node.h"
#include "node_commands.h"
#include "node_tunnel.h"
#include "outbox.h"
#include "sealed.h"
#include "util.h"
#include "validate.h"
#include "volumes.h"
#include "watch.h"

#define REPORT_INSTANCES_MAX 10000
#define REPORT_WARNINGS_MAX 8
#define REPORT_RESULTS_MAX 1000

/* ---------------------------------------------------------------- report */

static const char *const states[] = {"provisioning", "starting", "running", "paused",
				     "stopped",      "error",    "deleted"};

static bool state_ok(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(states); i++)
		if (strcmp(s, states[i]) == 0)
			return true;
	return false;
}

/* Newline-separated values for string_to_array: one line per value, an
 * empty value included (the separator goes by count, not length). */
struct lines {
	char *buf;
	size_t len, cap, n;
};

static void lines_add(struct lines *l, const char *s)
{
	size_t n = strlen(s);

	if (l->len + n + 2 > l->cap) {
		l->cap = (l->len + n + 2) * 2;
		l->buf = realloc(l->buf, l->cap);
		if (!l->buf)
			abort();
	}
	if (l->n++)
		l->buf[l->len++] = '\n';
	for (size_t i = 0; i < n; i++) /* a line never holds a newline */
		l->buf[l->len++] = s[i] == '\n' || s[i] == '\t' ? ' ' : s[i];
	l->buf[l->len] = '\0';
}

static const char *lines_str(const struct lines *l)
{
	return l->buf ? l->buf : "";
}

struct report {
	const Bc__Node__V1__StatusReport *q;
	const char *node;
	/* the node's generation, plus one while changes wait to be taken
	 * (node_spec_changes): a host that applied spec_generation has not
	 * seen them, so its report is not taken as complete, and the ack
	 * tells it a newer spec is due (read first by report_fence, again
	 * by report_node last, for the ack) */
	uint64_t spec_generation;
	struct lines ids, st, reasons, deleted, caps, lkeys, lvals;
	struct lines guest;    /* per id: guest_ready_at, unix ms (0: not up) */
	struct lines rb_ids, rb_refs; /* identity_rebound_ref, per instance that has one */
	struct lines warnings; /* "code: message" */
	struct lines changed; /* instances whose state this report changed */
	int cmds_settled, cmds_ignored; /* its command results (node_commands.c) */
};

/* Columns of report_node's RETURNING. */
enum { RN_GEN, RN_OLD_STATE, RN_OLD_VCPUS, RN_OLD_MEM, RN_OLD_DISK, RN_OLD_GPUS, RN_VCPUS,
       RN_MEM, RN_DISK, RN_GPUS, RN_WARNINGS_CHANGED, RN_POOL_ID };

/* Log a change of the node's capacity, and what the host claimed beyond
 * its ceiling. */
static void log_capacity(const struct report *a, const PGresult *r)
{
	const Bc__Node__V1__Capacity *c = a->q->capacity;
	bool capped;

	if (!c)
		return;
	capped = c->vcpus > (uint64_t)db_i64(r, 0, RN_VCPUS) ||
		 c->memory_mib > (uint64_t)db_i64(r, 0, RN_MEM) ||
		 c->disk_gib > (uint64_t)db_i64(r, 0, RN_DISK) ||
		 c->gpus > (uint64_t)db_i64(r, 0, RN_GPUS);
	for (int i = 0; i < 4; i++) {
		if (db_i64(r, 0, RN_OLD_VCPUS + i) == db_i64(r, 0, RN_VCPUS + i))
			continue;
		log_info("node %s: capacity %s/%s/%s/%s vCPU/MiB/GiB/GPU (was %s/%s/%s/%s)%s",
			 a->node, db_val(r, 0, RN_VCPUS), db_val(r, 0, RN_MEM),
			 db_val(r, 0, RN_DISK), db_val(r, 0, RN_GPUS), db_val(r, 0, RN_OLD_VCPUS),
			 db_val(r, 0, RN_OLD_MEM), db_val(r, 0, RN_OLD_DISK),
			 db_val(r, 0, RN_OLD_GPUS),
			 capped ? ": the host reports more, capped at its ceiling" : "");
		return;
	}
	if (capped)
		log_debug("node %s: reports %u/%llu/%llu/%u, capped at its ceiling", a->node,
			  c->vcpus, (unsigned long long)c->memory_mib,
			  (unsigned long long)c->disk_gib, c->gpus);
}

/* The host's warnings replaced the node's and differ: each new one logged
 * as a warning, their end once. */
static void log_warnings(const struct report *a)
{
	const char *now = lines_str(&a->warnings);

	if (!*now)
		log_info("node %s: no warnings any more", a->node);
	for (const char *w = now, *e; *w; w = *e ? e + 1 : e) {
		e = w + strcspn(w, "\n");
		log_warn("node %s: %.*s", a->node, (int)(e - w), w);
	}
}

/* The node's row: its report time, applied generation, capabilities (and
 * their bc.dev/cap.* labels; other labels are the operator's and the
 * join's, never a report's), and its capacity, each resource capped at the
 * node's ceiling (max_*: the value at join or `bcctl node set-capacity`),
 * and the host's warnings, which replace the node's. */
static int report_node(struct db *d, struct report *a, bc_error *err)
{
	const Bc__Node__V1__StatusReport *q = a->q;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->node);
	dbp_u64(&p, q->applied_generation);
	dbp_str(&p, lines_str(&a->caps));
	dbp_str(&p, lines_str(&a->lkeys));
	dbp_str(&p, lines_str(&a->lvals));
	dbp_bool(&p, q->capacity != NULL);
	dbp_u64(&p, q->capacity ? q->capacity->vcpus : 0);
	dbp_u64(&p, q->capacity ? q->capacity->memory_mib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->disk_gib : 0);
	dbp_u64(&p, q->capacity ? q->capacity->gpus : 0);
	dbp_str(&p, lines_str(&a->warnings));
	dbp_str(&p, q->tunnel_address);
	rc = db_exec(d, &r,
		     "UPDATE nodes n SET last_report_at = now(), applied_generation = greatest("
		     "n.applied_generation, $2::bigint), capabilities = string_to_array($3, E'\\n'), "
		     "labels = (SELECT coalesce(jsonb_object_agg(key, value), '{}') FROM jsonb_each("
		     "n.labels) WHERE key NOT LIKE 'bc.dev/cap.%') || jsonb_object(string_to_array("
		     "$4, E'\\n'), string_to_array($5, E'\\n')), "
		     "cap_vcpus = CASE WHEN $6 THEN least($7::bigint, n.max_vcpus) ELSE n.cap_vcpus END, "
		     "cap_memory_mib = CASE WHEN $6 THEN least($8::bigint, n.max_memory_mib) ELSE "
		     "n.cap_memory_mib END, cap_disk_gib = CASE WHEN $6 THEN least($9::bigint, "
		     "n.max_disk_gib) ELSE n.cap_disk_gib END, cap_gpus = CASE WHEN $6 THEN least("
		     "$10::bigint, n.max_gpus) ELSE n.cap_gpus END, state = CASE WHEN n.state = 'lost' "
		     "THEN 'ready' ELSE n.state END, warnings = string_to_array($11, E'\\n'), "
		     "tunnel_address = CASE WHEN $12 = '' THEN n.tunnel_address ELSE $12 END FROM ("
		     "SELECT state, cap_vcpus, cap_memory_mib, cap_disk_gib, cap_gpus, warnings FROM "
		     "nodes WHERE id = $1 FOR UPDATE) old "
		     "WHERE n.id = $1 AND n.state <> 'retired' RETURNING n.spec_generation + (EXISTS ("
		     "SELECT 1 FROM node_spec_changes c WHERE c.node_id = $1))::int, old.state, "
		     "old.cap_vcpus, old.cap_memory_mib, old.cap_disk_gib, old.cap_gpus, n.cap_vcpus, "
		     "n.cap_memory_mib, n.cap_disk_gib, n.cap_gpus, old.warnings IS DISTINCT FROM "
		     "n.warnings, n.pool_id",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 0) {
		PQclear(r);
		bc_error_set(err, BC_ACCESS_DENIED, "node %s is retired", a->node);
		return bc_error_detail(err, "reason", "node-retired");
	}
	a->spec_generation = (uint64_t)db_i64(r, 0, RN_GEN);
	log_capacity(a, r);
	if (db_bool(r, 0, RN_WARNINGS_CHANGED))
		log_warnings(a);
	if (strcmp(db_val(r, 0, RN_OLD_STATE), "lost") == 0) {
		log_info("node %s: reporting again, no longer lost", a->node);
		rc = node_publish(d, "node.recovered", a->node, db_val(r, 0, RN_POOL_ID));
	}
	PQclear(r);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* Record the states the host reports, with an instance.<state> event for
 * each change. A report from a host that has not applied the newest spec
 * yet may predate a change of desired state (a start, a pause): from it,
 * only states that match the desired one and errors are taken, so an
 * instance never flaps back for one report. A host's admission refusal
 * (stopped, "ResourcesExhausted: ...") of an instance that never ran keeps
 * it provisioning, stamps refused_at for the reconciler's re-placement
 * (reconcile.c) and publishes instance.refused once. The node and desired
 * state are checked again in the UPDATE itself: a row another transaction
 * changed meanwhile (re-placed, deleted) is re-read there, never written
 * from this host's stale view.
 *
 * guest_ready_at (when the host accepted this boot's guest-up signal; 0:
 * not up, NULL here) is written by the same statement, on the same terms:
 * u with a change of state, g on the rows whose state did not change but
 * whose guest_ready_at did (no event of their own: the sandbox trigger of
 * 0018 stamps readiness in this transaction). The two take disjoint rows:
 * both judge the same row version, and a row one of them updated is not
 * updated again by the other in the same statement. */
#define REPORT_CHANGED_SQL(i, c)                                                           \
	"((" i ".state, " i ".reason) IS DISTINCT FROM (CASE WHEN " c ".refused THEN " i     \
	".state ELSE " c ".st END, " c ".why) OR (" i ".refused_at IS NULL) = " c ".refused)"
#define REPORT_TAKEN_SQL(i, c)                                                             \
	"(" i ".node_id = $1 AND " i ".desired_state <> 'deleted' AND ($5 OR " c ".st = "     \
	"'error' OR " c ".st = " i ".desired_state))"
static int report_instances(struct db *d, struct report *a, bc_error *err)
{
	enum { RI_CHANGED_ID }; /* the answer's one column: an instance changed */
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->node);
	dbp_str(&p, lines_str(&a->ids));
	dbp_str(&p, lines_str(&a->st));
	dbp_str(&p, lines_str(&a->reasons));
	dbp_bool(&p, a->q->applied_generation >= a->spec_generation);
	dbp_str(&p, lines_str(&a->guest));
	rc = db_exec(d, &r,
		     "WITH r AS (SELECT * FROM unnest(string_to_array($2, E'\\n'), string_to_array("
		     "$3, E'\\n'), string_to_array($4, E'\\n'), string_to_array($6, E'\\n')) AS r(id, "
		     "state, reason, guest_ms)), c AS (SELECT i.id, r.state AS st, coalesce(r.reason, "
		     "'') AS why, (r.state = 'stopped' "
		     "AND r.reason LIKE 'ResourcesExhausted:%' AND i.running_at IS NULL AND "
		     "i.desired_state = 'running') AS refused, CASE WHEN r.guest_ms::bigint > 0 THEN "
		     "timestamptz 'epoch' + r.guest_ms::bigint * interval '1 millisecond' END AS gr "
		     "FROM instances i JOIN r ON r.id = i.id "
		     "WHERE i.node_id = $1 AND i.desired_state <> 'deleted' AND r.state <> 'deleted' "
		     "AND ($5 OR r.state = 'error' OR r.state = i.desired_state)), u AS (UPDATE "
		     "instances i SET state = CASE WHEN c.refused THEN i.state ELSE c.st END, reason = "
		     "c.why, refused_at = CASE WHEN c.refused THEN coalesce(i.refused_at, now()) END, "
		     "guest_ready_at = c.gr, "
		     "updated_at = now(), running_at = CASE WHEN c.st = 'running' THEN coalesce("
		     "i.running_at, now()) ELSE i.running_at END FROM c WHERE i.id = c.id AND "
		     REPORT_TAKEN_SQL("i", "c") " AND " REPORT_CHANGED_SQL("i", "c") " RETURNING "
		     "i.id, i.tenant_id, i.state, i.reason, c.refused, i.sandbox_id, "
		     "i.warm_template_id), g AS (UPDATE instances i SET guest_ready_at = c.gr, "
		     "updated_at = now() FROM c WHERE i.id = c.id AND " REPORT_TAKEN_SQL("i", "c")
		     " AND NOT " REPORT_CHANGED_SQL("i", "c") " AND i.guest_ready_at IS DISTINCT FROM "
		     "c.gr RETURNING i.id), e AS (INSERT INTO "
		     "events (type, subject, tenant_id, data) "
		     "SELECT CASE WHEN u.refused THEN 'instance.refused' ELSE 'instance.' || u.state "
		     "END, 'instance/' || u.id, u.tenant_id, jsonb_build_object('nodeId', $1::text, "
		     "'reason', u.reason) || " EVD_INSTANCE_OWNER_SQL("u") " FROM u "
		     "RETURNING substr(subject, 10) AS id) SELECT id FROM e UNION ALL SELECT id FROM g",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	a->changed.len = a->changed.n = 0; /* a retried transaction starts over */
	if (a->changed.buf)
		a->changed.buf[0] = '\0';
	for (int i = 0; i < PQntuples(r); i++)
		lines_add(&a->changed, db_val(r, i, RI_CHANGED_ID));
	PQclear(r);
	return 0;
}

/* The identity rebinds the host applied (rebind.c): an instance whose
 * reported identity_rebound_ref is its identity_rebind_ref answers to its
 * own principal and presents the bundle's host certificate from now on. */
static int report_rebound(struct db *d, struct report *a, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (!a->rb_ids.n)
		return 0;
	dbp_str(&p, a->node);
	dbp_str(&p, lines_str(&a->rb_ids));
	dbp_str(&p, lines_str(&a->rb_refs));
	enum { RB_ID }; /* the answer's one column: an instance rebound */

	rc = db_exec(d, &r, "UPDATE instances i SET identity_rebound_at = now(), host_certified = "
		     "i.rebind_cert_valid_before IS NOT NULL, host_cert_valid_before = "
		     "i.rebind_cert_valid_before, updated_at = now() FROM unnest(string_to_array($2, "
		     "E'\\n'), string_to_array($3, E'\\n')) AS r(id, ref) WHERE i.id = r.id AND "
		     "i.node_id = $1 AND i.identity_rebind_ref = r.ref AND i.identity_rebound_at IS "
		     "NULL AND i.desired_state <> 'deleted' RETURNING i.id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	for (int i = 0; i < PQntuples(r); i++)
		log_info("node %s: instance %s answers to its own identity now (rebound)", a->node,
			 db_val(r, i, RB_ID));
	PQclear(r);
	return 0;
}

/* Deletions the host confirmed: reported deleted, or missing from a
 * complete report of a host that applied every spec we sent it. */
static int report_deletions(struct db *d, struct report *a, bc_error *err)
{
	_cleanup_free_ char *gone = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, a->node);
	dbp_str(&p, lines_str(&a->deleted));
	dbp_str(&p, lines_str(&a->ids));
	dbp_bool(&p, a->q->complete && a->q->applied_generation >= a->spec_generation);
	rc = db_scalar(d, "SELECT string_agg(id, E'\\n') FROM instances WHERE node_id = $1 AND "
		       "desired_state = 'deleted' AND state <> 'deleted' AND (id = ANY "
		       "(string_to_array($2, E'\\n')) OR ($4 AND NOT (id = ANY (string_to_array($3, "
		       "E'\\n')))))", &p, &gone);
	if (rc < 0)
		return db_fail(err, rc);
	if (!gone)
		return 0;
	rc = finish_deletions(d, a->node, gone);
	if (rc > 0)
		log_info("node %s: %d instance deletion(s) finished", a->node, rc);
	return rc < 0 ? db_fail(err, rc) : 0;
}

/* The fence a report is judged by (struct report), read without a lock:
 * the node's row is locked only by report_node, last, so a spec push
 * (spec_take_changes bumps the generation on that row) never waits for a
 * report's instance updates. A change committed after this read is one
 * the host's report cannot have seen either way (changes are rows of
 * their own, which no lock on the node holds back). */
static int report_fence(struct db *d, struct report *a, bc_error *err)
{
	return spec_read_generation(d, a->node, true, &a->spec_generation, err);
}

/* The host's volume store (StatusReport.volume_storage) into
 * host_volume_storage, written only when a value moved by at least 1 GiB,
 * the committed or outstanding bytes changed, or the stored row is 5
 * minutes old (bookings read it: volumes.c). */
static int report_storage(struct db *d, const struct report *a, bc_error *err)
{
	const Bc__Node__V1__VolumeStorage *v = a->q->volume_storage;
	struct dbp p = {0};
	int rc;

	if (!v)
		return 0;
	dbp_str(&p, a->node);
	dbp_u64(&p, v->available_bytes > INT64_MAX ? INT64_MAX : v->available_bytes);
	dbp_u64(&p, v->reserved_bytes > INT64_MAX ? INT64_MAX : v->reserved_bytes);
	dbp_u64(&p, v->outstanding_bytes > INT64_MAX ? INT64_MAX : v->outstanding_bytes);
	dbp_u64(&p, v->committed_bytes > INT64_MAX ? INT64_MAX : v->committed_bytes);
	rc = db_exec(d, NULL, "INSERT INTO host_volume_storage AS h (node_id, available_bytes, "
		     "reserved_bytes, outstanding_bytes, committed_bytes) VALUES ($1, $2, $3, $4, "
		     "$5) ON CONFLICT (node_id) DO UPDATE SET available_bytes = $2, reserved_bytes = "
		     "$3, outstanding_bytes = $4, committed_bytes = $5, reported_at = now() WHERE "
		     "abs(h.available_bytes - $2::bigint) >= 1073741824 OR abs(h.reserved_bytes - "
		     "$3::bigint) >= 1073741824 OR h.outstanding_bytes <> $4::bigint OR "
		     "h.committed_bytes <> $5::bigint OR h.reported_at < now() - interval '5 minutes'",
		     &p);
	return rc < 0 ? db_fail(err, rc) : 0;
}

static int report_tx(struct db *d, void *arg, bc_error *err)
{
	struct report *a = arg;
	int rc;

	if ((rc = report_fence(d, a, err)) < 0 || (rc = report_instances(d, a, err)) < 0 ||
	    (rc = report_rebound(d, a, err)) < 0 ||
	    (rc = report_deletions(d, a, err)) < 0 || (rc = report_storage(d, a, err)) < 0 ||
	    (rc = report_node(d, a, err)) < 0)
		return rc;
	if ((rc = cmd_settle(d, a->node, a->q, &a->cmds_settled, &a->cmds_ignored)) < 0)
		return db_fail(err, rc);
	/* a report that carries the store finishes the volume deletions its
	 * applied generation passed, in this transaction */
	if (a->q->volume_storage && (rc = vol_finish_deletions(d, a->node)) < 0)
		return db_fail(err, rc);
	return 0;
}

/* Every result of a report taken is settled or ignored (node_commands.c):
 * the ack names them all, and bcd stops carrying them. */
static void ack_results(rpc_call *c, const Bc__Node__V1__StatusReport *q,
			Bc__Node__V1__ReportAck *ack)
{
	if (!q->n_results)
		return;
	ack->settled = rpc_alloc(c, q->n_results * sizeof(*ack->settled));
	for (size_t i = 0; i < q->n_results; i++) {
		size_t n = strlen(q->results[i]->id) + 1;
		ack->settled[i] = memcpy(rpc_alloc(c, n), q->results[i]->id, n);
	}
	ack->n_settled = q->n_results;
}

static bool warning_code_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static int prepare_warnings(struct report *a, bc_error *err)
{
	const Bc__Node__V1__StatusReport *q = a->q;
	char line[336];

	if (q->n_warnings > REPORT_WARNINGS_MAX)
		return invalid(err, "warnings", "at most %d warnings", REPORT_WARNINGS_MAX);
	for (size_t i = 0; i < q->n_warnings; i++) {
		const Bc__Node__V1__HostWarning *w = q->warnings[i];
		if (!warning_code_ok(w->code))
			return invalid(err, "warnings", "warnings[%zu].code must be 1-64 of [a-z0-9-]", i);
		if (!*w->message || !str_is_printable(w->message, 256))
			return invalid(err, "warnings",
				       "warnings[%zu].message must be 1-256 printable characters", i);
		snprintf(line, sizeof(line), "%s: %s", w->code, w->message);
		lines_add(&a->warnings, line);
	}
	return 0;
}

static int prepare_report(struct report *a, bc_error *err)
{
	const Bc__Node__V1__StatusReport *q = a->q;

	if (q->n_instances > REPORT_INSTANCES_MAX)
		return invalid(err, "instances", "at most %d instances", REPORT_INSTANCES_MAX);
	if (q->n_results > REPORT_RESULTS_MAX)
		return invalid(err, "results", "at most %d results", REPORT_RESULTS_MAX);
	if (!node_tunnel_address_ok(q->tunnel_address))
		return invalid(err, "tunnelAddress", "tunnelAddress must be host:port or empty");
	for (size_t i = 0; i < q->n_instances; i++) {
		const Bc__Node__V1__InstanceStatus *s = q->instances[i];
		char ms[24];

		if (!id_valid("inst", s->id) || !state_ok(s->state))
			return invalid(err, "instances", "instances[%zu] has a bad id or state", i);
		if (strcmp(s->state, "deleted") == 0) {
			lines_add(&a->deleted, s->id);
			continue;
		}
		lines_add(&a->ids, s->id);
		lines_add(&a->st, s->state);
		lines_add(&a->reasons, str_is_printable(s->reason, 512) ? s->reason : "");
		snprintf(ms, sizeof(ms), "%lld",
			 s->guest_ready_at > 0 ? (long long)s->guest_ready_at : 0LL);
		lines_add(&a->guest, ms);
		if (*s->identity_rebound_ref &&
		    str_is_printable(s->identity_rebound_ref, SEALED_REF_MAX - 1)) {
			lines_add(&a->rb_ids, s->id);
			lines_add(&a->rb_refs, s->identity_rebound_ref);
		}
	}
	for (size_t i = 0; i < q->n_capabilities && i < 64; i++) {
		char key[160];
		if (!str_is_printable(q->capabilities[i], 128))
			return invalid(err, "capabilities", "capabilities[%zu] is not valid", i);
		lines_add(&a->caps, q->capabilities[i]);
		snprintf(key, sizeof(key), "bc.dev/cap.%s", q->capabilities[i]);
		lines_add(&a->lkeys, key);
		lines_add(&a->lvals, "1");
	}
	/* a report's labels are not taken: a node's labels are those it
	 * joined with, so a host cannot relabel itself to draw work */
	return prepare_warnings(a, err);
}

static void report_free(struct report *a)
{
	free(a->ids.buf);
	free(a->st.buf);
	free(a->reasons.buf);
	free(a->guest.buf);
	free(a->rb_ids.buf);
	free(a->rb_refs.buf);
	free(a->deleted.buf);
	free(a->caps.buf);
	free(a->lkeys.buf);
	free(a->lvals.buf);
	free(a->warnings.buf);
	free(a->changed.buf);
}

/* Wake the creates waiting in this controller on an instance whose state
 * the report changed (sandbox creates in waiter.c, instance creates in
 * instances.c wait_settled). */
static void wake_waiters(struct ctl_app *app, const struct lines *changed)
{
	char *ids = xstrdup(lines_str(changed)), *save = NULL;

	for (char *id = strtok_r(ids, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
		watch_notify(app->watches, id);
	free(ids);
}

static int node_report(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	struct report a = {.q = (const void *)m, .node = ctl_principal(c)->id};
	Bc__Node__V1__ReportAck *ack;
	int r = prepare_report(&a, err);

	if (r == 0)
		r = db_tx(ctl_db(c), "READ COMMITTED", report_tx, &a, err);
	if (r == 0) {
		log_debug("node %s: report of generation %llu taken, %zu instance(s) changed, %d "
			  "command(s) settled", a.node, (unsigned long long)a.q->applied_generation,
			  a.changed.n, a.cmds_settled);
		wake_waiters(ctl_app(c), &a.changed);
	}
	report_free(&a);
	if (r < 0)
		return r;
	ack = rpc_new(c, &bc__node__v1__report_ack__descriptor);
	ack->spec_generation = a.spec_generation;
	ack_results(c, a.q, ack);
	*ret = &ack->base;
	return 0;
}

const struct rpc_handler *node_report_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Report", RPC_UNARY, {.unary = node_report}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
