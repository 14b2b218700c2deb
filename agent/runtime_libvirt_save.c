/* runtime_libvirt_save.c: libvirt's qemu save image, as a memory restore
 * hands it to libvirtd (pure: files and strings, tested without libvirt).
 *
 * The image starts with a 92-byte header (libvirt's
 * src/qemu/qemu_saveimage.h, version 2, host byte order), then data_len
 * bytes: the domain XML, NUL-terminated, and at cookie_offset (0: none) the
 * save cookie, NUL-terminated, then zeros; then QEMU's migration stream
 * ("QEVM" for an uncompressed image).
 *
 * A restore rewrites the header with the new instance's definition (libvirt
 * refuses a dxml whose uuid is not the saved one's). That XML must be a
 * live one as far as libvirt's restore path goes: the restore does not run
 * firmware autoselection, so a definition's <os firmware='efi'> (no
 * <loader>, an <nvram> with no template) reached qemuPrepareNVRAMFile with
 * a NULL loader path, and libvirtd 9.0 dereferenced it (strcmp in an RPC
 * worker: the segfault seen twice), or with the NVRAM file present, QEMU
 * refused the stream ("Unknown ramblock system.flash0"). So the rewritten
 * XML takes the saved image's own <os> (the firmware the guest's memory
 * was running, resolved by the source's start) with the new instance's
 * NVRAM path in it, and nothing is handed to libvirtd before it is checked
 * here: header fields in range, both strings terminated inside their
 * regions, a <domain> XML, a stream that starts as QEMU's does, and a
 * rewritten XML whose <nvram> comes with a <loader> path. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"
#include "runtime_libvirt_int.h"
#include "util.h"

#define SAVE_MAGIC "LibvirtQemudSave"
#define SAVE_PARTIAL "LibvirtQemudPart"
#define SAVE_VERSION 2
#define SAVE_FORMATS 5  /* raw, gzip, bzip2, xz, lzop */
#define QEMU_STREAM_MAGIC "QEVM"
struct save_header {
	char magic[16];
	uint32_t version, data_len, was_running, compressed, cookie_offset, unused[14];
};
_Static_assert(sizeof(struct save_header) == 92, "libvirt's save image header is 92 bytes");
#define SAVE_DATA_MAX (64u << 20)
#define COPY_BLOCK (1 << 20)

/* n bytes to or from fd, through short transfers and EINTR: 0, or -errno
 * (-EBADMSG: the file ended first). */
static int fd_exact(int fd, void *buf, size_t n, bool out)
{
	for (size_t d = 0; d < n;) {
		ssize_t k = out ? write(fd, (char *)buf + d, n - d) : read(fd, (char *)buf + d, n - d);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : out ? -EIO : -EBADMSG;
		d += (size_t)k;
	}
	return 0;
}

/* The rest of in to out. */
static int fd_rest(int in, int out)
{
	_cleanup_free_ char *buf = xmalloc(COPY_BLOCK);

	for (;;) {
		ssize_t k = read(in, buf, COPY_BLOCK);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return 0;
		int e = fd_exact(out, buf, (size_t)k, true);
		if (e < 0)
			return e;
	}
}

struct save_image {
	struct save_header h;
	char *data;  /* data_len bytes: XML, NUL, [cookie, NUL, zeros] */
	int fd;      /* at the stream */
};

static const char *check_header(const struct save_header *h)
{
	if (memcmp(h->magic, SAVE_PARTIAL, sizeof(h->magic)) == 0)
		return "a partial save image (the save did not finish)";
	if (memcmp(h->magic, SAVE_MAGIC, sizeof(h->magic)) != 0)
		return "not a libvirt save image";
	if (h->version != SAVE_VERSION)
		return "save image version not 2 (or another byte order)";
	if (h->data_len == 0 || h->data_len > SAVE_DATA_MAX || h->cookie_offset >= h->data_len)
		return "save image header out of range";
	if (h->was_running > 1 || h->compressed >= SAVE_FORMATS)
		return "save image header fields unknown";
	return NULL;
}

