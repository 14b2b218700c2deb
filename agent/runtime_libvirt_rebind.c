/* runtime_libvirt_rebind.c: the libvirt runtime's identity rebind
 * (runtime.h, rebind; docs/rebind.md), called from bcd's rebind job, off
 * the converge pass.
 *
 * A memory restore resumes with its source's NICs: their MACs are in the
 * guest's memory and in the saved device state, so the restore was defined
 * with them on its own taps, whose guards drop their frames. For each NIC
 * of the spec whose tap carries another MAC, the NIC is detached (live and
 * in the definition: the guest's PCIe hot-plug releases it) and a NIC with
 * the spec's MAC attached on the same tap, into the root port it freed.
 * Then the raw 1 MiB disk instance_dir/rebind.img, the archive at offset 0,
 * is attached live with serial bc-rebind (libvirt's q35 definition keeps a
 * free root port for one hot-plug); the guest's udev rule runs bc-rebind,
 * which configures the new NIC from the archive and writes
 * "BCREBOUND <nonce>" at the start of the disk's last 4 KiB. bcd polls
 * for it up to RB_WAIT_MS, then detaches the disk and zeroes and deletes
 * its file, whatever came of it. A rebind that a restarted bcd runs again
 * finds the NICs already swapped and a disk left attached, which it
 * detaches first. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "domxml.h"
#include "log.h"
#include "rebind_bundle.h"
#include "runtime_libvirt.h"
#include "runtime_libvirt_int.h"
#include "util.h"

#define RB_WAIT_MS (120 * 1000)   /* the guest's acknowledgement */
#define RB_DETACH_MS (60 * 1000)  /* a device the guest releases */
#define RB_POLL_MS 250

#define LIVE_CONFIG (VIR_DOMAIN_AFFECT_LIVE | VIR_DOMAIN_AFFECT_CONFIG)

/* The domain's live XML holds needle (or, with gone, no longer does) within
 * ms; 0 or -ETIMEDOUT; -EIO when the XML cannot be read. */
static int live_xml_wait(virDomainPtr dom, const char *needle, bool gone, int64_t ms)
{
	int64_t deadline = now_ms() + ms;

	for (;;) {
		char *xml = virDomainGetXMLDesc(dom, 0);
		bool has;
		if (!xml)
			return -EIO;
		has = strstr(xml, needle) != NULL;
		free(xml);
		if (has != gone)
			return 0;
		if (now_ms() >= deadline)
			return -ETIMEDOUT;
		usleep(RB_POLL_MS * 1000);
	}
}

/* NIC i of the spec: detach whatever MAC its tap carries, attach its own. */
static int nic_swap(virDomainPtr dom, const Bc__Node__V1__NicSpec *n, char *reason)
{
	_cleanup_free_ char *xml = virDomainGetXMLDesc(dom, 0), *old_el = NULL, *new_el = NULL;
	char old[18], needle[64];
	int e;

	if (!xml) {
		snprintf(reason, RT_REASON_MAX, "domain XML: %.120s", lv_err());
		return -EIO;
	}
	if ((e = domxml_mac_of_tap(xml, n->tap, old)) == -ENOENT)
		goto attach; /* detached by an earlier try that stopped there */
	if (e < 0 || strcasecmp(old, n->mac) == 0)
		return e;
	if ((e = domxml_nic_element(old, n->tap, &old_el)) < 0)
		return e;
	if (virDomainDetachDeviceFlags(dom, old_el, LIVE_CONFIG) < 0) {
		snprintf(reason, RT_REASON_MAX, "detach NIC %s: %.120s", old, lv_err());
		return -EIO;
	}
	snprintf(needle, sizeof(needle), "<mac address='%s'/>", old);
	if ((e = live_xml_wait(dom, needle, true, RB_DETACH_MS)) < 0) {
		snprintf(reason, RT_REASON_MAX, "the guest did not release NIC %s (%s)", old,
			 strerror(-e));
		return e;
	}
attach:
	if ((e = domxml_nic_element(n->mac, n->tap, &new_el)) < 0)
		return e;
	if (virDomainAttachDeviceFlags(dom, new_el, LIVE_CONFIG) < 0) {
		snprintf(reason, RT_REASON_MAX, "attach NIC %s: %.120s", n->mac, lv_err());
		return -EIO;
	}
	return 0;
}

