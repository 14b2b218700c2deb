/* conf.h: the one reader of "key = value" configuration, shared by
 * bc-controller (controller/config.c), bcd (agent/config.c) and bcctl
 * (cli/client.c). Each program keeps its own table of keys and what its
 * keys mean; this file holds what they share: the syntax of the text
 * (lines, comments, blanks, quotes, line numbers), finding a key in a
 * table (an unknown key is refused, never ignored: a typo must not go
 * unnoticed) and setting a table's typed field from text. Library code:
 * it returns errors, the program words and prints them. */
#ifndef BC_CONF_H
#define BC_CONF_H

#include <stddef.h>

enum conf_type { CONF_STR, CONF_INT, CONF_U32, CONF_U64 };

/* One key of a program's table: its field is at off in the program's
 * config struct (char *, int, uint32_t or uint64_t by type). */
struct conf_key {
	const char *name;
	enum conf_type type;
	size_t off;
	const char *def;     /* the default as text; NULL: none */
	long long min, max;  /* numbers: the bounds, both included */
	const char *help;    /* one line for a usage text, or NULL */
};

/* Syntax options of conf_parse (0: '#' anywhere starts a comment, keys
 * and values are trimmed of every isspace() character, quotes are kept). */
#define CONF_HASH_AFTER_BLANK 1u /* '#' starts a comment only first on a line or after a blank */
#define CONF_UNQUOTE 2u          /* a value in double quotes loses them */
#define CONF_BLANKS 4u           /* trim spaces and tabs only (and a CR at the end) */

/* What conf_parse hands each "key = value" line to: 0 or a negative errno. */
typedef int (*conf_line_fn)(void *ctx, const char *key, const char *value);

/* Read text (NUL-terminated; cut up in place) line by line: a comment is
 * cut, a blank line skipped, any other must be "key = value" (the first
 * '=' splits it; key and value trimmed) and goes to fn in file order.
 * Returns 0; -EBADMSG for a line without '='; or the first negative value
 * fn returns. *ret_line (if not NULL) is then the failing line's number,
 * counted from 1 over every line of the text. */
int conf_parse(char *text, unsigned flags, conf_line_fn fn, void *ctx, int *ret_line);

/* The key of keys[0..n) named name, or NULL. */
const struct conf_key *conf_key_find(const struct conf_key *keys, size_t n, const char *name);

/* Set k's field in obj from value. CONF_STR: a copy replaces (and frees)
 * the old string. CONF_INT: a strtol() decimal, in [min, max]. CONF_U32,
 * CONF_U64: decimal digits only, in [min, max]. 0, or -ERANGE (nothing
 * written) for a malformed or out-of-bounds number. */
int conf_set_value(const struct conf_key *k, void *obj, const char *value);

/* conf_set_value on the key named name: -ENOENT if keys has none. */
int conf_set(const struct conf_key *keys, size_t n, void *obj, const char *name,
	     const char *value);

/* Free every CONF_STR field of obj named in keys and set it to NULL. */
void conf_free_strings(const struct conf_key *keys, size_t n, void *obj);

#endif
