/* tlsconn.h: one mutually authenticated TLS byte stream over TCP (OpenSSL
 * directly, no gRPC core): the raw tunnel between the controller and bcd
 * (agent/tunnel.c, controller/node_tunnel.c).
 *
 * A connection may be used by two threads at once, one reading and one
 * writing: every OpenSSL call on it is made under its own mutex, on a
 * non-blocking socket, and a thread that must wait polls the socket
 * without the mutex. Bulk bytes cost few system calls: OpenSSL reads
 * ahead up to 64 KiB per read(2), and a read returns every record read
 * ahead already (up to the caller's buffer, e.g. 256 KiB); a write
 * encrypts up to 64 KiB at a time into the connection's own buffer and
 * sends those records with one send(2). Memory per connection is constant
 * (those two buffers): a peer that does not read blocks the writer.
 * Half-close is TLS close_notify: tlsc_close_write() sends it (flushed to
 * the socket before it returns), the peer's tlsc_read() then returns 0
 * and the peer may still write back. */
#ifndef BC_TLSCONN_H
#define BC_TLSCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct ssl_ctx_st SSL_CTX;
struct tlsc;

/* A context: the own certificate (chain) and key, and ca_pem, the only CA
 * the peer's certificate must chain to (a client may have no certificate:
 * cert_pem and key_pem NULL; then ca_pem NULL means the system's roots) (required from the peer: the
 * server asks for a client certificate but lets the caller decide when
 * there is none, tlsc_peer_cn). TLS 1.2 at least, no renegotiation. NULL
 * with errbuf filled. */
SSL_CTX *tlsc_ctx_new(bool server, const char *cert_pem, const char *key_pem,
		      const char *ca_pem, char *errbuf, size_t errlen);
void tlsc_ctx_free(SSL_CTX *ctx);
/* The certificate chain (PEM, the leaf first) and its key into ctx: 0, or
 * -EINVAL when either does not parse or they do not match. */
int tlsc_ctx_use_chain(SSL_CTX *ctx, const char *cert_pem, const char *key_pem);

/* A TCP listener on "host:port" ("[::]:7444", "127.0.0.1:0"): the
 * descriptor (blocking, CLOEXEC) and *ret_port, or -errno. */
int tlsc_listen(const char *hostport, int *ret_port);

/* Client: TCP to "host:port", then the handshake, verifying the server's
 * certificate against the context's CA with server_name as its DNS
 * subjectAltName (an IP address: its IP subjectAltName), all within timeout_ms. 0 with *ret, or -errno with
 * errbuf filled (-ECONNREFUSED, -ETIMEDOUT, -EPROTO: the handshake). */
int tlsc_connect(SSL_CTX *ctx, const char *hostport, const char *server_name, int timeout_ms,
		 struct tlsc **ret, char *errbuf, size_t errlen);

/* Server: the handshake on an accepted socket (taken: closed on failure)
 * within timeout_ms. 0 with *ret, or -errno with errbuf filled. */
int tlsc_accept(SSL_CTX *ctx, int fd, int timeout_ms, struct tlsc **ret, char *errbuf,
		size_t errlen);

/* The verified peer certificate's CN into buf, or NULL (none sent). */
const char *tlsc_peer_cn(struct tlsc *c, char *buf, size_t len);
/* "ip:port" of the peer. */
const char *tlsc_peer(const struct tlsc *c);

/* Up to len bytes: > 0, 0 at the peer's close_notify, -ETIMEDOUT
 * (timeout_ms < 0: none), -ECANCELED (tlsc_cancel), -EIO (the connection
 * broke, or ended without close_notify). */
ssize_t tlsc_read(struct tlsc *c, void *buf, size_t len, int timeout_ms);
/* One line ending in '\n' (not kept), at most len - 1 bytes, reading no
 * byte past it: its length or -errno (-EMSGSIZE: too long, -EIO: EOF). */
int tlsc_read_line(struct tlsc *c, char *buf, size_t len, int timeout_ms);
/* All of buf, blocking while the peer does not read: 0 or -errno. */
int tlsc_write_all(struct tlsc *c, const void *buf, size_t len);
/* Send close_notify (once): the write direction ends, reads go on. */
int tlsc_close_write(struct tlsc *c);
/* After the peer's close_notify: 1 once its TCP connection ends (or it
 * sends anything more), 0 after timeout_ms, -ECANCELED. */
int tlsc_wait_gone(struct tlsc *c, int timeout_ms);
/* Wake and fail every read and write now and later (any thread). */
void tlsc_cancel(struct tlsc *c);
/* Close and free. NULL-safe. */
void tlsc_free(struct tlsc *c);

#endif
