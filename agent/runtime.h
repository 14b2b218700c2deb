/* runtime.h: the VM runtimes behind one small vtable.
 *
 * A runtime owns VMs ("instances") on this host: it lists them, creates,
 * starts, pauses, resumes, stops and destroys them, and adopts the ones a
 * previous bcd left running. The converge thread and its runtime workers
 * (converge.h, conv_set_concurrency) call a runtime, several calls at once
 * but never two for one instance: implementations guard what their
 * instances share (the connection, admission, node settings), and
 * last_error answers for the calling thread's last operation. Every
 * operation is idempotent where the runtime allows it (stopping a stopped
 * instance is 0).
 *
 * Implementations embed `struct rt` as their first member. Operations return
 * 0 or a negative errno; create returns -ENOSPC when host admission refuses
 * the instance, with `reason` set to "ResourcesExhausted: <what>", and
 * -EAGAIN when something it needs is not there yet (an image download or
 * the boot data failed): the instance is reported provisioning with the
 * reason and the create is retried on the next pass. */
#ifndef BC_AGENT_RUNTIME_H
#define BC_AGENT_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"

#define RT_ID_MAX 64       /* instance ids: [A-Za-z0-9_.-], not starting with '.' */
#define RT_REASON_MAX 160  /* InstanceStatus.reason buffers */

enum rt_state {
	RT_STATE_STOPPED,   /* defined, not running (also: created, never started) */
	RT_STATE_RUNNING,
	RT_STATE_PAUSED,
	RT_STATE_ERROR,     /* the runtime knows it but cannot say more */
};

/* One instance as the runtime sees it. */
struct rt_instance {
	char id[RT_ID_MAX + 1];
	enum rt_state state;
};

/* What a runtime can do; capabilities advertised in reports derive from it. */
struct rt_traits {
	bool snapshot;          /* can capture and restore snapshots */
	bool network_policy;    /* enforces InstanceSpec.network_policy */
	bool ssh_host_only;     /* enforces InstanceSpec.ssh_from_host_only */
	bool volumes;           /* attaches VolumeSpec volumes */
};

/* Fetch an instance's boot data (Node.GetBootData): 0 with *ret malloc'd
 * (the user-data bytes), or -errno with reason (RT_REASON_MAX). */
typedef int (*rt_boot_data_fn)(void *ctx, const char *instance_id, const char *ref, void **ret,
			       size_t *ret_len, char *reason);

/* What a runtime is opened with (borrowed for the call only). */
struct rt_config {
	const char *state_dir;          /* bcd's state directory */
	uint32_t capacity_vcpus;        /* host admission limits */
	uint64_t capacity_memory_mib;
	uint64_t capacity_disk_gib;
	/* real runtimes (libvirt) */
	const char *node_id;            /* marks this node's domains */
	const char *libvirt_uri;        /* default qemu:///system */
	const char *data_dir;           /* images, instances; default state_dir/data */
	const char *volumes_dir;        /* volumes (volumes.h); default data_dir/volumes */
	const char *image_ca_file;      /* NULL/"": system CAs */
	uint64_t image_max_bytes;       /* 0: 64 GiB */
	const char *domain_type;        /* auto | kvm | qemu */
	uint32_t stop_timeout_ms;       /* graceful shutdown wait; 0: 30 s */
	rt_boot_data_fn boot_data;      /* NULL: no boot data fetched */
	void *boot_data_ctx;
	/* Called from another thread when something a create waited for is
	 * ready (an image download ended): worth a converge pass now. */
	void (*wake)(void *ctx);
	void *wake_ctx;
	/* The guests' up marks (guestready.h), for a runtime that learns of
	 * them itself (the fake: its guests come up when started). May be NULL. */
	struct guestready *guest_ready;
};

#define RT_WARNING_MAX 256  /* HostWarning.message */

/* The volume store numbers of StatusReport.volume_storage, in bytes, and
 * the host warning "volume-storage" ("": none). Compared whole (memcmp):
 * zero it before filling. */
struct rt_storage {
	uint64_t available;
	uint64_t reserved;
	uint64_t outstanding;
	uint64_t committed;
	uint64_t allocated;
	char warning[RT_WARNING_MAX];
};

struct rt;

