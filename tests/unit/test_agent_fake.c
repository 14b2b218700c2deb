/* test_agent_fake.c: the fake runtime holds its records in memory.
 *
 * list() and the operations read what the runtime loaded at open and wrote
 * since, not the directory: a record removed or added behind an open
 * runtime's back changes nothing until the next open, which sees exactly
 * what is on disk. A write that fails (the record's temporary file cannot
 * be created, the record cannot be unlinked) leaves memory, the record and
 * the ledger as they were, so the operation is simply retried. Records that
 * do not load, the per-operation .fail hook and the admission hook. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/guestready.h"
#include "agent/runtime.h"
#include "log.h"
#include "tap.h"
#include "util.h"

static char tmpdir[64];

static void rm_rf(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
}

static struct rt *open_rt(uint32_t vcpus, uint64_t mem)
{
	struct rt_config cfg = {.state_dir = tmpdir, .capacity_vcpus = vcpus,
				.capacity_memory_mib = mem, .capacity_disk_gib = 100};
	struct rt *rt = NULL;
	int e = rt_open("fake", &cfg, &rt);

	if (e < 0) {
		printf("Bail out! cannot open fake runtime in %s: %s\n", tmpdir, strerror(-e));
		exit(1);
	}
	return rt;
}

static char *fake_path(const char *name)
{
	return xasprintf("%s/fake/%s", tmpdir, name);
}

/* A spec for id: 1 vCPU, 256 MiB, policy. Strings are borrowed. */
static Bc__Node__V1__InstanceSpec spec(const char *id, const char *policy)
{
	Bc__Node__V1__InstanceSpec s = BC__NODE__V1__INSTANCE_SPEC__INIT;

	s.id = (char *)id;
	s.runtime = "fake";
	s.vcpus = 1;
	s.memory_mib = 256;
	s.network_policy = (char *)policy;
	s.tenant_id = "ten_1";
	return s;
}

static int create(struct rt *rt, const char *id)
{
	Bc__Node__V1__InstanceSpec s = spec(id, "egress");
	char reason[RT_REASON_MAX] = "";

	return rt->ops->create(rt, &s, reason);
}

static int update(struct rt *rt, const char *id, const char *policy)
{
	Bc__Node__V1__InstanceSpec s = spec(id, policy);

	return rt->ops->update(rt, &s);
}

/* "id:state id:state ..." of the runtime's list, in list order. */
static const char *listing(struct rt *rt)
{
	static char out[512];
	struct rt_instance *v = NULL;
	size_t n = 0, len = 0;

	out[0] = '\0';
	if (rt->ops->list(rt, &v, &n) < 0)
		return "list-failed";
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s:%s", i ? " " : "",
					v[i].id, rt_state_name(v[i].state));
	free(v);
	return out;
}

/* The value of key in id's record file ("" if none, "absent" without file). */
static const char *on_disk(const char *id, const char *key)
{
	static char out[128];
	_cleanup_free_ char *name = xasprintf("%s.inst", id);
	_cleanup_free_ char *path = fake_path(name);
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ char *needle = xasprintf("\n%s=", key);
	char *p;

	if (file_read_all(path, 1 << 16, &text, NULL) < 0)
		return "absent";
	out[0] = '\0';
	if ((p = strstr(text, needle)))
		sscanf(p + strlen(needle), "%127[^\n]", out);
	for (size_t n = strlen(out); n > 0 && out[n - 1] == ' '; n--)
		out[n - 1] = '\0'; /* the state field is padded */
	return out;
}

/* id's record file, whole ("" without one) */
static char *record_text(const char *id)
{
	_cleanup_free_ char *name = xasprintf("%s.inst", id);
	_cleanup_free_ char *path = fake_path(name);
	char *text = NULL;

	if (file_read_all(path, 1 << 16, &text, NULL) < 0)
		return xstrdup("");
	return text;
}

static ino_t record_inode(const char *id)
{
	_cleanup_free_ char *name = xasprintf("%s.inst", id);
	_cleanup_free_ char *path = fake_path(name);
	struct stat st;

	return stat(path, &st) == 0 ? st.st_ino : 0;
}

