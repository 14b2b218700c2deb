/* test_agent_report.c: delta reports. What a delta carries (only what
 * differs from the last report the controller took, nothing when nothing
 * changed, one-shot entries and results always, never a deletion by
 * omission), when a report must be complete (first, after a failed
 * delivery, on the periodic tick; not after a stale ack), pending items resent
 * until taken, and the converge pass's desired/one-shot stamps a delta
 * relies on (against the real fake runtime). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/converge.h"
#include "agent/report.h"
#include "agent/runtime.h"
#include "agent/state.h"
#include "log.h"
#include "tap.h"
#include "util.h"

#define RUNNING BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING
#define PAUSED BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED
#define STOPPED BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED
#define DELETED BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED

#define INTERVAL 10000

static char tmpdir[64];

/* A status of generation gen over items given as "id state desired"
 * triples ("reason" empty), sorted by the caller; once marks "deleted"
 * entries without a desired state as one-shot. Owned arrays. */
struct it {
	const char *id, *state, *reason;
	int desired;
	bool once;
};

static void mkstatus(struct conv_status *s, uint64_t gen, const struct it *v, size_t n)
{
	*s = (struct conv_status){.seq = gen, .applied_generation = gen, .complete = true};
	s->items = xcalloc(n ? n : 1, sizeof(*s->items));
	for (size_t i = 0; i < n; i++) {
		struct conv_item *c = &s->items[i];
		snprintf(c->id, sizeof(c->id), "%s", v[i].id);
		snprintf(c->state, sizeof(c->state), "%s", v[i].state);
		snprintf(c->reason, sizeof(c->reason), "%s", v[i].reason ? v[i].reason : "");
		c->desired = v[i].desired;
		c->once = v[i].once;
	}
	s->n_items = n;
	s->results = xcalloc(1, sizeof(*s->results));
}

static void add_result(struct conv_status *s, const char *id)
{
	s->results = realloc(s->results, (s->n_results + 1) * sizeof(*s->results));
	if (!s->results)
		abort();
	s->results[s->n_results] = (struct conv_result){.ok = false};
	snprintf(s->results[s->n_results].id, sizeof(s->results[0].id), "%s", id);
	snprintf(s->results[s->n_results].error, sizeof(s->results[0].error), "UNSUPPORTED");
	s->n_results++;
}

/* The delta's ids, space-separated, in a static buffer. */
static const char *ids(const struct conv_status *d)
{
	static char out[512];
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < d->n_items && len < sizeof(out) - 1; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", i ? " " : "",
					d->items[i].id);
	return out;
}

static const struct it base[] = {
	{"inst_a", "running", NULL, RUNNING, false},
	{"inst_b", "paused", NULL, PAUSED, false},
	{"inst_c", "stopped", "ResourcesExhausted: memory", RUNNING, false},
};

/* A track that took base at generation 5. */
static void took_base(struct report_track *t)
{
	struct conv_status s;

	report_track_init(t);
	mkstatus(&s, 5, base, 3);
	report_track_done(t, &s, true, true, 5, 0, INTERVAL);
	conv_status_clear(&s);
}

static void test_delta_contents(void)
{
	const struct it now[] = {
		{"inst_a", "running", NULL, RUNNING, false},        /* same */
		{"inst_b", "running", NULL, RUNNING, false},        /* resumed */
		{"inst_c", "stopped", "ResourcesExhausted: vcpus", RUNNING, false}, /* reason */
		{"inst_d", "provisioning", "image", RUNNING, false}, /* new */
		{"inst_e", "deleted", NULL, 0, true},               /* one-shot */
	};
	struct report_track t;
	struct conv_status s, d;

	took_base(&t);
	ok(!report_track_complete(&t, 1), "after a taken complete report: the next is a delta");
	mkstatus(&s, 6, now, 5);
	add_result(&s, "cmd_1");
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_b inst_c inst_d inst_e",
	       "delta: changed state, changed reason, new instance, one-shot entry");
	ok(!d.complete, "a delta says complete = false");
	is_int(d.applied_generation, 6, "delta carries the applied generation");
	is_int(d.n_results, 1, "delta keeps the command results");
	is_str(d.n_results ? d.results[0].id : "", "cmd_1", "the result itself");
	conv_status_clear(&d);
	conv_status_clear(&s);
	report_track_clear(&t);
}

