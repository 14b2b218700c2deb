/* test_agent_watch.c: what the spec-watch thread does with each update,
 * without a network: newer specs are persisted then handed to converge,
 * older/equal ones and specs for another node are refused (nothing on disk
 * changes, converge never sees them), commands are recorded once and
 * answered; and the reconnect backoff stays in its bounds. Then over a
 * real stream (an in-process plaintext Node.WatchSpec): a burst of specs
 * is taken whole, only the newest persisted, a command in it kept. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/backoff.h"
#include "agent/converge.h"
#include "agent/runtime.h"
#include "agent/state.h"
#include "agent/watch.h"
#include "bc/node/v1/node.pb-c.h"
#include "log.h"
#include "rpc.h"
#include "tap.h"
#include "util.h"

static char tmpdir[64];

static void rm_rf(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
}

/* Send a NodeUpdate{spec} of generation gen for node, one instance id. */
static int send_spec(struct watch *w, uint64_t gen, const char *node, const char *id)
{
	Bc__Node__V1__NodeUpdate u = BC__NODE__V1__NODE_UPDATE__INIT;
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec is = BC__NODE__V1__INSTANCE_SPEC__INIT, *ip = &is;

	s.generation = gen;
	s.node_id = (char *)node;
	is.id = (char *)id;
	is.desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
	is.vcpus = 1;
	is.memory_mib = 128;
	s.n_instances = 1;
	s.instances = &ip;
	u.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
	u.spec = &s;
	return watch_handle(w, &u);
}

static int send_command(struct watch *w, const char *id)
{
	Bc__Node__V1__NodeUpdate u = BC__NODE__V1__NODE_UPDATE__INIT;
	Bc__Node__V1__Command c = BC__NODE__V1__COMMAND__INIT;

	c.id = (char *)id;
	c.kind = "instance.snapshot";
	c.instance_id = "ins_a";
	u.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND;
	u.command = &c;
	return watch_handle(w, &u);
}

static uint64_t disk_generation(void)
{
	Bc__Node__V1__NodeSpec *s = NULL;
	uint64_t g = 0;

	if (state_load_spec(tmpdir, &s) == 0)
		g = s->generation;
	state_spec_free(s);
	return g;
}

static bool runtime_has(struct rt *rt, const char *id)
{
	struct rt_instance *v = NULL;
	size_t n = 0;
	bool found = false;

	rt->ops->list(rt, &v, &n);
	for (size_t i = 0; i < n; i++)
		found |= strcmp(v[i].id, id) == 0;
	free(v);
	return found;
}

static void test_specs(struct watch *w, struct rt *rt)
{
	struct conv_status st = {0};

	is_int(send_spec(w, 5, "node_me", "ins_five"), 0, "generation 5 accepted");
	is_int(watch_applied(w), 5, "applied generation 5");
	is_int(disk_generation(), 5, "generation 5 persisted");
	conv_pass(w->conv);
	ok(runtime_has(rt, "ins_five"), "converge got generation 5");

	is_int(send_spec(w, 3, "node_me", "ins_three"), -ESTALE, "older generation 3 refused");
	is_int(send_spec(w, 5, "node_me", "ins_again"), -ESTALE, "equal generation 5 refused");
	is_int(watch_applied(w), 5, "applied generation still 5");
	is_int(disk_generation(), 5, "disk still holds generation 5");
	conv_pass(w->conv);
	ok(!runtime_has(rt, "ins_three") && !runtime_has(rt, "ins_again"),
	   "refused specs were never applied");
	ok(runtime_has(rt, "ins_five"), "generation 5's instance untouched");

	is_int(send_spec(w, 9, "node_other", "ins_x"), -EINVAL, "spec for another node refused");
	is_int(watch_applied(w), 5, "applied generation unchanged");
	is_int(send_spec(w, 6, "", "ins_six"), 0, "spec without node id accepted");
	conv_pass(w->conv);
	ok(runtime_has(rt, "ins_six") && !runtime_has(rt, "ins_five"), "generation 6 converged");
	conv_snapshot(w->conv, &st);
	is_int(st.applied_generation, 6, "status reports generation 6");
	conv_status_clear(&st);
}

static void test_commands(struct watch *w)
{
	struct conv_status st = {0};

	is_int(send_command(w, "cmd_1"), 0, "command handled");
	ok(state_cmds_has(w->cmds, "cmd_1"), "command id recorded");
	conv_snapshot(w->conv, &st);
	is_int(st.n_results, 1, "one result queued");
	if (st.n_results == 1) {
		is_str(st.results[0].id, "cmd_1", "result for cmd_1");
		ok(!st.results[0].ok, "unsupported command: ok=false");
		ok(strncmp(st.results[0].error, "UNSUPPORTED:", 12) == 0, "error says UNSUPPORTED");
	}
	conv_report_sent(w->conv, st.seq);
	conv_status_clear(&st);
	is_int(send_command(w, "cmd_1"), 0, "same command again handled");
	conv_snapshot(w->conv, &st);
	is_int(st.n_results, 0, "a command is never started twice: no second result");
	conv_status_clear(&st);
}

