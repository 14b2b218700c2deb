/* test_agent_domxml.c: the pure domain XML builder (agent/domxml.c) against
 * golden files in tests/unit/golden/domxml_*.xml (`make update-golden`
 * rewrites them: review the diff), its refusals, escaping, and the reading
 * of the bc metadata element back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/domxml.h"
#include "tap.h"
#include "util.h"

static void golden(const char *name, const char *got)
{
	const char *src = getenv("BC_SRC");
	char path[1024];
	char *want = NULL;

	snprintf(path, sizeof(path), "%s/tests/unit/golden/%s", src ? src : ".", name);
	if (getenv("BC_UPDATE_GOLDEN")) {
		ok(file_write_atomic(path, got, strlen(got), 0644) == 0, "golden %s rewritten", name);
		return;
	}
	if (file_read_all(path, 1 << 20, &want, NULL) < 0) {
		ok(0, "golden %s readable (make update-golden)", name);
		return;
	}
	ok(strcmp(got, want) == 0, "domain XML matches golden/%s", name);
	if (strcmp(got, want) != 0)
		printf("# got:\n%s\n# rerun with BC_UPDATE_GOLDEN=1 and diff to see the change\n", got);
	free(want);
}

static const struct domxml_nic nic1[] = {{"bct0123456789a", "52:54:00:12:34:56"}};

static struct domxml minimal(void)
{
	return (struct domxml){
		.name = "inst_01abc",
		.node_id = "node_01xyz",
		.type = "qemu",
		.vcpus = 1,
		.memory_mib = 512,
		.numa_node = -1,
		.overlay = "/var/lib/bcd-data/instances/inst_01abc/disk.qcow2",
		.seed = "/var/lib/bcd-data/instances/inst_01abc/seed.iso",
		.nvram = "/var/lib/bcd-data/instances/inst_01abc/nvram.fd",
		.console_log = "/var/lib/bcd-data/instances/inst_01abc/console.log",
		.nics = nic1,
		.n_nics = 1,
	};
}

static void test_minimal(void)
{
	struct domxml d = minimal();
	char why[160] = "", *xml = NULL;

	is_int(domxml_build(&d, &xml, why, sizeof(why)), 0, "minimal domain builds (%s)", why);
	if (xml)
		golden("domxml_minimal.xml", xml);
	ok(xml && strstr(xml, "<domain type='qemu'>"), "type qemu");
	ok(xml && !strstr(xml, "<cpu"), "no <cpu> under TCG without NUMA");
	free(xml);
}

static void test_full(void)
{
	static const uint32_t pins[] = {2, 3};
	static const struct domxml_volume vols[] = {
		{"/data/volumes/vol_1.img", "bcv-0001", false},
		{"/data/volumes/vol_2.img", "bcv-0002", true},
	};
	static const struct domxml_nic nics[] = {
		{"bct0123456789a", "52:54:00:12:34:56"},
		{"bct0123456789b", "52:54:00:ab:cd:ef"},
	};
	struct domxml d = minimal();
	char why[160] = "", *xml = NULL;

	d.type = "kvm";
	d.vcpus = 3;
	d.memory_mib = 2048;
	d.huge_pages = "2M";
	d.numa_node = 1;
	d.pinned = pins;
	d.n_pinned = 2;
	d.volumes = vols;
	d.n_volumes = 2;
	d.nics = nics;
	d.n_nics = 2;
	d.seed = NULL;
	d.console_log = "/data/a&b<c>'\"/console.log";
	is_int(domxml_build(&d, &xml, why, sizeof(why)), 0, "full domain builds (%s)", why);
	if (!xml)
		return;
	golden("domxml_full.xml", xml);
	ok(strstr(xml, "<vcpupin vcpu='2' cpuset='2'/>") != NULL, "vCPU 2 wraps onto pin 0");
	ok(strstr(xml, "<page size='2048' unit='KiB'/>") != NULL, "2M pages backing");
	ok(strstr(xml, "/data/a&amp;b&lt;c&gt;&apos;&quot;/console.log") != NULL, "path escaped");
	ok(strstr(xml, "<target dev='vdc' bus='virtio'/>") != NULL,
	   "volumes start at vdc even without a seed");
	ok(strstr(xml, "<serial>bcv-0002</serial>\n      <readonly/>") != NULL,
	   "read-only volume by serial");
	free(xml);
}

static void refused(struct domxml d, const char *what, const char *want_why)
{
	char why[160] = "", *xml = NULL;
	int e = domxml_build(&d, &xml, why, sizeof(why));

	is_int(e, -EINVAL, "refused: %s", what);
	ok(strstr(why, want_why) != NULL, "reason for %s: '%s'", what, why);
	ok(xml == NULL, "nothing built for %s", what);
	free(xml);
}

static void test_refusals(void)
{
	static const struct domxml_nic badmac[] = {{"bct0", "52:54:00:12:34"}};
	static const struct domxml_nic badtap[] = {{"bct0/../x", "52:54:00:12:34:56"}};
	static const struct domxml_nic longtap[] = {{"bct0123456789abcd", "52:54:00:12:34:56"}};
	static const struct domxml_volume badser[] = {{"/v", "bcv-\n", false}};
	struct domxml d;

	d = minimal(), d.name = "../etc";
	refused(d, "id with a slash", "instance id");
	d = minimal(), d.type = "xen";
	refused(d, "domain type xen", "domain type");
	d = minimal(), d.vcpus = 0;
	refused(d, "0 vcpus", "vcpus");
	d = minimal(), d.huge_pages = "4K";
	refused(d, "huge pages 4K", "huge_pages");
	d = minimal(), d.huge_pages = "1G", d.memory_mib = 1536;
	refused(d, "1.5 GiB on 1G pages", "multiple");
	d = minimal(), d.nics = badmac;
	refused(d, "short MAC", "MAC");
	d = minimal(), d.nics = badtap;
	refused(d, "tap with a slash", "tap");
	d = minimal(), d.nics = longtap;
	refused(d, "tap longer than IFNAMSIZ", "tap");
	d = minimal(), d.volumes = badser, d.n_volumes = 1;
	refused(d, "serial with a newline", "serial");
	d = minimal(), d.overlay = "relative/disk.qcow2";
	refused(d, "relative overlay path", "path");
	d = minimal(), d.n_volumes = DOMXML_MAX_DISKS, d.volumes = badser;
	refused(d, "too many volumes", "too many");
}

static void test_metadata(void)
{
	char node[64];

	is_int(domxml_metadata_node("<instance xmlns=\"" DOMXML_NS "\"><node>node_01xyz</node>"
				    "</instance>", node, sizeof(node)), 0, "metadata as libvirt returns it");
	is_str(node, "node_01xyz", "node id read back");
	is_int(domxml_metadata_node("<bc:instance xmlns:bc='x'><bc:node>node_2</bc:node>"
				    "</bc:instance>", node, sizeof(node)), 0, "prefixed form");
	is_str(node, "node_2", "prefixed node id");
	is_int(domxml_metadata_node("<instance/>", node, sizeof(node)), -ENOENT, "no node");
	is_int(domxml_metadata_node("<node></node>", node, sizeof(node)), -EINVAL, "empty node");
	is_int(domxml_metadata_node(NULL, node, sizeof(node)), -ENOENT, "no metadata");
}

/* The target dev of a disk found by serial, in the live XML libvirt gives
 * (attributes in its order, double quotes). */
