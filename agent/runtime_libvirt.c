/* runtime_libvirt.c: the `libvirt` runtime, VMs through the libvirt C API.
 *
 * Domain name = instance id. Every domain it defines carries bc's metadata
 * element naming this node (domxml.c); list() returns only domains naming
 * this node, and no operation touches a domain naming another, so two bcd
 * processes sharing one libvirtd never see each other's domains.
 *
 * Files, all under data_dir (directories 0711 so QEMU's user can reach the
 * files libvirt's DAC driver hands it; files 0600/0644):
 *   images/<sha256>                 verified pool images, shared, read-only
 *   instances/<id>/disk.qcow2       the overlay backed by the image
 *   instances/<id>/seed.iso         the NoCloud cidata seed (read-only disk)
 *   instances/<id>/nvram.fd         UEFI variables (libvirt copies the template)
 *   instances/<id>/console.log      serial console, appended by virtlogd
 *   volumes/<volume id>.raw         attached volumes (raw; made by volumes.c,
 *                                   in volumes_dir when configured)
 *
 * create = host admission, image fetched and checked, overlay, seed, define
 * (stopped). start/pause/resume are the libvirt calls; stop is an ACPI
 * shutdown with a bounded wait, then destroy; destroy removes the domain
 * (with its NVRAM) and the instance directory, and is 0 when all is gone.
 * adopt never touches a running domain. The converge thread and its
 * runtime workers call in, each on its own libvirt connection (conn_of). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admit.h"
#include "domxml.h"
#include "hostcheck.h"
#include "image.h"
#include "imgfetch.h"
#include "log.h"
#include "runtime.h"
#include "runtime_libvirt.h"
#include "seed.h"
#include "util.h"
#include "volumes.h"

#define GIB (1024ull * 1024 * 1024)
#define DEFAULT_URI "qemu:///system"
#define DEFAULT_STOP_MS 30000
#define DEFAULT_IMAGE_MAX (64 * GIB)
#define NODE_ID_MAX 128
#define STOP_POLL_MS 100

#define SHUT_MAX 64
#define STOP_SYNC_MS 2000  /* a stop waits this long itself; then later passes */

/* A guest asked to shut down (ACPI), forced off at deadline. */
struct shutdown {
	char id[RT_ID_MAX + 1];  /* "" = free */
	int64_t deadline;        /* mono ms */
};

/* An instance with runtime calls under way (several: never, but counted). */
struct lv_call {
	char id[RT_ID_MAX + 1];
	unsigned n;
};

/* A calling thread's own libvirt connection. */
struct lv_conn {
	pthread_t thread;
	virConnectPtr conn;
};

struct rt_libvirt {
	struct rt base;
	struct lv_conn *conns;        /* one per calling thread, under mu */
	size_t n_conns, cap_conns;
	char *uri;
	char *node_id;
	char *data_dir, *images_dir, *instances_dir, *volumes_dir;
	char *ca_file;
	const char *type;             /* "kvm" | "qemu" */
	uint32_t cap_vcpus;
	uint64_t cap_memory_mib;
	uint64_t image_max;
	uint32_t stop_ms;
	rt_boot_data_fn boot_data;
	void *boot_data_ctx;
	struct imgfetch *fetch;       /* image downloads (worker threads) */
	/* Several converge workers call at once (runtime.h), never two for
	 * one instance: mu guards the connections' table, shut and
	 * gateway4; admit_mu the admission and its bookings; fetch_mu
	 * imgfetch_get (one caller at a time). */
	pthread_mutex_t mu, admit_mu, fetch_mu;
	struct admit_res booked;      /* admitted creates not defined yet */
	struct shutdown shut[SHUT_MAX]; /* ACPI shutdowns under way */
	char gateway4[64];            /* NodeSpec.ipam_gateway, from node() */
	/* Under mu: the calls under way per instance (call_begin/call_end),
	 * bumped epoch at each; this node's domains as last seen (known,
	 * valid once one whole list was taken). See lv_list. */
	struct lv_call *calls;
	size_t n_calls, cap_calls;
	uint64_t epoch;
	struct rt_instance *known;
	size_t n_known, cap_known;
	bool known_valid;
	char hugepages_dir[256];      /* /sys/kernel/mm/hugepages (tests: BC_HUGEPAGES_DIR) */
};

/* Per calling thread: the last libvirt error logged, and the message of the
 * thread's last failed operation alone (last_error). */
static _Thread_local char last_err[256];
static _Thread_local char last_msg[200];

static struct rt_libvirt *lv_of(struct rt *rt)
{
	return (struct rt_libvirt *)rt;
}

/* libvirt's default handler prints every error on stderr: the runtime
 * reports errors itself, once, with the instance. */
static void quiet(void *data, virErrorPtr e)
{
}

static const char *lv_err(void)
{
	virErrorPtr e = virGetLastError();

	return e && e->message ? e->message : "unknown libvirt error";
}

static int lv_errno(void)
{
	virErrorPtr e = virGetLastError();

	if (!e)
		return -EIO;
	switch (e->code) {
	case VIR_ERR_NO_DOMAIN:
		return -ENOENT;
	case VIR_ERR_OPERATION_INVALID:
		return -EINVAL;
	case VIR_ERR_SYSTEM_ERROR:
		return e->int1 > 0 ? -e->int1 : -EIO;
	default:
		return -EIO;
	}
}

/* ------------------------------------------------------ state mapping */

enum rt_state rt_libvirt_state(int state, int reason)
{
	switch (state) {
	case VIR_DOMAIN_RUNNING:
	case VIR_DOMAIN_BLOCKED:
	case VIR_DOMAIN_SHUTDOWN:  /* shutting down: still running */
		return RT_STATE_RUNNING;
	case VIR_DOMAIN_PAUSED:
		/* paused by an I/O error or a crash is no pause anyone asked for */
		if (reason == VIR_DOMAIN_PAUSED_IOERROR || reason == VIR_DOMAIN_PAUSED_CRASHED ||
		    reason == VIR_DOMAIN_PAUSED_SHUTTING_DOWN)
			return RT_STATE_ERROR;
		return RT_STATE_PAUSED;
	case VIR_DOMAIN_PMSUSPENDED:
		return RT_STATE_PAUSED;
	case VIR_DOMAIN_SHUTOFF:
		return RT_STATE_STOPPED;
	default:  /* NOSTATE, CRASHED */
		return RT_STATE_ERROR;
	}
}

/* ----------------------------------------------------- the connection */

/* The calling thread's own connection, opened at its first call and
 * reopened if libvirtd went away (restarted). One connection per thread
 * (the converge thread, each runtime worker): a call on a connection waits
 * for the calls before it on that connection to end, so a domain start
 * (seconds) on a shared one held the converge pass's list, pauses and
 * resumes behind it (measured: a list of all domains on the starting
 * call's connection took the whole start, 8-9.5 s; on another, 0.4-1 s).
 * Only its own thread uses a connection, so a lost one is closed at once
 * (libvirt keeps it for the domains still referring to it). */
