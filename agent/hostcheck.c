/* hostcheck.c: `bcd --check-host` (hostcheck.h). */
#include "hostcheck.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define CAPS_DIR "/var/cache/libvirt/qemu/capabilities"
#define QEMU_CONF "/etc/libvirt/qemu.conf"
#define NATIVE_EMULATOR "qemu-system-x86_64"
#define SLOW_CAPS_MS 2000

/* ------------------------------------------------------------- pure */

/* The quoted value of `key = "value"` on line (leading blanks allowed). */
static bool conf_value(const char *line, const char *key, char *out, size_t len)
{
	size_t k = strlen(key);
	const char *p = line, *q;

	while (*p == ' ' || *p == '\t')
		p++;
	if (strncmp(p, key, k) != 0)
		return false;
	p += k;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '=')
		return false;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '"' || !(q = strchr(p, '"')))
		return false;
	snprintf(out, len, "%.*s", (int)(q - p), p);
	return true;
}

void hc_qemu_user(const char *conf, char *user, size_t user_len, char *group, size_t group_len)
{
	const char *p = conf;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		char line[512];
		snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) - 1 ? n : sizeof(line) - 1),
			 p);
		if (!conf_value(line, "user", user, user_len))
			conf_value(line, "group", group, group_len);
		p = nl ? nl + 1 : NULL;
	}
}

bool hc_rw_for(mode_t mode, uid_t uid, gid_t gid, uid_t quid, const gid_t *groups, size_t n)
{
	bool in_group = false;

	if (quid == uid)
		return (mode & 0600) == 0600;
	for (size_t i = 0; i < n && !in_group; i++)
		in_group = groups[i] == gid;
	if (in_group)
		return (mode & 0060) == 0060;
	return (mode & 0006) == 0006;
}

int hc_cache_kvm(const char *xml)
{
	if (!xml || !strstr(xml, "<qemuCaps>"))
		return -1;
	return strstr(xml, "<flag name='kvm'/>") != NULL;
}

const char *hc_caps_mismatch(bool kvm_dev, bool kvm_rw, int cache_kvm, const char **fix)
{
	*fix = NULL;
	if (cache_kvm < 0)
		return NULL;
	if (cache_kvm == 1 && !kvm_rw) {
		*fix = kvm_dev ? "make /dev/kvm read-writable by QEMU's user: chgrp kvm /dev/kvm && "
				 "chmod 0660 /dev/kvm (udev's rule on hosts that run udev; the user is "
				 "in group kvm), or remove /dev/kvm if this host must not use KVM; then "
				 "restart libvirtd"
			       : "restart libvirtd (its cache predates the removal of /dev/kvm)";
		return kvm_dev ? "libvirt's QEMU capabilities record KVM (libvirt probes QEMU with "
				 "CAP_DAC_OVERRIDE, so the probe opened /dev/kvm) but /dev/kvm is not "
				 "read-writable by QEMU's user: libvirt finds its cache invalid and "
				 "re-probes QEMU on every call (each define waits for several probes)"
			       : "libvirt's QEMU capabilities record KVM but there is no /dev/kvm";
	}
	if (cache_kvm == 0 && kvm_rw) {
		*fix = "KVM does not work for QEMU here (a software KVM, a missing module): remove "
		       "QEMU's user's access to /dev/kvm (chmod 0600 /dev/kvm, or remove it) so that "
		       "libvirt stops expecting it; then restart libvirtd";
		return "/dev/kvm is read-writable by QEMU's user but libvirt's probe of QEMU found "
		       "no KVM: libvirt finds its cache invalid and re-probes QEMU on every call";
	}
	return NULL;
}

/* ----------------------------------------------------------- the host */

struct kvm_view {
	bool dev;        /* /dev/kvm is a character device */
	bool rw;         /* read-writable by QEMU's user */
	bool hw;         /* kvm_intel or kvm_amd loaded */
	mode_t mode;
	char user[64], group[64];
};

static void kvm_look(struct kvm_view *k, FILE *out);
static int cache_entry(struct timespec *mtime);

const char *hostcheck_caps(const char **fix)
{
	struct kvm_view k = {0};
	struct timespec m;
	FILE *null = fopen("/dev/null", "w");
	const char *why;

	*fix = NULL;
	if (!null)
		return NULL;
	kvm_look(&k, null);
	fclose(null);
	why = hc_caps_mismatch(k.dev, k.rw, cache_entry(&m), fix);
	return why;
}