struct runtime_ops {
	const char *name;
	struct rt_traits traits;
	/* Open the runtime: *ret is owned, release with close. */
	int (*open)(const struct rt_config *cfg, struct rt **ret);
	/* Every instance the runtime has; *ret malloc'd (may be NULL if
	 * *ret_n is 0), freed by the caller with free(). */
	int (*list)(struct rt *rt, struct rt_instance **ret, size_t *ret_n);
	/* Define the instance (state stopped). -EEXIST if it exists, -ENOSPC
	 * with reason on admission refusal, -EINVAL for a spec it cannot run.
	 * reason (RT_REASON_MAX bytes) may be filled on any failure. */
	int (*create)(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec, char *reason);
	/* Take over an existing instance found at start-up (reattach monitors,
	 * reapply live settings). Never stops or restarts it. */
	int (*adopt)(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec);
	/* Apply the live-changeable settings of spec (network policy,
	 * ssh_from_host_only) to an existing instance; no-op if unchanged.
	 * May be NULL. */
	int (*update)(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec);
	int (*start)(struct rt *rt, const char *id);
	int (*pause)(struct rt *rt, const char *id);
	int (*resume)(struct rt *rt, const char *id);
	/* -EINPROGRESS: under way (a guest shutting down); the converge pass
	 * keeps the current state, reports last_error as the reason and asks
	 * again on the next pass. */
	int (*stop)(struct rt *rt, const char *id);
	/* Remove the instance and everything it owns; 0 if already gone. */
	int (*destroy)(struct rt *rt, const char *id);
	/* The message of the last failed start/pause/resume/stop/destroy
	 * (the reason reported with it), or NULL. May be NULL. */
	const char *(*last_error)(struct rt *rt);
	/* The node-wide part of the spec a pass converges (pool gateway...),
	 * before any create of that pass. May be NULL. */
	void (*node)(struct rt *rt, const Bc__Node__V1__NodeSpec *spec);
	/* Tell a running or paused instance that its disk with this serial
	 * (an attached volume) is now bytes long, so the guest sees it at
	 * once. -ENOENT: no such instance or disk. May be NULL. */
	int (*block_resize)(struct rt *rt, const char *id, const char *serial, uint64_t bytes);
	/* Capture instance id (running or paused) into the new file path
	 * (mode 0600), one self-contained object: its memory and disk with
	 * include_memory, else its disk only. The instance is left in the
	 * state it was in; *ret_paused_ms is how long its guest was paused
	 * for the capture (0: not at all). -ENOENT no such instance,
	 * -EOPNOTSUPP what this runtime cannot capture, -EBUSY a state it
	 * cannot capture in; reason (RT_REASON_MAX) says why. NULL unless
	 * traits.snapshot. */
	int (*capture)(struct rt *rt, const char *id, bool include_memory, const char *path,
		       int64_t *ret_paused_ms, char *reason);
	/* Create spec's instance from the verified object at path (its
	 * spec->restore_from): resumed from its memory (*ret_state running)
	 * for a memory snapshot, else defined from its disk to boot fresh
	 * (*ret_state stopped). Errors as create's; -EBADMSG for an object
	 * that is not one of this runtime's. NULL unless traits.snapshot. */
	int (*restore)(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec, const char *path,
		       enum rt_state *ret_state, char *reason);
	/* A capture's work directory (capture's path + ".d") that a killed
	 * bcd left: give back what the capture took from its instance (the
	 * libvirt runtime restores a source it had saved and not yet
	 * restored), before the caller removes the directory. May be NULL. */
	void (*capture_recover)(struct rt *rt, const char *workdir);
	/* Identity rebind (docs/rebind.md): give the
	 * running memory restore spec->id its own identity. Hot-add a NIC for
	 * each of spec->nics (its own MAC, on its tap) and a raw disk of
	 * RB_DISK_BYTES with virtio serial "bc-rebind" holding the len bytes
	 * of tar at offset 0 (zeros after), wait up to 2 minutes for
	 * "BCREBOUND <nonce>\n" at the start of the disk's last RB_ACK_BYTES,
	 * then remove the disk and zero and delete its file, acknowledged or
	 * not. 0: acknowledged; -ETIMEDOUT: no acknowledgement; -EOPNOTSUPP:
	 * this runtime cannot (yet); -ENOENT: no such instance; other -errno.
	 * reason (RT_REASON_MAX) says why on failure. Runs on a runtime worker,
	 * never two for one instance. NULL: as -EOPNOTSUPP. */
	int (*rebind)(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec, const void *tar,
		      size_t len, const char *nonce, char *reason);
	/* Release the handle; instances keep running. NULL-safe. */
	void (*close)(struct rt *rt);
};

struct rt {
	const struct runtime_ops *ops;
};

/* The fake runtime (runtime_fake.c): records and reports, runs nothing. */
extern const struct runtime_ops rt_fake_ops;
/* VMs through libvirt (runtime_libvirt.c). */
extern const struct runtime_ops rt_libvirt_ops;

/* The runtime called name ("fake", ...), or NULL if this build has none. */
const struct runtime_ops *rt_lookup(const char *name);

/* rt_lookup + open. -ENOENT for an unknown runtime name. */
int rt_open(const char *name, const struct rt_config *cfg, struct rt **ret);

/* Close a runtime handle. NULL-safe. */
void rt_close(struct rt *rt);

/* "running", "paused", "stopped", "error". */
const char *rt_state_name(enum rt_state s);

/* Parse rt_state_name's output; -EINVAL for anything else. */
int rt_state_parse(const char *s, enum rt_state *ret);

/* The capability strings of traits ("instance.network-policy", ...) into
 * out (static strings); returns how many were written (at most max). */
size_t rt_capabilities(const struct rt_traits *t, const char **out, size_t max);

/* True if id can name an instance (and a file): 1..RT_ID_MAX chars of
 * [A-Za-z0-9_.-], not starting with '.'. */
bool rt_id_valid(const char *id);

#endif