static void test_backoff(void)
{
	struct backoff b;
	struct backoff_stop stop;
	int64_t d, max_seen = 0;
	bool in_bounds = true;

	backoff_init(&b, 200, 5000);
	d = backoff_next(&b);
	ok(d >= 100 && d <= 200, "first delay in [100, 200] ms (got %lld)", (long long)d);
	for (int i = 0; i < 50; i++) {
		d = backoff_next(&b);
		in_bounds &= d >= 100 && d <= 5000;
		if (d > max_seen)
			max_seen = d;
	}
	ok(in_bounds, "every delay within [100, 5000] ms");
	ok(max_seen >= 2500, "delays grow to the cap's range");
	backoff_reset(&b);
	d = backoff_next(&b);
	ok(d <= 200, "reset: back to the minimum");
	backoff_stop_init(&stop);
	ok(!backoff_sleep(&stop, 1), "short sleep without stop");
	backoff_stop_request(&stop);
	ok(backoff_stopped(&stop), "stop requested");
	ok(backoff_sleep(&stop, 600000), "sleep returns at once once stopped");
	backoff_stop_destroy(&stop);
}

/* ------------------------------------------------------- over a stream */

#define BURST_FIRST 100
#define BURST_N 50

static struct watch *burst_w;

static void burst_send_spec(rpc_call *c, uint64_t gen)
{
	Bc__Node__V1__NodeUpdate u = BC__NODE__V1__NODE_UPDATE__INIT;
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;

	s.generation = gen;
	s.node_id = "node_me";
	u.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
	u.spec = &s;
	rpc_call_send(c, &u.base);
}

/* WatchSpec: one spec, and once the agent applied it, a burst of specs
 * with a command among them, then one more spec; then hang. */
static int burst_watch(rpc_call *c, const ProtobufCMessage *req, bc_error *err)
{
	Bc__Node__V1__NodeUpdate u = BC__NODE__V1__NODE_UPDATE__INIT;
	Bc__Node__V1__Command cmd = BC__NODE__V1__COMMAND__INIT;
	int64_t end = mono_ms() + 10000;

	(void)req;
	(void)err;
	burst_send_spec(c, BURST_FIRST);
	while (watch_applied(burst_w) < BURST_FIRST && mono_ms() < end)
		usleep(1000);
	for (int i = 1; i < BURST_N; i++)
		burst_send_spec(c, BURST_FIRST + (uint64_t)i);
	cmd.id = "cmd_burst";
	cmd.kind = "instance.snapshot";
	cmd.instance_id = "ins_a";
	u.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND;
	u.command = &cmd;
	rpc_call_send(c, &u.base);
	burst_send_spec(c, BURST_FIRST + BURST_N);
	while (!rpc_call_wait_cancelled(c, 100))
		;
	return 0;
}

static void *burst_thread(void *arg)
{
	watch_run(arg);
	return NULL;
}

static void test_burst(struct watch *w)
{
	static const struct rpc_handler h[] = {
		{"WatchSpec", RPC_SERVER_STREAM, {.sstream = burst_watch}},
	};
	struct rpc_server_opts o = {.listen = "127.0.0.1:0", .workers = 1};
	char target[64];
	struct rpc_client_opts co = {.target = target};
	rpc_server *s = rpc_server_new(&o, NULL);
	int port = 0;
	int64_t end;
	pthread_t t;

	burst_w = w;
	if (!s || rpc_server_add_service(s, &bc__node__v1__node__descriptor, h, 1) < 0 ||
	    rpc_server_start(s, &port) < 0) {
		ok(0, "a plaintext WatchSpec server");
		rpc_server_free(s, 0);
		return;
	}
	snprintf(target, sizeof(target), "127.0.0.1:%d", port);
	w->client = rpc_client_new(&co);
	atomic_store(&w->superseded, 0);
	pthread_create(&t, NULL, burst_thread, w);
	end = mono_ms() + 20000;
	while (watch_applied(w) < BURST_FIRST + BURST_N && mono_ms() < end)
		usleep(2000);
	is_int(watch_applied(w), BURST_FIRST + BURST_N, "the last spec of the stream applied");
	is_int(disk_generation(), BURST_FIRST + BURST_N, "... and on disk");
	ok(atomic_load(&w->superseded) > 0,
	   "specs that came in one burst were not each persisted (%llu of %d skipped)",
	   (unsigned long long)atomic_load(&w->superseded), BURST_N - 1);
	ok(state_cmds_has(w->cmds, "cmd_burst"), "the command inside the burst was handled");
	backoff_stop_request(w->stop);
	watch_kick(w);
	pthread_join(t, NULL);
	rpc_client_free(w->client);
	w->client = NULL;
	rpc_server_free(s, 0);
}

int main(void)
{
	struct rt_config cfg = {.capacity_vcpus = 8, .capacity_memory_mib = 8192};
	struct state_cmds *cmds = NULL;
	struct backoff_stop stop;
	struct rt *rt = NULL;
	struct watch w = {0};

	log_init("test", LOG_LVL_ERROR);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-watch-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	cfg.state_dir = tmpdir;
	if (rt_open("fake", &cfg, &rt) < 0 || state_cmds_open(tmpdir, &cmds) < 0) {
		printf("Bail out! cannot set up %s\n", tmpdir);
		return 1;
	}
	backoff_stop_init(&stop);
	w.conv = conv_new(rt);
	w.state_dir = tmpdir;
	w.node_id = "node_me";
	w.cmds = cmds;
	w.stop = &stop;
	test_specs(&w, rt);
	test_commands(&w);
	test_backoff();
	test_burst(&w);
	conv_free(w.conv);
	state_cmds_free(cmds);
	backoff_stop_destroy(&stop);
	rt_close(rt);
	rm_rf(tmpdir);
	done_testing();
}
