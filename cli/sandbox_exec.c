/* sandbox_exec.c: `bcctl sandbox exec` and `bcctl sandbox cp`: a grant from
 * Sandboxes.Exec for the user's own public key, a listener on 127.0.0.1 for
 * exactly one connection, and stock OpenSSH (ssh, scp) run against it with
 * the argument vector of common/sshclient.h; the one connection is relayed
 * over Tunnels.Connect, or with a tunnel URL over the grant's WebSocket
 * path on the controller's JSON/HTTP port. The certificate and the known-hosts file live in a
 * temporary directory removed afterwards; the verb exits with the
 * program's status. Also `sandbox tunnels` and `sandbox close-tunnels`. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/compute/v1/tunnels.pb-c.h"
#include "cli.h"
#include "sshclient.h"
#include "tlsconn.h"
#include "util.h"

extern char **environ;

#define SSVC (&bc__compute__v1__sandboxes__descriptor)
#define TUNSVC (&bc__compute__v1__tunnels__descriptor)
#define PUBKEY_MAX 8192
#define ACCEPT_WAIT_MS 60000   /* the ticket's life */
/* what one read from ssh's connection takes, one message: while a send is
 * on its way ssh's bytes gather in the socket, and the next read takes
 * them all, so a busy tunnel sends few large messages (each one costs
 * wake-ups on every hop) and a quiet one small prompt ones. The
 * controller's TUNNEL_CHUNK_MAX. */
#define RELAY_BUF (256 * 1024)
#define FRAME_DATA_FIELD 2 /* bc.compute.v1.TunnelFrame.data */

typedef Bc__Compute__V1__SandboxExecGrant grant_t;

/* The flags exec and cp share. */
struct exec_flags {
	char *tenant, *key, *prog;
	int64_t minutes;
	bool accept_host_key, recursive;
};

/* One connection's temporary files. */
struct session {
	char dir[64], cert[96], known[96], key[PATH_MAX];
	int lfd, port;
};

/* The private key (--key, else ~/.ssh/id_ed25519) and its public line. */
static int read_key(struct cli_ctx *ctx, const struct exec_flags *f, struct session *s,
		    char **ret_line)
{
	const char *home = getenv("HOME");
	_cleanup_free_ char *pub = NULL;
	char *line = NULL;
	int r;

	if (f->key)
		snprintf(s->key, sizeof(s->key), "%s", f->key);
	else
		snprintf(s->key, sizeof(s->key), "%s/.ssh/id_ed25519", home ? home : ".");
	pub = xasprintf("%s.pub", s->key);
	if ((r = file_read_all(pub, PUBKEY_MAX, &line, NULL)) < 0) {
		bc_error_set(&ctx->err, BC_INVALID_INPUT, "cannot read the public key %s: %s "
			     "(make one with ssh-keygen -t ed25519, or name another with --key)",
			     pub, strerror(-r));
		return -BC_EDOMAIN;
	}
	line[strcspn(line, "\r\n")] = '\0';
	*ret_line = line;
	return 0;
}

/* A grant whose host trust input is malformed is refused, never used. */
static int check_grant(struct cli_ctx *ctx, const grant_t *g, const struct exec_flags *f)
{
	if (!g->ticket || !*g->ticket || !g->certificate || !*g->certificate ||
	    strchr(g->certificate, '\n') != strrchr(g->certificate, '\n') || !g->account ||
	    !*g->account)
		return bc_error_set(&ctx->err, BC_INVALID_RESPONSE, "the exec grant is incomplete");
	if (g->host_certified)
		return 0;
	if (!f->accept_host_key) {
		bc_error_set(&ctx->err, BC_INVALID_STATE, "sandbox %s has no valid host certificate "
			     "(hostCertificate: %s): its host key cannot be checked; pass "
			     "--accept-host-key to trust it on first use", g->sandbox_id,
			     g->host_certificate);
		return -BC_EDOMAIN;
	}
	fprintf(stderr, "warning: sandbox %s has no valid host certificate (%s): trusting its "
		"host key on first use (--accept-host-key)\n", g->sandbox_id, g->host_certificate);
	return 0;
}

static int write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "wx");
	int r = 0;

	if (!fp)
		return -errno;
	if (fputs(text, fp) == EOF)
		r = -EIO;
	if (fclose(fp) != 0 && r == 0)
		r = -errno;
	return r;
}

