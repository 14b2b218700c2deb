/* json_lex.c: JSON whitespace, strings and UTF-8 (see json_lex.h).
 *
 *   "a\tb\u00e9\ud83d\ude00"
 *    ^ s                   ^ closing quote: *ret_used counts it
 *
 * A string body is scanned once for its end (an escape is skipped as a
 * pair, so \" does not end it), which bounds the output: a decoded
 * string is never longer than its source. Then each byte is copied,
 * each escape decoded; a \u escape of a high surrogate must be followed
 * by the \u escape of a low one, and the pair is one code point. */
#include "json_lex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool json_lex_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

const char *json_lex_skip_ws(const char *p)
{
	while (json_lex_ws(*p))
		p++;
	return p;
}

int json_lex_read_str(const char **p, char **ret)
{
	struct json_lex_fault f;
	size_t len, used;

	if (**p != '"' || json_lex_string(*p + 1, strlen(*p + 1), JSON_LEX_NO_NUL | JSON_LEX_UTF8,
					  ret, &len, &used, &f) < 0)
		return -EINVAL;
	*p += 1 + used;
	return 0;
}

size_t json_lex_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

size_t json_lex_utf8_put(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int hex4(const char *s, uint32_t *ret)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -EINVAL;
	}
	*ret = v;
	return 0;
}

/* The string being decoded: s[0..n), read up to pos. */
struct lex {
	const char *s;
	size_t n, pos;
	unsigned flags;
	struct json_lex_fault *fault;
};

static int lex_fail(struct lex *l, size_t at, const char *why)
{
	l->fault->at = at;
	l->fault->why = why;
	return -EINVAL;
}

/* A \u escape at pos (after the backslash and 'u'), with its low surrogate
 * if it is a high one. */
static int lex_unicode(struct lex *l, uint32_t *ret)
{
	uint32_t cp, lo;

	if (l->n - l->pos < 4 || hex4(l->s + l->pos, &cp) < 0)
		return lex_fail(l, l->pos, "bad \\u escape");
	l->pos += 4;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return lex_fail(l, l->pos, "unpaired surrogate in \\u escape");
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (l->n - l->pos < 6 || l->s[l->pos] != '\\' || l->s[l->pos + 1] != 'u' ||
		    hex4(l->s + l->pos + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
			return lex_fail(l, l->pos, "unpaired surrogate in \\u escape");
		l->pos += 6;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (cp == 0 && (l->flags & JSON_LEX_NO_NUL))
		return lex_fail(l, l->pos, "NUL in string");
	*ret = cp;
	return 0;
}

/* An escape at pos (after the backslash), decoded at out + *used. */
static int lex_escape(struct lex *l, char *out, size_t *used)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k = strchr(from, l->s[l->pos]);
	uint32_t cp = 0;
	int r;

	if (k && l->s[l->pos]) {
		out[(*used)++] = to[k - from];
		l->pos++;
		return 0;
	}
	if (l->s[l->pos] != 'u')
		return lex_fail(l, l->pos, "bad escape in string");
	l->pos++;
	if ((r = lex_unicode(l, &cp)) < 0)
		return r;
	*used += json_lex_utf8_put(out + *used, cp);
	return 0;
}

/* The bytes of the body up to and including its closing quote, or 0. */
static size_t string_span(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"')
			return i + 1;
		if (s[i] == '\\')
			i++;
	}
	return 0;
}

/* Copy the body into out (span bytes long), stopping at the closing quote. */
static int lex_body(struct lex *l, char *out, size_t *used)
{
	while (l->s[l->pos] != '"') {
		unsigned char c = (unsigned char)l->s[l->pos];
		size_t k = 1;
		int r;

		if (c == '\\') {
			l->pos++;
			if ((r = lex_escape(l, out, used)) < 0)
				return r;
			continue;
		}
		if (c < 0x20)
			return lex_fail(l, l->pos, "control character in string");
		if ((l->flags & JSON_LEX_UTF8) &&
		    !(k = json_lex_utf8_seq((const unsigned char *)l->s + l->pos, l->n - l->pos)))
			return lex_fail(l, l->pos, "invalid UTF-8 in string");
		memcpy(out + *used, l->s + l->pos, k);
		*used += k;
		l->pos += k;
	}
	return 0;
}

int json_lex_string(const char *s, size_t n, unsigned flags, char **ret, size_t *ret_len,
		    size_t *ret_used, struct json_lex_fault *fault)
{
	struct lex l = {.s = s, .n = n, .flags = flags, .fault = fault};
	size_t span = string_span(s, n), used = 0;
	char *out;
	int r;

	if (!span)
		return lex_fail(&l, 0, "unterminated string");
	out = malloc(span);
	if (!out)
		return -ENOMEM;
	if ((r = lex_body(&l, out, &used)) < 0) {
		free(out);
		return r;
	}
	out[used] = '\0';
	*ret = out;
	*ret_len = used;
	*ret_used = l.pos + 1;
	return 0;
}
