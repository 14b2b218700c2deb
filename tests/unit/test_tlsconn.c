/* test_tlsconn.c: common/tlsconn.c over real TLS pairs. The client dials
 * a TCP listener of the test; the test hands the accepted connection to a
 * relay thread pair ("the wire") and the server end of a socketpair to
 * tlsc_accept, so the test decides how the bytes arrive: in odd small
 * pieces (records split across reads), as they come, or, over a
 * SOCK_SEQPACKET socketpair, one packet per send(2) of the server, which
 * the wire logs. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pki.h"
#include "tap.h"
#include "tlsconn.h"
#include "util.h"

#define diag(...) (printf("# " __VA_ARGS__), printf("\n"))

static SSL_CTX *srv_ctx, *cli_ctx;

/* ------------------------------------------------------------ the wire */

enum wire_mode {
	W_ASIS,   /* forward what each read gives */
	W_SPLIT,  /* forward in small odd pieces, a pause between them */
	W_SEQ,    /* server side SOCK_SEQPACKET: log each of its sends */
};

#define SEQ_LOG 4096

struct wire {
	enum wire_mode mode;
	int tcp, sp;             /* the client's TCP connection, our socketpair end */
	pthread_t th[2];
	atomic_int seq_n;        /* W_SEQ: the server's sends, their sizes */
	size_t seq_len[SEQ_LOG];
};

struct pump {
	struct wire *w;
	int from, to;
	bool to_server;
};

static int send_all(int fd, const uint8_t *p, size_t n)
{
	return sock_send_all(fd, p, n) < 0 ? -1 : 0;
}

static void *pump(void *arg)
{
	static const size_t pieces[] = {1, 2, 5, 7, 13, 100, 1000, 4099, 3, 16390};
	struct pump *pp = arg;
	struct wire *w = pp->w;
	uint8_t *buf = xmalloc(256 * 1024);
	size_t k = 0;

	for (;;) {
		ssize_t n = recv(pp->from, buf, 256 * 1024, 0);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (w->mode == W_SEQ && !pp->to_server) {
			int i = atomic_load(&w->seq_n);
			if (i < SEQ_LOG)
				w->seq_len[i] = (size_t)n;
			atomic_store(&w->seq_n, i + 1);
		}
		while (off < (size_t)n) {
			size_t take = (size_t)n - off;

			if (w->mode == W_SPLIT)
				take = take < pieces[k % 10] ? take : pieces[k++ % 10];
			else if (w->mode == W_SEQ && pp->to_server)
				take = 1; /* packets the server's read-ahead never cuts */
			if (send_all(pp->to, buf + off, take) < 0)
				goto out;
			off += take;
			if (w->mode == W_SPLIT)
				usleep(20);
		}
	}
out:
	free(buf);
	shutdown(pp->to, SHUT_WR);
	free(pp);
	return NULL;
}

struct dialer {
	int port;
	struct tlsc *c;
	int rc;
};

static void *dial_thread(void *arg)
{
	struct dialer *d = arg;
	char hp[64], ebuf[200];

	snprintf(hp, sizeof(hp), "127.0.0.1:%d", d->port);
	d->rc = tlsc_connect(cli_ctx, hp, "127.0.0.1", 10000, &d->c, ebuf, sizeof(ebuf));
	if (d->rc < 0)
		diag("connect: %s", ebuf);
	return NULL;
}

/* A connected pair through a new wire: 0 with *ret_cli and *ret_srv. */
static int pair(enum wire_mode mode, struct wire **ret_w, struct tlsc **ret_cli,
		struct tlsc **ret_srv)
{
	struct wire *w = xcalloc(1, sizeof(*w));
	struct dialer d = {0};
	pthread_t dt;
	char ebuf[200];
	int lfd, sp[2], r;

