/* tlsconn.c: see tlsconn.h. */
#include "tlsconn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "util.h"

/* a waiting thread re-checks cancellation this often */
#define SLICE_MS 200
/* Reads: OpenSSL reads ahead up to this much per read(2) (its record
 * buffer), not a 5-byte header and then the record. */
#define TLSC_READ_AHEAD (64 * 1024)
/* Writes: the records of up to this much plaintext are gathered in the
 * connection's own buffer and go out with one send(2); the buffer holds
 * them and the handshake's flights (any more waits for a flush). */
#define TLSC_WRITE_CHUNK (64 * 1024)
#define TLSC_WBUF (TLSC_WRITE_CHUNK + 8 * 1024)

struct tlsc {
	SSL *ssl;
	int fd;
	pthread_mutex_t mu;       /* every SSL_* call and wbuf */
	atomic_bool cancelled;
	bool sent_close;
	char peer[INET6_ADDRSTRLEN + 8];
	size_t woff, wlen;        /* wbuf[woff, wlen): records not yet sent */
	uint8_t wbuf[TLSC_WBUF];
};

static void ssl_err(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_get_error();
	char s[200] = "";

	if (e)
		ERR_error_string_n(e, s, sizeof(s));
	snprintf(buf, len, "%s%s%s", what, *s ? ": " : "", s);
	ERR_clear_error();
}

/* ------------------------------------------------------------ context */

int tlsc_ctx_use_chain(SSL_CTX *ctx, const char *cert_pem, const char *key_pem)
{
	BIO *b = BIO_new_mem_buf(cert_pem, -1), *k = BIO_new_mem_buf(key_pem, -1);
	X509 *x = b ? PEM_read_bio_X509_AUX(b, NULL, NULL, NULL) : NULL;
	EVP_PKEY *pk = k ? PEM_read_bio_PrivateKey(k, NULL, NULL, NULL) : NULL;
	int ok = x && pk && SSL_CTX_use_certificate(ctx, x) == 1 &&
		 SSL_CTX_use_PrivateKey(ctx, pk) == 1;

	while (ok && (X509_free(x), x = PEM_read_bio_X509(b, NULL, NULL, NULL)))
		if (SSL_CTX_add0_chain_cert(ctx, x) != 1)
			ok = 0;
		else
			x = NULL;
	ok = ok && SSL_CTX_check_private_key(ctx) == 1;
	X509_free(x);
	EVP_PKEY_free(pk);
	BIO_free(b);
	BIO_free(k);
	ERR_clear_error();
	return ok ? 0 : -EINVAL;
}

static int ctx_load(SSL_CTX *ctx, const char *cert_pem, const char *key_pem, const char *ca_pem)
{
	BIO *a = BIO_new_mem_buf(ca_pem, -1);
	X509_STORE *st = SSL_CTX_get_cert_store(ctx);
	X509 *x = NULL;
	int n = 0, ok = tlsc_ctx_use_chain(ctx, cert_pem, key_pem) == 0;

	while (ok && a && (X509_free(x), x = PEM_read_bio_X509(a, NULL, NULL, NULL)))
		if (X509_STORE_add_cert(st, x) == 1)
			n++;
	ok = ok && n > 0;
	X509_free(x);
	BIO_free(a);
	ERR_clear_error();
	return ok ? 0 : -EINVAL;
}

/* accept a missing client certificate here: the server counts and
 * refuses it itself (tlsc_peer_cn); a bad one fails the handshake */
static int verify_cb(int ok, X509_STORE_CTX *x)
{
	(void)x;
	return ok;
}

