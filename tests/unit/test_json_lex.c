/* test_json_lex.c: JSON strings and UTF-8 of common/json_lex.c, shared by
 * the proto3 JSON reader and the controller's policy reader: escapes,
 * surrogate pairs, what each option refuses and where a fault is. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json_lex.h"
#include "tap.h"

/* Decode body s; on success check text and bytes used, else the fault. */
static void good(const char *s, unsigned flags, const char *want, size_t want_len, const char *what)
{
	struct json_lex_fault f = {0};
	size_t len = 0, used = 0;
	char *out = NULL;
	int r = json_lex_string(s, strlen(s), flags, &out, &len, &used, &f);

	ok(r == 0 && len == want_len && memcmp(out, want, len) == 0 && out[len] == '\0' &&
	   s[used - 1] == '"', "%s", what);
	free(out);
}

static void bad(const char *s, unsigned flags, size_t at, const char *why, const char *what)
{
	struct json_lex_fault f = {0};
	size_t len = 0, used = 0;
	char *out = NULL;
	int r = json_lex_string(s, strlen(s), flags, &out, &len, &used, &f);

	ok(r == -EINVAL && !out && f.at == at && f.why && strcmp(f.why, why) == 0, "%s", what);
	if (r != -EINVAL || f.at != at)
		printf("#   r %d at %zu why %s\n", r, f.at, f.why ? f.why : "(none)");
}

int main(void)
{
	ok(json_lex_ws(' ') && json_lex_ws('\t') && json_lex_ws('\n') && json_lex_ws('\r'),
	   "the four whitespace bytes");
	ok(!json_lex_ws('\v') && !json_lex_ws('\f') && !json_lex_ws('\0'), "and no other");

	good("abc\" rest", 0, "abc", 3, "a plain string, up to its quote");
	good("a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", 0, "a\"b\\c/d\b\f\n\r\t", 12, "every short escape");
	good("\\u00e9\\u20AC\"", JSON_LEX_UTF8, "\xc3\xa9\xe2\x82\xac", 5, "\\u escapes to UTF-8");
	good("\\ud83d\\ude00\"", JSON_LEX_UTF8, "\xf0\x9f\x98\x80", 4, "a surrogate pair is one code point");
	good("a\\u0000b\"", 0, "a\0b", 3, "\\u0000 is a NUL byte by default");
	good("\xff\"", 0, "\xff", 1, "bytes are copied as they are without JSON_LEX_UTF8");
	good("\xc3\xa9\"", JSON_LEX_UTF8, "\xc3\xa9", 2, "valid UTF-8 with JSON_LEX_UTF8");
	good("\"", 0, "", 0, "the empty string");

	bad("abc", 0, 0, "unterminated string", "no closing quote");
	bad("abc\\\"", 0, 0, "unterminated string", "an escaped quote does not close");
	bad("ab\x01\"", 0, 2, "control character in string", "a control character");
	bad("ab\\x\"", 0, 3, "bad escape in string", "an unknown escape");
	bad("\\u12g4\"", 0, 2, "bad \\u escape", "a bad hex digit");
	bad("\\u12\"", 0, 2, "bad \\u escape", "a short \\u escape");
	bad("\\udc00\"", 0, 6, "unpaired surrogate in \\u escape", "a lone low surrogate");
	bad("\\ud800x\"", 0, 6, "unpaired surrogate in \\u escape", "a high one alone");
	bad("\\ud800\\u0041\"", 0, 6, "unpaired surrogate in \\u escape", "a high one and no low one");
	bad("a\\u0000\"", JSON_LEX_NO_NUL, 7, "NUL in string", "JSON_LEX_NO_NUL refuses \\u0000");
	bad("a\xff\"", JSON_LEX_UTF8, 1, "invalid UTF-8 in string", "JSON_LEX_UTF8 refuses a bad byte");
	bad("\xed\xa0\x80\"", JSON_LEX_UTF8, 0, "invalid UTF-8 in string", "... and an encoded surrogate");

	ok(json_lex_utf8_seq((const unsigned char *)"\xc0\x80", 2) == 0, "no overlong forms");
	ok(json_lex_utf8_seq((const unsigned char *)"\xf4\x90\x80\x80", 4) == 0, "nothing past U+10FFFF");
	ok(json_lex_utf8_seq((const unsigned char *)"\xe2\x82", 2) == 0, "a cut sequence");
	ok(json_lex_utf8_seq((const unsigned char *)"\xf0\x9f\x98\x80", 4) == 4, "a 4-byte one");
	{
		char b[4];
		ok(json_lex_utf8_put(b, 0x10ffff) == 4 && memcmp(b, "\xf4\x8f\xbf\xbf", 4) == 0,
		   "U+10FFFF encodes in four bytes");
		ok(json_lex_utf8_put(b, 0x7f) == 1 && b[0] == 0x7f, "ASCII in one");
	}
	done_testing();
}
