/* test_sshcert.c: common/sshcert against stock OpenSSH.
 *
 * Every certificate we sign is listed by the real `ssh-keygen -L`, and
 * every field it prints is compared with what was asked (type, key and CA
 * fingerprints as `ssh-keygen -l` computes them, key id, serial, validity,
 * principals, critical options, extensions). A flipped signature byte must
 * make ssh-keygen refuse the certificate. When sshd is installed and we are
 * root, a real sshd on a loopback port accepts our user certificate and
 * presents our host certificate, and refuses a wrong principal, an expired
 * certificate and one from another CA. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pki.h"
#include "sshcert.h"
#include "tap.h"
#include "util.h"

static char dir[] = "/tmp/bc-sshcert-XXXXXX";

/* Run a shell command, its stdout+stderr in *out (malloc'd); exit status. */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
	char *cmd, *buf = NULL, line[1024];
	size_t len = 0;
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	if (vasprintf(&cmd, fmt, ap) < 0)
		abort();
	va_end(ap);
	p = popen(cmd, "r");
	free(cmd);
	if (!p)
		abort();
	while (fgets(line, sizeof(line), p)) {
		size_t n = strlen(line);
		buf = realloc(buf, len + n + 1);
		memcpy(buf + len, line, n + 1);
		len += n;
	}
	st = pclose(p);
	if (out)
		*out = buf ? buf : xstrdup("");
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_str(const char *name, const char *s)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, name);

	if (file_write_atomic(p, s, strlen(s), 0600) < 0)
		abort();
}

static char *read_line(const char *name)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, name);
	char *s = NULL;

	if (file_read_all(p, 1 << 16, &s, NULL) < 0)
		return NULL;
	s[strcspn(s, "\n")] = '\0';
	return s;
}

/* The SHA256:... fingerprint `ssh-keygen -l` prints for a key file. */
static char *fingerprint(const char *name)
{
	_cleanup_free_ char *out = NULL;
	char *s, *e;

	if (run(&out, "ssh-keygen -l -f %s/%s 2>&1", dir, name) != 0 ||
	    !(s = strstr(out, "SHA256:")))
		return xstrdup("?");
	e = s + strcspn(s, " \n");
	return strndup(s, (size_t)(e - s));
}

/* A new subject key of type t ("ed25519" or "ecdsa"), parsed. */
static int make_key(const char *name, const char *t, struct sshcert_pubkey *k)
{
	_cleanup_free_ char *pub = NULL, *pubname = xasprintf("%s.pub", name);
	const char *w = NULL;

	if (run(NULL, "ssh-keygen -q -t %s %s -N '' -C 'u@test' -f %s/%s", t,
		strcmp(t, "ecdsa") == 0 ? "-b 256" : "", dir, name) != 0 ||
	    !(pub = read_line(pubname)))
		return -1;
	return sshcert_pubkey_parse(pub, k, &w);
}

/* The value of "Field: value" in ssh-keygen -L output, trimmed. */
static char *field(const char *out, const char *name)
{
	_cleanup_free_ char *pat = xasprintf("\n        %s: ", name);
	const char *s = strstr(out, pat);

	if (!s)
		return xstrdup("(missing)");
	s += strlen(pat);
	return strndup(s, strcspn(s, "\n"));
}

/* The indented list under "Field:" (one item a line) joined by ','. */
static char *list(const char *out, const char *name)
{
	_cleanup_free_ char *pat = xasprintf("\n        %s: ", name);
	const char *s = strstr(out, pat);
	char *res = xstrdup("");

	if (!s)
		return res;
	s = strchr(s + 1, '\n');
	while (s && strncmp(s, "\n                ", 17) == 0) {
		const char *b = s + 17;
		size_t n = strcspn(b, "\n");
		char *nr = xasprintf("%s%s%.*s", res, *res ? "," : "", (int)n, b);
		free(res);
		res = nr;
		s = b + n;
	}
	return res;
}

static char *iso(int64_t t)
{
	char b[32];
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
	return xstrdup(b);
}

struct want {
	const char *type, *key_fp, *ca_fp, *key_id, *principals, *extensions;
	uint64_t serial;
	int64_t after, before;
};

