/* domxml.c: the pure libvirt domain XML builder (domxml.h).
 *
 * The domain always boots UEFI (firmware autoselection, secure boot off, a
 * per-domain NVRAM file in the instance directory), q35, with:
 *  - vda: the instance's qcow2 overlay, virtio, discard=unmap;
 *  - vdb: the NoCloud seed ISO, virtio, read-only (cloud-init finds it by
 *    its volume label "cidata" on any block device);
 *  - vdc...: attached volumes (raw), each with its <serial>;
 *  - one virtio NIC per tap, type ethernet, the tap not managed by libvirt
 *    (net.c made it and guards it);
 *  - the serial console on a pty whose output virtlogd appends to the
 *    console log file, plus <console> so `virsh console` works;
 *  - optional huge-page backing, a guest NUMA cell bound to a host node
 *    (numatune memory + memnode) and vCPU pinning (cputune vcpupin);
 *  - a <metadata> element in bc's namespace naming the node, which is how
 *    a runtime tells its own domains from another bcd's on one libvirtd. */
#include "domxml.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "util.h"

#define ESC_MAX 4096

/* An output stream with an escaping printf: every %s argument given to
 * xml_put goes through domxml_escape. */
struct out {
	FILE *f;
	bool bad;  /* a string did not fit the escape buffer */
};

bool domxml_escape(const char *s, char *out, size_t outlen)
{
	size_t n = 0;

	for (; s && *s; s++) {
		const char *rep = NULL;
		char one[2] = {*s, '\0'};
		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&apos;"; break;
		default: rep = one; break;
		}
		size_t k = strlen(rep);
		if (n + k + 1 > outlen)
			return false;
		memcpy(out + n, rep, k);
		n += k;
	}
	if (n + 1 > outlen)
		return false;
	out[n] = '\0';
	return true;
}

/* Print one line: fmt with every "%s" replaced by the escaped next string
 * argument (only %s is supported; numbers are formatted by the caller). */
static void put(struct out *o, int indent, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(o->f, "%*s", indent * 2, "");
	for (const char *p = fmt; *p; p++) {
		char esc[ESC_MAX];
		if (p[0] == '%' && p[1] == 's') {
			if (!domxml_escape(va_arg(ap, const char *), esc, sizeof(esc)))
				o->bad = true;
			fputs(esc, o->f);
			p++;
		} else
			fputc(*p, o->f);
	}
	fputc('\n', o->f);
	va_end(ap);
}

/* ------------------------------------------------------------- checks */

int domxml_page_kib(const char *hp, uint64_t *ret_kib)
{
	if (!hp || !*hp)
		*ret_kib = 0;
	else if (strcmp(hp, "2M") == 0)
		*ret_kib = 2048;
	else if (strcmp(hp, "1G") == 0)
		*ret_kib = 1024 * 1024;
	else
		return -EINVAL;
	return 0;
}

static bool mac_ok(const char *m)
{
	if (!m || strlen(m) != 17)
		return false;
	for (int i = 0; i < 17; i++) {
		char c = m[i];
		bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
		if (i % 3 == 2 ? c != ':' : !hex)
			return false;
	}
	return true;
}

/* Interface names: 1..15 chars, no '/', no whitespace, not "." or "..". */
static bool tap_ok(const char *t)
{
	size_t n = t ? strlen(t) : 0;

	if (n == 0 || n > 15 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0)
		return false;
	for (; *t; t++)
		if (*t == '/' || *t == ':' || (unsigned char)*t <= ' ' || (unsigned char)*t >= 0x7f)
			return false;
	return true;
}

/* Absolute path of printable characters. */
static bool path_ok(const char *p)
{
	return p && p[0] == '/' && str_is_printable(p, 1024);
}

static int refuse(char *why, size_t whylen, const char *what)
{
	snprintf(why, whylen, "%s", what);
	return -EINVAL;
}

