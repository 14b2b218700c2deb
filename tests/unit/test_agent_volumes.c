/* test_agent_volumes: the volume planner as a pure function (spec volumes,
 * files present, filesystem numbers -> actions, report numbers, warning),
 * and the applier on real sparse files in a temp dir. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/runtime.h"
#include "agent/volumes.h"
#include "log.h"
#include "tap.h"
#include "util.h"

#define GIB (1ull << 30)

static char tmpdir[64];

static struct vol_file file(const char *id, uint64_t size, uint64_t allocated, bool tmp)
{
	struct vol_file f = {.size = size, .allocated = allocated, .tmp = tmp};

	snprintf(f.id, sizeof(f.id), "%s", id);
	return f;
}

/* Plan on a filesystem of total bytes with avail free, bcd's default
 * reserve (5 %, at least 2 GiB). */
static void plan(const struct vol_want *w, size_t nw, const struct vol_file *f, size_t nf,
		 uint64_t total, uint64_t avail, struct vol_plan *p)
{
	const struct vol_fs fs = {total, avail};

	vol_plan(w, nw, f, nf, NULL, 0, false, &fs, 5, 2 * GIB, p);
}

static const struct vol_action *act_of(const struct vol_plan *p, const char *id)
{
	for (size_t i = 0; i < p->n_acts; i++)
		if (strcmp(p->acts[i].id, id) == 0)
			return &p->acts[i];
	return NULL;
}

static void test_reserve(void)
{
	is_int(vol_reserve(100 * GIB, 5, 2 * GIB), 5 * GIB, "reserve: 5 %% of 100 GiB");
	is_int(vol_reserve(10 * GIB, 5, 2 * GIB), 2 * GIB, "reserve: the 2 GiB floor");
	is_int(vol_reserve(GIB, 5, 2 * GIB), GIB, "reserve: never more than the filesystem");
	ok(vol_reserve(UINT64_MAX, 5, 2 * GIB) == UINT64_MAX / 100 * 5 + (UINT64_MAX % 100) * 5 / 100,
	   "reserve: a 16 EiB filesystem does not overflow");
	ok(vol_reserve(UINT64_MAX, 100, 0) == UINT64_MAX, "reserve: 100 %% of the largest is all");
}

static void test_create(void)
{
	const struct vol_want w[] = {{"vol_a", 10 * GIB}};
	struct vol_plan p;

	plan(w, 1, NULL, 0, 100 * GIB, 100 * GIB, &p);
	is_int(p.n_acts, 1, "create: one action");
	ok(p.n_acts == 1 && p.acts[0].kind == VOL_CREATE && p.acts[0].size == 10 * GIB,
	   "create: vol_a of 10 GiB");
	is_int(p.storage.available, 100 * GIB, "create: available is the free space");
	is_int(p.storage.reserved, 5 * GIB, "create: reserved 5 %%");
	is_int(p.storage.committed, 10 * GIB, "create: committed = its size");
	is_int(p.storage.outstanding, 10 * GIB, "create: outstanding = its unwritten bytes");
	is_int(p.storage.allocated, 0, "create: nothing allocated");
	is_str(p.storage.warning, "", "create: no warning");
	vol_plan_clear(&p);
}