	w->mode = mode;
	lfd = tlsc_listen("127.0.0.1:0", &d.port);
	if (lfd < 0 || pthread_create(&dt, NULL, dial_thread, &d) != 0)
		return -1;
	w->tcp = accept(lfd, NULL, NULL);
	close(lfd);
	if (w->tcp < 0 ||
	    socketpair(AF_UNIX, (mode == W_SEQ ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0, sp) < 0)
		return -1;
	w->sp = sp[1];
	for (int i = 0; i < 2; i++) {
		struct pump *pp = xcalloc(1, sizeof(*pp));

		pp->w = w;
		pp->to_server = i == 0;
		pp->from = i == 0 ? w->tcp : w->sp;
		pp->to = i == 0 ? w->sp : w->tcp;
		pthread_create(&w->th[i], NULL, pump, pp);
	}
	r = tlsc_accept(srv_ctx, sp[0], 10000, ret_srv, ebuf, sizeof(ebuf));
	if (r < 0)
		diag("accept: %s", ebuf);
	pthread_join(dt, NULL);
	if (r < 0 || d.rc < 0)
		return -1;
	*ret_cli = d.c;
	*ret_w = w;
	return 0;
}

static void wire_free(struct wire *w)
{
	shutdown(w->tcp, SHUT_RDWR);
	shutdown(w->sp, SHUT_RDWR);
	pthread_join(w->th[0], NULL);
	pthread_join(w->th[1], NULL);
	close(w->tcp);
	close(w->sp);
	free(w);
}

/* ------------------------------------------------------------- helpers */

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 7 + i / 251);
}

struct writer {
	struct tlsc *c;
	size_t len;
	bool close_after, free_after;
	int rc;
};

static void *write_thread(void *arg)
{
	struct writer *wr = arg;
	uint8_t *b = xmalloc(wr->len);

	for (size_t i = 0; i < wr->len; i++)
		b[i] = pat(i);
	wr->rc = tlsc_write_all(wr->c, b, wr->len);
	if (wr->rc == 0 && wr->close_after)
		wr->rc = tlsc_close_write(wr->c);
	if (wr->free_after)
		tlsc_free(wr->c);
	free(b);
	return NULL;
}

/* Read until the close_notify with read sizes cycling through sizes[]:
 * the bytes read (all checked against pat) and *ret_end (0 or -errno). */
static size_t read_all(struct tlsc *c, const size_t *sizes, size_t nsizes, bool *ret_same,
		       ssize_t *ret_end)
{
	uint8_t *b = xmalloc(80 * 1024);
	size_t got = 0, k = 0;
	ssize_t n;

	*ret_same = true;
	while ((n = tlsc_read(c, b, sizes[k++ % nsizes], 20000)) > 0) {
		for (ssize_t i = 0; i < n; i++)
			if (b[i] != pat(got + (size_t)i))
				*ret_same = false;
		got += (size_t)n;
	}
	*ret_end = n;
	free(b);
	return got;
}

/* One transfer: a thread writes len bytes of pat on from, then its
 * close_notify (then frees from, if told); after delay_us, to reads it
 * all (read_all). */
struct xfer {
	int wrc;                 /* the writer's */
	size_t got;
	bool same;
	ssize_t end;
};

static struct xfer transfer(struct tlsc *from, struct tlsc *to, size_t len, bool free_after,
			    int delay_us, const size_t *sizes, size_t nsizes)
{
	struct writer wr = {.c = from, .len = len, .close_after = true, .free_after = free_after};
	struct xfer x;
	pthread_t th;

	pthread_create(&th, NULL, write_thread, &wr);
	if (delay_us)
		usleep((useconds_t)delay_us);
	x.got = read_all(to, sizes, nsizes, &x.same, &x.end);
	pthread_join(th, NULL);
	x.wrc = wr.rc;
	return x;
}

static long rss_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			v = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* --------------------------------------------------------------- tests */

