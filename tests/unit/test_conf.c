/* test_conf.c: the shared "key = value" reader (common/conf.c): comments,
 * blanks, trimming, quotes, line numbers of errors, typed keys and their
 * bounds, unknown keys. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "tap.h"
#include "util.h"

struct cfg {
	char *name;
	int n;
	uint32_t u32;
	uint64_t u64;
};

static const struct conf_key keys[] = {
	{"name", CONF_STR, offsetof(struct cfg, name), "x", 0, 0, NULL},
	{"n", CONF_INT, offsetof(struct cfg, n), "3", 1, 10, NULL},
	{"u32", CONF_U32, offsetof(struct cfg, u32), NULL, 0, 100, NULL},
	{"u64", CONF_U64, offsetof(struct cfg, u64), NULL, 5, 1ll << 40, NULL},
};

/* Records the lines it is handed as "key=value;" */
struct rec {
	char out[512];
	int fail_on;  /* fail on this call (1-based), 0: never */
	int calls;
};

static int record(void *ctx, const char *key, const char *value)
{
	struct rec *r = ctx;
	size_t n = strlen(r->out);

	if (++r->calls == r->fail_on)
		return -EPERM;
	snprintf(r->out + n, sizeof(r->out) - n, "%s=%s;", key, value);
	return 0;
}

static int parse(const char *text, unsigned flags, struct rec *r, int *line)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", text);
	memset(r->out, 0, sizeof(r->out));
	r->calls = 0;
	*line = 0;
	return conf_parse(buf, flags, record, r, line);
}

static void test_syntax(void)
{
	struct rec r = {0};
	int line;

	is_int(parse("a = 1\n\n  # c\n b=two words  # note\n\tc =\r\n", 0, &r, &line), 0,
	       "a file of keys, a blank line and comments");
	is_str(r.out, "a=1;b=two words;c=;", "keys and values trimmed, comments cut, empty value");
	is_int(parse("a = x#y\n", 0, &r, &line), 0, "'#' inside a value");
	is_str(r.out, "a=x;", "... starts a comment by default");
	is_int(parse("a = x#y # z\n", CONF_HASH_AFTER_BLANK, &r, &line), 0, "CONF_HASH_AFTER_BLANK");
	is_str(r.out, "a=x#y;", "... keeps '#' inside a value");
	is_int(parse("a = \"q v\"\nb = \"\nc = \"\"\n", CONF_UNQUOTE, &r, &line), 0, "CONF_UNQUOTE");
	is_str(r.out, "a=q v;b=\";c=;", "... strips one pair of quotes only");
	is_int(parse("a = \"q\"\n", 0, &r, &line), 0, "quotes by default");
	is_str(r.out, "a=\"q\";", "... are kept");
	is_int(parse("a = v\v\r\n", CONF_BLANKS, &r, &line), 0, "CONF_BLANKS");
	is_str(r.out, "a=v\v;", "... trims spaces, tabs and a final CR only");
	is_int(parse("a = b = c\n", 0, &r, &line), 0, "the first '=' splits");
	is_str(r.out, "a=b = c;", "... the rest is the value");
}

static void test_errors(void)
{
	struct rec r = {0};
	int line;

	is_int(parse("a = 1\n\n\nnonsense\nb = 2\n", 0, &r, &line), -EBADMSG, "a line without '='");
	is_int(line, 4, "... is line 4, blank lines counted");
	is_str(r.out, "a=1;", "... and stops the reading");
	r.fail_on = 2;
	is_int(parse("a = 1\n# c\nb = 2\nc = 3\n", 0, &r, &line), -EPERM, "the callback's error");
	is_int(line, 3, "... on line 3");
	r.fail_on = 0;
	is_int(parse("", 0, &r, &line), 0, "an empty text");
}

static void test_keys(void)
{
	struct cfg c = {0};
	const size_t n = ARRAY_SIZE(keys);

	ok(conf_key_find(keys, n, "u32") == &keys[2], "conf_key_find");
	ok(!conf_key_find(keys, n, "nope"), "... NULL for an unknown key");
	is_int(conf_set(keys, n, &c, "nope", "1"), -ENOENT, "an unknown key is -ENOENT");
	is_int(conf_set(keys, n, &c, "name", "hello"), 0, "a string");
	is_str(c.name, "hello", "... is copied");
	is_int(conf_set(keys, n, &c, "name", ""), 0, "and replaced");
	is_str(c.name, "", "... by the empty string");
	is_int(conf_set(keys, n, &c, "n", "10"), 0, "an int at its bound");
	is_int(c.n, 10, "... is set");
	is_int(conf_set(keys, n, &c, "n", "+7"), 0, "an int takes strtol syntax");
	is_int(c.n, 7, "... +7 is 7");
	is_int(conf_set(keys, n, &c, "n", "11"), -ERANGE, "an int above its bound");
	is_int(conf_set(keys, n, &c, "n", "0"), -ERANGE, "... below it");
	is_int(conf_set(keys, n, &c, "n", ""), -ERANGE, "... empty");
	is_int(conf_set(keys, n, &c, "n", "5x"), -ERANGE, "... with trailing text");
	is_int(c.n, 7, "a refused value leaves the field alone");
	is_int(conf_set(keys, n, &c, "u32", "100"), 0, "a u32");
	is_int(c.u32, 100, "... is set");
	is_int(conf_set(keys, n, &c, "u32", "+1"), -ERANGE, "a u32 starts with a digit");
	is_int(conf_set(keys, n, &c, "u32", "-1"), -ERANGE, "... so is never negative");
	is_int(conf_set(keys, n, &c, "u64", "1099511627776"), 0, "a u64 of 2^40");
	ok(c.u64 == 1ull << 40, "... is set");
	is_int(conf_set(keys, n, &c, "u64", "4"), -ERANGE, "a u64 below its bound");
	is_int(conf_set(keys, n, &c, "u64", "99999999999999999999999"), -ERANGE, "... overflowing");
	conf_free_strings(keys, n, &c);
	ok(!c.name, "conf_free_strings frees and clears the strings");
}

int main(void)
{
	test_syntax();
	test_errors();
	test_keys();
	done_testing();
}