static void test_room(void)
{
	const struct vol_want exact[] = {{"vol_a", 95 * GIB}};
	const struct vol_want over[] = {{"vol_a", 95 * GIB + 1}};
	const struct vol_want floor_ok[] = {{"vol_a", 8 * GIB}};
	const struct vol_want floor_over[] = {{"vol_a", 8 * GIB + 1}};
	const struct vol_want two[] = {{"vol_a", 50 * GIB}, {"vol_b", 50 * GIB}, {"vol_c", 45 * GIB}};
	struct vol_plan p;
	char want[256];

	plan(exact, 1, NULL, 0, 100 * GIB, 100 * GIB, &p);
	ok(p.n_acts == 1 && p.acts[0].kind == VOL_CREATE, "room: exactly up to the reserve: made");
	vol_plan_clear(&p);
	plan(over, 1, NULL, 0, 100 * GIB, 100 * GIB, &p);
	is_int(p.n_acts, 0, "room: one byte into the reserve: not made");
	is_int(p.n_refused, 1, "room: refused for room");
	is_int(p.storage.committed, 0, "room: not committed");
	snprintf(want, sizeof(want), "volume vol_a needs %llu bytes, %llu bytes free over the reserve",
		 95 * GIB + 1, 95 * GIB);
	is_str(p.storage.warning, want, "room: the warning names the volume, needed and free bytes");
	vol_plan_clear(&p);

	plan(floor_ok, 1, NULL, 0, 10 * GIB, 10 * GIB, &p);
	ok(p.n_acts == 1, "floor: 8 GiB on 10 GiB (reserve 2 GiB, not 5 %%): made");
	is_int(p.storage.reserved, 2 * GIB, "floor: reserved 2 GiB");
	vol_plan_clear(&p);
	plan(floor_over, 1, NULL, 0, 10 * GIB, 10 * GIB, &p);
	is_int(p.n_refused, 1, "floor: one byte more: refused");
	vol_plan_clear(&p);

	plan(two, 3, NULL, 0, 100 * GIB, 100 * GIB, &p);
	ok(act_of(&p, "vol_a") && !act_of(&p, "vol_b") && act_of(&p, "vol_c"),
	   "every volume's full size: 50 made, the next 50 waits, 45 still fits");
	is_int(p.n_refused, 1, "... one refused");
	is_int(p.storage.committed, 95 * GIB, "... committed 95 GiB");
	vol_plan_clear(&p);
}

static void test_existing(void)
{
	/* a 60 GiB volume that wrote 10 GiB: 90 free, 85 over the reserve, of
	 * which its 50 unwritten are spoken for */
	const struct vol_file f[] = {file("vol_a", 60 * GIB, 10 * GIB, false)};
	const struct vol_want fits[] = {{"vol_a", 60 * GIB}, {"vol_b", 35 * GIB}};
	const struct vol_want over[] = {{"vol_a", 60 * GIB}, {"vol_b", 35 * GIB + 1}};
	struct vol_plan p;

	plan(fits, 2, f, 1, 100 * GIB, 90 * GIB, &p);
	ok(p.n_acts == 1 && act_of(&p, "vol_b") && act_of(&p, "vol_b")->kind == VOL_CREATE,
	   "existing: the written file's unwritten rest counts; 35 GiB fits");
	is_int(p.storage.committed, 95 * GIB, "existing: committed = both sizes");
	is_int(p.storage.outstanding, 85 * GIB, "existing: outstanding = unwritten of both");
	is_int(p.storage.allocated, 10 * GIB, "existing: allocated = its blocks");
	vol_plan_clear(&p);
	plan(over, 2, f, 1, 100 * GIB, 90 * GIB, &p);
	is_int(p.n_acts, 0, "existing: a byte more does not fit");
	vol_plan_clear(&p);
}

static void test_grow_shrink(void)
{
	const struct vol_file f[] = {file("vol_a", 10 * GIB, 0, false)};
	const struct vol_want grow[] = {{"vol_a", 20 * GIB}};
	const struct vol_want big[] = {{"vol_a", 96 * GIB}};
	const struct vol_want shrink[] = {{"vol_a", 5 * GIB}};
	struct vol_plan p;

	plan(grow, 1, f, 1, 100 * GIB, 100 * GIB, &p);
	ok(p.n_acts == 1 && p.acts[0].kind == VOL_GROW && p.acts[0].size == 20 * GIB &&
	   p.acts[0].from == 10 * GIB, "grow: 10 -> 20 GiB");
	is_int(p.storage.committed, 20 * GIB, "grow: committed the new size");
	vol_plan_clear(&p);
	plan(big, 1, f, 1, 100 * GIB, 100 * GIB, &p);
	is_int(p.n_acts, 0, "grow past the room: not grown");
	ok(strstr(p.storage.warning, "needs 92341796864 bytes, 91268055040 bytes free") != NULL,
	   "grow past the room: the warning gives the growth needed (86 GiB) and the room (85)");
	is_int(p.storage.committed, 10 * GIB, "grow past the room: the file keeps its size");
	vol_plan_clear(&p);
	plan(shrink, 1, f, 1, 100 * GIB, 100 * GIB, &p);
	is_int(p.n_acts, 0, "shrink: never");
	is_int(p.n_shrink, 1, "shrink: counted (logged)");
	is_int(p.storage.committed, 10 * GIB, "shrink: the file's size stays committed");
	vol_plan_clear(&p);
}

