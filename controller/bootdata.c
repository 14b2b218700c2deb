/* bootdata.c: render an instance's user data (see bootdata.h).
 *
 * The platform's part is YAML we write ourselves: every value we did not
 * write as a literal goes out as a double-quoted scalar with YAML escapes,
 * so no input can end the scalar or add a key. The caller's part is
 * carried as it is, typed by its first line as cloud-init types it. Every
 * cloud-config rendered here passes `cloud-init schema`
 * (tests/unit/test_ctl_bootdata.c runs the real command). */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootdata.h"
#include "db.h"
#include "guest_ready.h"
#include "sealed.h"
#include "sshcert.h"
#include "secrets.h"
#include "util.h"
#include "validate.h"

#define B64_LINE 76   /* MIME: at most 76 characters a line */

/* First lines cloud-init recognises, and the MIME type of each part. */
static const struct {
	const char *start;
	bool prefix;      /* the line starts with it (else: equals it) */
	const char *type;
} user_types[] = {
	{"#!", true, "text/x-shellscript"},
	{"#cloud-config", false, "text/cloud-config"},
	{"#cloud-config-archive", false, "text/cloud-config-archive"},
	{"#cloud-config-jsonp", false, "text/cloud-config-jsonp"},
	{"#include", false, "text/x-include-url"},
	{"#include-once", false, "text/x-include-once-url"},
	{"#cloud-boothook", false, "text/cloud-boothook"},
	{"#part-handler", false, "text/part-handler"},
	{"## template: jinja", false, "text/jinja2"},
};

/* ------------------------------------------------------------- UTF-8 */

/* Decode the UTF-8 sequence at p (n bytes left): its length, or 0 when it
 * is invalid (overlong, surrogate, above U+10FFFF, truncated). */
static size_t utf8_next(const unsigned char *p, size_t n, uint32_t *ret_cp)
{
	size_t len;
	uint32_t cp;

	if (p[0] < 0x80) {
		*ret_cp = p[0];
		return 1;
	}
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	*ret_cp = cp;
	return len;
}

static bool utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	uint32_t cp;

	while (n > 0) {
		size_t k = utf8_next(p, n, &cp);
		if (k == 0)
			return false;
		p += k;
		n -= k;
	}
	return true;
}

static bool is_ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80 || s[i] == '\r' || s[i] == '\0')
			return false;
	return true;
}

/* ------------------------------------------------------------- typing */

const char *bootdata_user_type(const char *user_data)
{
	size_t len = strcspn(user_data, "\n");

	while (len > 0 && strchr(" \t\r", user_data[len - 1]))
		len--;
	for (size_t i = 0; i < ARRAY_SIZE(user_types); i++) {
		size_t k = strlen(user_types[i].start);
		if (user_types[i].prefix ? len >= k && strncmp(user_data, user_types[i].start, k) == 0
					 : len == k && strncmp(user_data, user_types[i].start, k) == 0)
			return user_types[i].type;
	}
	return NULL;
}

static int refuse_user(bc_error *err, const char *reason, const char *msg)
{
	bc_error_set(err, BC_INVALID_INPUT, "%s", msg);
	bc_error_detail(err, "field", "userData");
	return bc_error_detail(err, "reason", "%s", reason);
}

int bootdata_check_user(const char *user_data, bc_error *err)
{
	if (!user_data || !*user_data)
		return 0;
	if (strlen(user_data) > BOOTDATA_USER_MAX)
		return refuse_user(err, "user-data-too-large",
				   "userData is larger than 65536 bytes");
	if (!utf8_valid(user_data))
		return refuse_user(err, "user-data-not-utf8", "userData is not UTF-8 text");
	if (!bootdata_user_type(user_data))
		return refuse_user(err, "user-data-type",
				   "userData must start with a line cloud-init knows: #cloud-config, "
				   "#!, #include, #include-once, #cloud-boothook, #part-handler, "
				   "#cloud-config-archive, #cloud-config-jsonp or ## template: jinja");
	return 0;
}

/* ------------------------------------------------------- cloud-config */

