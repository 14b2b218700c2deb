/* test_agent_converge.c: converge passes against the real fake runtime in a
 * temp state directory: create, pause/stop, delete, unknown instances
 * destroyed, idempotence (second pass changes nothing), host admission,
 * failures, adoption after a simulated restart, and the converge thread. */
#include <errno.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/converge.h"
#include "agent/guestready.h"
#include "agent/runtime.h"
#include "agent/state.h"
#include "agent/volumes.h"
#include "log.h"
#include "tap.h"
#include "util.h"

#define RUNNING BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING
#define PAUSED BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED
#define STOPPED BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED
#define DELETED BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED

struct want {
	const char *id;
	Bc__Node__V1__DesiredState desired;
	uint32_t vcpus;
	uint64_t memory_mib;
	const char *policy;
	const char *runtime;
	bool pause_after_ready;
};

static char tmpdir[64];

static void rm_rf(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
}

/* An owned spec of generation gen naming the instances of w (NULL id ends). */
static Bc__Node__V1__NodeSpec *mkspec(uint64_t gen, const struct want *w)
{
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec is[16], *ip[16];
	Bc__Node__V1__VolumeSpec vol = BC__NODE__V1__VOLUME_SPEC__INIT, *volp = &vol;
	size_t n = 0;

	s.generation = gen;
	vol.id = "vol_1";
	vol.size_bytes = 5ull << 30;
	s.n_volumes = 1;
	s.volumes = &volp;
	for (; w && w[n].id && n < 16; n++) {
		is[n] = (Bc__Node__V1__InstanceSpec)BC__NODE__V1__INSTANCE_SPEC__INIT;
		is[n].id = (char *)w[n].id;
		is[n].runtime = (char *)(w[n].runtime ? w[n].runtime : "fake");
		is[n].desired_state = w[n].desired;
		is[n].vcpus = w[n].vcpus ? w[n].vcpus : 1;
		is[n].memory_mib = w[n].memory_mib ? w[n].memory_mib : 256;
		is[n].network_policy = (char *)(w[n].policy ? w[n].policy : "egress");
		is[n].ssh_from_host_only = 1;
		is[n].pause_after_ready = w[n].pause_after_ready;
		ip[n] = &is[n];
	}
	s.n_instances = n;
	s.instances = ip;
	return state_spec_dup(&s);
}

static struct rt *open_rt(const char *dir, uint32_t vcpus, uint64_t mem)
{
	struct rt_config cfg = {.state_dir = dir, .capacity_vcpus = vcpus,
				.capacity_memory_mib = mem, .capacity_disk_gib = 100};
	struct rt *rt = NULL;
	int e = rt_open("fake", &cfg, &rt);

	if (e < 0) {
		printf("Bail out! cannot open fake runtime in %s: %s\n", dir, strerror(-e));
		exit(1);
	}
	return rt;
}

/* Lines of the fake ledger containing "op=<op> id=<id> ". */
static int ledger_count(const char *dir, const char *op, const char *id)
{
	_cleanup_free_ char *path = xasprintf("%s/fake/ledger.log", dir);
	_cleanup_free_ char *needle = xasprintf("op=%s id=%s ", op, id);
	_cleanup_free_ char *buf = NULL;
	int n = 0;

	if (file_read_all(path, 1 << 24, &buf, NULL) < 0)
		return 0;
	for (char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static int ledger_lines(const char *dir)
{
	_cleanup_free_ char *path = xasprintf("%s/fake/ledger.log", dir);
	_cleanup_free_ char *buf = NULL;
	int n = 0;

	if (file_read_all(path, 1 << 24, &buf, NULL) < 0)
		return 0;
	for (char *p = buf; *p; p++)
		n += *p == '\n';
	return n;
}

/* The runtime's state of id ("absent" if it has none). */
static const char *actual_state(struct rt *rt, const char *id)
{
	static char out[16];
	struct rt_instance *v = NULL;
	size_t n = 0;

	snprintf(out, sizeof(out), "absent");
	if (rt->ops->list(rt, &v, &n) < 0)
		snprintf(out, sizeof(out), "list-failed");
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, id) == 0)
			snprintf(out, sizeof(out), "%s", rt_state_name(v[i].state));
	free(v);
	return out;
}

static size_t actual_count(struct rt *rt)
{
	struct rt_instance *v = NULL;
	size_t n = 0;

	rt->ops->list(rt, &v, &n);
	free(v);
	return n;
}

