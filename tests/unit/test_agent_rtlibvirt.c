/* test_agent_rtlibvirt.c: the libvirt runtime's state mapping
 * (rt_libvirt_state): libvirt's domain states and reasons to rt_state; its
 * list() against libvirt's in-process test driver (test:///default): the
 * whole list while no call is under way, the known domains one by one
 * while one is, never asking about the domain a call works on. The runtime
 * against a real libvirtd is tests/e2e/runtime.t. */
#include <errno.h>
#include <pthread.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/domxml.h"
#include "agent/runtime_libvirt.h"
#include "log.h"
#include "tap.h"

#define URI "test:///default"

static void quiet(void *data, virErrorPtr e)
{
}

/* Define NAME in the test driver with bc's metadata naming NODE. */
static virDomainPtr define(virConnectPtr c, const char *name, const char *node)
{
	char xml[1024];

	snprintf(xml, sizeof(xml),
		 "<domain type='test'><name>%s</name><memory>65536</memory>"
		 "<metadata><bc:instance xmlns:bc='%s'><bc:node>%s</bc:node></bc:instance>"
		 "</metadata><os><type>hvm</type></os></domain>",
		 name, DOMXML_NS, node);
	return virDomainDefineXML(c, xml);
}

struct lister {
	struct rt *rt;
	int e;
	size_t n;
};

static void *list_in_thread(void *arg)
{
	struct lister *l = arg;
	struct rt_instance *v = NULL;

	l->e = l->rt->ops->list(l->rt, &v, &l->n);
	free(v);
	return NULL;
}

/* "id state" of each listed instance, sorted, space-separated. */
static char *listed(struct rt *rt, int *err)
{
	struct rt_instance *v = NULL;
	static char out[1024];
	size_t n = 0;

	out[0] = '\0';
	*err = rt->ops->list(rt, &v, &n);
	for (size_t i = 0; i < n; i++)  /* few: a selection sort */
		for (size_t k = i + 1; k < n; k++)
			if (strcmp(v[k].id, v[i].id) < 0) {
				struct rt_instance t = v[i];
				v[i] = v[k];
				v[k] = t;
			}
	for (size_t i = 0; i < n; i++)
		snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s %s", i ? ", " : "",
			 v[i].id, rt_state_name(v[i].state));
	free(v);
	return out;
}

