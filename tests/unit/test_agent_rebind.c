/* test_agent_rebind.c: bcd's side of the identity rebind (agent/
 * rebind_bundle.c, agent/rebind.c; docs/rebind.md): the
 * bundle reader accepts the controller's shape and refuses every
 * deviation; the archive is read back by GNU tar and Python's tarfile
 * (names, modes, contents) and leaves the acknowledgement area free; the
 * record survives a reopen (a finished rebind is not due again), failures
 * wait before the next attempt and a bundle the controller no longer has
 * is not asked for again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/rebind.h"
#include "agent/rebind_bundle.h"
#include "agent/runtime.h"
#include "tap.h"
#include "util.h"

#define ID "inst_01jdzq3m5n8p9r7s6t5v4w3x2y"
#define MAC "52:54:00:12:34:56"
#define KEY "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIBx0aGlzIGlzIG5vdCBhIHJlYWwga2V5IGJ1dCBpdCBwYXJzZXM=\\n" \
	    "-----END EC PRIVATE KEY-----\\n"
#define CERT "ecdsa-sha2-nistp256-cert-v01@openssh.com AAAAKGVjZHNhLXNoYTItbmlzdHAyNTYtY2VydC12MDFAb3BlbnNzaC5jb20= host"
#define NICS "[{\"mac\": \"" MAC "\", \"ipv4\": \"10.77.0.9\", \"ipv4Prefix\": 24, " \
	     "\"gateway4\": \"10.77.0.1\", \"ipv6\": \"fd00::5054:ff:fe12:3456\", " \
	     "\"ipv6Prefix\": 64, \"dns\": [\"10.77.0.1\"]}]"
#define GOOD "{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", " \
	     "\"hostKey\": \"" KEY "\", \"hostCertificate\": \"" CERT "\", \"nics\": " NICS "}"

static char tmpdir[] = "/tmp/bc-rebind.XXXXXX";

static int parse(const char *json, struct rb_bundle *b, char *why)
{
	return rb_bundle_parse(json, strlen(json), ID, b, why);
}

static void test_good(void)
{
	struct rb_bundle b;
	char why[RB_WHY_MAX];
	_cleanup_free_ char *net = NULL;

	is_int(parse(GOOD, &b, why), 0, "the controller's bundle parses");
	is_str(b.account, "sandbox", "account");
	is_str(b.principals, "sandbox@" ID "\n", "principals");
	ok(b.host_key && strncmp(b.host_key, "-----BEGIN EC PRIVATE KEY-----\n", 31) == 0, "host key");
	is_str(b.host_cert, CERT, "host certificate");
	is_int((int)b.n_nics, 1, "one NIC");
	is_str(b.nics[0].mac, MAC, "its MAC");
	ok(strcmp(b.nics[0].ipv4, "10.77.0.9") == 0 && b.nics[0].ipv4_prefix == 24 &&
	   strcmp(b.nics[0].gateway4, "10.77.0.1") == 0 && b.nics[0].ipv6_prefix == 64 &&
	   b.nics[0].n_dns == 1, "its addresses, gateway and resolver");
	net = rb_network_text(&b);
	is_str(net, "mac " MAC "\nipv4 10.77.0.9/24\ngateway4 10.77.0.1\n"
	       "ipv6 fd00::5054:ff:fe12:3456/64\nnameserver 10.77.0.1\n", "the network file");
	rb_bundle_clear(&b);
	ok(b.host_key == NULL && b.principals == NULL, "cleared");
	is_int(parse("{\"v\":1,\"account\":\"sandbox\",\"principals\":\"sandbox@" ID "\\n\"}", &b,
		     why), 0, "no host key, no NICs: accepted");
	ok(!b.host_key && !b.host_cert && b.n_nics == 0, "(nothing more)");
	rb_bundle_clear(&b);
	is_int(parse("{\"v\":1,\"account\":\"sandbox\",\"principals\":\"sandbox@" ID "\\n\","
		     "\"hostKey\":\"" KEY "\",\"hostCertificate\":\"" CERT "\\n\"}", &b, why), 0,
	       "a certificate line with its newline (as the controller signs it): accepted");
	is_str(b.host_cert, CERT, "(kept without the newline)");
	rb_bundle_clear(&b);
}

static void test_refusals(void)
{
	static const struct {
		const char *json, *what;
	} bad[] = {
		{"", "empty"},
		{"[]", "not an object"},
		{"{\"v\": 2, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"}", "version 2"},
		{"{\"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"}", "no version"},
		{"{\"v\": 01, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"}", "a leading zero"},
		{"{\"v\": 1, \"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"}", "a repeated key"},
		{"{\"v\": 1, \"x\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"}", "an unknown key"},
		{"{\"v\": 1, \"account\": \"root;x\", \"principals\": \"root;x@" ID "\\n\"}", "a bad account"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@inst_other\\n\"}", "principals of another instance"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\"}", "principals without a newline"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"other@" ID "\\n\"}", "another account's principal"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\nsandbox@a b\\n\"}", "a principal with a space"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"\"}", "no principals"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"hostKey\": \"" KEY "\"}", "a key without its certificate"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"hostCertificate\": \"" CERT "\"}", "a certificate without its key"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"hostKey\": \"not a key\", \"hostCertificate\": \"" CERT "\"}", "a key that is not PEM"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"hostKey\": \"" KEY "\", \"hostCertificate\": \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA\"}", "a plain key as certificate"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"hostKey\": \"" KEY "\", \"hostCertificate\": \"" CERT "\\nx\"}", "a certificate of two lines"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"52:54:00:12:34\"}]}", "a short MAC"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\", \"ipv4\": \"10.0.0.300\", \"ipv4Prefix\": 24}]}", "a bad address"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\", \"ipv4\": \"10.0.0.3\", \"ipv4Prefix\": 33}]}", "prefix 33"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\", \"gateway4\": \"10.0.0.1\"}]}", "a gateway without an address"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\"}, {\"mac\": \"" MAC "\"}]}", "a MAC twice"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\", \"dns\": [\"resolver.example\"]}]}", "a resolver that is not an address"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": [{\"mac\": \"" MAC "\", \"rogue\": 1}]}", "an unknown NIC key"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\", \"nics\": {}}", "nics not an array"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"} x", "bytes after the object"},
		{"{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID "\\n\"", "unterminated"},
	};
	struct rb_bundle b;
	char why[RB_WHY_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = parse(bad[i].json, &b, why);
		ok(r == -EINVAL && *why, "refused: %s (%s)", bad[i].what, why);
	}
	{
		const char nul[] = "{\"v\": 1}\0{}";
		ok(rb_bundle_parse(nul, sizeof(nul) - 1, ID, &b, why) == -EINVAL, "refused: a NUL byte");
	}
	{
		_cleanup_free_ char *big = xcalloc(1, RB_BUNDLE_MAX + 2);
		memset(big, ' ', RB_BUNDLE_MAX + 1);
		ok(rb_bundle_parse(big, RB_BUNDLE_MAX + 1, ID, &b, why) == -EINVAL,
		   "refused: over %d bytes", RB_BUNDLE_MAX);
	}
	{
		_cleanup_free_ char *five = xasprintf("{\"v\": 1, \"account\": \"sandbox\", \"principals\": "
			"\"sandbox@" ID "\\n\", \"nics\": [%s]}",
			"{\"mac\": \"52:54:00:00:00:01\"}, {\"mac\": \"52:54:00:00:00:02\"}, "
			"{\"mac\": \"52:54:00:00:00:03\"}, {\"mac\": \"52:54:00:00:00:04\"}, "
			"{\"mac\": \"52:54:00:00:00:05\"}");
		ok(parse(five, &b, why) == -EINVAL, "refused: five NICs (%s)", why);
	}
}

static int run(const char *cmd, char **out)
{
	FILE *p = popen(cmd, "r");
	char *buf = xcalloc(1, 65536);
	size_t n = 0;
	int st;

	if (!p)
		abort();
	while (n < 65535) {
		size_t k = fread(buf + n, 1, 65535 - n, p);
		if (k == 0)
			break;
		n += k;
	}
	st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define NONCE "0123456789abcdef0123456789abcdef"

static void test_tar(void)
{
	struct rb_bundle b;
	char why[RB_WHY_MAX];
	void *tar = NULL;
	size_t len = 0;
	_cleanup_free_ char *path = xasprintf("%s/bundle.tar", tmpdir), *out = NULL, *cmd = NULL;
	_cleanup_free_ char *py = NULL;

	is_int(parse(GOOD, &b, why), 0, "parse for the archive");
	is_int(rb_tar(&b, NONCE, &tar, &len), 0, "the archive is built");
	ok(len % 512 == 0 && len <= RB_DISK_BYTES - RB_ACK_BYTES, "blocks, clear of the ack area");
	ok(file_write_atomic(path, tar, len, 0600) == 0, "written");
	cmd = xasprintf("tar --numeric-owner -tvf %s | awk '{print $1, $2, $3, $6}'", path);
	is_int(run(cmd, &out), 0, "GNU tar lists it");
	is_str(out, "-rw------- 0/0 33 nonce\n-rw------- 0/0 8 account\n"
	       "-rw------- 0/0 40 principals\n-rw------- 0/0 112 network\n"
	       "-rw------- 0/0 121 host_key\n-rw------- 0/0 107 host_key-cert.pub\n",
	       "names, modes, owners and sizes in order");
	free(out);
	free(cmd);
	cmd = xasprintf("tar -xOf %s nonce account principals host_key-cert.pub", path);
	is_int(run(cmd, &out), 0, "GNU tar extracts it");
	is_str(out, NONCE "\nsandbox\nsandbox@" ID "\n" CERT "\n", "contents");
	free(out);
	py = xasprintf("/usr/bin/python3 -c 'import tarfile, sys\n"
		       "t = tarfile.open(sys.argv[1])\n"
		       "print(\",\".join(m.name + \":\" + oct(m.mode) + (\":ok\" if m.isreg() else \"\") "
		       "for m in t.getmembers()))\n"
		       "sys.stdout.write(t.extractfile(\"host_key\").read().decode())' %s", path);
	is_int(run(py, &out), 0, "Python's tarfile reads it");
	ok(strstr(out, "nonce:0o600:ok,account:0o600:ok,principals:0o600:ok,network:0o600:ok,"
		       "host_key:0o600:ok,host_key-cert.pub:0o600:ok\n-----BEGIN EC PRIVATE KEY-----\n")
	   == out, "every member a regular 0600 file; the key intact");
	free(tar);
	tar = NULL;
	ok(rb_tar(&b, "0123", &tar, &len) == -EINVAL && rb_tar(&b, "0123456789ABCDEF0123456789ABCDEF",
							      &tar, &len) == -EINVAL,
	   "a nonce not of 32 lower-case hex digits is refused");
	free(b.principals);
	b.principals = xcalloc(1, RB_DISK_BYTES);
	memset(b.principals, 'a', RB_DISK_BYTES - 1);
	is_int(rb_tar(&b, NONCE, &tar, &len), -E2BIG, "an archive reaching the ack area is refused");
	rb_bundle_clear(&b);
	{
		struct rb_bundle plain;
		_cleanup_free_ char *lst = NULL, *c2 = NULL;
		is_int(parse("{\"v\":1,\"account\":\"sandbox\",\"principals\":\"sandbox@" ID "\\n\"}",
			     &plain, why), 0, "a bundle without a host key");
		is_int(rb_tar(&plain, NONCE, &tar, &len), 0, "its archive");
		ok(file_write_atomic(path, tar, len, 0600) == 0, "written");
		c2 = xasprintf("tar -tf %s", path);
		is_int(run(c2, &lst), 0, "listed");
		is_str(lst, "nonce\naccount\nprincipals\nnetwork\n", "no host_key members");
		free(tar);
		rb_bundle_clear(&plain);
	}
}

/* ---------------------------------------------------------- the record */