/* Detach the rebind disk if the domain has it, and wait until it is gone. */
static int disk_detach(virDomainPtr dom, const char *el)
{
	_cleanup_free_ char *xml = virDomainGetXMLDesc(dom, 0);
	const char *needle = "<serial>" DOMXML_REBIND_SERIAL "</serial>";

	if (!xml || !strstr(xml, needle))
		return 0;
	if (virDomainDetachDeviceFlags(dom, el, VIR_DOMAIN_AFFECT_LIVE) < 0)
		return -EIO;
	return live_xml_wait(dom, needle, true, RB_DETACH_MS);
}

/* The disk's file: the archive at offset 0, zeros to RB_DISK_BYTES. */
static int disk_write(const char *path, const void *tar, size_t len)
{
	_cleanup_free_ char *buf = xcalloc(1, RB_DISK_BYTES);

	memcpy(buf, tar, len);
	return file_write_atomic(path, buf, RB_DISK_BYTES, 0600);
}

/* Zero the file's bytes (the archive may hold a host key), then delete it. */
static void disk_wipe(const char *path)
{
	_cleanup_free_ char *zero = xcalloc(1, RB_DISK_BYTES);
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd >= 0) {
		(void)!pwrite(fd, zero, RB_DISK_BYTES, 0);
		(void)!fsync(fd);
		close(fd);
	}
	unlink(path);
}

/* Poll the disk's last RB_ACK_BYTES for the guest's acknowledgement. */
static int ack_wait(virDomainPtr dom, const char *path, const char *nonce, char *reason)
{
	int64_t deadline = now_ms() + RB_WAIT_MS;
	char area[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = pread(fd, area, sizeof(area), RB_DISK_BYTES - RB_ACK_BYTES);
		if (n > 0 && rb_ack_ok(area, (size_t)n, nonce)) {
			close(fd);
			return 0;
		}
		if (virDomainIsActive(dom) != 1 || now_ms() >= deadline)
			break;
		usleep(RB_POLL_MS * 1000);
	}
	close(fd);
	snprintf(reason, RT_REASON_MAX, "the guest did not acknowledge the bundle within %d s",
		 RB_WAIT_MS / 1000);
	return -ETIMEDOUT;
}

static int rebind_dom(struct rt_libvirt *lv, virDomainPtr dom,
		      const Bc__Node__V1__InstanceSpec *s, const void *tar, size_t len,
		      const char *nonce, char *reason)
{
	_cleanup_free_ char *path = inst_path(lv, s->id, "rebind.img"), *el = NULL;
	int e = 0;

	if (dom_state(dom) != RT_STATE_RUNNING) {
		snprintf(reason, RT_REASON_MAX, "instance %s is not running", s->id);
		return -EINVAL;
	}
	if ((e = domxml_rebind_disk_element(path, &el)) < 0)
		return e;
	if (disk_detach(dom, el) < 0) {
		snprintf(reason, RT_REASON_MAX, "an earlier rebind disk is still attached");
		return -EBUSY;
	}
	for (size_t i = 0; i < s->n_nics && e == 0; i++)
		e = nic_swap(dom, s->nics[i], reason);
	if (e == 0 && (e = disk_write(path, tar, len)) < 0)
		snprintf(reason, RT_REASON_MAX, "write %s: %s", path, strerror(-e));
	if (e == 0 && virDomainAttachDeviceFlags(dom, el, VIR_DOMAIN_AFFECT_LIVE) < 0) {
		snprintf(reason, RT_REASON_MAX, "attach the rebind disk: %.120s", lv_err());
		e = -EIO;
	}
	if (e == 0) {
		e = ack_wait(dom, path, nonce, reason);
		if (disk_detach(dom, el) < 0)
			log_warn("libvirt: %s: the rebind disk did not detach", s->id);
	}
	disk_wipe(path);
	return e;
}

int lv_rebind(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const void *tar, size_t len,
	      const char *nonce, char *reason)
{
	struct rt_libvirt *lv = lv_of(rt);
	virConnectPtr c;
	virDomainPtr dom;
	int e;

	if (!rt_id_valid(s->id) || !len || len % 512 || len > RB_DISK_BYTES - RB_ACK_BYTES ||
	    strlen(nonce) != RB_NONCE_LEN || strspn(nonce, "0123456789abcdef") != RB_NONCE_LEN)
		return -EINVAL;
	if (!(c = conn_of(lv))) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return -EIO;
	}
	if (!(dom = virDomainLookupByName(c, s->id)) || !dom_ours(lv, dom)) {
		if (dom)
			virDomainFree(dom);
		snprintf(reason, RT_REASON_MAX, "no instance %s", s->id);
		return -ENOENT;
	}
	rt_libvirt_call_begin(rt, s->id);
	e = rebind_dom(lv, dom, s, tar, len, nonce, reason);
	rt_libvirt_call_end(rt, s->id);
	virDomainFree(dom);
	return e;
}