static void kvm_look(struct kvm_view *k, FILE *out)
{
	_cleanup_free_ char *conf = NULL;
	struct passwd *pw;
	struct stat st;
	gid_t groups[64];
	int n = ARRAY_SIZE(groups);

	snprintf(k->user, sizeof(k->user), "libvirt-qemu");
	snprintf(k->group, sizeof(k->group), "libvirt-qemu");
	if (file_read_all(QEMU_CONF, 1 << 20, &conf, NULL) == 0)
		hc_qemu_user(conf, k->user, sizeof(k->user), k->group, sizeof(k->group));
	k->hw = access("/sys/module/kvm_intel", F_OK) == 0 || access("/sys/module/kvm_amd", F_OK) == 0;
	if (stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode)) {
		fprintf(out, "ok   /dev/kvm: none: libvirt and bcd use TCG (domain_type auto: qemu)\n");
		return;
	}
	k->dev = true;
	k->mode = st.st_mode & 07777;
	pw = getpwnam(k->user);
	if (!pw) {
		fprintf(out, "WARN /dev/kvm: QEMU's user %s (qemu.conf) is unknown here\n", k->user);
		return;
	}
	if (getgrouplist(k->user, pw->pw_gid, groups, &n) < 0)
		n = 0;
	k->rw = pw->pw_uid == 0 ||
		hc_rw_for(st.st_mode, st.st_uid, st.st_gid, pw->pw_uid, groups, (size_t)n);
	fprintf(out, "%s /dev/kvm: mode %04o uid %u gid %u: %s by QEMU's user %s; %s\n",
		k->rw ? "ok  " : "WARN", (unsigned)k->mode, (unsigned)st.st_uid, (unsigned)st.st_gid,
		k->rw ? "read-writable" : "NOT read-writable", k->user,
		k->hw ? "hardware virtualisation (kvm_intel/kvm_amd)"
		      : "no kvm_intel/kvm_amd (a software KVM: bcd uses TCG)");
}

/* The native emulator's capabilities entry: hc_cache_kvm of it, its
 * mtime in *mtime (0 if none). */
static int cache_entry(struct timespec *mtime)
{
	DIR *d = opendir(CAPS_DIR);
	struct dirent *de;
	int kvm = -1;

	*mtime = (struct timespec){0};
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL, *xml = NULL;
		struct stat st;
		size_t n = strlen(de->d_name);
		if (n < 5 || strcmp(de->d_name + n - 4, ".xml") != 0)
			continue;
		path = xasprintf("%s/%s", CAPS_DIR, de->d_name);
		if (file_read_all(path, 8 << 20, &xml, NULL) < 0 || stat(path, &st) < 0)
			continue;
		if (!strstr(xml, "/" NATIVE_EMULATOR "</emulator>"))
			continue;
		kvm = hc_cache_kvm(xml);
		*mtime = st.st_mtim;
		break;
	}
	closedir(d);
	return kvm;
}

static void quiet(void *data, virErrorPtr e)
{
	(void)data;
	(void)e;
}

/* One domain capabilities lookup (what every define does, several
 * times); its time in ms, or -1. */
static int64_t caps_call(virConnectPtr c)
{
	int64_t t0 = mono_ms();
	char *x = virConnectGetDomainCapabilities(c, NULL, "x86_64", "q35", "qemu", 0);

	if (!x)
		return -1;
	free(x);
	return mono_ms() - t0;
}

int hostcheck_run(const char *uri, FILE *out)
{
	const char *u = uri && *uri ? uri : "qemu:///system", *why, *fix;
	struct timespec m0, m1, m2;
	struct kvm_view k = {0};
	int64_t t1, t2;
	virConnectPtr c;
	int failed = 0, kvm;

	kvm_look(&k, out);
	virSetErrorFunc(NULL, quiet);
	c = virConnectOpen(u);
	if (!c) {
		virErrorPtr e = virGetLastError();
		fprintf(out, "FAIL libvirt %s: cannot connect: %s\n", u,
			e && e->message ? e->message : "unknown error");
		return 1;
	}
	fprintf(out, "ok   libvirt %s: connected\n", u);
	cache_entry(&m0);
	t1 = caps_call(c);
	cache_entry(&m1);
	t2 = caps_call(c);
	kvm = cache_entry(&m2);
	virConnectClose(c);
	if (t1 < 0 || t2 < 0) {
		fprintf(out, "FAIL libvirt: domain capabilities (x86_64, q35, qemu) refused\n");
		return 1;
	}
	if (t2 > SLOW_CAPS_MS || m1.tv_sec != m2.tv_sec || m1.tv_nsec != m2.tv_nsec) {
		fprintf(out, "FAIL libvirt: QEMU capabilities are re-probed on every call: lookups "
			     "took %" PRId64 " ms and %" PRId64 " ms, %s/*.xml %s\n",
			t1, t2, CAPS_DIR,
			m1.tv_sec != m2.tv_sec || m1.tv_nsec != m2.tv_nsec ? "rewritten by the second"
									    : "kept");
		failed = 1;
	} else {
		fprintf(out, "ok   libvirt: QEMU capabilities cached: lookups took %" PRId64
			     " ms then %" PRId64 " ms%s\n",
			t1, t2, m0.tv_sec != m1.tv_sec || m0.tv_nsec != m1.tv_nsec ? " (first probed)" : "");
	}
	why = hc_caps_mismatch(k.dev, k.rw, kvm, &fix);
	if (why) {
		fprintf(out, "FAIL libvirt: %s\n     fix: %s\n", why, fix);
		failed = 1;
	} else if (failed) {
		fprintf(out, "     cause not recognised: see libvirtd's log with log_filters=\"1:qemu.qemu_capabilities\" "
			     "(\"Outdated capabilities\" lines name it)\n");
	}
	return failed;
}
