/* json.h: a small, bounded JSON reader for documents the controller must
 * understand itself (policies). Pure: no I/O, no logging, no libpq. */
#ifndef BC_CTL_JSON_H
#define BC_CTL_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
	enum json_type type;
	bool b;
	double num;
	char *str;           /* JSON_STRING: NUL-terminated, no embedded NULs */
	char **keys;         /* JSON_OBJECT: keys[i] names kids[i] */
	struct json **kids;  /* JSON_ARRAY, JSON_OBJECT */
	size_t n;
};

#define JSON_MAX_DEPTH 16
#define JSON_MAX_ITEMS 4096   /* per array or object */

/* Parse text[0..len) into a tree (owned; json_free it). -EINVAL for
 * malformed text, too deep nesting, too many items or a string with a NUL;
 * *ret_offset (if not NULL) is then where the parser stopped. */
int json_parse(const char *text, size_t len, struct json **ret, size_t *ret_offset);
void json_free(struct json *j);
/* The member key of object o, or NULL (also when o is not an object). */
const struct json *json_get(const struct json *o, const char *key);

#endif
