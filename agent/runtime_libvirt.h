/* runtime_libvirt.h: the libvirt runtime's pure parts, for unit tests.
 * The runtime itself is rt_libvirt_ops (runtime.h). */
#ifndef BC_AGENT_RUNTIME_LIBVIRT_H
#define BC_AGENT_RUNTIME_LIBVIRT_H

#include "runtime.h"

/* A libvirt domain state and its reason (virDomainGetState) as an
 * rt_state: running (also blocked, shutting down), paused (by request,
 * also PM-suspended), stopped (shut off), error (no state, crashed, or
 * paused by an I/O error, a crash or a shutdown in progress). */
enum rt_state rt_libvirt_state(int state, int reason);

/* What each of the runtime's entry points for one instance does around its
 * work (create, adopt, start, pause, resume, stop, destroy): while a call
 * for id is under way, list() asks libvirt nothing about id and lists the
 * domains it knows one by one (runtime_libvirt.c, lv_list). Exposed so the
 * unit tests can hold a call open. */
void rt_libvirt_call_begin(struct rt *rt, const char *id);
void rt_libvirt_call_end(struct rt *rt, const char *id);

/* How many libvirt connections the runtime holds open: one per thread that
 * called it (runtime_libvirt.c, conn_of). For the unit tests. */
size_t rt_libvirt_connections(struct rt *rt);

#endif
