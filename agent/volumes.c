/* volumes.c: sandbox volumes as sparse raw files (volumes.h).
 *
 * The planner is pure and decides from numbers alone; the applier touches
 * one file per action; vol_pass glues them for the converge thread. The
 * room rule is bcd's half of the controller's headroom (controller/
 * volumes.c, HEADROOM_SQL): available - reserved - outstanding must hold
 * what a volume still may write, so a host never promises sparse space it
 * does not have. */
#include "volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

struct vol {
	struct vol_config cfg;
	char *dir;                      /* owned copy of cfg.dir */
	struct rt_storage last;
	bool has_last;
	char logged[RT_WARNING_MAX + 64]; /* the last room/shrink message logged */
	char failed[RT_WARNING_MAX];    /* the last failed action logged */
};

/* ---------------------------------------------------------- the plan */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t vol_reserve(uint64_t total, uint32_t percent, uint64_t min)
{
	/* total / 100 * percent without overflow, rounded down */
	uint64_t r = sat_add(sat_mul(total / 100, percent), (total % 100) * percent / 100);

	if (r < min)
		r = min;
	return r > total ? total : r;
}

static int cmp_file(const void *a, const void *b)
{
	const struct vol_file *x = a, *y = b;
	int c = strcmp(x->id, y->id);

	return c ? c : (int)x->tmp - (int)y->tmp;
}