static const struct conv_item *item(const struct conv_status *s, const char *id)
{
	for (size_t i = 0; i < s->n_items; i++)
		if (strcmp(s->items[i].id, id) == 0)
			return &s->items[i];
	return NULL;
}

static const char *item_state(const struct conv_status *s, const char *id)
{
	const struct conv_item *it = item(s, id);

	return it ? it->state : "missing";
}

static const char *item_reason(const struct conv_status *s, const char *id)
{
	const struct conv_item *it = item(s, id);

	return it ? it->reason : "missing";
}

static char *subdir(const char *name)
{
	char *d = xasprintf("%s/%s", tmpdir, name);

	mkdir_p(d, 0700);
	return d;
}

/* The host's volumes in dir/volumes, on a stand-in filesystem of 100 GiB
 * with bcd's default reserve (5 %, at least 2 GiB), as bcd runs the fake. */
static struct vol *with_volumes(struct conv *c, const char *dir)
{
	_cleanup_free_ char *vdir = xasprintf("%s/volumes", dir);
	const struct vol_config vc = {.dir = vdir, .reserve_percent = 5, .reserve_min = 2ull << 30,
				      .fs_size = 100ull << 30};
	struct vol *vol = NULL;

	is_int(vol_open(&vc, &vol), 0, "volumes dir opened");
	conv_set_volumes(c, vol);
	return vol;
}

/* ---------------------------------------------------------------- tests */

static void test_lifecycle(void)
{
	_cleanup_free_ char *dir = subdir("life");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	struct vol *vol = with_volumes(c, dir);
	const struct want g1[] = {{"ins_a", RUNNING}, {"ins_b", PAUSED}, {"ins_c", STOPPED}, {0}};
	const struct want g2[] = {{"ins_a", STOPPED}, {"ins_b", RUNNING}, {"ins_c", DELETED}, {0}};
	uint64_t seq;
	int lines;

	conv_submit(c, mkspec(1, g1));
	is_int(conv_pass(c), 0, "pass over generation 1");
	is_str(actual_state(rt, "ins_a"), "running", "ins_a created and running");
	is_str(actual_state(rt, "ins_b"), "paused", "ins_b created and paused");
	is_str(actual_state(rt, "ins_c"), "stopped", "ins_c created and left stopped");
	is_int(ledger_count(dir, "create", "ins_a"), 1, "ins_a created once");
	is_int(ledger_count(dir, "start", "ins_c"), 0, "a stopped instance is never started");
	conv_snapshot(c, &st);
	is_int(st.applied_generation, 1, "status: applied generation 1");
	ok(st.complete, "status complete");
	is_int(st.n_items, 3, "three instances reported");
	is_str(item_state(&st, "ins_a"), "running", "ins_a reported running");
	is_str(item_state(&st, "ins_b"), "paused", "ins_b reported paused");
	is_str(item_state(&st, "ins_c"), "stopped", "ins_c reported stopped");
	ok(st.has_storage, "volume storage reported");
	is_int(st.storage.committed, 5ull << 30, "committed = the spec's volume sizes");
	is_int(st.storage.available, 100ull << 30, "available = the fake's store (sparse: none used)");
	is_int(st.storage.reserved, 5ull << 30, "reserved = 5%% of the store");
	seq = st.seq;
	conv_status_clear(&st);

	lines = ledger_lines(dir);
	is_int(conv_pass(c), 0, "second pass");
	is_int(ledger_lines(dir), lines, "second pass is a no-op: nothing in the ledger");
	conv_snapshot(c, &st);
	is_int(st.seq, seq, "second pass: status unchanged (no report trigger)");
	conv_status_clear(&st);

	conv_submit(c, mkspec(2, g2));
	is_int(conv_pass(c), 0, "pass over generation 2");
	is_str(actual_state(rt, "ins_a"), "stopped", "ins_a stopped");
	is_str(actual_state(rt, "ins_b"), "running", "ins_b resumed");
	is_str(actual_state(rt, "ins_c"), "absent", "ins_c destroyed");
	is_int(ledger_count(dir, "resume", "ins_b"), 1, "paused -> running is a resume");
	is_int(ledger_count(dir, "destroy", "ins_c"), 1, "ins_c destroyed once");
	conv_snapshot(c, &st);
	ok(st.seq > seq, "status changed");
	is_int(st.applied_generation, 2, "applied generation 2");
	is_str(item_state(&st, "ins_c"), "deleted", "ins_c reported deleted");
	is_str(item_state(&st, "ins_a"), "stopped", "ins_a reported stopped");
	conv_status_clear(&st);

	lines = ledger_lines(dir);
	conv_pass(c);
	is_int(ledger_lines(dir), lines, "deleted instance: next pass does nothing");
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_c"), "deleted", "still reported deleted while the spec names it");
	conv_status_clear(&st);
	conv_free(c);
	vol_free(vol);
	rt_close(rt);
}