/* The temporary directory with the certificate and the known-hosts file. */
static int session_files(struct cli_ctx *ctx, const grant_t *g, struct session *s)
{
	_cleanup_free_ char *known = NULL;
	const char *tmp = getenv("TMPDIR");
	int r;

	snprintf(s->dir, sizeof(s->dir), "%s/bcctl-exec-XXXXXX",
		 tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(s->dir)) {
		s->dir[0] = '\0';
		return bc_error_set(&ctx->err, BC_INTERNAL, "cannot make a temporary directory: %s",
			    strerror(errno));
	}
	snprintf(s->cert, sizeof(s->cert), "%s/id-cert.pub", s->dir);
	snprintf(s->known, sizeof(s->known), "%s/known_hosts", s->dir);
	if (sshc_known_hosts(g->host_certified, g->host_principal, g->ca_public_key, &known) < 0)
		return bc_error_set(&ctx->err, BC_INVALID_RESPONSE, "the exec grant's host principal or CA key "
			    "is malformed (%s)", g->host_principal);
	if ((r = write_file(s->cert, g->certificate)) < 0 || (r = write_file(s->known, known)) < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "cannot write the session files: %s", strerror(-r));
	return 0;
}

static void session_remove(struct session *s)
{
	if (s->lfd >= 0)
		close(s->lfd);
	s->lfd = -1;
	if (!s->dir[0])
		return;
	unlink(s->cert);
	unlink(s->known);
	rmdir(s->dir);
	s->dir[0] = '\0';
}

static int listen_local(struct cli_ctx *ctx, struct session *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(s->lfd, 1) < 0 || getsockname(s->lfd, (struct sockaddr *)&a, &len) < 0)
		return bc_error_set(&ctx->err, BC_INTERNAL, "cannot listen on 127.0.0.1: %s", strerror(errno));
	s->port = ntohs(a.sin_port);
	return 0;
}

/* ---------------------------------------------------------------- relay */

struct relay {
	rpc_stream *st;
	int fd;
	atomic_bool done;         /* ssh exited: the tunnel's end is ours */
};

/* The connection to the tunnel; ssh's end half-closes the tunnel. */
static void *sock_to_tunnel(void *arg)
{
	struct relay *rl = arg;
	Bc__Compute__V1__TunnelFrame f = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	unsigned char *buf = xmalloc(RELAY_BUF);
	ssize_t n;

	for (;;) {
		n = read(rl->fd, buf, RELAY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		f.data.data = buf;
		f.data.len = (size_t)n;
		if (rpc_stream_send(rl->st, &f.base) < 0)
			break;
	}
	free(buf);
	rpc_stream_close_send(rl->st);
	return NULL;
}

/* The tunnel's bytes on their way to ssh: each message's pieces, read in
 * place (rpc_stream_read: a few KiB each, as gRPC's TLS layer left them),
 * gathered into one send per message or per RELAY_BUF. */
struct down {
	int fd;
	uint8_t *buf;
	size_t n;
};

static int down_flush(struct down *d)
{
	size_t n = d->n;

	d->n = 0;
	return n && sock_send_all(d->fd, d->buf, n) < 0 ? -EPIPE : 0;
}

/* rpc_read_fn: -EPIPE once ssh's side is gone. */
static int down_piece(void *arg, const uint8_t *p, size_t len)
{
	struct down *d = arg;

	while (len > 0) {
		size_t k = RELAY_BUF - d->n < len ? RELAY_BUF - d->n : len;

		memcpy(d->buf + d->n, p, k);
		d->n += k;
		p += k;
		len -= k;
		if (d->n == RELAY_BUF && down_flush(d) < 0)
			return -EPIPE;
	}
	return 0;
}

/* The tunnel to the connection; its end closes ssh's side for writing. */
static void *tunnel_to_sock(void *arg)
{
	struct relay *rl = arg;
	struct down d = {.fd = rl->fd, .buf = xmalloc(RELAY_BUF)};
	bc_error err = {0};

	for (;;) {
		int r = rpc_stream_read(rl->st, &bc__compute__v1__tunnel_frame__descriptor,
					FRAME_DATA_FIELD, down_piece, &d, -1, &err);

		if (r == 1 && down_flush(&d) < 0)
			break;
		if (r == -EPIPE)
			break;
		if (r <= 0) {
			if (r < 0 && err.code != BC_OK && !atomic_load(&rl->done))
				fprintf(stderr, "bcctl: tunnel: %s\n", err.message);
			break;
		}
	}
	free(d.buf);
	shutdown(rl->fd, SHUT_WR);
	return NULL;
}

/* Wait for ssh's one connection (or its early exit: *ret_status). */
static int accept_one(struct cli_ctx *ctx, struct session *s, pid_t pid, int *ret_status,
		      int *ret_fd)
{
	int64_t deadline = deadline_in(ACCEPT_WAIT_MS);
	struct pollfd p = {.fd = s->lfd, .events = POLLIN};

	while (!deadline_passed(deadline)) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			*ret_status = st;
			return 1;
		}
		if (poll(&p, 1, 100) == 1) {
			*ret_fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (*ret_fd < 0)
				return bc_error_set(&ctx->err, BC_INTERNAL, "accept: %s", strerror(errno));
			close(s->lfd);
			s->lfd = -1;
			return 0;
		}
	}
	kill(pid, SIGTERM);
	waitpid(pid, ret_status, 0);
	return bc_error_set(&ctx->err, BC_DEADLINE_EXCEEDED, "%s did not connect within 60 s", "ssh");
}