static const struct vol_file *find_made(const struct vol_file *sorted, size_t n, const char *id)
{
	struct vol_file key = {0};

	snprintf(key.id, sizeof(key.id), "%s", id);
	return n ? bsearch(&key, sorted, n, sizeof(*sorted), cmp_file) : NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The ids a file may not be wiped for (wanted or attached), sorted. */
static const char **keep_ids(const struct vol_want *want, size_t n_want,
			     const char *const *in_use, size_t n_in_use)
{
	const char **v = xcalloc(n_want + n_in_use + 1, sizeof(*v));

	for (size_t i = 0; i < n_want; i++)
		v[i] = want[i].id;
	for (size_t i = 0; i < n_in_use; i++)
		v[n_want + i] = in_use[i];
	qsort(v, n_want + n_in_use, sizeof(*v), cmp_str);
	return v;
}

static bool listed(const char *const *sorted, size_t n, const char *id)
{
	return n && bsearch(&id, sorted, n, sizeof(*sorted), cmp_str) != NULL;
}

static void add_act(struct vol_plan *p, enum vol_act_kind kind, const char *id, uint64_t size,
		    uint64_t from)
{
	struct vol_action *a;

	p->acts = xrealloc(p->acts, (p->n_acts + 1) * sizeof(*p->acts));
	a = &p->acts[p->n_acts++];
	*a = (struct vol_action){.kind = kind, .size = size, .from = from};
	snprintf(a->id, sizeof(a->id), "%s", id);
}

/* Room for grow more bytes once need is spoken for. */
static bool fits(uint64_t room, uint64_t need, uint64_t grow)
{
	return need <= room && grow <= room - need;
}

static void refuse(struct vol_plan *p, const char *id, uint64_t needed, uint64_t room,
		   uint64_t need)
{
	if (p->n_refused++ == 0)
		snprintf(p->storage.warning, sizeof(p->storage.warning),
			 "volume %s needs %" PRIu64 " bytes, %" PRIu64 " bytes free over the "
			 "reserve", id, needed, need < room ? room - need : 0);
}

/* The kept files' bytes: what they hold and what they may still write. */
static void plan_files(const struct vol_file *f, size_t n, const struct vol_want *want,
		       size_t n_want, const char *const *in_use, size_t n_in_use, bool keep_all,
		       struct vol_plan *p)
{
	const char **keep = keep_ids(want, n_want, in_use, n_in_use);

	for (size_t i = 0; i < n; i++) {
		if (f[i].tmp) {
			add_act(p, VOL_DROP_TMP, f[i].id, 0, 0);
			continue;
		}
		if (!keep_all && !listed(keep, n_want + n_in_use, f[i].id)) {
			add_act(p, VOL_WIPE, f[i].id, 0, f[i].size);
			continue;
		}
		p->storage.committed = sat_add(p->storage.committed, f[i].size);
		p->storage.allocated = sat_add(p->storage.allocated, f[i].allocated);
		if (f[i].size > f[i].allocated)
			p->storage.outstanding = sat_add(p->storage.outstanding,
							 f[i].size - f[i].allocated);
	}
	free(keep);
}

void vol_plan(const struct vol_want *want, size_t n_want, const struct vol_file *files,
	      size_t n_files, const char *const *in_use, size_t n_in_use, bool keep_all,
	      const struct vol_fs *fs, uint32_t reserve_percent, uint64_t reserve_min,
	      struct vol_plan *p)
{
	struct vol_file *f = xcalloc(n_files ? n_files : 1, sizeof(*f));
	uint64_t room;

	memset(p, 0, sizeof(*p));
	if (n_files)
		memcpy(f, files, n_files * sizeof(*f));
	qsort(f, n_files, sizeof(*f), cmp_file);
	p->storage.available = fs->avail;
	p->storage.reserved = vol_reserve(fs->total, reserve_percent, reserve_min);
	room = fs->avail > p->storage.reserved ? fs->avail - p->storage.reserved : 0;
	plan_files(f, n_files, want, n_want, in_use, n_in_use, keep_all, p);
	for (size_t i = 0; i < n_want && !keep_all; i++) {
		const struct vol_file *m = find_made(f, n_files, want[i].id);
		uint64_t from = m ? m->size : 0;
		uint64_t grow = want[i].size > from ? want[i].size - from : 0;

		if (m && want[i].size < from)
			p->n_shrink++;
		if (!grow && m)
			continue;
		if (!fits(room, p->storage.outstanding, grow)) {
			refuse(p, want[i].id, grow, room, p->storage.outstanding);
			continue;
		}
		add_act(p, m ? VOL_GROW : VOL_CREATE, want[i].id, want[i].size, from);
		p->storage.committed = sat_add(p->storage.committed, grow);
		p->storage.outstanding = sat_add(p->storage.outstanding, grow);
	}
	if (p->n_refused > 1) {
		size_t len = strlen(p->storage.warning);
		snprintf(p->storage.warning + len, sizeof(p->storage.warning) - len,
			 " (%zu volumes wait for room)", p->n_refused);
	}
	free(f);
}

void vol_plan_clear(struct vol_plan *p)
{
	free(p->acts);
	memset(p, 0, sizeof(*p));
}

/* ------------------------------------------------------------ the files */

char *vol_path(const char *dir, const char *id)
{
	return xasprintf("%s/%s" VOL_SUFFIX, dir, id);
}

/* The volume id of a directory entry name, and whether it is half made;
 * false for a name that is not bcd's. */
static bool parse_name(const char *name, struct vol_file *ret)
{
	size_t n = strlen(name), k;

	ret->tmp = n > strlen(VOL_TMP_SUFFIX) &&
		   strcmp(name + n - strlen(VOL_TMP_SUFFIX), VOL_TMP_SUFFIX) == 0;
	k = strlen(ret->tmp ? VOL_TMP_SUFFIX : VOL_SUFFIX);
	if (n <= k || n - k > RT_ID_MAX || strcmp(name + n - k, ret->tmp ? VOL_TMP_SUFFIX :
						  VOL_SUFFIX) != 0)
		return false;
	memcpy(ret->id, name, n - k);
	ret->id[n - k] = '\0';
	return rt_id_valid(ret->id);
}

int vol_scan(const char *dir, struct vol_file **ret, size_t *ret_n)
{
	DIR *d = opendir(dir);
	struct vol_file *v = NULL, f;
	struct dirent *e;
	struct stat st;
	size_t n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		if (!parse_name(e->d_name, &f) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		f.size = (uint64_t)st.st_size;
		f.allocated = sat_mul((uint64_t)st.st_blocks, 512);
		v = xrealloc(v, (n + 1) * sizeof(*v));
		v[n++] = f;
	}
	closedir(d);
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Make id's file of size: <id>.raw.tmp, sized and synced, renamed to
 * <id>.raw only if that does not exist (never written over). */
static int make_file(int dfd, const char *id, uint64_t size)
{
	_cleanup_free_ char *tmp = xasprintf("%s" VOL_TMP_SUFFIX, id);
	_cleanup_free_ char *fin = xasprintf("%s" VOL_SUFFIX, id);
	int fd, e = 0;

	if (size > INT64_MAX)
		return -EFBIG;
	if (unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT)
		return -errno;
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0)
		e = -errno;
	close(fd);
	if (e == 0 && renameat2(dfd, tmp, dfd, fin, RENAME_NOREPLACE) < 0)
		e = -errno;
	if (e < 0) {
		unlinkat(dfd, tmp, 0);
		return e;
	}
	return fsync(dfd) < 0 ? -errno : 0;
}

static int grow_file(int dfd, const char *id, uint64_t size)
{
	_cleanup_free_ char *fin = xasprintf("%s" VOL_SUFFIX, id);
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (size > INT64_MAX)
		return -EFBIG;
	fd = openat(dfd, fin, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size >= size)
		return 0;  /* never shrunk */
	return ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0 ? -errno : 0;
}

/* Release every block of id's file (its data reads back as zeros), then
 * unlink it. A filesystem without punch-hole truncates it to nothing. */
static int wipe_file(int dfd, const char *id)
{
	_cleanup_free_ char *fin = xasprintf("%s" VOL_SUFFIX, id);
	_cleanup_close_ int fd = openat(dfd, fin, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size > 0 &&
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size) < 0 &&
	    (errno != EOPNOTSUPP || ftruncate(fd, 0) < 0))
		return -errno;
	if (fsync(fd) < 0 || unlinkat(dfd, fin, 0) < 0)
		return -errno;
	return fsync(dfd) < 0 ? -errno : 0;
}