static int ledger_count(const char *op, const char *id)
{
	_cleanup_free_ char *path = fake_path("ledger.log");
	_cleanup_free_ char *needle = xasprintf("op=%s id=%s ", op, id);
	_cleanup_free_ char *buf = NULL;
	int n = 0;

	if (file_read_all(path, 1 << 24, &buf, NULL) < 0)
		return 0;
	for (char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Make the next write of id's record fail as a full or read-only disk
 * would (even for root): a directory where its temporary file goes (a
 * whole record), and the record behind a symbolic link (a transition,
 * which rewrites the state field in place and never follows one). Undone
 * by unblock_writes. */
static char *block_writes(const char *id)
{
	_cleanup_free_ char *name = xasprintf("%s.inst.tmp.%d", id, (int)getpid());
	_cleanup_free_ char *rec_name = xasprintf("%s.inst", id);
	_cleanup_free_ char *real_name = xasprintf("%s.real", id);
	_cleanup_free_ char *rec = fake_path(rec_name), *real = fake_path(real_name);
	char *path = fake_path(name);

	if (mkdir(path, 0700) < 0)
		printf("# mkdir %s: %s\n", path, strerror(errno));
	if (rename(rec, real) == 0 && symlink(real, rec) < 0)
		printf("# symlink %s: %s\n", rec, strerror(errno));
	return path;
}

static void unblock_writes(const char *id, const char *blocked)
{
	_cleanup_free_ char *rec_name = xasprintf("%s.inst", id);
	_cleanup_free_ char *real_name = xasprintf("%s.real", id);
	_cleanup_free_ char *rec = fake_path(rec_name), *real = fake_path(real_name);
	struct stat st;

	rmdir(blocked);
	if (lstat(rec, &st) == 0 && S_ISLNK(st.st_mode)) {
		unlink(rec);
		rename(real, rec);
	}
}

static void write_file(const char *name, const char *text)
{
	_cleanup_free_ char *path = fake_path(name);

	file_write_atomic(path, text, strlen(text), 0644);
}

static void remove_file(const char *name)
{
	_cleanup_free_ char *path = fake_path(name);

	unlink(path);
}

/* ---------------------------------------------------------------- tests */

static void test_memory_not_disk(void)
{
	struct rt *rt = open_rt(64, 65536);

	is_int(create(rt, "ins_b"), 0, "create ins_b");
	is_int(create(rt, "ins_a"), 0, "create ins_a");
	is_int(create(rt, "ins_c"), 0, "create ins_c");
	is_int(rt->ops->start(rt, "ins_a"), 0, "start ins_a");
	is_str(listing(rt), "ins_a:running ins_b:stopped ins_c:stopped", "list: the three, by id");
	is_str(on_disk("ins_a", "state"), "running", "the start is on disk");

	remove_file("ins_b.inst");
	write_file("ins_d.inst", "id=ins_d\nstate=paused\nvcpus=1\nmemory_mib=64\n");
	is_str(listing(rt), "ins_a:running ins_b:stopped ins_c:stopped",
	       "a record removed and one added behind its back: list unchanged (memory)");
	is_int(create(rt, "ins_b"), -EEXIST, "create of the held ins_b: EEXIST");
	is_int(rt->ops->start(rt, "ins_d"), -ENOENT, "ins_d, not held: ENOENT");
	rt_close(rt);

	rt = open_rt(64, 65536);
	is_str(listing(rt), "ins_a:running ins_c:stopped ins_d:paused", "reopen: exactly what is on disk");
	is_int(rt->ops->resume(rt, "ins_d"), 0, "the record found on disk is operated on");
	is_str(on_disk("ins_d", "state"), "running", "... and written through");
	is_int(rt->ops->destroy(rt, "ins_c"), 0, "destroy ins_c");
	is_str(on_disk("ins_c", "state"), "absent", "its record is unlinked");
	is_int(ledger_count("destroy", "ins_c"), 1, "one destroy in the ledger");
	is_str(listing(rt), "ins_a:running ins_d:running", "and it is no longer listed");
	is_int(rt->ops->destroy(rt, "ins_c"), 0, "destroy again: 0");
	is_int(ledger_count("destroy", "ins_c"), 1, "... and no second ledger line");
	rt_close(rt);
	rt = open_rt(64, 65536);
	is_str(listing(rt), "ins_a:running ins_d:running", "reopen after changes: the same list");
	rt->ops->destroy(rt, "ins_a");
	rt->ops->destroy(rt, "ins_d");
	is_str(listing(rt), "", "all destroyed");
	rt_close(rt);
}

static void test_failed_writes(void)
{
	struct rt *rt = open_rt(2, 65536);
	_cleanup_free_ char *blk_w = NULL, *blk_n = NULL;
	_cleanup_free_ char *rec_x = fake_path("ins_x.inst");

	is_int(create(rt, "ins_w"), 0, "create ins_w");
	blk_w = block_writes("ins_w");
	ok(rt->ops->start(rt, "ins_w") < 0, "start whose record cannot be written fails");
	is_str(listing(rt), "ins_w:stopped", "memory still says stopped");
	is_str(on_disk("ins_w", "state"), "stopped", "so does the record");
	is_int(ledger_count("start", "ins_w"), 0, "no ledger line");
	ok(update(rt, "ins_w", "none") < 0, "update whose record cannot be written fails");
	is_str(on_disk("ins_w", "network_policy"), "egress", "the record keeps the old policy");
	unblock_writes("ins_w", blk_w);
	is_int(update(rt, "ins_w", "none"), 0, "update retried once writes work");
	is_int(ledger_count("update", "ins_w"), 1,
	       "and it is a change (memory kept the old policy): one update line");
	is_str(on_disk("ins_w", "network_policy"), "none", "the new policy is on disk");
	is_int(rt->ops->start(rt, "ins_w"), 0, "start retried");
	is_str(listing(rt), "ins_w:running", "now running");

	blk_n = block_writes("ins_n");
	ok(create(rt, "ins_n") < 0, "create whose record cannot be written fails");
	is_str(listing(rt), "ins_w:running", "nothing new is listed");
	is_int(ledger_count("create", "ins_n"), 0, "no create line");
	unblock_writes("ins_n", blk_n);
	is_int(create(rt, "ins_n"), 0, "create retried: not EEXIST, and its vCPU is not counted");
	is_int(create(rt, "ins_o"), -ENOSPC, "admission counts what is held: 2 of 2 vCPUs used");

	is_int(create(rt, "ins_x"), -ENOSPC, "ins_x refused too");
	rt->ops->destroy(rt, "ins_n");
	is_int(create(rt, "ins_x"), 0, "destroy frees room: ins_x created");
	unlink(rec_x);
	mkdir(rec_x, 0700);
	ok(rt->ops->destroy(rt, "ins_x") < 0, "destroy whose record cannot be unlinked fails");
	is_str(listing(rt), "ins_w:running ins_x:stopped", "the instance is still held");
	is_int(ledger_count("destroy", "ins_x"), 0, "no destroy line");
	rmdir(rec_x);
	is_int(rt->ops->destroy(rt, "ins_x"), 0, "destroy retried");
	is_str(listing(rt), "ins_w:running", "now gone");
	rt->ops->destroy(rt, "ins_w");
	rt_close(rt);
}

/* A transition rewrites the state field in place: same file, nothing else
 * of it changes, and a reopened runtime reads it back; a record an older
 * bcd wrote (state not padded) is rewritten whole once, then in place. */
static void test_transition_in_place(void)
{
	struct rt *rt = open_rt(64, 65536);
	_cleanup_free_ char *before = NULL, *after = NULL, *expect = NULL;
	ino_t ino;
	char *p;

	is_int(create(rt, "ins_p"), 0, "create ins_p");
	before = record_text("ins_p");
	ino = record_inode("ins_p");
	ok(ino != 0, "its record exists");
	is_int(rt->ops->start(rt, "ins_p"), 0, "start");
	is_int(rt->ops->pause(rt, "ins_p"), 0, "pause");
	ok(record_inode("ins_p") == ino, "two transitions later: the same file (no new inode)");
	after = record_text("ins_p");
	expect = xstrdup(before);
	if ((p = strstr(expect, "\nstate=")))
		memcpy(p + 7, "paused ", 7); /* "stopped" -> "paused ", padding kept */
	is_str(after, expect, "only the state field changed");
	is_int(ledger_count("pause", "ins_p"), 1, "the ledger has the pause");
	rt_close(rt);
	rt = open_rt(64, 65536);
	is_str(listing(rt), "ins_p:paused", "reopen: paused, read from the rewritten field");
	is_int(rt->ops->resume(rt, "ins_p"), 0, "resume after reopen, still in place");
	ok(record_inode("ins_p") == ino, "... the same file");
	rt->ops->destroy(rt, "ins_p");
	rt_close(rt);

	write_file("ins_o.inst", "id=ins_o\nstate=paused\nvcpus=1\nmemory_mib=64\n");
	rt = open_rt(64, 65536);
	ino = record_inode("ins_o");
	is_int(rt->ops->resume(rt, "ins_o"), 0, "resume of an unpadded record");
	ok(record_inode("ins_o") != ino, "it is rewritten whole (a new file)");
	is_str(on_disk("ins_o", "state"), "running", "running on disk");
	ino = record_inode("ins_o");
	is_int(rt->ops->pause(rt, "ins_o"), 0, "pause");
	ok(record_inode("ins_o") == ino, "from then on in place");
	is_str(on_disk("ins_o", "vcpus"), "1", "its other fields kept");
	rt->ops->destroy(rt, "ins_o");
	rt_close(rt);
}

static void test_hooks_and_bad_records(void)
{
	struct rt *rt;

	write_file("ins_bad.inst", "id=someone_else\nstate=running\n");
	rt = open_rt(64, 1024);
	is_str(listing(rt), "ins_bad:error", "a record that does not load is listed in error");
	is_int(rt->ops->stop(rt, "ins_bad"), -EBADMSG, "stop on it fails with the load error");
	is_int(rt->ops->destroy(rt, "ins_bad"), 0, "destroy removes it all the same");
	is_str(on_disk("ins_bad", "state"), "absent", "its file is gone");

	is_int(create(rt, "ins_f"), 0, "create ins_f");
	write_file("ins_f.fail", "pause start\n");
	is_int(rt->ops->start(rt, "ins_f"), -EIO, "the .fail hook is read per operation");
	remove_file("ins_f.fail");
	is_int(rt->ops->start(rt, "ins_f"), 0, "hook removed: start works");

	write_file("admission", "capacity_memory_mib=300\n");
	is_int(create(rt, "ins_g"), -ENOSPC, "the admission hook is read at create (256 + 256 > 300)");
	remove_file("admission");
	is_int(create(rt, "ins_g"), 0, "hook removed: configured capacity again");
	rt_close(rt);
}

/* guestready.h: marks survive a reopen, the first mark stands, a clear
 * removes the file; a bad id or time is refused. */
static void test_guestready_marks(void)
{
	struct guestready *g = NULL, *g2 = NULL;
	_cleanup_free_ char *file = xasprintf("%s/guest-ready/inst_a", tmpdir);

	is_int(gr_open(tmpdir, &g), 0, "gr_open");
	is_int(gr_get(g, "inst_a"), 0, "no mark yet");
	is_int(gr_mark(g, "inst_a", 1000), 0, "mark");
	is_int(gr_mark(g, "inst_a", 2000), -EALREADY, "a second mark of one boot: -EALREADY");
	is_int(gr_get(g, "inst_a"), 1000, "the first mark stands");
	is_int(gr_mark(g, "../x", 1000), -EINVAL, "an unusable id is refused");
	is_int(gr_mark(g, "inst_b", 0), -EINVAL, "a zero time is refused");
	is_int(gr_mark(g, "inst_b", 3000), 0, "another instance");
	is_int(gr_open(tmpdir, &g2), 0, "reopen");
	is_int(gr_get(g2, "inst_a"), 1000, "a reopened record keeps inst_a's mark");
	is_int(gr_get(g2, "inst_b"), 3000, "and inst_b's");
	gr_clear(g2, "inst_a");
	is_int(gr_get(g2, "inst_a"), 0, "cleared");
	ok(access(file, F_OK) < 0, "its file is gone");
	gr_close(g2);
	is_int(gr_open(tmpdir, &g2), 0, "reopen again");
	is_int(gr_get(g2, "inst_a"), 0, "the clear survives a reopen");
	gr_clear(g2, "inst_b");
	gr_close(g2);
	gr_close(g);
}

static int woken;

static void count_wake(void *ctx)
{
	(void)ctx;
	__atomic_add_fetch(&woken, 1, __ATOMIC_SEQ_CST);
}

/* The fake's guests: up when started, after guest_ready_delay_ms, never
 * with <id>.noready; not again when already running. */
static void test_fake_guest_up(void)
{
	struct guestready *g = NULL;
	struct rt_config cfg = {.state_dir = tmpdir, .capacity_disk_gib = 100,
				.wake = count_wake};
	struct rt *rt = NULL;
	int64_t t0, w0;

	is_int(gr_open(tmpdir, &g), 0, "gr_open");
	cfg.guest_ready = g;
	is_int(rt_open("fake", &cfg, &rt), 0, "open the fake with marks");
	is_int(create(rt, "gu_now"), 0, "create gu_now");
	is_int(rt->ops->start(rt, "gu_now"), 0, "start gu_now");
	ok(gr_get(g, "gu_now") > 0, "no delay: up when started");

	write_file("guest_ready_delay_ms", "400\n");
	is_int(create(rt, "gu_late"), 0, "create gu_late");
	t0 = mono_ms();
	w0 = now_ms(); /* the marks are wall-clock ms */
	is_int(rt->ops->start(rt, "gu_late"), 0, "start gu_late");
	while (!gr_get(g, "gu_late") && mono_ms() - t0 < 10000)
		usleep(20000);
	/* when the mark was made, not when this thread looked (a loaded
	 * machine can hold this thread past the delay) */
	ok(gr_get(g, "gu_late") - w0 >= 400, "with a 400 ms delay: up, and marked 400 ms or more "
	   "after the start (%lld ms)", (long long)(gr_get(g, "gu_late") - w0));
	/* the delayed thread marks, then wakes: this thread may look between */
	while (__atomic_load_n(&woken, __ATOMIC_SEQ_CST) < 1 && mono_ms() - t0 < 10000)
		usleep(20000);
	ok(__atomic_load_n(&woken, __ATOMIC_SEQ_CST) >= 1, "the delayed mark woke the runtime's owner");

	write_file("gu_never.noready", "");
	remove_file("guest_ready_delay_ms");
	is_int(create(rt, "gu_never"), 0, "create gu_never");
	is_int(rt->ops->start(rt, "gu_never"), 0, "start gu_never");
	is_int(gr_get(g, "gu_never"), 0, "<id>.noready: never up");

	/* 2 s: the stop below must come before the delay ends, even with the
	 * machine loaded */
	write_file("guest_ready_delay_ms", "2000\n");
	is_int(create(rt, "gu_stopped"), 0, "create gu_stopped");
	t0 = mono_ms();
	is_int(rt->ops->start(rt, "gu_stopped"), 0, "start gu_stopped");
	is_int(rt->ops->stop(rt, "gu_stopped"), 0, "and stop it before its guest is up");
	printf("# start -> stop took %lld ms of the 2000 ms delay\n", (long long)(mono_ms() - t0));
	usleep(2300000);
	is_int(gr_get(g, "gu_stopped"), 0, "a guest stopped before its delay is never marked");
	remove_file("guest_ready_delay_ms");
	rt->ops->close(rt);
	for (const char *const *id = (const char *const[]){"gu_now", "gu_late", "gu_never",
							       "gu_stopped", NULL}; *id; id++)
		gr_clear(g, *id);
	gr_close(g);
}

int main(void)
{
	log_init("test", LOG_LVL_ERROR);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-fake-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_memory_not_disk();
	test_failed_writes();
	test_transition_in_place();
	test_hooks_and_bad_records();
	test_guestready_marks();
	test_fake_guest_up();
	rm_rf(tmpdir);
	done_testing();
}
