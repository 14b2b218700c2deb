/* runtime_fake.c: the `fake` runtime, the spec's FakeDaemon.
 *
 * It records and reports: no VM runs. Each instance is a text record
 * state_dir/fake/<id>.inst of `key=value` lines (id, state, vcpus,
 * memory_mib, disk_gib, network_policy, ssh_from_host_only, tenant_id,
 * image_sha256, created_at, creates, then one `nic=` / `volume=` line each;
 * the state padded with spaces to a fixed width, right after the id),
 * written atomically, so it survives bcd restarts exactly like a VM
 * survives them: after a SIGKILL, list() returns the same instances in the
 * same states and nothing is created twice.
 *
 * The records are read from disk once, when the runtime is opened (after
 * sweeping the temporary files a killed bcd left), and kept in memory,
 * sorted by id: list(), admission, transitions and live updates read memory,
 * never the directory (a converge pass lists the runtime, and a bench node
 * holds hundreds of records). Every change is written through: the record
 * file is replaced atomically, or for a transition (start, pause, resume,
 * stop) only its state field is rewritten in place, one small write (or it
 * is unlinked, for destroy), and only then is
 * memory changed, so a failed write leaves both as they were and a new
 * open after a SIGKILL sees exactly what the last one had. Records changed
 * or removed on disk behind an open runtime's back are seen at the next
 * open, not before. A record that does not parse is listed in state error;
 * every operation on it but destroy fails with the load error.
 *
 * Every operation that changes a record appends one line to
 * state_dir/fake/ledger.log after the record is on disk:
 *   ts=<epoch ms> op=<create|adopt|update|start|pause|resume|stop|destroy> id=<id> ...
 * (a running guest told a volume grew: op=block_resize id=<id> serial=<s>
 * bytes=<n>, no record changed)
 * so tests can count creates per id (`grep -c 'op=create id=<id> '`).
 *
 * Host admission: the vCPUs and memory of every instance the fake holds
 * (whatever its state) plus the new one must fit capacity_vcpus and
 * capacity_memory_mib; otherwise create answers -ENOSPC with
 * "ResourcesExhausted: memory" (or vcpus). A capacity of 0 is not enforced.
 *
 * Test hooks, read from disk on every use (one small file each, no
 * directory scan): a file state_dir/fake/<id>.fail holding operation names
 * ("start", "destroy", ...) makes those operations fail with -EIO; a file
 * state_dir/fake/admission of `capacity_memory_mib=N` / `capacity_vcpus=N`
 * lines makes admission use those limits instead of the configured ones,
 * as a host whose real room is smaller than what it offers (huge pages
 * taken, another tenant of the machine): it then refuses instances the
 * controller booked on it. A file state_dir/fake/<id>.slow of `op=ms` items
 * ("create=5000 start=200") makes those operations of id take that long
 * (a sleep before the operation, outside the lock: other instances'
 * operations proceed meanwhile), as a slow libvirt define would; the
 * ledger gets "op=slow id=<id> wait=<op>:<ms>" as the sleep begins.
 *
 * Snapshots: capture writes a real file (a header naming the source, then
 * filler that differs at each capture, 4096 bytes or the count in
 * state_dir/fake/<id>.snapbytes), so its digest means something; restore
 * takes only such a file and creates the instance running (memory) or
 * stopped (disk only); the ledger gets op=capture and op=restored lines.
 *
 * Identity rebinds: runtime_fake_rebind.c (op=rebind).
 *
 * Guests: a started instance's guest reports up at once, or after the
 * delay in state_dir/fake/guest_ready_delay_ms, or never with a file
 * state_dir/fake/<id>.noready (see "guests coming up").
 *
 * The converge thread and its runtime workers call it (runtime.h), never
 * two at once for one instance; a mutex guards the records, so a list()
 * from another thread (tests do) is safe too. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admit.h"
#include "guestready.h"
#include "runtime.h"
#include "runtime_fake_int.h"
#include "util.h"

#define FAKE_SUFFIX ".inst"
#define FAKE_REC_MAX (256 * 1024)
#define FAKE_FIELD_MAX 128
#define FAKE_STATE_W 12      /* the state field's width on disk, padded with spaces */
#define GIB (1024ull * 1024 * 1024)

/* A guest that comes up at due (mono ms). */
struct fake_boot {
	char id[RT_ID_MAX + 1];
	int64_t due;
};

/* One record. Lines the fake does not interpret (nic=, volume=) are kept
 * verbatim in extra so rewriting a record never loses them. */
struct fake_rec {
	char id[RT_ID_MAX + 1];
	enum rt_state state;
	uint32_t vcpus;
	uint64_t memory_mib;
	uint64_t disk_gib;
	char network_policy[FAKE_FIELD_MAX];
	bool ssh_from_host_only;
	char tenant_id[FAKE_FIELD_MAX];
	char image_sha256[FAKE_FIELD_MAX];
	int64_t created_at;
	uint32_t creates;
	char *extra;
	int load_err;              /* its file did not load: -errno, else 0 */
	bool inplace;              /* its file's state field can be rewritten in place */
};