int vol_apply(const char *dir, const struct vol_action *a)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *tmp = NULL;

	if (dfd < 0)
		return -errno;
	if (!rt_id_valid(a->id))
		return -EINVAL;
	switch (a->kind) {
	case VOL_CREATE:
		return make_file(dfd, a->id, a->size);
	case VOL_GROW:
		return grow_file(dfd, a->id, a->size);
	case VOL_WIPE:
		return wipe_file(dfd, a->id);
	case VOL_DROP_TMP:
		tmp = xasprintf("%s" VOL_TMP_SUFFIX, a->id);
		return unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT ? -errno : 0;
	}
	return -EINVAL;
}

/* ------------------------------------------------------------ the pass */

int vol_open(const struct vol_config *cfg, struct vol **ret)
{
	struct vol *v;
	int e = mkdir_p(cfg->dir, 0711);  /* QEMU traverses it; files 0600 */

	if (e < 0)
		return e;
	v = xcalloc(1, sizeof(*v));
	v->cfg = *cfg;
	v->dir = xstrdup(cfg->dir);
	v->cfg.dir = v->dir;
	*ret = v;
	return 0;
}

void vol_free(struct vol *v)
{
	if (!v)
		return;
	free(v->dir);
	free(v);
}

static int read_fs(const struct vol *v, const struct vol_file *f, size_t n, struct vol_fs *ret)
{
	struct statvfs s;
	uint64_t used = 0;

	if (v->cfg.fs_size) {
		for (size_t i = 0; i < n; i++)
			used = sat_add(used, f[i].allocated);
		ret->total = v->cfg.fs_size;
		ret->avail = used < v->cfg.fs_size ? v->cfg.fs_size - used : 0;
		return 0;
	}
	if (statvfs(v->dir, &s) < 0)
		return -errno;
	ret->total = sat_mul(s.f_blocks, s.f_frsize);
	ret->avail = sat_mul(s.f_bavail, s.f_frsize);
	return 0;
}

/* The spec's volumes (usable ids only) and the ids its instances attach;
 * both arrays borrow the spec's strings. */
static void spec_volumes(const Bc__Node__V1__NodeSpec *spec, struct vol_want **ret_w,
			 size_t *ret_nw, const char ***ret_u, size_t *ret_nu)
{
	struct vol_want *w = xcalloc(spec->n_volumes + 1, sizeof(*w));
	const char **u = NULL;
	size_t nw = 0, nu = 0;

	for (size_t i = 0; i < spec->n_volumes; i++) {
		if (!rt_id_valid(spec->volumes[i]->id)) {
			log_warn("volume '%.64s' of the spec: unusable id, ignored",
				 spec->volumes[i]->id);
			continue;
		}
		w[nw++] = (struct vol_want){spec->volumes[i]->id, spec->volumes[i]->size_bytes};
	}
	for (size_t i = 0; i < spec->n_instances; i++)
		for (size_t j = 0; j < spec->instances[i]->n_volumes; j++) {
			u = xrealloc(u, (nu + 1) * sizeof(*u));
			u[nu++] = spec->instances[i]->volumes[j]->volume_id;
		}
	*ret_w = w;
	*ret_nw = nw;
	*ret_u = u;
	*ret_nu = nu;
}

/* A grown volume: each live instance of the spec attaching it learns its
 * new size at once. */
static void tell_grown(const Bc__Node__V1__NodeSpec *spec, struct rt *rt, vol_live_fn live,
		       void *ctx, const struct vol_action *a)
{
	if (!rt || !rt->ops->block_resize || !live)
		return;
	for (size_t i = 0; i < spec->n_instances; i++) {
		const Bc__Node__V1__InstanceSpec *s = spec->instances[i];
		for (size_t j = 0; j < s->n_volumes; j++) {
			const Bc__Node__V1__VolumeAttachment *at = s->volumes[j];
			int e;
			if (strcmp(at->volume_id, a->id) != 0 || !live(ctx, s->id))
				continue;
			e = rt->ops->block_resize(rt, s->id, at->serial, a->size);
			if (e < 0)
				log_warn("instance %s: volume %s grown to %" PRIu64 " bytes, the "
					 "guest not told: %s", s->id, a->id, a->size, strerror(-e));
			else
				log_info("instance %s: told volume %s is %" PRIu64 " bytes", s->id,
					 a->id, a->size);
		}
	}
}