static void test_delta_nothing(void)
{
	const struct it once[] = {
		{"inst_a", "running", NULL, RUNNING, false},
		{"inst_b", "paused", NULL, PAUSED, false},
		{"inst_c", "stopped", "ResourcesExhausted: memory", RUNNING, false},
		{"inst_z", "deleted", NULL, 0, true},
	};
	struct report_track t;
	struct conv_status s, d;

	took_base(&t);
	mkstatus(&s, 7, base, 3);
	report_delta(&t, &s, &d);
	is_int(d.n_items, 0, "nothing changed: the delta lists no instance");
	is_int(d.n_results, 0, "and no result");
	conv_status_clear(&d);
	conv_status_clear(&s);

	/* a one-shot entry is carried even if the taken list has it already */
	mkstatus(&s, 7, once, 4);
	report_track_done(&t, &s, false, true, 7, 1, INTERVAL);
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_z", "one-shot entries are always carried");
	conv_status_clear(&d);
	conv_status_clear(&s);

	/* an instance gone from the snapshot is never reported by omission */
	mkstatus(&s, 8, base, 2);
	report_delta(&t, &s, &d);
	is_int(d.n_items, 0, "a taken instance missing from the snapshot is not in the delta");
	ok(!d.complete, "and the delta is not complete (no deletion inferred)");
	conv_status_clear(&d);
	conv_status_clear(&s);
	report_track_clear(&t);
}

static void test_delta_desired(void)
{
	const struct it now[] = {
		{"inst_a", "running", NULL, RUNNING, false},
		{"inst_b", "paused", NULL, PAUSED, false},
		{"inst_c", "stopped", "ResourcesExhausted: memory", STOPPED, false},
	};
	struct report_track t;
	struct conv_status s, d;

	took_base(&t);
	mkstatus(&s, 6, now, 3);
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_c", "same state, new desired state: carried again");
	conv_status_clear(&d);
	conv_status_clear(&s);
	report_track_clear(&t);
}

static void test_complete_when(void)
{
	struct report_track t;
	struct conv_status s;

	report_track_init(&t);
	t.complete_due = 100 + INTERVAL;
	ok(report_track_complete(&t, 100), "first report after start: complete");
	mkstatus(&s, 5, base, 3);
	report_track_done(&t, &s, true, false, 0, 100, INTERVAL);
	ok(report_track_complete(&t, 200), "first report failed: the next is complete");
	report_track_done(&t, &s, true, true, 5, 200, INTERVAL);
	ok(!report_track_complete(&t, 300), "complete report taken: the next is a delta");
	report_track_done(&t, &s, false, true, 5, 300, INTERVAL);
	ok(!report_track_complete(&t, 400), "delta taken: still deltas");
	ok(!report_track_complete(&t, 200 + INTERVAL - 1), "no complete before the tick");
	ok(report_track_complete(&t, 200 + INTERVAL), "the periodic tick: complete");
	report_track_done(&t, &s, true, true, 5, 200 + INTERVAL, INTERVAL);
	ok(!report_track_complete(&t, 201 + INTERVAL), "tick delivered: deltas again");
	ok(report_track_complete(&t, 200 + 2 * INTERVAL), "and the next tick a full interval on");

	report_track_done(&t, &s, false, false, 0, 500 + INTERVAL, INTERVAL);
	ok(report_track_complete(&t, 501 + INTERVAL), "delta failed: the next is complete");
	report_track_done(&t, &s, true, true, 5, 502 + INTERVAL, INTERVAL);
	ok(!report_track_complete(&t, 503 + INTERVAL), "taken again: deltas");

	report_track_done(&t, &s, false, true, 6, 600 + INTERVAL, INTERVAL);
	ok(!report_track_complete(&t, 601 + INTERVAL),
	   "ack holds a newer spec than the report applied (stale): still a delta "
	   "(what it carried stays pending: test_pending)");
	report_track_done(&t, &s, false, true, 4, 604 + INTERVAL, INTERVAL);
	ok(!report_track_complete(&t, 605 + INTERVAL),
	   "ack older than applied (an old replica) takes everything: deltas");
	conv_status_clear(&s);
	report_track_clear(&t);
}

static void test_pending(void)
{
	const struct it now[] = {
		{"inst_a", "stopped", NULL, STOPPED, false},
		{"inst_b", "paused", NULL, PAUSED, false},
		{"inst_c", "stopped", "ResourcesExhausted: memory", RUNNING, false},
	};
	struct report_track t;
	struct conv_status s, d;

	took_base(&t);
	mkstatus(&s, 6, now, 3);
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_a", "the stop is in the delta");
	report_track_done(&t, &s, false, false, 0, 10, INTERVAL);
	conv_status_clear(&d);
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_a", "not delivered: still pending");
	report_track_done(&t, &s, false, true, 7, 20, INTERVAL);
	conv_status_clear(&d);
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_a", "delivered under a stale spec: still pending");
	report_track_done(&t, &s, true, true, 6, 30, INTERVAL);
	conv_status_clear(&d);
	report_delta(&t, &s, &d);
	is_int(d.n_items, 0, "taken under the newest spec: no longer pending");
	conv_status_clear(&d);
	conv_status_clear(&s);
	report_track_clear(&t);
}

