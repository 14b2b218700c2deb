/* converge.h: the converge pass and the converge thread.
 *
 * One pass compares the desired state (the applied NodeSpec) with the
 * actual state (the runtime's list) and acts to close the difference,
 * idempotently. The converge thread and its runtime workers (slow calls
 * off the pass, conv_set_concurrency) are the only callers of the runtime,
 * never two at once for one instance; other threads hand it specs
 * (conv_submit) and read what it found (conv_snapshot), both under the
 * conv's lock. */
#ifndef BC_AGENT_CONVERGE_H
#define BC_AGENT_CONVERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "runtime.h"

#define CONV_INTERVAL_MS 10000
#define CONV_STATE_MAX 16
#define CONV_CMD_ID_MAX 128
#define CONV_ERROR_MAX 256

/* One InstanceStatus. state: provisioning|starting|running|paused|stopped|
 * error|deleted. desired and once are not reported: they tell the report
 * thread what a delta report must carry. */
struct conv_item {
	char id[RT_ID_MAX + 1];
	char state[CONV_STATE_MAX];
	char reason[RT_REASON_MAX];
	int desired;   /* the applied spec's Bc__Node__V1__DesiredState; 0: not named */
	int64_t guest_ready_at; /* running/paused: unix ms its guest reported up; 0: not */
	char rebound_ref[80];   /* the identity_rebind_ref applied to it (rebind.h); "": none */
	bool once;     /* a one-shot "deleted" entry (destroyed, no longer named) */
};

/* One CommandResult waiting to be reported. */
struct conv_result {
	char id[CONV_CMD_ID_MAX + 1];
	bool ok;
	char error[CONV_ERROR_MAX];
};

/* What the next report says; a snapshot owned by whoever took it. */
struct conv_status {
	uint64_t seq;                /* changes whenever anything below changes */
	uint64_t applied_generation; /* spec the last pass converged; 0: none yet */
	bool complete;               /* the last pass listed the runtime */
	struct conv_item *items;     /* sorted by id */
	size_t n_items;
	bool has_storage;
	struct rt_storage storage;
	struct conv_result *results;
	size_t n_results;
};

struct conv;

/* A converger over rt (borrowed; must outlive the conv). Never NULL. */
struct conv *conv_new(struct rt *rt);

/* Free; the converge thread must have ended. NULL-safe. */
/* Instance networking for the passes (net.c); before the converge thread
 * starts. Each pass then runs net_converge after destroying unnamed
 * instances and before creating or starting any. */
struct net;
void conv_set_net(struct conv *c, struct net *net);

/* The guests' up marks (guestready.h): reported with each running or
 * paused instance, cleared when a boot begins or the instance is destroyed.
 * Before the converge thread starts; NULL (the default): none. */
struct guestready;
void conv_set_guestready(struct conv *c, struct guestready *gr);

/* The host's volumes (volumes.h): each pass makes, grows and wipes them
 * before creating instances, and reports their store. Before the converge
 * thread starts; NULL (the default): no volumes, no store reported. */
struct vol;
void conv_set_volumes(struct conv *c, struct vol *vol);

/* Snapshots (snapshot.h): a create whose spec has restore_from fetches
 * its object and asks the runtime to restore it; each pass collects the
 * objects no spec restores from. Before the converge thread starts. */
struct snap;
void conv_set_snapshots(struct conv *c, struct snap *snap);

/* Identity rebinds (rebind.h): a pass queues a job for each running
 * instance whose spec names a bundle not yet applied, reports the applied
 * ref with each instance, and forgets instances no longer named. Before
 * the converge thread starts; NULL (the default): none. */
struct rebind;
void conv_set_rebind(struct conv *c, struct rebind *rb);

void conv_free(struct conv *c);

/* Run slow runtime calls (a create with its first start, a start or stop of
 * an existing instance, a destroy) on n worker threads off the pass, so
 * that one slow call never holds the other instances' pauses, resumes,
 * deletions and guard reloads (converge.c, "jobs"). 0 (the default): they
 * run inline in the pass. Once, before the converge thread starts; the
 * workers end with conv_run (after the calls under way) or conv_free. */
void conv_set_concurrency(struct conv *c, unsigned n);

/* Hand a spec to the converge thread; takes ownership. A spec still
 * pending (not yet converged) is replaced and freed. Wakes the thread. */
void conv_submit(struct conv *c, Bc__Node__V1__NodeSpec *spec);