static void test_pause_from_stopped(void)
{
	_cleanup_free_ char *dir = subdir("pause");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	const struct want g1[] = {{"ins_p", STOPPED}, {0}};
	const struct want g2[] = {{"ins_p", PAUSED}, {0}};
	const struct want g3[] = {{"ins_p", RUNNING}, {0}};

	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	is_str(actual_state(rt, "ins_p"), "paused", "stopped -> paused goes through start");
	is_int(ledger_count(dir, "start", "ins_p"), 1, "started once");
	is_int(ledger_count(dir, "pause", "ins_p"), 1, "paused once");
	conv_submit(c, mkspec(3, g3));
	conv_pass(c);
	is_str(actual_state(rt, "ins_p"), "running", "paused -> running");
	is_int(ledger_count(dir, "start", "ins_p"), 1, "no second start: resumed instead");
	conv_free(c);
	rt_close(rt);
}

static void test_unknown_destroyed(void)
{
	_cleanup_free_ char *dir = subdir("unknown");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	const struct want stray[] = {{"ins_stray", RUNNING}, {"ins_keep", RUNNING}, {0}};
	const struct want g1[] = {{"ins_keep", RUNNING}, {0}};
	Bc__Node__V1__NodeSpec *pre = mkspec(1, stray);
	char reason[RT_REASON_MAX] = "";

	/* a VM from before (another spec, another life): it exists already */
	for (size_t i = 0; i < pre->n_instances; i++) {
		rt->ops->create(rt, pre->instances[i], reason);
		rt->ops->start(rt, pre->instances[i]->id);
	}
	state_spec_free(pre);

	conv_pass(c);
	is_str(actual_state(rt, "ins_stray"), "running", "no spec yet: nothing destroyed");
	conv_snapshot(c, &st);
	is_int(st.applied_generation, 0, "no spec yet: generation 0");
	is_str(item_state(&st, "ins_stray"), "running", "no spec yet: actual states reported");
	conv_status_clear(&st);

	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	is_str(actual_state(rt, "ins_stray"), "absent", "instance the spec does not name destroyed");
	is_str(actual_state(rt, "ins_keep"), "running", "instance the spec names left running");
	is_int(ledger_count(dir, "start", "ins_keep"), 1, "ins_keep never restarted");
	is_int(ledger_count(dir, "adopt", "ins_keep"), 1, "ins_keep adopted");
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_stray"), "deleted", "destroyed instance reported deleted");
	conv_status_clear(&st);

	conv_pass(c);
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_stray"), "deleted", "reported deleted until a report is delivered");
	conv_report_sent(c, st.seq);
	conv_status_clear(&st);
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_stray"), "missing", "after delivery it is simply absent");
	is_str(item_state(&st, "ins_keep"), "running", "ins_keep still reported");
	conv_status_clear(&st);
	conv_free(c);
	rt_close(rt);
}

static void test_admission(void)
{
	_cleanup_free_ char *dir = subdir("admission");
	struct rt *rt = open_rt(dir, 4, 1024);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	const struct want g1[] = {
		{"ins_a_fit", RUNNING, 2, 512},
		{"ins_b_mem", RUNNING, 1, 1024},
		{"ins_c_cpu", RUNNING, 3, 128},
		{0},
	};
	/* the controller moved ins_a_fit away and re-placed ins_b_mem here */
	const struct want g2[] = {{"ins_b_mem", RUNNING, 1, 1024}, {0}};

	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_a_fit"), "running", "instance that fits runs");
	is_str(item_state(&st, "ins_b_mem"), "stopped", "memory refusal reported stopped");
	is_str(item_reason(&st, "ins_b_mem"), "ResourcesExhausted: memory", "memory reason");
	is_str(item_state(&st, "ins_c_cpu"), "stopped", "vcpu refusal reported stopped");
	is_str(item_reason(&st, "ins_c_cpu"), "ResourcesExhausted: vcpus", "vcpus reason");
	is_str(actual_state(rt, "ins_b_mem"), "absent", "refused instance not created");
	is_int(ledger_count(dir, "create", "ins_b_mem"), 0, "no create in the ledger for it");
	conv_status_clear(&st);

	/* one generation destroys ins_a_fit and names ins_b_mem: the destroy
	 * comes first, so ins_b_mem fits in the same pass */
	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_b_mem"), "running", "refused instance runs once room is freed");
	is_str(item_reason(&st, "ins_b_mem"), "", "reason cleared");
	conv_status_clear(&st);
	conv_free(c);
	rt_close(rt);
}