static void test_disk_by_serial(void)
{
	const char *xml =
		"<domain type='kvm'><devices>\n"
		"    <disk type=\"file\" device=\"disk\">\n"
		"      <source file=\"/d/disk.qcow2\" index=\"3\"/>\n"
		"      <target dev=\"vda\" bus=\"virtio\"/>\n"
		"    </disk>\n"
		"    <disk type=\"file\" device=\"disk\">\n"
		"      <source file=\"/v/vol_a.raw\"/>\n"
		"      <target dev=\"vdc\" bus=\"virtio\"/>\n"
		"      <serial>bcv-aaaa</serial>\n"
		"    </disk>\n"
		"    <disk type='file' device='disk'>\n"
		"      <serial>bcv-bbbb</serial><target dev='vdd' bus='virtio'/>\n"
		"    </disk>\n"
		"</devices></domain>";
	char dev[DOMXML_DEV_MAX];

	is_int(domxml_disk_by_serial(xml, "bcv-aaaa", dev, sizeof(dev)), 0, "disk by serial");
	is_str(dev, "vdc", "its target dev (serial after target)");
	is_int(domxml_disk_by_serial(xml, "bcv-bbbb", dev, sizeof(dev)), 0, "single quotes");
	is_str(dev, "vdd", "its target dev (serial before target)");
	is_int(domxml_disk_by_serial(xml, "bcv-aaa", dev, sizeof(dev)), -ENOENT,
	       "a serial's prefix is not a match");
	is_int(domxml_disk_by_serial(xml, "bcv-cccc", dev, sizeof(dev)), -ENOENT, "no such serial");
	is_int(domxml_disk_by_serial("<disk ><serial>s</serial><target dev='../x'/></disk>", "s",
				     dev, sizeof(dev)), -EINVAL, "a dev that is not [a-z0-9]");
	is_int(domxml_disk_by_serial("<disk ><serial>s</serial>", "s", dev, sizeof(dev)), -EINVAL,
	       "an unclosed disk");
}