/* ----------------------------------------------------- the WebSocket route */

/* With a tunnel URL (BC_TUNNEL_URL or the config's tunnel_url: the
 * controller's JSON/HTTP port, docs/http.md "WebSockets"), the connection
 * is relayed over the grant's WebSocket path instead of Tunnels.Connect:
 * TLS verified with the same CA, one binary frame per read from ssh
 * (masked, as a client must), the server's frames written to ssh. ssh's
 * end is a close frame (1000), after which the server's answer still
 * flows until its own close. No gRPC core on this leg. */

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_HEAD_MAX 8192
#define WS_CONNECT_MS 10000

/* room for a client frame's header (at most 2 + 8 length + 4 mask), so
 * the payload behind it stays 16-byte aligned */
#define WS_HEAD 16

struct wsrelay {
	struct tlsc *c;
	int fd;
	pthread_mutex_t wmu;      /* one frame at a time on the connection */
	atomic_bool done;
};

/* Mask the n payload bytes at f + WS_HEAD in place and put the header of
 * one frame of opcode op right in front of them: the frame's start (its
 * length in *ret_len), or NULL. */
static uint8_t *ws_frame(uint8_t *f, int op, size_t n, size_t *ret_len)
{
	uint8_t h[WS_HEAD], key[4];
	size_t hl = 2;

	if (RAND_bytes(key, 4) != 1)
		return NULL;
	h[0] = (uint8_t)(0x80 | op);
	if (n < 126) {
		h[1] = (uint8_t)(0x80 | n);
	} else if (n < 65536) {
		h[1] = 0x80 | 126;
		h[2] = (uint8_t)(n >> 8);
		h[3] = (uint8_t)n;
		hl = 4;
	} else {
		h[1] = 0x80 | 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	memcpy(h + hl, key, 4);
	hl += 4;
	xor_mask4(f + WS_HEAD, f + WS_HEAD, n, key);
	memcpy(f + WS_HEAD - hl, h, hl);
	*ret_len = hl + n;
	return f + WS_HEAD - hl;
}

/* Send the frame at f (ws_frame) whole: wmu keeps frames apart. */
static int ws_write(struct wsrelay *w, const uint8_t *f, size_t len)
{
	int r;

	if (!f)
		return -EIO;
	pthread_mutex_lock(&w->wmu);
	r = tlsc_write_all(w->c, f, len);
	pthread_mutex_unlock(&w->wmu);
	return r;
}

/* A control frame (ping's pong, our close), from either thread: framed in
 * its own buffer, never in ws_up's. */
static int ws_control(struct wsrelay *w, int op, const uint8_t *p, size_t n)
{
	uint8_t f[WS_HEAD + 125];
	size_t len;

	if (n > 125)
		return -EINVAL;
	memcpy(f + WS_HEAD, p, n);
	p = ws_frame(f, op, n, &len);
	return ws_write(w, p, len);
}

/* ssh -> the connection: each read lands in the frame buffer behind the
 * header's room and is masked and framed in place (no copy). */
static void *ws_up(void *arg)
{
	struct wsrelay *w = arg;
	uint8_t *f = xmalloc(WS_HEAD + RELAY_BUF), bye[2] = {0x03, 0xe8}; /* 1000 */
	const uint8_t *frame;
	ssize_t n;
	size_t len = 0;

	for (;;) {
		n = read(w->fd, f + WS_HEAD, RELAY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		frame = ws_frame(f, 0x2, (size_t)n, &len);
		if (ws_write(w, frame, len) < 0)
			break;
	}
	free(f);
	if (n == 0)
		ws_control(w, 0x8, bye, 2);
	return NULL;
}

/* Read exactly n bytes of the connection through the buffer. */
struct wsin {
	uint8_t *b;
	size_t len, off, cap;
};

static int ws_fill(struct wsrelay *w, struct wsin *in, size_t need)
{
	while (in->len - in->off < need) {
		ssize_t r;

		if (in->off > 0) {
			memmove(in->b, in->b + in->off, in->len - in->off);
			in->len -= in->off;
			in->off = 0;
		}
		r = tlsc_read(w->c, in->b + in->len, in->cap - in->len, -1);
		if (r <= 0)
			return r == 0 ? -EIO : (int)r;
		in->len += (size_t)r;
	}
	return 0;
}

static void *ws_down(void *arg)
{
	struct wsrelay *w = arg;
	struct wsin in = {.b = xmalloc(2 * RELAY_BUF), .cap = 2 * RELAY_BUF};
	const char *why = NULL;

	for (;;) {
		uint8_t b0, b1;
		uint64_t n;
		size_t h = 2;
		int op;

		if (ws_fill(w, &in, 2) < 0) {
			why = "the connection ended without a close frame";
			break;
		}
		b0 = in.b[in.off];
		b1 = in.b[in.off + 1];
		op = b0 & 0x0f;
		n = b1 & 0x7f;
		if (n == 126)
			h = 4;
		else if (n == 127)
			h = 10;
		if (b1 & 0x80) {
			why = "a masked frame from the server";
			break;
		}
		if (ws_fill(w, &in, h) < 0) {
			why = "the connection broke";
			break;
		}
		if (h == 4)
			n = (uint64_t)in.b[in.off + 2] << 8 | in.b[in.off + 3];
		else if (h == 10)
			for (int i = 0; i < 8; i++)
				n = (i ? n << 8 : 0) | in.b[in.off + 2 + i];
		in.off += h;
		/* the payload in pieces as it comes (a data frame may be large) */
		if (op == 0x0 || op == 0x2) {
			while (n > 0) {
				size_t take;
				if (in.len == in.off && ws_fill(w, &in, 1) < 0)
					goto broke;
				take = in.len - in.off < n ? in.len - in.off : (size_t)n;
				if (sock_send_all(w->fd, in.b + in.off, take) < 0)
					goto broke;
				in.off += take;
				n -= take;
			}
			continue;
		}
		if (n > 125 || ws_fill(w, &in, (size_t)n) < 0) {
			why = "a bad control frame";
			break;
		}
		if (op == 0x9) {         /* ping: pong with the same payload */
			ws_control(w, 0xA, in.b + in.off, (size_t)n);
		} else if (op == 0x8) {  /* the server's close: the tunnel ended */
			unsigned code = n >= 2 ? (unsigned)in.b[in.off] << 8 | in.b[in.off + 1] : 1005;
			if (code != 1000 && !atomic_load(&w->done))
				fprintf(stderr, "bcctl: tunnel: closed (%u): %.*s\n", code,
					n > 2 ? (int)n - 2 : 0, (const char *)in.b + in.off + 2);
			break;
		}
		in.off += (size_t)n;
	}
	if (0) {
broke:
		why = "the connection broke";
	}
	if (why && !atomic_load(&w->done))
		fprintf(stderr, "bcctl: tunnel: %s\n", why);
	free(in.b);
	shutdown(w->fd, SHUT_WR);
	return NULL;
}

/* TLS to the tunnel URL, the upgrade to the grant's path: 0 or -BC_EDOMAIN. */
static int ws_open(struct cli_ctx *ctx, const grant_t *g, struct tlsc **ret)
{
	char host[300], ebuf[300], line[WS_HEAD_MAX], key[32], want[64];
	const char *hp = ctx->tunnel_url, *colon;
	uint8_t nonce[16], sha[SHA_DIGEST_LENGTH];
	_cleanup_free_ char *req = NULL, *acc = NULL;
	bool upgraded = false, accepted = false;
	struct tlsc *c = NULL;
	SSL_CTX *sc;
	int r;

	if (strncmp(hp, "https://", 8) == 0)
		hp += 8;
	snprintf(host, sizeof(host), "%s", hp);
	if (strchr(host, '/'))
		*strchr(host, '/') = '\0';
	if (!(colon = strrchr(host, ':')) || !g->path || !*g->path)
		return bc_error_set(&ctx->err, BC_INVALID_INPUT, "tunnel_url %s: use HOST:PORT "
				    "(the controller's JSON/HTTP port)", ctx->tunnel_url);
	sc = tlsc_ctx_new(false, NULL, NULL, ctx->ca_pem, ebuf, sizeof(ebuf));
	if (!sc)
		return bc_error_set(&ctx->err, BC_INVALID_INPUT, "tunnel_url: %s", ebuf);
	{
		char name[300];
		size_t n = (size_t)(colon - host);
		if (n >= 2 && host[0] == '[' && host[n - 1] == ']')
			snprintf(name, sizeof(name), "%.*s", (int)n - 2, host + 1);
		else
			snprintf(name, sizeof(name), "%.*s", (int)n, host);
		r = tlsc_connect(sc, host, name, WS_CONNECT_MS, &c, ebuf, sizeof(ebuf));
	}
	tlsc_ctx_free(sc);
	if (r < 0)
		return bc_error_set(&ctx->err, BC_UNAVAILABLE, "tunnel_url %s: %s", host, ebuf);
	RAND_bytes(nonce, sizeof(nonce));
	EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
	acc = xasprintf("%s" WS_GUID, key);
	SHA1((const unsigned char *)acc, strlen(acc), sha);
	EVP_EncodeBlock((unsigned char *)want, sha, SHA_DIGEST_LENGTH);
	req = xasprintf("GET /api/compute/%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
			"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
			"Sec-WebSocket-Version: 13\r\n\r\n", g->path, host, key);
	r = tlsc_write_all(c, req, strlen(req));
	for (int i = 0; r == 0; i++) {
		int n = tlsc_read_line(c, line, sizeof(line), WS_CONNECT_MS);
		if (n < 0) {
			r = n;
			break;
		}
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (n == 0)
			break;
		if (i == 0)
			upgraded = strncmp(line, "HTTP/1.1 101 ", 13) == 0;
		else if (strncasecmp(line, "Sec-WebSocket-Accept:", 21) == 0)
			accepted = strcmp(line + 21 + strspn(line + 21, " "), want) == 0;
		if (i == 0 && !upgraded)
			fprintf(stderr, "bcctl: tunnel: %s\n", line);
	}
	if (r < 0 || !upgraded || !accepted) {
		tlsc_free(c);
		return bc_error_set(&ctx->err, BC_UNAVAILABLE, "the tunnel's WebSocket at %s was "
				    "not opened%s", host, r < 0 ? " (no answer)" : "");
	}
	*ret = c;
	return 0;
}

/* relay_session over the WebSocket route */
static int relay_ws(struct cli_ctx *ctx, const grant_t *g, int fd, pid_t pid, int *ret_status)
{
	struct wsrelay w = {.fd = fd};
	pthread_t up, down;
	bool up_on = false, down_on = false;
	int r = ws_open(ctx, g, &w.c);

	pthread_mutex_init(&w.wmu, NULL);
	if (r == 0) {
		up_on = pthread_create(&up, NULL, ws_up, &w) == 0;
		down_on = pthread_create(&down, NULL, ws_down, &w) == 0;
	} else {
		fprintf(stderr, "bcctl: %s\n", ctx->err.message);
		bc_error_clear(&ctx->err);
	}
	if (!up_on || !down_on)
		shutdown(fd, SHUT_RDWR);
	while (waitpid(pid, ret_status, 0) < 0 && errno == EINTR)
		;
	atomic_store(&w.done, true);
	shutdown(fd, SHUT_RDWR);
	if (w.c)
		tlsc_cancel(w.c);
	if (up_on)
		pthread_join(up, NULL);
	if (down_on)
		pthread_join(down, NULL);
	tlsc_free(w.c);
	pthread_mutex_destroy(&w.wmu);
	close(fd);
	return 0;
}

/* Relay the connection over the tunnel until ssh exits. */
static int relay_session(struct cli_ctx *ctx, const grant_t *g, int fd, pid_t pid,
			 int *ret_status)
{
	Bc__Compute__V1__TunnelFrame first = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	struct relay rl = {.fd = fd};
	pthread_t up, down;
	bool up_on = false, down_on = false;

	if (ctx->tunnel_url && !ctx->insecure)
		return relay_ws(ctx, g, fd, pid, ret_status);
	rl.st = cli_bidi_open(ctx, TUNSVC, "Connect");
	first.ticket = g->ticket;
	if (rl.st && rpc_stream_send(rl.st, &first.base) == 0) {
		up_on = pthread_create(&up, NULL, sock_to_tunnel, &rl) == 0;
		down_on = pthread_create(&down, NULL, tunnel_to_sock, &rl) == 0;
	}
	if (!up_on || !down_on)
		shutdown(fd, SHUT_RDWR); /* ssh sees the connection fail */
	while (waitpid(pid, ret_status, 0) < 0 && errno == EINTR)
		;
	atomic_store(&rl.done, true);
	shutdown(fd, SHUT_RDWR);
	rpc_stream_cancel(rl.st);
	if (up_on)
		pthread_join(up, NULL);
	if (down_on)
		pthread_join(down, NULL);
	rpc_stream_free(rl.st);
	close(fd);
	return 0;
}

static int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 255;
}

/* A memory restore still answering to its source's identity: say what
 * lets exec in (docs/snapshots.md, "A restore's own SSH identity"). */
static void restore_hint(const struct cli_ctx *ctx)
{
	const char *why = bc_error_get_detail(&ctx->err, "reason");

	if (why && strcmp(why, "restore-shares-identity") == 0)
		fprintf(stderr, "hint: this sandbox shares its SSH identity with the sandbox it was "
			"restored from or a sibling restore: delete those, or wait until its host "
			"gives it its own identity (bcctl sandbox get shows identityRebound: true)\n");
}

/* The whole session: grant, files, listener, the program, the relay. */
/* With cap, ssh's streams are cap's pipes instead of ours (bcctl mcp). */
static int run_session(struct cli_ctx *ctx, const char *sbx, const struct exec_flags *f,
		       enum sshc_prog kind, char *const *args, size_t n_args,
		       struct cli_capture *cap)
{
	posix_spawn_file_actions_t fa;
	bool fa_on = false;
	Bc__Compute__V1__ExecSandboxRequest req = BC__COMPUTE__V1__EXEC_SANDBOX_REQUEST__INIT;
	struct session s = {.lfd = -1};
	ProtobufCMessage *resp = NULL;
	_cleanup_free_ char *line = NULL;
	char **argv = NULL;
	grant_t *g;
	pid_t pid;
	int r, status = 0, fd = -1;

	if ((r = read_key(ctx, f, &s, &line)) < 0)
		return r;
	req.tenant_id = f->tenant ? f->tenant : (char *)"";
	req.sandbox_id = (char *)sbx;
	req.public_key = line;
	req.minutes = (int32_t)f->minutes;
	if ((r = cli_call(ctx, SSVC, "Exec", &req.base, 0, &resp)) < 0) {
		restore_hint(ctx);
		return r;
	}
	g = (grant_t *)resp;
	if ((r = check_grant(ctx, g, f)) < 0 || (r = session_files(ctx, g, &s)) < 0 ||
	    (r = listen_local(ctx, &s)) < 0)
		goto out;
	{
		struct sshc_opts o = {.kind = kind, .prog = f->prog, .port = s.port,
				      .key_file = s.key, .cert_file = s.cert,
				      .known_hosts = s.known, .account = g->account,
				      .host_key_alias = g->host_certified ? g->host_principal :
									    g->sandbox_id,
				      .strict = g->host_certified, .recursive = f->recursive};

		if (sshc_argv(&o, args, n_args, &argv) < 0) {
			r = bc_error_set(&ctx->err, BC_INVALID_INPUT, "cannot pass these arguments to %s safely",
				 f->prog);
			goto out;
		}
	}
	if (cap && (r = cli_capture_actions(cap, &fa)) < 0) {
		r = bc_error_set(&ctx->err, BC_INTERNAL, "pipes for ssh: %s", strerror(-r));
		goto out;
	}
	fa_on = cap != NULL;
	if ((r = posix_spawnp(&pid, f->prog, fa_on ? &fa : NULL, NULL, argv, environ)) != 0) {
		r = bc_error_set(&ctx->err, BC_INVALID_INPUT, "cannot run %s", f->prog);
		goto out;
	}
	if (cap && cli_capture_start(cap, pid) < 0)
		kill(pid, SIGTERM); /* ssh's streams unread: end it, its status tells */
	r = accept_one(ctx, &s, pid, &status, &fd);
	if (r == 0)
		r = relay_session(ctx, g, fd, pid, &status);
	if (r >= 0) {
		ctx->exit_code = exit_code_of(status);
		r = 0;
	}
out:
	if (cap)
		cli_capture_finish(cap);
	if (fa_on)
		posix_spawn_file_actions_destroy(&fa);
	session_remove(&s);
	sshc_argv_free(argv);
	protobuf_c_message_free_unpacked(resp, NULL);
	return r;
}

/* Split argv at the first "--": the words before are flags, after it the
 * command. */
static int split_dashdash(int argc, char **argv, int *ret_n)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			*ret_n = i;
			return i + 1;
		}
	*ret_n = argc;
	return argc;
}

