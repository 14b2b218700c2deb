/* guest_ready.h: the guest-up signal's wire constants, shared by the
 * controller (controller/bootdata.c renders the guest's side) and bcd
 * (agent/guestsig.c serves it). docs/sandboxes.md, "How bcd knows the
 * guest is up".
 *
 * Once per boot, after cloud-init's final stage, each guest sends
 *   POST /bc/ready/<instance id> HTTP/1.1
 * to TCP port BC_GUEST_READY_PORT of its IPv4 default gateway (the pool's
 * IPAM gateway, which bcd holds on the instances' bridge). A fixed port:
 * the controller renders it into every instance's user data, so it cannot
 * vary per node. */
#ifndef BC_COMMON_GUEST_READY_H
#define BC_COMMON_GUEST_READY_H

#define BC_GUEST_READY_PORT 9469
#define BC_GUEST_READY_PATH "/bc/ready/"

#endif