struct rt_fake {
	struct rt base;
	char *dir;                 /* state_dir/fake */
	char *ledger;              /* state_dir/fake/ledger.log */
	struct rt_config cap;      /* capacity_* used; state_dir not kept */
	pthread_mutex_t lock;      /* guards recs, n_recs, cap_recs */
	struct fake_rec *recs;     /* what is on disk, sorted by id */
	size_t n_recs, cap_recs;
	/* guests coming up later (guest_ready_delay_ms): marked by boot_th */
	pthread_mutex_t boot_lock; /* guards boots, n_boots, cap_boots, boot_stop */
	pthread_cond_t boot_cond;
	struct fake_boot *boots;
	size_t n_boots, cap_boots;
	bool boot_stop, boot_started;
	pthread_t boot_th;
};

static struct rt_fake *fake_of(struct rt *rt)
{
	return (struct rt_fake *)rt;
}

static char *rec_path(const struct rt_fake *f, const char *id, const char *suffix)
{
	return xasprintf("%s/%s%s", f->dir, id, suffix);
}

static void rec_clear(struct fake_rec *r)
{
	free(r->extra);
	r->extra = NULL;
}

static void copy_field(char *dst, const char *src)
{
	snprintf(dst, FAKE_FIELD_MAX, "%s", src ? src : "");
}

/* ------------------------------------------------------------ records */

static void rec_set(struct fake_rec *r, const char *k, const char *v, size_t *extra_len)
{
	if (strcmp(k, "id") == 0)
		snprintf(r->id, sizeof(r->id), "%s", v);
	else if (strcmp(k, "state") == 0) {
		char st[FAKE_STATE_W + 1];
		size_t n = strcspn(v, " ");
		snprintf(st, sizeof(st), "%.*s", (int)(n < FAKE_STATE_W ? n : FAKE_STATE_W), v);
		if (rt_state_parse(st, &r->state) < 0)
			r->state = RT_STATE_ERROR;
	} else if (strcmp(k, "vcpus") == 0)
		r->vcpus = (uint32_t)strtoul(v, NULL, 10);
	else if (strcmp(k, "memory_mib") == 0)
		r->memory_mib = strtoull(v, NULL, 10);
	else if (strcmp(k, "disk_gib") == 0)
		r->disk_gib = strtoull(v, NULL, 10);
	else if (strcmp(k, "network_policy") == 0)
		copy_field(r->network_policy, v);
	else if (strcmp(k, "ssh_from_host_only") == 0)
		r->ssh_from_host_only = strcmp(v, "1") == 0;
	else if (strcmp(k, "tenant_id") == 0)
		copy_field(r->tenant_id, v);
	else if (strcmp(k, "image_sha256") == 0)
		copy_field(r->image_sha256, v);
	else if (strcmp(k, "created_at") == 0)
		r->created_at = strtoll(v, NULL, 10);
	else if (strcmp(k, "creates") == 0)
		r->creates = (uint32_t)strtoul(v, NULL, 10);
	else {
		size_t add = strlen(k) + strlen(v) + 2;
		r->extra = realloc(r->extra, *extra_len + add + 1);
		if (!r->extra)
			abort();
		sprintf(r->extra + *extra_len, "%s=%s\n", k, v);
		*extra_len += add;
	}
}

static void rec_parse(struct fake_rec *r, char *text)
{
	size_t extra_len = 0;
	char *save = NULL;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		rec_set(r, line, eq + 1, &extra_len);
	}
}

/* Where the state field of id's record text starts, if the record has
 * the layout rec_save writes ("id=<id>\nstate=" then FAKE_STATE_W
 * characters and a newline), so a transition can rewrite it in place;
 * else 0. */
static size_t state_field_at(const char *text, const char *id)
{
	size_t il = strlen(id), at = 3 + il + 1 + 6;

	if (strncmp(text, "id=", 3) != 0 || strncmp(text + 3, id, il) != 0 ||
	    text[3 + il] != '\n' || strncmp(text + 4 + il, "state=", 6) != 0 ||
	    strnlen(text + at, FAKE_STATE_W + 1) < FAKE_STATE_W + 1 ||
	    text[at + FAKE_STATE_W] != '\n')
		return 0;
	return at;
}

/* Load the record of id: 0, -ENOENT if the fake has no such instance. */
static int rec_load(const struct rt_fake *f, const char *id, struct fake_rec *ret)
{
	_cleanup_free_ char *path = rec_path(f, id, FAKE_SUFFIX);
	_cleanup_free_ char *text = NULL;
	struct fake_rec r = {.state = RT_STATE_ERROR};
	int e;

	e = file_read_all(path, FAKE_REC_MAX, &text, NULL);
	if (e < 0)
		return e;
	r.inplace = state_field_at(text, id) > 0;
	rec_parse(&r, text);
	if (strcmp(r.id, id) != 0) {
		rec_clear(&r);
		return -EBADMSG;
	}
	*ret = r;
	return 0;
}

static int rec_save(const struct rt_fake *f, struct fake_rec *r)
{
	_cleanup_free_ char *path = rec_path(f, r->id, FAKE_SUFFIX);
	_cleanup_free_ char *text = xasprintf(
		"id=%s\nstate=%-*s\nvcpus=%" PRIu32 "\nmemory_mib=%" PRIu64 "\ndisk_gib=%" PRIu64
		"\nnetwork_policy=%s\nssh_from_host_only=%d\ntenant_id=%s\nimage_sha256=%s\n"
		"created_at=%" PRId64 "\ncreates=%" PRIu32 "\n%s",
		r->id, FAKE_STATE_W, rt_state_name(r->state), r->vcpus, r->memory_mib, r->disk_gib,
		r->network_policy, r->ssh_from_host_only ? 1 : 0, r->tenant_id, r->image_sha256,
		r->created_at, r->creates, r->extra ? r->extra : "");
	int e;

	/* a record stands for a VM, which outlives bcd but not the machine:
	 * atomic against a killed bcd is what it needs, no fsync */
	e = file_replace(path, text, strlen(text), 0644);
	if (e == 0)
		r->inplace = true;
	return e;
}

