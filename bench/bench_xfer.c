/* bench_xfer.c: bcd's snapshot upload code (agent/xfer.c, xfer_put_file:
 * the same call agent/snapshot.c makes) timed for bench/snapshots.sh, with
 * the memory it takes.
 *
 *   bench_xfer presign ENDPOINT BUCKET KEY ACCESS_KEY_ID SECRET_FILE
 *       the presigned PUT URL of KEY (common/sigv4.c, path style,
 *       us-east-1, one hour), as the controller presigns one for bcd
 *   bench_xfer put URL FILE [CA_FILE]
 *       "ms=N bytes=N attempts=N rss_idle_kib=N rss_peak_kib=N"
 *
 * rss_idle_kib is the resident set just before the upload, rss_peak_kib the
 * process's peak (getrusage) once it is done: their difference is what the
 * upload held at most. Exit 1 when the upload failed (the reason on
 * stderr). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "agent/xfer.h"
#include "sigv4.h"
#include "util.h"

static long rss_kib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = 0;
	if (f)
		fclose(f);
	return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int presign(char **argv)
{
	const char *ep = argv[0];
	bool https = strncmp(ep, "https://", 8) == 0;
	char *secret = NULL, *url = NULL;
	size_t n = 0;

	if (!https && strncmp(ep, "http://", 7) != 0)
		return 2;
	if (file_read_all(argv[4], 4096, &secret, &n) < 0) {
		fprintf(stderr, "bench_xfer: %s: unreadable\n", argv[4]);
		return 1;
	}
	secret[strcspn(secret, "\r\n")] = '\0';
	struct sigv4_req q = {.method = "PUT", .https = https, .host = ep + (https ? 8 : 7),
			      .region = "us-east-1", .bucket = argv[1], .path_style = true,
			      .key = argv[2], .now = time(NULL)};
	struct sigv4_cred c = {.access_key_id = argv[3], .secret = secret};
	int e = sigv4_presign(&q, &c, 3600, &url, NULL);

	memset(secret, 0, n);
	free(secret);
	if (e < 0) {
		fprintf(stderr, "bench_xfer: presign: %s\n", strerror(-e));
		return 1;
	}
	printf("%s\n", url);
	free(url);
	return 0;
}

static int put(const char *url, const char *path, const char *ca)
{
	struct xfer_opts o = {.ca_file = ca};
	char sha[XFER_SHA_HEX], why[256] = "";
	uint64_t size = 0;
	unsigned attempts = 0;
	long idle = rss_kib();
	int64_t t0 = mono_ms();
	int e = xfer_put_file(&o, url, path, sha, &size, &attempts, why, sizeof(why));
	int64_t ms = mono_ms() - t0;
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	if (e < 0) {
		fprintf(stderr, "bench_xfer: put: %s\n", why);
		return 1;
	}
	printf("ms=%lld bytes=%llu attempts=%u rss_idle_kib=%ld rss_peak_kib=%ld\n", (long long)ms,
	       (unsigned long long)size, attempts, idle, ru.ru_maxrss);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 7 && strcmp(argv[1], "presign") == 0)
		return presign(argv + 2);
	if ((argc == 4 || argc == 5) && strcmp(argv[1], "put") == 0)
		return put(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
	fprintf(stderr, "usage: bench_xfer presign ENDPOINT BUCKET KEY ACCESS_KEY_ID SECRET_FILE\n"
			"       bench_xfer put URL FILE [CA_FILE]\n");
	return 2;
}
