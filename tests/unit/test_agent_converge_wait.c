/* test_agent_converge_wait.c: the converge pass with a runtime whose
 * operations wait on something (the libvirt runtime's image downloads and
 * guest shutdowns), through a small scripted in-memory runtime written
 * against runtime.h: a create answered -EAGAIN is reported provisioning
 * with the runtime's reason and created on a later pass; a stop answered
 * -EINPROGRESS keeps the instance's state with last_error as the reason
 * and is asked again; a failed start reports last_error; node() sees the
 * spec before any create; conv_poke wakes the converge thread before its
 * 10 s interval. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/converge.h"
#include "agent/runtime.h"
#include "tap.h"
#include "util.h"

/* The scripted runtime: one instance slot. */
struct srt {
	struct rt base;
	bool exists;
	enum rt_state state;
	int create_eagain;    /* this many creates answer -EAGAIN first */
	int stop_inprogress;  /* this many stops answer -EINPROGRESS first */
	bool start_fails;
	char gateway[32];     /* from node() */
	bool node_before_create;
	const char *last;
	atomic_int lists;
};

static struct srt *S(struct rt *rt)
{
	return (struct srt *)rt;
}

static int s_list(struct rt *rt, struct rt_instance **ret, size_t *ret_n)
{
	struct rt_instance *v = NULL;

	atomic_fetch_add(&S(rt)->lists, 1);
	if (S(rt)->exists) {
		v = xcalloc(1, sizeof(*v));
		snprintf(v->id, sizeof(v->id), "inst_1");
		v->state = S(rt)->state;
	}
	*ret = v;
	*ret_n = v ? 1 : 0;
	return 0;
}

static int s_create(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	S(rt)->node_before_create = S(rt)->gateway[0] != '\0';
	if (S(rt)->create_eagain > 0) {
		S(rt)->create_eagain--;
		snprintf(reason, RT_REASON_MAX, "ImageFetching: 0123456789abcdef... downloading");
		return -EAGAIN;
	}
	S(rt)->exists = true;
	S(rt)->state = RT_STATE_STOPPED;
	return 0;
}

static int s_adopt(struct rt *rt, const Bc__Node__V1__InstanceSpec *s)
{
	return 0;
}

static int s_start(struct rt *rt, const char *id)
{
	if (S(rt)->start_fails) {
		S(rt)->last = "internal error: target managed='no' but specified dev doesn't exist";
		return -EIO;
	}
	S(rt)->state = RT_STATE_RUNNING;
	return 0;
}

static int s_noop(struct rt *rt, const char *id)
{
	return 0;
}

static int s_stop(struct rt *rt, const char *id)
{
	if (S(rt)->stop_inprogress > 0) {
		S(rt)->stop_inprogress--;
		S(rt)->last = "Stopping: waiting for the guest to shut down (then forced)";
		return -EINPROGRESS;
	}
	S(rt)->state = RT_STATE_STOPPED;
	return 0;
}

static int s_destroy(struct rt *rt, const char *id)
{
	S(rt)->exists = false;
	return 0;
}

static void s_node(struct rt *rt, const Bc__Node__V1__NodeSpec *spec)
{
	snprintf(S(rt)->gateway, sizeof(S(rt)->gateway), "%s", spec->ipam_gateway);
}

static const char *s_last(struct rt *rt)
{
	return S(rt)->last;
}

static const struct runtime_ops s_ops = {
	.name = "fake",
	.list = s_list,
	.create = s_create,
	.adopt = s_adopt,
	.start = s_start,
	.pause = s_noop,
	.resume = s_noop,
	.stop = s_stop,
	.destroy = s_destroy,
	.node = s_node,
	.last_error = s_last,
};

static Bc__Node__V1__NodeSpec *spec(uint64_t gen, Bc__Node__V1__DesiredState want)
{
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec is = BC__NODE__V1__INSTANCE_SPEC__INIT, *ip = &is;
	uint8_t buf[1024];
	size_t n;

	s.generation = gen;
	s.ipam_gateway = "10.77.0.1";
	is.id = "inst_1";
	is.desired_state = want;
	is.vcpus = 1;
	is.memory_mib = 128;
	s.instances = &ip;
	s.n_instances = 1;
	n = bc__node__v1__node_spec__pack(&s, buf);
	return bc__node__v1__node_spec__unpack(NULL, n, buf);
}

/* The one item of a pass: "state reason". */
static const char *pass(struct conv *c, char *out, size_t len)
{
	struct conv_status st;

	conv_pass(c);
	conv_snapshot(c, &st);
	snprintf(out, len, "%s %s", st.n_items ? st.items[0].state : "-",
		 st.n_items ? st.items[0].reason : "-");
	conv_status_clear(&st);
	return out;
}

static void test_waits(void)
{
	struct srt r = {.base.ops = &s_ops, .create_eagain = 2, .stop_inprogress = 2};
	struct conv *c = conv_new(&r.base);
	char out[256];

	conv_submit(c, spec(1, BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING));
	is_str(pass(c, out, sizeof(out)), "provisioning ImageFetching: 0123456789abcdef... downloading",
	       "create -EAGAIN: provisioning with the runtime's reason");
	ok(r.node_before_create, "node() saw the spec (gateway) before the create");
	is_str(pass(c, out, sizeof(out)), "provisioning ImageFetching: 0123456789abcdef... downloading",
	       "still downloading: still provisioning");
	ok(!r.exists, "nothing created while it waits");
	is_str(pass(c, out, sizeof(out)), "running ", "created and started once it is ready");

	conv_submit(c, spec(2, BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED));
	is_str(pass(c, out, sizeof(out)),
	       "running Stopping: waiting for the guest to shut down (then forced)",
	       "stop in progress: the state stays, last_error is the reason");
	is_str(pass(c, out, sizeof(out)),
	       "running Stopping: waiting for the guest to shut down (then forced)",
	       "asked again on the next pass");
	is_str(pass(c, out, sizeof(out)), "stopped ", "stopped once the stop completes");

	r.start_fails = true;
	conv_submit(c, spec(3, BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING));
	is_str(pass(c, out, sizeof(out)),
	       "error start failed: internal error: target managed='no' but specified dev doesn't exist",
	       "a failed start reports the runtime's last_error");
	conv_free(c);
}

static void *run(void *arg)
{
	conv_run(arg);
	return NULL;
}

static void test_poke(void)
{
	struct srt r = {.base.ops = &s_ops};
	struct conv *c = conv_new(&r.base);
	pthread_t t;
	int before;
	int64_t until;

	pthread_create(&t, NULL, run, c);
	until = mono_ms() + 5000;
	while (atomic_load(&r.lists) < 1 && mono_ms() < until)
		usleep(10000);
	before = atomic_load(&r.lists);
	ok(before >= 1, "the converge thread made its first pass");
	conv_poke(c);
	until = mono_ms() + 5000;  /* well inside the 10 s interval */
	while (atomic_load(&r.lists) == before && mono_ms() < until)
		usleep(10000);
	ok(atomic_load(&r.lists) > before, "conv_poke: a pass now, not at the next interval");
	conv_stop(c);
	pthread_join(t, NULL);
	conv_free(c);
}

int main(void)
{
	test_waits();
	test_poke();
	done_testing();
}