static const char *fetch_answer;   /* NULL: NOT_FOUND */
static int fetches, rebinds, rebind_error;

static int fetch(void *ctx, const char *id, const char *ref, void **ret, size_t *ret_len,
		 char *reason)
{
	(void)ctx;
	(void)id;
	(void)ref;
	fetches++;
	if (!fetch_answer) {
		snprintf(reason, RT_REASON_MAX, "NOT_FOUND: no boot data");
		return -ENOENT;
	}
	*ret = xstrdup(fetch_answer);
	*ret_len = strlen(fetch_answer);
	return 0;
}

static int t_rebind(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const void *tar,
		    size_t len, const char *nonce, char *reason)
{
	(void)rt;
	(void)s;
	(void)tar;
	(void)len;
	(void)nonce;
	rebinds++;
	if (rebind_error)
		snprintf(reason, RT_REASON_MAX, "the guest said nothing");
	return rebind_error;
}

static const struct runtime_ops t_ops = {.name = "test", .rebind = t_rebind};

static void test_record(void)
{
	struct rt rt = {.ops = &t_ops};
	Bc__Node__V1__NicSpec nic = BC__NODE__V1__NIC_SPEC__INIT, *nics[] = {&nic};
	Bc__Node__V1__InstanceSpec s = BC__NODE__V1__INSTANCE_SPEC__INIT, *specs[] = {&s};
	Bc__Node__V1__NodeSpec spec = BC__NODE__V1__NODE_SPEC__INIT;
	struct rebind *rb = NULL;
	char reason[RT_REASON_MAX], ref[REBIND_REF_MAX], why[RT_REASON_MAX];
	_cleanup_free_ char *text = NULL, *path = xasprintf("%s/" REBIND_FILE, tmpdir);

	nic.mac = MAC;
	s.id = ID;
	s.nics = nics;
	s.n_nics = 1;
	s.identity_rebind_ref = "sealed_one";
	spec.instances = specs;
	spec.n_instances = 1;
	fetch_answer = GOOD;
	is_int(rebind_open(tmpdir, fetch, NULL, &rb), 0, "open without a record");
	ok(rebind_due(rb, &s), "due: the spec names a bundle");
	is_int(rebind_run(rb, &rt, &s, reason), 0, "delivered");
	ok(fetches == 1 && rebinds == 1, "fetched once, handed to the runtime once");
	ok(!rebind_due(rb, &s), "not due once applied");
	rebind_status(rb, ID, ref, why);
	ok(strcmp(ref, "sealed_one") == 0 && !*why, "status: the applied ref, no failure");
	ok(file_read_all(path, 4096, &text, NULL) == 0 &&
	   strcmp(text, "{\"" ID "\": \"sealed_one\"}") == 0, "the record on disk");
	rebind_free(rb);
	is_int(rebind_open(tmpdir, fetch, NULL, &rb), 0, "reopened");
	ok(!rebind_due(rb, &s), "a finished rebind is not due after a restart");
	s.identity_rebind_ref = "sealed_two";
	ok(rebind_due(rb, &s), "another ref is");
	rebind_error = -ETIMEDOUT;
	is_int(rebind_run(rb, &rt, &s, reason), -ETIMEDOUT, "the guest does not answer");
	ok(strstr(reason, "IdentityRebind: the guest said nothing") == reason, "reason: %s", reason);
	ok(!rebind_due(rb, &s), "not due again at once (it waits)");
	rebind_status(rb, ID, ref, why);
	ok(strcmp(ref, "sealed_one") == 0 && strcmp(why, reason) == 0,
	   "status: the old ref, the failure's reason");
	s.identity_rebind_ref = "sealed_three";
	fetch_answer = NULL;
	ok(rebind_due(rb, &s), "a new ref is due at once");
	is_int(rebind_run(rb, &rt, &s, reason), -ENOENT, "a bundle the controller does not have");
	ok(!rebind_due(rb, &s), "is not asked for again");
	s.identity_rebind_ref = "sealed_four";
	fetch_answer = "{\"v\": 1, \"account\": \"sandbox\", \"principals\": \"sandbox@" ID
		       "\\n\", \"nics\": [{\"mac\": \"52:54:00:99:99:99\"}]}";
	rebinds = 0;
	ok(rebind_run(rb, &rt, &s, reason) == -EBADMSG && rebinds == 0 &&
	   strstr(reason, "not the instance's"), "a NIC of another MAC: refused before the runtime");
	spec.n_instances = 0;
	rebind_gc(rb, &spec);
	free(text);
	text = NULL;
	ok(file_read_all(path, 4096, &text, NULL) == 0 && strcmp(text, "{}") == 0,
	   "an instance the spec no longer names leaves the record");
	rebind_free(rb);
	ok(file_write_atomic(path, "{\"" ID "\": 1}", 32, 0600) == 0 &&
	   rebind_open(tmpdir, fetch, NULL, &rb) == 0, "a record that does not parse opens empty");
	s.identity_rebind_ref = "sealed_one";
	ok(rebind_due(rb, &s), "(so its rebinds run again)");
	rebind_free(rb);
}

/* The guest's acknowledgement at the start of the disk's last 4 KiB. */
static void test_ack(void)
{
	const char *nonce = "0123456789abcdef0123456789abcdef";
	char area[64] = "BCREBOUND 0123456789abcdef0123456789abcdef\n";

	ok(rb_ack_ok(area, sizeof(area), nonce), "the acknowledgement of this nonce");
	ok(!rb_ack_ok(area, 42, nonce), "... cut before its newline: not yet");
	ok(!rb_ack_ok(area, sizeof(area), "0123456789abcdef0123456789abcdee"), "another nonce: no");
	ok(!rb_ack_ok(area, sizeof(area), "0123"), "a short nonce: no");
	area[42] = ' ';
	ok(!rb_ack_ok(area, sizeof(area), nonce), "no newline after the nonce: no");
	memset(area, 0, sizeof(area));
	ok(!rb_ack_ok(area, sizeof(area), nonce), "zeros (no answer yet): no");
}

int main(void)
{
	if (!mkdtemp(tmpdir))
		abort();
	test_good();
	test_refusals();
	test_tar();
	test_record();
	test_ack();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf %s", tmpdir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", tmpdir);
	}
	done_testing();
}