/* Write cert to <name>, list it with ssh-keygen -L, compare every field. */
static void check_cert(const char *what, const char *name, const char *cert,
		       const struct want *w)
{
	_cleanup_free_ char *out = NULL, *type = NULL, *pk = NULL, *ca = NULL, *id = NULL,
			    *serial = NULL, *valid = NULL, *pr = NULL, *crit = NULL, *ext = NULL,
			    *a = iso(w->after), *b = iso(w->before), *want_valid = NULL,
			    *want_id = xasprintf("\"%s\"", w->key_id),
			    *want_serial = xasprintf("%llu", (unsigned long long)w->serial);
	int rc;

	write_str(name, cert);
	rc = run(&out, "TZ=UTC ssh-keygen -L -f %s/%s 2>&1", dir, name);
	is_int(rc, 0, "%s: ssh-keygen -L lists it", what);
	if (rc != 0)
		printf("# %s", out);
	type = field(out, "Type");
	pk = field(out, "Public key");
	ca = field(out, "Signing CA");
	id = field(out, "Key ID");
	serial = field(out, "Serial");
	valid = field(out, "Valid");
	crit = field(out, "Critical Options");
	pr = list(out, "Principals");
	ext = list(out, "Extensions");
	want_valid = xasprintf("from %s to %s", a, b);
	is_str(type, w->type, "%s: Type", what);
	ok(strstr(pk, w->key_fp) != NULL, "%s: Public key is the subject's (%s)", what, pk);
	ok(strstr(ca, w->ca_fp) != NULL && strstr(ca, "(using ssh-ed25519)"),
	   "%s: Signing CA is ours (%s)", what, ca);
	is_str(id, want_id, "%s: Key ID", what);
	is_str(serial, want_serial, "%s: Serial", what);
	is_str(valid, want_valid, "%s: Valid", what);
	is_str(pr, w->principals, "%s: Principals", what);
	is_str(crit, "(none)", "%s: no critical options", what);
	if (*w->extensions)
		is_str(ext, w->extensions, "%s: Extensions", what);
	else
		is_str(ext = (free(ext), field(out, "Extensions")), "(none)", "%s: no extensions",
		       what);
}

/* The certificate with one base64 character of its signature changed. */
static char *tamper(const char *cert)
{
	char *t = xstrdup(cert), *sp = strchr(t, ' '), *e = strchr(sp + 1, ' ');
	char *c = e - 6;

	*c = *c == 'A' ? 'B' : 'A';
	return t;
}

