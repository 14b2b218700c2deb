/* test_agent_snapshot.c: snapshots on the host (agent/snapshot.c,
 * agent/xfer.c) against a small HTTP server in this process (plain http
 * on 127.0.0.1, allowed by the test-only switch) that hashes what it is
 * sent and answers from a script: a PUT streamed with its SHA-256, retried
 * from byte 0 after a 500 and after a connection dropped mid-body, not
 * retried after a 403, the capture always removed; downloads verified
 * before they get their name, reused, held after a failure, nothing
 * partial left; the GC and the start-up sweep; the fake runtime's restore;
 * an upload's memory stays flat while a 48 MiB object goes. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/runtime.h"
#include "agent/runtime_libvirt_int.h"
#include "agent/snapshot.h"
#include "agent/xfer.h"
#include "tap.h"
#include "util.h"

/* ------------------------------------------------------------ the server */

enum act { A_OK, A_500, A_403, A_DROP };

static struct {
	int fd, port;
	pthread_t th;
	atomic_bool stop;
	pthread_mutex_t mu;
	enum act plan[8];          /* PUT i answers plan[i] (A_OK past the end) */
	int n_plan;
	int puts, gets;
	char put_sha[XFER_SHA_HEX];
	unsigned long long put_len;
	unsigned char *obj;        /* what a GET serves */
	size_t obj_len;
} srv;

static void sha_hex(const void *p, size_t n, char *hex)
{
	unsigned char d[32];
	unsigned int k = 0;

	EVP_Digest(p, n, d, &k, EVP_sha256(), NULL);
	hex_encode(d, k, hex);
}

static void send_all(int fd, const void *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		p = (const char *)p + k;
		n -= (size_t)k;
	}
}

static void reply(int fd, int code, const void *body, size_t n)
{
	char head[160];
	int k = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", code, n);

	send_all(fd, head, (size_t)k);
	if (n)
		send_all(fd, body, n);
}

static void serve_put(int fd, const char *rest, size_t have, unsigned long long len, enum act a)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned long long got = 0, stop_at = a == A_DROP ? len / 2 : len;
	char buf[65536];
	unsigned char d[32];
	unsigned int k = 0;

	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	EVP_DigestUpdate(md, rest, have);
	got = have;
	while (got < stop_at) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		EVP_DigestUpdate(md, buf, (size_t)n);
		got += (unsigned long long)n;
	}
	EVP_DigestFinal_ex(md, d, &k);
	EVP_MD_CTX_free(md);
	if (a == A_DROP)
		return;  /* closed mid-body, no answer */
	if (a == A_OK) {
		pthread_mutex_lock(&srv.mu);
		hex_encode(d, k, srv.put_sha);
		srv.put_len = got;
		pthread_mutex_unlock(&srv.mu);
	}
	reply(fd, a == A_OK ? 200 : a == A_403 ? 403 : 500, "", 0);
}

static void serve(int fd)
{
	char req[8192] = "";
	size_t n = 0;
	char *end = NULL, *cl;
	unsigned long long len = 0;

	while (n < sizeof(req) - 1 && !(end = strstr(req, "\r\n\r\n"))) {
		ssize_t k = recv(fd, req + n, sizeof(req) - 1 - n, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
		req[n] = '\0';
	}
	if (!end)
		return;
	if ((cl = strcasestr(req, "Content-Length:")))
		len = strtoull(cl + 15, NULL, 10);
	if (strncmp(req, "PUT ", 4) == 0) {
		enum act a;
		pthread_mutex_lock(&srv.mu);
		a = srv.puts < srv.n_plan ? srv.plan[srv.puts] : A_OK;
		srv.puts++;
		pthread_mutex_unlock(&srv.mu);
		serve_put(fd, end + 4, n - (size_t)(end + 4 - req), len, a);
		return;
	}
	pthread_mutex_lock(&srv.mu);
	srv.gets++;
	pthread_mutex_unlock(&srv.mu);
	reply(fd, srv.obj ? 200 : 404, srv.obj, srv.obj ? srv.obj_len : 0);
}

static void *srv_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&srv.stop)) {
		int c = accept(srv.fd, NULL, NULL);
		if (c < 0)
			continue;
		serve(c);
		close(c);
	}
	return NULL;
}

