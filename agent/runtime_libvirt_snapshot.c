/* runtime_libvirt_snapshot.c: the libvirt runtime's capture and restore
 * (runtime.h), and the object they exchange.
 *
 * The object is one self-contained file (LVSNAP_MAGIC, then sections):
 *
 *	bc-libvirt-snapshot 1
 *	section meta <n>      source=<id> memory=0|1 vcpus= memory_mib= guest_up=0|1
 *	section disk <n>      the disk, flattened to a qcow2 with no backing file
 *	section memory <n>    libvirt's save image (memory captures only)
 *	end
 *
 * Capture with memory (running or paused domain): virDomainSaveFlags
 * stops the guest into the save image, the overlay is copied while
 * nothing writes it, and virDomainRestoreFlags starts the source again
 * from the same image, in the state it was in: the guest is paused from
 * the save to the restore (pausedMs), and the source keeps its identity
 * (name, uuid, disk). Disk only: a running guest is suspended for the
 * copy of its overlay and resumed. The copy is a reflink where the
 * filesystem has them (FICLONE), so the pause does not grow with the disk. Either way the copy (backed by the
 * shared image) is then flattened with `qemu-img convert` outside the
 * pause, so the object never names a backing file a restore would follow.
 *
 * A bcd killed between the save and the restore of the source leaves the
 * domain off with its save image in the work directory (and a note naming
 * it): lv_capture_recover, called by snapshot.c's start-up sweep before
 * the converge thread runs, restores it from there.
 *
 * Restore: the sections are split into the new instance's directory, the
 * disk checked by content like a tenant image (image_check_base: no
 * backing file, no data file), and the instance defined on it with its own
 * name, uuid, taps and seed (define_restored). A memory restore then
 * resumes the save image into that definition. libvirt refuses a dxml
 * whose uuid differs from the saved domain's ("Target domain uuid ... does
 * not match source"), and the source may still run on this host under its
 * uuid, so the save image is rewritten with the new definition's XML in
 * its header (lvsnap_save_rebind in runtime_libvirt_save.c: the saved
 * <os>, i.e. the firmware the memory ran, with the new NVRAM file; the
 * memory stream after it is copied unchanged) and restored without dxml.
 * The image is checked (lvsnap_save_check) before libvirtd is given any
 * part of it: its MACs are read by bcd, not virDomainSaveImageGetXMLDesc.
 * The NICs keep the source's MACs,
 * which the guest's memory and virtio device state hold; the guest gets its
 * own through the identity rebind. A memory restore of a guest that had
 * announced itself up (guest_up in the meta) is marked up at once: it will
 * not announce again. A disk-only restore boots fresh. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <linux/fs.h>
#include <libvirt/virterror.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guestready.h"
#include "image.h"
#include "log.h"
#include "runtime.h"
#include "runtime_libvirt.h"
#include "runtime_libvirt_int.h"
#include "spawn.h"
#include "util.h"

#define LVSNAP_META_MAX 4096
#define LVSNAP_MACS_MAX 8
#define CONVERT_TIMEOUT_MS (3600 * 1000)
#define COPY_BLOCK (1 << 20)

/* ------------------------------------------------------------ framing */

/* Copy n bytes (all of src when n is UINT64_MAX) from fd in to fd out. */
static int copy_fd(int in, int out, uint64_t n, uint64_t *ret_copied)
{
	_cleanup_free_ char *buf = xmalloc(COPY_BLOCK);
	uint64_t done = 0;

	while (done < n) {
		size_t want = n - done < COPY_BLOCK ? (size_t)(n - done) : COPY_BLOCK;
		ssize_t k = read(in, buf, want);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		for (ssize_t w = 0; w < k;) {
			ssize_t x = write(out, buf + w, (size_t)(k - w));
			if (x < 0 && errno == EINTR)
				continue;
			if (x <= 0)
				return x < 0 ? -errno : -EIO;
			w += x;
		}
		done += (uint64_t)k;
	}
	if (ret_copied)
		*ret_copied = done;
	return n == UINT64_MAX || done == n ? 0 : -EBADMSG;
}

static int write_str(int fd, const char *s)
{
	size_t n = strlen(s);

	return write(fd, s, n) == (ssize_t)n ? 0 : -EIO;
}

static int section_file(int fd, const char *name, const char *path)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
	char head[96];
	struct stat st;
	int e;

	if (in < 0 || fstat(in, &st) < 0)
		return -errno;
	snprintf(head, sizeof(head), "section %s %" PRIu64 "\n", name, (uint64_t)st.st_size);
	if ((e = write_str(fd, head)) < 0 ||
	    (e = copy_fd(in, fd, (uint64_t)st.st_size, NULL)) < 0)
		return e;
	return 0;
}

