/* test_agent_lvsave.c: libvirt's save image as a memory restore hands it
 * to libvirtd (agent/runtime_libvirt_save.c), against a real one:
 * tests/unit/golden/libvirt9_save.head is the start of a `virsh save` (as
 * bcd's capture calls it: virDomainSaveFlags) of a domain bcd's runtime
 * defined (<os firmware='efi'>), made by libvirt 9.0.0 (Debian 12) in a
 * qemu:///session daemon: its 92-byte header, its data (the live domain
 * XML, the save cookie, libvirt's zero padding), then the first 4 KiB of
 * QEMU's stream (the rewrite copies the stream without reading it).
 *
 * Proves: the rewritten header carries the new definition with the saved
 * <os> (the resolved firmware <loader> and NVRAM template, which libvirt's
 * restore path needs: with a definition's <os firmware='efi'> libvirtd 9.0
 * crashed) naming the new NVRAM file, the cookie and the stream byte for
 * byte; and that no damaged image or unsafe XML gets past the check. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/runtime.h"
#include "agent/runtime_libvirt_int.h"
#include "tap.h"
#include "util.h"

struct hdr {
	char magic[16];
	uint32_t version, data_len, was_running, compressed, cookie_offset, unused[14];
};

static char dir[] = "/tmp/bc-lvsave.XXXXXX";
static char *fixture;  /* the image's bytes */
static size_t fixture_len;
static struct hdr fh;

/* The definition bcd's runtime writes (tests/unit/golden/domxml_minimal.xml
 * shape), as libvirt gives it back for the new instance. */
static const char *new_xml =
	"<domain type='qemu'>\n  <name>inst_new</name>\n  <uuid>6a1b0b3e-0000-4000-8000-000000000001</uuid>\n"
	"  <os firmware='efi'>\n    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>\n"
	"    <firmware>\n      <feature enabled='no' name='enrolled-keys'/>\n"
	"      <feature enabled='no' name='secure-boot'/>\n    </firmware>\n"
	"    <nvram>/var/lib/bcd-data/instances/inst_new/nvram.fd</nvram>\n"
	"    <boot dev='hd'/>\n  </os>\n  <devices/>\n</domain>\n";