static void srv_start(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);

	pthread_mutex_init(&srv.mu, NULL);
	srv.fd = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(srv.fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(srv.fd, 16) < 0 ||
	    getsockname(srv.fd, (struct sockaddr *)&a, &al) < 0)
		abort();
	srv.port = ntohs(a.sin_port);
	pthread_create(&srv.th, NULL, srv_main, NULL);
}

static void srv_stop(void)
{
	atomic_store(&srv.stop, true);
	shutdown(srv.fd, SHUT_RDWR);
	close(srv.fd);
	pthread_join(srv.th, NULL);
}

static void plan(int n, const enum act *a)
{
	pthread_mutex_lock(&srv.mu);
	srv.n_plan = n;
	if (n)
		memcpy(srv.plan, a, (size_t)n * sizeof(*a));
	srv.puts = 0;
	srv.put_sha[0] = '\0';
	srv.put_len = 0;
	pthread_mutex_unlock(&srv.mu);
}

/* ------------------------------------------------------------ helpers */

static char dir[] = "/tmp/test_agent_snapshot.XXXXXX";

static int count_prefix(const char *d, const char *prefix)
{
	DIR *dd = opendir(d);
	struct dirent *de;
	int n = 0;

	if (!dd)
		return -1;
	while ((de = readdir(dd)))
		if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(dd);
	return n;
}

static int count_parts(const char *d)
{
	DIR *dd = opendir(d);
	struct dirent *de;
	int n = 0;

	while (dd && (de = readdir(dd)))
		n += strstr(de->d_name, ".part.") != NULL;
	if (dd)
		closedir(dd);
	return n;
}

static struct rt *fake_with(const char *id)
{
	struct rt_config rc = {.state_dir = dir};
	Bc__Node__V1__InstanceSpec s = BC__NODE__V1__INSTANCE_SPEC__INIT;
	char reason[RT_REASON_MAX] = "";
	struct rt *rt = NULL;

	if (rt_open("fake", &rc, &rt) < 0)
		abort();
	s.id = (char *)id;
	s.vcpus = 1;
	s.memory_mib = 64;
	if (rt->ops->create(rt, &s, reason) < 0 || rt->ops->start(rt, id) < 0)
		abort();
	return rt;
}

static char *url(const char *path)
{
	return xasprintf("http://127.0.0.1:%d%s", srv.port, path);
}

static char *args_for(const char *u, bool mem)
{
	return xasprintf("{\"putUrl\": \"%s\", \"includeMemory\": %s}", u, mem ? "true" : "false");
}

static long max_rss_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* ------------------------------------------------------------ tests */

static void test_args(void)
{
	char *u = NULL;
	bool m = false;

	is_int(snap_parse_args("{\"putUrl\":\"https://s/x?a=1\"}", &u, &m), 0, "args: putUrl alone");
	is_str(u, "https://s/x?a=1", "... the URL");
	ok(m, "... includeMemory defaults to true");
	free(u);
	u = NULL;
	is_int(snap_parse_args(" { \"includeMemory\" : false , \"putUrl\" : \"https://s/\\u0078\","
			       " \"other\": 3 } ", &u, &m), 0, "args: escapes, another key");
	is_str(u, "https://s/x", "... the URL decoded");
	ok(!m, "... includeMemory false");
	free(u);
	is_int(snap_parse_args("{\"includeMemory\":true}", &u, &m), -EINVAL, "no putUrl: refused");
	is_int(snap_parse_args("{\"putUrl\":7}", &u, &m), -EINVAL, "putUrl not a string: refused");
	is_int(snap_parse_args("{\"putUrl\":\"https://s\",\"includeMemory\":\"yes\"}", &u, &m),
	       -EINVAL, "includeMemory not a bool: refused");
	is_int(snap_parse_args("{\"putUrl\":\"https://s\"} x", &u, &m), -EINVAL,
	       "trailing text: refused");
	is_int(snap_parse_args("{\"putUrl\":\"https://s\",\"o\":{}}", &u, &m), -EINVAL,
	       "a nested object: refused");
	is_int(snap_parse_args("", &u, &m), -EINVAL, "empty: refused");
}

