/* conf.c: "key = value" text and typed key tables (see conf.h).
 *
 *   # a comment          <- cut ('#' anywhere, or with CONF_HASH_AFTER_BLANK
 *   key = value  # note     only first or after a blank)
 *                        <- blank: skipped, but counted
 *   name = "quoted"      <- with CONF_UNQUOTE the value is: quoted
 *   nonsense             <- -EBADMSG, *ret_line = 5
 *
 * Line numbers count every line of the text, so an error names the line
 * an editor shows. */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static bool is_trim(int c, unsigned flags, bool at_end)
{
	if (flags & CONF_BLANKS)
		return c == ' ' || c == '\t' || (at_end && c == '\r');
	return isspace((unsigned char)c);
}

static char *trim(char *s, unsigned flags)
{
	char *e;

	while (*s && is_trim(*s, flags, false))
		s++;
	e = s + strlen(s);
	while (e > s && is_trim(e[-1], flags, true))
		*--e = '\0';
	return s;
}

static void cut_comment(char *line, unsigned flags)
{
	for (char *p = line; *p; p++)
		if (*p == '#' && (!(flags & CONF_HASH_AFTER_BLANK) || p == line || p[-1] == ' ' ||
				  p[-1] == '\t')) {
			*p = '\0';
			return;
		}
}

static char *unquote(char *v)
{
	size_t n = strlen(v);

	if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
		v[n - 1] = '\0';
		v++;
	}
	return v;
}

/* One line: 0 (also for a blank or comment line), -EBADMSG or fn's error. */
static int conf_line(char *line, unsigned flags, conf_line_fn fn, void *ctx)
{
	char *eq, *key, *value;

	cut_comment(line, flags);
	key = trim(line, flags);
	if (!*key)
		return 0;
	eq = strchr(key, '=');
	if (!eq)
		return -EBADMSG;
	*eq = '\0';
	key = trim(key, flags);
	value = trim(eq + 1, flags);
	if (flags & CONF_UNQUOTE)
		value = unquote(value);
	return fn(ctx, key, value);
}

int conf_parse(char *text, unsigned flags, conf_line_fn fn, void *ctx, int *ret_line)
{
	char *next;
	int r, lineno = 0;

	for (char *line = text; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		r = conf_line(line, flags, fn, ctx);
		if (r < 0) {
			if (ret_line)
				*ret_line = lineno;
			return r;
		}
	}
	return 0;
}

const struct conf_key *conf_key_find(const struct conf_key *keys, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

static int parse_int(const struct conf_key *k, const char *value, long long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno || *end || end == value || v < k->min || v > k->max)
		return -ERANGE;
	*ret = v;
	return 0;
}

static int parse_uint(const struct conf_key *k, const char *value, unsigned long long *ret)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)*value))
		return -ERANGE;
	errno = 0;
	v = strtoull(value, &end, 10);
	if (errno || *end || v < (unsigned long long)k->min || v > (unsigned long long)k->max)
		return -ERANGE;
	*ret = v;
	return 0;
}

int conf_set_value(const struct conf_key *k, void *obj, const char *value)
{
	void *field = (char *)obj + k->off;
	unsigned long long u;
	long long v;

	switch (k->type) {
	case CONF_STR:
		free(*(char **)field);
		*(char **)field = xstrdup(value);
		return 0;
	case CONF_INT:
		if (parse_int(k, value, &v) < 0)
			return -ERANGE;
		*(int *)field = (int)v;
		return 0;
	case CONF_U32:
	case CONF_U64:
		if (parse_uint(k, value, &u) < 0)
			return -ERANGE;
		if (k->type == CONF_U32)
			*(uint32_t *)field = (uint32_t)u;
		else
			*(uint64_t *)field = u;
		return 0;
	}
	return -ERANGE;
}

int conf_set(const struct conf_key *keys, size_t n, void *obj, const char *name,
	     const char *value)
{
	const struct conf_key *k = conf_key_find(keys, n, name);

	return k ? conf_set_value(k, obj, value) : -ENOENT;
}

void conf_free_strings(const struct conf_key *keys, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++)
		if (keys[i].type == CONF_STR) {
			char **p = (char **)((char *)obj + keys[i].off);
			free(*p);
			*p = NULL;
		}
}
