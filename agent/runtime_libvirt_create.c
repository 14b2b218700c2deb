/* runtime_libvirt_create.c: create for the libvirt runtime: image fetched
 * and checked, overlay, seed, volumes, define (stopped); see
 * runtime_libvirt.c's head comment for the files. */
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

/* macs: n_macs MACs replacing the NICs' (a memory restore's), or NULL. */
static int define(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s,
		  const struct inst_files *f, char *const *macs, size_t n_macs, char *reason)
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
		nics[i] = (struct domxml_nic){s->nics[i]->tap,
					      macs && i < n_macs ? macs[i] : s->nics[i]->mac};
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

int create_call(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
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
	if (e == 0 && (e = define(lv, s, &f, NULL, 0, reason)) == 0)
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


int define_restored(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *const *macs,
		    size_t n_macs, char *reason)
{
	struct inst_files f = {0};
	int e;

	if ((e = admit(lv, s, reason)) < 0)
		return e;
	files_of(lv, s->id, &f);
	e = prepare_seed(lv, s, f.seed, reason);
	if (e == 0 && (e = define(lv, s, &f, macs, n_macs, reason)) == 0)
		known_set(lv, s->id, RT_STATE_STOPPED, true);
	unbook(lv, s);
	files_free(&f);
	return e;
}