static const char *act_name(enum vol_act_kind k)
{
	static const char *const names[] = {[VOL_CREATE] = "create", [VOL_GROW] = "grow",
					    [VOL_WIPE] = "wipe", [VOL_DROP_TMP] = "drop half-made"};
	return names[k];
}

/* A failed action: logged once while it keeps failing the same way, and
 * the host's warning when no room warning is up (a file system refusing
 * the size, EFBIG; an unwritable directory). */
static void action_failed(struct vol *v, struct vol_plan *p, const struct vol_action *a, int e)
{
	char msg[RT_WARNING_MAX];

	snprintf(msg, sizeof(msg), "volume %s: %s failed: %s", a->id, act_name(a->kind),
		 strerror(-e));
	if (strcmp(msg, v->failed) != 0)
		log_error("%s", msg);
	snprintf(v->failed, sizeof(v->failed), "%s", msg);
	if (!p->storage.warning[0])
		snprintf(p->storage.warning, sizeof(p->storage.warning), "%s", msg);
}

/* Apply the plan; a failed create or grow is not counted as made. */
static void apply_plan(struct vol *v, const Bc__Node__V1__NodeSpec *spec, struct rt *rt,
		       vol_live_fn live, void *ctx, struct vol_plan *p)
{
	bool failed = false;

	for (size_t i = 0; i < p->n_acts; i++) {
		const struct vol_action *a = &p->acts[i];
		int e = vol_apply(v->dir, a);
		uint64_t grow = a->size > a->from ? a->size - a->from : 0;

		if (e < 0) {
			action_failed(v, p, a, e);
			failed = true;
			if (a->kind == VOL_CREATE || a->kind == VOL_GROW) {
				p->storage.committed -= grow;
				p->storage.outstanding -= grow;
			}
			continue;
		}
		if (a->kind == VOL_GROW || a->kind == VOL_CREATE)
			log_info("volume %s: %s, %" PRIu64 " bytes", a->id,
				 a->kind == VOL_GROW ? "grown" : "created", a->size);
		else
			log_info("volume %s: %s done", a->id, act_name(a->kind));
		if (a->kind == VOL_GROW && spec)
			tell_grown(spec, rt, live, ctx, a);
	}
	if (!failed)
		v->failed[0] = '\0';
}

/* Say once what changed in the room and shrink refusals. */
static void log_refusals(struct vol *v, const struct vol_plan *p)
{
	char msg[RT_WARNING_MAX + 64];

	snprintf(msg, sizeof(msg), "%s%s%zu", p->storage.warning, p->n_shrink ? "; shrink " : "",
		 p->n_shrink);
	if (strncmp(msg, v->logged, sizeof(v->logged) - 1) == 0)
		return;
	snprintf(v->logged, sizeof(v->logged), "%s", msg);
	if (p->n_refused)
		log_warn("volume-storage: %s", p->storage.warning);
	if (p->n_shrink)
		log_warn("%zu volume(s) of the spec are smaller than their files: never shrunk, "
			 "left as they are", p->n_shrink);
}

int vol_pass(struct vol *v, const Bc__Node__V1__NodeSpec *spec, struct rt *rt, vol_live_fn live,
	     void *live_ctx, struct rt_storage *ret)
{
	_cleanup_free_ struct vol_file *files = NULL;
	_cleanup_free_ struct vol_want *want = NULL;
	_cleanup_free_ const char **in_use = NULL;
	size_t n_files = 0, n_want = 0, n_in_use = 0;
	struct vol_plan p;
	struct vol_fs fs;
	int e;

	if ((e = vol_scan(v->dir, &files, &n_files)) < 0 ||
	    (e = read_fs(v, files, n_files, &fs)) < 0) {
		log_error("volumes %s: %s", v->dir, strerror(-e));
		return e;
	}
	if (spec)
		spec_volumes(spec, &want, &n_want, &in_use, &n_in_use);
	vol_plan(want, n_want, files, n_files, in_use, n_in_use, spec == NULL, &fs,
		 v->cfg.reserve_percent, v->cfg.reserve_min, &p);
	apply_plan(v, spec, rt, live, live_ctx, &p);
	log_refusals(v, &p);
	v->last = p.storage;
	v->has_last = true;
	*ret = p.storage;
	vol_plan_clear(&p);
	return 0;
}

int vol_last(const struct vol *v, struct rt_storage *ret)
{
	if (!v->has_last)
		return -ENOENT;
	*ret = v->last;
	return 0;
}
