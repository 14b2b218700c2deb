/* sealed.c: the sealed store (see sealed.h). Blobs travel to PostgreSQL as
 * bytea in hex text form, both ways, so any byte value is safe in a text
 * parameter (written as "\x..." bytea input, read with encode(data, 'hex')). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "sealed.h"
#include "util.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Hex text (encode(data, 'hex')) into bytes. */
static int hex_decode(const char *s, char **ret, size_t *ret_len)
{
	size_t n;
	char *out;

	if (strlen(s) % 2)
		return -EBADMSG;
	n = strlen(s) / 2;
	out = xmalloc(n + 1);
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(out);
			return -EBADMSG;
		}
		out[i] = (char)(hi << 4 | lo);
	}
	out[n] = '\0';
	*ret = out;
	*ret_len = n;
	return 0;
}

int sealed_put(struct db *d, const struct sealed_owner *o, const void *data, size_t len,
	       char ret_ref[SEALED_REF_MAX])
{
	_cleanup_free_ char *hex = NULL;
	char ref[SEALED_REF_MAX];
	struct dbp p = {0};
	int rc;

	if (len == 0 || len > SEALED_DATA_MAX)
		return -EINVAL;
	hex = xmalloc(2 * len + 3);
	memcpy(hex, "\\x", 2);
	hex_encode(data, len, hex + 2);
	id_new("sealed", ref, sizeof(ref));
	dbp_str(&p, ref);
	dbp_str(&p, o->kind);
	dbp_str(&p, o->id);
	dbp_nstr(&p, o->tenant_id);
	dbp_str(&p, hex);
	rc = db_exec(d, NULL, "INSERT INTO sealed_blobs (ref, owner_kind, owner_id, tenant_id, "
		     "data) VALUES ($1, $2, $3, $4, $5::bytea)", &p);
	if (rc == 0)
		memcpy(ret_ref, ref, sizeof(ref));
	return rc;
}

int sealed_get(struct db *d, const char *ref, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *hex = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, ref);
	rc = db_scalar(d, "SELECT encode(data, 'hex') FROM sealed_blobs WHERE ref = $1", &p, &hex);
	if (rc < 0)
		return rc;
	if (!hex)
		return -ENOENT;
	return hex_decode(hex, ret, ret_len);
}

int sealed_delete(struct db *d, const char *refs)
{
	_cleanup_free_ char *n = NULL;
	struct dbp p = {0};
	int rc;

	if (!refs || !*refs)
		return 0;
	dbp_str(&p, refs);
	rc = db_scalar(d, "WITH x AS (DELETE FROM sealed_blobs WHERE ref = ANY (string_to_array("
		       "$1, E'\\n')) RETURNING 1) SELECT count(*) FROM x", &p, &n);
	return rc < 0 ? rc : atoi(n);
}
