/* doctor.h: the control plane's self-check (doctor.c): `bc-controller
 * doctor` and the admin method Doctor.Run. */
#ifndef BC_CTL_DOCTOR_H
#define BC_CTL_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "db.h"
#include "rpc.h"

/* A volume store report older than this is stale (seconds). */
#define DOCTOR_STORAGE_STALE_SECONDS 3600
/* A host that reported within this long counts as connected (seconds). */
#define DOCTOR_CONNECTED_SECONDS 300

struct doctor_finding {
	char check[64];
	char severity[8];       /* warn | fail */
	char node_id[64];
	char message[256];
};

/* Run every check against d: *ret (malloc'd, *ret_n entries; NULL when
 * none). 0 or -errno (nothing returned). */
int doctor_run(struct db *d, struct doctor_finding **ret, size_t *ret_n);

/* `bc-controller doctor`: print each finding ("fail|warn check node:
 * message") or "ok"; 0 when nothing failed, -EIO when something did or the
 * database could not be read. */
int doctor_command(struct ctl_app *app);

/* The handlers of bc.admin.v1.Doctor (server.c's table). */
const struct rpc_handler *doctor_handlers(size_t *ret_n);

#endif