static void test_list(void)
{
	char dir[] = "/tmp/bcd-rtlv-XXXXXX";
	struct rt_config cfg = {.node_id = "node_a", .libvirt_uri = URI, .domain_type = "qemu",
				.capacity_vcpus = 4, .capacity_memory_mib = 4096};
	struct rt *rt = NULL;
	virConnectPtr c;
	virDomainPtr d1, d2, d3, other;
	int e;

	virSetErrorFunc(NULL, quiet);
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	cfg.state_dir = dir;
	c = virConnectOpen(URI);  /* the same in-process driver state as the runtime's */
	ok(c != NULL, "the test driver opens");
	if (!c)
		return;
	d1 = define(c, "inst_1", "node_a");
	d2 = define(c, "inst_2", "node_a");
	other = define(c, "inst_x", "node_b");
	ok(d1 && d2 && other, "domains of this node and of another defined");
	e = rt_libvirt_ops.open(&cfg, &rt);
	is_int(e, 0, "the runtime opens on %s", URI);
	if (e < 0)
		return;
	is_str(listed(rt, &e), "inst_1 stopped, inst_2 stopped",
	       "no call under way: the whole list, this node's domains only");
	is_int(e, 0, "... listed");

	/* a call for inst_1 under way (a start holding its lock in libvirtd) */
	rt_libvirt_call_begin(rt, "inst_1");
	virDomainCreate(d1);
	virDomainCreate(d2);
	d3 = define(c, "inst_3", "node_a");
	is_str(listed(rt, &e), "inst_1 stopped, inst_2 running",
	       "a call under way: inst_1 is not asked (its last state), inst_2 is");
	is_int(e, 0, "... listed");
	virDomainDestroy(d2);
	virDomainUndefine(d2);
	is_str(listed(rt, &e), "inst_1 stopped", "a known domain undefined meanwhile is gone");
	rt_libvirt_call_end(rt, "inst_1");

	is_str(listed(rt, &e), "inst_1 running, inst_3 stopped",
	       "no call under way again: the whole list finds the domain defined meanwhile");
	rt_libvirt_call_begin(rt, "inst_3");
	virDomainCreate(d3);
	is_str(listed(rt, &e), "inst_1 running, inst_3 stopped",
	       "which is known from then on, and not asked while a call works on it");
	rt_libvirt_call_end(rt, "inst_3");
	is_str(listed(rt, &e), "inst_1 running, inst_3 running", "... and asked again after");

	/* a connection per calling thread: a call on one waits for the calls
	 * before it on that one (a domain start, seconds) */
	{
		size_t before = rt_libvirt_connections(rt);
		struct lister l = {.rt = rt};
		pthread_t t;
		listed(rt, &e);
		is_int(rt_libvirt_connections(rt), before, "this thread's calls reuse its connection");
		ok(pthread_create(&t, NULL, list_in_thread, &l) == 0 && pthread_join(t, NULL) == 0,
		   "another thread calls");
		is_int(l.e, 0, "... and lists");
		is_int(l.n, 2, "... this node's two domains");
		is_int(rt_libvirt_connections(rt), before + 1, "... on a connection of its own");
	}
	is_int(rt->ops->pause(rt, "inst_x"), -ENOENT, "another node's domain is never touched");
	is_str(virDomainGetName(other), "inst_x", "(it is still there)");
	virDomainFree(d1);
	virDomainFree(d3);
	virDomainFree(other);
	virDomainFree(d2);
	rt_libvirt_ops.close(rt);
	virConnectClose(c);
	for (size_t i = 0; i < 4; i++) {  /* the runtime's empty data_dir, then dir */
		static const char *const sub[] = {"data/images", "data/instances", "data/volumes",
						  "data"};
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", dir, sub[i]);
		rmdir(path);
	}
	ok(rmdir(dir) == 0, "nothing left in %s", dir);
}

int main(void)
{
	log_init("test", LOG_LVL_ERROR);
	static const struct {
		int state, reason;
		enum rt_state want;
		const char *what;
	} cases[] = {
		{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_BOOTED, RT_STATE_RUNNING, "running"},
		{VIR_DOMAIN_BLOCKED, 0, RT_STATE_RUNNING, "blocked on a resource: running"},
		{VIR_DOMAIN_SHUTDOWN, 0, RT_STATE_RUNNING, "shutting down: still running"},
		{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_USER, RT_STATE_PAUSED, "paused by us"},
		{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_STARTING_UP, RT_STATE_PAUSED, "starting up"},
		{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_IOERROR, RT_STATE_ERROR, "paused on I/O error"},
		{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_CRASHED, RT_STATE_ERROR, "paused after a crash"},
		{VIR_DOMAIN_PMSUSPENDED, 0, RT_STATE_PAUSED, "guest suspended itself"},
		{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_SHUTDOWN, RT_STATE_STOPPED, "shut off"},
		{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_CRASHED, RT_STATE_STOPPED, "off after crash"},
		{VIR_DOMAIN_CRASHED, 0, RT_STATE_ERROR, "crashed"},
		{VIR_DOMAIN_NOSTATE, 0, RT_STATE_ERROR, "no state"},
		{99, 0, RT_STATE_ERROR, "unknown state"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		is_str(rt_state_name(rt_libvirt_state(cases[i].state, cases[i].reason)),
		       rt_state_name(cases[i].want), "%s", cases[i].what);
	test_list();
	done_testing();
}