/* A transition: only the state changes, so only its field is rewritten,
 * in place (one write of FAKE_STATE_W bytes within the file's first page:
 * whole or not at all for a killed bcd, as the rename of a new record is),
 * instead of a new file renamed over the old one (a new inode per
 * transition, which costs ext4 more than all else a claim does in bcd).
 * Never through a symbolic link. */
static int rec_save_state(const struct rt_fake *f, const struct fake_rec *r,
			  enum rt_state to)
{
	_cleanup_free_ char *path = rec_path(f, r->id, FAKE_SUFFIX);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	char field[FAKE_STATE_W + 1];
	ssize_t n;

	if (fd < 0)
		return -errno;
	snprintf(field, sizeof(field), "%-*s", FAKE_STATE_W, rt_state_name(to));
	n = pwrite(fd, field, FAKE_STATE_W, (off_t)(3 + strlen(r->id) + 1 + 6));
	if (n < 0)
		return -errno;
	return n == FAKE_STATE_W ? 0 : -EIO;
}

/* Append one ledger line (one write). Failures are ignored: the ledger is
 * an observation aid, the record is the truth. */
static void ledger_text(const struct rt_fake *f, const char *line)
{
	_cleanup_close_ int fd = open(f->ledger, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		return;
	if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		return;
}

static void ledger(const struct rt_fake *f, const char *op, const struct fake_rec *r)
{
	_cleanup_free_ char *line = xasprintf(
		"ts=%" PRId64 " op=%s id=%s state=%s vcpus=%" PRIu32 " memory_mib=%" PRIu64 "\n",
		now_ms(), op, r->id, rt_state_name(r->state), r->vcpus, r->memory_mib);

	ledger_text(f, line);
}

/* True if the test hook file of id names op. */
static bool fail_injected(const struct rt_fake *f, const char *id, const char *op)
{
	_cleanup_free_ char *path = rec_path(f, id, ".fail");
	_cleanup_free_ char *text = NULL;
	char *save = NULL;

	if (file_read_all(path, 4096, &text, NULL) < 0)
		return false;
	for (char *w = strtok_r(text, " \t\n,", &save); w; w = strtok_r(NULL, " \t\n,", &save))
		if (strcmp(w, op) == 0)
			return true;
	return false;
}

/* A ledger line as a slow operation begins ("op=slow id=<id> wait=<op>:<ms>"),
 * so tests see that it is under way. */
static void slow_ledger(const struct rt_fake *f, const char *id, const char *op, long ms)
{
	_cleanup_free_ char *line = xasprintf("ts=%" PRId64 " op=slow id=%s wait=%s:%ld\n",
					      now_ms(), id, op, ms);

	ledger_text(f, line);
}

/* The test hook file of id: sleep as long as it says for op (0 if not). */
static void slow_injected(const struct rt_fake *f, const char *id, const char *op)
{
	_cleanup_free_ char *path = rec_path(f, id, ".slow");
	_cleanup_free_ char *text = NULL;
	size_t n = strlen(op);
	char *save = NULL;

	if (file_read_all(path, 4096, &text, NULL) < 0)
		return;
	for (char *w = strtok_r(text, " \t\n,", &save); w; w = strtok_r(NULL, " \t\n,", &save))
		if (strncmp(w, op, n) == 0 && w[n] == '=') {
			long ms = strtol(w + n + 1, NULL, 10);
			if (ms > 0 && ms <= 600000) {
				slow_ledger(f, id, op, ms);
				usleep((useconds_t)ms * 1000);
			}
			return;
		}
}

/* ------------------------------------------------------ guests coming up */

/* The fake's guests announce themselves up when started (guestready.h),
 * after state_dir/fake/guest_ready_delay_ms milliseconds if that file holds
 * a number, never if a file state_dir/fake/<id>.noready exists. A delayed
 * one is marked by boot_th, which skips an instance no longer running. */

static int64_t boot_delay_ms(const struct rt_fake *f)
{
	_cleanup_free_ char *path = xasprintf("%s/guest_ready_delay_ms", f->dir);
	_cleanup_free_ char *text = NULL;
	long long v;

	if (file_read_all(path, 64, &text, NULL) < 0 || sscanf(text, "%lld", &v) != 1 || v < 0)
		return 0;
	return v;
}

static bool rec_running(struct rt_fake *f, const char *id);

static void *boot_run(void *arg)
{
	struct rt_fake *f = arg;

	pthread_mutex_lock(&f->boot_lock);
	while (!f->boot_stop) {
		int64_t now = mono_ms(), next = 0;
		size_t k = 0;
		for (size_t i = 0; i < f->n_boots; i++) {
			struct fake_boot b = f->boots[i];
			if (b.due > now) {
				f->boots[k++] = b;
				if (!next || b.due < next)
					next = b.due;
				continue;
			}
			pthread_mutex_unlock(&f->boot_lock);
			if (rec_running(f, b.id) && gr_mark(f->cap.guest_ready, b.id, now_ms()) == 0 &&
			    f->cap.wake)
				f->cap.wake(f->cap.wake_ctx);
			pthread_mutex_lock(&f->boot_lock);
		}
		f->n_boots = k;
		if (f->boot_stop)
			break;
		if (next) {
			struct timespec until = deadline_ts((int)(next - now));
			pthread_cond_timedwait(&f->boot_cond, &f->boot_lock, &until);
		} else {
			pthread_cond_wait(&f->boot_cond, &f->boot_lock);
		}
	}
	pthread_mutex_unlock(&f->boot_lock);
	return NULL;
}

/* id's guest starts booting: marked up now, later, or never. */
static void guest_boot(struct rt_fake *f, const char *id)
{
	_cleanup_free_ char *noready = rec_path(f, id, ".noready");
	int64_t delay;
	bool queued = false;

	if (!f->cap.guest_ready || gr_get(f->cap.guest_ready, id) || access(noready, F_OK) == 0)
		return;
	delay = boot_delay_ms(f);
	if (delay == 0) {
		gr_mark(f->cap.guest_ready, id, now_ms());
		return;
	}
	pthread_mutex_lock(&f->boot_lock);
	for (size_t i = 0; i < f->n_boots && !queued; i++)
		queued = strcmp(f->boots[i].id, id) == 0;
	if (!queued) {
		if (f->n_boots == f->cap_boots) {
			f->cap_boots = f->cap_boots ? 2 * f->cap_boots : 8;
			f->boots = xrealloc(f->boots, f->cap_boots * sizeof(*f->boots));
		}
		f->boots[f->n_boots] = (struct fake_boot){.due = mono_ms() + delay};
		snprintf(f->boots[f->n_boots].id, sizeof(f->boots[0].id), "%s", id);
		f->n_boots++;
		if (!f->boot_started && pthread_create(&f->boot_th, NULL, boot_run, f) == 0)
			f->boot_started = true;
		pthread_cond_signal(&f->boot_cond);
	}
	pthread_mutex_unlock(&f->boot_lock);
}

/* ------------------------------------------------------ the records held */

static int rec_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct fake_rec *)elem)->id);
}