#define EXEC_FLAGS(f, progname, progdefault)                                                \
	{.name = "key", .type = CLI_STR, .dst = &(f).key, .meta = "FILE",                    \
	 .help = "private key; its FILE.pub is certified (default ~/.ssh/id_ed25519)"},       \
	{.name = "minutes", .type = CLI_INT, .dst = &(f).minutes, .meta = "N", .min = 1,     \
	 .max = 15, .help = "the certificate's lifetime (default 10)"},                      \
	{.name = progname, .type = CLI_STR, .dst = &(f).prog, .meta = "PROG",                \
	 .help = "the OpenSSH program to run (default " progdefault ")"},                    \
	{.name = "accept-host-key", .type = CLI_BOOL, .dst = &(f).accept_host_key,          \
	 .help = "trust a guest without a host certificate on first use"},                   \
	CLI_FLAG_TENANT(&(f).tenant)

int cli_sandbox_exec(struct cli_ctx *ctx, int argc, char **argv)
{
	struct exec_flags f = {.minutes = 10, .prog = (char *)"ssh"};
	char *sbx = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &sbx, .required = true, .help = "sandbox id"},
		EXEC_FLAGS(f, "ssh", "ssh"),
	};
	int n, cmd = split_dashdash(argc, argv, &n);
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), n, argv);

	if (r != 0)
		return r;
	return run_session(ctx, sbx, &f, SSHC_SSH, argv + cmd, (size_t)(argc - cmd), NULL);
}

