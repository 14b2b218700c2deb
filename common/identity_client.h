/* identity_client.h: the recognition cache of an enforcement point written
 * in C (docs/identity.md, "Recognition"). A service that asks
 * Identity.Recognize for each source address keeps each answer here for at
 * most the lifetime the answer carries (cacheSeconds) and never longer than
 * IDC_MAX_SECONDS, so that a revoked identity is honoured at most that long;
 * NOT_FOUND is not kept (a sandbox whose epoch just went live is recognized
 * at the next ask). Fixed capacity, least recently stored evicted first;
 * thread-safe. The clock is the caller's (monotonic milliseconds), so the
 * bound is testable. */
#ifndef BC_IDENTITY_CLIENT_H
#define BC_IDENTITY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

#define IDC_MAX_SECONDS 10           /* the spec's upper bound on the cache */
#define IDC_DEFAULT_SECONDS 2

/* One recognition (Identity.Recognize's answer, the fields a service uses). */
struct idc_answer {
	char address[46];
	char sandbox_id[64], tenant_id[64], epoch_id[64];
	char agent[129], task[129], run[129];
};

struct idc_cache;

/* A cache of capacity entries (at least 1) keeping answers at most
 * max_seconds (clamped to 0..IDC_MAX_SECONDS; 0 keeps nothing). NULL when
 * out of memory. */
struct idc_cache *idc_new(size_t capacity, int max_seconds);
/* Free c (NULL-safe). */
void idc_free(struct idc_cache *c);

/* Keep a for min(cache_seconds, the cache's max) from now_ms; an answer
 * for the same address replaces the old one. */
void idc_put(struct idc_cache *c, const struct idc_answer *a, int64_t cache_seconds,
	     int64_t now_ms);
/* 1 and *ret when address has an answer that has not expired at now_ms,
 * else 0. */
int idc_get(struct idc_cache *c, const char *address, int64_t now_ms, struct idc_answer *ret);
/* Forget address (a service told of a revocation out of band). */
void idc_forget(struct idc_cache *c, const char *address);

/* Who is address? From the cache while it holds a live answer, else by
 * Identity.Recognize on client (whose bearer may decide
 * compute:identity:recognize), keeping the answer for its cacheSeconds.
 * 1 and *ret when a live identity holds address, 0 when none does
 * (NOT_FOUND, not kept), <0 (-BC_EDOMAIN, err filled) when the call
 * failed: the caller must not take a failure for "nobody". now_ms is the
 * caller's monotonic clock, as for idc_get; timeout_ms as
 * rpc_client_unary's. */
int idc_recognize(struct idc_cache *c, rpc_client *client, const char *address,
		  int64_t now_ms, int timeout_ms, struct idc_answer *ret, bc_error *err);

#endif
