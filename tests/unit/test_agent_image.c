/* test_agent_image.c: the image header checks (agent/image.c) on crafted
 * headers: qcow2 v2/v3, backing files, external data files (feature bit and
 * header extension), encryption, corrupt and unknown feature bits,
 * truncation, other formats, declared-format mismatches, and the overlay
 * rule. tests/e2e/runtime.t checks the same rules on files qemu-img made. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/image.h"
#include "tap.h"

#define HDR 4096

static void put32(unsigned char *b, size_t off, uint32_t v)
{
	b[off] = v >> 24, b[off + 1] = v >> 16, b[off + 2] = v >> 8, b[off + 3] = v;
}

static void put64(unsigned char *b, size_t off, uint64_t v)
{
	put32(b, off, (uint32_t)(v >> 32));
	put32(b, off + 4, (uint32_t)v);
}

/* A clean qcow2 v3 header as qemu-img writes it: 1 GiB, 64 KiB clusters,
 * header length 112, no extensions but the end marker. */
static void qcow2(unsigned char *b, uint32_t version)
{
	memset(b, 0, HDR);
	memcpy(b, "QFI\xfb", 4);
	put32(b, 4, version);
	put32(b, 20, 16);
	put64(b, 24, 1ull << 30);
	if (version == 3) {
		put32(b, 96, 4);
		put32(b, 100, 112);
	}
}

/* Header extension at off: type, then len bytes of data; returns the next
 * offset (8-aligned). */
static size_t ext(unsigned char *b, size_t off, uint32_t type, const char *data)
{
	size_t n = strlen(data);

	put32(b, off, type);
	put32(b, off + 4, (uint32_t)n);
	memcpy(b + off + 8, data, n);
	return off + 8 + ((n + 7) & ~(size_t)7);
}

static void backing(unsigned char *b, const char *name, const char *fmt)
{
	size_t off = ext(b, 112, 0xe2792aca, fmt);

	put32(b, off, 0);
	memcpy(b + 512, name, strlen(name));
	put64(b, 8, 512);
	put32(b, 16, (uint32_t)strlen(name));
}

static void check_base(const unsigned char *b, size_t len, const char *decl, int want,
		       const char *want_why, const char *what)
{
	struct image_info info;
	char why[IMAGE_REASON_MAX] = "";
	int e = image_check_base(b, len, decl, &info, why, sizeof(why));

	is_int(e, want, "%s", what);
	if (want_why)
		ok(strstr(why, want_why) != NULL, "%s: reason '%s'", what, why);
}

static void test_clean(void)
{
	unsigned char b[HDR];
	struct image_info info;
	char why[IMAGE_REASON_MAX];

	qcow2(b, 3);
	is_int(image_check_base(b, HDR, "qcow2", &info, why, sizeof(why)), 0, "clean qcow2 v3");
	is_int(info.format, IMAGE_QCOW2, "format qcow2");
	ok(info.virtual_size == 1ull << 30, "virtual size from the header");
	qcow2(b, 2);
	check_base(b, HDR, "", 0, NULL, "clean qcow2 v2, format not declared");
	memset(b, 0, HDR);
	check_base(b, HDR, "raw", 0, NULL, "raw (zeros)");
	check_base(b, 10, "raw", 0, NULL, "raw shorter than a header");
	memcpy(b, "\xeb\x63\x90", 3);  /* an MBR boot sector */
	is_int(image_check_base(b, HDR, NULL, &info, why, sizeof(why)), 0, "MBR disk is raw");
	is_int(info.format, IMAGE_RAW, "format raw");
}

