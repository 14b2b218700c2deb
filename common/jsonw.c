/* jsonw.c: the flat JSON object writer of jsonw.h. One growing buffer, a
 * sticky error, and string escaping per RFC 8259 (quote, backslash and
 * control characters escaped; other UTF-8 passed through once it is checked
 * to be well formed). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

static void put(struct jsonw *w, const char *s, size_t n)
{
	if (w->err)
		return;
	if (w->len + n + 1 > w->cap) {
		size_t cap = w->cap ? w->cap : 64;
		char *b;

		while (cap < w->len + n + 1)
			cap *= 2;
		if (!(b = realloc(w->buf, cap))) {
			w->err = -ENOMEM;
			return;
		}
		w->buf = b;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = '\0';
}

static void puts_(struct jsonw *w, const char *s)
{
	put(w, s, strlen(s));
}

/* The length of the well-formed UTF-8 sequence at s (lead byte >= 0x80),
 * or 0: no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	unsigned lo = 0x80, hi = 0xbf;

	if (n == 0 || s[0] > 0xf4)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

static void put_string(struct jsonw *w, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	put(w, "\"", 1);
	while (*p && !w->err) {
		char esc[8];
		size_t n;

		if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*p++;
			put(w, esc, 2);
		} else if (*p < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", *p++);
			put(w, esc, 6);
		} else if (*p < 0x80) {
			for (n = 0; p[n] >= 0x20 && p[n] < 0x80 && p[n] != '"' && p[n] != '\\'; n++)
				;
			put(w, (const char *)p, n);
			p += n;
		} else if ((n = utf8_len(p)) > 0) {
			put(w, (const char *)p, n);
			p += n;
		} else {
			w->err = -EILSEQ;
		}
	}
	put(w, "\"", 1);
}

static void key(struct jsonw *w, const char *k)
{
	if (w->fields)
		put(w, ", ", 2);
	w->fields = true;
	put_string(w, k);
	put(w, ": ", 2);
}

void jsonw_begin(struct jsonw *w)
{
	*w = (struct jsonw){0};
	put(w, "{", 1);
}

void jsonw_str(struct jsonw *w, const char *k, const char *val)
{
	key(w, k);
	if (val)
		put_string(w, val);
	else
		puts_(w, "null");
}

void jsonw_i64(struct jsonw *w, const char *k, int64_t val)
{
	char num[24];

	key(w, k);
	snprintf(num, sizeof(num), "%" PRId64, val);
	puts_(w, num);
}

void jsonw_bool(struct jsonw *w, const char *k, bool val)
{
	key(w, k);
	puts_(w, val ? "true" : "false");
}

void jsonw_null(struct jsonw *w, const char *k)
{
	key(w, k);
	puts_(w, "null");
}

void jsonw_raw(struct jsonw *w, const char *k, const char *raw)
{
	key(w, k);
	puts_(w, raw);
}

void jsonw_text(struct jsonw *w, const char *s)
{
	puts_(w, s);
}

void jsonw_text_n(struct jsonw *w, const char *s, size_t n)
{
	put(w, s, n);
}

void jsonw_string(struct jsonw *w, const char *s)
{
	put_string(w, s);
}

int jsonw_take(struct jsonw *w, char **ret)
{
	int rc;

	put(w, "", 0);
	if ((rc = w->err) < 0) {
		free(w->buf);
		*w = (struct jsonw){0};
		return rc;
	}
	*ret = w->buf;
	*w = (struct jsonw){0};
	return 0;
}

int jsonw_end(struct jsonw *w, char **ret_json)
{
	put(w, "}", 1);
	return jsonw_take(w, ret_json);
}