static int check_shape(const struct domxml *d, char *why, size_t whylen)
{
	uint64_t kib;

	if (!rt_id_valid(d->name))
		return refuse(why, whylen, "unusable instance id");
	if (!d->node_id || !str_is_printable(d->node_id, 128) || !*d->node_id)
		return refuse(why, whylen, "unusable node id");
	if (!d->type || (strcmp(d->type, "kvm") && strcmp(d->type, "qemu")))
		return refuse(why, whylen, "domain type must be kvm or qemu");
	if (d->vcpus == 0 || d->vcpus > DOMXML_MAX_VCPUS)
		return refuse(why, whylen, "vcpus out of range");
	if (d->memory_mib < 16 || d->memory_mib > (1ull << 32))
		return refuse(why, whylen, "memory out of range");
	if (domxml_page_kib(d->huge_pages, &kib) < 0)
		return refuse(why, whylen, "huge_pages must be 2M or 1G");
	if (kib && (d->memory_mib * 1024) % kib)
		return refuse(why, whylen, "memory is not a multiple of the huge page size");
	if (d->numa_node < -1 || d->numa_node > 1023)
		return refuse(why, whylen, "numa_node out of range");
	for (size_t i = 0; i < d->n_pinned; i++)
		if (d->pinned[i] > 8191)
			return refuse(why, whylen, "pinned host CPU out of range");
	return 0;
}

static int check_devices(const struct domxml *d, char *why, size_t whylen)
{
	if (!path_ok(d->overlay) || !path_ok(d->nvram) || !path_ok(d->console_log) ||
	    (d->seed && !path_ok(d->seed)))
		return refuse(why, whylen, "unusable file path");
	if (d->n_volumes + 2 > DOMXML_MAX_DISKS || d->n_nics > DOMXML_MAX_NICS)
		return refuse(why, whylen, "too many volumes or NICs");
	for (size_t i = 0; i < d->n_volumes; i++) {
		const struct domxml_volume *v = &d->volumes[i];
		if (!path_ok(v->path) || !v->serial || !*v->serial ||
		    !str_is_printable(v->serial, 20))
			return refuse(why, whylen, "unusable volume path or serial");
	}
	for (size_t i = 0; i < d->n_nics; i++)
		if (!tap_ok(d->nics[i].tap) || !mac_ok(d->nics[i].mac))
			return refuse(why, whylen, "unusable NIC tap name or MAC");
	return 0;
}

/* ----------------------------------------------------------- sections */

static void put_head(struct out *o, const struct domxml *d)
{
	char num[64];

	put(o, 0, "<domain type='%s'>", d->type);
	put(o, 1, "<name>%s</name>", d->name);
	put(o, 1, "<metadata>");
	put(o, 2, "<" DOMXML_NS_PREFIX ":instance xmlns:" DOMXML_NS_PREFIX "='%s'>", DOMXML_NS);
	put(o, 3, "<" DOMXML_NS_PREFIX ":node>%s</" DOMXML_NS_PREFIX ":node>", d->node_id);
	put(o, 2, "</" DOMXML_NS_PREFIX ":instance>");
	put(o, 1, "</metadata>");
	snprintf(num, sizeof(num), "%" PRIu64, d->memory_mib);
	put(o, 1, "<memory unit='MiB'>%s</memory>", num);
	put(o, 1, "<currentMemory unit='MiB'>%s</currentMemory>", num);
	snprintf(num, sizeof(num), "%" PRIu32, d->vcpus);
	put(o, 1, "<vcpu placement='static'>%s</vcpu>", num);
}

static void put_memory_backing(struct out *o, const struct domxml *d)
{
	uint64_t kib = 0;
	char num[32];

	domxml_page_kib(d->huge_pages, &kib);
	if (!kib)
		return;
	snprintf(num, sizeof(num), "%" PRIu64, kib);
	put(o, 1, "<memoryBacking>");
	put(o, 2, "<hugepages>");
	put(o, 3, "<page size='%s' unit='KiB'/>", num);
	put(o, 2, "</hugepages>");
	put(o, 1, "</memoryBacking>");
}