static void test_parse(void)
{
	struct sshcert_pubkey k;
	const char *w = NULL;
	uint8_t blob[128];
	char b64[256], *line;
	struct {
		const char *line, *why;
	} bad[] = {
		{"", "empty"},
		{"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 me", "ssh-rsa"},
		{"ssh-dss AAAAB3NzaC1kc3MAAACBAP me", "not an ssh-ed25519"},
		{"ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQ= x", "nistp256 curve"},
		{"sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t", "security-key"},
		{"ssh-ed25519-cert-v01@openssh.com AAAA x", "certificate"},
		{"ssh-ed25519", "TYPE BASE64"},
		{"ssh-ed25519 !!!!", "base64"},
		{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA", "base64"},
		/* "ssh-ed25519" and a 31-byte key */
		{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAHwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
		 "malformed"},
		{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxqL3LrKu4tUNlQc8bXGkRqx4ZgWlCNIWmmS1WvmIrM\nx",
		 "control character"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		w = NULL;
		ok(sshcert_pubkey_parse(bad[i].line, &k, &w) < 0 && w && strstr(w, bad[i].why),
		   "refused: %.40s... (%s)", bad[i].line, w ? w : "accepted");
	}
	ok(sshcert_pubkey_parse(
		   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxqL3LrKu4tUNlQc8bXGkRqx4ZgWlCNIWmmS1WvmIrM",
		   &k, &w) == 0 && k.type == SSHCERT_KEY_ED25519 && k.blob_len == 51,
	   "an ed25519 line without a comment parses");
	ok(sshcert_pubkey_parse(
		   "ecdsa-sha2-nistp256 AAAAC3NzaC1lZDI1NTE5AAAAIDxqL3LrKu4tUNlQc8bXGkRqx4ZgWlCNIWmmS1WvmIrM",
		   &k, &w) < 0, "an ed25519 blob under the ecdsa type is refused");
	/* an ECDSA point that is not on the curve: a valid key with Y changed */
	{
		struct sshcert_pubkey good;
		ok(make_key("p256", "ecdsa", &good) == 0, "ssh-keygen's P-256 key parses");
		memcpy(blob, good.blob, good.blob_len);
		blob[good.blob_len - 1] ^= 1;
		EVP_EncodeBlock((unsigned char *)b64, blob, (int)good.blob_len);
		line = xasprintf("ecdsa-sha2-nistp256 %s", b64);
		ok(sshcert_pubkey_parse(line, &k, &w) < 0 && strstr(w, "not a point"),
		   "a P-256 point off the curve is refused (%s)", w);
		free(line);
		/* and one trailing byte after a good blob */
		memcpy(blob, good.blob, good.blob_len);
		blob[good.blob_len] = 0;
		EVP_EncodeBlock((unsigned char *)b64, blob, (int)good.blob_len + 1);
		line = xasprintf("ecdsa-sha2-nistp256 %s", b64);
		ok(sshcert_pubkey_parse(line, &k, &w) < 0, "a trailing byte in the blob is refused");
		free(line);
	}
}

static void test_ca_line(const char *ca_line_full)
{
	_cleanup_free_ char *ca_line = strndup(ca_line_full, strcspn(ca_line_full, " ") + 1 +
				       strcspn(ca_line_full + strcspn(ca_line_full, " ") + 1, " "));
	const char *w = NULL;
	char c64[65], c65[66];
	_cleanup_free_ char *l64 = NULL, *l65 = NULL, *two = NULL, *tab = NULL, *lead = NULL,
			    *sp = NULL;

	memset(c64, 'x', 64);
	c64[64] = '\0';
	c64[10] = ' ';
	memset(c65, 'y', 65);
	c65[65] = '\0';
	l64 = xasprintf("%s %s", ca_line, c64);
	l65 = xasprintf("%s %s", ca_line, c65);
	two = xasprintf("%s\n%s", ca_line, ca_line);
	tab = xasprintf("%s a\tb", ca_line);
	lead = xasprintf(" %s", ca_line);
	sp = xasprintf("%s ", ca_line);
	is_int(sshcert_ca_line_check(ca_line_full, &w), 0, "CA line: our public line is accepted");
	is_int(sshcert_ca_line_check(ca_line, &w), 0, "CA line: without a comment");
	is_int(sshcert_ca_line_check(l64, &w), 0, "CA line: a 64-character comment with a space");
	ok(sshcert_ca_line_check(l65, &w) == -EINVAL && strstr(w, "64"),
	   "CA line: a 65-character comment is refused");
	is_int(sshcert_ca_line_check(two, &w), -EINVAL, "CA line: two lines are refused");
	is_int(sshcert_ca_line_check(tab, &w), -EINVAL, "CA line: a tab in the comment");
	is_int(sshcert_ca_line_check(lead, &w), -EINVAL, "CA line: a leading space");
	is_int(sshcert_ca_line_check(sp, &w), -EINVAL, "CA line: an empty comment");
	is_int(sshcert_ca_line_check("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7", &w), -EINVAL,
	       "CA line: ssh-rsa is refused");
	is_int(sshcert_ca_line_check(NULL, &w), -EINVAL, "CA line: none");
}

static void test_account(void)
{
	const char *good[] = {"sandbox", "_x", "a-b_9", "abcdefghijklmnopqrstuvwxyz012345"};
	const char *bad[] = {"", "Root", "9a", "-a", "a b", "a.b", "a@b",
			     "abcdefghijklmnopqrstuvwxyz0123456"};

	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		ok(sshcert_account_valid(good[i]), "account '%s' is valid", good[i]);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ok(!sshcert_account_valid(bad[i]), "account '%s' is refused", bad[i]);
}

static struct sshcert_ca *make_ca(const char *name, char **ret_line)
{
	char *pem = NULL, *line = NULL;
	struct sshcert_ca *ca = NULL;
	_cleanup_free_ char *pubname = xasprintf("%s.pub", name);

	if (sshcert_ca_generate(&pem) < 0 || sshcert_ca_load(pem, &ca) < 0 ||
	    sshcert_ca_public_line(ca, "bc sandbox CA", &line) < 0)
		abort();
	write_str(name, pem);
	write_str(pubname, line);
	sshcert_free_secret(pem);
	*ret_line = line;
	return ca;
}

/* The certificates, listed by ssh-keygen. */
static void test_certs(struct sshcert_ca *ca, const char *ca_fp)
{
	struct sshcert_pubkey ed, ec;
	char *cert = NULL;
	_cleanup_free_ char *ed_fp = NULL, *ec_fp = NULL, *out = NULL;
	int64_t now = time(NULL), vb = 0;
	struct sshcert_user u = {"sandbox", "inst_01TEST", "idn_01ME", "sbx_01BOX", "ssh_01GRANT",
				 1234567890123ULL, now, 10, 0};
	struct want w = {"ssh-ed25519-cert-v01@openssh.com user certificate", NULL, ca_fp,
			 "bc:idn_01ME:sbx_01BOX:ssh_01GRANT", "sandbox@inst_01TEST", "permit-pty",
			 1234567890123ULL, now - 60, now + 600};
	_cleanup_free_ char *bad = NULL;

	ok(make_key("ed", "ed25519", &ed) == 0, "ssh-keygen's ed25519 key parses");
	ok(make_key("ec", "ecdsa", &ec) == 0, "ssh-keygen's P-256 key parses");
	ed_fp = fingerprint("ed.pub");
	ec_fp = fingerprint("ec.pub");

	is_int(sshcert_sign_user(ca, &ed, &u, &cert, &vb), 0, "user certificate for ed25519");
	is_int(vb, now + 600, "ten minutes asked, ten given");
	w.key_fp = ed_fp;
	check_cert("user ed25519", "ed-cert.pub", cert, &w);
	bad = tamper(cert);
	write_str("bad-cert.pub", bad);
	ok(run(&out, "ssh-keygen -L -f %s/bad-cert.pub 2>&1", dir) != 0,
	   "a flipped signature byte: ssh-keygen refuses the certificate");
	free(cert);

	u.minutes = 15;
	u.cap = now + 300;
	u.serial = UINT64_MAX;
	is_int(sshcert_sign_user(ca, &ec, &u, &cert, &vb), 0, "user certificate for P-256");
	is_int(vb, now + 300, "capped at the sandbox's or token's expiry");
	w = (struct want){"ecdsa-sha2-nistp256-cert-v01@openssh.com user certificate", ec_fp,
			  ca_fp, "bc:idn_01ME:sbx_01BOX:ssh_01GRANT", "sandbox@inst_01TEST",
			  "permit-pty", UINT64_MAX, now - 60, now + 300};
	check_cert("user P-256 capped", "ec-cert.pub", cert, &w);
	free(cert);

	cert = NULL;
	is_int(sshcert_sign_host(ca, &ec, "inst_01test", 42, now, 0, &cert, &vb), 0,
	       "host certificate");
	is_int(vb, now + 30 * 86400, "thirty days");
	w = (struct want){"ecdsa-sha2-nistp256-cert-v01@openssh.com host certificate", ec_fp,
			  ca_fp, "host/inst_01test", "inst_01test", "", 42, now - 60,
			  now + 30 * 86400};
	check_cert("host P-256", "ec-host-cert.pub", cert, &w);
	free(cert);

	/* refusals: nothing is written to cert */
	cert = NULL;
	u = (struct sshcert_user){"sandbox", "inst_1", "idn_1", "sbx_1", "ssh_1", 1, now, 16, 0};
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -ERANGE, "16 minutes: refused");
	u.minutes = 0;
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -ERANGE, "0 minutes: refused");
	u.minutes = 5;
	u.cap = now;
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -ERANGE,
	       "a sandbox or token already expired: refused");
	u.cap = 0;
	u.account = "Root";
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -EINVAL, "a bad account: refused");
	u.account = "sandbox";
	u.grant_id = "tok_1";
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -EINVAL, "a grant not ssh_: refused");
	u.grant_id = "ssh_1";
	u.instance_id = "inst_1,inst_2";
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -EINVAL,
	       "an instance id with a comma (two principals): refused");
	u.instance_id = "inst_1";
	u.identity_id = "idn_1:sbx_2";
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -EINVAL,
	       "an identity id with ':' (an ambiguous key id): refused");
	u.identity_id = "idn_1";
	u.instance_id = "inst_1 x";
	is_int(sshcert_sign_user(ca, &ed, &u, &cert, NULL), -EINVAL,
	       "an instance id with a space: refused");
	u.instance_id = "inst_1";
	is_int(sshcert_sign_host(ca, &ec, "a@b", 1, now, 0, &cert, NULL), -EINVAL,
	       "a host principal with '@': refused");
	is_int(sshcert_sign_host(ca, &ec, "inst_1", 1, now, now + 30 * 86400 + 1, &cert, NULL),
	       -ERANGE, "a host certificate past thirty days: refused");
	is_int(sshcert_sign_host(ca, &ec, "inst_1A", 1, now, 0, &cert, NULL), -EINVAL,
	       "a host principal with a capital (ssh lowercases HostKeyAlias): refused");
	is_int(sshcert_sign_host(ca, &ec, "inst_1", 1, now, now, &cert, NULL), -ERANGE,
	       "a host certificate ending now: refused");
	{
		const char *p[] = {"inst_1"};
		struct sshcert_req q = {SSHCERT_HOST, &ec, "k", p, 1, 1, now, now + 60,
					SSHCERT_EXT_PERMIT_PTY};
		is_int(sshcert_sign(ca, &q, &cert), -EINVAL, "a host certificate with extensions");
		q = (struct sshcert_req){SSHCERT_USER, &ec, "k", p, 1, 1, now, now + 60, 1u << 3};
		is_int(sshcert_sign(ca, &q, &cert), -EINVAL, "an unknown extension bit");
		q = (struct sshcert_req){SSHCERT_USER, &ec, "k", p, 0, 1, now, now + 60, 0};
		is_int(sshcert_sign(ca, &q, &cert), -EINVAL, "no principal");
		q = (struct sshcert_req){SSHCERT_USER, &ec, "k", p, 1, 1, now, now, 0};
		is_int(sshcert_sign(ca, &q, &cert), -EINVAL, "valid_after == valid_before");
	}
	ok(cert == NULL, "no refusal wrote a certificate");
}