static virConnectPtr conn_of(struct rt_libvirt *lv)
{
	pthread_t self = pthread_self();
	struct lv_conn *lc = NULL;
	virConnectPtr c;

	pthread_mutex_lock(&lv->mu);
	for (size_t i = 0; i < lv->n_conns && !lc; i++)
		if (pthread_equal(lv->conns[i].thread, self))
			lc = &lv->conns[i];
	if (!lc) {
		if (lv->n_conns == lv->cap_conns) {
			lv->cap_conns = lv->cap_conns ? lv->cap_conns * 2 : 8;
			lv->conns = xrealloc(lv->conns, lv->cap_conns * sizeof(*lv->conns));
		}
		lc = &lv->conns[lv->n_conns++];
		*lc = (struct lv_conn){.thread = self};
	}
	c = lc->conn;
	pthread_mutex_unlock(&lv->mu);
	/* lc->conn is this thread's alone: read and replaced without mu */
	if (c && virConnectIsAlive(c) != 1) {
		log_warn("libvirt %s: connection lost, reconnecting", lv->uri);
		virConnectClose(c);
		c = NULL;
	}
	if (!c)
		c = virConnectOpen(lv->uri);
	pthread_mutex_lock(&lv->mu);
	for (size_t i = 0; i < lv->n_conns; i++)  /* the table may have moved */
		if (pthread_equal(lv->conns[i].thread, self))
			lv->conns[i].conn = c;
	pthread_mutex_unlock(&lv->mu);
	return c;
}

/* True if dom carries this node's id. */
static bool dom_ours(struct rt_libvirt *lv, virDomainPtr dom)
{
	char *md = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, DOMXML_NS, 0);
	char node[NODE_ID_MAX + 1];
	bool ours = md && domxml_metadata_node(md, node, sizeof(node)) == 0 &&
		    strcmp(node, lv->node_id) == 0;

	free(md);
	return ours;
}

/* This node's domain named id: 0 with *ret (virDomainFree it), -ENOENT if
 * none (or another node's), -EIO if libvirt cannot be reached. */
static int dom_get(struct rt_libvirt *lv, const char *id, virDomainPtr *ret)
{
	virConnectPtr c = conn_of(lv);
	virDomainPtr dom;

	last_msg[0] = '\0';  /* a new operation: no failure yet */
	if (!c) {
		snprintf(last_msg, sizeof(last_msg), "libvirt unreachable: %.160s", lv_err());
		return -EIO;
	}
	if (!rt_id_valid(id))
		return -EINVAL;
	dom = virDomainLookupByName(c, id);
	if (!dom && lv_errno() == -ENOENT)
		return -ENOENT;
	if (!dom) {
		snprintf(last_msg, sizeof(last_msg), "%.190s", lv_err());
		return -EIO;
	}
	if (!dom_ours(lv, dom)) {
		virDomainFree(dom);
		return -ENOENT;
	}
	*ret = dom;
	return 0;
}

static enum rt_state dom_state(virDomainPtr dom)
{
	int state = VIR_DOMAIN_NOSTATE, reason = 0;

	if (virDomainGetState(dom, &state, &reason, 0) < 0)
		return RT_STATE_ERROR;
	return rt_libvirt_state(state, reason);
}

/* ------------------------------------------------------------- paths */

static char *inst_path(const struct rt_libvirt *lv, const char *id, const char *file)
{
	return xasprintf("%s/%s%s%s", lv->instances_dir, id, file ? "/" : "", file ? file : "");
}

/* Remove the instance directory: its regular files, the seed's work
 * directory, then itself. 0 if gone. */
static int inst_dir_remove(const struct rt_libvirt *lv, const char *id)
{
	_cleanup_free_ char *dir = inst_path(lv, id, NULL);
	_cleanup_free_ char *work = inst_path(lv, id, "seed.d");
	DIR *d;
	struct dirent *de;

	rmdir(work);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno == EISDIR)
			unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* ------------------------------------------------------ domain type */

static bool file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* kvm needs /dev/kvm, open to QEMU's user, and a hardware virtualisation
 * module (kvm_intel, kvm_amd): a software KVM (kvm_pvm) cannot run UEFI
 * firmware. */
static const char *pick_type(const char *want, const char **why)
{
	struct stat st;

	if (want && strcmp(want, "kvm") == 0) {
		*why = "domain_type = kvm";
		return "kvm";
	}
	if (want && strcmp(want, "qemu") == 0) {
		*why = "domain_type = qemu";
		return "qemu";
	}
	if (stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode)) {
		*why = "no /dev/kvm: TCG emulation";
		return "qemu";
	}
	if (!file_exists("/sys/module/kvm_intel") && !file_exists("/sys/module/kvm_amd")) {
		*why = "/dev/kvm without kvm_intel or kvm_amd (software KVM): TCG emulation";
		return "qemu";
	}
	/* QEMU runs as libvirt's unprivileged user: udev makes /dev/kvm 0660
	 * group kvm (Debian); a host without udev may leave it 0600 root */
	if ((st.st_mode & 0060) != 0060 && (st.st_mode & 0006) != 0006) {
		*why = "/dev/kvm is not open to QEMU's user (no group/other rw): TCG emulation";
		return "qemu";
	}
	*why = "/dev/kvm with hardware virtualisation";
	return "kvm";
}

/* ------------------------------------------------------------ open */

static void lv_close(struct rt *rt)
{
	struct rt_libvirt *lv = lv_of(rt);

	if (!lv)
		return;
	imgfetch_free(lv->fetch);
	for (size_t i = 0; i < lv->n_conns; i++)
		if (lv->conns[i].conn)
			virConnectClose(lv->conns[i].conn);
	free(lv->conns);
	pthread_mutex_destroy(&lv->mu);
	pthread_mutex_destroy(&lv->admit_mu);
	pthread_mutex_destroy(&lv->fetch_mu);
	free(lv->uri);
	free(lv->node_id);
	free(lv->data_dir);
	free(lv->images_dir);
	free(lv->instances_dir);
	free(lv->volumes_dir);
	free(lv->ca_file);
	free(lv->calls);
	free(lv->known);
	free(lv);
}

/* data_dir and its subdirectories, 0711: QEMU runs as its own user and
 * must traverse them to the files libvirt labels for it. Every parent must
 * let others traverse too (checked, not changed). */