/* A YAML double-quoted scalar: escapes for '"', '\\' and every character
 * YAML does not allow raw (C0, DEL, C1, line and paragraph separators,
 * BOM, non-characters). -EINVAL if s is not UTF-8. */
static int yq(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	uint32_t cp;

	fputc('"', f);
	while (n > 0) {
		size_t k = utf8_next(p, n, &cp);
		if (k == 0)
			return -EINVAL;
		if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (char)cp);
		else if (cp == '\n')
			fputs("\\n", f);
		else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
			 cp == 0xfeff || cp == 0xfffe || cp == 0xffff)
			fprintf(f, "\\u%04x", (unsigned)cp);
		else
			fwrite(p, 1, k, f);
		p += k;
		n -= k;
	}
	fputc('"', f);
	return 0;
}

/* The hostname: the instance id as an RFC 1123 label ('_' becomes '-'). */
static void hostname_of(const char *id, char *out, size_t len)
{
	size_t i;

	for (i = 0; id[i] && i + 1 < len && i < 63; i++)
		out[i] = id[i] == '_' ? '-' : id[i];
	out[i] = '\0';
}

static int write_file_entry(FILE *f, const char *path, const char *perm, const char *content)
{
	fprintf(f, "  - path: %s\n    owner: \"root:root\"\n    permissions: \"%s\"\n"
		"    content: ", path, perm);
	if (yq(f, content) < 0)
		return -EINVAL;
	fputc('\n', f);
	return 0;
}

/* The sandbox SSH CA's account (an entry of users:). */
static void ssh_ca_user(FILE *f, const struct bootdata_in *in)
{
	fprintf(f, "  - name: \"%s\"\n    lock_passwd: true\n    shell: /bin/bash\n",
		in->ssh_ca->account);
}

/* The files sshd needs to trust the sandbox SSH CA (entries of write_files:)
 * and, with certifyHostKey, to present its certified host key. */
static int ssh_ca_files(FILE *f, const struct bootdata_in *in)
{
	const struct bootdata_ssh_ca *ca = in->ssh_ca;
	_cleanup_free_ char *key = xasprintf("%s\n", ca->ca_public_key);
	_cleanup_free_ char *principal = xasprintf("%s@%s\n", ca->account, in->instance_id);
	_cleanup_free_ char *ppath = xasprintf("/etc/ssh/bc_sandbox_principals/%s", ca->account);
	_cleanup_free_ char *dropin = xasprintf(
		"TrustedUserCAKeys /etc/ssh/bc_sandbox_ca.pub\n"
		"AuthorizedPrincipalsFile /etc/ssh/bc_sandbox_principals/%%u\n%s",
		ca->host_key ? "HostKey " BOOTDATA_HOST_KEY_PATH "\n"
			       "HostCertificate " BOOTDATA_HOST_CERT_PATH "\n" : "");
	int r;

	if ((r = write_file_entry(f, "/etc/ssh/bc_sandbox_ca.pub", "0644", key)) < 0 ||
	    (r = write_file_entry(f, ppath, "0644", principal)) < 0)
		return r;
	if (ca->host_key &&
	    ((r = write_file_entry(f, BOOTDATA_HOST_KEY_PATH, "0600", ca->host_key)) < 0 ||
	     (r = write_file_entry(f, BOOTDATA_HOST_CERT_PATH, "0644", ca->host_cert)) < 0))
		return r;
	if ((r = write_file_entry(f, BOOTDATA_DROP_IN_PATH, "0644", dropin)) < 0 ||
	    (r = write_file_entry(f, BOOTDATA_REBIND_RULE_PATH, "0644", bootdata_rebind_rule)) < 0 ||
	    (r = write_file_entry(f, BOOTDATA_REBIND_SERVICE_PATH, "0644",
				  bootdata_rebind_service)) < 0)
		return r;
	return write_file_entry(f, BOOTDATA_REBIND_SCRIPT_PATH, "0755", bootdata_rebind_script);
}

/* /etc/sandbox/env as a write_files entry: base64 (encoding: b64), so
 * every byte of every value reaches the file as it is, whatever YAML
 * allows in a scalar. The rendered text is wiped once encoded. */