/* The XML and the cookie each end with a NUL inside their region; the XML
 * is a domain. */
static const char *check_data(const struct save_header *h, const char *data)
{
	size_t xml_len = h->cookie_offset ? h->cookie_offset : h->data_len;
	const char *p = data;

	if (!memchr(data, '\0', xml_len))
		return "save image XML not terminated";
	if (h->cookie_offset && !memchr(data + h->cookie_offset, '\0', h->data_len - h->cookie_offset))
		return "save image cookie not terminated";
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	if (strncmp(p, "<domain", 7) != 0)
		return "save image XML is not a domain";
	return NULL;
}

static void save_image_free(struct save_image *s)
{
	free(s->data);
	if (s->fd >= 0)
		close(s->fd);
	s->data = NULL;
	s->fd = -1;
}

/* Open and check path; s->fd is left at the stream. */
static int save_image_open(const char *path, struct save_image *s, char *reason)
{
	const char *why = NULL;
	char magic[4];

	s->data = NULL;
	if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(reason, RT_REASON_MAX, "RestoreFailed: save image: %s", strerror(errno));
		return -errno;
	}
	if (fd_exact(s->fd, &s->h, sizeof(s->h), false) < 0)
		why = "not a libvirt save image";
	else
		why = check_header(&s->h);
	if (!why) {
		s->data = xmalloc(s->h.data_len);
		if (fd_exact(s->fd, s->data, s->h.data_len, false) < 0)
			why = "save image cut short";
		else
			why = check_data(&s->h, s->data);
	}
	if (!why && s->h.compressed == 0 &&
	    (pread(s->fd, magic, 4, (off_t)(sizeof(s->h) + s->h.data_len)) != 4 ||
	     memcmp(magic, QEMU_STREAM_MAGIC, 4) != 0))
		why = "save image holds no QEMU stream";
	if (why) {
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: %s", why);
		save_image_free(s);
		return -EBADMSG;
	}
	return 0;
}

int lvsnap_save_check(const char *path, char **ret_xml, char *reason)
{
	struct save_image s;
	int e = save_image_open(path, &s, reason);

	if (e < 0)
		return e;
	if (ret_xml)
		*ret_xml = xstrdup(s.data);
	save_image_free(&s);
	return 0;
}

/* ---------------------------------------------- the rewritten XML */

/* The element <name> or <name ...>...</name> starting in [from, lim), and
 * its end past </name> (NULL: none, or self-closing). Names are matched
 * whole (<os> is not <osinfo>). */
static const char *elem(const char *from, const char *lim, const char *name,
			const char **ret_end)
{
	size_t n = strlen(name);
	_cleanup_free_ char *tag = xasprintf("</%s>", name);

	for (const char *p = from; (p = strchr(p, '<')) && p < lim; p++) {
		const char *e, *gt;
		if (strncmp(p + 1, name, n) != 0 || (p[1 + n] != '>' && p[1 + n] != ' '))
			continue;
		if (!(gt = strchr(p, '>')) || gt[-1] == '/' || !(e = strstr(gt, tag)))
			return NULL;
		*ret_end = e + strlen(tag);
		return *ret_end <= lim ? p : NULL;
	}
	return NULL;
}

/* The text of <name ...>TEXT</name> in [b, lim): [*ret_b, *ret_e), or
 * false (none, self-closing, empty, or holding markup: a file name has no
 * '<', and replacing one must not swallow other elements). */
static bool elem_text(const char *b, const char *lim, const char *name, const char **ret_b,
		      const char **ret_e)
{
	const char *end, *p = elem(b, lim, name, &end);

	if (!p)
		return false;
	*ret_b = strchr(p, '>') + 1;
	*ret_e = end - strlen(name) - 3;
	return *ret_e > *ret_b && !memchr(*ret_b, '<', (size_t)(*ret_e - *ret_b));
}