static void test_ca_keys(void)
{
	char *cert = NULL, *key = NULL;
	struct sshcert_ca *ca = NULL;

	ok(pki_ca_new("x", 1, &cert, &key) == 0, "a P-256 X.509 CA for contrast");
	is_int(sshcert_ca_load(key, &ca), -EINVAL, "a P-256 key is not an SSH CA key");
	is_int(sshcert_ca_load("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
			       &ca), -EBADMSG, "garbage PEM");
	ok(ca == NULL, "no CA on failure");
	free(cert);
	pki_free_secret(key);
}

/* ------------------------------------------------------------- real sshd */

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static bool port_open(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool up = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

	close(fd);
	return up;
}

/* ssh as user with key and cert, pinning the host with known_hosts under
 * alias; its exit status, output in *out. */
static int ssh_as(int port, const char *user, const char *key, const char *cert,
		  const char *known, const char *alias, char **out)
{
	return run(out, "ssh -F none -p %d -i %s/%s -o CertificateFile=%s/%s -o IdentitiesOnly=yes "
		   "-o BatchMode=yes -o UserKnownHostsFile=%s/%s -o GlobalKnownHostsFile=/dev/null "
		   "-o StrictHostKeyChecking=yes -o HostKeyAlias=%s -o ConnectTimeout=30 "
		   "%s@127.0.0.1 echo in-through-the-certificate 2>&1",
		   port, dir, key, dir, cert, dir, known, alias, user);
}