/* The held record of id, or NULL. Caller holds f->lock; the pointer is
 * good until the next insert or remove. */
static struct fake_rec *held(const struct rt_fake *f, const char *id)
{
	if (!f->n_recs)
		return NULL;
	return bsearch(id, f->recs, f->n_recs, sizeof(*f->recs), rec_cmp);
}

/* Hold r (taking its extra), keeping the array sorted; r->id not held yet. */
static void hold(struct rt_fake *f, struct fake_rec *r)
{
	size_t i = 0;

	if (f->n_recs == f->cap_recs) {
		f->cap_recs = f->cap_recs ? f->cap_recs * 2 : 16;
		f->recs = realloc(f->recs, f->cap_recs * sizeof(*f->recs));
		if (!f->recs)
			abort();
	}
	while (i < f->n_recs && strcmp(f->recs[i].id, r->id) < 0)
		i++;
	memmove(&f->recs[i + 1], &f->recs[i], (f->n_recs - i) * sizeof(*f->recs));
	f->recs[i] = *r;
	r->extra = NULL;
	f->n_recs++;
}

static void unhold(struct rt_fake *f, struct fake_rec *r)
{
	size_t i = (size_t)(r - f->recs);

	rec_clear(r);
	memmove(&f->recs[i], &f->recs[i + 1], (f->n_recs - i - 1) * sizeof(*f->recs));
	f->n_recs--;
}

/* vCPUs and memory of every held instance, whatever its state. */
static void usage(const struct rt_fake *f, struct admit_res *held)
{
	*held = (struct admit_res){0};
	for (size_t i = 0; i < f->n_recs; i++) {
		held->vcpus += f->recs[i].vcpus;
		held->memory_mib += f->recs[i].memory_mib;
	}
}

/* ---------------------------------------------------------- the vtable */

static void fake_close(struct rt *rt)
{
	struct rt_fake *f = fake_of(rt);

	if (!f)
		return;
	pthread_mutex_lock(&f->boot_lock);
	f->boot_stop = true;
	pthread_cond_signal(&f->boot_cond);
	pthread_mutex_unlock(&f->boot_lock);
	if (f->boot_started)
		pthread_join(f->boot_th, NULL);
	pthread_cond_destroy(&f->boot_cond);
	pthread_mutex_destroy(&f->boot_lock);
	free(f->boots);
	for (size_t i = 0; i < f->n_recs; i++)
		rec_clear(&f->recs[i]);
	free(f->recs);
	pthread_mutex_destroy(&f->lock);
	free(f->dir);
	free(f->ledger);
	free(f);
}

/* The id of a directory entry "<id>.inst", or false. */
static bool entry_id(const char *name, char *id)
{
	size_t n = strlen(name), sl = strlen(FAKE_SUFFIX);

	if (n <= sl || strcmp(name + n - sl, FAKE_SUFFIX) != 0 || n - sl > RT_ID_MAX)
		return false;
	memcpy(id, name, n - sl);
	id[n - sl] = '\0';
	return rt_id_valid(id);
}

/* Hold every record of the directory; a record that does not load is held
 * in state error with its load error. Called once, by open. */