/* See cli.h. The certificate lives as long as the command may (at most
 * 15 minutes, the grant's bound). */
int cli_sandbox_run(struct cli_ctx *ctx, const struct cli_exec_opts *o,
		    const struct mcp_exec_req *q, struct mcp_exec_out *ret)
{
	struct exec_flags f = {.key = (char *)o->key, .prog = (char *)(o->prog ? o->prog : "ssh"),
			       .accept_host_key = o->accept_host_key,
			       .minutes = q->timeout_ms / 60000 + 2};
	struct cli_capture cap = {.in = q->in, .in_len = q->in_len, .cap = q->cap,
				  .deadline = deadline_in(q->timeout_ms), .out = ret,
				  .fd = {-1, -1, -1}, .child = {-1, -1, -1}};
	char *args[] = {(char *)q->command};
	int r;

	if (f.minutes > 15)
		f.minutes = 15;
	ctx->exit_code = 0;
	r = run_session(ctx, q->sandbox_id, &f, SSHC_SSH, args, 1, &cap);
	ret->exit_code = ret->timed_out ? -1 : ctx->exit_code;
	ctx->exit_code = 0;
	return r;
}

/* cp's paths for scp: "ID:PATH" becomes "127.0.0.1:PATH" (one sandbox);
 * a local path that scp would read as remote gets "./" in front. */