/* The identity rebind's hot-plugged elements and the MAC on a tap, in the
 * live XML libvirt gives (double quotes, more elements). */
static void test_rebind_elements(void)
{
	const char *live =
		"<domain><devices>\n"
		"    <interface type=\"ethernet\">\n"
		"      <mac address=\"52:54:00:aa:bb:01\"/>\n"
		"      <target dev=\"bctother0\" managed=\"no\"/>\n"
		"    </interface>\n"
		"    <interface type='ethernet'>\n"
		"      <mac address='52:54:00:aa:bb:02'/>\n"
		"      <target dev='bct123' managed='no'/>\n"
		"      <model type='virtio'/><alias name='net1'/>\n"
		"    </interface>\n"
		"</devices></domain>";
	char *el = NULL, mac[18];

	is_int(domxml_nic_element("52:54:00:12:34:56", "bct0123456789a", &el), 0, "a NIC element");
	is_str(el, "<interface type='ethernet'>\n  <mac address='52:54:00:12:34:56'/>\n"
		   "  <target dev='bct0123456789a' managed='no'/>\n  <model type='virtio'/>\n"
		   "</interface>\n", "... as domxml_build writes a NIC");
	free(el);
	el = NULL;
	is_int(domxml_nic_element("52:54:00:12:34", "bct0", &el), -EINVAL, "a short MAC: refused");
	is_int(domxml_nic_element("52:54:00:12:34:56", "bc/t", &el), -EINVAL, "a tap with '/': refused");
	ok(el == NULL, "... nothing made");
	is_int(domxml_rebind_disk_element("/d/inst_1/rebind.img", &el), 0, "the rebind disk");
	is_str(el, "<disk type='file' device='disk'>\n  <driver name='qemu' type='raw'/>\n"
		   "  <source file='/d/inst_1/rebind.img'/>\n  <target dev='vdzz' bus='virtio'/>\n"
		   "  <serial>bc-rebind</serial>\n</disk>\n", "... raw, virtio, serial bc-rebind");
	free(el);
	el = NULL;
	is_int(domxml_rebind_disk_element("rel/rebind.img", &el), -EINVAL, "a relative path: refused");
	is_int(domxml_mac_of_tap(live, "bct123", mac), 0, "the MAC on a tap");
	is_str(mac, "52:54:00:aa:bb:02", "... the second interface's");
	is_int(domxml_mac_of_tap(live, "bctother0", mac), 0, "double quotes");
	is_str(mac, "52:54:00:aa:bb:01", "... the first interface's");
	is_int(domxml_mac_of_tap(live, "bct12", mac), -ENOENT, "a tap's prefix is not a match");
	is_int(domxml_mac_of_tap("<interface ><target dev='t'/><mac address='zz'/></interface>", "t",
				 mac), -EINVAL, "a MAC that is not one");
	is_int(domxml_mac_of_tap("<interface ><target dev='t'/>", "t", mac), -EINVAL,
	       "an unclosed interface");
}

static void test_escape(void)
{
	char out[8];

	ok(domxml_escape("a<b", out, sizeof(out)) && strcmp(out, "a&lt;b") == 0, "escaped");
	ok(!domxml_escape("<<<<", out, sizeof(out)), "does not fit: refused, not cut");
}

int main(void)
{
	test_disk_by_serial();
	test_minimal();
	test_full();
	test_refusals();
	test_metadata();
	test_escape();
	test_rebind_elements();
	done_testing();
}
