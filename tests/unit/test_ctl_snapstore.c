/* test_ctl_snapstore.c: controller/snapstore.c's configuration checks
 * (snapstore_require, what sandboxes.snapshot and serve call): every
 * refusal is INVALID_CONFIG with the spec's details (reason, field). The
 * store against a real S3 server: tests/integration/snapstore.t. */
#include <string.h>

#include "controller/config.h"
#include "err.h"
#include "controller/snapstore.h"
#include "tap.h"

static const char *detail(const bc_error *e, const char *key)
{
	for (size_t i = 0; i < e->n_details; i++)
		if (strcmp(e->details[i].key, key) == 0)
			return e->details[i].value;
	return NULL;
}

/* Load the defaults, then --key value pairs (NULL-terminated). */
static int load(struct ctl_config *c, char **kv)
{
	char *argv[32] = {"bc-controller"};
	int n = 1;

	for (; kv && *kv && n < 31; kv++)
		argv[n++] = *kv;
	return config_load(c, NULL, n, argv, 1);
}

#define GOOD "--snapshot-store-endpoint", "https://s3.example.com", \
	"--snapshot-store-bucket", "snaps", "--snapshot-store-access-key-id", "AKID"

static void want(const char *name, char **kv, int code, const char *reason, const char *field)
{
	struct ctl_config c;
	bc_error err;
	int r;

	bc_error_clear(&err);
	if (load(&c, kv) < 0) {
		ok(0, "%s: the config loads", name);
		return;
	}
	r = snapstore_require(&c, &err);
	if (!reason) {
		is_int(r, 0, "%s: accepted", name);
	} else {
		ok(r < 0 && err.code == (enum bc_code)code, "%s: INVALID_CONFIG (%s)", name,
		   err.message);
		is_str(detail(&err, "reason"), reason, "%s: reason", name);
		is_str(detail(&err, "field"), field, "%s: field", name);
	}
	config_free(&c);
}

int main(void)
{
	const int IC = BC_INVALID_CONFIG;

	want("no endpoint (the default)", NULL, IC, "no-snapshot-store",
	     "snapshot_store_endpoint");
	want("https endpoint", (char *[]){GOOD, NULL}, 0, NULL, NULL);
	want("https with a port and a slash",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "https://S3.Example.com:9000/", NULL},
	     0, NULL, NULL);
	want("an IPv6 endpoint",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "https://[fd00::1]:9000", NULL}, 0,
	     NULL, NULL);
	want("http without the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://127.0.0.1:9000", NULL}, IC,
	     "snapshot-store-insecure", "snapshot_store_endpoint");
	want("http on loopback with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://127.0.0.1:9000",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, 0, NULL, NULL);
	want("http on localhost with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://localhost:9000",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, 0, NULL, NULL);
	want("http on [::1] with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://[::1]:9000",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, 0, NULL, NULL);
	want("http elsewhere with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://10.0.0.1:9000",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, IC,
	     "snapshot-store-insecure", "snapshot_store_endpoint");
	want("http on a name starting localhost with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://localhost.evil.com",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, IC,
	     "snapshot-store-insecure", "snapshot_store_endpoint");
	want("http on a name starting 127. with the switch",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "http://127.evil.com:80",
			"--snapshot-store-allow-http-loopback-for-tests", "1", NULL}, IC,
	     "snapshot-store-insecure", "snapshot_store_endpoint");
	want("another scheme",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "ftp://s3.example.com", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_endpoint");
	want("an endpoint with a path",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "https://s3.example.com/base", NULL},
	     IC, "snapshot-store-invalid", "snapshot_store_endpoint");
	want("an endpoint with credentials",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "https://u:p@s3.example.com", NULL},
	     IC, "snapshot-store-invalid", "snapshot_store_endpoint");
	want("a port out of range",
	     (char *[]){GOOD, "--snapshot-store-endpoint", "https://s3.example.com:70000", NULL},
	     IC, "snapshot-store-invalid", "snapshot_store_endpoint");
	want("no bucket", (char *[]){GOOD, "--snapshot-store-bucket", "", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_bucket");
	want("an uppercase bucket", (char *[]){GOOD, "--snapshot-store-bucket", "Snaps", NULL},
	     IC, "snapshot-store-invalid", "snapshot_store_bucket");
	want("a dotted bucket, virtual-hosted",
	     (char *[]){GOOD, "--snapshot-store-bucket", "my.snaps", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_path_style");
	want("a dotted bucket, path-style",
	     (char *[]){GOOD, "--snapshot-store-bucket", "my.snaps", "--snapshot-store-path-style",
			"1", NULL}, 0, NULL, NULL);
	want("a bad region", (char *[]){GOOD, "--snapshot-store-region", "us east", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_region");
	want("a prefix with ..", (char *[]){GOOD, "--snapshot-store-prefix", "a/../b/", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_prefix");
	want("a prefix with a leading /", (char *[]){GOOD, "--snapshot-store-prefix", "/a/", NULL},
	     IC, "snapshot-store-invalid", "snapshot_store_prefix");
	want("a prefix", (char *[]){GOOD, "--snapshot-store-prefix", "bc/snaps/", NULL}, 0, NULL,
	     NULL);
	want("no access key id", (char *[]){GOOD, "--snapshot-store-access-key-id", "", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_access_key_id");
	want("an unreadable CA file",
	     (char *[]){GOOD, "--snapshot-store-ca-file", "/nonexistent/ca.pem", NULL}, IC,
	     "snapshot-store-invalid", "snapshot_store_ca_file");
	done_testing();
}