/* One converge pass: takes the pending spec if any, lists the runtime,
 * creates/starts/pauses/stops/destroys what differs, publishes the status.
 * Without any spec yet it only lists (nothing is created or destroyed).
 * Converge thread only. 0, or the runtime's -errno when listing failed
 * (the status is then published incomplete). */
int conv_pass(struct conv *c);

/* Converge thread body: a pass now, on every conv_submit, and every
 * CONV_INTERVAL_MS, until conv_stop. */
void conv_run(struct conv *c);

/* Ask for a pass now (something a create waited for is ready). Any
 * thread. */
void conv_poke(struct conv *c);

/* Ask conv_run and conv_wait_change to return. Any thread. */
void conv_stop(struct conv *c);
/* True once conv_stop was called. Any thread. */
bool conv_stopping(struct conv *c);

/* Copy of the current status (conv_status_clear frees it): the published
 * items plus the one-shot "deleted" entries, sorted by id. Any thread. */
void conv_snapshot(struct conv *c, struct conv_status *ret);
/* Free a snapshot's arrays and zero it. */
void conv_status_clear(struct conv_status *s);

/* Wait until the status seq differs from seen_seq, conv_stop, or
 * timeout_ms passed. True if it changed. Any thread. */
bool conv_wait_change(struct conv *c, uint64_t seen_seq, int timeout_ms);

/* A report built from the snapshot with this seq was delivered: drop the
 * one-shot entries it carried (instances destroyed because the spec no
 * longer names them, command results). A contact with a controller for
 * the fence. */
void conv_report_sent(struct conv *c, uint64_t seq);

/* Fencing (docs/operations.md, "What bcd does when cut off"). After
 * after_ms without a contact with a controller (conv_contact, a delivered
 * report) a pass fences the host: it pauses (CONV_FENCE_PAUSE) or stops
 * (CONV_FENCE_STOP) every running instance, sets the taps of the spec's
 * instances down, and reports them with a "Fenced: ..." reason; while
 * fenced no spec is applied. The fence lifts only once a report carrying
 * the fenced states was delivered and the controller confirmed this
 * node's spec (conv_confirm); the pass that lifts it converges the spec
 * as usual: instances it still names resume and their taps come up, the
 * others are destroyed. Set before the converge thread starts. */
enum conv_fence { CONV_FENCE_OFF, CONV_FENCE_PAUSE, CONV_FENCE_STOP };
void conv_set_fence(struct conv *c, enum conv_fence policy, int64_t after_ms);
/* "pause", "stop", "off" (agent config key fence); -EINVAL otherwise. */
int conv_fence_parse(const char *s, enum conv_fence *ret);
/* A controller answered (a message on the spec stream). Any thread. */
void conv_contact(struct conv *c);
/* The controller's spec for this node is the one persisted (a spec
 * accepted, or a report acked with the generation we hold). Any thread. */
void conv_confirm(struct conv *c);
/* True while the host is fenced. Any thread. */
bool conv_fenced(struct conv *c);

/* What Agent.Tunnel needs of one instance of the applied spec: its guest
 * address (the first NIC's IPAM IPv4, "" if none), the host's address on
 * the instances' bridge (the spec's IPAM gateway), its desired state and
 * its state as the last pass published ("" if not seen yet). */
struct conv_target {
	char guest[64];
	char host[64];
	char state[CONV_STATE_MAX];
	int desired;
};
/* 0, or -ENOENT if the applied spec does not name id (or deletes it). Any
 * thread. */
int conv_tunnel_target(struct conv *c, const char *id, struct conv_target *ret);

/* The guest-up signal's view of the applied spec (guestsig.c): one entry
 * per address (IPv4 and IPv6 of every NIC) of every instance the spec
 * names and does not delete, with its state as the last pass published
 * ("" if not seen yet); gw: the spec's IPAM gateway ("" if none). *ret
 * malloc'd (NULL when none). Any thread. */
struct conv_guest {
	char id[RT_ID_MAX + 1];
	char addr[64];
	char state[CONV_STATE_MAX];
	char idref[80];   /* InstanceSpec.identity_bootstrap_ref ("": none) */
};
void conv_guests(struct conv *c, char gw[64], struct conv_guest **ret, size_t *ret_n);

/* Queue a command result for the next report. Any thread. */
void conv_add_result(struct conv *c, const char *id, bool ok, const char *error);

#endif