static void test_sshd(struct sshcert_ca *ca, const char *ca_line)
{
	struct passwd *pw = getpwuid(getuid());
	struct sshcert_pubkey host, user;
	struct sshcert_ca *other = NULL;
	char *cert = NULL, *other_line = NULL, *out = NULL;
	_cleanup_free_ char *known = NULL, *known_other = NULL, *cfg = NULL;
	int64_t now = time(NULL);
	struct sshcert_user u = {pw->pw_name, "inst_01sshd", "idn_1", "sbx_1", "ssh_1", 7, now, 5, 0};
	int port = free_port(), rc;
	pid_t pid;

	if (access("/usr/sbin/sshd", X_OK) != 0 || getuid() != 0 || port < 0) {
		printf("# skip: real sshd (needs /usr/sbin/sshd and root)\n");
		return;
	}
	other = make_ca("other-ca", &other_line);
	if (make_key("host", "ecdsa", &host) < 0 || make_key("user", "ed25519", &user) < 0)
		abort();
	sshcert_sign_host(ca, &host, "inst_01sshd", 1, now, 0, &cert, NULL);
	write_str("host-cert.pub", cert);
	free(cert);
	write_str("principals", "root@inst_01sshd\nnobody-else\n");
	known = xasprintf("@cert-authority inst_01sshd %s\n", ca_line);
	write_str("known", known);
	known_other = xasprintf("@cert-authority inst_01sshd %s\n", other_line);
	write_str("known-other", known_other);
	cfg = xasprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s/host\n"
			"HostCertificate %s/host-cert.pub\nPidFile %s/sshd.pid\n"
			"TrustedUserCAKeys %s/ca.pub\nAuthorizedPrincipalsFile %s/principals\n"
			"AuthorizedKeysFile none\nPasswordAuthentication no\n"
			"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
			"StrictModes no\nUsePAM no\n",
			port, dir, dir, dir, dir, dir);
	write_str("sshd_config", cfg);
	mkdir_p("/run/sshd", 0755);
	rc = run(&out, "/usr/sbin/sshd -t -f %s/sshd_config 2>&1", dir);
	is_int(rc, 0, "sshd -t accepts TrustedUserCAKeys and our host certificate");
	if (rc)
		printf("# %s", out);
	free(out);
	pid = fork();
	if (pid == 0) {
		_cleanup_free_ char *c = xasprintf("%s/sshd_config", dir);
		_cleanup_free_ char *log = xasprintf("%s/sshd.log", dir);
		if (!freopen(log, "w", stderr))
			_exit(127);
		execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", c, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && !port_open(port); i++)
		usleep(100 * 1000);
	ok(port_open(port), "sshd listens on 127.0.0.1:%d", port);

	sshcert_sign_user(ca, &user, &u, &cert, NULL);
	write_str("user-cert.pub", cert);
	free(cert);
	rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_01sshd", &out);
	ok(rc == 0 && strstr(out, "in-through-the-certificate"),
	   "sshd accepts our user certificate; ssh accepts our host certificate");
	if (rc)
		printf("# %s", out);
	free(out);

	rc = ssh_as(port, "root", "user", "user-cert.pub", "known-other", "inst_01sshd", &out);
	ok(rc == 255 && strstr(out, "Host key verification failed"),
	   "a host certificate from another CA than the pinned one is refused");
	free(out);
	rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_02other", &out);
	ok(rc == 255, "a host certificate for another instance is refused");
	free(out);

	u.instance_id = "inst_02other";
	sshcert_sign_user(ca, &user, &u, &cert, NULL);
	write_str("user-cert.pub", cert);
	free(cert);
	rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_01sshd", &out);
	ok(rc == 255 && strstr(out, "Permission denied"),
	   "sshd refuses a certificate for another instance's principal");
	free(out);

	u.instance_id = "inst_01sshd";
	sshcert_sign_user(other, &user, &u, &cert, NULL);
	write_str("user-cert.pub", cert);
	free(cert);
	rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_01sshd", &out);
	ok(rc == 255 && strstr(out, "Permission denied"),
	   "sshd refuses a certificate from another CA");
	free(out);

	{
		const char *p[] = {"root@inst_01sshd"};
		struct sshcert_req q = {SSHCERT_USER, &user, "expired", p, 1, 9, now - 3600,
					now - 60, SSHCERT_EXT_PERMIT_PTY};
		sshcert_sign(ca, &q, &cert);
		write_str("user-cert.pub", cert);
		free(cert);
		rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_01sshd", &out);
		ok(rc == 255 && strstr(out, "Permission denied"),
		   "sshd refuses an expired certificate");
		free(out);
		q.type = SSHCERT_HOST;
		q.extensions = 0;
		q.valid_before = now + 600;
		sshcert_sign(ca, &q, &cert);
		write_str("user-cert.pub", cert);
		free(cert);
		rc = ssh_as(port, "root", "user", "user-cert.pub", "known", "inst_01sshd", &out);
		ok(rc == 255 && strstr(out, "Permission denied"),
		   "sshd refuses a host certificate used as a user certificate");
		free(out);
	}
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	sshcert_ca_free(other);
	free(other_line);
}

int main(void)
{
	struct sshcert_ca *ca;
	char *ca_line = NULL;
	_cleanup_free_ char *ca_fp = NULL;

	if (!mkdtemp(dir))
		return 1;
	ca = make_ca("ca", &ca_line);
	ca_fp = fingerprint("ca.pub");
	ok(strncmp(ca_fp, "SHA256:", 7) == 0, "ssh-keygen -l reads our CA's public line (%s)",
	   ca_fp);
	test_parse();
	test_ca_line(ca_line);
	test_account();
	test_ca_keys();
	test_certs(ca, ca_fp);
	test_sshd(ca, ca_line);
	sshcert_ca_free(ca);
	free(ca_line);
	if (!getenv("BC_KEEP_TMP"))
		run(NULL, "rm -rf %s", dir);
	done_testing();
}