SSL_CTX *tlsc_ctx_new(bool server, const char *cert_pem, const char *key_pem,
		      const char *ca_pem, char *errbuf, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());

	if (!ctx) {
		ssl_err(errbuf, errlen, "SSL_CTX_new");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
			 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_cb);
	if (server) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
		/* no resumption: no TLS 1.3 tickets either, which a client
		 * that only writes would leave unread (tlsc_free) */
		SSL_CTX_set_num_tickets(ctx, 0);
	}
	if (!server && !cert_pem) { /* no client certificate: a CA, or the system's roots */
		BIO *a = ca_pem ? BIO_new_mem_buf(ca_pem, -1) : NULL;
		X509 *x;
		int n = 0;

		while (a && (x = PEM_read_bio_X509(a, NULL, NULL, NULL))) {
			n += X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x) == 1;
			X509_free(x);
		}
		BIO_free(a);
		ERR_clear_error();
		if (!ca_pem)
			n = SSL_CTX_set_default_verify_paths(ctx) == 1;
		if (n > 0)
			return ctx;
		snprintf(errbuf, errlen, "the CA cannot be loaded");
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (!cert_pem || !key_pem || !ca_pem || ctx_load(ctx, cert_pem, key_pem, ca_pem) < 0) {
		snprintf(errbuf, errlen, "the certificate, key or CA cannot be loaded");
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

void tlsc_ctx_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}

/* ------------------------------------------------------------- sockets */

/* "host:port" or "[v6]:port" into host and port. */
static int split(const char *hp, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon = strrchr(hp, ':');
	size_t n;

	if (!colon || !colon[1])
		return -EINVAL;
	n = (size_t)(colon - hp);
	if (n >= 2 && hp[0] == '[' && hp[n - 1] == ']')
		hp++, n -= 2;
	if (n >= hl || strlen(colon + 1) >= pl)
		return -EINVAL;
	memcpy(host, hp, n);
	host[n] = '\0';
	snprintf(port, pl, "%s", colon + 1);
	return 0;
}

static void tune(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int tlsc_listen(const char *hostport, int *ret_port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[256], port[16];
	int fd, one = 1, e;

	if (split(hostport, host, sizeof(host), port, sizeof(port)) < 0)
		return -EINVAL;
	if (getaddrinfo(*host ? host : NULL, port, &hints, &ai) != 0 || !ai)
		return -EADDRNOTAVAIL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		freeaddrinfo(ai);
		return -errno;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		e = -errno;
		freeaddrinfo(ai);
		close(fd);
		return e;
	}
	freeaddrinfo(ai);
	*ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port :
			  ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static int dial(const char *hostport, int timeout_ms)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL, *p;
	char host[256], port[16];
	int fd = -1, e = -EHOSTUNREACH;

	if (split(hostport, host, sizeof(host), port, sizeof(port)) < 0)
		return -EINVAL;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return -EHOSTUNREACH;
	for (p = ai; p; p = p->ai_next) {
		struct pollfd pfd;
		socklen_t sl = sizeof(int);
		int se = 0;

		fd = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			e = -errno;
			continue;
		}
		if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
			if (poll(&pfd, 1, timeout_ms) <= 0)
				se = ETIMEDOUT;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &se, &sl) < 0)
				se = errno;
			if (se == 0)
				break;
			e = -se;
		} else {
			e = -errno;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd >= 0 ? fd : e;
}

static void peer_name(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET6) {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, a, sizeof(a));
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		} else if (ss.ss_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, a, sizeof(a));
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		}
	}
	snprintf(buf, len, "%s:%d", a, port);
}

/* ------------------------------------------------- the write buffer */

/* OpenSSL's write side is a sink into c->wbuf (a BIO of our own): every
 * record it makes lands there, and flush_out() sends what it holds with
 * one send(2). A full buffer is a retry (SSL_ERROR_WANT_WRITE) until a
 * flush made room: memory per connection stays TLSC_WBUF. Reads use
 * OpenSSL's socket BIO with read-ahead. */

static int sink_write(BIO *b, const char *data, int len)
{
	struct tlsc *c = BIO_get_data(b);
	size_t n = (size_t)len;

	BIO_clear_retry_flags(b);
	if (c->woff && TLSC_WBUF - c->wlen < n) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	if (n > TLSC_WBUF - c->wlen)
		n = TLSC_WBUF - c->wlen;
	if (!n) {
		BIO_set_retry_write(b);
		return -1;
	}
	memcpy(c->wbuf + c->wlen, data, n);
	c->wlen += n;
	return (int)n;
}

