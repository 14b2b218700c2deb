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

#endif