static void test_urls(void)
{
	struct xfer_opts strict = {0}, test = {.allow_http_loopback = true};

	ok(xfer_url_ok(&strict, "https://store.example/b/k"), "https is fine");
	ok(!xfer_url_ok(&strict, "http://127.0.0.1:9/k"), "http refused without the test switch");
	ok(xfer_url_ok(&test, "http://127.0.0.1:9/k"), "http to 127.0.0.1 with the test switch");
	ok(xfer_url_ok(&test, "http://[::1]:9/k") && xfer_url_ok(&test, "http://localhost/k"),
	   "... [::1] and localhost too");
	ok(!xfer_url_ok(&test, "http://127.0.0.1.evil.example/k") &&
		   !xfer_url_ok(&test, "http://localhost@evil.example/k") &&
		   !xfer_url_ok(&test, "http://10.0.0.1/k"),
	   "... nothing that only starts like loopback");
	ok(!xfer_url_ok(&strict, "ftp://x/k") && !xfer_url_ok(&strict, "https://x/a b"),
	   "other schemes and spaces refused");
}

static void test_check(void)
{
	Bc__Node__V1__RestoreFrom r = BC__NODE__V1__RESTORE_FROM__INIT;
	char why[RT_REASON_MAX] = "";
	char sha[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

	r.sha256 = sha;
	r.url = "https://s/k";
	r.runtime = "fake";
	r.include_memory = true;
	r.cpu_model = "CPU A";
	is_int(snap_check(&r, "fake", "CPU A", false, why), 0, "same runtime and CPU: accepted");
	is_int(snap_check(&r, "libvirt", "CPU A", false, why), -EINVAL, "another runtime: refused");
	is_str(why, "SnapshotRefused: taken on another runtime", "... SnapshotRefused");
	is_int(snap_check(&r, "fake", "CPU B", false, why), -EINVAL,
	       "a memory snapshot of another CPU model: refused");
	is_str(why, "SnapshotRefused: a memory snapshot of another CPU model", "... saying so");
	r.include_memory = false;
	is_int(snap_check(&r, "fake", "CPU B", false, why), 0, "disk only: any CPU model");
	r.url = "http://127.0.0.1:1/k";
	is_int(snap_check(&r, "fake", "", false, why), -EINVAL, "http refused");
	is_int(snap_check(&r, "fake", "", true, why), 0, "... unless the test switch allows loopback");
	r.sha256 = "ABC";
	is_int(snap_check(&r, "fake", "", true, why), -EINVAL, "a bad digest string refused");
}

static struct snap *snap_for(struct rt *rt, const char *cpu)
{
	struct snap_config sc = {.data_dir = dir, .allow_http_loopback = true, .cpu_model = cpu,
				 .rt = rt, .retry_delay_ms = 10};
	struct snap *s = NULL;

	if (snap_open(&sc, &s) < 0)
		abort();
	return s;
}

static void test_take(struct rt *rt, struct snap *s, const char *snapdir)
{
	_cleanup_free_ char *u = url("/b/obj1"), *a = args_for(u, true), *a403 = NULL;
	char err[256] = "", *res = NULL, want[128];
	atomic_bool cancel = false;
	enum act p1[] = {A_500, A_DROP, A_OK}, p2[] = {A_500, A_500, A_500}, p3[] = {A_403};

	plan(0, NULL);
	is_int(snap_take(s, "cmd_t1", "i1", a, &cancel, &res, err, sizeof(err)), 0,
	       "instance.snapshot: captured and uploaded");
	snprintf(want, sizeof(want), "\"sha256\": \"%s\"", srv.put_sha);
	ok(res && *srv.put_sha && strstr(res, want), "... the result's sha256 is what the store got");
	ok(res && strstr(res, "\"runtime\": \"fake\"") && strstr(res, "\"cpuModel\": \"CPU A\"") &&
		   strstr(res, "\"includeMemory\": true") && strstr(res, "\"pausedMs\": 0"),
	   "... runtime, cpuModel, includeMemory, pausedMs: %s", res ? res : "");
	snprintf(want, sizeof(want), "\"sizeBytes\": %llu", srv.put_len);
	ok(res && srv.put_len > 4096 && strstr(res, want), "... sizeBytes is what the store got");
	is_int(count_prefix(snapdir, ".capture."), 0, "... the capture is gone");
	free(res);
	res = NULL;

	plan(3, p1);
	is_int(snap_take(s, "cmd_t2", "i1", a, &cancel, &res, err, sizeof(err)), 0,
	       "a 500 then a dropped connection: the third attempt succeeds");
	is_int(srv.puts, 3, "... three PUTs");
	snprintf(want, sizeof(want), "\"sha256\": \"%s\"", srv.put_sha);
	ok(res && strstr(res, want) && strstr(res, "\"attempts\": 3"),
	   "... restarted from byte 0: the digest of the whole body the store got");
	free(res);
	res = NULL;

	plan(3, p2);
	is_int(snap_take(s, "cmd_t3", "i1", a, &cancel, &res, err, sizeof(err)), -EIO,
	       "three 500s: failed");
	is_int(srv.puts, 3, "... after three attempts, no more");
	ok(strncmp(err, "SnapshotUploadFailed: ", 22) == 0 && strstr(err, "(attempt 3 of 3)"),
	   "... reason: %s", err);
	is_int(count_prefix(snapdir, ".capture."), 0, "... the capture is gone");

	plan(1, p3);
	is_int(snap_take(s, "cmd_t4", "i1", a, &cancel, &res, err, sizeof(err)), -EINVAL,
	       "a 403: failed");
	is_int(srv.puts, 1, "... not retried (the URL is refused)");
	ok(strstr(err, "HTTP 403 (attempt 1 of 3)") != NULL, "... reason: %s", err);

	a403 = xasprintf("{\"putUrl\":\"http://10.1.2.3/k\"}");
	is_int(snap_take(s, "cmd_t5", "i1", a403, &cancel, &res, err, sizeof(err)), -EINVAL,
	       "a plain http URL off loopback: refused");
	ok(strncmp(err, "SnapshotRefused: ", 17) == 0, "... SnapshotRefused: %s", err);
	is_int(snap_take(s, "cmd_t6", "nope", a, &cancel, &res, err, sizeof(err)), -ENOENT,
	       "no such instance: failed");
	ok(strncmp(err, "SnapshotCaptureFailed: ", 23) == 0, "... SnapshotCaptureFailed: %s", err);
	atomic_store(&cancel, true);  /* bcd stopping */
	plan(0, NULL);
	is_int(snap_take(s, "cmd_t7", "i1", a, &cancel, &res, err, sizeof(err)), -ECANCELED,
	       "bcd stopping during the upload: -ECANCELED (left unfinished for the restart rules)");
	is_int(count_prefix(snapdir, ".capture."), 0, "no capture left by any of them");
	(void)rt;
}

static void test_big(struct snap *s, const char *snapdir)
{
	_cleanup_free_ char *u = url("/b/big"), *a = args_for(u, false);
	_cleanup_free_ char *hook = xasprintf("%s/fake/i1.snapbytes", dir);
	char err[256] = "", *res = NULL;
	atomic_bool cancel = false;
	long before;

	file_write_atomic(hook, "50331648\n", 9, 0644);
	plan(0, NULL);
	before = max_rss_kib();
	is_int(snap_take(s, "cmd_big", "i1", a, &cancel, &res, err, sizeof(err)), 0,
	       "a 48 MiB capture uploaded");
	ok(srv.put_len > 50331648ull, "... all of it reached the store (%llu bytes)", srv.put_len);
	ok(max_rss_kib() - before < 16 * 1024, "... peak RSS grew %ld KiB (< 16 MiB: streamed)",
	   max_rss_kib() - before);
	is_int(count_prefix(snapdir, ".capture."), 0, "... the capture is gone");
	free(res);
	unlink(hook);
}

static void test_fetch(struct rt *rt, struct snap *s, const char *snapdir)
{
	Bc__Node__V1__RestoreFrom r = BC__NODE__V1__RESTORE_FROM__INIT;
	Bc__Node__V1__InstanceSpec spec = BC__NODE__V1__INSTANCE_SPEC__INIT;
	_cleanup_free_ char *u = url("/b/obj1"), *cap = xasprintf("%s/cap", dir), *buf = NULL;
	char sha[XFER_SHA_HEX], reason[RT_REASON_MAX] = "", *path = NULL;
	int64_t paused = -1;
	size_t n = 0;
	enum rt_state st = RT_STATE_ERROR;
	int gets;

	/* a real fake capture is the object the store serves */
	is_int(rt->ops->capture(rt, "i1", true, cap, &paused, reason), 0, "fake capture");
	file_read_all(cap, 1 << 20, &buf, &n);
	sha_hex(buf, n, sha);
	srv.obj = (unsigned char *)buf;
	srv.obj_len = n;
	r.url = u;
	r.sha256 = sha;
	r.runtime = "fake";
	r.include_memory = true;
	r.cpu_model = "CPU A";
	r.snapshot_id = "snap_1";
	r.size_bytes = n;

	gets = srv.gets;
	is_int(snap_fetch(s, &r, &path, reason), 0, "restore download verified");
	ok(path && strstr(path, sha) && access(path, F_OK) == 0, "... into snapshots/<sha256>");
	is_int(srv.gets, gets + 1, "... one GET");
	is_int(count_parts(snapdir), 0, "... no .part left");
	spec.id = "r1";
	spec.vcpus = 1;
	spec.memory_mib = 64;
	spec.restore_from = &r;
	is_int(rt->ops->restore(rt, &spec, path, &st, reason), 0, "the fake restores it");
	is_int(st, RT_STATE_RUNNING, "... running (a memory snapshot)");
	free(path);
	path = NULL;
	is_int(snap_fetch(s, &r, &path, reason), 0, "a second restore of it");
	is_int(srv.gets, gets + 1, "... reuses the verified file (no GET)");
	free(path);
	path = NULL;

	/* one byte flipped in the store */
	buf[n / 2] ^= 1;
	char sha2[XFER_SHA_HEX];
	memcpy(sha2, sha, sizeof(sha2));
	sha2[0] = sha2[0] == '0' ? '1' : '0';  /* another object's name, the same bytes */
	r.sha256 = sha2;
	is_int(snap_fetch(s, &r, &path, reason), -EBADMSG, "a flipped byte: refused");
	ok(strncmp(reason, "SnapshotDigestMismatch: ", 24) == 0, "... %s", reason);
	_cleanup_free_ char *bad = xasprintf("%s/%s", snapdir, sha2);
	ok(access(bad, F_OK) < 0, "... no file under its name");
	is_int(count_parts(snapdir), 0, "... no .part left");
	gets = srv.gets;
	is_int(snap_fetch(s, &r, &path, reason), -EBADMSG, "asked again at once: the same failure");
	is_int(srv.gets, gets, "... from memory, no new download");
	buf[n / 2] ^= 1;

	/* the fake refuses an object that is not its own */
	_cleanup_free_ char *junk = xasprintf("%s/junk", dir);
	file_write_atomic(junk, "not a snapshot\n", 15, 0600);
	spec.id = "r2";
	is_int(rt->ops->restore(rt, &spec, junk, &st, reason), -EBADMSG,
	       "the fake restores no foreign object");
	srv.obj = NULL;
}

static char recovered[512];
static bool recovered_had_files;

static void record_recover(struct rt *rt, const char *workdir)
{
	_cleanup_free_ char *f = xasprintf("%s/memory.save", workdir);

	(void)rt;
	snprintf(recovered, sizeof(recovered), "%s", workdir);
	recovered_had_files = access(f, F_OK) == 0;
}

static void test_gc(struct rt *rt, struct snap *s, const char *snapdir)
{
	Bc__Node__V1__NodeSpec ns = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec in = BC__NODE__V1__INSTANCE_SPEC__INIT, *v[1] = {&in};
	Bc__Node__V1__RestoreFrom r = BC__NODE__V1__RESTORE_FROM__INIT;
	char a[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	char b[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
	_cleanup_free_ char *pa = xasprintf("%s/%s", snapdir, a), *pb = xasprintf("%s/%s", snapdir, b);
	_cleanup_free_ char *part = xasprintf("%s/.%s.part.1", snapdir, a);
	_cleanup_free_ char *cap = xasprintf("%s/.capture.cmd_x", snapdir);
	struct snap *s2;

	/* every object of earlier tests goes with a spec that names none */
	snap_gc(s, &ns);
	file_write_atomic(pa, "a", 1, 0644);
	file_write_atomic(pb, "b", 1, 0644);
	file_write_atomic(part, "p", 1, 0644);
	file_write_atomic(cap, "c", 1, 0600);
	r.sha256 = a;
	in.id = "r1";
	in.desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
	in.restore_from = &r;
	ns.instances = v;
	ns.n_instances = 1;
	snap_gc(s, &ns);
	ok(access(pa, F_OK) == 0, "GC keeps the object a spec restores from");
	ok(access(pb, F_OK) < 0, "GC removes one no spec restores from");
	ok(access(part, F_OK) < 0, "GC removes another process's partial download");
	ok(access(cap, F_OK) == 0, "GC leaves a capture (a command may be uploading it)");
	in.desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED;
	snap_gc(s, &ns);
	ok(access(pa, F_OK) < 0, "a desired-deleted instance keeps nothing");

	file_write_atomic(part, "p", 1, 0644);
	_cleanup_free_ char *capd = xasprintf("%s/.capture.cmd_y.d", snapdir);
	_cleanup_free_ char *capf = xasprintf("%s/memory.save", capd);
	mkdir(capd, 0700);
	file_write_atomic(capf, "m", 1, 0600);
	struct runtime_ops rec_ops = rt_fake_ops;
	struct rt rec_rt = {.ops = &rec_ops};
	rec_ops.capture_recover = record_recover;
	s2 = snap_for(&rec_rt, "CPU A");  /* a bcd starting */
	ok(access(cap, F_OK) < 0 && access(part, F_OK) < 0,
	   "start-up removes a killed bcd's captures and partial downloads");
	ok(access(capd, F_OK) < 0, "... and a runtime's capture work directory");
	is_str(recovered, capd, "... after the runtime was asked to recover from it");
	ok(recovered_had_files, "... while its files were still there");
	(void)rt;
	snap_free(s2);
}

/* The libvirt runtime's object framing (runtime_libvirt_snapshot.c). */
static void test_lvsnap(void)
{
	_cleanup_free_ char *obj = xasprintf("%s/lv.obj", dir), *disk = xasprintf("%s/lv.disk", dir);
	_cleanup_free_ char *mem = xasprintf("%s/lv.mem", dir), *d2 = xasprintf("%s/lv.d2", dir);
	_cleanup_free_ char *m2 = xasprintf("%s/lv.m2", dir), *a = NULL, *b = NULL;
	_cleanup_free_ char *whole = NULL, *cut = xasprintf("%s/lv.cut", dir);
	char *meta = NULL;
	bool has_mem = false;
	size_t na = 0, nb = 0, nw = 0;
	int fd;

	file_write_atomic(disk, "QFI\xfb disk bytes\nsection memory 3\n", 33, 0600);
	file_write_atomic(mem, "memory image", 12, 0600);
	fd = open(obj, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	is_int(lvsnap_write(fd, "source=i1\nmemory=1\n", disk, mem), 0, "lvsnap: written");
	close(fd);
	is_int(lvsnap_read(obj, d2, m2, &meta, &has_mem), 0, "lvsnap: read back");
	is_str(meta, "source=i1\nmemory=1\n", "... the meta text");
	ok(has_mem, "... with a memory section");
	file_read_all(disk, 1 << 20, &a, &na);
	file_read_all(d2, 1 << 20, &b, &nb);
	ok(na == nb && memcmp(a, b, na) == 0, "... the disk byte for byte (a header-like line in it too)");
	free(a), free(b), a = b = NULL;
	file_read_all(mem, 1 << 20, &a, &na);
	file_read_all(m2, 1 << 20, &b, &nb);
	ok(na == nb && memcmp(a, b, na) == 0, "... the memory byte for byte");
	free(meta);
	meta = NULL;

	file_read_all(obj, 1 << 20, &whole, &nw);
	for (size_t cutlen = 0; cutlen < nw; cutlen += 7) {
		file_write_atomic(cut, whole, cutlen, 0600);
		if (lvsnap_read(cut, d2, m2, &meta, &has_mem) != -EBADMSG) {
			ok(0, "a truncated object (%zu of %zu bytes) is refused", cutlen, nw);
			return;
		}
	}
	ok(1, "every truncation of the object is refused (-EBADMSG)");
	ok(access(d2, F_OK) < 0 && access(m2, F_OK) < 0, "... and leaves no file behind");
	file_write_atomic(cut, whole, nw, 0600);
	fd = open(cut, O_WRONLY | O_APPEND);
	if (write(fd, "x", 1) != 1)
		ok(0, "append");
	close(fd);
	is_int(lvsnap_read(cut, d2, m2, &meta, &has_mem), -EBADMSG, "bytes after end: refused");
	file_write_atomic(cut, "bc-libvirt-snapshot 1\nsection meta 2\nab"
			  "section memory 1\nxend\n", 61, 0600);
	is_int(lvsnap_read(cut, d2, m2, &meta, &has_mem), -EBADMSG, "no disk section: refused");
	file_write_atomic(cut, "bc-fake-snapshot 1\n", 19, 0600);
	is_int(lvsnap_read(cut, d2, m2, &meta, &has_mem), -EBADMSG, "another runtime's object: refused");
}

int main(void)
{
	_cleanup_free_ char *snapdir = NULL;
	struct rt *rt;
	struct snap *s;

	if (!mkdtemp(dir))
		return 1;
	snapdir = xasprintf("%s/%s", dir, SNAP_DIR);
	srv_start();
	test_args();
	test_urls();
	test_check();
	test_lvsnap();
	rt = fake_with("i1");
	s = snap_for(rt, "CPU A");
	test_take(rt, s, snapdir);
	test_big(s, snapdir);
	test_fetch(rt, s, snapdir);
	test_gc(rt, s, snapdir);
	snap_free(s);
	rt_close(rt);
	srv_stop();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("# cannot remove %s\n", dir);
	}
	done_testing();
}