static int make_dirs(struct rt_libvirt *lv, const char *state_dir)
{
	const char *dirs[] = {lv->data_dir, lv->images_dir, lv->instances_dir, lv->volumes_dir};
	_cleanup_free_ char *parent = xstrdup(lv->data_dir);
	struct stat st;

	/* the default data_dir is inside state_dir (0700): let QEMU's user
	 * traverse it; its files stay 0600 and it cannot be listed */
	if (strncmp(lv->data_dir, state_dir, strlen(state_dir)) == 0 &&
	    lv->data_dir[strlen(state_dir)] == '/' && chmod(state_dir, 0711) < 0)
		return -errno;
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		int e = mkdir_p(dirs[i], 0711);
		if (e < 0 || chmod(dirs[i], 0711) < 0) {
			log_error("libvirt: data_dir %s: %s", dirs[i], strerror(e < 0 ? -e : errno));
			return e < 0 ? e : -errno;
		}
	}
	for (char *slash = strrchr(parent, '/'); slash && slash != parent;
	     slash = strrchr(parent, '/')) {
		*slash = '\0';
		if (stat(parent, &st) == 0 && !(st.st_mode & S_IXOTH)) {
			log_error("libvirt: %s (a parent of data_dir) is not searchable by QEMU's "
				  "user (mode %o): choose another data_dir or chmod o+x it",
				  parent, (unsigned)(st.st_mode & 07777));
			return -EACCES;
		}
	}
	return 0;
}

static void lv_paths(struct rt_libvirt *lv, const struct rt_config *cfg)
{
	const char *hp = getenv("BC_HUGEPAGES_DIR");

	lv->uri = xstrdup(cfg->libvirt_uri && *cfg->libvirt_uri ? cfg->libvirt_uri : DEFAULT_URI);
	lv->node_id = xstrdup(cfg->node_id);
	lv->data_dir = cfg->data_dir && *cfg->data_dir ? xstrdup(cfg->data_dir)
						       : xasprintf("%s/data", cfg->state_dir);
	lv->images_dir = xasprintf("%s/images", lv->data_dir);
	lv->instances_dir = xasprintf("%s/instances", lv->data_dir);
	lv->volumes_dir = cfg->volumes_dir && *cfg->volumes_dir
				  ? xstrdup(cfg->volumes_dir)
				  : xasprintf("%s/volumes", lv->data_dir);
	lv->ca_file = cfg->image_ca_file ? xstrdup(cfg->image_ca_file) : NULL;
	snprintf(lv->hugepages_dir, sizeof(lv->hugepages_dir), "%s",
		 hp && *hp ? hp : "/sys/kernel/mm/hugepages");
}

static int lv_open(const struct rt_config *cfg, struct rt **ret)
{
	struct rt_libvirt *lv;
	const char *why = "", *cause, *fix;
	int e;

	if (!cfg || !cfg->state_dir || !cfg->node_id || !*cfg->node_id ||
	    strlen(cfg->node_id) > NODE_ID_MAX || (cfg->data_dir && *cfg->data_dir != '/' && *cfg->data_dir))
		return -EINVAL;
	lv = xcalloc(1, sizeof(*lv));
	lv->base.ops = &rt_libvirt_ops;
	pthread_mutex_init(&lv->mu, NULL);
	pthread_mutex_init(&lv->admit_mu, NULL);
	pthread_mutex_init(&lv->fetch_mu, NULL);
	lv_paths(lv, cfg);
	if (lv->data_dir[0] != '/') {
		log_error("libvirt: data_dir %s must be an absolute path", lv->data_dir);
		lv_close(&lv->base);
		return -EINVAL;
	}
	lv->cap_vcpus = cfg->capacity_vcpus;
	lv->cap_memory_mib = cfg->capacity_memory_mib;
	lv->image_max = cfg->image_max_bytes ? cfg->image_max_bytes : DEFAULT_IMAGE_MAX;
	lv->stop_ms = cfg->stop_timeout_ms ? cfg->stop_timeout_ms : DEFAULT_STOP_MS;
	lv->boot_data = cfg->boot_data;
	lv->boot_data_ctx = cfg->boot_data_ctx;
	lv->type = pick_type(cfg->domain_type, &why);
	virSetErrorFunc(NULL, quiet);
	if ((e = make_dirs(lv, cfg->state_dir)) < 0) {
		lv_close(&lv->base);
		return e;
	}
	lv->fetch = imgfetch_new(lv->images_dir, lv->ca_file, lv->image_max, cfg->wake,
				 cfg->wake_ctx);
	if (!conn_of(lv)) {
		log_error("libvirt: cannot connect to %s: %s", lv->uri, lv_err());
		lv_close(&lv->base);
		return -ECONNREFUSED;
	}
	log_info("libvirt: %s, domain type %s (%s), data_dir %s", lv->uri, lv->type, why,
		 lv->data_dir);
	if ((cause = hostcheck_caps(&fix)))  /* defines would take minutes */
		log_warn("libvirt: %s; fix: %s (bcd --check-host)", cause, fix);
	*ret = &lv->base;
	return 0;
}

/* ------------------------------------------------------------- list */

/* This node's domains; *ret (virDomainFree each, free the array). */
static int doms_ours(struct rt_libvirt *lv, virDomainPtr **ret, size_t *ret_n)
{
	virConnectPtr c = conn_of(lv);
	virDomainPtr *all = NULL;
	size_t k = 0;
	int n;

	if (!c)
		return -EIO;
	n = virConnectListAllDomains(c, &all, 0);
	if (n < 0)
		return -EIO;
	for (int i = 0; i < n; i++) {
		if (rt_id_valid(virDomainGetName(all[i])) && dom_ours(lv, all[i]))
			all[k++] = all[i];
		else
			virDomainFree(all[i]);
	}
	*ret = all;
	*ret_n = k;
	return 0;
}

static void doms_free(virDomainPtr *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		virDomainFree(v[i]);
	free(v);
}

/* ------------------------------------------- calls under way, known */

static void *grow_arr(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 8;
	return xrealloc(p, *cap * size);
}

/* Under mu. */
static struct lv_call *call_find(struct rt_libvirt *lv, const char *id)
{
	for (size_t i = 0; i < lv->n_calls; i++)
		if (strcmp(lv->calls[i].id, id) == 0)
			return &lv->calls[i];
	return NULL;
}

/* A call for id begins (any thread): lv_list asks libvirt nothing about id
 * until call_end. */
static void call_begin(struct rt_libvirt *lv, const char *id)
{
	struct lv_call *c;

	pthread_mutex_lock(&lv->mu);
	lv->epoch++;
	if (!(c = call_find(lv, id))) {
		lv->calls = grow_arr(lv->calls, &lv->cap_calls, lv->n_calls, sizeof(*lv->calls));
		c = &lv->calls[lv->n_calls++];
		snprintf(c->id, sizeof(c->id), "%s", id);
		c->n = 0;
	}
	c->n++;
	pthread_mutex_unlock(&lv->mu);
}

static void call_end(struct rt_libvirt *lv, const char *id)
{
	struct lv_call *c;

	pthread_mutex_lock(&lv->mu);
	if ((c = call_find(lv, id)) && --c->n == 0)
		*c = lv->calls[--lv->n_calls];
	pthread_mutex_unlock(&lv->mu);
}

