/* test_agent_rtlibvirt.c: the libvirt runtime's state mapping
 * (rt_libvirt_state): libvirt's domain states and reasons to rt_state. The
 * runtime against a real libvirtd is tests/e2e/runtime.t. */
#include <libvirt/libvirt.h>

#include "agent/runtime_libvirt.h"
#include "tap.h"

int main(void)
{
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
	done_testing();
}
