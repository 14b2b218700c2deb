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

/* A memory restore placed anew (its host was lost, or a host refused it)
 * resumes its source's identity again, at the address just leased; the
 * bundle sealed for it named the old one. Inside that transaction: the old
 * bundle goes, and with the sandbox CA and the broker a new one is sealed
 * (a fresh host key, the new address) that its new host delivers, as at
 * create; without them identityRebound stays false. 0 also when the
 * instance had no bundle. */
struct ctl_app;
int rebind_reseal(struct db *d, const struct ctl_app *app, const char *instance_id,
		  bc_error *err);

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