/* Under mu. */
static struct rt_instance *known_find(struct rt_libvirt *lv, const char *id)
{
	for (size_t i = 0; i < lv->n_known; i++)
		if (strcmp(lv->known[i].id, id) == 0)
			return &lv->known[i];
	return NULL;
}

/* Under mu: id is one of this node's domains, in state st (add: also if
 * it was not known; else only a known one's state is updated). */
static void known_set_locked(struct rt_libvirt *lv, const char *id, enum rt_state st, bool add)
{
	struct rt_instance *k = known_find(lv, id);

	if (!k && !add)
		return;
	if (!k) {
		lv->known = grow_arr(lv->known, &lv->cap_known, lv->n_known, sizeof(*lv->known));
		k = &lv->known[lv->n_known++];
		snprintf(k->id, sizeof(k->id), "%s", id);
	}
	k->state = st;
}

static void known_set(struct rt_libvirt *lv, const char *id, enum rt_state st, bool add)
{
	pthread_mutex_lock(&lv->mu);
	known_set_locked(lv, id, st, add);
	pthread_mutex_unlock(&lv->mu);
}

/* id is no domain (any more). */
static void known_drop(struct rt_libvirt *lv, const char *id)
{
	struct rt_instance *k;

	pthread_mutex_lock(&lv->mu);
	if ((k = known_find(lv, id)))
		*k = lv->known[--lv->n_known];
	pthread_mutex_unlock(&lv->mu);
}

/* ------------------------------------------------------------- list */

/* Every domain of this node, from libvirt's whole list. */
static int list_all(struct rt_libvirt *lv, struct rt_instance **ret, size_t *ret_n)
{
	virDomainPtr *doms = NULL;
	struct rt_instance *out;
	size_t n = 0;
	int e = doms_ours(lv, &doms, &n);

	if (e < 0)
		return e;
	out = n ? xcalloc(n, sizeof(*out)) : NULL;
	for (size_t i = 0; i < n; i++) {
		snprintf(out[i].id, sizeof(out[i].id), "%s", virDomainGetName(doms[i]));
		out[i].state = dom_state(doms[i]);
	}
	doms_free(doms, n);
	*ret = out;
	*ret_n = n;
	return 0;
}

/* The known domains, each asked for alone (virDomainLookupByName locks
 * only that domain in libvirtd); one with a call under way is not asked
 * at all and keeps its last state (the converge pass does not act on it
 * while its job runs). A domain gone meanwhile is dropped. */
static int list_known(struct rt_libvirt *lv, struct rt_instance **ret, size_t *ret_n)
{
	struct rt_instance *v;
	bool *busy;
	size_t n, k = 0;
	int e = 0;

	pthread_mutex_lock(&lv->mu);
	n = lv->n_known;
	v = xcalloc(n ? n : 1, sizeof(*v));
	busy = xcalloc(n ? n : 1, sizeof(*busy));
	for (size_t i = 0; i < n; i++) {
		v[i] = lv->known[i];
		busy[i] = call_find(lv, v[i].id) != NULL;
	}
	pthread_mutex_unlock(&lv->mu);
	for (size_t i = 0; i < n && e == 0; i++) {
		virDomainPtr dom = NULL;
		if (busy[i]) {
			v[k++] = v[i];
			continue;
		}
		e = dom_get(lv, v[i].id, &dom);
		if (e == -ENOENT) {
			known_drop(lv, v[i].id);
			e = 0;
			continue;
		}
		if (e < 0)
			break;
		v[i].state = dom_state(dom);
		virDomainFree(dom);
		known_set(lv, v[i].id, v[i].state, false);
		v[k++] = v[i];
	}
	free(busy);
	if (e < 0) {
		free(v);
		return e;
	}
	*ret = v;
	*ret_n = k;
	return 0;
}

/* This node's instances. libvirtd locks every domain to list them all
 * (virConnectListAllDomains, and each GetMetadata/GetState), and a domain
 * starting (qemuProcessStart) or being destroyed holds its lock for
 * seconds: a pass listing them all then waits, and with it every pause and
 * resume it carries. So the whole list is taken only while no runtime call
 * is under way (at start-up, and on any later pass between jobs: orphans
 * are found then); meanwhile the pass lists the domains this runtime knows
 * (the last whole list, plus what it defined since, minus what it
 * destroyed), one by one, never asking about one a call works on. */
static int lv_list(struct rt *rt, struct rt_instance **ret, size_t *ret_n)
{
	struct rt_libvirt *lv = lv_of(rt);
	int64_t t0 = mono_ms();
	bool whole;
	uint64_t epoch;
	int e;

	pthread_mutex_lock(&lv->mu);
	whole = !lv->known_valid || lv->n_calls == 0;
	epoch = lv->epoch;
	pthread_mutex_unlock(&lv->mu);
	e = whole ? list_all(lv, ret, ret_n) : list_known(lv, ret, ret_n);
	if (e < 0)
		return e;
	if (whole) {
		pthread_mutex_lock(&lv->mu);
		if (lv->epoch == epoch) {  /* no call began meanwhile: the truth */
			lv->n_known = 0;
			lv->known_valid = true;
		}
		for (size_t i = 0; i < *ret_n; i++)  /* else: what it found is added */
			known_set_locked(lv, (*ret)[i].id, (*ret)[i].state, true);
		pthread_mutex_unlock(&lv->mu);
	}
	log_debug("libvirt: list: %zu domains, %" PRId64 " ms (%s)", *ret_n, mono_ms() - t0,
		  whole ? "all domains" : "known domains one by one, calls under way");
	return 0;
}

/* -------------------------------------------------------- admission */

/* What this node's domains hold, whatever their state (a defined domain
 * keeps its booking, as the controller counts it). */
static int usage_of(struct rt_libvirt *lv, struct admit_res *u)
{
	virDomainPtr *doms = NULL;
	size_t n = 0;
	int e = doms_ours(lv, &doms, &n);

	*u = (struct admit_res){0};
	if (e < 0)
		return e;
	for (size_t i = 0; i < n; i++) {
		virDomainInfo info;
		if (virDomainGetInfo(doms[i], &info) < 0)
			continue;
		u->vcpus += info.nrVirtCpu;
		u->memory_mib += info.maxMem / 1024;
	}
	doms_free(doms, n);
	return 0;
}

static uint64_t read_u64(const char *path)
{
	_cleanup_free_ char *buf = NULL;

	if (file_read_all(path, 64, &buf, NULL) < 0)
		return 0;
	return strtoull(buf, NULL, 10);
}