static int cp_paths(struct cli_ctx *ctx, char **in, size_t n, char ***ret, char *sbx,
		    size_t sbx_len)
{
	char **out = xcalloc(n + 1, sizeof(*out));
	size_t remote = 0;

	sbx[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char id[64];
		const char *path;

		if (sshc_remote_path(in[i], id, sizeof(id), &path)) {
			if (sbx[0] && strcmp(sbx, id) != 0) {
				sshc_argv_free(out);
				return cli_usage_error(ctx, "copy to or from one sandbox at a time");
			}
			snprintf(sbx, sbx_len, "%s", id);
			out[i] = xasprintf("%s:%s", SSHC_HOST, *path ? path : ".");
			remote++;
		} else {
			out[i] = strchr(in[i], ':') && in[i][0] != '/' ? xasprintf("./%s", in[i]) :
									 xstrdup(in[i]);
		}
	}
	if (remote == 0) {
		sshc_argv_free(out);
		return cli_usage_error(ctx, "name the sandbox side as ID:PATH");
	}
	*ret = out;
	return 0;
}

int cli_sandbox_cp(struct cli_ctx *ctx, int argc, char **argv)
{
	struct exec_flags f = {.minutes = 10, .prog = (char *)"scp"};
	struct cli_strv paths = {0};
	const struct cli_flag flags[] = {
		{.name = "PATH", .type = CLI_ARGS, .dst = &paths, .required = true,
		 .help = "SRC ... DST; the sandbox side as ID:PATH"},
		{.name = "recursive", .type = CLI_BOOL, .dst = &f.recursive,
		 .help = "copy directories"},
		EXEC_FLAGS(f, "scp", "scp"),
	};
	char sbx[64], **scp_args = NULL;
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	if (paths.n < 2)
		return cli_usage_error(ctx, "give at least a source and a destination");
	if ((r = cp_paths(ctx, paths.v, paths.n, &scp_args, sbx, sizeof(sbx))) < 0)
		return r;
	r = run_session(ctx, sbx, &f, SSHC_SCP, scp_args, paths.n, NULL);
	sshc_argv_free(scp_args);
	return r;
}