int lvsnap_write(int fd, const char *meta, const char *disk, const char *mem)
{
	char head[96];
	int e;

	snprintf(head, sizeof(head), "section meta %zu\n", strlen(meta));
	if ((e = write_str(fd, LVSNAP_MAGIC)) < 0 || (e = write_str(fd, head)) < 0 ||
	    (e = write_str(fd, meta)) < 0 || (e = section_file(fd, "disk", disk)) < 0 ||
	    (mem && (e = section_file(fd, "memory", mem)) < 0) || (e = write_str(fd, "end\n")) < 0)
		return e;
	return fsync(fd) < 0 ? -errno : 0;
}

/* One line (without its \n) of at most max-1 bytes, read byte by byte:
 * the headers are short and the bodies are copied in blocks. */
static int read_line(int fd, char *line, size_t max)
{
	size_t n = 0;

	while (n + 1 < max) {
		char c;
		ssize_t k = read(fd, &c, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -EBADMSG;
		if (c == '\n') {
			line[n] = '\0';
			return 0;
		}
		line[n++] = c;
	}
	return -EBADMSG;
}

static int read_section(int fd, const char *disk_out, const char *mem_out, char **meta,
			bool *seen_disk, bool *has_mem, bool *end)
{
	char line[96], name[16];
	unsigned long long n;
	_cleanup_close_ int out = -1;
	const char *path = NULL;

	if (read_line(fd, line, sizeof(line)) < 0)
		return -EBADMSG;
	if (strcmp(line, "end") == 0) {
		*end = true;
		return 0;
	}
	if (sscanf(line, "section %15s %llu", name, &n) != 2)
		return -EBADMSG;
	if (strcmp(name, "meta") == 0 && !*meta && n < LVSNAP_META_MAX) {
		char *m = xcalloc(1, (size_t)n + 1);
		ssize_t k = read(fd, m, (size_t)n);
		if (k != (ssize_t)n) {
			free(m);
			return -EBADMSG;
		}
		*meta = m;
		return 0;
	}
	if (strcmp(name, "disk") == 0 && !*seen_disk)
		path = disk_out, *seen_disk = true;
	else if (strcmp(name, "memory") == 0 && !*has_mem)
		path = mem_out, *has_mem = true;
	if (!path)
		return -EBADMSG;  /* unknown or repeated */
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return -errno;
	return copy_fd(fd, out, n, NULL) == 0 && fsync(out) == 0 ? 0 : -EBADMSG;
}

int lvsnap_read(const char *path, const char *disk_out, const char *mem_out, char **ret_meta,
		bool *ret_has_mem)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char magic[sizeof(LVSNAP_MAGIC)] = "";
	bool disk = false, mem = false, end = false;
	char *meta = NULL;
	int e = 0;

	if (fd < 0)
		return -errno;
	if (read(fd, magic, strlen(LVSNAP_MAGIC)) != (ssize_t)strlen(LVSNAP_MAGIC) ||
	    strcmp(magic, LVSNAP_MAGIC) != 0)
		return -EBADMSG;
	while (!e && !end)
		e = read_section(fd, disk_out, mem_out, &meta, &disk, &mem, &end);
	if (!e && (!meta || !disk || read(fd, magic, 1) != 0))
		e = -EBADMSG;  /* incomplete, or bytes after "end" */
	if (e < 0) {
		free(meta);
		unlink(disk_out);
		unlink(mem_out);
		return e;
	}
	*ret_meta = meta;
	*ret_has_mem = mem;
	return 0;
}

/* ------------------------------------------------------------ capture */

static int copy_file(const char *from, const char *to)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	int e;

	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return -errno;
	if (ioctl(out, FICLONE, in) == 0)  /* a reflink (btrfs, xfs): no bytes copied */
		return fsync(out) < 0 ? -errno : 0;
	e = copy_fd(in, out, UINT64_MAX, NULL);
	return e < 0 ? e : fsync(out) < 0 ? -errno : 0;
}

/* qemu-img convert: a qcow2 holding the whole disk, no backing file. */
static int flatten(const char *from, const char *to, char *reason)
{
	char out[SPAWN_OUT_MAX];
	char *argv[] = {"qemu-img", "convert", "-q", "-O", "qcow2", (char *)from, (char *)to, NULL};
	int e = spawn_run(argv, CONVERT_TIMEOUT_MS, out);

	if (e < 0) {
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = '\0';
		snprintf(reason, RT_REASON_MAX, "capture failed: qemu-img convert: %.100s",
			 *out ? out : strerror(-e));
	}
	return e < 0 ? -EIO : 0;
}