/* Free huge pages of the flavor's size against what the instance needs. */
static int admit_pages(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	uint64_t kib = 0, need, free_pages;
	char path[512];

	if (domxml_page_kib(s->huge_pages, &kib) < 0) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: huge_pages must be 2M or 1G");
		return -EINVAL;
	}
	if (!kib)
		return 0;
	snprintf(path, sizeof(path), "%s/hugepages-%" PRIu64 "kB/free_hugepages", lv->hugepages_dir,
		 kib);
	need = (s->memory_mib * 1024 + kib - 1) / kib;
	free_pages = read_u64(path);
	if (free_pages < need) {
		snprintf(reason, RT_REASON_MAX,
			 "ResourcesExhausted: huge pages %s (%" PRIu64 " free, %" PRIu64 " needed)",
			 s->huge_pages, free_pages, need);
		return -ENOSPC;
	}
	return 0;
}

static int admit_placement(const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	char path[128];

	if (s->numa_node >= 0) {
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%" PRId32, s->numa_node);
		if (!file_exists(path)) {
			snprintf(reason, RT_REASON_MAX, "ResourcesExhausted: numa node %" PRId32,
				 s->numa_node);
			return -ENOSPC;
		}
	}
	for (size_t i = 0; i < s->n_pinned_vcpus; i++)
		if ((long)s->pinned_vcpus[i] >= cpus) {
			snprintf(reason, RT_REASON_MAX, "ResourcesExhausted: host cpu %" PRIu32,
				 s->pinned_vcpus[i]);
			return -ENOSPC;
		}
	return 0;
}

/* Host admission: vCPUs and memory against the configured capacity minus
 * what this node's other domains hold (admit.c); huge pages, NUMA node and
 * pinned CPUs against the host. -ENOSPC with "ResourcesExhausted: <what>". */
static int admit_locked(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct admit_res cap = {lv->cap_vcpus, lv->cap_memory_mib};
	struct admit_res need = {s->vcpus, s->memory_mib};
	struct admit_res held;
	int e = usage_of(lv, &held);

	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return e;
	}
	/* creates admitted and not defined yet hold their share too */
	held.vcpus += lv->booked.vcpus;
	held.memory_mib += lv->booked.memory_mib;
	if ((e = admit_fits(&cap, &held, &need, reason)) < 0)
		return e;
	if ((e = admit_pages(lv, s, reason)) < 0)
		return e;
	return admit_placement(s, reason);
}

/* Admitted: booked until its define ended (unbook), so that creates
 * running at once cannot overcommit the host together. */
static int admit(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	int e;

	pthread_mutex_lock(&lv->admit_mu);
	e = admit_locked(lv, s, reason);
	if (e == 0) {
		lv->booked.vcpus += s->vcpus;
		lv->booked.memory_mib += s->memory_mib;
	}
	pthread_mutex_unlock(&lv->admit_mu);
	return e;
}

static void unbook(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s)
{
	pthread_mutex_lock(&lv->admit_mu);
	lv->booked.vcpus -= s->vcpus;
	lv->booked.memory_mib -= s->memory_mib;
	pthread_mutex_unlock(&lv->admit_mu);
}

/* ----------------------------------------------------------- create */

/* The pool image, fetched and checked; *ret_path malloc'd, *ret_fmt
 * "qcow2"/"raw", *ret_size its virtual size in bytes. */
static int prepare_image(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
			 char **ret_path, const char **ret_fmt, uint64_t *ret_size, char *reason)
{
	_cleanup_free_ void *head = NULL;
	struct image_info info;
	char why[IMAGE_REASON_MAX];
	struct stat st;
	size_t n = 0;
	char *path = NULL;
	int e;

	if (!s->image || !*s->image->url) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: no image");
		return -EINVAL;
	}
	pthread_mutex_lock(&lv->fetch_mu);
	e = imgfetch_get(lv->fetch, s->image->url, s->image->sha256, &path, reason);
	pthread_mutex_unlock(&lv->fetch_mu);
	if (e == -EINPROGRESS || e == -EIO || e == -ECANCELED)
		return -EAGAIN;  /* downloading, or a failed download: retried */
	if (e < 0)
		return e;
	e = image_read_head(path, &head, &n);
	if (e == 0)
		e = image_check_base(head, n, s->image->format, &info, why, sizeof(why));
	if (e < 0 || stat(path, &st) < 0) {
		snprintf(reason, RT_REASON_MAX, "ImageRefused: %.120s", e < 0 ? why : strerror(errno));
		free(path);
		return e < 0 ? -EINVAL : -EIO;
	}
	*ret_path = path;
	*ret_fmt = info.format == IMAGE_QCOW2 ? "qcow2" : "raw";
	*ret_size = info.format == IMAGE_QCOW2 ? info.virtual_size : (uint64_t)st.st_size;
	return 0;
}

/* The boot data bytes (empty without a user_data_ref). */
static int fetch_boot_data(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
			   void **ret, size_t *ret_len, char *reason)
{
	char why[RT_REASON_MAX] = "";
	int e;

	*ret = NULL;
	*ret_len = 0;
	if (!s->user_data_ref || !*s->user_data_ref)
		return 0;
	if (!lv->boot_data) {
		snprintf(reason, RT_REASON_MAX, "BootDataUnavailable: no controller client");
		return -EAGAIN;
	}
	e = lv->boot_data(lv->boot_data_ctx, s->id, s->user_data_ref, ret, ret_len, why);
	if (e == 0 && *ret_len > SEED_USER_DATA_MAX) {
		free(*ret);
		*ret = NULL;
		snprintf(why, sizeof(why), "user data larger than %u bytes", SEED_USER_DATA_MAX);
		e = -EFBIG;
	}
	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "BootDataUnavailable: %.120s", why);
		return -EAGAIN;
	}
	return 0;
}

static int prepare_seed(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
			const char *iso, char *reason)
{
	_cleanup_free_ char *work = inst_path(lv, s->id, "seed.d");
	_cleanup_free_ char *meta = seed_meta_data(s->id);
	_cleanup_free_ char *net = NULL;
	_cleanup_free_ void *ud = NULL;
	size_t ud_len = 0;
	char gw[64];
	int e;

	pthread_mutex_lock(&lv->mu);
	snprintf(gw, sizeof(gw), "%s", lv->gateway4);
	pthread_mutex_unlock(&lv->mu);
	if (seed_network_config(s, gw, &net) < 0) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: a NIC's MAC or address is malformed");
		return -EINVAL;
	}
	if ((e = fetch_boot_data(lv, s, &ud, &ud_len, reason)) < 0)
		return e;
	e = seed_write_iso(work, iso, ud, ud_len, meta, net, reason);
	if (ud)
		explicit_bzero(ud, ud_len);  /* user data may hold secrets */
	return e;
}

/* Attached volumes: volumes_dir/<id>.raw must exist (volumes.c makes it
 * in the pass before any create). */
static int volumes_of(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
		      struct domxml_volume *v, char **paths, char *reason)
{
	for (size_t i = 0; i < s->n_volumes; i++) {
		const Bc__Node__V1__VolumeAttachment *a = s->volumes[i];
		if (!rt_id_valid(a->volume_id)) {
			snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable volume id");
			return -EINVAL;
		}
		paths[i] = vol_path(lv->volumes_dir, a->volume_id);
		if (!file_exists(paths[i])) {
			snprintf(reason, RT_REASON_MAX, "VolumeUnavailable: %.64s", a->volume_id);
			return -EAGAIN;
		}
		v[i] = (struct domxml_volume){paths[i], a->serial, a->read_only};
	}
	return 0;
}

