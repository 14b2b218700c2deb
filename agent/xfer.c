/* xfer.c: verified downloads and hashed uploads over libcurl (xfer.h). */
#include "xfer.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static bool is_sha_hex(const char *s)
{
	size_t n = 0;

	for (; s && *s; s++, n++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return n == 64;
}

static bool loopback_http(const char *url)
{
	static const char *const hosts[] = {"http://127.0.0.1", "http://[::1]", "http://localhost"};

	for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
		size_t n = strlen(hosts[i]);
		if (strncmp(url, hosts[i], n) == 0 && (url[n] == ':' || url[n] == '/'))
			return true;
	}
	return false;
}

bool xfer_url_ok(const struct xfer_opts *o, const char *url)
{
	if (!url || strlen(url) > 8192 || strpbrk(url, " \t\r\n"))
		return false;
	if (strncmp(url, "https://", 8) == 0)
		return true;
	return o->allow_http_loopback && loopback_http(url);
}

bool xfer_stale_part(const char *name)
{
	const char *p = strstr(name, ".part.");

	return name[0] == '.' && p && atoi(p + 6) != (int)getpid();
}

/* Polled by curl about once a second even without data: a cancel stops a
 * stalled transfer too. */
static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	const atomic_bool *cancel = data;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return cancel && atomic_load(cancel) ? 1 : 0;
}

/* A handle with the settings every transfer shares. */
static CURL *handle(const struct xfer_opts *o, const char *url)
{
	CURL *c = curl_easy_init();
	const char *protos = o->allow_http_loopback && loopback_http(url) ? "http" : "https";

	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, protos);
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "https");
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	if (o->ca_file && *o->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, o->ca_file);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)o->cancel);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	return c;
}

static bool cancelled(const struct xfer_opts *o)
{
	return o->cancel && atomic_load(o->cancel);
}

static void digest_hex(EVP_MD_CTX *md, char *hex)
{
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	EVP_DigestFinal_ex(md, d, &n);
	hex_encode(d, n, hex);
}

/* ------------------------------------------------------------- download */

struct dl {
	int fd;
	const atomic_bool *cancel;
	EVP_MD_CTX *md;
	uint64_t got, max;
	bool too_large, write_failed;
};

static size_t dl_write(char *p, size_t size, size_t nmemb, void *data)
{
	struct dl *d = data;
	size_t n = size * nmemb, done = 0;

	if (d->cancel && atomic_load(d->cancel))
		return 0;
	if (d->got + n > d->max) {
		d->too_large = true;
		return 0;
	}
	EVP_DigestUpdate(d->md, p, n);
	while (done < n) {
		ssize_t k = write(d->fd, p + done, n - done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			d->write_failed = true;
			return 0;
		}
		done += (size_t)k;
	}
	d->got += n;
	return n;
}

static int dl_run(const struct xfer_opts *o, const char *url, struct dl *d, char *why,
		  size_t whylen)
{
	CURL *c = handle(o, url);
	CURLcode rc;

	if (!c) {
		snprintf(why, whylen, "no curl handle");
		return -ENOMEM;
	}
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)d->max);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dl_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
	rc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	if (cancelled(o)) {
		snprintf(why, whylen, "cancelled");
		return -ECANCELED;
	}
	if (d->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
		snprintf(why, whylen, "more than %" PRIu64 " bytes", d->max);
		return -EFBIG;
	}
	if (rc != CURLE_OK || d->write_failed) {
		snprintf(why, whylen, "%s",
			 d->write_failed ? "cannot write to the data directory" : curl_easy_strerror(rc));
		return -EIO;
	}
	return 0;
}

static int dl_verify(struct dl *d, const char *sha256, char *why, size_t whylen)
{
	char hex[2 * EVP_MAX_MD_SIZE + 1];

	digest_hex(d->md, hex);
	if (strcmp(hex, sha256) != 0) {
		snprintf(why, whylen, "sha256 %.16s..., want %.16s...", hex, sha256);
		return -EBADMSG;
	}
	if (fsync(d->fd) < 0) {
		snprintf(why, whylen, "fsync: %s", strerror(errno));
		return -EIO;
	}
	return 0;
}

int xfer_get_verified(const struct xfer_opts *o, const char *url, const char *dir,
		      const char *sha256, uint64_t max_bytes, char **ret_path, char *why,
		      size_t whylen)
{
	_cleanup_free_ char *path = NULL, *tmp = NULL;
	struct dl d = {.fd = -1, .max = max_bytes, .cancel = o->cancel};
	int e;

	if (!is_sha_hex(sha256) || !xfer_url_ok(o, url)) {
		snprintf(why, whylen, "%s", is_sha_hex(sha256) ? "only https URLs are fetched"
							      : "sha256 is not 64 lowercase hex digits");
		return -EINVAL;
	}
	path = xasprintf("%s/%s", dir, sha256);
	if (access(path, F_OK) == 0) {
		*ret_path = path;
		path = NULL;
		return 0;
	}
	tmp = xasprintf("%s/.%s.part.%d", dir, sha256, (int)getpid());
	d.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (d.fd < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -EIO;
	}
	d.md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(d.md, EVP_sha256(), NULL);
	e = dl_run(o, url, &d, why, whylen);
	if (e == 0)
		e = dl_verify(&d, sha256, why, whylen);
	EVP_MD_CTX_free(d.md);
	close(d.fd);
	if (e == 0 && (chmod(tmp, 0644) < 0 || rename(tmp, path) < 0)) {
		snprintf(why, whylen, "rename: %s", strerror(errno));
		e = -EIO;
	}
	if (e < 0) {
		unlink(tmp);
		return e;
	}
	*ret_path = path;
	path = NULL;
	return 0;
}