static void test_delete_orphan_tmp(void)
{
	const struct vol_file f[] = {file("vol_gone", 4 * GIB, GIB, false),
				     file("vol_used", 2 * GIB, 0, false),
				     file("vol_new", 3 * GIB, 0, true)};
	const struct vol_want w[] = {{"vol_new", 3 * GIB}};
	const char *in_use[] = {"vol_used"};
	const struct vol_fs fs = {100 * GIB, 99 * GIB};
	const struct vol_action *a;
	struct vol_plan p;

	vol_plan(w, 1, f, 3, in_use, 1, false, &fs, 5, 2 * GIB, &p);
	a = act_of(&p, "vol_gone");
	ok(a && a->kind == VOL_WIPE, "a file the spec does not name: wiped");
	ok(!act_of(&p, "vol_used"), "one an instance attaches: kept");
	is_int(p.n_acts, 3, "wipe, drop the half-made file, create");
	ok(p.acts[0].kind == VOL_DROP_TMP || p.acts[1].kind == VOL_DROP_TMP,
	   "the half-made vol_new.raw.tmp is dropped");
	a = &p.acts[2];
	ok(a->kind == VOL_CREATE && strcmp(a->id, "vol_new") == 0,
	   "... and vol_new made anew (a tmp file never counts as made)");
	is_int(p.storage.committed, 5 * GIB, "committed: the kept and the made, not the wiped");
	vol_plan_clear(&p);

	vol_plan(NULL, 0, f, 3, NULL, 0, true, &fs, 5, 2 * GIB, &p);
	is_int(p.n_acts, 1, "no spec yet: nothing wiped or made (only the tmp dropped)");
	is_int(p.storage.committed, 6 * GIB, "no spec yet: the files are reported");
	vol_plan_clear(&p);
}

static void test_huge(void)
{
	const uint64_t max = 16384 * GIB;
	const struct vol_want w[] = {{"vol_a", max}, {"vol_b", max}, {"vol_c", UINT64_MAX}};
	const struct vol_file f[] = {file("vol_d", UINT64_MAX, 0, false)};
	struct vol_plan p;

	plan(w, 2, NULL, 0, UINT64_MAX, UINT64_MAX, &p);
	is_int(p.n_acts, 2, "16,384 GiB volumes on a huge filesystem: both made");
	is_int(p.storage.committed, 2 * max, "committed 32 TiB");
	vol_plan_clear(&p);
	plan(w, 3, NULL, 0, 64 * max, 64 * max, &p);
	ok(!act_of(&p, "vol_c") && p.n_refused == 1, "a size of 2^64-1: refused, no wrap");
	vol_plan_clear(&p);
	plan(w, 1, f, 1, 64 * max, 64 * max, &p);
	ok(act_of(&p, "vol_d") && act_of(&p, "vol_d")->kind == VOL_WIPE && p.storage.committed == max,
	   "a file of 2^64-1 bytes the spec drops: wiped, not counted");
	vol_plan_clear(&p);
	vol_plan(NULL, 0, f, 1, NULL, 0, true, &(struct vol_fs){max, max}, 5, 2 * GIB, &p);
	ok(p.storage.committed == UINT64_MAX && p.storage.outstanding == UINT64_MAX,
	   "a kept file of 2^64-1 bytes: the sums saturate, no wrap");
	vol_plan_clear(&p);
	plan(w, 0, f, 0, 0, 0, &p);
	is_int(p.storage.reserved, 0, "an empty filesystem: no reserve");
	vol_plan_clear(&p);
}