/* Whether "<name" starts in [b, lim): any tag beginning so (<nvram>,
 * <nvram/>, even a malformed <nvramx), which then has to be an <nvram>
 * element with a file in it, or the XML is refused. */
static bool has_tag(const char *b, const char *lim, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = b; (p = strchr(p, '<')) && p < lim; p++)
		if (strncmp(p + 1, name, n) == 0)
			return true;
	return false;
}

char *lvsnap_save_bind_xml(const char *saved, const char *xml, char *reason)
{
	const char *s_end = saved + strlen(saved), *x_end = xml + strlen(xml);
	const char *so_e = NULL, *so = elem(saved, s_end, "os", &so_e);
	const char *no_e = NULL, *no = elem(xml, x_end, "os", &no_e);
	const char *sn_b = NULL, *sn_e = NULL, *nn_b = NULL, *nn_e = NULL, *lb = NULL, *le = NULL;
	bool s_nv = so && has_tag(so, so_e, "nvram");
	const char *why = NULL;

	if (!so || !no)
		why = "no <os> in the saved or the new domain XML";
	else if (s_nv && !elem_text(so, so_e, "nvram", &sn_b, &sn_e))
		why = "the saved <nvram> names no file";
	else if (s_nv && !elem_text(no, no_e, "nvram", &nn_b, &nn_e))
		why = "the new domain has no NVRAM file for the saved one's";
	else if (s_nv && (!elem_text(so, so_e, "loader", &lb, &le) || *lb != '/'))
		why = "the saved domain has NVRAM but no firmware <loader> path";
	if (why) {
		snprintf(reason, RT_REASON_MAX, "SnapshotRefused: %s", why);
		return NULL;
	}
	/* xml up to its <os>, the saved <os> with the new NVRAM file, the rest */
	if (!s_nv)
		return xasprintf("%.*s%.*s%s", (int)(no - xml), xml, (int)(so_e - so), so, no_e);
	return xasprintf("%.*s%.*s%.*s%.*s%s", (int)(no - xml), xml, (int)(sn_b - so), so,
			 (int)(nn_e - nn_b), nn_b, (int)(so_e - sn_e), sn_e, no_e);
}

/* ---------------------------------------------- the rewrite */

int lvsnap_save_rebind(const char *in, const char *out, const char *xml, char *reason)
{
	struct save_image s;
	_cleanup_close_ int fo = -1;
	_cleanup_free_ char *bound = NULL;
	struct save_header nh;
	size_t xl, tail = 0;
	int e = save_image_open(in, &s, reason);

	if (e < 0)
		return e;
	if (!(bound = lvsnap_save_bind_xml(s.data, xml, reason))) {
		save_image_free(&s);
		return -EBADMSG;
	}
	xl = strlen(bound) + 1;
	if (s.h.cookie_offset)
		tail = s.h.data_len - s.h.cookie_offset;
	if (xl + tail > SAVE_DATA_MAX) {
		snprintf(reason, RT_REASON_MAX, "RestoreFailed: the domain XML is too large");
		save_image_free(&s);
		return -E2BIG;
	}
	nh = s.h;
	nh.data_len = (uint32_t)(xl + tail);
	nh.cookie_offset = s.h.cookie_offset ? (uint32_t)xl : 0;
	if ((fo = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		e = -errno;
	if (e == 0 && (e = fd_exact(fo, &nh, sizeof(nh), true)) == 0 &&
	    (e = fd_exact(fo, bound, xl, true)) == 0 &&
	    (!tail || (e = fd_exact(fo, s.data + s.h.cookie_offset, tail, true)) == 0) &&
	    (e = fd_rest(s.fd, fo)) == 0 && fsync(fo) < 0)
		e = -errno;
	save_image_free(&s);
	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "RestoreFailed: save image: %s", strerror(-e));
		unlink(out);
	}
	return e;
}