static void test_refused(void)
{
	unsigned char b[HDR];
	struct image_info info;
	char why[IMAGE_REASON_MAX];

	qcow2(b, 3);
	backing(b, "/etc/shadow", "raw");
	check_base(b, HDR, "qcow2", -EPERM, "backing file", "qcow2 naming a backing file");
	is_int(image_probe(b, HDR, &info, why, sizeof(why)), 0, "probe reads it");
	is_str(info.backing, "/etc/shadow", "backing name read");
	is_str(info.backing_format, "raw", "backing format read");
	qcow2(b, 3);
	put64(b, 8, 65536);  /* a backing name past what is read: still refused */
	put32(b, 16, 10);
	check_base(b, HDR, "qcow2", -EPERM, "backing file", "backing name out of reach");
	qcow2(b, 3);
	put64(b, 72, 1ull << 2);
	check_base(b, HDR, "qcow2", -EPERM, "data file", "incompatible bit 2 (data file)");
	qcow2(b, 3);
	put32(b, ext(b, 112, 0x44415441, "/dev/sda"), 0);
	check_base(b, HDR, "qcow2", -EPERM, "data file", "data-file header extension");
	qcow2(b, 3);
	put32(b, 32, 1);
	check_base(b, HDR, "qcow2", -EINVAL, "encrypted", "encrypted (AES)");
	qcow2(b, 3);
	put64(b, 72, 1ull << 1);
	check_base(b, HDR, "qcow2", -EINVAL, "corrupt", "marked corrupt");
	qcow2(b, 3);
	put64(b, 72, 1ull << 9);
	check_base(b, HDR, "qcow2", -EINVAL, "unknown", "unknown incompatible feature");
	qcow2(b, 3);
	check_base(b, 80, "qcow2", -EINVAL, "truncated", "v3 header cut at 80 bytes");
	qcow2(b, 3);
	put32(b, 112, 0x12345678);
	put32(b, 116, 100000);
	check_base(b, HDR, "qcow2", -EINVAL, "extension", "extension longer than the header");
	qcow2(b, 3);
	put32(b, 4, 4);
	check_base(b, HDR, "qcow2", -EINVAL, "version", "qcow2 version 4");
	qcow2(b, 3);
	check_base(b, HDR, "raw", -EPERM, "declared raw", "qcow2 declared raw");
	memset(b, 0, HDR);
	memcpy(b, "KDMV", 4);
	check_base(b, HDR, "", -EPROTONOSUPPORT, "vmdk", "VMDK");
	memset(b, 0, HDR);
	memcpy(b, "QED", 4);
	check_base(b, HDR, "raw", -EPROTONOSUPPORT, "qed", "QED declared raw");
	memset(b, 0, HDR);
	memcpy(b + 0x40, "\x7f\x10\xda\xbe", 4);
	check_base(b, HDR, "raw", -EPROTONOSUPPORT, "vdi", "VDI");
	memset(b, 0, HDR);
	memcpy(b, "LUKS\xba\xbe", 6);
	check_base(b, HDR, "raw", -EPROTONOSUPPORT, "luks", "LUKS");
}

static void test_overlay(void)
{
	unsigned char b[HDR];
	char why[IMAGE_REASON_MAX] = "";
	const char *img = "/data/images/0123";

	qcow2(b, 3);
	backing(b, img, "qcow2");
	is_int(image_check_overlay(b, HDR, img, "qcow2", why, sizeof(why)), 0, "good overlay");
	is_int(image_check_overlay(b, HDR, "/data/images/other", "qcow2", why, sizeof(why)), -EPERM,
	       "overlay backed by another file");
	is_int(image_check_overlay(b, HDR, img, "raw", why, sizeof(why)), -EPERM,
	       "overlay with another backing format");
	qcow2(b, 3);
	backing(b, img, "");
	is_int(image_check_overlay(b, HDR, img, "qcow2", why, sizeof(why)), -EPERM,
	       "overlay without backing format");
	qcow2(b, 3);
	is_int(image_check_overlay(b, HDR, img, "qcow2", why, sizeof(why)), -EPERM,
	       "overlay without backing");
	qcow2(b, 3);
	backing(b, img, "qcow2");
	put64(b, 72, 1ull << 2);
	is_int(image_check_overlay(b, HDR, img, "qcow2", why, sizeof(why)), -EPERM,
	       "overlay with a data file");
	memset(b, 0, HDR);
	is_int(image_check_overlay(b, HDR, img, "qcow2", why, sizeof(why)), -EPERM, "raw overlay");
}

static void test_digest_strings(void)
{
	ok(image_sha256_valid("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
	   "64 hex digits");
	ok(!image_sha256_valid("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"),
	   "upper case refused");
	ok(!image_sha256_valid("../../etc/passwd"), "path refused");
	ok(!image_sha256_valid(""), "empty refused");
}

static void test_fetch_refusals(void)
{
	struct image_fetch f = {.images_dir = "/nonexistent", .max_bytes = 1 << 20};
	char reason[IMAGE_REASON_MAX] = "";
	char *path = NULL;
	const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

	is_int(image_ensure(&f, "http://127.0.0.1/x", sha, &path, reason), -EINVAL, "http refused");
	ok(strstr(reason, "ImageRefused: only https") != NULL, "reason: %s", reason);
	is_int(image_ensure(&f, "file:///etc/passwd", sha, &path, reason), -EINVAL, "file: refused");
	is_int(image_ensure(&f, "https://x/y", "../x", &path, reason), -EINVAL, "bad digest refused");
	ok(strstr(reason, "sha256") != NULL, "reason: %s", reason);
	ok(path == NULL, "no path returned");
}

int main(void)
{
	test_clean();
	test_refused();
	test_overlay();
	test_digest_strings();
	test_fetch_refusals();
	done_testing();
}