/* ------------------------------------------------------- the applier */

static uint64_t blocks(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : UINT64_MAX;
}

static void test_apply(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/apply", tmpdir);
	_cleanup_free_ char *path = NULL, *tmp = NULL, *notes = xasprintf("%s/notes.txt", dir);
	struct vol_action a = {.kind = VOL_CREATE, .id = "vol_a", .size = 4 * GIB};
	struct vol_file *files = NULL;
	char buf[4096], zero[4096] = {0};
	struct stat st;
	size_t n = 0;
	int fd, keep;

	mkdir_p(dir, 0700);
	path = vol_path(dir, "vol_a");
	is_int(vol_apply(dir, &a), 0, "apply: create vol_a of 4 GiB");
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == 4 * GIB, "apply: the file is 4 GiB long");
	is_int(st.st_mode & 07777, 0600, "apply: mode 0600");
	ok(blocks(path) < (1u << 20), "apply: sparse (under 1 MiB allocated)");
	fd = open(path, O_WRONLY);
	ok(fd >= 0 && pwrite(fd, "secret", 6, 8192) == 6, "a guest writes to it");
	close(fd);
	is_int(vol_apply(dir, &a), -EEXIST, "apply: create again is refused (never written over)");
	fd = open(path, O_RDONLY);
	ok(fd >= 0 && pread(fd, buf, 6, 8192) == 6 && memcmp(buf, "secret", 6) == 0,
	   "... the data is still there");
	close(fd);

	a = (struct vol_action){.kind = VOL_GROW, .id = "vol_a", .size = 6 * GIB, .from = 4 * GIB};
	is_int(vol_apply(dir, &a), 0, "apply: grow to 6 GiB");
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == 6 * GIB, "apply: 6 GiB long");
	a.size = GIB;
	is_int(vol_apply(dir, &a), 0, "apply: a grow to less is a no-op");
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == 6 * GIB, "apply: never shrunk");

	tmp = xasprintf("%s/vol_b" VOL_TMP_SUFFIX, dir);
	fd = open(tmp, O_WRONLY | O_CREAT, 0600);
	close(fd);
	fd = open(notes, O_WRONLY | O_CREAT, 0600);
	close(fd);
	is_int(vol_scan(dir, &files, &n), 0, "scan");
	is_int(n, 2, "scan: vol_a.raw and vol_b.raw.tmp, not notes.txt");
	for (size_t i = 0; i < n; i++)
		if (strcmp(files[i].id, "vol_b") == 0)
			ok(files[i].tmp, "scan: vol_b is half made");
		else
			ok(!files[i].tmp && files[i].size == 6 * GIB && files[i].allocated >= 4096,
			   "scan: vol_a 6 GiB, its written block allocated");
	free(files);
	a = (struct vol_action){.kind = VOL_DROP_TMP, .id = "vol_b"};
	is_int(vol_apply(dir, &a), 0, "apply: drop the half-made file");
	ok(access(tmp, F_OK) < 0, "... gone");

	keep = open(path, O_RDONLY);  /* as a late reader would hold it */
	a = (struct vol_action){.kind = VOL_WIPE, .id = "vol_a"};
	is_int(vol_apply(dir, &a), 0, "apply: wipe vol_a");
	ok(access(path, F_OK) < 0, "wipe: the file is unlinked");
	ok(keep >= 0 && pread(keep, buf, sizeof(buf), 8192) == (ssize_t)sizeof(buf) &&
	   memcmp(buf, zero, sizeof(buf)) == 0, "wipe: its blocks were released: reads back zeros");
	close(keep);
	is_int(vol_apply(dir, &a), 0, "wipe: again is a no-op");
	a = (struct vol_action){.kind = VOL_CREATE, .id = "../x", .size = GIB};
	is_int(vol_apply(dir, &a), -EINVAL, "apply: an id that is not a file name is refused");
}

