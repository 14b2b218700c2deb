/* util.c: time, randomness, ids, hex, hashing, durations, files. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int64_t mono_ms(void)
{
	return mono_us() / 1000;
}

int64_t mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

struct timespec deadline_ts(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

int64_t deadline_in(int64_t ms)
{
	return mono_ms() + ms;
}

int64_t deadline_left(int64_t deadline)
{
	return deadline - mono_ms();
}

bool deadline_passed(int64_t deadline)
{
	return mono_ms() >= deadline;
}

int random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static const char b32[] = "0123456789abcdefghjkmnpqrstvwxyz";

void id_new(const char *prefix, char *out, size_t outlen)
{
	unsigned char rnd[10];
	uint64_t t = (uint64_t)now_ms();
	char body[27];
	uint64_t hi, lo;

	if (random_bytes(rnd, sizeof(rnd)) < 0)
		abort();
	/* 128 bits: 48 bits time, 80 bits random; 26 chars of 5 bits (130). */
	hi = (t << 16) | ((uint64_t)rnd[0] << 8) | rnd[1];
	lo = 0;
	for (int i = 2; i < 10; i++)
		lo = (lo << 8) | rnd[i];
	for (int i = 25; i >= 0; i--) {
		body[i] = b32[lo & 31];
		lo = (lo >> 5) | ((hi & 31) << 59);
		hi >>= 5;
	}
	body[26] = '\0';
	snprintf(out, outlen, "%s_%s", prefix, body);
}

bool id_valid(const char *prefix, const char *s)
{
	size_t pl = strlen(prefix);

	if (!s || strncmp(s, prefix, pl) != 0 || s[pl] != '_')
		return false;
	s += pl + 1;
	if (strlen(s) != 26)
		return false;
	for (; *s; s++)
		if (!strchr(b32, *s))
			return false;
	return true;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int sock_send_all(int fd, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

void xor_mask4(void *dst, const void *src, size_t n, const uint8_t key[4])
{
	const uint8_t k[8] = {key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]};
	const uint8_t *s = src;
	uint8_t *d = dst;
	uint64_t k8, v;
	size_t i = 0;

	memcpy(&k8, k, 8);
	for (; i + 8 <= n; i += 8) {
		memcpy(&v, s + i, 8);
		v ^= k8;
		memcpy(d + i, &v, 8);
	}
	for (; i < n; i++)
		d[i] = s[i] ^ key[i & 3];
}

int hex_decode(const char *hex, size_t n, void *out)
{
	unsigned char *p = out;

	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit(hex[2 * i]), lo;
		if (hi < 0 || (lo = hex_digit(hex[2 * i + 1])) < 0)
			return -EBADMSG;
		p[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

void hex_encode(const void *buf, size_t n, char *out)
{
	const unsigned char *p = buf;

	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) { /* no sprintf: 64 KiB in µs, not ms */
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

void sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256(data, n, md);
	hex_encode(md, sizeof(md), out);
}

int duration_parse_ms(const char *s, int64_t *ret_ms)
{
	int64_t v = 0, mult = 1;
	const char *p = s;

	if (!s || !*s || strlen(s) > 20)
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (INT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (*p - '0');
	}
	if (p == s)
		return -EINVAL;
	if (*p == '\0')
		mult = 1;
	else if (strcmp(p, "ms") == 0)
		mult = 1;
	else if (strcmp(p, "s") == 0)
		mult = 1000;
	else if (strcmp(p, "m") == 0)
		mult = 60 * 1000;
	else if (strcmp(p, "h") == 0)
		mult = 3600 * 1000;
	else if (strcmp(p, "d") == 0)
		mult = 86400 * 1000;
	else
		return -EINVAL;
	if (v > INT64_MAX / mult)
		return -ERANGE;
	*ret_ms = v * mult;
	return 0;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		abort();
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);

	if (!p)
		abort();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

char *xstrdup(const char *s)
{
	char *p;

	if (!s)
		return NULL;
	p = strdup(s);
	if (!p)
		abort();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p = NULL;

	va_start(ap, fmt);
	if (vasprintf(&p, fmt, ap) < 0)
		abort();
	va_end(ap);
	return p;
}

int file_read_all(const char *path, size_t max, char **ret_buf, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0, cap = 4096;
	char *buf;

	if (fd < 0)
		return -errno;
	buf = xmalloc(cap + 1);
	for (;;) {
		ssize_t r;
		if (len == cap) {
			/* room for one byte past max tells "exactly max" from "more" */
			if (cap > max) {
				free(buf);
				return -EFBIG;
			}
			cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			buf = realloc(buf, cap + 1);
			if (!buf)
				abort();
		}
		r = read(fd, buf + len, cap - len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			free(buf);
			return -errno;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len > max) {
		free(buf);
		return -EFBIG;
	}
	buf[len] = '\0';
	*ret_buf = buf;
	if (ret_len)
		*ret_len = len;
	return 0;
}

static int write_replace(const char *path, const void *buf, size_t len, int mode, bool sync)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	_cleanup_free_ char *dir = xstrdup(path);
	const char *p = buf;
	int fd, dfd, r = 0;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		p += w;
		len -= (size_t)w;
	}
	if (r == 0 && sync && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	if (sync && (dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

int file_write_atomic(const char *path, const void *buf, size_t len, int mode)
{
	return write_replace(path, buf, len, mode, true);
}

int file_replace(const char *path, const void *buf, size_t len, int mode)
{
	return write_replace(path, buf, len, mode, false);
}

int mkdir_p(const char *path, int mode)
{
	_cleanup_free_ char *p = xstrdup(path);

	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

bool str_is_printable(const char *s, size_t maxlen)
{
	size_t n = 0;

	if (!s)
		return false;
	for (; *s; s++, n++)
		if (n >= maxlen || (unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

bool str_is_slug(const char *s, size_t maxlen)
{
	size_t n;

	if (!s || !*s || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
		return false;
	n = strlen(s);
	if (n > maxlen || s[n - 1] == '-' || s[n - 1] == '.')
		return false;
	for (; *s; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && *s != '-' &&
		    *s != '.')
			return false;
	return true;
}
