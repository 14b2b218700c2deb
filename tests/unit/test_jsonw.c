/* test_jsonw.c: common/jsonw.c writes one flat JSON object: every value
 * type, escaping of quotes, backslashes and control characters, UTF-8
 * passed through, and a value that is not UTF-8 refused with -EILSEQ. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "jsonw.h"
#include "tap.h"

static void test_types(void)
{
	struct jsonw w;
	char *s = NULL;

	jsonw_begin(&w);
	is_int(jsonw_end(&w, &s), 0, "an empty object");
	is_str(s, "{}", "writes {}");
	free(s);

	jsonw_begin(&w);
	jsonw_str(&w, "a", "x");
	jsonw_str(&w, "b", NULL);
	jsonw_i64(&w, "c", INT64_MIN);
	jsonw_bool(&w, "d", true);
	jsonw_bool(&w, "e", false);
	jsonw_null(&w, "f");
	jsonw_raw(&w, "g", "[1, 2]");
	is_int(jsonw_end(&w, &s), 0, "every value type");
	is_str(s, "{\"a\": \"x\", \"b\": null, \"c\": -9223372036854775808, \"d\": true, "
		  "\"e\": false, \"f\": null, \"g\": [1, 2]}", "written in order, comma-separated");
	free(s);
}

static void test_escaping(void)
{
	struct jsonw w;
	char *s = NULL;

	jsonw_begin(&w);
	jsonw_str(&w, "k\"", "q\" b\\ n\n t\t \x01 \x1f end");
	is_int(jsonw_end(&w, &s), 0, "control characters");
	is_str(s, "{\"k\\\"\": \"q\\\" b\\\\ n\\u000a t\\u0009 \\u0001 \\u001f end\"}",
	       "quote, backslash and control characters escaped, in keys too");
	free(s);

	jsonw_begin(&w);
	jsonw_str(&w, "u", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	is_int(jsonw_end(&w, &s), 0, "UTF-8");
	is_str(s, "{\"u\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", "passed through");
	free(s);
}

static void test_refusals(void)
{
	static const char *bad[] = {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80",
				    "\xf4\x90\x80\x80", "ok \xe2\x82"};
	struct jsonw w;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *s = (char *)"untouched";

		jsonw_begin(&w);
		jsonw_str(&w, "a", "fine");
		jsonw_str(&w, "b", bad[i]);
		jsonw_i64(&w, "c", 1);
		is_int(jsonw_end(&w, &s), -EILSEQ, "malformed UTF-8 %zu refused", i);
		is_str(s, "untouched", "and the out-parameter untouched");
	}
}

static void test_long(void)
{
	struct jsonw w;
	char *s = NULL, *big = malloc(100001);

	memset(big, 'x', 100000);
	big[100000] = '\0';
	jsonw_begin(&w);
	for (int i = 0; i < 5; i++)
		jsonw_str(&w, "x", big);
	is_int(jsonw_end(&w, &s), 0, "a large object grows its buffer");
	is_int(strlen(s), 2 + 5 * (100000 + 7) + 4 * 2, "of the right length");
	free(s);
	free(big);
}

/* Free-form text: raw pieces and escaped strings, handed over whole; a
 * string that is not UTF-8 fails the whole text. */
static void test_free_form(void)
{
	struct jsonw w = {0};
	char *s = NULL;

	is_int(jsonw_take(&w, &s), 0, "an empty free-form text");
	is_str(s, "", "is the empty string");
	free(s);
	jsonw_text(&w, "[");
	jsonw_string(&w, "a\"b\n");
	jsonw_text_n(&w, ",1]xyz", 3);
	is_int(jsonw_take(&w, &s), 0, "raw text and a string");
	is_str(s, "[\"a\\\"b\\u000a\",1]", "written in order, the string escaped");
	free(s);
	s = NULL;
	jsonw_text(&w, "[");
	jsonw_string(&w, "\xff");
	is_int(jsonw_take(&w, &s), -EILSEQ, "a string that is not UTF-8: -EILSEQ");
	ok(s == NULL && w.buf == NULL, "nothing handed over, the buffer freed");
}

int main(void)
{
	test_types();
	test_escaping();
	test_refusals();
	test_long();
	test_free_form();
	done_testing();
}