/* ------------------------------------------------------------ a pass */

static int ledger_has(const char *dir, const char *needle)
{
	_cleanup_free_ char *path = xasprintf("%s/fake/ledger.log", dir);
	_cleanup_free_ char *buf = NULL;

	return file_read_all(path, 1 << 20, &buf, NULL) == 0 && strstr(buf, needle) != NULL;
}

static bool live_yes(void *ctx, const char *id)
{
	(void)ctx;
	(void)id;
	return true;
}

static bool live_no(void *ctx, const char *id)
{
	(void)ctx;
	(void)id;
	return false;
}

/* vol_pass over a spec: files made, grown (a live instance that attaches
 * the volume is told through the runtime), wiped when it leaves the spec;
 * and the room warning when the stand-in filesystem is too small. */
static void test_pass(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/pass", tmpdir);
	_cleanup_free_ char *vdir = xasprintf("%s/volumes", dir);
	_cleanup_free_ char *path = NULL;
	const struct vol_config vc = {.dir = vdir, .reserve_percent = 5, .reserve_min = 2 * GIB,
				      .fs_size = 100 * GIB};
	const struct rt_config rc = {.state_dir = dir, .capacity_vcpus = 8,
				     .capacity_memory_mib = 8192};
	Bc__Node__V1__NodeSpec spec = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__VolumeSpec v[2] = {BC__NODE__V1__VOLUME_SPEC__INIT,
					 BC__NODE__V1__VOLUME_SPEC__INIT};
	Bc__Node__V1__VolumeSpec *vp[2] = {&v[0], &v[1]};
	Bc__Node__V1__InstanceSpec in = BC__NODE__V1__INSTANCE_SPEC__INIT, *inp = &in;
	Bc__Node__V1__VolumeAttachment at = BC__NODE__V1__VOLUME_ATTACHMENT__INIT, *atp = &at;
	struct rt_storage stg;
	struct stat st;
	struct vol *vol = NULL;
	struct rt *rt = NULL;

	mkdir_p(dir, 0700);
	is_int(rt_open("fake", &rc, &rt), 0, "pass: fake runtime");
	is_int(vol_open(&vc, &vol), 0, "pass: volumes dir");
	ok(vol_last(vol, &stg) == -ENOENT, "pass: no numbers before the first pass");
	v[0].id = "vol_a";
	v[0].serial = "bcv-a";
	v[0].size_bytes = GIB;
	in.id = "ins_a";
	in.runtime = "fake";
	in.vcpus = 1;
	in.memory_mib = 256;
	in.network_policy = "egress";
	in.n_volumes = 1;
	in.volumes = &atp;
	at.volume_id = "vol_a";
	at.serial = "bcv-a";
	spec.n_volumes = 1;
	spec.volumes = vp;
	spec.n_instances = 1;
	spec.instances = &inp;
	is_int(rt->ops->create(rt, &in, (char[RT_REASON_MAX]){0}), 0, "pass: ins_a created");
	is_int(rt->ops->start(rt, "ins_a"), 0, "pass: ins_a running");

	path = vol_path(vdir, "vol_a");
	is_int(vol_pass(vol, NULL, rt, live_yes, NULL, &stg), 0, "pass without a spec");
	ok(access(path, F_OK) < 0, "... makes nothing");
	is_int(vol_pass(vol, &spec, rt, live_yes, NULL, &stg), 0, "pass: spec with vol_a");
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == GIB, "pass: vol_a.raw made, 1 GiB");
	is_int(stg.committed, GIB, "pass: committed 1 GiB");
	is_int(stg.available, 100 * GIB, "pass: available from the stand-in filesystem");
	ok(!ledger_has(dir, "op=block_resize"), "pass: a create tells no guest");

	v[0].size_bytes = 3 * GIB;
	is_int(vol_pass(vol, &spec, rt, live_no, NULL, &stg), 0, "pass: grown, ins_a busy");
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == 3 * GIB, "pass: vol_a is 3 GiB");
	ok(!ledger_has(dir, "op=block_resize"), "pass: an instance not live is not called");
	v[0].size_bytes = 4 * GIB;
	is_int(vol_pass(vol, &spec, rt, live_yes, NULL, &stg), 0, "pass: grown, ins_a live");
	ok(ledger_has(dir, "op=block_resize id=ins_a serial=bcv-a bytes=4294967296"),
	   "pass: the running guest is told at once (block_resize with its serial)");

	v[1].id = "vol_b";
	v[1].serial = "bcv-b";
	v[1].size_bytes = 95 * GIB;
	spec.n_volumes = 2;
	is_int(vol_pass(vol, &spec, rt, live_yes, NULL, &stg), 0, "pass: vol_b of 95 GiB");
	ok(strstr(stg.warning, "volume vol_b needs 102005473280 bytes, 97710505984 bytes free") !=
	   NULL, "pass: no room: the warning names vol_b, needed and free bytes");
	is_int(stg.committed, 4 * GIB, "pass: vol_b stays outstanding (not committed)");
	ok(access(vdir, F_OK) == 0 && vol_last(vol, &stg) == 0 && stg.warning[0],
	   "pass: vol_last gives the same numbers");

	spec.n_volumes = 0;
	in.n_volumes = 0;
	is_int(vol_pass(vol, &spec, rt, live_yes, NULL, &stg), 0, "pass: the spec drops both");
	ok(access(path, F_OK) < 0, "pass: vol_a wiped and removed");
	is_int(stg.committed, 0, "pass: nothing committed");
	is_str(stg.warning, "", "pass: no warning");
	vol_free(vol);
	rt_close(rt);
}

