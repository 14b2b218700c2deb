/* json.c: recursive-descent JSON reader, bounded in depth and width (see
 * json.h). Numbers are doubles; strings are decoded by common/json_lex.c
 * (\uXXXX to UTF-8, surrogate pairs joined, \u0000 refused; other bytes
 * are kept as they are). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "json_lex.h"
#include "util.h"

struct jp {
	const char *s;
	size_t len, pos;
};

static void skip_ws(struct jp *p)
{
	while (p->pos < p->len && json_lex_ws(p->s[p->pos]))
		p->pos++;
}

static bool eat(struct jp *p, char c)
{
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == c) {
		p->pos++;
		return true;
	}
	return false;
}

static bool word(struct jp *p, const char *w)
{
	size_t n = strlen(w);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0)
		return false;
	p->pos += n;
	return true;
}

/* A string after its opening quote: no NUL (\u0000), bytes as they are. */
static int string(struct jp *p, char **ret)
{
	struct json_lex_fault f;
	size_t len, used;
	int r;

	r = json_lex_string(p->s + p->pos, p->len - p->pos, JSON_LEX_NO_NUL, ret, &len, &used, &f);
	if (r == -ENOMEM)
		abort();
	if (r < 0) {
		p->pos += f.at;
		return r;
	}
	p->pos += used;
	return 0;
}

static int number(struct jp *p, double *ret)
{
	char buf[64], *end;
	size_t n = 0;

	while (p->pos < p->len && n < sizeof(buf) - 1 && strchr("+-.eE0123456789", p->s[p->pos]) &&
	       p->s[p->pos])
		buf[n++] = p->s[p->pos++];
	buf[n] = '\0';
	if (n == 0 || n == sizeof(buf) - 1)
		return -EINVAL;
	*ret = strtod(buf, &end);
	return *end ? -EINVAL : 0;
}

static int value(struct jp *p, int depth, struct json **ret);

static int push(struct json *j, struct json *kid, char *key)
{
	if (j->n >= JSON_MAX_ITEMS) {
		json_free(kid);
		free(key);
		return -EINVAL;
	}
	if ((j->n & (j->n - 1)) == 0) { /* grow at powers of two */
		size_t cap = j->n ? j->n * 2 : 1;
		struct json **k = realloc(j->kids, cap * sizeof(*k));
		char **ks = j->type == JSON_OBJECT ? realloc(j->keys, cap * sizeof(*ks)) : NULL;
		if (!k || (j->type == JSON_OBJECT && !ks))
			abort();
		j->kids = k;
		if (ks)
			j->keys = ks;
	}
	if (key)
		j->keys[j->n] = key;
	j->kids[j->n++] = kid;
	return 0;
}

static int members(struct jp *p, int depth, struct json *j, char close)
{
	if (eat(p, close))
		return 0;
	do {
		struct json *kid = NULL;
		char *key = NULL;
		if (close == '}') {
			skip_ws(p);
			if (!eat(p, '"') || string(p, &key) < 0)
				return -EINVAL;
			if (!eat(p, ':')) {
				free(key);
				return -EINVAL;
			}
		}
		if (value(p, depth + 1, &kid) < 0) {
			free(key);
			return -EINVAL;
		}
		if (push(j, kid, key) < 0)
			return -EINVAL;
	} while (eat(p, ','));
	return eat(p, close) ? 0 : -EINVAL;
}

static int value(struct jp *p, int depth, struct json **ret)
{
	struct json *j;
	int r = 0;

	if (depth > JSON_MAX_DEPTH)
		return -EINVAL;
	skip_ws(p);
	if (p->pos >= p->len)
		return -EINVAL;
	j = xcalloc(1, sizeof(*j));
	switch (p->s[p->pos]) {
	case '{':
	case '[':
		j->type = p->s[p->pos] == '{' ? JSON_OBJECT : JSON_ARRAY;
		p->pos++;
		r = members(p, depth, j, j->type == JSON_OBJECT ? '}' : ']');
		break;
	case '"':
		j->type = JSON_STRING;
		p->pos++;
		r = string(p, &j->str);
		break;
	case 't':
	case 'f':
		j->type = JSON_BOOL;
		j->b = p->s[p->pos] == 't';
		r = word(p, j->b ? "true" : "false") ? 0 : -EINVAL;
		break;
	case 'n':
		r = word(p, "null") ? 0 : -EINVAL;
		break;
	default:
		j->type = JSON_NUMBER;
		r = number(p, &j->num);
	}
	if (r < 0) {
		json_free(j);
		return r;
	}
	*ret = j;
	return 0;
}

int json_parse(const char *text, size_t len, struct json **ret, size_t *ret_offset)
{
	struct jp p = {.s = text, .len = len};
	struct json *j = NULL;

	if (value(&p, 0, &j) < 0 || (skip_ws(&p), p.pos != p.len)) {
		json_free(j);
		if (ret_offset)
			*ret_offset = p.pos;
		return -EINVAL;
	}
	*ret = j;
	return 0;
}

void json_free(struct json *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++) {
		json_free(j->kids[i]);
		if (j->keys)
			free(j->keys[i]);
	}
	free(j->kids);
	free(j->keys);
	free(j->str);
	free(j);
}

const struct json *json_get(const struct json *o, const char *key)
{
	if (!o || o->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (strcmp(o->keys[i], key) == 0)
			return o->kids[i];
	return NULL;
}
