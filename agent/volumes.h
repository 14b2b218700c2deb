/* volumes.h: sandbox volumes on this host (NodeSpec.volumes).
 *
 * Each volume of the spec is a sparse raw file volumes_dir/<id>.raw (mode
 * 0600). A pass plans (vol_plan, pure) then applies (vol_apply):
 *  - create: only when the filesystem holds every volume's full size
 *    besides the reserve (reserve_percent of the filesystem, at least
 *    reserve_min bytes); made as <id>.raw.tmp, sized, synced, then renamed
 *    without replacing, so a half-made file never counts as made;
 *  - grow: on the same rule, never shrink (a smaller size is logged, the
 *    file untouched);
 *  - wipe: a volume that left the spec, and no instance of the spec
 *    attaches, has its blocks released (punch-hole over the whole file)
 *    before it is unlinked, so no later volume reads its data;
 *  - a leftover <id>.raw.tmp is removed.
 * Files of other names are not bcd's and are left alone.
 *
 * The report's volume_storage (rt_storage) is filled from statvfs of the
 * directory (or a stand-in filesystem of fs_size bytes: the fake runtime's
 * capacity_disk_gib) and the files: committed = the made volumes' sizes,
 * outstanding = their unwritten (sparse) bytes, allocated = their blocks.
 * A volume that cannot be made or grown for room raises the host warning
 * "volume-storage" naming it, the bytes it needs and the bytes free. */
#ifndef BC_AGENT_VOLUMES_H
#define BC_AGENT_VOLUMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bc/node/v1/node.pb-c.h"
#include "runtime.h"

#define VOL_SUFFIX ".raw"
#define VOL_TMP_SUFFIX ".raw.tmp"

/* A volume the spec wants (borrowed strings). */
struct vol_want {
	const char *id;
	uint64_t size;
};

/* A file of the volumes directory, by volume id. */
struct vol_file {
	char id[RT_ID_MAX + 1];
	uint64_t size;        /* st_size */
	uint64_t allocated;   /* st_blocks * 512 */
	bool tmp;             /* <id>.raw.tmp: half made */
};

/* The filesystem the volumes live on, in bytes. */
struct vol_fs {
	uint64_t total;       /* its size */
	uint64_t avail;       /* free for bcd (statvfs f_bavail) */
};

enum vol_act_kind {
	VOL_CREATE,           /* make <id>.raw of size */
	VOL_GROW,             /* ftruncate <id>.raw up to size */
	VOL_WIPE,             /* punch-hole and unlink <id>.raw */
	VOL_DROP_TMP,         /* unlink <id>.raw.tmp */
};

struct vol_action {
	enum vol_act_kind kind;
	char id[RT_ID_MAX + 1];
	uint64_t size;        /* CREATE, GROW: the new size */
	uint64_t from;        /* GROW: the file's size */
};

/* A plan and what the report says once it is applied. */
struct vol_plan {
	struct vol_action *acts;   /* malloc'd */
	size_t n_acts;
	struct rt_storage storage; /* warning filled when n_refused */
	size_t n_refused;          /* volumes not made or grown for room */
	size_t n_shrink;           /* volumes whose spec size is below the file's */
};

/* The reserve kept free on a filesystem of total bytes: percent of it, at
 * least min, at most total. Overflow-safe. Pure. */
uint64_t vol_reserve(uint64_t total, uint32_t percent, uint64_t min);

/* Plan a pass. want: the spec's volumes (NULL/0 with keep_all: no spec yet,
 * nothing created or removed); files: the directory's (any order);
 * in_use: volume ids an instance of the spec attaches (never wiped).
 * Decided in want's order: each volume is made or grown only if the space
 * free over the reserve holds the unwritten bytes of every volume kept and
 * made so far plus its own growth. *ret's arrays are owned (vol_plan_clear).
 * Pure. */
void vol_plan(const struct vol_want *want, size_t n_want, const struct vol_file *files,
	      size_t n_files, const char *const *in_use, size_t n_in_use, bool keep_all,
	      const struct vol_fs *fs, uint32_t reserve_percent, uint64_t reserve_min,
	      struct vol_plan *ret);
void vol_plan_clear(struct vol_plan *p);

/* The volume files of dir (names <id>.raw and <id>.raw.tmp, regular
 * files): *ret malloc'd. 0, or -errno if dir cannot be read. */
int vol_scan(const char *dir, struct vol_file **ret, size_t *ret_n);

/* Apply one action in dir. 0 or -errno (nothing counted as made then). */
int vol_apply(const char *dir, const struct vol_action *a);

/* The path of volume id's file in dir (malloc'd). */
char *vol_path(const char *dir, const char *id);

struct vol_config {
	const char *dir;            /* created 0700 if missing */
	uint32_t reserve_percent;
	uint64_t reserve_min;       /* bytes */
	uint64_t fs_size;           /* 0: statvfs(dir); else a stand-in filesystem
				     * of this size, its free bytes fs_size less
				     * the files' blocks (the fake runtime) */
};

/* Is instance id running or paused, and free for a runtime call now? */
typedef bool (*vol_live_fn)(void *ctx, const char *instance_id);

struct vol;

/* 0 with *ret owned (vol_free), or -errno if dir cannot be made. */
int vol_open(const struct vol_config *cfg, struct vol **ret);
void vol_free(struct vol *v);

/* One pass over spec (NULL: no spec yet, nothing changes): plan, apply,
 * then tell each live instance that attaches a grown volume its new size
 * (rt's block_resize; live decides which; rt or live NULL: nobody told).
 * A failed action is logged once and, without a room warning, becomes the
 * warning. Fills *ret with the report's
 * numbers. 0, or -errno when the directory or filesystem cannot be read
 * (nothing reported then). Converge thread only. */
int vol_pass(struct vol *v, const Bc__Node__V1__NodeSpec *spec, struct rt *rt, vol_live_fn live,
	     void *live_ctx, struct rt_storage *ret);

/* The numbers of the last vol_pass (a fenced pass changes nothing). 0, or
 * -ENOENT before the first. */
int vol_last(const struct vol *v, struct rt_storage *ret);

#endif