struct cap_files {
	char *dir, *copy, *flat, *mem;
};

static void cap_files_free(struct cap_files *f)
{
	_cleanup_free_ char *note = xasprintf("%s/source", f->dir);

	unlink(note);
	unlink(f->copy);
	unlink(f->flat);
	unlink(f->mem);
	rmdir(f->dir);
	free(f->dir);
	free(f->copy);
	free(f->flat);
	free(f->mem);
}

/* Memory and disk: save, copy the overlay, restore the source. */
static int capture_mem(struct rt_libvirt *lv, virDomainPtr dom, bool running,
		       const struct cap_files *f, const char *overlay, int64_t *paused,
		       char *reason)
{
	unsigned flags = running ? VIR_DOMAIN_SAVE_RUNNING : VIR_DOMAIN_SAVE_PAUSED;
	_cleanup_free_ char *note = xasprintf("%s %u\n", virDomainGetName(dom), flags);
	_cleanup_free_ char *note_path = xasprintf("%s/source", f->dir);
	int64_t t0 = mono_ms();
	int e;

	/* for lv_capture_recover, should bcd die before the source is back */
	if ((e = file_write_atomic(note_path, note, strlen(note), 0600)) < 0) {
		snprintf(reason, RT_REASON_MAX, "capture failed: %s", strerror(-e));
		return e;
	}
	if (virDomainSaveFlags(dom, f->mem, NULL, flags) < 0) {
		snprintf(reason, RT_REASON_MAX, "capture failed: save: %.120s", lv_err());
		return -EIO;
	}
	e = copy_file(overlay, f->copy);
	if (virDomainRestoreFlags(conn_of(lv), f->mem, NULL, flags) < 0) {
		/* the source must not stay off: logged loudly, the converge
		 * pass sees it stopped and starts it as its spec wants */
		log_error("libvirt: %s: cannot restore the source after its capture: %s",
			  virDomainGetName(dom), lv_err());
		snprintf(reason, RT_REASON_MAX, "capture failed: restore of the source: %.100s",
			 lv_err());
		return -EIO;
	}
	*paused = mono_ms() - t0;
	if (e < 0)
		snprintf(reason, RT_REASON_MAX, "capture failed: copy of the disk: %s",
			 strerror(-e));
	return e;
}

/* Disk only: a running guest is suspended for the copy. */
static int capture_disk(struct rt_libvirt *lv, virDomainPtr dom, bool running,
			const struct cap_files *f, const char *overlay, int64_t *paused,
			char *reason)
{
	int64_t t0 = mono_ms();
	int e;

	if (running && virDomainSuspend(dom) < 0) {
		snprintf(reason, RT_REASON_MAX, "capture failed: suspend: %.120s", lv_err());
		return -EIO;
	}
	e = copy_file(overlay, f->copy);
	if (running && virDomainResume(dom) < 0)
		log_error("libvirt: %s: cannot resume after its disk capture: %s",
			  virDomainGetName(dom), lv_err());
	*paused = running ? mono_ms() - t0 : 0;
	if (e < 0)
		snprintf(reason, RT_REASON_MAX, "capture failed: copy of the disk: %s",
			 strerror(-e));
	(void)lv;
	return e;
}

