/* fuzz_lvsave.c: the libvirt save image check and rewrite
 * (agent/runtime_libvirt_save.c) on arbitrary bytes, which is what stands
 * between a snapshot's memory section and libvirtd. The input is used
 * twice: as a whole save image file (lvsnap_save_check, then
 * lvsnap_save_rebind with a bcd-shaped definition), and split at its first
 * NUL into a saved XML and a new XML for lvsnap_save_bind_xml.
 *
 * Oracles: no crash, leak or sanitizer report; an accepted image's XML
 * starts with <domain and fits in the input; a rewritten image passes the
 * check again; a bound XML has an <os> and, with an <nvram> in it, a
 * <loader> in it (the libvirtd 9.0 crash's shape never passes). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/runtime.h"
#include "agent/runtime_libvirt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char new_xml[] =
	"<domain type='qemu'><name>inst_new</name><os firmware='efi'><type>hvm</type>"
	"<nvram>/var/lib/bcd-data/instances/inst_new/nvram.fd</nvram></os><devices/></domain>";

/* The bound XML's <os> element (the first <os> or <os ...>): with an
 * <nvram> in it, a <loader> in it too. */
static void check_bound(const char *x)
{
	const char *os = x, *end;

	while ((os = strstr(os, "<os")) && os[3] != '>' && os[3] != ' ')
		os += 3;
	if (!os || !(end = strstr(os, "</os>")))
		abort();
	const char *nv = strstr(os, "<nvram"), *ld = strstr(os, "<loader");
	if (nv && nv < end && !(ld && ld < end))
		abort();
}

static void as_file(const uint8_t *data, size_t size)
{
	char in[64], out[64], reason[RT_REASON_MAX];
	char *xml = NULL, *again = NULL;
	FILE *f;

	snprintf(in, sizeof(in), "/tmp/fuzz_lvsave.%d.in", (int)getpid());
	snprintf(out, sizeof(out), "/tmp/fuzz_lvsave.%d.out", (int)getpid());
	if (!(f = fopen(in, "wb")))
		return;
	if (size)
		fwrite(data, 1, size, f);
	fclose(f);
	if (lvsnap_save_check(in, &xml, reason) == 0) {
		if (strncmp(xml, "<domain", 7) != 0 && !strstr(xml, "<domain"))
			abort();
		if (strlen(xml) >= size)
			abort();
		if (lvsnap_save_rebind(in, out, new_xml, reason) == 0) {
			if (lvsnap_save_check(out, &again, reason) != 0)
				abort();
			check_bound(again);
			if (!strstr(again, "<name>inst_new</name>"))
				abort();
		}
	}
	free(xml);
	free(again);
	unlink(in);
	unlink(out);
}

static void as_strings(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 2), reason[RT_REASON_MAX];
	char *bound;

	if (!buf)
		return;
	memcpy(buf, data, size);
	buf[size] = buf[size + 1] = '\0';
	const char *saved = buf, *nx = buf + strlen(buf) + 1;
	if (nx > buf + size)
		nx = new_xml;
	if ((bound = lvsnap_save_bind_xml(saved, nx, reason)))
		check_bound(bound);
	free(bound);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_file(data, size);
	as_strings(data, size);
	return 0;
}