struct inst_files {
	char *dir, *overlay, *seed, *nvram, *console;
};

static void files_of(const struct rt_libvirt *lv, const char *id, struct inst_files *f)
{
	f->dir = inst_path(lv, id, NULL);
	f->overlay = inst_path(lv, id, "disk.qcow2");
	f->seed = inst_path(lv, id, "seed.iso");
	f->nvram = inst_path(lv, id, "nvram.fd");
	f->console = inst_path(lv, id, "console.log");
}

static void files_free(struct inst_files *f)
{
	free(f->dir);
	free(f->overlay);
	free(f->seed);
	free(f->nvram);
	free(f->console);
}

static int define(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
		  const struct inst_files *f, char *reason)
{
	struct domxml_volume vols[DOMXML_MAX_DISKS];
	struct domxml_nic nics[DOMXML_MAX_NICS];
	char *paths[DOMXML_MAX_DISKS] = {0};
	_cleanup_free_ char *xml = NULL;
	char why[RT_REASON_MAX];
	virDomainPtr dom = NULL;
	int e = 0;

	if (s->n_volumes > DOMXML_MAX_DISKS - 2 || s->n_nics > DOMXML_MAX_NICS) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: too many volumes or NICs");
		return -EINVAL;
	}
	e = volumes_of(lv, s, vols, paths, reason);
	for (size_t i = 0; e == 0 && i < s->n_nics; i++)
		nics[i] = (struct domxml_nic){s->nics[i]->tap, s->nics[i]->mac};
	struct domxml d = {
		.name = s->id, .node_id = lv->node_id, .type = lv->type, .vcpus = s->vcpus,
		.memory_mib = s->memory_mib, .huge_pages = s->huge_pages, .numa_node = s->numa_node,
		.pinned = s->pinned_vcpus, .n_pinned = s->n_pinned_vcpus, .overlay = f->overlay,
		.seed = f->seed, .nvram = f->nvram, .console_log = f->console, .volumes = vols,
		.n_volumes = s->n_volumes, .nics = nics, .n_nics = s->n_nics,
	};
	if (e == 0 && (e = domxml_build(&d, &xml, why, sizeof(why))) < 0)
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: %.120s", why);
	if (e == 0 && !(dom = virDomainDefineXML(conn_of(lv), xml))) {
		snprintf(reason, RT_REASON_MAX, "DefineFailed: %.120s", lv_err());
		e = -EIO;
	}
	if (dom)
		virDomainFree(dom);
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		free(paths[i]);
	return e;
}

static int build_files(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
		       const struct inst_files *f, char *reason)
{
	_cleanup_free_ char *image = NULL;
	const char *fmt = "raw";
	uint64_t vsize = 0, want = s->disk_gib * GIB;
	int e = prepare_image(lv, s, &image, &fmt, &vsize, reason);

	if (e < 0)
		return e;
	if (mkdir_p(f->dir, 0711) < 0 || chmod(f->dir, 0711) < 0) {
		snprintf(reason, RT_REASON_MAX, "create failed: instance directory: %s",
			 strerror(errno));
		return -EIO;
	}
	e = image_overlay_create(image, fmt, want > vsize ? want : vsize, f->overlay, reason);
	if (e == 0)
		e = prepare_seed(lv, s, f->seed, reason);
	return e;
}

static int create_call(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct inst_files f = {0};
	virDomainPtr dom = NULL;
	virConnectPtr c;
	int64_t t0, t1, t2;
	int e;

	if (!rt_id_valid(s->id)) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable instance id");
		return -EINVAL;
	}
	if (!(c = conn_of(lv))) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return -EIO;
	}
	if ((dom = virDomainLookupByName(c, s->id))) {
		if (dom_ours(lv, dom))  /* defined by another hand: listed from now on */
			known_set(lv, s->id, dom_state(dom), true);
		virDomainFree(dom);
		return -EEXIST;
	}
	t0 = mono_ms();
	if ((e = admit(lv, s, reason)) < 0)
		return e;
	t1 = mono_ms();
	files_of(lv, s->id, &f);
	e = build_files(lv, s, &f, reason);
	t2 = mono_ms();
	if (e == 0 && (e = define(lv, s, &f, reason)) == 0)
		known_set(lv, s->id, RT_STATE_STOPPED, true);
	unbook(lv, s);
	log_debug("libvirt: create %s: %" PRId64 " ms (admission %" PRId64 " ms, files %" PRId64
		  " ms, define %" PRId64 " ms): %s", s->id, mono_ms() - t0, t1 - t0, t2 - t1,
		  mono_ms() - t2, e < 0 ? strerror(-e) : "ok");
	if (e < 0)
		inst_dir_remove(lv, s->id);
	files_free(&f);
	return e;
}

/* ---------------------------------------------------- state changes */

static int adopt_call(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s)
{
	virDomainPtr dom = NULL;
	int e = dom_get(lv, s->id, &dom);

	/* nothing to reattach: libvirtd holds the monitor; never restarted */
	if (dom)
		virDomainFree(dom);
	return e;
}

/* Under lv->mu; a slot is only used by calls for its own id. */
static struct shutdown *shut_find(struct rt_libvirt *lv, const char *id)
{
	for (size_t i = 0; i < SHUT_MAX; i++)
		if (strcmp(lv->shut[i].id, id) == 0)
			return &lv->shut[i];
	return NULL;
}

static struct shutdown *shut_get(struct rt_libvirt *lv, const char *id)
{
	struct shutdown *sd;

	pthread_mutex_lock(&lv->mu);
	sd = shut_find(lv, id);
	pthread_mutex_unlock(&lv->mu);
	return sd;
}

static struct shutdown *shut_add(struct rt_libvirt *lv, const char *id, int64_t deadline)
{
	struct shutdown *sd;

	pthread_mutex_lock(&lv->mu);
	sd = shut_find(lv, "");
	if (sd) {
		snprintf(sd->id, sizeof(sd->id), "%s", id);
		sd->deadline = deadline;
	}
	pthread_mutex_unlock(&lv->mu);
	return sd;  /* NULL: table full, the caller waits itself */
}

static void shut_clear(struct rt_libvirt *lv, const char *id)
{
	struct shutdown *sd;

	pthread_mutex_lock(&lv->mu);
	sd = shut_find(lv, id);
	if (sd)
		sd->id[0] = '\0';
	pthread_mutex_unlock(&lv->mu);
}

/* A libvirt failure, captured at once: any later successful call (a state
 * check) resets libvirt's last error. */
struct lv_fail {
	int e;
	char msg[200];
};