/* ------------------------------------------- with the converge pass */

static Bc__Node__V1__NodeSpec *mkspec(uint64_t gen, const char *const *id,
				      const Bc__Node__V1__DesiredState *want, const char *runtime)
{
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec is[8], *ip[8];
	size_t n = 0;

	s.generation = gen;
	for (; id[n] && n < 8; n++) {
		is[n] = (Bc__Node__V1__InstanceSpec)BC__NODE__V1__INSTANCE_SPEC__INIT;
		is[n].id = (char *)id[n];
		is[n].runtime = (char *)(strcmp(id[n], "inst_bad") == 0 ? runtime : "fake");
		is[n].desired_state = want[n];
		is[n].vcpus = 1;
		is[n].memory_mib = 256;
		is[n].network_policy = "egress";
		ip[n] = &is[n];
	}
	s.n_instances = n;
	s.instances = ip;
	return state_spec_dup(&s);
}

static const struct conv_item *find(const struct conv_status *s, const char *id)
{
	for (size_t i = 0; i < s->n_items; i++)
		if (strcmp(s->items[i].id, id) == 0)
			return &s->items[i];
	return NULL;
}

static void test_with_converge(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/conv", tmpdir);
	struct rt_config cfg = {.state_dir = dir, .capacity_vcpus = 64,
				.capacity_memory_mib = 65536, .capacity_disk_gib = 100};
	const char *const g1[] = {"inst_a", "inst_b", "inst_bad", "inst_x", NULL};
	const Bc__Node__V1__DesiredState w1[] = {RUNNING, RUNNING, STOPPED, RUNNING};
	const char *const g2[] = {"inst_a", "inst_b", "inst_bad", NULL};
	const Bc__Node__V1__DesiredState w2[] = {RUNNING, PAUSED, RUNNING};
	struct report_track t;
	struct conv_status s, d;
	struct rt *rt = NULL;
	struct conv *c;

	mkdir_p(dir, 0700);
	if (rt_open("fake", &cfg, &rt) < 0) {
		printf("Bail out! cannot open the fake runtime\n");
		exit(1);
	}
	c = conv_new(rt);
	report_track_init(&t);
	conv_submit(c, mkspec(1, g1, w1, "elsewhere"));
	conv_pass(c);
	conv_snapshot(c, &s);
	is_int(s.n_items, 4, "generation 1: four instances");
	is_int(find(&s, "inst_b") ? find(&s, "inst_b")->desired : -1, RUNNING,
	       "items carry the spec's desired state");
	is_str(find(&s, "inst_bad") ? find(&s, "inst_bad")->state : "", "error",
	       "an instance of another runtime is in error");
	report_track_done(&t, &s, true, true, 1, 0, INTERVAL);
	conv_status_clear(&s);

	/* pause inst_b, start inst_bad (still in error, same reason: only its
	 * desired state moved), drop inst_x from the spec (destroyed: one-shot) */
	conv_submit(c, mkspec(2, g2, w2, "elsewhere"));
	conv_pass(c);
	conv_snapshot(c, &s);
	ok(find(&s, "inst_x") && find(&s, "inst_x")->once, "destroyed unnamed: a one-shot entry");
	ok(find(&s, "inst_a") && !find(&s, "inst_a")->once, "named instances are not one-shot");
	is_int(find(&s, "inst_x") ? find(&s, "inst_x")->desired : -1, 0,
	       "an unnamed instance has no desired state");
	report_delta(&t, &s, &d);
	is_str(ids(&d), "inst_b inst_bad inst_x",
	       "delta: the paused one, the one whose desired state moved, the destroyed one");
	report_track_done(&t, &s, false, true, 2, 1, INTERVAL);
	conv_report_sent(c, s.seq);
	conv_status_clear(&d);
	conv_status_clear(&s);

	conv_pass(c);
	conv_snapshot(c, &s);
	report_delta(&t, &s, &d);
	is_int(d.n_items, 0, "next pass, nothing changed: an empty delta");
	is_int(s.n_items, 3, "the full snapshot still has the three named instances");
	conv_status_clear(&d);
	conv_status_clear(&s);
	report_track_clear(&t);
	conv_free(c);
	rt_close(rt);
}

int main(void)
{
	log_init("test", LOG_LVL_ERROR);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-report-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_delta_contents();
	test_delta_nothing();
	test_delta_desired();
	test_complete_when();
	test_pending();
	test_with_converge();
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "# could not remove %s\n", tmpdir);
	}
	done_testing();
}
