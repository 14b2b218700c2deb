/* json_lex.h: the lexical pieces of JSON (RFC 8259) that both of bc's JSON
 * readers need, written once: the proto3 mapping reader
 * (common/pbjson_read.c) and the controller's small tree reader
 * (controller/json.c, for policy documents). Whitespace, string bodies
 * (escapes, \u escapes with surrogate pairs, control characters) and UTF-8
 * (validating a sequence, encoding a code point). Pure: no I/O, no
 * logging. */
#ifndef BC_JSON_LEX_H
#define BC_JSON_LEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True for the four whitespace bytes JSON allows between tokens. */
bool json_lex_ws(char c);

/* Length of the valid UTF-8 sequence at s (at most n >= 1 bytes), 0 if
 * invalid: no overlong forms, no surrogates, nothing past U+10FFFF. */
size_t json_lex_utf8_seq(const unsigned char *s, size_t n);

/* Write code point cp (at most U+10FFFF) as UTF-8 at out (room for 4);
 * returns the bytes written. */
size_t json_lex_utf8_put(char *out, uint32_t cp);

/* Options of json_lex_string. */
#define JSON_LEX_NO_NUL 1u   /* refuse \u0000: the text never holds a NUL byte */
#define JSON_LEX_UTF8 2u     /* refuse bytes that are not valid UTF-8 (else copied as they are) */

/* Where and why json_lex_string refused a string. */
struct json_lex_fault {
	size_t at;        /* offset from s of the byte or escape at fault */
	const char *why;  /* static text, e.g. "bad escape in string" */
};

/* Decode the JSON string whose body starts at s (just after the opening
 * quote; n bytes available). On success 0: *ret is the decoded text,
 * malloc'd and NUL-terminated (it may hold NUL bytes from \u0000 unless
 * JSON_LEX_NO_NUL; *ret_len is its length), *ret_used the bytes read
 * including the closing quote. -EINVAL with *fault for malformed text
 * (unterminated, a control character, a bad escape or \u escape, an
 * unpaired surrogate, invalid UTF-8 with JSON_LEX_UTF8), -ENOMEM; the
 * out-parameters are then left alone. */
int json_lex_string(const char *s, size_t n, unsigned flags, char **ret, size_t *ret_len,
		    size_t *ret_used, struct json_lex_fault *fault);

/* For the small flat readers of bcd's own files and arguments
 * (agent/snapshot_args.c, agent/rebind.c): p past any JSON whitespace; and
 * the JSON string at *p (on its opening quote), NUL-free UTF-8: 0 with *ret
 * malloc'd and *p past the closing quote, -EINVAL otherwise. */
const char *json_lex_skip_ws(const char *p);
int json_lex_read_str(const char **p, char **ret);

#endif