/* A create the filesystem refuses (here: a directory in the way of
 * <id>.raw.tmp) is not counted and becomes the host's warning. */
static void test_failure(void)
{
	_cleanup_free_ char *vdir = xasprintf("%s/fail", tmpdir);
	_cleanup_free_ char *blocker = xasprintf("%s/vol_c" VOL_TMP_SUFFIX, vdir);
	const struct vol_config vc = {.dir = vdir, .reserve_percent = 5, .reserve_min = 2 * GIB,
				      .fs_size = 100 * GIB};
	Bc__Node__V1__NodeSpec spec = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__VolumeSpec v = BC__NODE__V1__VOLUME_SPEC__INIT, *vp = &v;
	struct rt_storage stg;
	struct vol *vol = NULL;

	is_int(vol_open(&vc, &vol), 0, "failure: volumes dir");
	mkdir(blocker, 0700);
	v.id = "vol_c";
	v.serial = "bcv-c";
	v.size_bytes = GIB;
	spec.n_volumes = 1;
	spec.volumes = &vp;
	is_int(vol_pass(vol, &spec, NULL, NULL, NULL, &stg), 0, "failure: a pass");
	is_str(stg.warning, "volume vol_c: create failed: Is a directory",
	       "failure: the host's warning says which volume and why");
	is_int(stg.committed, 0, "failure: not counted as made");
	rmdir(blocker);
	is_int(vol_pass(vol, &spec, NULL, NULL, NULL, &stg), 0, "failure: the next pass");
	is_int(stg.committed, GIB, "failure: repaired: made");
	is_str(stg.warning, "", "failure: the warning ends");
	vol_free(vol);
}

int main(void)
{
	log_init("test", LOG_LVL_ERROR);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-vol-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_reserve();
	test_create();
	test_room();
	test_existing();
	test_grow_shrink();
	test_delete_orphan_tmp();
	test_huge();
	test_apply();
	test_pass();
	test_failure();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", tmpdir);
	}
	done_testing();
}
