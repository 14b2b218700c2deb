/* test_ctl_envfile.c: the /etc/sandbox/env renderer (bootdata_env_render)
 * against real shells. 1,000 random values, biased toward the bytes a
 * shell treats specially (quotes, newlines, $, backslashes, backquotes,
 * control and non-ASCII bytes), are each rendered, sourced by
 * `sh -c '. file; printf %s "$X"'` (dash; every tenth by bash too), and must come back
 * byte for byte; a file of several assignments gives each its own value;
 * names that are not shell names, NUL bytes and too many entries are
 * refused; the platform cloud-config carrying the file (base64, root,
 * 0600) passes `cloud-init schema`, and cloud-init's own mergers keep it
 * when the caller's cloud-config writes files of its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/bootdata.h"
#include "err.h"
#include "tap.h"
#include "util.h"

static char dir[] = "/tmp/bc-envfile-XXXXXX";

/* Run shell sh on `. path; printf %s "$var"`; the output into out. */
static int source_print(const char *sh, const char *path, const char *var, char *out,
			size_t cap, size_t *ret_len)
{
	_cleanup_free_ char *cmd = xasprintf("%s -c '. \"$0\"; printf %%s \"$%s\"' %s", sh, var,
					     path);
	FILE *p = popen(cmd, "r");
	size_t n;

	if (!p)
		return -errno;
	n = fread(out, 1, cap, p);
	if (pclose(p) != 0)
		return -EIO;
	*ret_len = n;
	return 0;
}

static int write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(data, 1, len, f) != len) {
		if (f)
			fclose(f);
		return -EIO;
	}
	return fclose(f) == 0 ? 0 : -EIO;
}

/* A random value of 0..max bytes, never NUL. */
static size_t random_value(char *v, size_t max)
{
	static const char special[] = "'\"\n$\\`!*?[]{}~#&|;<>() \t=%-";
	size_t len = (size_t)rand() % (max + 1);

	for (size_t i = 0; i < len; i++) {
		switch (rand() % 4) {
		case 0:
			v[i] = special[rand() % (int)(sizeof(special) - 1)];
			break;
		case 1:
			v[i] = (char)(0x80 + rand() % 0x80);          /* non-ASCII */
			break;
		default:
			v[i] = (char)(1 + rand() % 255);              /* any byte but NUL */
		}
	}
	return len;
}

/* Render one assignment X=v, source it with sh, compare. */
static bool round_trips(const char *sh, const char *v, size_t len)
{
	const struct bootdata_env e = {.name = "X", .value = v, .len = len};
	_cleanup_free_ char *text = NULL, *path = xasprintf("%s/env", dir);
	static char got[1 << 16];
	size_t n = 0, tlen = 0;

	if (bootdata_env_render(&e, 1, &text, &tlen) < 0 || write_file(path, text, tlen) < 0 ||
	    source_print(sh, path, "X", got, sizeof(got), &n) < 0)
		return false;
	return n == len && memcmp(got, v, len) == 0;
}

static void random_values(void)
{
	static char v[512];
	int dash_ok = 0, bash_ok = 0;

	srand(14);
	for (int i = 0; i < 1000; i++) {
		size_t len = random_value(v, sizeof(v));
		/* bash on every tenth: a fork costs more than the render */
		bool d = round_trips("sh", v, len), b = i % 10 ? true : round_trips("bash", v, len);
		dash_ok += d;
		bash_ok += b;
		if (!d || !b) {
			char hex[2 * sizeof(v) + 1];
			hex_encode(v, len, hex);
			printf("# value %d does not round-trip (sh %d, bash %d): %s\n", i, d, b, hex);
		}
	}
	is_int(dash_ok, 1000,
	       "1,000 random values round-trip through `sh -c '. file; printf %%s \"$X\"'`");
	is_int(bash_ok, 1000, "... and 100 of them through bash");
}

static void fixed_values(void)
{
	static const char *const tricky[] = {
		"it's", "'", "''", "a'b'c'", "\"$HOME\"", "$(id)", "`id`", "\\", "\\'", "line\nline\n",
		"\n", "trailing\\", "é€😀", "\xff\xfe\x80", "${X:-y}", "!!", "' ; echo pwned; '",
	};

	for (size_t i = 0; i < ARRAY_SIZE(tricky); i++)
		ok(round_trips("sh", tricky[i], strlen(tricky[i])), "round-trips: %s", tricky[i]);
}

static void several(void)
{
	const struct bootdata_env e[] = {
		{"API_KEY", "k'1", 3}, {"DB_PASSWORD", "p\n2", 3}, {"_x9", "$API_KEY", 8},
	};
	_cleanup_free_ char *text = NULL, *path = xasprintf("%s/env3", dir);
	char got[64];
	size_t tlen = 0, n = 0;

	ok(bootdata_env_render(e, 3, &text, &tlen) == 0, "three assignments render");
	is_str(text, "# /etc/sandbox/env: the sandbox template's env (set -a; . /etc/sandbox/env)\n"
	       "API_KEY='k'\\''1'\nDB_PASSWORD='p\n2'\n_x9='$API_KEY'\n",
	       "one NAME='value' a line, ' written '\\''");
	ok(write_file(path, text, tlen) == 0, "written");
	for (size_t i = 0; i < ARRAY_SIZE(e); i++)
		ok(source_print("sh", path, e[i].name, got, sizeof(got), &n) == 0 && n == e[i].len &&
		   memcmp(got, e[i].value, n) == 0, "%s has its own value ($ not expanded)", e[i].name);
}

