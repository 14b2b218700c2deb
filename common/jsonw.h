/* jsonw.h: a small writer of one flat JSON object, for event payloads and
 * other short documents the controller builds (authorization attributes).
 * Keys are the caller's literals; values are escaped here, so a string from
 * a row or a request can never break the object. Errors are sticky: the
 * first failure (-ENOMEM, -EILSEQ for a value that is not UTF-8) is kept and
 * returned by jsonw_end(), so a caller adds its fields without checking each
 * one.
 *
 *	struct jsonw w;
 *	jsonw_begin(&w);
 *	jsonw_str(&w, "nodeId", node);      (NULL writes null)
 *	jsonw_i64(&w, "ttlSeconds", ttl);
 *	rc = jsonw_end(&w, &json);          (0 and json owned, or -errno)
 */
#ifndef BC_JSONW_H
#define BC_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jsonw {
	char *buf;
	size_t len, cap;
	int err;     /* the first failure, or 0 */
	bool fields; /* a field was written: the next one needs a comma */
};

/* Start an empty object in w (no allocation yet). */
void jsonw_begin(struct jsonw *w);

/* Add "key": "val" with val escaped; a NULL val adds "key": null. */
void jsonw_str(struct jsonw *w, const char *key, const char *val);

/* Add "key": val for an integer, a boolean, or null. */
void jsonw_i64(struct jsonw *w, const char *key, int64_t val);
void jsonw_bool(struct jsonw *w, const char *key, bool val);
void jsonw_null(struct jsonw *w, const char *key);

/* Add "key": raw, raw being a JSON value the caller already holds (it is
 * written as it is, unchecked). */
void jsonw_raw(struct jsonw *w, const char *key, const char *raw);

/* Free-form writing, for documents that are not one flat object (MCP's
 * nested answers, common/mcp.c): start from a zeroed struct jsonw (not
 * jsonw_begin), append raw text with jsonw_text/jsonw_text_n and string
 * values, quoted and escaped as above, with jsonw_string; jsonw_take hands
 * the text over: 0 and *ret (caller frees), or the first failure with the
 * buffer freed; w is emptied either way. */
void jsonw_text(struct jsonw *w, const char *s);
void jsonw_text_n(struct jsonw *w, const char *s, size_t n);
void jsonw_string(struct jsonw *w, const char *s);
int jsonw_take(struct jsonw *w, char **ret);

/* Close the object: 0 and the NUL-terminated text in *ret_json (caller
 * frees), or the first failure as -errno, with w's buffer freed either
 * way and *ret_json untouched. */
int jsonw_end(struct jsonw *w, char **ret_json);

#endif