static int recs_load(struct rt_fake *f)
{
	DIR *d = opendir(f->dir);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct fake_rec r = {.state = RT_STATE_ERROR};
		char id[RT_ID_MAX + 1];
		int e;

		if (!entry_id(de->d_name, id) || held(f, id))
			continue;
		e = rec_load(f, id, &r);
		if (e == -ENOENT)
			continue;
		if (e < 0)
			r = (struct fake_rec){.state = RT_STATE_ERROR, .load_err = e};
		snprintf(r.id, sizeof(r.id), "%s", id);
		hold(f, &r);
	}
	closedir(d);
	return 0;
}

/* Remove temporary files a killed bcd left behind (file_write_atomic's
 * "<name>.tmp.<pid>"): the record they were replacing is intact. */
static void sweep_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (strstr(de->d_name, FAKE_SUFFIX ".tmp.")) {
			_cleanup_free_ char *path = xasprintf("%s/%s", dir, de->d_name);
			unlink(path);
		}
	closedir(d);
}

static int fake_open(const struct rt_config *cfg, struct rt **ret)
{
	pthread_condattr_t ca;
	struct rt_fake *f;
	int e;

	if (!cfg || !cfg->state_dir)
		return -EINVAL;
	f = xcalloc(1, sizeof(*f));
	f->base.ops = &rt_fake_ops;
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->boot_lock, NULL);
	pthread_condattr_init(&ca);  /* boot_run waits on deadline_ts (monotonic) */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->boot_cond, &ca);
	pthread_condattr_destroy(&ca);
	f->dir = xasprintf("%s/fake", cfg->state_dir);
	f->ledger = xasprintf("%s/ledger.log", f->dir);
	f->cap = *cfg;
	f->cap.state_dir = NULL;
	e = mkdir_p(f->dir, 0700);
	if (e == 0 && access(f->dir, W_OK) < 0)
		e = -errno;
	if (e == 0) {
		sweep_tmp(f->dir);
		e = recs_load(f);
	}
	if (e < 0) {
		fake_close(&f->base);
		return e;
	}
	for (size_t i = 0; i < f->n_recs; i++)  /* came up while no bcd ran */
		if (f->recs[i].state == RT_STATE_RUNNING)
			guest_boot(f, f->recs[i].id);
	*ret = &f->base;
	return 0;
}

static int fake_list(struct rt *rt, struct rt_instance **ret, size_t *ret_n)
{
	struct rt_fake *f = fake_of(rt);
	struct rt_instance *out;
	size_t n;

	pthread_mutex_lock(&f->lock);
	n = f->n_recs;
	out = n ? xcalloc(n, sizeof(*out)) : NULL;
	for (size_t i = 0; i < n; i++) {
		memcpy(out[i].id, f->recs[i].id, sizeof(out[i].id));
		out[i].state = f->recs[i].state;
	}
	pthread_mutex_unlock(&f->lock);
	*ret = out;
	*ret_n = n;
	return 0;
}

/* The admission test hook's limits over cap (see the top of the file). */
static void admission_hook(const struct rt_fake *f, struct rt_config *cap)
{
	_cleanup_free_ char *path = xasprintf("%s/admission", f->dir);
	_cleanup_free_ char *text = NULL;
	char *save = NULL;

	if (file_read_all(path, 4096, &text, NULL) < 0)
		return;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "capacity_memory_mib=", 20) == 0)
			cap->capacity_memory_mib = strtoull(l + 20, NULL, 10);
		else if (strncmp(l, "capacity_vcpus=", 15) == 0)
			cap->capacity_vcpus = (uint32_t)strtoul(l + 15, NULL, 10);
	}
}

/* Host admission (admit.c) against the configured capacity (or the
 * hook's); -ENOSPC with reason. Caller holds f->lock. */
static int admit(const struct rt_fake *f, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct rt_config cfg = f->cap;
	struct admit_res need = {s->vcpus, s->memory_mib};
	struct admit_res cap, held;

	admission_hook(f, &cfg);
	cap = (struct admit_res){cfg.capacity_vcpus, cfg.capacity_memory_mib};
	usage(f, &held);
	return admit_fits(&cap, &held, &need, reason);
}

/* The nic= and volume= lines of a new record. */
static char *rec_extra(const Bc__Node__V1__InstanceSpec *s)
{
	char *out = xstrdup("");

	for (size_t i = 0; i < s->n_nics; i++) {
		const Bc__Node__V1__NicSpec *n = s->nics[i];
		char *next = xasprintf("%snic=%s|%s|%s/%u|%s/%u\n", out, n->tap, n->mac, n->ipv4,
				       n->ipv4_prefix, n->ipv6, n->ipv6_prefix);
		free(out);
		out = next;
	}
	for (size_t i = 0; i < s->n_volumes; i++) {
		const Bc__Node__V1__VolumeAttachment *v = s->volumes[i];
		char *next = xasprintf("%svolume=%s|%s|%s\n", out, v->volume_id, v->serial,
				       v->read_only ? "ro" : "rw");
		free(out);
		out = next;
	}
	return out;
}

static bool spec_strings_printable(const Bc__Node__V1__InstanceSpec *s)
{
	if (!str_is_printable(s->network_policy, FAKE_FIELD_MAX - 1) ||
	    !str_is_printable(s->tenant_id, FAKE_FIELD_MAX - 1))
		return false;
	if (s->image && !str_is_printable(s->image->sha256, FAKE_FIELD_MAX - 1))
		return false;
	for (size_t i = 0; i < s->n_nics; i++)
		if (!str_is_printable(s->nics[i]->tap, 64) || !str_is_printable(s->nics[i]->mac, 64) ||
		    !str_is_printable(s->nics[i]->ipv4, 64) || !str_is_printable(s->nics[i]->ipv6, 64))
			return false;
	for (size_t i = 0; i < s->n_volumes; i++)
		if (!str_is_printable(s->volumes[i]->volume_id, 64) ||
		    !str_is_printable(s->volumes[i]->serial, 64))
			return false;
	return true;
}

