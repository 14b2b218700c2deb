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
#include "runtime_libvirt_int.h"
#include "seed.h"
#include "util.h"
#include "volumes.h"



/* Per calling thread: the last libvirt error logged, and the message of the
 * thread's last failed operation alone (last_error). */
static _Thread_local char last_err[256];
static _Thread_local char last_msg[200];

struct rt_libvirt *lv_of(struct rt *rt)
{
	return (struct rt_libvirt *)rt;
}

/* libvirt's default handler prints every error on stderr: the runtime
 * reports errors itself, once, with the instance. */
static void quiet(void *data, virErrorPtr e)
{
}

const char *lv_err(void)
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
virConnectPtr conn_of(struct rt_libvirt *lv)
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
bool dom_ours(struct rt_libvirt *lv, virDomainPtr dom)
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

enum rt_state dom_state(virDomainPtr dom)
{
	int state = VIR_DOMAIN_NOSTATE, reason = 0;

	if (virDomainGetState(dom, &state, &reason, 0) < 0)
		return RT_STATE_ERROR;
	return rt_libvirt_state(state, reason);
}

/* ------------------------------------------------------------- paths */

char *inst_path(const struct rt_libvirt *lv, const char *id, const char *file)
{
	return xasprintf("%s/%s%s%s", lv->instances_dir, id, file ? "/" : "", file ? file : "");
}

/* Remove the instance directory: its regular files, the seed's work
 * directory, then itself. 0 if gone. */
int inst_dir_remove(const struct rt_libvirt *lv, const char *id)
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

bool file_exists(const char *path)
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
	lv->gr = cfg->guest_ready;
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
int doms_ours(struct rt_libvirt *lv, virDomainPtr **ret, size_t *ret_n)
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

void doms_free(virDomainPtr *v, size_t n)
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

void known_set(struct rt_libvirt *lv, const char *id, enum rt_state st, bool add)
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
	.traits = {.snapshot = true, .network_policy = true, .ssh_host_only = true,
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
	.capture = lv_capture,
	.restore = lv_restore,
	.rebind = lv_rebind,
	.capture_recover = lv_capture_recover,
	.node = lv_node,
	.last_error = lv_last_error,
	.close = lv_close,
};