/* -------------------------------------------------------------- tunnels */

static void show_tunnel_rows(Bc__Compute__V1__Tunnel *const *items, size_t n, FILE *out)
{
	static const char *const h[] = {"ID", "STATE", "IDENTITY", "NODE", "REPLICA", "OPENED",
					"CLOSED", "REASON"};
	struct cli_table *t = cli_table_new(h, ARRAY_SIZE(h));
	char b1[32], b2[32];

	for (size_t i = 0; i < n; i++) {
		const Bc__Compute__V1__Tunnel *x = items[i];

		cli_table_cell(t, "%s", x->id);
		cli_table_cell(t, "%s", x->state);
		cli_table_cell(t, "%s", x->identity_id);
		cli_table_cell(t, "%s", x->node_id);
		cli_table_cell(t, "%s", x->replica);
		cli_table_cell(t, "%s", cli_fmt_time(x->opened_at, b1, sizeof(b1)));
		cli_table_cell(t, "%s", cli_fmt_time(x->closed_at, b2, sizeof(b2)));
		cli_table_cell(t, "%s", x->close_reason);
	}
	cli_table_print(t, out);
	cli_table_free(t);
}

static void show_tunnels(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__ListTunnelsResponse *a = (const void *)m;

	show_tunnel_rows(a->items, a->n_items, out);
}

