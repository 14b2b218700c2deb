/* runtime_libvirt_images.c: images/<sha256> garbage collection: an image
 * no spec names and no overlay is backed by is removed, and so are stale
 * .part files. */
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
#include "xfer.h"
#include "volumes.h"


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

/* Remove images no instance of the spec names (desired DELETED ones do
 * not count) and no overlay uses, and partial downloads of earlier
 * processes. */
void images_gc(struct rt_libvirt *lv, const Bc__Node__V1__NodeSpec *spec)
{
	DIR *d = opendir(lv->images_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		bool stale = xfer_stale_part(de->d_name);
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