static void write_fail(const char *dir, const char *id, const char *ops)
{
	_cleanup_free_ char *path = xasprintf("%s/fake/%s.fail", dir, id);

	file_write_atomic(path, ops, strlen(ops), 0644);
}

static void test_failures(void)
{
	_cleanup_free_ char *dir = subdir("fail");
	_cleanup_free_ char *failp = xasprintf("%s/fake/ins_f.fail", dir);
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	const struct want g1[] = {{"ins_f", RUNNING}, {"ins_lv", RUNNING, 1, 0, NULL, "libvirt"}, {0}};
	const struct want g2[] = {{"ins_lv", RUNNING, 1, 0, NULL, "libvirt"}, {0}};

	write_fail(dir, "ins_f", "start destroy");
	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_snapshot(c, &st);
	is_str(item_state(&st, "ins_f"), "error", "failed start reported error");
	ok(strncmp(item_reason(&st, "ins_f"), "start failed:", 13) == 0, "reason names the step");
	is_str(item_state(&st, "ins_lv"), "error", "other runtime reported error");
	is_str(item_reason(&st, "ins_lv"), "UnsupportedRuntime: libvirt", "runtime reason");
	is_str(actual_state(rt, "ins_lv"), "absent", "nothing created for another runtime");
	conv_status_clear(&st);

	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	is_str(actual_state(rt, "ins_f"), "stopped", "failed destroy leaves the instance");
	conv_snapshot(c, &st);
	ok(strncmp(item_reason(&st, "ins_f"), "destroy failed:", 15) == 0, "destroy failure reported");
	conv_status_clear(&st);

	unlink(failp);
	conv_pass(c);
	is_str(actual_state(rt, "ins_f"), "absent", "destroy retried on the next pass");
	conv_free(c);
	rt_close(rt);
}

static void test_policy_update(void)
{
	_cleanup_free_ char *dir = subdir("policy");
	_cleanup_free_ char *rec = xasprintf("%s/fake/ins_n.inst", dir);
	_cleanup_free_ char *text = NULL;
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	const struct want g1[] = {{"ins_n", RUNNING, 1, 256, "egress"}, {0}};
	const struct want g2[] = {{"ins_n", RUNNING, 1, 256, "none"}, {0}};

	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	file_read_all(rec, 1 << 16, &text, NULL);
	ok(text && strstr(text, "network_policy=none\n"), "changed policy recorded");
	ok(text && strstr(text, "ssh_from_host_only=1\n"), "ssh_from_host_only recorded");
	is_int(ledger_count(dir, "update", "ins_n"), 1, "one update in the ledger");
	is_int(ledger_count(dir, "create", "ins_n"), 1, "policy change does not recreate");
	is_int(ledger_count(dir, "start", "ins_n"), 1, "policy change does not restart");
	conv_pass(c);
	is_int(ledger_count(dir, "update", "ins_n"), 1, "unchanged policy: no further update");
	{
		const struct want g3[] = {{"ins_n", RUNNING, 1, 256, "private"}, {0}};
		struct conv_status st = {0};
		_cleanup_free_ char *failp = xasprintf("%s/fake/ins_n.fail", dir);
		write_fail(dir, "ins_n", "update");
		conv_submit(c, mkspec(3, g3));
		conv_pass(c);
		conv_snapshot(c, &st);
		is_str(item_state(&st, "ins_n"), "running", "failed update: instance left running");
		ok(strncmp(item_reason(&st, "ins_n"), "update failed:", 14) == 0,
		   "failed update reported in the reason");
		conv_status_clear(&st);
		unlink(failp);
		conv_pass(c);
		conv_snapshot(c, &st);
		is_str(item_reason(&st, "ins_n"), "", "update retried next pass: reason cleared");
		conv_status_clear(&st);
		is_int(ledger_count(dir, "update", "ins_n"), 2, "the new policy recorded");
	}
	conv_free(c);
	rt_close(rt);
}

