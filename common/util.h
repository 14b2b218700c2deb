/* util.h: small helpers shared by every binary: time, ids, strings, files,
 * cleanup attributes. */
#ifndef BC_UTIL_H
#define BC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) { if (*fd >= 0) close(*fd); }
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Wall clock and monotonic clock in milliseconds / microseconds. */
int64_t now_ms(void);
int64_t mono_ms(void);
int64_t mono_us(void);

/* Deadlines on the monotonic clock, the one place for their arithmetic.
 * deadline_ts: CLOCK_MONOTONIC now plus ms as the abstime of a
 * pthread_cond_timedwait on a condition variable set to that clock
 * (tv_nsec normalised for ms >= 0). deadline_in: mono_ms() + ms.
 * deadline_left: milliseconds until deadline, 0 or less once it passed.
 * deadline_passed: mono_ms() has reached deadline. */
struct timespec deadline_ts(int64_t ms);
int64_t deadline_in(int64_t ms);
int64_t deadline_left(int64_t deadline);
bool deadline_passed(int64_t deadline);

/* Fill buf with n cryptographically random bytes (getrandom). 0 or -errno. */
int random_bytes(void *buf, size_t n);

/* New id "<prefix>_<26 lowercase Crockford base32 chars>" (48-bit ms time,
 * 80 random bits, ULID layout), sortable by creation time. out must hold
 * strlen(prefix) + 28 bytes. */
void id_new(const char *prefix, char *out, size_t outlen);

/* True if s is "<prefix>_" followed by 26 Crockford base32 lowercase chars. */
bool id_valid(const char *prefix, const char *s);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void hex_encode(const void *buf, size_t n, char *out);

/* The n bytes that 2n hex digits (either case) at hex spell, into out.
 * 0, or -EBADMSG at a character that is not a hex digit. */
int hex_decode(const char *hex, size_t n, void *out);

/* Send all n bytes of p on socket fd (MSG_NOSIGNAL: a closed peer is an
 * error, never SIGPIPE), across short sends and EINTR. 0 or -1 (errno). */
int sock_send_all(int fd, const void *p, size_t n);

/* dst = src XOR key repeated (RFC 6455 masking: key[i % 4] on byte i), 8
 * bytes at a time, any alignment; dst may be src. */
void xor_mask4(void *dst, const void *src, size_t n, const uint8_t key[4]);

/* SHA-256 of data as 64 hex chars + NUL. */
void sha256_hex(const void *data, size_t n, char out[65]);

/* Parse a duration: "30m", "8h", "7d", "45s", or plain milliseconds "1500".
 * Returns milliseconds in *ret_ms; -EINVAL on bad syntax, -ERANGE on overflow. */
int duration_parse_ms(const char *s, int64_t *ret_ms);

/* strdup that aborts on OOM; NULL in, NULL out. */
char *xstrdup(const char *s);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Read a whole file (at most max bytes) into a NUL-terminated buffer.
 * 0 or -errno (-EFBIG past max). */
int file_read_all(const char *path, size_t max, char **ret_buf, size_t *ret_len);

/* Write a file atomically (tmp + fsync + rename + dir fsync) with mode:
 * the old or the new content survives a crash of the machine. */
int file_write_atomic(const char *path, const void *buf, size_t len, int mode);

/* The same without the fsyncs: old or new content survives the death of the
 * process (the page cache keeps it), not a power loss. */
int file_replace(const char *path, const void *buf, size_t len, int mode);

/* mkdir -p with mode. */
int mkdir_p(const char *path, int mode);

/* Bounded string checks used at every API edge. */
bool str_is_printable(const char *s, size_t maxlen);
/* [a-z0-9] then [a-z0-9.-] up to maxlen, no trailing '-' or '.' */
bool str_is_slug(const char *s, size_t maxlen);

#endif