static void put_cputune(struct out *o, const struct domxml *d)
{
	if (!d->n_pinned)
		return;
	put(o, 1, "<cputune>");
	for (uint32_t i = 0; i < d->vcpus; i++) {
		char vcpu[16], cpu[16];
		snprintf(vcpu, sizeof(vcpu), "%" PRIu32, i);
		snprintf(cpu, sizeof(cpu), "%" PRIu32, d->pinned[i % d->n_pinned]);
		put(o, 2, "<vcpupin vcpu='%s' cpuset='%s'/>", vcpu, cpu);
	}
	put(o, 1, "</cputune>");
}

static void put_numatune(struct out *o, const struct domxml *d)
{
	char node[16];

	if (d->numa_node < 0)
		return;
	snprintf(node, sizeof(node), "%" PRId32, d->numa_node);
	put(o, 1, "<numatune>");
	put(o, 2, "<memory mode='strict' nodeset='%s'/>", node);
	put(o, 2, "<memnode cellid='0' mode='strict' nodeset='%s'/>", node);
	put(o, 1, "</numatune>");
}

static void put_os(struct out *o, const struct domxml *d)
{
	put(o, 1, "<os firmware='efi'>");
	put(o, 2, "<type arch='x86_64' machine='q35'>hvm</type>");
	put(o, 2, "<firmware>");
	put(o, 3, "<feature enabled='no' name='enrolled-keys'/>");
	put(o, 3, "<feature enabled='no' name='secure-boot'/>");
	put(o, 2, "</firmware>");
	put(o, 2, "<nvram>%s</nvram>", d->nvram);
	put(o, 2, "<boot dev='hd'/>");
	put(o, 1, "</os>");
	put(o, 1, "<features>");
	put(o, 2, "<acpi/>");
	put(o, 2, "<apic/>");
	put(o, 1, "</features>");
}

/* kvm: the host's CPU as is; qemu (TCG): QEMU's default model. A guest
 * NUMA cell (for memnode) needs a <cpu> element either way. */
static void put_cpu(struct out *o, const struct domxml *d)
{
	bool kvm = strcmp(d->type, "kvm") == 0;
	char cpus[32], mem[32];

	if (!kvm && d->numa_node < 0)
		return;
	put(o, 1, kvm ? "<cpu mode='host-passthrough' check='none'>" : "<cpu>");
	if (d->numa_node >= 0) {
		if (d->vcpus > 1)
			snprintf(cpus, sizeof(cpus), "0-%" PRIu32, d->vcpus - 1);
		else
			snprintf(cpus, sizeof(cpus), "0");
		snprintf(mem, sizeof(mem), "%" PRIu64, d->memory_mib);
		put(o, 2, "<numa>");
		put(o, 3, "<cell id='0' cpus='%s' memory='%s' unit='MiB'/>", cpus, mem);
		put(o, 2, "</numa>");
	}
	put(o, 1, "</cpu>");
}

static void put_lifecycle(struct out *o)
{
	put(o, 1, "<clock offset='utc'/>");
	put(o, 1, "<on_poweroff>destroy</on_poweroff>");
	put(o, 1, "<on_reboot>restart</on_reboot>");
	put(o, 1, "<on_crash>destroy</on_crash>");
}

/* Target names vda, vdb, ... (at most DOMXML_MAX_DISKS, all one letter). */
static void target_name(size_t i, char out[8])
{
	snprintf(out, 8, "vd%c", (char)('a' + i));
}

static void put_disk(struct out *o, size_t index, const char *path, const char *format,
		     const char *serial, bool read_only, bool discard)
{
	char dev[8];

	target_name(index, dev);
	put(o, 2, "<disk type='file' device='disk'>");
	if (discard)
		put(o, 3, "<driver name='qemu' type='%s' discard='unmap'/>", format);
	else
		put(o, 3, "<driver name='qemu' type='%s'/>", format);
	put(o, 3, "<source file='%s'/>", path);
	put(o, 3, "<target dev='%s' bus='virtio'/>", dev);
	if (serial)
		put(o, 3, "<serial>%s</serial>", serial);
	if (read_only)
		put(o, 3, "<readonly/>");
	put(o, 2, "</disk>");
}