/* SIGKILL + restart, simulated: the process state (conv, runtime handle) is
 * dropped without any shutdown; a new one loads spec.pb and adopts. */
static void test_restart(void)
{
	_cleanup_free_ char *dir = subdir("restart");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	Bc__Node__V1__NodeSpec *spec, *copy = NULL, *loaded = NULL;
	const struct want g1[] = {{"ins_1", RUNNING}, {"ins_2", PAUSED}, {"ins_3", STOPPED}, {0}};
	uint64_t applied = 0;
	int lines;

	spec = mkspec(5, g1);
	is_int(state_take_spec(dir, &applied, spec, &copy), 0, "spec persisted before acting");
	conv_submit(c, copy);
	conv_pass(c);
	state_spec_free(spec);
	conv_free(c);
	rt_close(rt);
	lines = ledger_lines(dir);
	{
		/* killed in the middle of rewriting a record */
		_cleanup_free_ char *tmp = xasprintf("%s/fake/ins_1.inst.tmp.99999", dir);
		file_write_atomic(tmp, "id=ins_1\nstate=stopped\n", 24, 0644);
	}

	rt = open_rt(dir, 64, 65536);
	{
		_cleanup_free_ char *tmp = xasprintf("%s/fake/ins_1.inst.tmp.99999", dir);
		ok(access(tmp, F_OK) < 0, "restart: a half-written record is swept");
	}
	c = conv_new(rt);
	is_int(state_load_spec(dir, &loaded), 0, "restart: spec.pb loaded");
	is_int(actual_count(rt), 3, "restart: the runtime still has three instances");
	conv_submit(c, loaded);
	is_int(conv_pass(c), 0, "first pass after restart");
	is_str(actual_state(rt, "ins_1"), "running", "ins_1 still running");
	is_str(actual_state(rt, "ins_2"), "paused", "ins_2 still paused");
	is_str(actual_state(rt, "ins_3"), "stopped", "ins_3 still stopped");
	is_int(actual_count(rt), 3, "nothing lost, nothing duplicated");
	for (int i = 1; i <= 3; i++) {
		char id[16];
		snprintf(id, sizeof(id), "ins_%d", i);
		is_int(ledger_count(dir, "create", id), 1, "%s created exactly once", id);
		is_int(ledger_count(dir, "adopt", id), 1, "%s adopted", id);
	}
	is_int(ledger_lines(dir), lines + 3, "restart added only the three adopt lines");
	conv_snapshot(c, &st);
	is_int(st.applied_generation, 5, "reports the persisted generation");
	is_str(item_state(&st, "ins_2"), "paused", "status of an adopted instance");
	conv_status_clear(&st);
	conv_pass(c);
	is_int(ledger_lines(dir), lines + 3, "adoption happens once per process");
	conv_free(c);
	rt_close(rt);
}

static void test_results(void)
{
	_cleanup_free_ char *dir = subdir("results");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	uint64_t seq;

	conv_add_result(c, "cmd_1", false, "UNSUPPORTED: x");
	conv_snapshot(c, &st);
	is_int(st.n_results, 1, "result queued");
	is_str(st.results[0].id, "cmd_1", "result id");
	ok(!st.results[0].ok, "result not ok");
	seq = st.seq;
	conv_status_clear(&st);
	conv_add_result(c, "cmd_2", true, NULL);
	conv_report_sent(c, seq);
	conv_snapshot(c, &st);
	is_int(st.n_results, 1, "only results already reported are dropped");
	is_str(st.results[0].id, "cmd_2", "later result kept");
	conv_status_clear(&st);
	conv_free(c);
	rt_close(rt);
}

static void *conv_thread(void *arg)
{
	conv_run(arg);
	return NULL;
}

