/* snapshot_args.c: the arguments of instance.snapshot (snapshot.h,
 * snap_parse_args): a flat JSON object read with json_lex. Pure, so it is
 * fuzzed on its own (tests/fuzz/fuzz_snapshot_args.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json_lex.h"
#include "snapshot.h"
#include "util.h"

/* A scalar that is not a string (true, false, null, a number): skipped;
 * is_bool and b say if it was a bool. */
static int read_scalar(const char **p, bool *is_bool, bool *b)
{
	size_t n = strspn(*p, "truefalsn0123456789+-.eE");

	*is_bool = (n == 4 && strncmp(*p, "true", 4) == 0) || (n == 5 && strncmp(*p, "false", 5) == 0);
	*b = n == 4;
	if (!n)
		return -EINVAL;
	*p += n;
	return 0;
}

static int take_member(const char **p, char **url, bool *mem, bool *has_url)
{
	_cleanup_free_ char *key = NULL, *sval = NULL;
	bool is_bool = false, b = false;

	if (json_lex_read_str(p, &key) < 0 || *(*p = json_lex_skip_ws(*p)) != ':')
		return -EINVAL;
	*p = json_lex_skip_ws(*p + 1);
	if (**p == '"' ? json_lex_read_str(p, &sval) < 0 : read_scalar(p, &is_bool, &b) < 0)
		return -EINVAL;
	if (strcmp(key, "putUrl") == 0) {
		if (!sval || *has_url || strlen(sval) > SNAP_URL_MAX)
			return -EINVAL;
		free(*url);
		*url = sval;
		sval = NULL;
		*has_url = true;
	} else if (strcmp(key, "includeMemory") == 0) {
		if (!is_bool)
			return -EINVAL;
		*mem = b;
	}
	return 0;
}

int snap_parse_args(const char *json, char **ret_put_url, bool *ret_include_memory)
{
	_cleanup_free_ char *url = NULL;
	const char *p = json_lex_skip_ws(json ? json : "");
	bool mem = true, has_url = false;

	if (*p++ != '{')
		return -EINVAL;
	p = json_lex_skip_ws(p);
	while (*p != '}') {
		if (take_member(&p, &url, &mem, &has_url) < 0)
			return -EINVAL;
		p = json_lex_skip_ws(p);
		if (*p == ',')
			p = json_lex_skip_ws(p + 1);
		else if (*p != '}')
			return -EINVAL;
	}
	if (*json_lex_skip_ws(p + 1) || !has_url || !*url)
		return -EINVAL;
	*ret_put_url = url;
	url = NULL;
	*ret_include_memory = mem;
	return 0;
}