static void fail_capture(struct lv_fail *f)
{
	f->e = lv_errno();
	snprintf(f->msg, sizeof(f->msg), "%s", lv_err());
}

/* Log a failed operation on id once per distinct message (converge retries
 * every pass) and return its -errno. */
static int op_failed(struct rt_libvirt *lv, const char *id, const char *op,
		     const struct lv_fail *f)
{
	char msg[sizeof(last_err)];

	snprintf(msg, sizeof(msg), "%s %s: %s", id, op, f->msg);
	memcpy(last_msg, f->msg, sizeof(last_msg));
	if (strcmp(msg, last_err) != 0) {
		log_warn("libvirt: instance %s", msg);
		memcpy(last_err, msg, sizeof(msg));
	}
	return f->e;
}

static const char *lv_last_error(struct rt *rt)
{
	(void)rt;
	return last_msg[0] ? last_msg : NULL;
}

/* Run op on dom; a failure that still left it in state done is 0. */
static int dom_op(struct rt_libvirt *lv, virDomainPtr dom, const char *id, const char *name,
		  enum rt_state done, int (*op)(virDomainPtr dom))
{
	struct lv_fail f;

	if (op(dom) == 0)
		return 0;
	fail_capture(&f);
	return dom_state(dom) == done ? 0 : op_failed(lv, id, name, &f);
}

/* Run op on id unless it is already in state done (0 then). */
static int simple_op(struct rt *rt, const char *id, const char *name, enum rt_state done,
		     int (*op)(virDomainPtr dom))
{
	virDomainPtr dom = NULL;
	int64_t t0 = mono_ms(), t1, t2 = 0;
	int e = dom_get(lv_of(rt), id, &dom);

	t1 = mono_ms();
	if (e < 0)
		return e;
	if (dom_state(dom) != done) {
		t2 = mono_ms();
		e = dom_op(lv_of(rt), dom, id, name, done, op);
	}
	virDomainFree(dom);
	log_debug("libvirt: %s %s: %" PRId64 " ms (lookup %" PRId64 " ms, call %" PRId64 " ms)",
		  name, id, mono_ms() - t0, t1 - t0, t2 ? mono_ms() - t2 : 0);
	return e;
}

static int start_call(struct rt *rt, const char *id)
{
	shut_clear(lv_of(rt), id);
	return simple_op(rt, id, "start", RT_STATE_RUNNING, virDomainCreate);
}

static int pause_call(struct rt *rt, const char *id)
{
	return simple_op(rt, id, "pause", RT_STATE_PAUSED, virDomainSuspend);
}

static int resume_call(struct rt *rt, const char *id)
{
	shut_clear(lv_of(rt), id);
	return simple_op(rt, id, "resume", RT_STATE_RUNNING, virDomainResume);
}

static bool wait_off(virDomainPtr dom, uint32_t ms)
{
	int64_t until = deadline_in(ms);

	while (!deadline_passed(until)) {
		if (dom_state(dom) == RT_STATE_STOPPED)
			return true;
		usleep(STOP_POLL_MS * 1000);
	}
	return dom_state(dom) == RT_STATE_STOPPED;
}

/* ------------------------------------------------------------ stop */

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* A shutdown under way: done (0), forced at its deadline (0), or still
 * waiting (-EINPROGRESS, with the reason in last_msg). */
static int stop_progress(struct rt_libvirt *lv, virDomainPtr dom, const char *id,
			 struct shutdown *sd)
{
	int64_t left = deadline_left(sd->deadline);

	if (wait_off(dom, (uint32_t)min64(left > 0 ? left : 0, STOP_SYNC_MS)) ||
	    deadline_passed(sd->deadline)) {
		shut_clear(lv, id);
		return dom_state(dom) == RT_STATE_STOPPED
			       ? 0
			       : dom_op(lv, dom, id, "stop", RT_STATE_STOPPED, virDomainDestroy);
	}
	snprintf(last_msg, sizeof(last_msg),
		 "Stopping: waiting for the guest to shut down (then forced)");
	return -EINPROGRESS;
}

/* An ACPI shutdown of a running guest, forced off (destroy) after
 * stop_timeout; a paused or failed one is forced off at once. The wait
 * never holds the converge thread more than STOP_SYNC_MS: a guest still
 * shutting down answers -EINPROGRESS and the next pass asks again. */
static int stop_call(struct rt *rt, const char *id)
{
	struct rt_libvirt *lv = lv_of(rt);
	virDomainPtr dom = NULL;
	struct shutdown *sd;
	enum rt_state st;
	int e = dom_get(lv, id, &dom);

	if (e < 0)
		return e;
	st = dom_state(dom);
	sd = shut_get(lv, id);
	if (st == RT_STATE_RUNNING && !sd && virDomainShutdown(dom) == 0) {
		sd = shut_add(lv, id, deadline_in(lv->stop_ms));
		if (!sd && wait_off(dom, lv->stop_ms))  /* no room to track it */
			st = RT_STATE_STOPPED;
	}
	if (st == RT_STATE_STOPPED)
		shut_clear(lv, id);
	else if (sd)
		e = stop_progress(lv, dom, id, sd);
	else if (dom_state(dom) != RT_STATE_STOPPED)
		e = dom_op(lv, dom, id, "stop", RT_STATE_STOPPED, virDomainDestroy);
	virDomainFree(dom);
	return e;
}

static int destroy_call(struct rt *rt, const char *id)
{
	struct rt_libvirt *lv = lv_of(rt);
	unsigned flags = VIR_DOMAIN_UNDEFINE_NVRAM | VIR_DOMAIN_UNDEFINE_MANAGED_SAVE |
			 VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
			 VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA;
	virDomainPtr dom = NULL;
	int e = dom_get(lv, id, &dom);

	shut_clear(lv, id);
	if (e == -ENOENT) {
		known_drop(lv, id);
		return inst_dir_remove(lv, id);  /* files of a half-made create */
	}
	if (e < 0)
		return e;
	if (virDomainIsActive(dom) == 1)
		e = dom_op(lv, dom, id, "destroy", RT_STATE_STOPPED, virDomainDestroy);
	if (e == 0 && virDomainUndefineFlags(dom, flags) < 0) {
		struct lv_fail f;
		fail_capture(&f);
		e = op_failed(lv, id, "undefine", &f);
	}
	virDomainFree(dom);
	if (e < 0)
		return e;
	known_drop(lv, id);
	return inst_dir_remove(lv, id);
}

void rt_libvirt_call_begin(struct rt *rt, const char *id)
{
	call_begin(lv_of(rt), id);
}

void rt_libvirt_call_end(struct rt *rt, const char *id)
{
	call_end(lv_of(rt), id);
}

size_t rt_libvirt_connections(struct rt *rt)
{
	struct rt_libvirt *lv = lv_of(rt);
	size_t n = 0;

	pthread_mutex_lock(&lv->mu);
	for (size_t i = 0; i < lv->n_conns; i++)
		n += lv->conns[i].conn != NULL;
	pthread_mutex_unlock(&lv->mu);
	return n;
}