/* A new record of s (its extra owned). */
static struct fake_rec rec_of_spec(const Bc__Node__V1__InstanceSpec *s)
{
	struct fake_rec r = {.state = RT_STATE_STOPPED};

	snprintf(r.id, sizeof(r.id), "%s", s->id);
	r.vcpus = s->vcpus;
	r.memory_mib = s->memory_mib;
	r.disk_gib = s->disk_gib;
	copy_field(r.network_policy, s->network_policy);
	r.ssh_from_host_only = s->ssh_from_host_only;
	copy_field(r.tenant_id, s->tenant_id);
	copy_field(r.image_sha256, s->image ? s->image->sha256 : "");
	r.created_at = now_ms();
	r.creates = 1;
	r.extra = rec_extra(s);
	return r;
}

/* Caller holds f->lock. */
static int create_locked(struct rt_fake *f, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct fake_rec r;
	int e;

	if (held(f, s->id))
		return -EEXIST;
	if (fail_injected(f, s->id, "create")) {
		snprintf(reason, RT_REASON_MAX, "create failed: injected");
		return -EIO;
	}
	e = admit(f, s, reason);
	if (e < 0)
		return e;
	r = rec_of_spec(s);
	e = rec_save(f, &r);
	if (e == 0) {
		ledger(f, "create", &r);
		hold(f, &r);
	}
	rec_clear(&r);
	return e;
}

static int fake_create(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct rt_fake *f = fake_of(rt);
	int e;

	if (!rt_id_valid(s->id) || !spec_strings_printable(s)) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable field");
		return -EINVAL;
	}
	slow_injected(f, s->id, "create");
	pthread_mutex_lock(&f->lock);
	e = create_locked(f, s, reason);
	pthread_mutex_unlock(&f->lock);
	return e;
}

/* The held record of id for an operation on it: 0, -ENOENT if the fake has
 * no such instance, or the error its file failed to load with. Caller holds
 * f->lock. */
static int held_for_op(const struct rt_fake *f, const char *id, struct fake_rec **ret)
{
	struct fake_rec *r = held(f, id);

	if (!r)
		return -ENOENT;
	if (r->load_err < 0)
		return r->load_err;
	*ret = r;
	return 0;
}

/* Record spec's live settings if they differ; op names the ledger line.
 * Caller holds f->lock. */
static int apply_live_locked(struct rt_fake *f, const Bc__Node__V1__InstanceSpec *s,
			     const char *op, bool always_log)
{
	struct fake_rec *cur = NULL, next;
	bool changed;
	int e;

	if (fail_injected(f, s->id, op))
		return -EIO;
	e = held_for_op(f, s->id, &cur);
	if (e < 0)
		return e;
	next = *cur;  /* shares cur's extra: only read */
	copy_field(next.network_policy, s->network_policy);
	next.ssh_from_host_only = s->ssh_from_host_only;
	changed = strcmp(cur->network_policy, next.network_policy) != 0 ||
		  cur->ssh_from_host_only != next.ssh_from_host_only;
	if (changed && (e = rec_save(f, &next)) < 0)
		return e;
	*cur = next;
	if (changed || always_log)
		ledger(f, op, cur);
	return 0;
}

static int apply_live(struct rt_fake *f, const Bc__Node__V1__InstanceSpec *s, const char *op,
		      bool always_log)
{
	int e;

	if (!rt_id_valid(s->id) || !str_is_printable(s->network_policy, FAKE_FIELD_MAX - 1))
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	e = apply_live_locked(f, s, op, always_log);
	pthread_mutex_unlock(&f->lock);
	return e;
}

static int fake_adopt(struct rt *rt, const Bc__Node__V1__InstanceSpec *s)
{
	return apply_live(fake_of(rt), s, "adopt", true);
}

static int fake_update(struct rt *rt, const Bc__Node__V1__InstanceSpec *s)
{
	return apply_live(fake_of(rt), s, "update", false);
}

/* transition's body; caller holds f->lock. */
static int transition_locked(struct rt_fake *f, const char *id, const char *op, unsigned from,
			     enum rt_state to)
{
	struct fake_rec *cur = NULL, next;
	int e;

	e = held_for_op(f, id, &cur);
	if (e < 0)
		return e;
	if (cur->state == to)
		return 0;
	if (!(from & (1u << cur->state)))
		return -EINVAL;
	if (fail_injected(f, id, op))
		return -EIO;
	if (cur->inplace) {
		e = rec_save_state(f, cur, to);
	} else { /* a record an older bcd wrote: rewritten whole, once */
		next = *cur;  /* shares cur's extra: only read */
		next.state = to;
		e = rec_save(f, &next);
		cur->inplace = next.inplace;
	}
	if (e < 0)
		return e;
	cur->state = to;
	ledger(f, op, cur);
	return 0;
}

/* Move id from one of the states in `from` (bitmask of 1 << rt_state) to
 * `to`. Already in `to`: 0, nothing written. Another state: -EINVAL. */