static void put_disks(struct out *o, const struct domxml *d)
{
	size_t next = 0;

	put_disk(o, next++, d->overlay, "qcow2", NULL, false, true);
	if (d->seed)
		put_disk(o, next++, d->seed, "raw", NULL, true, false);
	else
		next++;  /* volumes keep their names with or without a seed */
	for (size_t i = 0; i < d->n_volumes; i++)
		put_disk(o, next++, d->volumes[i].path, "raw", d->volumes[i].serial,
			 d->volumes[i].read_only, !d->volumes[i].read_only);
}

static void put_nic(struct out *o, int indent, const struct domxml_nic *n)
{
	put(o, indent, "<interface type='ethernet'>");
	put(o, indent + 1, "<mac address='%s'/>", n->mac);
	put(o, indent + 1, "<target dev='%s' managed='no'/>", n->tap);
	put(o, indent + 1, "<model type='virtio'/>");
	put(o, indent, "</interface>");
}

static void put_nics(struct out *o, const struct domxml *d)
{
	for (size_t i = 0; i < d->n_nics; i++)
		put_nic(o, 2, &d->nics[i]);
}

static void put_console(struct out *o, const struct domxml *d)
{
	put(o, 2, "<serial type='pty'>");
	put(o, 3, "<log file='%s' append='on'/>", d->console_log);
	put(o, 3, "<target port='0'/>");
	put(o, 2, "</serial>");
	put(o, 2, "<console type='pty'>");
	put(o, 3, "<target type='serial' port='0'/>");
	put(o, 2, "</console>");
}

static void put_devices(struct out *o, const struct domxml *d)
{
	put(o, 1, "<devices>");
	put_disks(o, d);
	put_nics(o, d);
	put_console(o, d);
	put(o, 2, "<rng model='virtio'>");
	put(o, 3, "<backend model='random'>/dev/urandom</backend>");
	put(o, 2, "</rng>");
	put(o, 2, "<memballoon model='none'/>");
	put(o, 1, "</devices>");
}

int domxml_build(const struct domxml *d, char **ret, char *why, size_t whylen)
{
	struct out o = {0};
	char *buf = NULL;
	size_t len = 0;
	int e;

	if ((e = check_shape(d, why, whylen)) < 0 || (e = check_devices(d, why, whylen)) < 0)
		return e;
	o.f = open_memstream(&buf, &len);
	if (!o.f)
		return -ENOMEM;
	put_head(&o, d);
	put_memory_backing(&o, d);
	put_cputune(&o, d);
	put_numatune(&o, d);
	put_os(&o, d);
	put_cpu(&o, d);
	put_lifecycle(&o);
	put_devices(&o, d);
	put(&o, 0, "</domain>");
	if (fclose(o.f) != 0 || o.bad) {
		free(buf);
		return o.bad ? refuse(why, whylen, "a string is too long") : -ENOMEM;
	}
	*ret = buf;
	return 0;
}

/* ----------------------------------------------------------- metadata */

int domxml_metadata_node(const char *xml, char *out, size_t outlen)
{
	const char *p, *end;
	size_t n;

	if (!xml)
		return -ENOENT;
	p = strstr(xml, ":node>");
	if (p)
		p += 6;
	else if ((p = strstr(xml, "<node>")))
		p += 6;
	else
		return -ENOENT;
	end = strchr(p, '<');
	if (!end)
		return -EINVAL;
	n = (size_t)(end - p);
	if (n == 0 || n >= outlen)
		return -EINVAL;
	memcpy(out, p, n);
	out[n] = '\0';
	return str_is_printable(out, outlen) ? 0 : -EINVAL;
}

/* ------------------------------------------------------ disk by serial */

/* The value of attribute name (name=' or name=") inside [p, end), into out. */
/* The value of the first attribute name (e.g. "<target dev=") between p
 * and end into out, as written. */
