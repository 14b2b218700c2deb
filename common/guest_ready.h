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

/* Workload identity (docs/identity.md): bcd's attestation endpoint, on
 * the same gateway address, for the guest's identity client
 * (contrib/guest/bc-identity.c). A fixed port for the same reason;
 * the controller writes "GATEWAY:PORT" to BC_IDENTITY_ENDPOINT_FILE in the
 * guest's boot data.
 *   POST /bc/identity/attest     body: the bootstrap value
 *   POST /bc/identity/renew      body: the capability token
 *   POST /bc/identity/state      body: "running:" or "idle:" and the
 *                                capability token (the harness's activity)
 *   GET  /bc/identity/bootstrap  (a warm claim) long-polls for the value */
#define BC_IDENTITY_PORT 9470
#define BC_IDENTITY_ATTEST_PATH "/bc/identity/attest"
#define BC_IDENTITY_RENEW_PATH "/bc/identity/renew"
#define BC_IDENTITY_BOOTSTRAP_PATH "/bc/identity/bootstrap"
#define BC_IDENTITY_STATE_PATH "/bc/identity/state"
#define BC_IDENTITY_ENDPOINT_FILE "/etc/sandbox/identity/endpoint"
/* present on a warm instance of a template with identity: the client
 * waits for the host to hand it the bootstrap value */
#define BC_IDENTITY_HOST_FILE "/etc/sandbox/identity/host"

#endif