static void test_split_reads(void)
{
	static const size_t sizes[] = {1, 5, 100, 16384, 70000, 3};
	struct tlsc *c, *s;
	struct wire *w;
	struct xfer x;

	if (pair(W_SPLIT, &w, &c, &s) < 0) {
		ok(0, "a pair over a wire that splits records");
		return;
	}
	/* 1 MiB + 3 in one write: chunks of 64 KiB, the last one short */
	x = transfer(c, s, 1024 * 1024 + 3, false, 0, sizes, 6);
	is_int(x.wrc, 0, "the client wrote 1 MiB + 3 and its close_notify");
	is_int((long)x.got, 1024 * 1024 + 3, "the server read all of it, records split across "
	       "reads and its reads short (1, 5, 100, 16384, 70000, 3 bytes)");
	ok(x.same, "byte for byte");
	is_int((long)x.end, 0, "then the close_notify: 0");

	/* the other way, after the client's half-close */
	x = transfer(s, c, 300 * 1024 + 1, false, 0, sizes + 3, 2);
	ok(x.wrc == 0 && x.got == 300 * 1024 + 1 && x.same && x.end == 0,
	   "300 KiB + 1 back to the half-closed client, byte for byte, then 0 (got %zu, end %zd)",
	   x.got, x.end);
	tlsc_free(c);
	tlsc_free(s);
	wire_free(w);
}

static void test_line_then_bytes(void)
{
	struct tlsc *c, *s;
	struct wire *w;
	char line[64], rest[64] = "";
	const char *msg = "HELLO 1\nthe bytes after it";
	ssize_t n;
	int r;

	if (pair(W_ASIS, &w, &c, &s) < 0) {
		ok(0, "a pair");
		return;
	}
	is_int(tlsc_write_all(c, msg, strlen(msg)), 0, "a line and bytes in one record");
	r = tlsc_read_line(s, line, sizeof(line), 10000);
	ok(r == 7 && strcmp(line, "HELLO 1") == 0, "tlsc_read_line: the line (%d)", r);
	n = tlsc_read(s, rest, sizeof(rest) - 1, 10000);
	ok(n == 18 && memcmp(rest, "the bytes after it", 18) == 0,
	   "the bytes read ahead with it are the next read's (%zd)", n);
	tlsc_free(c);
	tlsc_free(s);
	wire_free(w);
}

static void test_close_flushed(void)
{
	static const size_t sizes[] = {65536};
	struct tlsc *c, *s;
	struct wire *w;
	struct xfer x;

	if (pair(W_ASIS, &w, &c, &s) < 0) {
		ok(0, "a pair");
		return;
	}
	/* the client writes, half-closes and closes at once; the server
	 * only starts reading 300 ms later */
	x = transfer(c, s, 200 * 1024, true, 300 * 1000, sizes, 1);
	is_int(x.wrc, 0, "write_all, close_write, free right away");
	ok(x.got == 200 * 1024 && x.same, "all 200 KiB arrived after the writer closed (%zu)", x.got);
	is_int((long)x.end, 0, "and its close_notify: 0, not a broken connection");
	tlsc_free(s);
	wire_free(w);
}

static void test_one_send_per_chunk(void)
{
	static const size_t sizes[] = {70000};
	struct tlsc *c, *s;
	struct wire *w;
	struct xfer x;
	size_t big = 0, bytes = 0;
	int before;

	if (pair(W_SEQ, &w, &c, &s) < 0) {
		ok(0, "a pair over a packet wire");
		return;
	}
	usleep(100 * 1000); /* the handshake's last packets are through */
	before = atomic_load(&w->seq_n);
	x = transfer(s, c, 256 * 1024, false, 0, sizes, 1);
	ok(x.wrc == 0 && x.got == 256 * 1024 && x.same && x.end == 0, "256 KiB through, then 0");
	for (int i = before; i < atomic_load(&w->seq_n) && i < SEQ_LOG; i++)
		if (w->seq_len[i] > 1024) {
			big++;
			bytes += w->seq_len[i];
		}
	is_int((long)big, 4, "they left the server in 4 sends, one per 64 KiB of records "
	       "(not one per 16 KiB record)");
	ok(bytes > 256 * 1024 && bytes < 257 * 1024, "carrying the 16 records (%zu bytes)", bytes);
	tlsc_free(c);
	tlsc_free(s);
	wire_free(w);
}

struct flood {
	struct tlsc *c;
	const uint8_t *b;
	atomic_int sent;         /* MiB */
	int rc;
};

#define FLOOD_MIB 64