/* --------------------------------------------------------------- upload */

struct up {
	int fd;
	EVP_MD_CTX *md;
	uint64_t sent;
	bool read_failed;
};

static size_t up_read(char *buf, size_t size, size_t nitems, void *data)
{
	struct up *u = data;
	ssize_t k;

	do
		k = read(u->fd, buf, size * nitems);
	while (k < 0 && errno == EINTR);
	if (k < 0) {
		u->read_failed = true;
		return CURL_READFUNC_ABORT;
	}
	EVP_DigestUpdate(u->md, buf, (size_t)k);
	u->sent += (uint64_t)k;
	return (size_t)k;
}

/* From the start again (curl asks on a redirect or a retried request). */
static int up_rewind(struct up *u)
{
	if (lseek(u->fd, 0, SEEK_SET) < 0)
		return -errno;
	EVP_DigestInit_ex(u->md, EVP_sha256(), NULL);
	u->sent = 0;
	return 0;
}

static int up_seek(void *data, curl_off_t offset, int origin)
{
	if (offset != 0 || origin != SEEK_SET)
		return CURL_SEEKFUNC_CANTSEEK;  /* never resumed in the middle */
	return up_rewind(data) == 0 ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL;
}

/* One attempt: 0, -EAGAIN worth retrying, or -EINVAL/-EIO/-ECANCELED. */
static int up_once(const struct xfer_opts *o, const char *url, struct up *u, uint64_t size,
		   char *why, size_t whylen)
{
	CURL *c = handle(o, url);
	struct curl_slist *h = NULL;
	long status = 0;
	CURLcode rc;

	if (!c) {
		snprintf(why, whylen, "no curl handle");
		return -EAGAIN;
	}
	h = curl_slist_append(h, "Expect:");  /* no 100-continue round trip */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
	curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, (long)XFER_BLOCK);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, up_read);
	curl_easy_setopt(c, CURLOPT_READDATA, u);
	curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, up_seek);
	curl_easy_setopt(c, CURLOPT_SEEKDATA, u);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (cancelled(o)) {
		snprintf(why, whylen, "cancelled");
		return -ECANCELED;
	}
	if (rc == CURLE_OK && u->sent == size)
		return 0;
	if (u->read_failed) {
		snprintf(why, whylen, "cannot read the capture: %s", strerror(errno));
		return -EIO;
	}
	if (status >= 400 && status < 500 && status != 408 && status != 429) {
		snprintf(why, whylen, "the store refused the upload: HTTP %ld", status);
		return -EINVAL;
	}
	snprintf(why, whylen, "%s", rc == CURLE_OK ? "short upload" : curl_easy_strerror(rc));
	return -EAGAIN;
}

static bool wait_ms(const struct xfer_opts *o, uint32_t ms)
{
	for (int64_t until = mono_ms() + ms; mono_ms() < until;) {
		if (cancelled(o))
			return false;
		usleep(20 * 1000);
	}
	return true;
}

int xfer_put_file(const struct xfer_opts *o, const char *url, const char *path, char *ret_sha,
		  uint64_t *ret_size, unsigned *ret_attempts, char *why, size_t whylen)
{
	_cleanup_close_ int fd = -1;
	struct up u = {.fd = -1};
	struct stat st;
	unsigned n = 0;
	int e = -EIO;

	if (!xfer_url_ok(o, url)) {
		snprintf(why, whylen, "the upload URL is not https");
		return -EINVAL;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || fstat(fd, &st) < 0) {
		snprintf(why, whylen, "cannot open the capture: %s", strerror(errno));
		return -ENOENT;
	}
	u.fd = fd;
	u.md = EVP_MD_CTX_new();
	while (n < XFER_PUT_ATTEMPTS) {
		if (n && !wait_ms(o, o->retry_delay_ms ? o->retry_delay_ms : 1000 * n)) {
			e = -ECANCELED;
			break;
		}
		n++;
		if ((e = up_rewind(&u)) < 0) {
			snprintf(why, whylen, "cannot rewind the capture: %s", strerror(-e));
			break;
		}
		e = up_once(o, url, &u, (uint64_t)st.st_size, why, whylen);
		if (e != -EAGAIN)
			break;
		e = -EIO;
	}
	if (e == 0) {
		digest_hex(u.md, ret_sha);
		*ret_size = u.sent;
		*ret_attempts = n;
	} else if (e != -ECANCELED && n) {
		size_t k = strlen(why);
		snprintf(why + k, whylen - k, " (attempt %u of %d)", n, XFER_PUT_ATTEMPTS);
	}
	EVP_MD_CTX_free(u.md);
	return e;
}