static int env_file(FILE *f, const struct bootdata_in *in)
{
	_cleanup_free_ char *text = NULL, *b64 = NULL;
	size_t len = 0;
	int r;

	if ((r = bootdata_env_render(in->env, in->n_env, &text, &len)) < 0)
		return r;
	b64 = xmalloc(4 * ((len + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)text, (int)len);
	fprintf(f, "  - path: %s\n    owner: \"root:root\"\n    permissions: \"0600\"\n"
		"    encoding: b64\n    content: %s\n", BOOTDATA_ENV_PATH, b64);
	OPENSSL_cleanse(text, len);
	OPENSSL_cleanse(b64, strlen(b64));
	return 0;
}

/* The guest-up signal (bash only, no tool the smallest cloud image lacks):
 * the pool's gateway as rendered (the guest may have no default route: a
 * Debian guest without net-tools drops the network config's route), else
 * the IPv4 default gateway from /proc/net/route, then a POST over bash's
 * /dev/tcp, every 2 s for at most 2 min while bcd answers nothing final
 * (425: bcd has not seen the instance run yet; 503: busy; no answer). */
static const char READY_SCRIPT[] =
	"#!/bin/bash\n"
	"# bc: tell the host (bcd, on the default gateway) that this guest is up.\n"
	"# Run once per boot by " BOOTDATA_READY_UNIT ", after cloud-init's final stage.\n"
	"id=%s port=%d pool_gateway=%s\n"
	"gateway() {\n"
	"\tlocal ifc dst gw flags rest\n"
	"\tif [ -n \"$pool_gateway\" ]; then\n"
	"\t\tprintf %%s \"$pool_gateway\"\n"
	"\t\treturn 0\n"
	"\tfi\n"
	"\twhile read -r ifc dst gw flags rest; do\n"
	"\t\tif [ \"$dst\" = 00000000 ] && [ $((0x$flags & 2)) -ne 0 ]; then\n"
	"\t\t\tprintf '%%d.%%d.%%d.%%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2}\n"
	"\t\t\treturn 0\n"
	"\t\tfi\n"
	"\tdone </proc/net/route\n"
	"\treturn 1\n"
	"}\n"
	"for try in $(seq 60); do\n"
	"\tif gw=$(gateway) && exec 3<>\"/dev/tcp/$gw/$port\"; then\n"
	"\t\tprintf 'POST %s%%s HTTP/1.1\\r\\nHost: %%s:%%s\\r\\nContent-Length: 0\\r\\n"
	"Connection: close\\r\\n\\r\\n' \"$id\" \"$gw\" \"$port\" >&3\n"
	"\t\tcode=\n"
	"\t\tread -r -t 5 proto code rest <&3\n"
	"\t\texec 3<&-\n"
	"\t\tcase $code in 204|400|403|409) echo \"bc: guest-up signal: $code\"; exit 0;; esac\n"
	"\tfi 2>/dev/null\n"
	"\tsleep 2\n"
	"done\n"
	"echo 'bc: guest-up signal: no answer from the host' >&2\n"
	"exit 1\n";

static const char READY_SERVICE[] =
	"[Unit]\n"
	"Description=bc: tell the host this guest is up\n"
	"After=cloud-final.service ssh.service sshd.service network-online.target\n"
	"\n"
	"[Service]\n"
	"Type=oneshot\n"
	"ExecStart=/usr/local/lib/bc/guest-ready\n"
	"\n"
	"[Install]\n"
	"WantedBy=multi-user.target\n";

/* After a pause the guest's clock is behind by the pause (its clocksource
 * stood still); the RTC follows the host's clock (QEMU's default RTC
 * clock, domxml.c's <clock offset='utc'/>). Every 2 s, with bash builtins
 * only (no process while in step), the RTC's seconds against the clock's:
 * stepped when they differ by 2 s or more (the RTC counts whole seconds). */
static const char CLOCK_SCRIPT[] =
	"#!/bin/bash\n"
	"# bc: step the clock to the RTC after a pause (" BOOTDATA_CLOCK_UNIT ").\n"
	"rtc=/sys/class/rtc/rtc0/since_epoch\n"
	"[ -r $rtc ] || exit 0\n"
	"while sleep 2; do\n"
	"\tread -r r <$rtc || continue\n"
	"\tprintf -v now '%(%s)T' -1\n"
	"\tif [ $((r - now)) -ge 2 ] || [ $((now - r)) -ge 2 ]; then\n"
	"\t\tdate -s \"@$r\" >/dev/null && echo \"bc: clock stepped by $((r - now)) s to the RTC\"\n"
	"\tfi\n"
	"done\n";

static const char CLOCK_SERVICE[] =
	"[Unit]\n"
	"Description=bc: step the clock to the RTC after a pause\n"
	"\n"
	"[Service]\n"
	"ExecStart=/usr/local/lib/bc/rtc-clock\n"
	"Restart=on-failure\n"
	"RestartSec=5\n"
	"\n"
	"[Install]\n"
	"WantedBy=multi-user.target\n";

static bool script_id_ok(const char *id)
{
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '-'))
			return false;
	return *id != '\0';
}

