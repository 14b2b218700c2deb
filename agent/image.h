/* image.h: pool images and per-instance overlays on this host.
 *
 * Images are fetched over https only into data_dir/images/<sha256>, the
 * digest computed while streaming and checked before the file gets its
 * final name, so a file under that name always holds those bytes. Images
 * are shared by every instance naming the same digest and never written:
 * each instance gets a qcow2 overlay backed by the image.
 *
 * Before use an image's header is checked the way `qemu-img info` would
 * read it, by content, never by name or declared format: a qcow2 that
 * names a backing file or an external data file of its own is refused (it
 * would make QEMU open a file of the tenant's choosing), as is an
 * encrypted, corrupt or unknown-feature qcow2 and any other known image
 * format; raw is fine. The overlay bcd made is checked too: qcow2, backed by
 * exactly the image's path with an explicit backing format. */
#ifndef BC_AGENT_IMAGE_H
#define BC_AGENT_IMAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAGE_PATH_MAX 1024
#define IMAGE_REASON_MAX 160
/* bytes image_probe needs to see: qcow2's header, extensions and backing
 * file name live in its first cluster; 64 KiB covers qemu-img's default
 * cluster size, and a larger cluster puts nothing further out in practice
 * (a name past this is refused as unreadable, failing closed). */
#define IMAGE_PROBE_BYTES (64 * 1024)

enum image_format {
	IMAGE_RAW,
	IMAGE_QCOW2,
};

/* What an image's header says. */
struct image_info {
	enum image_format format;
	uint64_t virtual_size;          /* qcow2: the header's; raw: 0 (the file's size) */
	bool has_backing;               /* qcow2 names a backing file */
	char backing[IMAGE_PATH_MAX];   /* its name, "" if none or unreadable */
	char backing_format[32];        /* the backing-format extension, "" if none */
	bool has_data_file;             /* external data file (bit or extension) */
};

/* Parse the first len bytes of an image (at least min(file size,
 * IMAGE_PROBE_BYTES)). Formats other than qcow2 that qemu would recognise
 * (QED, VMDK, VDI, VHD, VHDX, LUKS, ...) are -EPROTONOSUPPORT; a qcow2 that
 * is truncated, encrypted, marked corrupt or uses unknown incompatible
 * features is -EINVAL; otherwise 0 with *ret filled. why (IMAGE_REASON_MAX)
 * says what on failure. Pure. */
int image_probe(const void *buf, size_t len, struct image_info *ret, char *why, size_t whylen);

/* The tenant-image rule: image_probe, then refuse (-EPERM) a backing file
 * or external data file, and a format other than declared ("qcow2", "raw",
 * or "" for whatever it is). Pure. */
int image_check_base(const void *buf, size_t len, const char *declared, struct image_info *ret,
		     char *why, size_t whylen);

/* The overlay rule: qcow2, no external data file, backing file exactly
 * backing_path with backing format backing_format. Pure. */
int image_check_overlay(const void *buf, size_t len, const char *backing_path,
			const char *backing_format, char *why, size_t whylen);

/* Read up to IMAGE_PROBE_BYTES of path into a malloc'd buffer. */
int image_read_head(const char *path, void **ret, size_t *ret_len);

/* Fetch options (borrowed). */
struct image_fetch {
	const char *images_dir;  /* data_dir/images (exists) */
	const char *ca_file;     /* NULL/"": the system's CAs */
	uint64_t max_bytes;      /* refuse larger downloads */
	const atomic_bool *cancel;  /* set: the download stops (-ECANCELED) */
};

/* Make sure images_dir/<sha256> holds the image at url with that digest:
 * 0 at once if it does; otherwise an https download to a temporary name,
 * hashed while streaming, renamed only when the digest matches (0644).
 * Failures leave nothing behind and fill reason (IMAGE_REASON_MAX):
 * "ImageDigestMismatch: ..." (-EBADMSG), "ImageFetchFailed: ..." (-EIO),
 * "ImageTooLarge: ..." (-EFBIG), "ImageRefused: ..." for a non-https URL or
 * a bad digest string (-EINVAL), -ECANCELED when *cancel was set. *ret_path
 * is malloc'd on success. */
int image_ensure(const struct image_fetch *f, const char *url, const char *sha256,
		 char **ret_path, char *reason);

/* True if s is 64 lowercase hex characters. */
bool image_sha256_valid(const char *s);

/* Create overlay (qcow2, mode 0600) backed by base (absolute path) of
 * base_format, with virtual size size_bytes (0: the base's), by running
 * qemu-img (posix_spawn, no shell), then check its header. Any existing
 * file at overlay is replaced. reason filled on failure. */
int image_overlay_create(const char *base, const char *base_format, uint64_t size_bytes,
			 const char *overlay, char *reason);

#endif