/* The runtime's entry points for one instance: each marks a call under
 * way for its id (lv_list). */
static int lv_create(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	int e;

	if (!rt_id_valid(s->id)) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: unusable instance id");
		return -EINVAL;
	}
	call_begin(lv_of(rt), s->id);
	e = create_call(lv_of(rt), s, reason);
	call_end(lv_of(rt), s->id);
	return e;
}

static int lv_adopt(struct rt *rt, const Bc__Node__V1__InstanceSpec *s)
{
	int e;

	if (!rt_id_valid(s->id))
		return -EINVAL;
	call_begin(lv_of(rt), s->id);
	e = adopt_call(lv_of(rt), s);
	call_end(lv_of(rt), s->id);
	return e;
}

static int id_call(struct rt *rt, const char *id, int (*fn)(struct rt *rt, const char *id))
{
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	call_begin(lv_of(rt), id);
	e = fn(rt, id);
	call_end(lv_of(rt), id);
	return e;
}

static int lv_start(struct rt *rt, const char *id)
{
	return id_call(rt, id, start_call);
}

static int lv_pause(struct rt *rt, const char *id)
{
	return id_call(rt, id, pause_call);
}

static int lv_resume(struct rt *rt, const char *id)
{
	return id_call(rt, id, resume_call);
}

static int lv_stop(struct rt *rt, const char *id)
{
	return id_call(rt, id, stop_call);
}

static int lv_destroy(struct rt *rt, const char *id)
{
	return id_call(rt, id, destroy_call);
}

/* The disk of id whose serial is serial is bytes long now: the guest sees
 * it at once (virDomainBlockResize on the target dev the live XML gives
 * that serial). */
static int resize_call(struct rt *rt, const char *id, const char *serial, uint64_t bytes)
{
	virDomainPtr dom = NULL;
	char *xml = NULL;
	char dev[DOMXML_DEV_MAX];
	int e = dom_get(lv_of(rt), id, &dom);

	if (e < 0)
		return e;
	xml = virDomainGetXMLDesc(dom, 0);
	if (!xml) {
		snprintf(last_msg, sizeof(last_msg), "%.190s", lv_err());
		e = -EIO;
	} else if ((e = domxml_disk_by_serial(xml, serial, dev, sizeof(dev))) == 0 &&
		   virDomainBlockResize(dom, dev, bytes, VIR_DOMAIN_BLOCK_RESIZE_BYTES) < 0) {
		snprintf(last_msg, sizeof(last_msg), "block resize %s: %.160s", dev, lv_err());
		e = -EIO;
	}
	free(xml);
	virDomainFree(dom);
	return e;
}

static int lv_block_resize(struct rt *rt, const char *id, const char *serial, uint64_t bytes)
{
	int e;

	if (!rt_id_valid(id))
		return -EINVAL;
	call_begin(lv_of(rt), id);
	e = resize_call(rt, id, serial, bytes);
	call_end(lv_of(rt), id);
	return e;
}

/* ------------------------------------------------------- image GC */

static bool named_by_spec(const Bc__Node__V1__NodeSpec *spec, const char *sha)
{
	for (size_t i = 0; i < spec->n_instances; i++) {
		const Bc__Node__V1__ImageRef *im = spec->instances[i]->image;
		if (spec->instances[i]->desired_state == BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
			continue;  /* its overlay keeps the image until it is gone */
		if (im && im->sha256 && strcmp(im->sha256, sha) == 0)
			return true;
	}
	return false;
}

/* True if an existing overlay is backed by path (an instance the spec no
 * longer names whose destroy failed still needs its image). */
static bool backs_an_overlay(const struct rt_libvirt *lv, const char *path)
{
	DIR *d = opendir(lv->instances_dir);
	struct dirent *de;
	bool used = false;

	if (!d)
		return true;  /* cannot tell: keep it */
	while (!used && (de = readdir(d))) {
		_cleanup_free_ char *ov = NULL;
		_cleanup_free_ void *head = NULL;
		struct image_info info;
		char why[IMAGE_REASON_MAX];
		size_t n = 0;
		if (!rt_id_valid(de->d_name))
			continue;
		ov = inst_path(lv, de->d_name, "disk.qcow2");
		if (image_read_head(ov, &head, &n) == 0 &&
		    image_probe(head, n, &info, why, sizeof(why)) == 0)
			used = info.has_backing && strcmp(info.backing, path) == 0;
	}
	closedir(d);
	return used;
}

/* A partial download left by another (killed) bcd: ".<sha>.part.<pid>". */
static bool stale_part(const char *name)
{
	const char *p = strstr(name, ".part.");

	return name[0] == '.' && p && atoi(p + 6) != (int)getpid();
}

/* Remove images no instance of the spec names (desired DELETED ones do
 * not count) and no overlay uses, and partial downloads of earlier
 * processes. */
static void images_gc(struct rt_libvirt *lv, const Bc__Node__V1__NodeSpec *spec)
{
	DIR *d = opendir(lv->images_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		bool stale = stale_part(de->d_name);
		if (!stale && (!image_sha256_valid(de->d_name) || named_by_spec(spec, de->d_name)))
			continue;
		_cleanup_free_ char *path = xasprintf("%s/%s", lv->images_dir, de->d_name);
		if (!stale && backs_an_overlay(lv, path))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			log_info("libvirt: image %s removed: %s", de->d_name,
				 stale ? "partial download of an earlier bcd" : "no instance names it");
	}
	closedir(d);
}

/* Called before each pass's creates: the pool gateway for seeds, and the
 * images the spec no longer needs. */
static void lv_node(struct rt *rt, const Bc__Node__V1__NodeSpec *spec)
{
	pthread_mutex_lock(&lv_of(rt)->mu);
	snprintf(lv_of(rt)->gateway4, sizeof(lv_of(rt)->gateway4), "%s",
		 spec->ipam_gateway ? spec->ipam_gateway : "");
	pthread_mutex_unlock(&lv_of(rt)->mu);
	images_gc(lv_of(rt), spec);
}

const struct runtime_ops rt_libvirt_ops = {
	.name = "libvirt",
	/* policies are enforced by net.c (main.c advertises them only with
	 * network = nftables); volumes are made by volumes.c */
	.traits = {.snapshot = false, .network_policy = true, .ssh_host_only = true,
		   .volumes = true},
	.open = lv_open,
	.list = lv_list,
	.create = lv_create,
	.adopt = lv_adopt,
	.update = NULL,
	.start = lv_start,
	.pause = lv_pause,
	.resume = lv_resume,
	.stop = lv_stop,
	.destroy = lv_destroy,
	.block_resize = lv_block_resize,
	.node = lv_node,
	.last_error = lv_last_error,
	.close = lv_close,
};