static long sink_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct tlsc *c = BIO_get_data(b);

	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH: /* flush_out() after each call sends it */
		return 1;
	case BIO_CTRL_WPENDING:
		return c ? (long)(c->wlen - c->woff) : 0;
	default:
		return 0;
	}
}

static int sink_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static BIO_METHOD *sink_method;
static pthread_once_t sink_once = PTHREAD_ONCE_INIT;

static void sink_init(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tlsc sink");

	if (!m || BIO_meth_set_write(m, sink_write) != 1 || BIO_meth_set_ctrl(m, sink_ctrl) != 1 ||
	    BIO_meth_set_create(m, sink_create) != 1)
		abort();
	sink_method = m;
}

/* Send what wbuf holds (mu held, non-blocking): 0 when it is all gone,
 * 1 when the socket is full, -EPIPE. */
static int flush_out(struct tlsc *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->woff += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 1 : -EPIPE;
	}
	c->woff = c->wlen = 0;
	return 0;
}

/* ------------------------------------------------------------ handshake */

static int handshake(SSL_CTX *ctx, int fd, bool server, const char *server_name,
		     int timeout_ms, struct tlsc **ret, char *errbuf, size_t errlen)
{
	int64_t deadline = mono_ms() + timeout_ms;
	struct tlsc *c;
	BIO *rb = NULL, *wb = NULL;
	SSL *ssl = NULL;

	pthread_once(&sink_once, sink_init);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 || !(ssl = SSL_new(ctx)) ||
	    !(rb = BIO_new_socket(fd, BIO_NOCLOSE)) || !(wb = BIO_new(sink_method))) {
		snprintf(errbuf, errlen, "cannot set the connection up");
		BIO_free(rb);
		SSL_free(ssl);
		close(fd);
		return -ENOMEM;
	}
	c = xmalloc(sizeof(*c));
	memset(c, 0, offsetof(struct tlsc, wbuf));
	c->ssl = ssl;
	c->fd = fd;
	BIO_set_data(wb, c);
	tune(fd);
	SSL_set_bio(ssl, rb, wb);
	SSL_set_read_ahead(ssl, 1);
	SSL_set_default_read_buffer_len(ssl, TLSC_READ_AHEAD);
	if (server) {
		SSL_set_accept_state(ssl);
	} else {
		struct in6_addr ip;
		bool is_ip = inet_pton(AF_INET, server_name, &ip) == 1 ||
			     inet_pton(AF_INET6, server_name, &ip) == 1;

		SSL_set_connect_state(ssl);
		if (!is_ip)
			SSL_set_tlsext_host_name(ssl, server_name);
		SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
				  X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
		if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name) != 1 :
		    SSL_set1_host(ssl, server_name) != 1) {
			snprintf(errbuf, errlen, "bad server name");
			SSL_free(ssl);
			close(fd);
			free(c);
			return -EINVAL;
		}
	}
	for (;;) {
		int r, e, fl, left = (int)(deadline - mono_ms());
		struct pollfd pfd = {.fd = fd};

		ERR_clear_error();
		r = SSL_do_handshake(ssl);
		e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, r);
		fl = flush_out(c); /* our flight, or the alert of a failure */
		if (r == 1 && fl == 0)
			break;
		if ((r != 1 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ||
		    fl < 0 || left <= 0) {
			long v = SSL_get_verify_result(ssl);
			if (left <= 0)
				snprintf(errbuf, errlen, "TLS handshake timed out");
			else if (v != X509_V_OK)
				snprintf(errbuf, errlen, "TLS handshake: certificate: %s",
					 X509_verify_cert_error_string(v));
			else if (fl < 0)
				snprintf(errbuf, errlen, "TLS handshake: the connection broke");
			else
				ssl_err(errbuf, errlen, "TLS handshake");
			SSL_free(ssl);
			close(fd);
			free(c);
			return left <= 0 ? -ETIMEDOUT : -EPROTO;
		}
		if (fl > 0 || e == SSL_ERROR_WANT_WRITE)
			pfd.events |= POLLOUT;
		if (r != 1 && e == SSL_ERROR_WANT_READ)
			pfd.events |= POLLIN;
		poll(&pfd, 1, left);
	}
	pthread_mutex_init(&c->mu, NULL);
	peer_name(fd, c->peer, sizeof(c->peer));
	*ret = c;
	return 0;
}