static void test_thread(void)
{
	_cleanup_free_ char *dir = subdir("thread");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	const struct want g1[] = {{"ins_t", RUNNING}, {0}};
	pthread_t th;
	uint64_t seen = 0;
	int i;

	pthread_create(&th, NULL, conv_thread, c);
	conv_submit(c, mkspec(1, g1));
	for (i = 0; i < 100; i++) {
		conv_wait_change(c, seen, 100);
		conv_snapshot(c, &st);
		seen = st.seq;
		if (st.applied_generation == 1) {
			conv_status_clear(&st);
			break;
		}
		conv_status_clear(&st);
	}
	ok(i < 100, "converge thread applied the submitted spec");
	is_str(actual_state(rt, "ins_t"), "running", "thread created the instance");
	conv_stop(c);
	ok(!conv_wait_change(c, seen, 60000), "wait returns at once after stop");
	pthread_join(th, NULL);
	ok(conv_stopping(c), "stopped");
	conv_free(c);
	rt_close(rt);
}


/* Fencing: a pass after the fence time without contact pauses (or stops)
 * what runs and applies no spec; the fence lifts only once a report
 * carrying the fenced states was delivered and the spec confirmed, and
 * that pass converges the newest spec. */
static void test_fence(void)
{
	_cleanup_free_ char *dir = subdir("fence");
	struct rt *rt = open_rt(dir, 64, 65536);
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	struct vol *vol = with_volumes(c, dir);
	const struct want g1[] = {{"ins_a", RUNNING}, {"ins_b", PAUSED}, {"ins_c", RUNNING}, {0}};
	const struct want g2[] = {{"ins_a", RUNNING}, {"ins_b", PAUSED}, {"ins_d", RUNNING}, {0}};
	enum conv_fence f;

	is_int(conv_fence_parse("stop", &f), 0, "fence = stop parses");
	is_int(conv_fence_parse("halt", &f), -EINVAL, "fence = halt is refused");
	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_set_fence(c, CONV_FENCE_PAUSE, 1);
	usleep(5000);
	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	ok(conv_fenced(c), "no contact for the fence time: fenced");
	is_str(actual_state(rt, "ins_a"), "paused", "a running instance is paused");
	is_str(actual_state(rt, "ins_c"), "paused", "one the new spec drops is paused, not destroyed");
	is_str(actual_state(rt, "ins_d"), "absent", "nothing is created while fenced");
	is_int(ledger_count(dir, "pause", "ins_b"), 1, "the paused one is left alone");
	conv_snapshot(c, &st);
	ok(!strncmp(item_reason(&st, "ins_a"), "Fenced: ", 8), "reported with a Fenced reason");
	ok(st.has_storage, "storage still reported");
	conv_status_clear(&st);

	conv_snapshot(c, &st);
	conv_report_sent(c, st.seq - 1);
	conv_status_clear(&st);
	conv_pass(c);
	ok(conv_fenced(c), "a report without the fenced states does not lift it");
	/* a confirmation counts only when it came after the fence began, on a
	 * millisecond clock: on a fast machine all of the above fits in one */
	usleep(2000);
	conv_confirm(c);
	conv_pass(c);
	ok(conv_fenced(c), "a confirmed spec alone does not lift it: the fence is not reported yet");
	conv_snapshot(c, &st);
	conv_report_sent(c, st.seq);
	conv_status_clear(&st);
	conv_pass(c);
	ok(!conv_fenced(c), "confirmed and the fenced states reported (in any order): lifted");
	is_str(actual_state(rt, "ins_a"), "running", "the pass converges: resumed");
	is_str(actual_state(rt, "ins_c"), "absent", "what the spec no longer names is destroyed");
	is_int(ledger_count(dir, "resume", "ins_c"), 0, "... never resumed");
	is_str(actual_state(rt, "ins_d"), "running", "what it names is created");
	is_str(actual_state(rt, "ins_b"), "paused", "a desired-paused one stays paused");

	conv_set_fence(c, CONV_FENCE_STOP, 1);
	usleep(5000);
	conv_pass(c);
	is_str(actual_state(rt, "ins_a"), "stopped", "fence = stop: a running instance is stopped");
	is_str(actual_state(rt, "ins_b"), "stopped", "... and a paused one too");
	conv_free(c);
	vol_free(vol);
	rt_close(rt);
}

/* Guest-up marks: reported with running and paused instances, cleared by a
 * new boot (a start from stopped) and by a destroy; a stopped instance
 * reports none. */
