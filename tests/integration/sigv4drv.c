/* sigv4drv.c: the boto3 comparison's driver of common/sigv4.c
 * (sigv4_boto3.py). One request a line on stdin, tab-separated:
 *   MODE METHOD HTTPS HOST REGION BUCKET PATH_STYLE PREFIX_HEX KEY_HEX NOW EXPIRES
 * MODE "presign" prints the URL; "sign" prints URL, Authorization,
 * x-amz-date and x-amz-content-sha256, tab-separated; a refusal prints
 * "error <errno>". The credentials come from the environment
 * (SIGV4_ACCESS_KEY_ID, SIGV4_SECRET), never from argv. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sigv4.h"
#include "util.h"

enum { F_MODE, F_METHOD, F_HTTPS, F_HOST, F_REGION, F_BUCKET, F_PATH, F_PREFIX, F_KEY, F_NOW,
       F_EXPIRES, F_N };

static char *unhex(const char *h)
{
	size_t n = strlen(h) / 2;
	char *out = xcalloc(n + 1, 1);

	if (strlen(h) % 2 || hex_decode(h, n, out) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

static int one(char *line, const struct sigv4_cred *c)
{
	char *f[F_N], *save = NULL;
	_cleanup_free_ char *prefix = NULL, *key = NULL;
	struct sigv4_req q = {0};
	int r, i = 0;

	for (char *t = strtok_r(line, "\t\n", &save); t && i < F_N; t = strtok_r(NULL, "\t\n", &save))
		f[i++] = t;
	if (i != F_N)
		return -EINVAL;
	prefix = unhex(strcmp(f[F_PREFIX], "-") ? f[F_PREFIX] : "");
	key = unhex(strcmp(f[F_KEY], "-") ? f[F_KEY] : "");
	q = (struct sigv4_req){.method = f[F_METHOD], .https = atoi(f[F_HTTPS]), .host = f[F_HOST],
			       .region = f[F_REGION], .bucket = f[F_BUCKET],
			       .path_style = atoi(f[F_PATH]), .prefix = prefix, .key = key,
			       .now = strtoll(f[F_NOW], NULL, 10)};
	if (strcmp(f[F_MODE], "presign") == 0) {
		_cleanup_free_ char *url = NULL;
		if ((r = sigv4_presign(&q, c, atoi(f[F_EXPIRES]), &url, NULL)) == 0)
			printf("%s\n", url);
		return r;
	}
	struct sigv4_signed s = {0};
	if ((r = sigv4_sign(&q, c, &s, NULL)) == 0)
		printf("%s\t%s\t%s\t%s\n", s.url, s.authorization, s.amz_date, s.content_sha256);
	sigv4_signed_free(&s);
	return r;
}

int main(void)
{
	struct sigv4_cred c = {getenv("SIGV4_ACCESS_KEY_ID"), getenv("SIGV4_SECRET")};
	char line[8192];
	int r;

	if (!c.access_key_id || !c.secret) {
		fprintf(stderr, "sigv4drv: set SIGV4_ACCESS_KEY_ID and SIGV4_SECRET\n");
		return 2;
	}
	while (fgets(line, sizeof(line), stdin))
		if ((r = one(line, &c)) < 0)
			printf("error %d\n", -r);
	return 0;
}