static int attr_raw(const char *p, const char *end, const char *name, char *out, size_t outlen)
{
	const char *a = strstr(p, name), *v, *q;
	size_t n = strlen(name);

	if (!a || a >= end || (a[n] != '\'' && a[n] != '"'))
		return -EINVAL;
	v = a + n + 1;
	q = strchr(v, a[n]);
	if (!q || q >= end || q == v || (size_t)(q - v) >= outlen)
		return -EINVAL;
	memcpy(out, v, (size_t)(q - v));
	out[q - v] = '\0';
	return 0;
}

/* attr_raw of a value of lower-case letters and digits only. */
static int attr_in(const char *p, const char *end, const char *name, char *out, size_t outlen)
{
	if (attr_raw(p, end, name, out, outlen) < 0)
		return -EINVAL;
	for (const char *c = out; *c; c++)
		if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c))
			return -EINVAL;
	return 0;
}

int domxml_disk_by_serial(const char *xml, const char *serial, char *out, size_t outlen)
{
	size_t n = serial ? strlen(serial) : 0;

	if (!xml || !n)
		return -EINVAL;
	for (const char *p = strstr(xml, "<disk "); p; p = strstr(p, "<disk ")) {
		const char *end = strstr(p, "</disk>"), *s;
		if (!end)
			return -EINVAL;
		s = strstr(p, "<serial>");
		if (s && s < end && strncmp(s + 8, serial, n) == 0 && s[8 + n] == '<')
			return attr_in(p, end, "<target dev=", out, outlen);
		p = end;
	}
	return -ENOENT;
}

/* ------------------------------------------------- hot-plugged elements */

/* One element printed by fn into *ret (malloc'd). */
static int element(void (*fn)(struct out *, const void *), const void *arg, char **ret)
{
	struct out o = {0};
	char *buf = NULL;
	size_t len = 0;

	o.f = open_memstream(&buf, &len);
	if (!o.f)
		return -ENOMEM;
	fn(&o, arg);
	if (fclose(o.f) != 0 || o.bad) {
		free(buf);
		return o.bad ? -EINVAL : -ENOMEM;
	}
	*ret = buf;
	return 0;
}

static void put_nic_element(struct out *o, const void *arg)
{
	put_nic(o, 0, arg);
}

int domxml_nic_element(const char *mac, const char *tap, char **ret)
{
	const struct domxml_nic n = {.tap = tap, .mac = mac};

	if (!tap_ok(tap) || !mac_ok(mac))
		return -EINVAL;
	return element(put_nic_element, &n, ret);
}

static void put_rebind_disk(struct out *o, const void *path)
{
	put(o, 0, "<disk type='file' device='disk'>");
	put(o, 1, "<driver name='qemu' type='raw'/>");
	put(o, 1, "<source file='%s'/>", (const char *)path);
	put(o, 1, "<target dev='" DOMXML_REBIND_DEV "' bus='virtio'/>");
	put(o, 1, "<serial>" DOMXML_REBIND_SERIAL "</serial>");
	put(o, 0, "</disk>");
}

int domxml_rebind_disk_element(const char *path, char **ret)
{
	if (!path_ok(path))
		return -EINVAL;
	return element(put_rebind_disk, path, ret);
}

int domxml_mac_of_tap(const char *xml, const char *tap, char mac[18])
{
	char dev[16], m[18];

	if (!xml || !tap_ok(tap))
		return -EINVAL;
	for (const char *p = strstr(xml, "<interface "); p; p = strstr(p, "<interface ")) {
		const char *end = strstr(p, "</interface>"), *a;
		if (!end)
			return -EINVAL;
		a = strstr(p, "<target dev=");
		if (a && a < end && attr_raw(a, end, "<target dev=", dev, sizeof(dev)) == 0 &&
		    strcmp(dev, tap) == 0) {
			if (attr_raw(p, end, "<mac address=", m, sizeof(m)) < 0 || !mac_ok(m))
				return -EINVAL;
			memcpy(mac, m, sizeof(m));
			return 0;
		}
		p = end;
	}
	return -ENOENT;
}