static void test_guest_ready(void)
{
	_cleanup_free_ char *dir = subdir("ready");
	struct guestready *g = NULL;
	struct rt_config cfg = {.state_dir = dir, .capacity_disk_gib = 100};
	struct rt *rt = NULL;
	struct conv *c;
	struct conv_status st = {0};
	const struct want g1[] = {{"ins_r", RUNNING}, {"ins_s", STOPPED}, {0}};
	const struct want g2[] = {{"ins_r", STOPPED}, {"ins_s", DELETED}, {0}};
	const struct want g3[] = {{"ins_r", PAUSED}, {0}};
	const struct want g4[] = {{0}};
	int64_t first;

	is_int(gr_open(dir, &g), 0, "gr_open");
	cfg.guest_ready = g;
	is_int(rt_open("fake", &cfg, &rt), 0, "fake with marks");
	c = conv_new(rt);
	conv_set_guestready(c, g);
	gr_mark(g, "ins_r", 1);  /* left from an earlier instance of that id */
	conv_submit(c, mkspec(1, g1));
	conv_pass(c);
	conv_snapshot(c, &st);
	first = item(&st, "ins_r") ? item(&st, "ins_r")->guest_ready_at : -1;
	ok(first > 1, "a running instance reports its guest's mark (not the stale one)");
	is_int(item(&st, "ins_s") ? item(&st, "ins_s")->guest_ready_at : -1, 0,
	       "a stopped instance reports none");
	conv_status_clear(&st);
	conv_submit(c, mkspec(2, g2));
	conv_pass(c);
	conv_snapshot(c, &st);
	is_int(item(&st, "ins_r") ? item(&st, "ins_r")->guest_ready_at : -1, 0,
	       "stopped: no mark reported");
	conv_status_clear(&st);
	usleep(2000);
	conv_submit(c, mkspec(3, g3));
	conv_pass(c);
	conv_snapshot(c, &st);
	ok(item(&st, "ins_r") && item(&st, "ins_r")->guest_ready_at > first,
	   "started again (then paused): the new boot's mark, not the old one");
	conv_status_clear(&st);
	conv_submit(c, mkspec(4, g4));
	conv_pass(c);
	is_int(gr_get(g, "ins_r"), 0, "destroyed: the mark is gone");
	conv_free(c);
	rt_close(rt);
	gr_close(g);
}

/* Pause after ready: a desired-PAUSED instance with pause_after_ready runs
 * until its guest is marked up, and is paused by the first pass after;
 * without the flag PAUSED pauses at once. The fake's own marking is off
 * (fake/<id>.noready), as when a real guest has not signalled yet. */
static void test_pause_after_ready(void)
{
	_cleanup_free_ char *dir = subdir("par");
	_cleanup_free_ char *fdir = NULL, *nr = NULL;
	struct guestready *g = NULL;
	struct rt_config cfg = {.state_dir = dir, .capacity_disk_gib = 100};
	struct rt *rt = NULL;
	struct conv *c;
	const struct want w[] = {{"ins_w", PAUSED, .pause_after_ready = true},
				 {"ins_p", PAUSED}, {0}};

	is_int(gr_open(dir, &g), 0, "gr_open");
	cfg.guest_ready = g;
	is_int(rt_open("fake", &cfg, &rt), 0, "fake with marks");
	fdir = xasprintf("%s/fake", dir);
	mkdir(fdir, 0700);
	nr = xasprintf("%s/ins_w.noready", fdir);
	ok(file_write_atomic(nr, "", 0, 0600) == 0, "ins_w's guest never comes up by itself");
	c = conv_new(rt);
	conv_set_guestready(c, g);
	conv_submit(c, mkspec(1, w));
	conv_pass(c);
	is_str(actual_state(rt, "ins_w"), "running", "warm, guest not up: created and kept running");
	is_str(actual_state(rt, "ins_p"), "paused", "PAUSED without pause_after_ready: paused");
	conv_pass(c);
	is_str(actual_state(rt, "ins_w"), "running", "a second pass: still running");
	is_int(ledger_count(dir, "pause", "ins_w"), 0, "never paused before the mark");
	is_int(gr_mark(g, "ins_w", now_ms()), 0, "its guest reports up");
	conv_pass(c);
	is_str(actual_state(rt, "ins_w"), "paused", "the first pass after the mark pauses it");
	conv_free(c);
	rt_close(rt);
	gr_close(g);
}

int main(void)
{
	log_init("test", LOG_LVL_ERROR);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-conv-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_lifecycle();
	test_pause_from_stopped();
	test_unknown_destroyed();
	test_admission();
	test_failures();
	test_policy_update();
	test_restart();
	test_results();
	test_thread();
	test_fence();
	test_guest_ready();
	test_pause_after_ready();
	rm_rf(tmpdir);
	done_testing();
}