static int transition(struct rt *rt, const char *id, const char *op, unsigned from,
		      enum rt_state to)
{
	struct rt_fake *f = fake_of(rt);
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	slow_injected(f, id, op);
	pthread_mutex_lock(&f->lock);
	e = transition_locked(f, id, op, from, to);
	pthread_mutex_unlock(&f->lock);
	return e;
}

#define BIT(s) (1u << (s))

static bool rec_running(struct rt_fake *f, const char *id)
{
	struct fake_rec *r;
	bool running;

	pthread_mutex_lock(&f->lock);
	r = held(f, id);
	running = r && r->state == RT_STATE_RUNNING;
	pthread_mutex_unlock(&f->lock);
	return running;
}

static int fake_start(struct rt *rt, const char *id)
{
	int e = transition(rt, id, "start", BIT(RT_STATE_STOPPED), RT_STATE_RUNNING);

	if (e == 0)
		guest_boot(fake_of(rt), id);
	return e;
}

static int fake_pause(struct rt *rt, const char *id)
{
	return transition(rt, id, "pause", BIT(RT_STATE_RUNNING), RT_STATE_PAUSED);
}

static int fake_resume(struct rt *rt, const char *id)
{
	return transition(rt, id, "resume", BIT(RT_STATE_PAUSED), RT_STATE_RUNNING);
}

static int fake_stop(struct rt *rt, const char *id)
{
	return transition(rt, id, "stop",
			  BIT(RT_STATE_RUNNING) | BIT(RT_STATE_PAUSED) | BIT(RT_STATE_ERROR),
			  RT_STATE_STOPPED);
}

/* Unlink the record of id and forget it (an unreadable record too); 0 if
 * the fake has no such instance. Caller holds f->lock. */
static int destroy_locked(struct rt_fake *f, const char *id)
{
	_cleanup_free_ char *path = NULL;
	struct fake_rec *cur = held(f, id);

	if (!cur)
		return 0;
	path = rec_path(f, id, FAKE_SUFFIX);
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	ledger(f, "destroy", cur);
	unhold(f, cur);
	return 0;
}

static int fake_destroy(struct rt *rt, const char *id)
{
	struct rt_fake *f = fake_of(rt);
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	slow_injected(f, id, "destroy");
	if (fail_injected(f, id, "destroy"))
		return -EIO;
	pthread_mutex_lock(&f->lock);
	e = destroy_locked(f, id);
	pthread_mutex_unlock(&f->lock);
	return e;
}

/* A running or paused instance is told a disk grew (the ledger line
 * above). -ENOENT for an instance the fake does not hold, -EINVAL for one
 * not running or paused; "block_resize" in its .fail file: -EIO. */
static int fake_block_resize(struct rt *rt, const char *id, const char *serial, uint64_t bytes)
{
	struct rt_fake *f = fake_of(rt);
	struct fake_rec *cur;
	int e = 0;

	if (!rt_id_valid(id) || !str_is_printable(serial, 64))
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	cur = held(f, id);
	if (!cur)
		e = -ENOENT;
	else if (cur->state != RT_STATE_RUNNING && cur->state != RT_STATE_PAUSED)
		e = -EINVAL;
	else if (fail_injected(f, id, "block_resize"))
		e = -EIO;
	pthread_mutex_unlock(&f->lock);
	if (e == 0) {
		_cleanup_free_ char *line = xasprintf("ts=%" PRId64 " op=block_resize id=%s serial=%s "
						      "bytes=%" PRIu64 "\n", now_ms(), id, serial,
						      bytes);
		ledger_text(f, line);
	}
	return e;
}

/* ------------------------------------------------------------ snapshots */

#define FAKE_SNAP_MAGIC "bc-fake-snapshot 1\n"
#define FAKE_SNAP_BYTES_MAX (4ull << 30)

/* The filler bytes of a capture: state_dir/fake/<id>.snapbytes (a test
 * hook: a bigger object), else 4096. */
static uint64_t snap_bytes(const struct rt_fake *f, const char *id)
{
	_cleanup_free_ char *path = rec_path(f, id, ".snapbytes"), *text = NULL;
	unsigned long long n;

	if (file_read_all(path, 64, &text, NULL) < 0 || sscanf(text, "%llu", &n) != 1 ||
	    n > FAKE_SNAP_BYTES_MAX)
		return 4096;
	return n;
}

/* The object: a header naming the source, then filler that differs from
 * one capture to the next (seeded with the time), written in blocks. */
static int snap_write(int fd, const struct fake_rec *r, bool memory, uint64_t n)
{
	_cleanup_free_ char *head = xasprintf(FAKE_SNAP_MAGIC "source=%s\nmemory=%d\nstate=%s\n"
					      "taken=%" PRId64 "\nbytes=%" PRIu64 "\n--\n",
					      r->id, memory, rt_state_name(r->state), now_ms(), n);
	uint64_t x = (uint64_t)now_ms() * 2654435761u + 1;
	unsigned char buf[65536];

	if (write(fd, head, strlen(head)) != (ssize_t)strlen(head))
		return -EIO;
	while (n > 0) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		for (size_t i = 0; i < k; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[i] = (unsigned char)x;
		}
		if (write(fd, buf, k) != (ssize_t)k)
			return -EIO;
		n -= k;
	}
	return fsync(fd) < 0 ? -errno : 0;
}

