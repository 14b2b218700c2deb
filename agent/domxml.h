/* domxml.h: the pure libvirt domain XML builder.
 *
 * An instance's shape (from its InstanceSpec) and the paths the runtime
 * chose become one domain XML text; nothing here touches libvirt, the
 * kernel or the filesystem, so the output is pinned by golden files
 * (tests/unit/test_agent_domxml.c). Every string is XML-escaped; fields are
 * also checked (ids, MACs, tap names, page sizes) so a spec that cannot be
 * expressed is refused here, not by libvirt halfway through a define. */
#ifndef BC_AGENT_DOMXML_H
#define BC_AGENT_DOMXML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The XML namespace of bc's <metadata> element and its prefix. */
#define DOMXML_NS "https://bc.dev/xmlns/libvirt/instance/1"
#define DOMXML_NS_PREFIX "bc"

#define DOMXML_MAX_DISKS 24   /* volumes + overlay + seed stay within vda..vdz */
#define DOMXML_MAX_NICS 8
#define DOMXML_MAX_VCPUS 512

/* An attached volume: a raw file, found by the guest by its serial. */
struct domxml_volume {
	const char *path;
	const char *serial;
	bool read_only;
};

struct domxml_nic {
	const char *tap;  /* made by net.c before the domain starts */
	const char *mac;  /* xx:xx:xx:xx:xx:xx */
};

struct domxml {
	const char *name;        /* domain name = instance id (rt_id_valid) */
	const char *node_id;     /* written into the bc metadata */
	const char *type;        /* "kvm" or "qemu" */
	uint32_t vcpus;
	uint64_t memory_mib;
	const char *huge_pages;  /* NULL/"" none, "2M", "1G" */
	int32_t numa_node;       /* -1: none */
	const uint32_t *pinned;  /* host CPUs: vCPU i on pinned[i % n_pinned] */
	size_t n_pinned;
	const char *overlay;     /* the instance's qcow2 overlay (vda) */
	const char *seed;        /* NoCloud cidata ISO, read-only (vdb); NULL none */
	const char *nvram;       /* per-domain UEFI variable store */
	const char *console_log; /* serial console log file */
	const struct domxml_volume *volumes;
	size_t n_volumes;
	const struct domxml_nic *nics;
	size_t n_nics;
};

/* Build the domain XML of d into *ret (malloc'd, NUL-terminated). 0, or
 * -EINVAL with a short reason in why (at least 128 bytes) for a field that
 * cannot be expressed. */
int domxml_build(const struct domxml *d, char **ret, char *why, size_t whylen);

/* The huge page size of "2M" / "1G" in KiB (2048, 1048576); 0 for ""/NULL;
 * -EINVAL for anything else. */
int domxml_page_kib(const char *huge_pages, uint64_t *ret_kib);

/* Escape s for XML text and attribute values into out (outlen bytes);
 * false if it does not fit. */
bool domxml_escape(const char *s, char *out, size_t outlen);

/* The node id written in a domain's bc metadata element (what
 * virDomainGetMetadata returns for DOMXML_NS), into out. 0, or -ENOENT when
 * the element holds no node id, -EINVAL when it is malformed. */
int domxml_metadata_node(const char *metadata_xml, char *out, size_t outlen);

#define DOMXML_DEV_MAX 16
/* The target dev ("vdc") of the <disk> whose <serial> is serial in a
 * domain's XML (libvirt's virDomainGetXMLDesc) into out. 0, -ENOENT when no
 * disk has that serial, -EINVAL for XML it cannot read. Pure. */
int domxml_disk_by_serial(const char *xml, const char *serial, char *out, size_t outlen);

/* The identity rebind's hot-plugged elements (runtime_libvirt_rebind.c;
 * docs/rebind.md): the <interface> of one NIC as domxml_build writes it
 * (for libvirt's attach and detach), and the rebind disk at path (raw,
 * virtio, target DOMXML_REBIND_DEV, beyond any disk domxml_build names,
 * serial DOMXML_REBIND_SERIAL). *ret malloc'd; -EINVAL for a MAC, tap name
 * or path domxml_build would refuse. */
#define DOMXML_REBIND_DEV "vdzz"
#define DOMXML_REBIND_SERIAL "bc-rebind"
int domxml_nic_element(const char *mac, const char *tap, char **ret);
int domxml_rebind_disk_element(const char *path, char **ret);

/* The MAC of the <interface> whose <target dev> is tap in a domain's XML,
 * into mac. 0, -ENOENT when no interface is on tap, -EINVAL for XML it
 * cannot read. Pure. */
int domxml_mac_of_tap(const char *xml, const char *tap, char mac[18]);

#endif
