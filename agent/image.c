/* image.c: image header checks (pure), https fetch into data_dir/images,
 * per-instance overlays (image.h).
 *
 * The qcow2 header layout (big-endian) is QEMU's docs/interop/qcow2.txt:
 *   0 magic "QFI\xfb", 4 version (2|3), 8 backing_file_offset,
 *   16 backing_file_size, 20 cluster_bits, 24 size, 32 crypt_method,
 *   ... 72 (v3) incompatible_features, 80 compatible, 88 autoclear,
 *   96 refcount_order, 100 header_length; header extensions follow the
 *   header ({u32 type, u32 length, data padded to 8}, type 0 ends them):
 *   0xe2792aca backing file format name, 0x44415441 external data file. */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spawn.h"
#include "util.h"
#include "xfer.h"

#define QCOW_MAGIC 0x514649fbu
#define QCOW_V2_HEADER 72
#define QCOW_V3_HEADER 104
#define QCOW_EXT_END 0
#define QCOW_EXT_BACKING_FORMAT 0xe2792acau
#define QCOW_EXT_DATA_FILE 0x44415441u
#define QCOW_INCOMPAT_DIRTY (1ull << 0)
#define QCOW_INCOMPAT_CORRUPT (1ull << 1)
#define QCOW_INCOMPAT_DATA_FILE (1ull << 2)
#define QCOW_INCOMPAT_COMPRESSION (1ull << 3)
#define QCOW_INCOMPAT_EXTL2 (1ull << 4)
#define QCOW_INCOMPAT_KNOWN 0x1full

#define OVERLAY_TIMEOUT_MS 60000

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static int fail(char *why, size_t whylen, int e, const char *msg)
{
	snprintf(why, whylen, "%s", msg);
	return e;
}

/* ------------------------------------------------------ other formats */

static const struct {
	size_t off;
	const char *magic;
	size_t len;
	const char *name;
} foreign[] = {
	{0, "QED\0", 4, "qed"},
	{0, "KDMV", 4, "vmdk"},
	{0, "COWD", 4, "vmdk"},
	{0, "# Disk DescriptorFile", 21, "vmdk"},
	{0x40, "\x7f\x10\xda\xbe", 4, "vdi"},
	{0, "conectix", 8, "vpc"},
	{0, "vhdxfile", 8, "vhdx"},
	{0, "LUKS\xba\xbe", 6, "luks"},
	{0, "WithoutFreeSpace", 16, "parallels"},
	{0, "WithouFreSpacExt", 16, "parallels"},
	{0, "Bochs Virtual HD Image", 22, "bochs"},
	{0, "#!/bin/sh\n#V2.0 Format", 22, "cloop"},
	{0, "QFI", 3, "qcow"},  /* after the qcow2 magic check: qcow v1 */
};

static const char *foreign_format(const unsigned char *b, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(foreign); i++)
		if (len >= foreign[i].off + foreign[i].len &&
		    memcmp(b + foreign[i].off, foreign[i].magic, foreign[i].len) == 0)
			return foreign[i].name;
	return NULL;
}

/* --------------------------------------------------------------- qcow2 */

/* Copy a length-delimited name out of the buffer. */
static int copy_name(const unsigned char *b, size_t len, uint64_t off, uint64_t n, char *out,
		     size_t outlen)
{
	if (off > len || n > len - off || n >= outlen)
		return -EINVAL;
	memcpy(out, b + off, n);
	out[n] = '\0';
	return strlen(out) == n ? 0 : -EINVAL;  /* no NUL inside */
}

static int qcow2_extensions(const unsigned char *b, size_t len, uint64_t off,
			    struct image_info *info, char *why, size_t whylen)
{
	for (int i = 0; i < 64; i++) {
		if (off + 8 > len)
			return fail(why, whylen, -EINVAL, "qcow2 header extensions truncated");
		uint32_t type = be32(b + off), n = be32(b + off + 4);
		if (type == QCOW_EXT_END)
			return 0;
		if (n > len - off - 8)
			return fail(why, whylen, -EINVAL, "qcow2 header extension past the header");
		if (type == QCOW_EXT_DATA_FILE)
			info->has_data_file = true;
		if (type == QCOW_EXT_BACKING_FORMAT &&
		    copy_name(b, len, off + 8, n, info->backing_format,
			      sizeof(info->backing_format)) < 0)
			return fail(why, whylen, -EINVAL, "qcow2 backing format unreadable");
		off += 8 + (((uint64_t)n + 7) & ~7ull);
	}
	return fail(why, whylen, -EINVAL, "qcow2 has too many header extensions");
}