static void *flood_thread(void *arg)
{
	struct flood *f = arg;

	for (int i = 0; i < FLOOD_MIB; i++) {
		f->rc = tlsc_write_all(f->c, f->b, 1024 * 1024);
		if (f->rc < 0)
			break;
		atomic_fetch_add(&f->sent, 1);
	}
	return NULL;
}

static void test_back_pressure(void)
{
	struct tlsc *c, *s;
	struct wire *w;
	struct flood f = {0};
	uint8_t *b = xmalloc(1024 * 1024), *rb = xmalloc(256 * 1024);
	pthread_t th;
	long rss0, rss1;
	int last = -1, now;
	size_t got = 0;
	ssize_t n;

	memset(b, 0xa5, 1024 * 1024);
	if (pair(W_ASIS, &w, &c, &s) < 0) {
		ok(0, "a pair");
		return;
	}
	f.c = c;
	f.b = b;
	rss0 = rss_kib();
	pthread_create(&th, NULL, flood_thread, &f);
	/* the server does not read: the writer stalls once the kernel's
	 * buffers are full (wait until it sent nothing for a second) */
	for (int i = 0; i < 120 && (now = atomic_load(&f.sent)) != last && now < FLOOD_MIB; i++) {
		last = now;
		sleep(1);
	}
	rss1 = rss_kib();
	now = atomic_load(&f.sent);
	ok(now < FLOOD_MIB / 2, "a peer that does not read stalls the writer (%d of %d MiB taken)",
	   now, FLOOD_MIB);
	ok(rss1 - rss0 < 16 * 1024, "and memory does not grow with what it holds back "
	   "(RSS %+ld KiB)", rss1 - rss0);
	while (got < (size_t)FLOOD_MIB * 1024 * 1024 &&
	       (n = tlsc_read(s, rb, 256 * 1024, 20000)) > 0)
		got += (size_t)n;
	pthread_join(th, NULL);
	ok(f.rc == 0 && got == (size_t)FLOOD_MIB * 1024 * 1024,
	   "once the server reads, all %d MiB arrive (%zu bytes)", FLOOD_MIB, got);
	tlsc_free(c);
	tlsc_free(s);
	wire_free(w);
	free(b);
	free(rb);
}

static void test_cancel(void)
{
	struct tlsc *c, *s;
	struct wire *w;
	uint8_t b[16];

	if (pair(W_ASIS, &w, &c, &s) < 0) {
		ok(0, "a pair");
		return;
	}
	is_int((long)tlsc_read(s, b, sizeof(b), 100), -ETIMEDOUT, "nothing to read: -ETIMEDOUT");
	tlsc_cancel(s);
	is_int((long)tlsc_read(s, b, sizeof(b), -1), -ECANCELED, "cancelled: -ECANCELED");
	tlsc_free(c);
	tlsc_free(s);
	wire_free(w);
}

int main(void)
{
	char *ca, *ca_key, *sc, *sk, *cc, *ck, ebuf[200];
	const char *sans[] = {"127.0.0.1", NULL};

	if (pki_ca_new("test CA", 1, &ca, &ca_key) < 0 ||
	    pki_issue(ca, ca_key, "server", sans, PKI_SERVER, 1, &sc, &sk) < 0 ||
	    pki_issue(ca, ca_key, "client", NULL, PKI_CLIENT, 1, &cc, &ck) < 0) {
		ok(0, "a throwaway PKI");
		done_testing();
	}
	srv_ctx = tlsc_ctx_new(true, sc, sk, ca, ebuf, sizeof(ebuf));
	cli_ctx = tlsc_ctx_new(false, cc, ck, ca, ebuf, sizeof(ebuf));
	ok(srv_ctx && cli_ctx, "contexts");
	test_split_reads();
	test_line_then_bytes();
	test_close_flushed();
	test_one_send_per_chunk();
	test_back_pressure();
	test_cancel();
	tlsc_ctx_free(srv_ctx);
	tlsc_ctx_free(cli_ctx);
	free(ca);
	pki_free_secret(ca_key);
	free(sc);
	pki_free_secret(sk);
	free(cc);
	pki_free_secret(ck);
	done_testing();
}