static int fake_capture(struct rt *rt, const char *id, bool include_memory, const char *path,
			int64_t *ret_paused_ms, char *reason)
{
	struct rt_fake *f = fake_of(rt);
	struct fake_rec copy = {0}, *r;
	_cleanup_close_ int fd = -1;
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	slow_injected(f, id, "capture");
	pthread_mutex_lock(&f->lock);
	e = held_for_op(f, id, &r);
	if (e == 0 && r->state != RT_STATE_RUNNING && r->state != RT_STATE_PAUSED)
		e = -EBUSY;
	if (e == 0 && fail_injected(f, id, "capture"))
		e = -EIO;
	if (e == 0)
		copy = (struct fake_rec){.state = r->state};
	if (e == 0)
		snprintf(copy.id, sizeof(copy.id), "%s", r->id);
	pthread_mutex_unlock(&f->lock);
	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "capture failed: %s",
			 e == -EBUSY ? "instance not running or paused" : strerror(-e));
		return e;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || (e = snap_write(fd, &copy, include_memory, snap_bytes(f, id))) < 0) {
		e = fd < 0 ? -errno : e;
		snprintf(reason, RT_REASON_MAX, "capture failed: %s", strerror(-e));
		return e;
	}
	{
		_cleanup_free_ char *line = xasprintf("ts=%" PRId64 " op=capture id=%s memory=%d\n",
						      now_ms(), id, include_memory);
		ledger_text(f, line);
	}
	*ret_paused_ms = 0;  /* nothing runs: nothing paused */
	return 0;
}

/* Read and check the object's header (and that its size is what it says). */
static int snap_read(const char *path, char *source, bool *memory)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char head[512] = "", *body, *p;
	unsigned long long bytes = 0;
	struct stat st;
	ssize_t k;
	int m = 0;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	k = read(fd, head, sizeof(head) - 1);
	if (k < 0 || strncmp(head, FAKE_SNAP_MAGIC, strlen(FAKE_SNAP_MAGIC)) != 0 ||
	    !(body = strstr(head, "\n--\n")) || !(p = strstr(head, "source=")) ||
	    sscanf(p, "source=%64[A-Za-z0-9_.-]", source) != 1 || !(p = strstr(head, "memory=")) ||
	    sscanf(p, "memory=%d", &m) != 1 || !(p = strstr(head, "bytes=")) ||
	    sscanf(p, "bytes=%llu", &bytes) != 1 ||
	    (uint64_t)st.st_size != (uint64_t)(body + 4 - head) + bytes)
		return -EBADMSG;
	*memory = m != 0;
	return 0;
}

static int fake_restore(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const char *path,
			enum rt_state *ret_state, char *reason)
{
	struct rt_fake *f = fake_of(rt);
	char source[RT_ID_MAX + 1] = "";
	bool memory = false;
	int e;

	if (!rt_id_valid(s->id) || !spec_strings_printable(s)) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable field");
		return -EINVAL;
	}
	if ((e = snap_read(path, source, &memory)) < 0) {
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: not a fake runtime snapshot (%s)",
			 strerror(-e));
		return e == -EBADMSG ? e : -EIO;
	}
	slow_injected(f, s->id, "restore");
	pthread_mutex_lock(&f->lock);
	e = fail_injected(f, s->id, "restore") ? -EIO : create_locked(f, s, reason);
	if (e == 0 && memory)
		e = transition_locked(f, s->id, "restore", BIT(RT_STATE_STOPPED), RT_STATE_RUNNING);
	pthread_mutex_unlock(&f->lock);
	if (e < 0) {
		if (!*reason)
			snprintf(reason, RT_REASON_MAX, "restore failed: %s", strerror(-e));
		return e;
	}
	{
		_cleanup_free_ char *line = xasprintf("ts=%" PRId64 " op=restored id=%s from=%s "
						      "memory=%d\n", now_ms(), s->id, source, memory);
		ledger_text(f, line);
	}
	if (memory)
		guest_boot(f, s->id);
	*ret_state = memory ? RT_STATE_RUNNING : RT_STATE_STOPPED;
	return 0;
}

/* -------------------------------------- for the fake's other files */

const char *fake_dir(struct rt *rt)
{
	return fake_of(rt)->dir;
}

void fake_ledger(struct rt *rt, const char *line)
{
	ledger_text(fake_of(rt), line);
}

bool fake_fail(struct rt *rt, const char *id, const char *op)
{
	return fail_injected(fake_of(rt), id, op);
}

void fake_slow(struct rt *rt, const char *id, const char *op)
{
	slow_injected(fake_of(rt), id, op);
}

int fake_state(struct rt *rt, const char *id, enum rt_state *ret)
{
	struct rt_fake *f = fake_of(rt);
	const struct fake_rec *r;
	int e = -ENOENT;

	pthread_mutex_lock(&f->lock);
	if ((r = held(f, id))) {
		*ret = r->state;
		e = 0;
	}
	pthread_mutex_unlock(&f->lock);
	return e;
}

const struct runtime_ops rt_fake_ops = {
	.name = "fake",
	.traits = {.snapshot = true, .network_policy = true, .ssh_host_only = true, .volumes = true},
	.open = fake_open,
	.list = fake_list,
	.create = fake_create,
	.adopt = fake_adopt,
	.update = fake_update,
	.start = fake_start,
	.pause = fake_pause,
	.resume = fake_resume,
	.stop = fake_stop,
	.destroy = fake_destroy,
	.block_resize = fake_block_resize,
	.capture = fake_capture,
	.restore = fake_restore,
	.rebind = fake_rebind,
	.close = fake_close,
};
