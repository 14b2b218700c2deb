/* fuzz_bootdata.c: the boot data renderer (controller/bootdata.c) on
 * arbitrary bytes, as the caller's user data and as an SSH key comment.
 * Oracles: user data that passes bootdata_check_user renders; a key that is
 * UTF-8 takes exactly one line of the platform's cloud-config (escaping
 * never lets it add a line, so never a key); the MIME boundary occurs
 * exactly once per part plus the closing delimiter; the bytes as an
 * /etc/sandbox/env value render as one X='...' assignment whose quoting,
 * undone, gives them back (a NUL is refused); a mount path the volume
 * rules accept renders as one mounts entry. The database side of
 * bootdata.c (sealing) is stubbed: it is not reached here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/bootdata.h"
#include "controller/db.h"
#include "controller/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* stubs of what bootdata_seal and the refusals would call */
int invalid(bc_error *err, const char *field, const char *fmt, ...)
{
	bc_error_set(err, BC_INVALID_INPUT, "%s", field);
	return -BC_EDOMAIN;
}

int db_fail(bc_error *err, int rc)
{
	bc_error_set(err, BC_INTERNAL, "db");
	return -BC_EDOMAIN;
}

int sealed_put(struct db *d, const struct sealed_owner *o, const void *p, size_t len,
	       char ret_ref[SEALED_REF_MAX])
{
	abort();
}

int secrets_record_minted(struct db *d, const char *tenant, const char *kind, const char *name,
			  const char *ref);
int secrets_record_minted(struct db *d, const char *tenant, const char *kind, const char *name,
			  const char *ref)
{
	abort();
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void check_key(const char *s)
{
	const char *keys[] = {s};
	struct bootdata_in in = {.instance_id = "inst_01jdzq3m5n8p9r7s6t5v4w3x2y"};
	char *base = NULL, *with = NULL;

	if (bootdata_cloud_config(&in, &base) != 0)
		abort();
	in.ssh_keys = keys;
	in.n_ssh_keys = 1;
	if (bootdata_cloud_config(&in, &with) == 0 &&
	    count(with, "\n") != count(base, "\n") + 2) /* "ssh_authorized_keys:" + the key */
		abort();
	free(base);
	free(with);
}

static void check_user(const char *s)
{
	struct bootdata_in in = {.instance_id = "inst_01jdzq3m5n8p9r7s6t5v4w3x2y", .user_data = s};
	bc_error err = {0};
	char *out = NULL, boundary[96], delim[100];
	size_t len = 0;

	if (bootdata_check_user(s, &err) != 0) {
		bc_error_clear(&err);
		return;
	}
	if (bootdata_render(&in, &out, &len, &err) != 0)
		abort();
	if (sscanf(out, "Content-Type: multipart/mixed; boundary=\"%95[^\"]\"", boundary) != 1)
		abort();
	snprintf(delim, sizeof(delim), "\n--%s", boundary);
	if (count(out, delim) != (*s ? 3u : 2u)) /* the parts and the closing one */
		abort();
	free(out);
}

/* The bytes as a value of /etc/sandbox/env: refused with a NUL, else the
 * text after the comment line is X='...'\n and undoing '\'' gives them back. */
static void check_env(const uint8_t *data, size_t size)
{
	const struct bootdata_env e = {.name = "X", .value = (const char *)data, .len = size};
	char *text = NULL, *body, *back;
	size_t len = 0, n = 0;

	if (bootdata_env_render(&e, 1, &text, &len) != 0) {
		if (!memchr(data, '\0', size))
			abort();
		return;
	}
	if (memchr(data, '\0', size))
		abort();
	body = strchr(text, '\n') + 1;
	if (strncmp(body, "X='", 3) != 0 || text[len - 1] != '\n' || text[len - 2] != '\'')
		abort();
	back = malloc(len);
	if (!back)
		abort();
	for (const char *p = body + 3; p < text + len - 2; p++) {
		if (strncmp(p, "'\\''", 4) == 0) {
			back[n++] = '\'';
			p += 3;
		} else if (*p == '\'') {
			abort();   /* a quote that ends the string early */
		} else {
			back[n++] = *p;
		}
	}
	if (n != size || memcmp(back, data, size) != 0)
		abort();
	free(back);
	free(text);
}

/* A mount path bootdata_mount_path_ok accepts renders as one mounts entry,
 * adds no line beyond what "/w" does, and has no "." or ".." segment. */
static void check_mount(const char *s)
{
	struct bootdata_volume v = {.serial = "bcv-0123456789abcdef", .mount_path = "/w"};
	struct bootdata_in in = {.instance_id = "inst_01jdzq3m5n8p9r7s6t5v4w3x2y", .volumes = &v,
				 .n_volumes = 1};
	char *base = NULL, *with = NULL;

	if (!bootdata_mount_path_ok(s))
		return;
	if (strstr(s, "/./") || strstr(s, "/../") || strstr(s, "//") ||
	    (strlen(s) >= 2 && strcmp(s + strlen(s) - 2, "/.") == 0) ||
	    (strlen(s) >= 3 && strcmp(s + strlen(s) - 3, "/..") == 0))
		abort();
	if (bootdata_cloud_config(&in, &base) != 0)
		abort();
	v.mount_path = s;
	if (bootdata_cloud_config(&in, &with) != 0 || count(with, "\n") != count(base, "\n") ||
	    count(with, s) < 1)
		abort();
	free(base);
	free(with);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';   /* a NUL inside ends the string, as in a proto string */
	check_key(s);
	check_user(s);
	check_env(data, size);
	check_mount(s);
	free(s);
	return 0;
}
