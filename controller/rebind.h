/* rebind.h: a memory restore's own identity (rebind.c; docs/snapshots.md,
 * "A restore's own SSH identity"). */
#ifndef BC_CTL_REBIND_H
#define BC_CTL_REBIND_H

#include <stdbool.h>
#include <stdint.h>

#include "db.h"
#include "err.h"
#include "sealed.h"

struct sshcert_ca;

/* What one bundle is sealed for. */
struct rebind_in {
	const char *instance_id, *tenant_id;
	const char *account;               /* the sandbox account */
	const struct sshcert_ca *host_ca;  /* certifyHostKey: a fresh host key; NULL: none */
};

/* Inside the restore's create transaction, after its instance was
 * inserted and its NIC leased: seal the instance's bundle (its principals
 * file, with host_ca a fresh host key and certificate, its NIC's MAC,
 * addresses and gateway) and record it in identity_rebind_ref (and
 * rebind_cert_valid_before). 0 or the error to roll back with. */
int rebind_seal(struct db *d, const struct rebind_in *in, bc_error *err);

/* Whom exec signs for on instance_id: itself, or for a memory restore
 * not yet rebound the instance whose identity its memory holds; and that
 * instance's host certificate (certified, its end in epoch ms). */
struct rebind_identity {
	char principal_instance[64];
	bool host_certified;
	int64_t host_cert_valid_before;
};
int rebind_exec_identity(struct db *d, const char *instance_id, struct rebind_identity *ret,
			 bc_error *err);

#endif