static int capture_dom(struct rt_libvirt *lv, virDomainPtr dom, const char *id, bool mem,
		       const char *path, int64_t *paused, char *reason)
{
	_cleanup_free_ char *overlay = inst_path(lv, id, "disk.qcow2");
	_cleanup_free_ char *meta = NULL;
	_cleanup_close_ int out = -1;
	enum rt_state st = dom_state(dom);
	struct cap_files f = {0};
	virDomainInfo info;
	int e;

	if (st != RT_STATE_RUNNING && st != RT_STATE_PAUSED && (mem || st != RT_STATE_STOPPED)) {
		snprintf(reason, RT_REASON_MAX, "capture failed: instance is %s", rt_state_name(st));
		return -EBUSY;
	}
	if (virDomainGetInfo(dom, &info) < 0)
		memset(&info, 0, sizeof(info));
	f.dir = xasprintf("%s.d", path);
	f.copy = xasprintf("%s/disk.copy", f.dir);
	f.flat = xasprintf("%s/disk.qcow2", f.dir);
	f.mem = xasprintf("%s/memory.save", f.dir);
	if (mkdir(f.dir, 0700) < 0 && errno != EEXIST) {
		snprintf(reason, RT_REASON_MAX, "capture failed: %s", strerror(errno));
		cap_files_free(&f);
		return -EIO;
	}
	e = mem ? capture_mem(lv, dom, st == RT_STATE_RUNNING, &f, overlay, paused, reason)
		: capture_disk(lv, dom, st == RT_STATE_RUNNING, &f, overlay, paused, reason);
	if (e == 0)
		e = flatten(f.copy, f.flat, reason);
	/* guest_up: the guest the memory holds had announced itself up */
	meta = xasprintf("source=%s\nmemory=%d\nvcpus=%u\nmemory_mib=%lu\nguest_up=%d\n", id, mem,
			 info.nrVirtCpu, info.maxMem / 1024, mem && gr_get(lv->gr, id) > 0);
	if (e == 0 && (out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		e = -errno;
	if (e == 0 && (e = lvsnap_write(out, meta, f.flat, mem ? f.mem : NULL)) < 0)
		snprintf(reason, RT_REASON_MAX, "capture failed: writing the object: %s",
			 strerror(-e));
	cap_files_free(&f);
	return e;
}

void lv_capture_recover(struct rt *rt, const char *workdir)
{
	struct rt_libvirt *lv = lv_of(rt);
	_cleanup_free_ char *note_path = xasprintf("%s/source", workdir), *note = NULL;
	_cleanup_free_ char *mem = xasprintf("%s/memory.save", workdir);
	char id[RT_ID_MAX + 1];
	unsigned flags = 0;
	virDomainPtr dom;

	if (file_read_all(note_path, 256, &note, NULL) < 0 ||
	    sscanf(note, "%64s %u", id, &flags) != 2 || !rt_id_valid(id) || !conn_of(lv) ||
	    !(dom = virDomainLookupByName(conn_of(lv), id)))
		return;
	if (dom_ours(lv, dom) && !virDomainIsActive(dom) && file_exists(mem)) {
		char why[RT_REASON_MAX];
		if (lvsnap_save_check(mem, NULL, why) < 0)
			log_error("libvirt: %s: left saved by an earlier bcd's capture in an image "
				  "not restorable (%s): the converge pass boots it again", id, why);
		else if (virDomainRestoreFlags(conn_of(lv), mem, NULL,
					  flags & (VIR_DOMAIN_SAVE_RUNNING | VIR_DOMAIN_SAVE_PAUSED)) == 0)
			log_warn("libvirt: %s: restored from the save of a capture an earlier bcd "
				 "did not finish", id);
		else
			log_error("libvirt: %s: left saved by an earlier bcd's capture and not "
				  "restorable (%s): the converge pass boots it again", id, lv_err());
	}
	virDomainFree(dom);
}

int lv_capture(struct rt *rt, const char *id, bool include_memory, const char *path,
	       int64_t *ret_paused_ms, char *reason)
{
	struct rt_libvirt *lv = lv_of(rt);
	virDomainPtr dom;
	virConnectPtr c;
	int64_t paused = 0;
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	if (!(c = conn_of(lv))) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return -EIO;
	}
	if (!(dom = virDomainLookupByName(c, id)) || !dom_ours(lv, dom)) {
		if (dom)
			virDomainFree(dom);
		snprintf(reason, RT_REASON_MAX, "capture failed: no instance %s", id);
		return -ENOENT;
	}
	rt_libvirt_call_begin(rt, id);
	e = capture_dom(lv, dom, id, include_memory, path, &paused, reason);
	rt_libvirt_call_end(rt, id);
	virDomainFree(dom);
	if (e < 0) {
		unlink(path);
		return e;
	}
	log_info("libvirt: %s captured (%s), guest paused %" PRId64 " ms", id,
		 include_memory ? "memory and disk" : "disk", paused);
	*ret_paused_ms = paused;
	return 0;
}

/* ------------------------------------------------------------ restore */

/* The NICs' MACs in the save image's domain XML (checked, read by bcd:
 * libvirtd is given no image before lvsnap_save_check accepts it), in
 * order. */
static int saved_macs(const char *mem, char **macs, size_t *ret_n, char *reason)
{
	_cleanup_free_ char *xml = NULL;
	const char *p;
	size_t n = 0;
	int e = lvsnap_save_check(mem, &xml, reason);

	for (p = xml; e == 0 && n < LVSNAP_MACS_MAX && (p = strstr(p, "<mac address='"));) {
		p += strlen("<mac address='");
		if (strlen(p) > 17 && p[17] == '\'') {
			macs[n] = xcalloc(1, 18);
			memcpy(macs[n++], p, 17);
		}
	}
	*ret_n = n;
	return e;
}

/* Resume the save image mem into the defined domain id: its header gets
 * the definition's XML (lvsnap_save_rebind), then a restore without dxml. */
static int resume_saved(struct rt_libvirt *lv, const char *id, const char *mem, char *reason)
{
	virDomainPtr dom = virDomainLookupByName(conn_of(lv), id);
	_cleanup_free_ char *xml = dom ? virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_SECURE |
							       VIR_DOMAIN_XML_MIGRATABLE) : NULL;
	_cleanup_free_ char *bound = xasprintf("%s.bound", mem);
	int e = xml ? lvsnap_save_rebind(mem, bound, xml, reason) : -EIO;

	if (!xml)
		snprintf(reason, RT_REASON_MAX, "RestoreFailed: %.140s", lv_err());
	if (e == 0 && virDomainRestoreFlags(conn_of(lv), bound, NULL, VIR_DOMAIN_SAVE_RUNNING) < 0) {
		snprintf(reason, RT_REASON_MAX, "RestoreFailed: %.140s", lv_err());
		e = -EIO;
	}
	unlink(bound);
	if (e < 0 && dom)
		virDomainUndefineFlags(dom, VIR_DOMAIN_UNDEFINE_NVRAM);
	if (dom)
		virDomainFree(dom);
	return e;
}