static int qcow2_probe(const unsigned char *b, size_t len, struct image_info *info, char *why,
		       size_t whylen)
{
	uint32_t version = be32(b + 4), hdr_len = QCOW_V2_HEADER;
	uint64_t incompat = 0, bf_off = be64(b + 8);
	uint32_t bf_len = be32(b + 16), cluster_bits = be32(b + 20);

	if (version != 2 && version != 3)
		return fail(why, whylen, -EINVAL, "qcow2 version is neither 2 nor 3");
	if (len < (version == 3 ? QCOW_V3_HEADER : QCOW_V2_HEADER))
		return fail(why, whylen, -EINVAL, "qcow2 header truncated");
	if (cluster_bits < 9 || cluster_bits > 21)
		return fail(why, whylen, -EINVAL, "qcow2 cluster size out of range");
	if (be32(b + 32) != 0)
		return fail(why, whylen, -EINVAL, "qcow2 image is encrypted");
	if (version == 3) {
		incompat = be64(b + 72);
		hdr_len = be32(b + 100);
		if (hdr_len < QCOW_V3_HEADER || hdr_len % 8 || hdr_len > len)
			return fail(why, whylen, -EINVAL, "qcow2 header length is invalid");
	}
	if (incompat & ~QCOW_INCOMPAT_KNOWN)
		return fail(why, whylen, -EINVAL, "qcow2 uses unknown incompatible features");
	if (incompat & QCOW_INCOMPAT_CORRUPT)
		return fail(why, whylen, -EINVAL, "qcow2 image is marked corrupt");
	info->format = IMAGE_QCOW2;
	info->virtual_size = be64(b + 24);
	info->has_data_file = (incompat & QCOW_INCOMPAT_DATA_FILE) != 0;
	info->has_backing = bf_off != 0;
	if (info->has_backing &&
	    copy_name(b, len, bf_off, bf_len, info->backing, sizeof(info->backing)) < 0)
		info->backing[0] = '\0';  /* named but unreadable: still has_backing */
	return qcow2_extensions(b, len, hdr_len, info, why, whylen);
}

int image_probe(const void *buf, size_t len, struct image_info *ret, char *why, size_t whylen)
{
	const unsigned char *b = buf;
	struct image_info info = {.format = IMAGE_RAW};
	const char *other;
	int e;

	if (len >= 4 && be32(b) == QCOW_MAGIC) {
		if (len < QCOW_V2_HEADER)
			return fail(why, whylen, -EINVAL, "qcow2 header truncated");
		if ((e = qcow2_probe(b, len, &info, why, whylen)) < 0)
			return e;
	} else if ((other = foreign_format(b, len))) {
		snprintf(why, whylen, "image format %s is not supported (qcow2 or raw)", other);
		return -EPROTONOSUPPORT;
	}
	*ret = info;
	return 0;
}

int image_check_base(const void *buf, size_t len, const char *declared, struct image_info *ret,
		     char *why, size_t whylen)
{
	struct image_info info;
	const char *fmt;
	int e = image_probe(buf, len, &info, why, whylen);

	if (e < 0)
		return e;
	fmt = info.format == IMAGE_QCOW2 ? "qcow2" : "raw";
	if (info.has_backing)
		return fail(why, whylen, -EPERM, "qcow2 image names a backing file");
	if (info.has_data_file)
		return fail(why, whylen, -EPERM, "qcow2 image names an external data file");
	if (declared && *declared && strcmp(declared, fmt) != 0) {
		snprintf(why, whylen, "image is %s, declared %.32s", fmt, declared);
		return -EPERM;
	}
	*ret = info;
	return 0;
}