static void refusals(void)
{
	static const char *const bad[] = {"", "1X", "A-B", "A B", "A=B", "é", "A\n"};
	struct bootdata_env many[BOOTDATA_ENV_MAX + 1];
	char *text = NULL;
	size_t len;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		const struct bootdata_env e = {bad[i], "v", 1};
		is_int(bootdata_env_render(&e, 1, &text, &len), -EINVAL, "name '%s' is refused", bad[i]);
	}
	const struct bootdata_env nul = {"X", "a\0b", 3};
	is_int(bootdata_env_render(&nul, 1, &text, &len), -EINVAL, "a NUL byte is refused");
	for (size_t i = 0; i < ARRAY_SIZE(many); i++)
		many[i] = (struct bootdata_env){"X", "v", 1};
	is_int(bootdata_env_render(many, ARRAY_SIZE(many), &text, &len), -EINVAL,
	       "more than %d entries are refused", BOOTDATA_ENV_MAX);
	ok(bootdata_env_name_ok("_A1") && !bootdata_env_name_ok("9"), "shell names");
}

static void in_cloud_config(void)
{
	const struct bootdata_env e[] = {{"K", "v'\n\xff", 4}};
	const struct bootdata_ssh_ca ca = {.account = "sandbox",
					   .ca_public_key = "ssh-ed25519 AAAAC3Nza ca"};
	struct bootdata_in in = {.instance_id = "inst_01jdzq3m5n8p9r7s6t5v4w3x2y", .env = e,
				 .n_env = 1};
	_cleanup_free_ char *cc = NULL, *cc2 = NULL, *path = xasprintf("%s/cc.yaml", dir);
	_cleanup_free_ char *cmd = xasprintf("cloud-init schema --config-file %s >/dev/null 2>&1",
					     path);

	ok(bootdata_cloud_config(&in, &cc) == 0, "a cloud-config with the env file renders");
	ok(strstr(cc, "write_files:\n  - path: /etc/sandbox/env\n    owner: \"root:root\"\n"
		  "    permissions: \"0600\"\n    encoding: b64\n    content: ") != NULL,
	   "/etc/sandbox/env: root:root, 0600, base64");
	ok(write_file(path, cc, strlen(cc)) == 0 && system(cmd) == 0, "cloud-init schema accepts it");
	in.ssh_ca = &ca;
	ok(bootdata_cloud_config(&in, &cc2) == 0, "with the sandbox SSH CA too");
	ok(strstr(cc2, "\nwrite_files:\n") && strstr(cc2, "bc_sandbox_ca.pub") &&
	   strstr(cc2, "/etc/sandbox/env") && !strstr(strstr(cc2, "write_files:") + 1, "write_files:"),
	   "one write_files list holds the CA's files and the env file");
	ok(write_file(path, cc2, strlen(cc2)) == 0 && system(cmd) == 0, "cloud-init schema accepts it");
}

/* cloud-init's own mergers over the parts of a rendered MIME multipart, as
 * its cloud-config part handler applies them (each part's Merge-Type, else
 * the default): the write_files paths and the hostname of the result. */
static const char merge_py[] =
	"import copy, email, sys\n"
	"sys.path.insert(0, '/usr/lib/python3/dist-packages')\n"
	"import importlib.util, yaml\n"
	"from cloudinit import mergers\n"
	"m = email.message_from_bytes(open(sys.argv[1], 'rb').read())\n"
	"buf = {}\n"
	"for p in m.get_payload():\n"
	"    how = p.get('Merge-Type') or 'dict(replace)+list()+str()'\n"
	"    mg = mergers.construct(mergers.string_extract_mergers(how))\n"
	"    buf = mg.merge(buf, yaml.safe_load(p.get_payload(decode=True)))\n"
	"print(' '.join(w['path'] for w in buf.get('write_files', [])), buf['hostname'])\n";

static void merged_with_user_files(void)
{
	const struct bootdata_env e[] = {{"K", "v", 1}};
	const struct bootdata_in in = {
		.instance_id = "inst_01jdzq3m5n8p9r7s6t5v4w3x2y", .env = e, .n_env = 1,
		.user_data = "#cloud-config\nhostname: evil\nwrite_files:\n  - path: /tmp/user\n"
			     "    content: hi\n"};
	_cleanup_free_ char *mime = NULL, *path = xasprintf("%s/mime", dir);
	_cleanup_free_ char *py = xasprintf("%s/merge.py", dir);
	_cleanup_free_ char *cmd = xasprintf("/usr/bin/python3 %s %s 2>&1", py, path);
	bc_error err = {0};
	char out[256] = "";
	size_t len = 0;
	FILE *p;

	ok(bootdata_render(&in, &mime, &len, &err) == 0, "user data with write_files renders");
	ok(strstr(mime, "Merge-Type: " "dict(recurse_array)+list(append)+str()") != NULL,
	   "the caller's cloud-config carries a Merge-Type");
	ok(write_file(path, mime, len) == 0 && write_file(py, merge_py, strlen(merge_py)) == 0,
	   "written");
	p = popen(cmd, "r");
	if (p) {
		if (!fgets(out, sizeof(out), p))
			out[0] = '\0';
		pclose(p);
	}
	is_str(out, "/etc/sandbox/env /tmp/user inst-01jdzq3m5n8p9r7s6t5v4w3x2y\n",
	       "cloud-init's mergers keep /etc/sandbox/env beside the caller's files, and the "
	       "platform's hostname");
}

int main(void)
{
	if (!mkdtemp(dir)) {
		printf("Bail out! mkdtemp\n");
		return 1;
	}
	fixed_values();
	several();
	refusals();
	in_cloud_config();
	merged_with_user_files();
	random_values();
	_cleanup_free_ char *rm = xasprintf("rm -rf %s", dir);
	if (system(rm) != 0)
		printf("# could not remove %s\n", dir);
	done_testing();
}
