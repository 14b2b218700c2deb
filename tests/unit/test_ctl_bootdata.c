/* Unit tests of controller/bootdata.c: the MIME structure of an instance's
 * user data (both parts, their types and encodings, the boundary), the
 * escaping of every value in the platform's cloud-config (read back by a
 * real YAML parser), the refusals of the caller's part, and that every
 * cloud-config rendered here passes Debian's `cloud-init schema`. The MIME
 * is read back by Python's email package and by cloud-init's own user-data
 * processor (Debian's system Python, where the cloud-init package lives). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/bootdata.h"
#include "controller/validate.h"
#include "sshcert.h"
#include "util.h"
#include "tap.h"

#define ID "inst_01jdzq3m5n8p9r7s6t5v4w3x2y"

static char tmpdir[] = "/tmp/bc-bootdata.XXXXXX";

static char *write_tmp(const char *name, const char *data, size_t len)
{
	char *path = xasprintf("%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");

	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		abort();
	return path;
}

/* Run cmd through sh; its stdout (at most 64 KiB) into *out; exit status. */
static int run(const char *cmd, char **out)
{
	FILE *p = popen(cmd, "r");
	char *buf = xcalloc(1, 65536);
	size_t n = 0;
	int st;

	if (!p)
		abort();
	while (n < 65535 && !feof(p)) {
		size_t k = fread(buf + n, 1, 65535 - n, p);
		if (k == 0)
			break;
		n += k;
	}
	st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* cloud-init schema --config-file on text: 0 when valid. */
static int schema(const char *name, const char *text)
{
	_cleanup_free_ char *path = write_tmp(name, text, strlen(text));
	_cleanup_free_ char *cmd = xasprintf("cloud-init schema --config-file %s 2>&1", path);
	_cleanup_free_ char *out = NULL;
	int rc = run(cmd, &out);

	if (rc != 0)
		printf("# cloud-init schema (%d): %s\n", rc, out);
	return rc;
}

/* Debian's system Python running script over data (written to a file
 * named name, its path in sys.argv[1]): its output, with "# what: output"
 * printed when it fails. */
static char *python(const char *script, const char *name, const char *data, size_t len,
		    const char *what)
{
	_cleanup_free_ char *path = write_tmp(name, data, len);
	_cleanup_free_ char *cmd = xasprintf("/usr/bin/python3 -c '%s' %s 2>&1", script, path);
	char *out = NULL;

	if (run(cmd, &out) != 0)
		printf("# %s: %s\n", what, out);
	return out;
}

/* Python's email parser over the MIME: one line per part,
 * "<content type>|<transfer encoding>|<sha256 of the decoded payload>",
 * after a first line with the top-level type. */
static char *mime_parts(const char *mime, size_t len)
{
	static const char script[] =
		"\n"
		"import email, hashlib, sys\n"
		"m = email.message_from_bytes(open(sys.argv[1], \"rb\").read())\n"
		"print(m.get_content_type(), m.is_multipart())\n"
		"for p in m.get_payload():\n"
		"    b = p.get_payload(decode=True)\n"
		"    print(p.get_content_type() + \"|\" + p[\"Content-Transfer-Encoding\"] + \"|\" + "
		"hashlib.sha256(b).hexdigest())\n";

	return python(script, "mime", mime, len, "python email");
}

/* cloud-init's UserDataProcessor (what a guest runs on its NoCloud
 * user-data) over the MIME: one line per part it hands to its handlers,
 * "<content type>|<file name>|<sha256 of the payload>". */
static char *cloudinit_parts(const char *mime, size_t len)
{
	static const char script[] =
		"\n"
		"import hashlib, sys, tempfile\n"
		"from cloudinit import helpers, user_data\n"
		"t = tempfile.mkdtemp()\n"
		"paths = helpers.Paths({\"cloud_dir\": t, \"run_dir\": t})\n"
		"m = user_data.UserDataProcessor(paths).process(open(sys.argv[1], \"rb\").read())\n"
		"for p in m.walk():\n"
		"    if p.get_content_maintype() != \"multipart\":\n"
		"        print(p.get_content_type() + \"|\" + p.get_filename() + \"|\" + "
		"hashlib.sha256(p.get_payload(decode=True)).hexdigest())\n";

	return python(script, "ud", mime, len, "cloud-init user_data");
}

/* The cloud-config read back by PyYAML as JSON (the keys in order). */
static char *yaml_json(const char *cc)
{
	static const char script[] =
		"import yaml, json, sys; print(json.dumps(yaml.safe_load(open(sys.argv[1], "
		"encoding=\"utf-8\")), ensure_ascii=True, sort_keys=True))";
	char *out = python(script, "cc.yaml", cc, strlen(cc), "yaml");

	out[strcspn(out, "\n")] = '\0';
	return out;
}

static char *part_line(const char *type, const char *enc, const char *body)
{
	char h[65];

	sha256_hex(body, strlen(body), h);
	return xasprintf("%s|%s|%s", type, enc, h);
}

static void test_mime(void)
{
	const char *keys[] = {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6C alice@laptop"};
	const char *ud = "#!/bin/sh\necho marker > /var/tmp/bc-marker\n";
	struct bootdata_in in = {.instance_id = ID, .ssh_keys = keys, .n_ssh_keys = 1,
				 .user_data = ud};
	_cleanup_free_ char *mime = NULL, *cc = NULL, *parts = NULL, *l1 = NULL, *l2 = NULL;
	_cleanup_free_ char *want = NULL;
	size_t len = 0;
	bc_error err = {0};

	ok(bootdata_render(&in, &mime, &len, &err) == 0, "render: keys and a shell script");
	is_int(len, strlen(mime), "length is the text's");
	ok(strncmp(mime, "Content-Type: multipart/mixed; boundary=\"bc-", 44) == 0,
	   "a multipart/mixed with our boundary");
	ok(bootdata_cloud_config(&in, &cc) == 0, "the platform's part alone");
	ok(strncmp(cc, "#cloud-config\n", 14) == 0, "it starts #cloud-config");
	parts = mime_parts(mime, len);
	l1 = part_line("text/cloud-config", "7bit", cc);
	l2 = part_line("text/x-shellscript", "7bit", ud);
	want = xasprintf("multipart/mixed True\n%s\n%s\n", l1, l2);
	is_str(parts, want, "python's email parser: platform part first, the script second, "
	       "both bodies byte for byte");
	is_int(schema("mime.cfg", cc), 0, "cloud-init schema accepts the platform part");
	ok(strstr(cc, "hostname: \"inst-01jdzq3m5n8p9r7s6t5v4w3x2y\"") != NULL,
	   "hostname is the instance id as a DNS label");
	/* the same input renders the same bytes */
	{
		_cleanup_free_ char *again = NULL;
		size_t len2 = 0;
		ok(bootdata_render(&in, &again, &len2, &err) == 0 && len2 == len &&
		   memcmp(again, mime, len) == 0, "rendering is deterministic");
	}
}

static void test_no_user_data(void)
{
	struct bootdata_in in = {.instance_id = ID};
	_cleanup_free_ char *mime = NULL, *cc = NULL, *parts = NULL, *want = NULL, *l1 = NULL;
	size_t len = 0;
	bc_error err = {0};

	ok(bootdata_render(&in, &mime, &len, &err) == 0, "render: no keys, no user data");
	ok(bootdata_cloud_config(&in, &cc) == 0, "platform part");
	ok(strstr(cc, "ssh_authorized_keys") == NULL, "no keys, no ssh_authorized_keys");
	parts = mime_parts(mime, len);
	l1 = part_line("text/cloud-config", "7bit", cc);
	want = xasprintf("multipart/mixed True\n%s\n", l1);
	is_str(parts, want, "one part only");
	is_int(schema("nokeys.cfg", cc), 0, "cloud-init schema accepts it");
}

/* Values that would break naive YAML: quotes, backslashes, colons, '#',
 * a newline, a tab, a DEL, a C1 control, non-ASCII, a line separator. */
static void test_escaping(void)
{
	const char *keys[] = {
		"ssh-ed25519 AAAA \"quoted\" back\\slash: colon # hash",
		"ssh-rsa AAAA evil\nhostname: pwned\n- x",
		"ssh-ed25519 AAAA tab\there del\x7f c1\xc2\x85 \xc3\xa9t\xc3\xa9 \xe2\x80\xa8 "
		"\xf0\x9f\x94\x91",
	};
	struct bootdata_in in = {.instance_id = ID, .ssh_keys = keys, .n_ssh_keys = 3};
	_cleanup_free_ char *cc = NULL, *json = NULL;

	ok(bootdata_cloud_config(&in, &cc) == 0, "render hostile key comments");
	json = yaml_json(cc);
	is_str(json,
	       "{\"hostname\": \"inst-01jdzq3m5n8p9r7s6t5v4w3x2y\", \"preserve_hostname\": false, "
	       "\"ssh_authorized_keys\": [\"ssh-ed25519 AAAA \\\"quoted\\\" back\\\\slash: colon "
	       "# hash\", \"ssh-rsa AAAA evil\\nhostname: pwned\\n- x\", \"ssh-ed25519 AAAA "
	       "tab\\there del\\u007f c1\\u0085 \\u00e9t\\u00e9 \\u2028 \\ud83d\\udd11\"], "
	       "\"users\": [\"default\"]}",
	       "a YAML parser reads back every key exactly and nothing else");
	is_int(schema("escaping.cfg", cc), 0, "cloud-init schema accepts it");
	{
		const char *bad[] = {"ssh-ed25519 AAAA \xff\xfe"};
		struct bootdata_in b = {.instance_id = ID, .ssh_keys = bad, .n_ssh_keys = 1};
		_cleanup_free_ char *x = NULL;
		size_t len;
		bc_error err = {0};
		ok(bootdata_render(&b, &x, &len, &err) < 0 && err.code == BC_INVALID_INPUT,
		   "a key that is not UTF-8 is INVALID_INPUT");
	}
}

static void test_ssh_ca(void)
{
	const struct bootdata_ssh_ca ca = {
		.account = "sandbox",
		.ca_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOM sandbox CA \"prod\""};
	const char *keys[] = {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6C alice"};
	struct bootdata_in in = {.instance_id = ID, .ssh_keys = keys, .n_ssh_keys = 1,
				 .ssh_ca = &ca, .user_data = "#cloud-config\nruncmd: [true]\n"};
	_cleanup_free_ char *cc = NULL, *json = NULL, *mime = NULL, *parts = NULL;
	size_t len;
	bc_error err = {0};

	ok(bootdata_cloud_config(&in, &cc) == 0, "render the sandbox SSH CA seam");
	is_int(schema("ca.cfg", cc), 0, "cloud-init schema accepts it");
	json = yaml_json(cc);
	ok(strstr(json, "\"path\": \"/etc/ssh/bc_sandbox_principals/sandbox\"") &&
	   strstr(json, "\"content\": \"sandbox@" ID "\\n\""),
	   "the principal file names <account>@<instance id>");
	ok(strstr(json, "\"content\": \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOM sandbox CA "
		  "\\\"prod\\\"\\n\"") != NULL, "the CA key written as given");
	ok(strstr(json, "TrustedUserCAKeys /etc/ssh/bc_sandbox_ca.pub\\nAuthorizedPrincipalsFile "
		  "/etc/ssh/bc_sandbox_principals/%u\\n") != NULL, "the sshd drop-in");
	ok(strstr(json, "{\"lock_passwd\": true, \"name\": \"sandbox\", \"shell\": "
		  "\"/bin/bash\"}") != NULL, "a locked-password account");
	ok(bootdata_render(&in, &mime, &len, &err) == 0, "render with a cloud-config second part");
	parts = mime_parts(mime, len);
	ok(strstr(parts, "\ntext/cloud-config|7bit|") && strstr(strstr(parts, "|7bit|") + 1,
								 "\ntext/cloud-config|7bit|"),
	   "two cloud-config parts");
	{
		const struct bootdata_ssh_ca bad = {.account = "../etc", .ca_public_key = "x"};
		struct bootdata_in b = {.instance_id = ID, .ssh_ca = &bad};
		_cleanup_free_ char *x = NULL;
		ok(bootdata_cloud_config(&b, &x) == -EINVAL, "an account that is no login name "
		   "is refused");
	}
}

/* Compare got with tests/unit/golden/<name> (BC_UPDATE_GOLDEN=1 rewrites
 * it: review the diff). */
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
		ok(0, "golden %s readable (BC_UPDATE_GOLDEN=1)", name);
		return;
	}
	ok(strcmp(got, want) == 0, "the cloud-config matches golden/%s", name);
	if (strcmp(got, want) != 0)
		printf("# got:\n%s\n# rerun with BC_UPDATE_GOLDEN=1 and diff to see the change\n", got);
	free(want);
}

#define PLATFORM_MERGE_TEXT "dict(recurse_array)+list(append)+str()"
#define CA_LINE "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOM sandbox CA"
#define FAKE_KEY "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIFAKE\n-----END EC PRIVATE KEY-----\n"
#define FAKE_CERT "ecdsa-sha2-nistp256-cert-v01@openssh.com AAAAKGVjZHNhFAKE host/" ID "\n"

/* The sandbox SSH CA part alone (no SSH keys, no user data, no env), with
 * and without a certified host key, against golden files; both pass
 * cloud-init schema. */
static void test_ca_golden(void)
{
	const struct bootdata_ssh_ca plain = {.account = "sandbox", .ca_public_key = CA_LINE};
	const struct bootdata_ssh_ca hk = {.account = "sandbox", .ca_public_key = CA_LINE,
					   .host_key = FAKE_KEY, .host_cert = FAKE_CERT};
	struct bootdata_in in = {.instance_id = ID, .ssh_ca = &plain};
	_cleanup_free_ char *a = NULL, *b = NULL, *json = NULL;

	ok(bootdata_cloud_config(&in, &a) == 0, "render the CA part without a host key");
	golden("bootdata_ca.cfg", a);
	is_int(schema("ca-plain.cfg", a), 0, "cloud-init schema accepts it");
	ok(!strstr(a, "path: " BOOTDATA_HOST_KEY_PATH) && !strstr(a, "HostKey /etc"),
	   "no host key, no HostKey line");
	in.ssh_ca = &hk;
	ok(bootdata_cloud_config(&in, &b) == 0, "render the CA part with a host key");
	golden("bootdata_ca_hostkey.cfg", b);
	is_int(schema("ca-hostkey.cfg", b), 0, "cloud-init schema accepts it");
	json = yaml_json(b);
	ok(strstr(json, "\"content\": \"-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIFAKE\\n-----END EC "
		  "PRIVATE KEY-----\\n\", \"owner\": \"root:root\", \"path\": "
		  "\"/etc/ssh/bc_sandbox_host_key\", \"permissions\": \"0600\"") != NULL,
	   "the host key: /etc/ssh/bc_sandbox_host_key, 0600, as given");
	ok(strstr(json, "\"path\": \"/etc/ssh/bc_sandbox_host_key-cert.pub\"") != NULL,
	   "its certificate beside it");
	ok(strstr(json, "HostKey /etc/ssh/bc_sandbox_host_key\\nHostCertificate "
		  "/etc/ssh/bc_sandbox_host_key-cert.pub\\n") != NULL,
	   "HostKey and HostCertificate in the drop-in");
	{
		const struct bootdata_ssh_ca half = {.account = "sandbox", .ca_public_key = CA_LINE,
						     .host_key = FAKE_KEY};
		struct bootdata_in h = {.instance_id = ID, .ssh_ca = &half};
		_cleanup_free_ char *x = NULL;
		ok(bootdata_cloud_config(&h, &x) == -EINVAL, "a host key without its certificate "
		   "is refused");
	}
}

/* Write the write_files of cloud-config cc under root (paths kept below
 * it, permissions applied), the drop-in's /etc/ssh/ paths pointed there
 * too: 0 when done. */
static int unpack(const char *cc, const char *root)
{
	static const char script[] =
		"import base64, os, sys, yaml\n"
		"root = sys.argv[2]\n"
		"for f in yaml.safe_load(open(sys.argv[1]))[\"write_files\"]:\n"
		"    p = root + f[\"path\"]\n"
		"    os.makedirs(os.path.dirname(p), exist_ok=True)\n"
		"    d = f[\"content\"]\n"
		"    if f[\"path\"].endswith(\".conf\"):\n"
		"        d = d.replace(\"/etc/ssh/\", root + \"/etc/ssh/\")\n"
		"    open(p, \"w\").write(d)\n"
		"    os.chmod(p, int(f[\"permissions\"], 8))\n";
	_cleanup_free_ char *spath = write_tmp("unpack.py", script, strlen(script));
	_cleanup_free_ char *cpath = write_tmp("unpack.cfg", cc, strlen(cc));
	_cleanup_free_ char *cmd = xasprintf("/usr/bin/python3 %s %s %s 2>&1", spath, cpath, root);
	_cleanup_free_ char *out = NULL;
	int rc = run(cmd, &out);

	if (rc != 0)
		printf("# unpack: %s\n", out);
	return rc;
}

/* A field of `ssh-keygen -L` ("Type", "Key ID", ...): its value. */
static char *cert_field(const char *listing, const char *name)
{
	_cleanup_free_ char *k = xasprintf("\n        %s: ", name);
	const char *p = strstr(listing, k);

	if (!p)
		return xstrdup("");
	p += strlen(k);
	return xasprintf("%.*s", (int)strcspn(p, "\n"), p);
}

/* certifyHostKey for real: a fresh key and certificate from a real CA,
 * rendered, unpacked into a directory and read by real OpenSSH: sshd -t
 * loads the drop-in with its HostKey and HostCertificate, ssh-keygen -L
 * reads the certificate (a host certificate naming the instance, signed by
 * the CA) and it certifies the very key beside it. */
static void test_host_key_sshd(void)
{
	char *pem = NULL, *key = NULL, *cert = NULL;
	struct sshcert_ca *sca = NULL;
	_cleanup_free_ char *ca_line = NULL, *cc = NULL, *root = xasprintf("%s/guest", tmpdir);
	_cleanup_free_ char *cmd = NULL, *out = NULL, *listing = NULL, *fp = NULL, *ca_fp = NULL;
	int64_t vb = 0, now = (int64_t)time(NULL);
	struct stat st;

	if (sshcert_ca_generate(&pem) < 0 || sshcert_ca_load(pem, &sca) < 0 ||
	    sshcert_ca_public_line(sca, "bc sandbox SSH CA", &ca_line) < 0)
		abort();
	ok(bootdata_host_key_new(sca, ID, now, &key, &cert, &vb) == 0, "a host key and its "
	   "certificate");
	ok(vb == now + SSHCERT_HOST_SECS, "valid for 30 days");
	ok(strncmp(key, "-----BEGIN EC PRIVATE KEY-----\n", 31) == 0, "a PEM EC PRIVATE KEY");
	ok(bootdata_host_key_new(sca, "inst_UPPER", now, &(char *){NULL}, &(char *){NULL}, &(int64_t){0}) ==
	   -EINVAL, "an id ssh would lowercase is refused");
	{
		const struct bootdata_ssh_ca hk = {.account = "sandbox", .ca_public_key = ca_line,
						   .host_key = key, .host_cert = cert};
		struct bootdata_in in = {.instance_id = ID, .ssh_ca = &hk};
		ok(bootdata_cloud_config(&in, &cc) == 0, "rendered");
	}
	is_int(unpack(cc, root), 0, "its files written to a directory");
	{
		_cleanup_free_ char *kp = xasprintf("%s/etc/ssh/bc_sandbox_host_key", root);
		ok(stat(kp, &st) == 0 && (st.st_mode & 0777) == 0600, "the host key is 0600");
	}
	/* sshd -t wants its privilege separation directory, which only a
	 * started sshd service makes (/run is emptied at boot) */
	mkdir_p("/run/sshd", 0755);
	cmd = xasprintf("/usr/sbin/sshd -t -f %s/etc/ssh/sshd_config.d/10-bc-sandbox.conf 2>&1",
			root);
	/* sshd -t exits 0 for a certificate it cannot use ("No matching private
	 * key for certificate", "Could not load host certificate"): it must
	 * also say nothing */
	ok(run(cmd, &out) == 0 && !*out, "sshd -t accepts the drop-in, its host key and "
	   "certificate, without a complaint");
	if (*out)
		printf("# sshd -t: %s\n", out);
	free(cmd);
	cmd = xasprintf("ssh-keygen -L -f %s/etc/ssh/bc_sandbox_host_key-cert.pub 2>&1", root);
	is_int(run(cmd, &listing), 0, "ssh-keygen -L reads the certificate");
	{
		_cleanup_free_ char *type = cert_field(listing, "Type");
		_cleanup_free_ char *kid = cert_field(listing, "Key ID");
		_cleanup_free_ char *ca = cert_field(listing, "Signing CA");
		_cleanup_free_ char *pk = cert_field(listing, "Public key");
		is_str(type, "ecdsa-sha2-nistp256-cert-v01@openssh.com host certificate",
		       "a P-256 host certificate");
		is_str(kid, "\"host/" ID "\"", "key id host/<instance id>");
		ok(strstr(listing, "Principals: \n                " ID "\n") != NULL,
		   "its one principal is the instance id");
		free(cmd);
		cmd = xasprintf("ssh-keygen -y -f %s/etc/ssh/bc_sandbox_host_key | ssh-keygen -lf - "
				"| cut -d' ' -f2", root);
		run(cmd, &fp);
		fp[strcspn(fp, "\n")] = '\0';
		ok(*fp && strstr(pk, fp) != NULL, "it certifies the host key beside it (%s)", fp);
		free(cmd);
		cmd = xasprintf("echo '%s' | ssh-keygen -lf - | cut -d' ' -f2", ca_line);
		run(cmd, &ca_fp);
		ca_fp[strcspn(ca_fp, "\n")] = '\0';
		ok(*ca_fp && strstr(ca, ca_fp) != NULL, "signed by the sandbox CA (%s)", ca_fp);
	}
	sshcert_free_secret(pem);
	sshcert_free_secret(key);
	free(cert);
	sshcert_ca_free(sca);
}

static void test_non_ascii_user_data(void)
{
	const char *ud = "#cloud-config\r\nwrite_files:\r\n  - path: /tmp/\xc3\xa9\r\n"
			 "    content: \"--bc-\"\r\n";
	struct bootdata_in in = {.instance_id = ID, .user_data = ud};
	_cleanup_free_ char *mime = NULL, *parts = NULL, *l2 = NULL;
	char boundary[64];
	size_t len;
	bc_error err = {0};

	ok(bootdata_render(&in, &mime, &len, &err) == 0, "render UTF-8 user data with CRLF");
	parts = mime_parts(mime, len);
	l2 = part_line("text/cloud-config", "base64", ud);
	ok(strstr(parts, l2) != NULL, "it travels base64-encoded and decodes byte for byte");
	{
		const char *keys[] = {"ssh-ed25519 AAAA jos\xc3\xa9"};
		_cleanup_free_ char *ci = NULL, *cc = NULL, *want = NULL, *h1 = NULL, *h2 = NULL;
		struct bootdata_in in2 = in;
		_cleanup_free_ char *mime2 = NULL;
		size_t len2;

		in2.ssh_keys = keys;
		in2.n_ssh_keys = 1;
		ok(bootdata_render(&in2, &mime2, &len2, &err) == 0 &&
		   bootdata_cloud_config(&in2, &cc) == 0, "render with a UTF-8 key comment too");
		ci = cloudinit_parts(mime2, len2);
		h1 = part_line("text/cloud-config", "bc-platform.cfg", cc);
		h2 = part_line("text/cloud-config", "user-data", ud);
		want = xasprintf("%s\n%s\n", h1, h2);
		is_str(ci, want, "cloud-init's user-data processor finds both parts, typed and "
		       "decoded byte for byte");
	}
	ok(sscanf(mime, "Content-Type: multipart/mixed; boundary=\"%63[^\"]\"", boundary) == 1,
	   "the boundary is read back");
	ok(strstr(ud, boundary) == NULL, "the boundary is in no part");
}

static void check_type(const char *ud, const char *want)
{
	const char *got = bootdata_user_type(ud);

	is_str(got ? got : "(none)", want, "first line '%.*s' is %s", (int)strcspn(ud, "\r\n"),
	       ud, want);
}

static void test_types_and_refusals(void)
{
	char *big;
	bc_error err = {0};

	check_type("#cloud-config\na: 1\n", "text/cloud-config");
	check_type("#cloud-config  \r\n", "text/cloud-config");
	check_type("#!/bin/bash\n", "text/x-shellscript");
	check_type("#include\nhttps://x/y\n", "text/x-include-url");
	check_type("#include-once\nhttps://x/y\n", "text/x-include-once-url");
	check_type("#cloud-boothook\n", "text/cloud-boothook");
	check_type("#part-handler\n", "text/part-handler");
	check_type("#cloud-config-archive\n", "text/cloud-config-archive");
	check_type("#cloud-config-jsonp\n", "text/cloud-config-jsonp");
	check_type("## template: jinja\n#cloud-config\n", "text/jinja2");
	check_type("#cloud-configX\n", "(none)");
	check_type("hello\n", "(none)");
	ok(bootdata_check_user("", &err) == 0, "empty user data is accepted");
	ok(bootdata_check_user("echo hi\n", &err) < 0 && err.code == BC_INVALID_INPUT,
	   "an untyped first line is INVALID_INPUT");
	is_str(bc_error_get_detail(&err, "field"), "userData", "details.field");
	is_str(bc_error_get_detail(&err, "reason"), "user-data-type", "details.reason");
	bc_error_clear(&err);
	ok(bootdata_check_user("#!/bin/sh\n\xc3(\n", &err) < 0 &&
	   strcmp(bc_error_get_detail(&err, "reason"), "user-data-not-utf8") == 0,
	   "invalid UTF-8 is INVALID_INPUT user-data-not-utf8");
	bc_error_clear(&err);
	big = xmalloc(BOOTDATA_USER_MAX + 2);
	memset(big, 'x', BOOTDATA_USER_MAX + 1);
	memcpy(big, "#!/bin/sh\n#", 11);
	big[BOOTDATA_USER_MAX + 1] = '\0';
	ok(bootdata_check_user(big, &err) < 0 &&
	   strcmp(bc_error_get_detail(&err, "reason"), "user-data-too-large") == 0,
	   "65,537 bytes is INVALID_INPUT user-data-too-large");
	bc_error_clear(&err);
	big[BOOTDATA_USER_MAX] = '\0';
	ok(bootdata_check_user(big, &err) == 0, "65,536 bytes is accepted");
	free(big);
}

/* The guest-up signal and the clock fix (ready_signal), beside the sandbox
 * CA part: golden, schema-checked; the signal is started after the sshd
 * reload; an id that could break out of the script is refused; a caller's
 * cloud-config merges into it (its write_files and runcmd appended). */
static void test_ready_golden(void)
{
	const struct bootdata_ssh_ca plain = {.account = "sandbox", .ca_public_key = CA_LINE};
	struct bootdata_in in = {.instance_id = ID, .ssh_ca = &plain, .ready_signal = true,
				 .ready_gateway = "10.77.0.1"};
	_cleanup_free_ char *a = NULL, *b = NULL, *mime = NULL;
	const char *reload, *enable, *start;
	size_t len;
	bc_error err = {0};

	ok(bootdata_cloud_config(&in, &a) == 0, "render the CA part with the guest-up signal");
	golden("bootdata_ready.cfg", a);
	is_int(schema("ready.cfg", a), 0, "cloud-init schema accepts it");
	reload = strstr(a, "- [sh, -c, \"systemctl reload ssh");
	enable = strstr(a, "[systemctl, enable, bc-guest-ready.service, bc-rtc-clock.service]");
	start = strstr(a, "[systemctl, start, --no-block, bc-guest-ready.service");
	ok(reload && enable && start && reload < enable && enable < start,
	   "runcmd: the sshd reload, then the units enabled, then started");
	ok(strstr(a, "id=" ID " port=9469 pool_gateway=10.77.0.1") != NULL,
	   "the script names the instance, the port and the pool's gateway");
	in.ssh_ca = NULL;
	ok(bootdata_cloud_config(&in, &b) == 0 && !strstr(b, "systemctl reload") &&
	   strstr(b, "bc-guest-ready.service") && strstr(b, "write_files:\n"),
	   "without the CA: the signal alone");
	is_int(schema("ready-alone.cfg", b), 0, "cloud-init schema accepts it");
	in.user_data = "#cloud-config\nruncmd: [true]\n";
	ok(bootdata_render(&in, &mime, &len, &err) == 0 &&
	   strstr(mime, "Merge-Type: " PLATFORM_MERGE_TEXT) != NULL,
	   "a caller's cloud-config merges into the platform's (lists appended)");
	{
		struct bootdata_in bad = {.instance_id = "inst_1$(reboot)", .ready_signal = true};
		_cleanup_free_ char *x = NULL;
		ok(bootdata_cloud_config(&bad, &x) == -EINVAL,
		   "an id with characters outside [A-Za-z0-9_-] is refused");
		bad.ready_signal = false;
		ok(bootdata_cloud_config(&bad, &x) == 0, "(without the signal it renders)");
		free(x);
		x = NULL;
		bad = (struct bootdata_in){.instance_id = ID, .ready_signal = true,
					   .ready_gateway = "10.0.0.1;reboot"};
		ok(bootdata_cloud_config(&bad, &x) == -EINVAL,
		   "a gateway that is not a dotted quad is refused");
	}
}

/* Attached volumes: golden, schema-checked; bootcmd's format line run
 * (through sh, as cloud-init runs it) on a file standing for the disk:
 * the first run formats, the second keeps the filesystem (same UUID) and
 * the data; a read-only volume is never formatted, mounted ro,noload;
 * writable ones are grown in runcmd; bad serials and paths are refused. */
static const char VOL_SCRIPT[] =
	"import sys, yaml\n"
	"c = yaml.safe_load(open(sys.argv[1]))\n"
	"print(c[\"bootcmd\"][0][2])\n";

static char *blkid_uuid(const char *path)
{
	_cleanup_free_ char *cmd = xasprintf("blkid -p -s UUID -o value %s", path);
	char *out = NULL;

	if (run(cmd, &out) != 0) {
		free(out);
		return NULL;
	}
	out[strcspn(out, "\n")] = '\0';
	return out;
}

static void test_volumes(void)
{
	const struct bootdata_volume v[] = {
		{.serial = "bcv-0123456789abcdef", .mount_path = "/workspace"},
		{.serial = "bcv-fedcba9876543210", .mount_path = "/data/sets", .read_only = true},
	};
	struct bootdata_in in = {.instance_id = ID, .volumes = v, .n_volumes = 2};
	_cleanup_free_ char *a = NULL, *line = NULL, *disk = NULL, *cmd = NULL, *u1 = NULL,
			    *u2 = NULL, *out = NULL;

	ok(bootdata_cloud_config(&in, &a) == 0, "render two volumes, one read-only");
	golden("bootdata_volumes.cfg", a);
	is_int(schema("volumes.cfg", a), 0, "cloud-init schema accepts it");
	ok(!strstr(a, "fs_setup") && !strstr(a, "bcv-fedcba9876543210; "),
	   "no fs_setup, and the read-only volume has no format line");
	ok(strstr(a, "\"defaults,nofail,ro,noload\"") && strstr(a, "\"defaults,nofail\""),
	   "mounts: defaults,nofail, and ro,noload for the read-only one");
	ok(strstr(a, "resize2fs /dev/disk/by-id/virtio-bcv-0123456789abcdef") &&
	   !strstr(a, "resize2fs /dev/disk/by-id/virtio-bcv-fedcba"),
	   "runcmd grows the writable volume only");
	line = python(VOL_SCRIPT, "vol-line.cfg", a, strlen(a), "bootcmd line");
	ok(line && strstr(line, "mkfs.ext4 -q"), "bootcmd holds the format line");
	if (line) {
		/* the same line, on a file standing for the disk */
		char *dev = strstr(line, "/dev/disk/by-id/virtio-bcv-0123456789abcdef");
		line[strcspn(line, "\n")] = '\0';
		disk = xasprintf("%s/disk.raw", tmpdir);
		cmd = xasprintf("truncate -s 64M %s && sh -c 'd=%s%s'", disk, disk,
				dev ? dev + strlen("/dev/disk/by-id/virtio-bcv-0123456789abcdef") : "");
		is_int(run(cmd, &out), 0, "the line runs on a blank disk");
		free(out);
		out = NULL;
		u1 = blkid_uuid(disk);
		ok(u1 && *u1, "... and formats it (blkid sees a filesystem)");
		free(cmd);
		cmd = xasprintf("debugfs -w -R 'write /etc/hostname note' %s >/dev/null 2>&1; "
				"sh -c 'd=%s%s'", disk, disk,
				dev ? dev + strlen("/dev/disk/by-id/virtio-bcv-0123456789abcdef") : "");
		is_int(run(cmd, &out), 0, "a second run (the next sandbox's boot)");
		free(out);
		out = NULL;
		u2 = blkid_uuid(disk);
		ok(u1 && u2 && strcmp(u1, u2) == 0, "... keeps the filesystem (same UUID)");
		free(cmd);
		cmd = xasprintf("debugfs -R 'ls' %s 2>/dev/null", disk);
		run(cmd, &out);
		ok(out && strstr(out, "note"), "... and the file written on it");
	}
	{
		struct bootdata_volume bad = {.serial = "bcv-1;reboot", .mount_path = "/w"};
		struct bootdata_in b = {.instance_id = ID, .volumes = &bad, .n_volumes = 1};
		_cleanup_free_ char *x = NULL;
		ok(bootdata_cloud_config(&b, &x) == -EINVAL, "a serial outside [A-Za-z0-9-] is refused");
		bad = (struct bootdata_volume){.serial = "bcv-1", .mount_path = "/a b"};
		ok(bootdata_cloud_config(&b, &x) == -EINVAL, "a mount path with a space is refused");
	}
	ok(bootdata_mount_path_ok("/workspace") && bootdata_mount_path_ok("/a/b-c/d.e_f"),
	   "mount paths: /workspace, /a/b-c/d.e_f");
	ok(!bootdata_mount_path_ok("workspace") && !bootdata_mount_path_ok("/") &&
	   !bootdata_mount_path_ok("/a/") && !bootdata_mount_path_ok("/a//b") &&
	   !bootdata_mount_path_ok("/a/./b") && !bootdata_mount_path_ok("/a/..") &&
	   !bootdata_mount_path_ok("/a\"b") && !bootdata_mount_path_ok("/a\nb"),
	   "... not relative, /, trailing or double /, . or .., quotes or newlines");
}

/* Workload identity: the bootstrap value, or the 24 h token, each in a
 * root-only file; neither when not given. */
static void test_identity_files(void)
{
	struct bootdata_in in = {.instance_id = ID, .ready_signal = true,
				 .identity_bootstrap = "bcb_0123abcd"};
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;

	ok(bootdata_cloud_config(&in, &a) == 0, "render with a bootstrap value");
	ok(strstr(a, "  - path: " BOOTDATA_BOOTSTRAP_PATH "\n    owner: \"root:root\"\n"
		     "    permissions: \"0600\"\n    content: \"bcb_0123abcd\"") != NULL,
	   "the bootstrap value in " BOOTDATA_BOOTSTRAP_PATH ", root, 0600");
	ok(strstr(a, BOOTDATA_TOKEN_PATH) == NULL, "no token file");
	is_int(schema("identity.cfg", a), 0, "cloud-init schema accepts it");
	in.identity_bootstrap = NULL;
	in.sandbox_token = "bct_beef";
	ok(bootdata_cloud_config(&in, &b) == 0, "render with a token");
	ok(strstr(b, "  - path: " BOOTDATA_TOKEN_PATH "\n    owner: \"root:root\"\n"
		     "    permissions: \"0600\"\n    content: \"bct_beef\"") != NULL,
	   "the token in " BOOTDATA_TOKEN_PATH ", root, 0600");
	ok(strstr(b, BOOTDATA_BOOTSTRAP_PATH) == NULL, "no bootstrap file");
	in.sandbox_token = "";
	ok(bootdata_cloud_config(&in, &c) == 0 && !strstr(c, "/etc/sandbox/"),
	   "neither when not given");
	{
		/* beside volumes (their bootcmd/mounts keys follow write_files),
		 * and without the ready signal (write_files opened for it alone) */
		static const char script[] =
			"import sys, yaml\n"
			"c = yaml.safe_load(open(sys.argv[1]))\n"
			"print(\" \".join(f[\"path\"] for f in c[\"write_files\"]), len(c[\"mounts\"]))\n";
		const struct bootdata_volume v = {.serial = "bcv-0123456789abcdef",
						  .mount_path = "/workspace"};
		struct bootdata_in w = {.instance_id = ID, .identity_bootstrap = "bcb_0123abcd",
					.volumes = &v, .n_volumes = 1};
		_cleanup_free_ char *d = NULL, *out = NULL;

		ok(bootdata_cloud_config(&w, &d) == 0, "render a bootstrap value beside a volume");
		is_int(schema("identity-volumes.cfg", d), 0, "cloud-init schema accepts it");
		out = python(script, "identity-volumes.cfg", d, strlen(d), "write_files and mounts");
		is_str(out, BOOTDATA_BOOTSTRAP_PATH " 1\n",
		       "the bootstrap file is a write_files entry, the volume a mount");
	}
}

/* The identity client's files: where bcd's endpoint is, and on a warm
 * instance of a template with identity the marker that makes it wait for
 * the host (no value: it comes at claim); started from runcmd. */
static void test_identity_host(void)
{
	struct bootdata_in in = {.instance_id = ID, .ready_signal = true,
				 .ready_gateway = "10.77.0.1", .identity_host = true};
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;

	ok(bootdata_cloud_config(&in, &a) == 0, "render a warm instance of an identity template");
	ok(strstr(a, "  - path: " BOOTDATA_IDENTITY_ENDPOINT_PATH "\n    owner: \"root:root\"\n"
		     "    permissions: \"0644\"\n    content: \"10.77.0.1:9470\\n\"") != NULL,
	   "the endpoint, the pool's gateway and BC_IDENTITY_PORT, in "
	   BOOTDATA_IDENTITY_ENDPOINT_PATH);
	ok(strstr(a, "  - path: " BOOTDATA_IDENTITY_HOST_PATH "\n") != NULL,
	   "the wait-for-the-host marker " BOOTDATA_IDENTITY_HOST_PATH);
	ok(strstr(a, BOOTDATA_BOOTSTRAP_PATH) == NULL, "no bootstrap value");
	ok(strstr(a, "systemctl start --no-block " BOOTDATA_IDENTITY_UNIT " || true") != NULL,
	   "runcmd starts " BOOTDATA_IDENTITY_UNIT " (never fatal)");
	is_int(schema("identity-host.cfg", a), 0, "cloud-init schema accepts it");
	in.identity_host = false;
	in.identity_bootstrap = "bcb_0123abcd";
	ok(bootdata_cloud_config(&in, &b) == 0, "render a cold sandbox with a bootstrap value");
	ok(strstr(b, BOOTDATA_IDENTITY_ENDPOINT_PATH) && !strstr(b, BOOTDATA_IDENTITY_HOST_PATH) &&
	   strstr(b, BOOTDATA_IDENTITY_UNIT),
	   "the endpoint and the unit, no host marker");
	in.identity_bootstrap = NULL;
	ok(bootdata_cloud_config(&in, &c) == 0 && !strstr(c, "/etc/sandbox/identity") &&
	   !strstr(c, BOOTDATA_IDENTITY_UNIT), "without identity: none of it");
}

/* The block of docs/rebind.md that follows the line "`path`:" (a fenced
 * block), malloc'd, or NULL. */
static char *docs_block(const char *doc, const char *path)
{
	_cleanup_free_ char *mark = xasprintf("`%s`:\n\n```", path);
	const char *a = strstr(doc, mark), *b;

	if (!a || !(a = strchr(a + strlen(mark), '\n')))
		return NULL;
	a++;
	if (!(b = strstr(a, "\n```\n")))
		return NULL;
	return xasprintf("%.*s", (int)(b - a + 1), a);
}

/* One write_files entry of a rendered cloud-config, read back by a real
 * YAML parser: "<permissions>\n<content>" in *ret. */
static int written(const char *cfg_path, const char *path, char **ret)
{
	_cleanup_free_ char *cmd = xasprintf(
		"/usr/bin/python3 -c 'import sys, yaml\n"
		"for f in yaml.safe_load(open(sys.argv[1]))[\"write_files\"]:\n"
		"    if f[\"path\"] == sys.argv[2]: sys.stdout.write(f[\"permissions\"] + \"\\n\" + "
		"f[\"content\"])' %s %s", cfg_path, path);

	return run(cmd, ret);
}

/* The identity rebind's guest files (docs/rebind.md):
 * with the sandbox CA the cloud-config writes all three, byte for byte the
 * docs' blocks (read back by a real YAML parser), the script 0755; runcmd
 * reloads systemd and udev before sshd; without the CA none of it. */
static void test_rebind_files(void)
{
	static const struct {
		const char *path, *perm, *text;
	} files[] = {
		{BOOTDATA_REBIND_RULE_PATH, "0644", bootdata_rebind_rule},
		{BOOTDATA_REBIND_SERVICE_PATH, "0644", bootdata_rebind_service},
		{BOOTDATA_REBIND_SCRIPT_PATH, "0755", bootdata_rebind_script},
	};
	const struct bootdata_ssh_ca plain = {.account = "sandbox", .ca_public_key = CA_LINE};
	struct bootdata_in in = {.instance_id = ID, .ssh_ca = &plain, .ready_signal = true};
	_cleanup_free_ char *doc = NULL, *cc = NULL, *cfg = NULL, *bare = NULL;
	const char *src = getenv("BC_SRC");
	_cleanup_free_ char *docs = xasprintf("%s/docs/rebind.md", src ? src : ".");
	const char *udev, *reload;

	ok(file_read_all(docs, 1 << 20, &doc, NULL) == 0, "docs/rebind.md readable");
	ok(bootdata_cloud_config(&in, &cc) == 0, "render the CA part");
	cfg = write_tmp("rebind.cfg", cc, strlen(cc));
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *block = doc ? docs_block(doc, files[i].path) : NULL;
		_cleanup_free_ char *got = NULL, *want = xasprintf("%s\n%s", files[i].perm,
								     files[i].text);
		ok(block && strcmp(block, files[i].text) == 0, "%s: the docs block is the text",
		   files[i].path);
		is_int(written(cfg, files[i].path, &got), 0, "%s: written", files[i].path);
		ok(got && strcmp(got, want) == 0, "%s: byte for byte, mode %s", files[i].path,
		   files[i].perm);
	}
	udev = strstr(cc, "- [sh, -c, \"systemctl daemon-reload || true; udevadm control --reload");
	reload = strstr(cc, "- [sh, -c, \"systemctl reload ssh");
	ok(udev && reload && udev < reload,
	   "runcmd: daemon-reload, udevadm control --reload, then the sshd reload");
	is_int(schema("rebind.cfg", cc), 0, "cloud-init schema accepts it");
	in.ssh_ca = NULL;
	ok(bootdata_cloud_config(&in, &bare) == 0 && !strstr(bare, "bc-rebind") &&
	   !strstr(bare, "udevadm"), "without the CA: no rebind files");
	{
		_cleanup_free_ char *out = NULL, *sh = write_tmp("bc-rebind", bootdata_rebind_script,
								 strlen(bootdata_rebind_script));
		_cleanup_free_ char *cmd = xasprintf("sh -n %s 2>&1 && dash -n %s 2>&1", sh, sh);
		is_int(run(cmd, &out), 0, "the script parses in sh and dash");
	}
}

int main(void)
{
	if (!mkdtemp(tmpdir))
		abort();
	test_mime();
	test_no_user_data();
	test_escaping();
	test_ssh_ca();
	test_ca_golden();
	test_ready_golden();
	test_host_key_sshd();
	test_non_ascii_user_data();
	test_types_and_refusals();
	test_volumes();
	test_identity_files();
	test_identity_host();
	test_rebind_files();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf %s", tmpdir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", tmpdir);
	}
	done_testing();
}