static int check_disk(const char *disk, char *reason)
{
	_cleanup_free_ void *head = NULL;
	struct image_info info;
	char why[IMAGE_REASON_MAX];
	size_t n = 0;
	int e = image_read_head(disk, &head, &n);

	if (e == 0)
		e = image_check_base(head, n, "qcow2", &info, why, sizeof(why));
	else
		snprintf(why, sizeof(why), "%s", strerror(-e));
	if (e < 0)
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: its disk: %.120s", why);
	return e < 0 ? -EBADMSG : 0;
}

static int restore_files(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
			 const char *path, const char *disk, const char *mem, bool *has_mem,
			 bool *guest_up, char *reason)
{
	_cleanup_free_ char *dir = inst_path(lv, s->id, NULL), *meta = NULL;
	int e;

	if (mkdir_p(dir, 0711) < 0 || chmod(dir, 0711) < 0) {
		snprintf(reason, RT_REASON_MAX, "restore failed: instance directory: %s",
			 strerror(errno));
		return -EIO;
	}
	if ((e = lvsnap_read(path, disk, mem, &meta, has_mem)) < 0) {
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: not a libvirt runtime snapshot");
		return e;
	}
	*guest_up = *has_mem && strstr(meta, "\nguest_up=1\n");
	if (*has_mem && s->n_volumes) {
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: a memory restore attaches no "
			 "volumes");
		return -EINVAL;
	}
	return check_disk(disk, reason);
}

int lv_restore(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const char *path,
	       enum rt_state *ret_state, char *reason)
{
	struct rt_libvirt *lv = lv_of(rt);
	_cleanup_free_ char *disk = NULL, *mem = NULL;
	char *macs[LVSNAP_MACS_MAX] = {0};
	size_t n_macs = 0;
	bool has_mem = false, guest_up = false;
	virDomainPtr dom;
	int e;

	if (!rt_id_valid(s->id)) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable instance id");
		return -EINVAL;
	}
	if (!conn_of(lv)) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return -EIO;
	}
	if ((dom = virDomainLookupByName(conn_of(lv), s->id))) {
		virDomainFree(dom);
		return -EEXIST;
	}
	disk = inst_path(lv, s->id, "disk.qcow2");
	mem = inst_path(lv, s->id, "restore.save");
	rt_libvirt_call_begin(rt, s->id);
	e = restore_files(lv, s, path, disk, mem, &has_mem, &guest_up, reason);
	if (e == 0 && has_mem)
		e = saved_macs(mem, macs, &n_macs, reason);
	if (e == 0)
		e = define_restored(lv, s, has_mem ? macs : NULL, n_macs, reason);
	if (e == 0 && has_mem)
		e = resume_saved(lv, s->id, mem, reason);
	unlink(mem);
	rt_libvirt_call_end(rt, s->id);
	for (size_t i = 0; i < n_macs; i++)
		free(macs[i]);
	if (e < 0) {
		inst_dir_remove(lv, s->id);
		return e;
	}
	*ret_state = has_mem ? RT_STATE_RUNNING : RT_STATE_STOPPED;
	known_set(lv, s->id, *ret_state, true);
	/* resumed, its guest does not announce itself again: up if it was
	 * up when its memory was captured (guestready.h) */
	if (guest_up && lv->gr)
		gr_mark(lv->gr, s->id, now_ms());
	log_info("libvirt: %s restored (%s)", s->id, has_mem ? "resumed from memory" : "disk, boots fresh");
	return 0;
}
