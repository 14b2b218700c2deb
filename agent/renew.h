/* renew.h: the node certificate's renewal before it expires. */
#ifndef BC_AGENT_RENEW_H
#define BC_AGENT_RENEW_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/backoff.h"
#include "agent/join.h"
#include "rpc.h"

struct renew {
	const char *state_dir;
	unsigned percent;             /* cert_renew_percent */
	rpc_client *client;           /* mTLS with creds */
	const struct join_creds *creds;
	struct backoff_stop *stop;
	void (*renewed)(void *ctx);   /* called once the new pair is on disk */
	void *ctx;
};

/* When a certificate issued at issued_ms and expiring at not_after_ms is
 * renewed: once percent of its life has passed. Pure. */
int64_t renew_due_ms(int64_t issued_ms, int64_t not_after_ms, unsigned percent);

/* The renewal thread's body: sleeps until the certificate is due, renews
 * it (retrying with backoff, a warning each time, an error once it has
 * expired), calls r->renewed and returns; returns at stop too. */
void renew_run(struct renew *r);

#endif