int image_check_overlay(const void *buf, size_t len, const char *backing_path,
			const char *backing_format, char *why, size_t whylen)
{
	struct image_info info;
	int e = image_probe(buf, len, &info, why, whylen);

	if (e < 0)
		return e;
	if (info.format != IMAGE_QCOW2)
		return fail(why, whylen, -EPERM, "overlay is not qcow2");
	if (info.has_data_file)
		return fail(why, whylen, -EPERM, "overlay names an external data file");
	if (!info.has_backing || strcmp(info.backing, backing_path) != 0)
		return fail(why, whylen, -EPERM, "overlay is not backed by its image");
	if (strcmp(info.backing_format, backing_format) != 0)
		return fail(why, whylen, -EPERM, "overlay lacks the explicit backing format");
	return 0;
}

int image_read_head(const char *path, void **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	unsigned char *buf;
	size_t n = 0;

	if (fd < 0)
		return -errno;
	buf = xmalloc(IMAGE_PROBE_BYTES);
	while (n < IMAGE_PROBE_BYTES) {
		ssize_t k = read(fd, buf + n, IMAGE_PROBE_BYTES - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = -errno;
			free(buf);
			return e;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	*ret = buf;
	*ret_len = n;
	return 0;
}

/* --------------------------------------------------------------- fetch */

bool image_sha256_valid(const char *s)
{
	size_t n = 0;

	for (; s && *s; s++, n++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return n == 64;
}

int image_ensure(const struct image_fetch *f, const char *url, const char *sha256,
		 char **ret_path, char *reason)
{
	const struct xfer_opts o = {.ca_file = f->ca_file, .cancel = f->cancel};
	char why[IMAGE_REASON_MAX] = "";
	const char *what = "ImageFetchFailed";
	int e = xfer_get_verified(&o, url, f->images_dir, sha256, f->max_bytes, ret_path, why,
				  sizeof(why));

	if (e == 0)
		return 0;
	if (e == -EINVAL)
		what = "ImageRefused";
	else if (e == -EBADMSG)
		what = "ImageDigestMismatch";
	else if (e == -EFBIG)
		what = "ImageTooLarge";
	snprintf(reason, IMAGE_REASON_MAX, "%s: %.*s", what, (int)(IMAGE_REASON_MAX - 24), why);
	return e;
}

/* ------------------------------------------------------------- overlay */

static int overlay_check(const char *overlay, const char *base, const char *fmt, char *reason)
{
	_cleanup_free_ void *head = NULL;
	char why[IMAGE_REASON_MAX];
	size_t n = 0;
	int e = image_read_head(overlay, &head, &n);

	if (e < 0) {
		snprintf(reason, IMAGE_REASON_MAX, "OverlayFailed: %s", strerror(-e));
		return e;
	}
	e = image_check_overlay(head, n, base, fmt, why, sizeof(why));
	if (e < 0)
		snprintf(reason, IMAGE_REASON_MAX, "OverlayRefused: %.120s", why);
	return e;
}

int image_overlay_create(const char *base, const char *base_format, uint64_t size_bytes,
			 const char *overlay, char *reason)
{
	char size[32], out[SPAWN_OUT_MAX];
	char *argv[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", (char *)base_format,
			"-b", (char *)base, (char *)overlay, size, NULL};
	int e;

	if (base[0] != '/' || (strcmp(base_format, "qcow2") && strcmp(base_format, "raw"))) {
		snprintf(reason, IMAGE_REASON_MAX, "OverlayFailed: bad backing image");
		return -EINVAL;
	}
	if (size_bytes == 0)
		argv[10] = NULL;  /* the image's own size */
	snprintf(size, sizeof(size), "%" PRIu64, size_bytes);
	unlink(overlay);
	e = spawn_run(argv, OVERLAY_TIMEOUT_MS, out);
	if (e < 0) {
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = '\0';
		snprintf(reason, IMAGE_REASON_MAX, "OverlayFailed: qemu-img: %.100s",
			 *out ? out : strerror(-e));
		unlink(overlay);
		return e == -ECHILD ? -EIO : e;
	}
	chmod(overlay, 0600);
	e = overlay_check(overlay, base, base_format, reason);
	if (e < 0)
		unlink(overlay);
	return e;
}
