/* net.h: the agent's instance networking, as the converge pass and the
 * guard-check thread see it (net.c). With `network = nftables` each pass
 * ensures the pool's bridge, builds the ruleset from the spec, loads it in
 * one transaction when it changed, then ensures the taps: all before any
 * instance is created or started. With `network = none` nothing is done
 * (the fake runtime's default: tests without root networking). */
#ifndef BC_AGENT_NET_H
#define BC_AGENT_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "nft.h"

/* the spec's "every 5 seconds", checked a little more often so that a
 * change is repaired within 5 s of happening */
#define NET_GUARD_INTERVAL_MS 4500

struct net;

/* mode: "nftables" or "none"; -EINVAL otherwise. */
int net_open(const char *mode, struct net **ret);

/* The bound on MACs the pool's bridge learns (from uplinks: taps never
 * learn), 0 = none */
#define NET_FDB_MAX_LEARNED_DEFAULT 4096

/* Set the bridge's bound on learned MACs and the host ports open to guests
 * (nft_net_host_ports's list) before the first converge. -EINVAL for a
 * malformed list (nothing changed). */
int net_set_limits(struct net *n, uint32_t fdb_max_learned, const char *host_ports);

/* Stops the guard thread; the loaded ruleset stays in the kernel. NULL-safe. */
void net_close(struct net *n);

/* True when this agent enforces network policies (mode nftables and the
 * first load did not fail). */
bool net_enforces(const struct net *n);

/* One converge step for spec: bridge, ruleset, taps. Every instance that
 * must not run (its policy cannot be expressed, its rules failed to load,
 * its tap cannot be made) is passed to fail with the reason; the previous
 * ruleset stays in force for the others. 0, or a negative errno when the
 * whole step failed (every instance with NICs has been passed to fail). */
int net_converge(struct net *n, const Bc__Node__V1__NodeSpec *spec, nft_fail_fn fail,
		 void *data);

/* Fencing: with cut, every instance tap's frames, from and to it, are
 * dropped (their f-/t- chains hold one drop, as for a refused instance),
 * at once if a ruleset is loaded and at every converge pass until called
 * again without cut; the next pass then restores the spec's policies.
 * 0, or a negative errno if the load failed (the previous rules stay).
 * Any thread; a no-op without network = nftables. */
int net_cut_all(struct net *n, bool cut);

/* One guard check: the kernel's tables against the loaded ruleset (rule
 * and chain counts). 0 if they match (or nothing is loaded), 1 if they
 * differed and the ruleset was reloaded, negative errno if the reload
 * failed (addresses stay untrusted). Logs what it finds. */
int net_guard_check(struct net *n);

/* Run net_guard_check every interval_ms on a thread until net_close. */
int net_guard_start(struct net *n, int interval_ms);

/* False from a detected difference until the reload succeeded: the
 * metadata service and tunnels must not trust instance addresses then. */
bool net_trusted(struct net *n);

/* How many times the guard check reloaded a tampered ruleset (a metric). */
uint64_t net_reloads(struct net *n);

/* How many taps the converge steps hold as made (each once): for tests,
 * from the converge thread. */
size_t net_taps_held(const struct net *n);

/* Tests: the next load that sends a batch sends it broken (nft_batch_break),
 * so the kernel really refuses it. */
void net_test_break_next_load(struct net *n);

#endif