static char *path_in(const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

/* The fixture with len bytes at off replaced by bytes, written to name. */
static char *variant(const char *name, size_t off, const void *bytes, size_t len)
{
	char *p = path_in(name);
	_cleanup_free_ char *b = xmalloc(fixture_len);

	memcpy(b, fixture, fixture_len);
	if (bytes)
		memcpy(b + off, bytes, len);
	file_write_atomic(p, b, fixture_len, 0600);
	return p;
}

/* The text between open (included) and close (included) in s. */
static char *between(const char *s, const char *open, const char *close)
{
	const char *a = s ? strstr(s, open) : NULL, *b = a ? strstr(a, close) : NULL;

	return b ? xasprintf("%.*s", (int)(b + strlen(close) - a), a) : NULL;
}

static void test_real_image(void)
{
	_cleanup_free_ char *in = variant("real.save", 0, NULL, 0), *out = path_in("real.bound");
	_cleanup_free_ char *saved = NULL, *got = NULL, *loader = NULL, *tmpl = NULL;
	char reason[RT_REASON_MAX] = "";
	const char *xml;
	struct hdr h;
	size_t n = 0;

	is_int(lvsnap_save_check(in, &saved, reason), 0, "a real libvirt 9.0 save image: accepted");
	ok(saved && strncmp(saved, "<domain", 7) == 0 && strlen(saved) + 1 == fh.cookie_offset,
	   "... its domain XML read by bcd, up to the cookie");
	loader = between(saved, "<loader", "</loader>");
	tmpl = between(saved, "<nvram template=", ">");
	ok(loader && tmpl && !strstr(saved, "firmware='efi'"),
	   "... the saved XML holds the resolved firmware (%s)", loader ? loader : "none");
	is_int(lvsnap_save_rebind(in, out, new_xml, reason), 0, "rebound to a new definition");
	file_read_all(out, 1 << 20, &got, &n);
	memcpy(&h, got, sizeof(h));
	xml = got + sizeof(h);
	ok(memcmp(h.magic, "LibvirtQemudSave", 16) == 0 && h.version == 2 &&
	   h.was_running == fh.was_running && h.compressed == fh.compressed,
	   "... magic, version, was_running and format kept");
	ok(h.cookie_offset == strlen(xml) + 1 &&
	   h.data_len == h.cookie_offset + (fh.data_len - fh.cookie_offset),
	   "... cookie_offset and data_len follow the new XML (%u, %u)", h.cookie_offset, h.data_len);
	ok(strstr(xml, "<name>inst_new</name>") && strstr(xml, "6a1b0b3e-0000-4000-8000-000000000001") &&
	   strstr(xml, "<devices/>"), "... the new name, uuid and devices");
	ok(!strstr(xml, "firmware='efi'") && strstr(xml, loader),
	   "... with the saved <loader> in place of firmware autoselection");
	_cleanup_free_ char *nv = xasprintf("%s/var/lib/bcd-data/instances/inst_new/nvram.fd</nvram>", tmpl);
	ok(strstr(xml, nv) != NULL, "... and the saved NVRAM template naming the new NVRAM file");
	ok(!strstr(xml, "e2e_src1"), "... nothing of the source's paths");
	ok(memcmp(xml + h.cookie_offset, fixture + sizeof(fh) + fh.cookie_offset,
		  fh.data_len - fh.cookie_offset) == 0, "... the cookie and its padding byte for byte");
	ok(n - sizeof(h) - h.data_len == fixture_len - sizeof(fh) - fh.data_len &&
	   memcmp(got + sizeof(h) + h.data_len, fixture + sizeof(fh) + fh.data_len,
		  fixture_len - sizeof(fh) - fh.data_len) == 0,
	   "... and QEMU's stream byte for byte");
	free(saved);
	saved = NULL;
	is_int(lvsnap_save_check(out, &saved, reason), 0, "the rewritten image passes the check");
	ok(saved && strcmp(saved, xml) == 0, "... and reads back the XML written");
	/* rebinding the rebound image again gives the same XML */
	_cleanup_free_ char *out2 = path_in("real.bound2"), *got2 = NULL;
	size_t n2 = 0;
	is_int(lvsnap_save_rebind(out, out2, new_xml, reason), 0, "a rebound image rebinds again");
	file_read_all(out2, 1 << 20, &got2, &n2);
	ok(n2 == n && memcmp(got, got2, n) == 0, "... to the same bytes");
}

static void refused(const char *name, size_t off, const void *bytes, size_t len, const char *why)
{
	_cleanup_free_ char *in = variant(name, off, bytes, len), *out = path_in("x.bound");
	char reason[RT_REASON_MAX] = "";
	char *xml = NULL;

	is_int(lvsnap_save_check(in, &xml, reason), -EBADMSG, "%s: refused by the check", why);
	ok(strncmp(reason, "SnapshotRefused: ", 17) == 0 && xml == NULL, "... %s", reason);
	is_int(lvsnap_save_rebind(in, out, new_xml, reason), -EBADMSG, "... and by the rewrite");
	ok(access(out, F_OK) < 0, "... which writes nothing");
}

static void test_damaged(void)
{
	const size_t data = sizeof(fh), cookie = data + fh.cookie_offset;
	uint32_t v;
	_cleanup_free_ char *xs = xmalloc(fh.data_len);

	refused("part", 0, "LibvirtQemudPart", 16, "a partial save (libvirt's own marker)");
	refused("magic", 0, "LibvirtQemudSavf", 16, "another magic");
	v = 3;
	refused("version", offsetof(struct hdr, version), &v, 4, "version 3");
	v = 0x02000000;
	refused("swapped", offsetof(struct hdr, version), &v, 4, "the other byte order");
	v = 0;
	refused("len0", offsetof(struct hdr, data_len), &v, 4, "data_len 0");
	v = 0x7fffffff;
	refused("lenhuge", offsetof(struct hdr, data_len), &v, 4, "data_len 2 GiB");
	v = (uint32_t)fixture_len;
	refused("lenpast", offsetof(struct hdr, data_len), &v, 4, "data_len past the file's end");
	v = fh.data_len;
	refused("cookiepast", offsetof(struct hdr, cookie_offset), &v, 4, "cookie_offset at data_len");
	v = 7;
	refused("running", offsetof(struct hdr, was_running), &v, 4, "was_running 7");
	v = 9;
	refused("format", offsetof(struct hdr, compressed), &v, 4, "an unknown compression");
	refused("xmlnul", cookie - 1, "x", 1, "the XML not terminated before the cookie");
	memset(xs, 'x', fh.data_len);
	refused("cookienul", cookie, xs, fh.data_len - fh.cookie_offset, "the cookie not terminated");
	refused("notdomain", data, "<doma1n", 7, "XML that is not a domain");
	refused("stream", data + fh.data_len, "QEVX", 4, "no QEMU stream after the data");
	v = fh.cookie_offset - 10;
	refused("cookiemid", offsetof(struct hdr, cookie_offset), &v, 4,
		"a cookie_offset inside the XML (no NUL in the XML region)");

	_cleanup_free_ char *cut = path_in("cut");
	char reason[RT_REASON_MAX];
	file_write_atomic(cut, fixture, sizeof(fh) + 100, 0600);
	is_int(lvsnap_save_check(cut, NULL, reason), -EBADMSG, "an image cut inside its data: refused");
	file_write_atomic(cut, fixture, sizeof(fh) + fh.data_len, 0600);
	is_int(lvsnap_save_check(cut, NULL, reason), -EBADMSG, "an image cut before its stream: refused");
	file_write_atomic(cut, fixture, 50, 0600);
	is_int(lvsnap_save_check(cut, NULL, reason), -EBADMSG, "an image cut inside its header: refused");
	is_int(lvsnap_save_check("/nonexistent/x", NULL, reason), -ENOENT, "no file: -ENOENT");
}

static void bind_refused(const char *saved, const char *xml, const char *why)
{
	char reason[RT_REASON_MAX] = "";
	char *got = lvsnap_save_bind_xml(saved, xml, reason);

	ok(got == NULL && strncmp(reason, "SnapshotRefused: ", 17) == 0, "%s: refused (%s)", why,
	   reason);
	free(got);
}

static void test_bind_xml(void)
{
	const char *saved = fixture + sizeof(fh);
	char reason[RT_REASON_MAX] = "";
	_cleanup_free_ char *got = NULL, *no_nvram = NULL, *no_loader = NULL;
	const char *bios = "<domain><name>s</name><os><type>hvm</type><boot dev='hd'/></os></domain>";
	const char *newer = "<domain><name>n</name><metadata><osinfo/></metadata>"
			    "<os firmware='efi'><nvram>/n/nvram.fd</nvram></os></domain>";

	/* the crash's shape: the definition's own <os> where the loader must be */
	no_loader = xstrdup("<domain><os firmware='efi'><nvram>/s/nvram.fd</nvram></os></domain>");
	bind_refused(no_loader, new_xml, "a saved <nvram> without a <loader> path");
	bind_refused(saved, "<domain><name>n</name><devices/></domain>", "a new XML without <os>");
	bind_refused("<domain><name>s</name></domain>", new_xml, "a saved XML without <os>");
	no_nvram = xstrdup("<domain><name>n</name><os><type>hvm</type></os></domain>");
	bind_refused(saved, no_nvram, "a new XML without an NVRAM file for the saved NVRAM");
	bind_refused("<domain><os><loader>/l</loader><nvram template='/t'/></os></domain>", new_xml,
		     "a saved <nvram/> naming no file");
	/* found by fuzz_lvsave: an <nvram> whose "text" spans the <loader> */
	bind_refused("<domain><os><nvram><loader>/l</loader><nvram template='/t'>/s</nvram></os>"
		     "</domain>", new_xml, "a saved <nvram> holding other elements");
	got = lvsnap_save_bind_xml(bios, newer, reason);
	ok(got && strcmp(got, "<domain><name>n</name><metadata><osinfo/></metadata>"
			      "<os><type>hvm</type><boot dev='hd'/></os></domain>") == 0,
	   "a saved <os> with no NVRAM replaces the new one whole (<osinfo> is not <os>): %s",
	   got ? got : reason);
}

int main(void)
{
	const char *src = getenv("BC_SRC");
	_cleanup_free_ char *fx = xasprintf("%s/tests/unit/golden/libvirt9_save.head", src ? src : ".");

	if (!mkdtemp(dir))
		return 1;
	if (file_read_all(fx, 1 << 20, &fixture, &fixture_len) < 0 || fixture_len < sizeof(fh)) {
		ok(0, "fixture %s readable (run from the source tree or set BC_SRC)", fx);
		done_testing();
	}
	memcpy(&fh, fixture, sizeof(fh));
	test_real_image();
	test_damaged();
	test_bind_xml();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf %s", dir);
		if (system(cmd) != 0)
			return 1;
	}
	done_testing();
}