/* A dotted-quad IPv4 address (or ""), safe to put into a script. */
static bool ipv4_text_ok(const char *s)
{
	struct in_addr a;

	return !*s || (strlen(s) <= 15 && inet_pton(AF_INET, s, &a) == 1);
}

/* The guest-up signal's and the clock's scripts and units (entries of
 * write_files:). */
static int ready_files(FILE *f, const struct bootdata_in *in)
{
	_cleanup_free_ char *script = xasprintf(READY_SCRIPT, in->instance_id, BC_GUEST_READY_PORT,
						in->ready_gateway ? in->ready_gateway : "",
						BC_GUEST_READY_PATH);
	int r;

	if ((r = write_file_entry(f, "/usr/local/lib/bc/guest-ready", "0755", script)) < 0 ||
	    (r = write_file_entry(f, "/etc/systemd/system/" BOOTDATA_READY_UNIT, "0644",
				  READY_SERVICE)) < 0 ||
	    (r = write_file_entry(f, "/usr/local/lib/bc/rtc-clock", "0755", CLOCK_SCRIPT)) < 0)
		return r;
	return write_file_entry(f, "/etc/systemd/system/" BOOTDATA_CLOCK_UNIT, "0644",
				CLOCK_SERVICE);
}

bool bootdata_mount_path_ok(const char *path)
{
	size_t n = strlen(path);
	const char *seg = path;

	if (n < 2 || n > BOOTDATA_MOUNT_PATH_MAX || path[0] != '/' || path[n - 1] == '/' ||
	    strspn(path, "/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return false;
	while (seg) {
		size_t len;
		seg++;
		len = strchr(seg, '/') ? (size_t)(strchr(seg, '/') - seg) : strlen(seg);
		if (len == 0 || (len == 1 && seg[0] == '.') ||
		    (len == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		seg = strchr(seg, '/');
	}
	return true;
}

static bool serial_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= 20 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					  "0123456789-") == n;
}

#define VOLUME_DEV "/dev/disk/by-id/virtio-"

/* Attached volumes: bootcmd formats a writable one only when blkid -p
 * says there is nothing on it (exit 2; any other failure, a busybox blkid
 * without -p included, leaves it alone), every boot, before cc_mounts;
 * mounts adds each by its serial's link (nofail: a missing volume does not
 * stop the boot; ro,noload: a journal needing recovery cannot be replayed
 * on a read-only disk). fs_setup is not used: with partition: none it
 * formats without looking at what is there. */
static void volume_boot(FILE *f, const struct bootdata_in *in)
{
	bool rw = false;

	for (size_t i = 0; i < in->n_volumes; i++)
		rw = rw || !in->volumes[i].read_only;
	if (rw)
		fputs("bootcmd:\n", f);
	for (size_t i = 0; rw && i < in->n_volumes; i++)
		if (!in->volumes[i].read_only)
			fprintf(f, "  - [sh, -c, \"d=" VOLUME_DEV "%s; [ -e \\\"$d\\\" ] || exit 0; "
				"blkid -p \\\"$d\\\" >/dev/null 2>&1; [ $? -eq 2 ] || exit 0; "
				"mkfs.ext4 -q \\\"$d\\\"\"]\n", in->volumes[i].serial);
	fputs("mounts:\n", f);
	for (size_t i = 0; i < in->n_volumes; i++)
		fprintf(f, "  - [\"" VOLUME_DEV "%s\", \"%s\", ext4, \"defaults,nofail%s\", \"0\", "
			"\"0\"]\n", in->volumes[i].serial, in->volumes[i].mount_path,
			in->volumes[i].read_only ? ",ro,noload" : "");
}

/* runcmd entries (first boot of the instance): grow each writable
 * volume's filesystem to its disk (a resize since the last sandbox). */
static void volume_grow(FILE *f, const struct bootdata_in *in)
{
	for (size_t i = 0; i < in->n_volumes; i++)
		if (!in->volumes[i].read_only)
			fprintf(f, "  - [sh, -c, \"resize2fs " VOLUME_DEV "%s || true\"]\n",
				in->volumes[i].serial);
}

/* The identity client's files (entries of write_files:): where bcd's
 * endpoint is, and on a warm instance the marker that makes it wait for
 * the host. The bootstrap value itself is written by the caller. */
static int identity_files(FILE *f, const struct bootdata_in *in)
{
	int r = 0;

	if (in->ready_gateway && *in->ready_gateway) {
		_cleanup_free_ char *ep = xasprintf("%s:%d\n", in->ready_gateway, BC_IDENTITY_PORT);

		r = write_file_entry(f, BOOTDATA_IDENTITY_ENDPOINT_PATH, "0644", ep);
	}
	if (r == 0 && in->identity_host)
		r = write_file_entry(f, BOOTDATA_IDENTITY_HOST_PATH, "0644",
				     "the bootstrap value comes from the host\n");
	return r;
}

static int cloud_config_body(FILE *f, const struct bootdata_in *in)
{
	const bool identity = (in->identity_bootstrap && *in->identity_bootstrap) ||
			      in->identity_host;
	char host[64];
	int r = 0;

	hostname_of(in->instance_id, host, sizeof(host));
	fputs("#cloud-config\n# the platform's part of this instance's user data\n", f);
	fprintf(f, "hostname: \"%s\"\npreserve_hostname: false\n", host);
	if (in->n_ssh_keys > 0) {
		fputs("ssh_authorized_keys:\n", f);
		for (size_t i = 0; i < in->n_ssh_keys && r == 0; i++) {
			fputs("  - ", f);
			r = yq(f, in->ssh_keys[i]);
			fputc('\n', f);
		}
	}
	/* the image's default user gets the keys above */
	fputs("users:\n  - default\n", f);
	if (in->ssh_ca)
		ssh_ca_user(f, in);
	if (r == 0 && (in->ssh_ca || in->n_env > 0 || in->ready_signal || identity ||
		       (in->sandbox_token && *in->sandbox_token)))
		fputs("write_files:\n", f);
	if (r == 0 && in->ssh_ca)
		r = ssh_ca_files(f, in);
	if (r == 0 && in->n_env > 0)
		r = env_file(f, in);
	if (r == 0 && in->ready_signal)
		r = ready_files(f, in);
	if (r == 0 && in->identity_bootstrap && *in->identity_bootstrap)
		r = write_file_entry(f, BOOTDATA_BOOTSTRAP_PATH, "0600", in->identity_bootstrap);
	if (r == 0 && in->sandbox_token && *in->sandbox_token)
		r = write_file_entry(f, BOOTDATA_TOKEN_PATH, "0600", in->sandbox_token);
	if (r == 0 && identity)
		r = identity_files(f, in);
	/* top-level keys after the write_files entries above */
	if (r == 0 && in->n_volumes > 0)
		volume_boot(f, in);
	if (r == 0 && (in->ssh_ca || in->ready_signal || in->n_volumes > 0 || identity))
		fputs("runcmd:\n", f);
	if (r == 0)
		volume_grow(f, in);
	/* the identity rebind's unit and rule (ssh_ca_files) known before
	 * any disk is hot-added */
	if (r == 0 && in->ssh_ca)
		fputs("  - [sh, -c, \"systemctl daemon-reload || true; udevadm control --reload || "
		      "true\"]\n"
		      "  - [sh, -c, \"systemctl reload ssh || systemctl reload sshd || true\"]\n", f);
	/* after the reload above (runcmd runs in order); started now, the
	 * signal waits for cloud-final's end (After=), on later boots too */
	if (r == 0 && in->ready_signal)
		fputs("  - [systemctl, enable, " BOOTDATA_READY_UNIT ", " BOOTDATA_CLOCK_UNIT "]\n"
		      "  - [systemctl, start, --no-block, " BOOTDATA_READY_UNIT ", "
		      BOOTDATA_CLOCK_UNIT "]\n", f);
	/* the image enables it already (after cloud-init wrote the files
	 * above); started here too, for an image that does not: never fatal */
	if (r == 0 && identity)
		fputs("  - [sh, -c, \"systemctl start --no-block " BOOTDATA_IDENTITY_UNIT
		      " || true\"]\n", f);
	return r;
}

int bootdata_cloud_config(const struct bootdata_in *in, char **ret)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (!in->instance_id || !*in->instance_id || !utf8_valid(in->instance_id) ||
	    (in->ready_signal && !script_id_ok(in->instance_id)) ||
	    (in->ready_gateway && !ipv4_text_ok(in->ready_gateway)) ||
	    (in->ssh_ca && (!sshcert_account_valid(in->ssh_ca->account) || !in->ssh_ca->ca_public_key ||
			    !*in->ssh_ca->ca_public_key ||
			    !in->ssh_ca->host_key != !in->ssh_ca->host_cert)))
		return -EINVAL;
	if (in->n_volumes > BOOTDATA_VOLUMES_MAX)
		return -EINVAL;
	for (size_t i = 0; i < in->n_volumes; i++)
		if (!serial_ok(in->volumes[i].serial) ||
		    !bootdata_mount_path_ok(in->volumes[i].mount_path))
			return -EINVAL;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	r = cloud_config_body(f, in);
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf;
	return 0;
}

/* ------------------------------------------------------ /etc/sandbox/env */

bool bootdata_env_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > BOOTDATA_ENV_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

/* value in single quotes: inside them the shell takes every byte as it is
 * (newlines, $, `, \, non-ASCII) except ', which closes them: '\'' writes
 * one (close, an escaped quote, reopen). */
static void sh_quote(FILE *f, const char *v, size_t len)
{
	fputc('\'', f);
	for (size_t i = 0; i < len; i++) {
		if (v[i] == '\'')
			fputs("'\\''", f);
		else
			fputc(v[i], f);
	}
	fputc('\'', f);
}

int bootdata_env_render(const struct bootdata_env *env, size_t n, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (n > BOOTDATA_ENV_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!bootdata_env_name_ok(env[i].name) || memchr(env[i].value, '\0', env[i].len))
			return -EINVAL;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	fputs("# " BOOTDATA_ENV_PATH ": the sandbox template's env (set -a; . " BOOTDATA_ENV_PATH
	      ")\n", f);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%s=", env[i].name);
		sh_quote(f, env[i].value, env[i].len);
		fputc('\n', f);
	}
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* ---------------------------------------------------------------- MIME */

struct part {
	const char *type;
	const char *filename;
	const char *body;
	size_t len;
	const char *merge_type;   /* a Merge-Type header, or NULL */
};

/* How the caller's cloud-config merges into the platform's when the
 * platform writes files of its own (the sandbox SSH CA's, /etc/sandbox/env):
 * cloud-init's default (dict(replace)+list()+str()) would let the caller's
 * write_files list replace the platform's and drop those files; with this
 * one the caller's lists are appended and the platform's own keys stay. */
#define PLATFORM_FILES_MERGE "dict(recurse_array)+list(append)+str()"

/* base64 of body in lines of B64_LINE characters. */
static void write_b64(FILE *f, const char *body, size_t len)
{
	size_t chunk = B64_LINE / 4 * 3;
	unsigned char out[B64_LINE + 1];

	for (size_t off = 0; off < len; off += chunk) {
		size_t k = len - off < chunk ? len - off : chunk;
		EVP_EncodeBlock(out, (const unsigned char *)body + off, (int)k);
		fprintf(f, "%s\n", (const char *)out);
	}
}

static void write_part(FILE *f, const char *boundary, const struct part *p)
{
	bool ascii = is_ascii(p->body, p->len);

	if (p->merge_type)
		fprintf(f, "--%s\nMerge-Type: %s\n", boundary, p->merge_type);
	else
		fprintf(f, "--%s\n", boundary);
	fprintf(f, "Content-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\n"
		"Content-Transfer-Encoding: %s\nContent-Disposition: attachment; "
		"filename=\"%s\"\n\n", p->type, ascii ? "7bit" : "base64", p->filename);
	if (ascii) {
		/* the newline before the next delimiter belongs to it */
		fwrite(p->body, 1, p->len, f);
		fputc('\n', f);
	} else {
		write_b64(f, p->body, p->len);
	}
}

/* A boundary that occurs in no part (base64 bodies cannot hold '-'):
 * "bc-" and 32 hex digits of a hash of the parts and a counter. */
static void pick_boundary(const struct part *parts, size_t n, char out[72])
{
	for (unsigned attempt = 0;; attempt++) {
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		unsigned char md[32];
		char hex[65];
		bool clash = false;

		if (!ctx)
			abort();
		EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
		for (size_t i = 0; i < n; i++)
			EVP_DigestUpdate(ctx, parts[i].body, parts[i].len);
		EVP_DigestUpdate(ctx, &attempt, sizeof(attempt));
		EVP_DigestFinal_ex(ctx, md, NULL);
		EVP_MD_CTX_free(ctx);
		hex_encode(md, 16, hex);
		snprintf(out, 72, "bc-%s", hex);
		for (size_t i = 0; i < n; i++)
			clash |= memmem(parts[i].body, parts[i].len, out, strlen(out)) != NULL;
		if (!clash)
			return;
	}
}

static int render_mime(const struct part *parts, size_t n, char **ret, size_t *ret_len)
{
	char boundary[72];
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -ENOMEM;
	pick_boundary(parts, n, boundary);
	fprintf(f, "Content-Type: multipart/mixed; boundary=\"%s\"\nMIME-Version: 1.0\n\n",
		boundary);
	for (size_t i = 0; i < n; i++)
		write_part(f, boundary, &parts[i]);
	fprintf(f, "--%s--\n", boundary);
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

int bootdata_render(const struct bootdata_in *in, char **ret, size_t *ret_len, bc_error *err)
{
	_cleanup_free_ char *cc = NULL;
	struct part parts[2];
	size_t n = 0;
	int r;

	if ((r = bootdata_check_user(in->user_data, err)) < 0)
		return r;
	if (in->n_ssh_keys > BOOTDATA_KEYS_MAX)
		return invalid(err, "sshKeys", "at most %d sshKeys", BOOTDATA_KEYS_MAX);
	for (size_t i = 0; i < in->n_ssh_keys; i++)
		if (!utf8_valid(in->ssh_keys[i]))
			return invalid(err, "sshKeys", "sshKeys[%zu] is not UTF-8 text", i);
	if (bootdata_cloud_config(in, &cc) < 0)
		return bc_error_set(err, BC_INTERNAL, "the instance's boot data cannot be rendered");
	parts[n++] = (struct part){"text/cloud-config", "bc-platform.cfg", cc, strlen(cc)};
	if (in->user_data && *in->user_data)
		parts[n++] = (struct part){bootdata_user_type(in->user_data), "user-data",
					   in->user_data, strlen(in->user_data)};
	if (n == 2 && strcmp(parts[1].type, "text/cloud-config") == 0 && (in->ssh_ca || in->n_env ||
								       in->ready_signal))
		parts[1].merge_type = PLATFORM_FILES_MERGE;
	r = render_mime(parts, n, ret, ret_len);
	OPENSSL_cleanse(cc, strlen(cc)); /* it may hold the host key */
	if (r < 0)
		return bc_error_set(err, BC_INTERNAL, "out of memory");
	return 0;
}

int bootdata_seal(struct db *d, const struct bootdata_in *in, const char *tenant_id,
		  char ret_ref[SEALED_REF_MAX], bc_error *err)
{
	const struct sealed_owner o = {.kind = "instance", .id = in->instance_id,
				       .tenant_id = tenant_id};
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	int r;

	char name[96];

	if ((r = bootdata_render(in, &data, &len, err)) < 0)
		return r;
	r = sealed_put(d, &o, data, len, ret_ref);
	OPENSSL_cleanse(data, len);
	/* recorded as platform-minted, so that no template can name it */
	snprintf(name, sizeof(name), "user-data.%s", in->instance_id);
	if (r == 0 && tenant_id)
		r = secrets_record_minted(d, tenant_id, "sealed-user-data", name, ret_ref);
	return r < 0 ? db_fail(err, r) : 0;
}

/* ------------------------------------------------------ certifyHostKey */

/* The OpenSSH public line of a P-256 key: "ecdsa-sha2-nistp256 BASE64",
 * the blob being string type, string "nistp256", string Q (uncompressed). */
static char *p256_line(EVP_PKEY *pk)
{
	static const char type[] = "ecdsa-sha2-nistp256", curve[] = "nistp256";
	unsigned char q[65], blob[128];
	char b64[4 * ((sizeof(blob) + 2) / 3) + 1];
	size_t qlen = 0, n = 0;

	if (EVP_PKEY_get_octet_string_param(pk, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, q, sizeof(q),
					    &qlen) != 1 || qlen != sizeof(q))
		return NULL;
	const struct { const void *p; size_t len; } fields[] = {
		{type, sizeof(type) - 1}, {curve, sizeof(curve) - 1}, {q, qlen}};
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		blob[n++] = (unsigned char)(fields[i].len >> 24);
		blob[n++] = (unsigned char)(fields[i].len >> 16);
		blob[n++] = (unsigned char)(fields[i].len >> 8);
		blob[n++] = (unsigned char)fields[i].len;
		memcpy(blob + n, fields[i].p, fields[i].len);
		n += fields[i].len;
	}
	EVP_EncodeBlock((unsigned char *)b64, blob, (int)n);
	return xasprintf("%s %s", type, b64);
}

/* The private key as PEM "EC PRIVATE KEY" (RFC 5915), which sshd reads. */
static char *p256_pem(EVP_PKEY *pk)
{
	BIO *b = BIO_new(BIO_s_secmem());
	char *pem = NULL, *data = NULL;
	long len;

	if (!b)
		return NULL;
	if (PEM_write_bio_PrivateKey_traditional(b, pk, NULL, NULL, 0, NULL, NULL) == 1 &&
	    (len = BIO_get_mem_data(b, &data)) > 0) {
		pem = xmalloc((size_t)len + 1);
		memcpy(pem, data, (size_t)len);
		pem[len] = '\0';
	}
	BIO_free(b); /* a secure-heap BIO wipes what it held */
	return pem;
}

int bootdata_host_key_new(const struct sshcert_ca *ca, const char *instance_id, int64_t now,
			  char **ret_key, char **ret_cert, int64_t *ret_valid_before)
{
	struct sshcert_pubkey pub;
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	char *pem = NULL, *line = NULL, *cert = NULL;
	int r = -ENOMEM;

	if (!pk)
		return -ENOMEM;
	if (!(line = p256_line(pk)) || !(pem = p256_pem(pk)))
		goto out;
	if ((r = sshcert_pubkey_parse(line, &pub, NULL)) < 0 ||
	    (r = sshcert_sign_host(ca, &pub, instance_id, sshcert_serial_new(), now, 0, &cert,
				   ret_valid_before)) < 0)
		goto out;
	*ret_key = pem;
	*ret_cert = cert;
	pem = NULL;
out:
	sshcert_free_secret(pem);
	free(line);
	EVP_PKEY_free(pk);
	return r;
}