int tlsc_connect(SSL_CTX *ctx, const char *hostport, const char *server_name, int timeout_ms,
		 struct tlsc **ret, char *errbuf, size_t errlen)
{
	int64_t t0 = mono_ms();
	int fd = dial(hostport, timeout_ms), left;

	*ret = NULL;
	if (fd < 0) {
		snprintf(errbuf, errlen, "cannot connect to %s: %s", hostport, strerror(-fd));
		return fd;
	}
	left = timeout_ms - (int)(mono_ms() - t0);
	return handshake(ctx, fd, false, server_name, left > 0 ? left : 1, ret, errbuf, errlen);
}

int tlsc_accept(SSL_CTX *ctx, int fd, int timeout_ms, struct tlsc **ret, char *errbuf,
		size_t errlen)
{
	*ret = NULL;
	return handshake(ctx, fd, true, NULL, timeout_ms, ret, errbuf, errlen);
}

const char *tlsc_peer_cn(struct tlsc *c, char *buf, size_t len)
{
	X509 *x = SSL_get1_peer_certificate(c->ssl);
	int n;

	if (!x)
		return NULL;
	n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, (int)len);
	X509_free(x);
	if (n < 0)
		buf[0] = '\0';
	return buf;
}

const char *tlsc_peer(const struct tlsc *c)
{
	return c->peer;
}

/* ------------------------------------------------------------------ I/O */

/* Wait for ev on the socket up to the deadline (-1: none) in slices, so a
 * cancellation is seen. 0, -ETIMEDOUT or -ECANCELED. */
static int wait_io(struct tlsc *c, short ev, int64_t deadline)
{
	for (;;) {
		struct pollfd pfd = {.fd = c->fd, .events = ev};
		int slice = SLICE_MS;

		if (atomic_load(&c->cancelled))
			return -ECANCELED;
		if (deadline >= 0) {
			int64_t left = deadline - mono_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			if (left < slice)
				slice = (int)left;
		}
		if (poll(&pfd, 1, slice) != 0)
			return atomic_load(&c->cancelled) ? -ECANCELED : 0;
	}
}

ssize_t tlsc_read(struct tlsc *c, void *buf, size_t len, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
	size_t got = 0;

	for (;;) {
		int n, e = SSL_ERROR_NONE, r, fl;

		if (atomic_load(&c->cancelled))
			return -ECANCELED;
		pthread_mutex_lock(&c->mu);
		/* every record read ahead already, up to len: large chunks,
		 * and no read(2) that would only say EAGAIN */
		for (;;) {
			size_t want = len - got;
			ERR_clear_error();
			n = SSL_read(c->ssl, (char *)buf + got, want > INT32_MAX ? INT32_MAX : (int)want);
			if (n <= 0) {
				e = SSL_get_error(c->ssl, n);
				break;
			}
			got += (size_t)n;
			if (got == len || !SSL_has_pending(c->ssl))
				break;
		}
		fl = flush_out(c); /* what reading made OpenSSL answer, if anything */
		pthread_mutex_unlock(&c->mu);
		if (got > 0)
			return (ssize_t)got;
		if (e == SSL_ERROR_ZERO_RETURN)
			return 0;
		if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || fl < 0)
			return -EIO;
		if ((r = wait_io(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) < 0)
			return r;
	}
}

int tlsc_read_line(struct tlsc *c, char *buf, size_t len, int timeout_ms)
{
	int64_t deadline = mono_ms() + timeout_ms;
	size_t n = 0;

	for (;;) {
		int left = (int)(deadline - mono_ms());
		ssize_t r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = tlsc_read(c, buf + n, 1, left);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -EIO;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return (int)n;
		}
		if (++n >= len - 1)
			return -EMSGSIZE;
	}
}