static void show_closed(const ProtobufCMessage *m, FILE *out)
{
	const Bc__Compute__V1__CloseTunnelsResponse *a = (const void *)m;

	show_tunnel_rows(a->items, a->n_items, out);
}

int cli_sandbox_tunnels(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__ListTunnelsRequest req = BC__COMPUTE__V1__LIST_TUNNELS_REQUEST__INIT;
	char *tenant = NULL, *sbx = NULL;
	bool all = false;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &sbx, .required = true, .help = "sandbox id"},
		{.name = "all", .type = CLI_BOOL, .dst = &all,
		 .help = "closed and unused grants too, newest first (at most 200)"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.sandbox_id = sbx;
	req.closed = all;
	return cli_run(ctx, TUNSVC, "List", &req.base, show_tunnels, 0);
}

int cli_sandbox_close_tunnels(struct cli_ctx *ctx, int argc, char **argv)
{
	Bc__Compute__V1__CloseTunnelsRequest req = BC__COMPUTE__V1__CLOSE_TUNNELS_REQUEST__INIT;
	char *tenant = NULL, *sbx = NULL, *tun = NULL;
	const struct cli_flag flags[] = {
		{.name = "ID", .type = CLI_ARG, .dst = &sbx, .required = true, .help = "sandbox id"},
		{.name = "tunnel", .type = CLI_STR, .dst = &tun, .meta = "TUN",
		 .help = "close only this tunnel"},
		CLI_FLAG_TENANT(&tenant),
	};
	int r = cli_args_parse(ctx, flags, ARRAY_SIZE(flags), argc, argv);

	if (r != 0)
		return r;
	req.tenant_id = tenant ? tenant : (char *)"";
	req.sandbox_id = sbx;
	req.tunnel_id = tun ? tun : (char *)"";
	return cli_run(ctx, TUNSVC, "Close", &req.base, show_closed, 0);
}
