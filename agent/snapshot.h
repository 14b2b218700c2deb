/* snapshot.h: snapshots on the host (docs/snapshots.md, "On the host").
 *
 * Taking one is the command instance.snapshot (commands.c, bulk lane),
 * args {"putUrl": presigned PUT, "includeMemory": bool}: the runtime
 * captures the instance into data_dir/snapshots/.capture.<command id>,
 * the file is streamed to putUrl with its SHA-256 computed on the way
 * (xfer.h: constant memory, at most XFER_PUT_ATTEMPTS attempts, each from
 * byte 0) and removed whatever happened; the result is
 * {"sha256","sizeBytes","cpuModel","pausedMs","runtime","includeMemory"}.
 * A capture left by a killed bcd is removed when bcd starts (the command
 * itself, not retry-safe, is then failed by commands.c).
 *
 * Restoring one: an instance spec with restore_from is created from
 * data_dir/snapshots/<sha256>, downloaded over https through a .part file
 * and renamed only once its digest matched (xfer_get_verified); a file
 * already there is reused, partial files of a killed bcd removed at start
 * and by every GC, and an object no spec restores from any more removed
 * by snap_gc. A snapshot of another runtime, or a memory snapshot of
 * another CPU model, is refused before any download. */
#ifndef BC_AGENT_SNAPSHOT_H
#define BC_AGENT_SNAPSHOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "bc/node/v1/node.pb-c.h"
#include "runtime.h"

#define SNAP_DIR "snapshots"
#define SNAP_CAPTURE_PREFIX ".capture."
#define SNAP_URL_MAX 8192
#define SNAP_HOLD_MS 60000   /* a failed download is answered from memory this long */

struct snap;

/* What snapshots are opened with (borrowed for the call). */
struct snap_config {
	const char *data_dir;          /* snapshots live in data_dir/snapshots */
	const char *ca_file;           /* snapshot_ca_file; NULL/"": the system's CAs */
	bool allow_http_loopback;      /* snapshot_store_allow_http_loopback_for_tests */
	const char *cpu_model;         /* this node's cpu.model label; NULL/"": unknown */
	uint64_t max_bytes;            /* largest object downloaded without a size_bytes */
	struct rt *rt;                 /* the runtime (borrowed for snap's life) */
	uint32_t retry_delay_ms;       /* between upload attempts; 0: xfer's default */
};

/* Make data_dir/snapshots and remove what a killed bcd left there (its
 * captures and partial downloads, logged). 0 or -errno. */
int snap_open(const struct snap_config *cfg, struct snap **ret);
void snap_free(struct snap *s);

/* The arguments of instance.snapshot, a flat JSON object: putUrl (a
 * string, required), includeMemory (a bool, default true); other keys are
 * ignored. -EINVAL for anything else. *ret_put_url malloc'd. Pure. */
int snap_parse_args(const char *json, char **ret_put_url, bool *ret_include_memory);

/* Run instance.snapshot cmd_id on instance_id: 0 with *result (malloc'd
 * JSON), or -errno with error set ("SnapshotCaptureFailed: ...",
 * "SnapshotUploadFailed: ...", "SnapshotRefused: ...", "UNSUPPORTED: ...");
 * -ECANCELED when *cancel was set (the capture is removed all the same). */
int snap_take(struct snap *s, const char *cmd_id, const char *instance_id, const char *args,
	      const atomic_bool *cancel, char **result, char *error, size_t errlen);

/* Refusals that need no download: 0, or -EINVAL with reason
 * "SnapshotRefused: ..." (RT_REASON_MAX) for another runtime's snapshot,
 * a memory snapshot of another CPU model, a URL that is not https or a
 * digest that is not 64 lowercase hex digits. runtime is this bcd's. Pure. */
int snap_check(const Bc__Node__V1__RestoreFrom *r, const char *runtime, const char *cpu_model,
	       bool allow_http_loopback, char *reason);

/* The verified object of r: 0 with *ret_path (malloc'd) once
 * data_dir/snapshots/<sha256> holds it (downloaded now if it does not);
 * else -errno with reason: snap_check's refusals, "SnapshotDigestMismatch:
 * ..." (-EBADMSG), "SnapshotFetchFailed: ..." (-EIO, -EFBIG). A failure is
 * answered from memory for SNAP_HOLD_MS before the same URL is fetched
 * again. Downloads run one at a time; any thread. */
int snap_fetch(struct snap *s, const Bc__Node__V1__RestoreFrom *r, char **ret_path,
	       char *reason);

/* Remove the objects no instance of spec restores from (a desired-deleted
 * one does not count) and partial downloads of other processes. */
void snap_gc(struct snap *s, const Bc__Node__V1__NodeSpec *spec);

#endif