/* Encrypt up to TLSC_WRITE_CHUNK of buf (one record per SSL_write: partial
 * writes) into wbuf, then send it all with one send(2); wait while the
 * socket is full. wbuf is empty again before this returns. */
int tlsc_write_all(struct tlsc *c, const void *buf, size_t len)
{
	size_t off = 0;

	for (;;) {
		int n, e = SSL_ERROR_NONE, fl, r;
		size_t filled = 0;

		if (atomic_load(&c->cancelled))
			return -ECANCELED;
		pthread_mutex_lock(&c->mu);
		/* what is left of the last chunk first: then a whole chunk */
		fl = flush_out(c); /* no system call when wbuf is empty */
		while (fl == 0 && off < len && filled < TLSC_WRITE_CHUNK) {
			size_t want = len - off;
			ERR_clear_error();
			n = SSL_write(c->ssl, (const char *)buf + off,
				      want > INT32_MAX ? INT32_MAX : (int)want);
			if (n <= 0) {
				e = SSL_get_error(c->ssl, n);
				break;
			}
			off += (size_t)n;
			filled += (size_t)n;
		}
		if (fl == 0)
			fl = flush_out(c);
		pthread_mutex_unlock(&c->mu);
		if (fl < 0 || (e != SSL_ERROR_NONE && e != SSL_ERROR_WANT_READ &&
			       e != SSL_ERROR_WANT_WRITE))
			return -EPIPE;
		if (off == len && fl == 0)
			return 0;
		if (fl == 0 && e == SSL_ERROR_NONE)
			continue; /* the next chunk */
		if ((r = wait_io(c, fl > 0 || e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, -1)) < 0)
			return r;
	}
}

/* close_notify into wbuf (once) and out to the socket: a full socket
 * buffer is the only reason not to send it at once, and then it is
 * retried for up to 5 s. */
int tlsc_close_write(struct tlsc *c)
{
	int rc = 0;

	pthread_mutex_lock(&c->mu);
	if (!c->sent_close) {
		bool queued = false;

		c->sent_close = true;
		for (int i = 0; i < 50; i++) {
			int r, e, fl;

			if (!queued) {
				ERR_clear_error();
				r = SSL_shutdown(c->ssl);
				e = r >= 0 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
				queued = r >= 0;
				if (!queued && e != SSL_ERROR_WANT_WRITE) {
					rc = -EPIPE;
					break;
				}
			}
			fl = flush_out(c);
			if (fl < 0) {
				rc = -EPIPE;
				break;
			}
			if (queued && fl == 0)
				break;
			if (atomic_load(&c->cancelled) || i == 49) {
				rc = -EPIPE;
				break;
			}
			pthread_mutex_unlock(&c->mu);
			wait_io(c, POLLOUT, mono_ms() + 100);
			pthread_mutex_lock(&c->mu);
		}
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int tlsc_wait_gone(struct tlsc *c, int timeout_ms)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
	bool more;

	if (atomic_load(&c->cancelled))
		return -ECANCELED;
	pthread_mutex_lock(&c->mu);
	more = SSL_has_pending(c->ssl); /* read ahead already */
	pthread_mutex_unlock(&c->mu);
	if (more)
		return 1;
	if (poll(&pfd, 1, timeout_ms) == 0)
		return 0;
	return atomic_load(&c->cancelled) ? -ECANCELED : 1;
}

void tlsc_cancel(struct tlsc *c)
{
	atomic_store(&c->cancelled, true);
	shutdown(c->fd, SHUT_RDWR);
}

void tlsc_free(struct tlsc *c)
{
	char sink[4096];
	int i = 0;

	if (!c)
		return;
	/* what the peer sent and we never read, taken before close(2): with
	 * unread bytes the kernel answers the close with a reset, and the
	 * peer may lose what we sent it last (our close_notify too) */
	while (i++ < 64 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
	SSL_free(c->ssl);
	close(c->fd);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
