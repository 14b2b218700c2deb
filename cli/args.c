/* args.c: bcctl's flag parser. Each verb declares a small typed table
 * (struct cli_flag); this file walks argv once against it and the global
 * flags, stores typed values, and refuses anything it does not know, so a
 * typo never silently becomes a default. It prints usage errors itself
 * because they are the CLI's edge; it never touches the network. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The parse state: both flag tables and which entries were given. */
struct parse {
	struct cli_ctx *ctx;
	const struct cli_flag *flags;
	size_t n_flags;
	bool seen[CLI_MAX_FLAGS];
	size_t next_arg;        /* index into flags[] to search for the next CLI_ARG */
};

static const struct cli_flag *find_flag(const struct cli_flag *flags, size_t n,
					const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (flags[i].type != CLI_ARG && strlen(flags[i].name) == len &&
		    strncmp(flags[i].name, name, len) == 0)
			return &flags[i];
	return NULL;
}

static int parse_int(const struct cli_ctx *ctx, const struct cli_flag *f, const char *v,
		     int64_t *ret)
{
	char *end = NULL;
	long long n;

	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno || end == v || *end != '\0')
		return cli_usage_error(ctx, "--%s: '%s' is not a whole number", f->name, v);
	if (n < f->min || n > f->max)
		return cli_usage_error(ctx, "--%s: %lld is out of range [%" PRId64 ", %" PRId64 "]",
				       f->name, n, f->min, f->max);
	*ret = n;
	return 0;
}

static int parse_dur(const struct cli_ctx *ctx, const struct cli_flag *f, const char *v,
		     int64_t *ret)
{
	int64_t ms;

	if (duration_parse_ms(v, &ms) < 0)
		return cli_usage_error(ctx, "--%s: '%s' is not a duration (e.g. 1500ms, 20s, 5m, 1h, 7d)",
				       f->name, v);
	if (ms < f->min || ms > f->max)
		return cli_usage_error(ctx, "--%s: %s is out of range [%" PRId64 "ms, %" PRId64 "ms]",
				       f->name, v, f->min, f->max);
	*ret = ms;
	return 0;
}

/* Read a file flag: text, so NUL bytes are refused. file_read_all refuses a file of exactly its max, so ask
 * for one byte more and check the limit here. */
static int parse_file(const struct cli_ctx *ctx, const struct cli_flag *f, const char *v,
		      char **ret)
{
	char *buf = NULL;
	size_t len = 0;
	int r;

	r = file_read_all(v, (size_t)f->max + 1, &buf, &len);
	if (r == -EFBIG || (r == 0 && len > (size_t)f->max)) {
		free(buf);
		return cli_usage_error(ctx, "--%s %s: larger than %" PRId64 " bytes",
				       f->name, v, f->max);
	}
	if (r < 0)
		return cli_usage_error(ctx, "--%s %s: %s", f->name, v, strerror(-r));
	if (memchr(buf, '\0', len)) {
		free(buf);
		return cli_usage_error(ctx, "--%s %s: contains NUL bytes", f->name, v);
	}
	*ret = buf;
	return 0;
}

static int parse_choice(const struct cli_ctx *ctx, const struct cli_flag *f, const char *v,
			int *ret)
{
	for (int i = 0; f->choices[i]; i++)
		if (strcmp(f->choices[i], v) == 0) {
			*ret = i;
			return 0;
		}
	return cli_usage_error(ctx, "--%s: '%s' is not one of %s", f->name, v, f->meta);
}

static int store(const struct cli_ctx *ctx, const struct cli_flag *f, const char *v)
{
	struct cli_strv *sv;

	switch (f->type) {
	case CLI_STR:
	case CLI_ARG:
		*(const char **)f->dst = v;
		return 0;
	case CLI_ARGS: /* parse_positional appends these itself */
		return -EINVAL;
	case CLI_STRS:
		sv = f->dst;
		if (sv->n >= CLI_MAX_REPEAT)
			return cli_usage_error(ctx, "--%s: at most %d values", f->name,
					       CLI_MAX_REPEAT);
		sv->v[sv->n++] = (char *)v;
		return 0;
	case CLI_INT:
		return parse_int(ctx, f, v, f->dst);
	case CLI_DUR:
		return parse_dur(ctx, f, v, f->dst);
	case CLI_FILE:
		return parse_file(ctx, f, v, f->dst);
	case CLI_CHOICE:
		return parse_choice(ctx, f, v, f->dst);
	case CLI_BOOL:
		break;  /* set by parse_flag: takes no value */
	}
	return -EINVAL;
}

/* Handle one "--name[=value]" word at argv[*i]; may consume argv[*i + 1]. */
static int parse_flag(struct parse *p, int argc, char **argv, int *i)
{
	const char *word = argv[*i] + 2, *eq = strchr(word, '='), *value = NULL;
	size_t len = eq ? (size_t)(eq - word) : strlen(word);
	const struct cli_flag *f = find_flag(p->flags, p->n_flags, word, len);
	bool *seen;

	if (f) {
		seen = &p->seen[f - p->flags];
	} else {
		f = find_flag(p->ctx->globals, p->ctx->n_globals, word, len);
		if (!f)
			return cli_usage_error(p->ctx, "unknown flag --%.*s", (int)len, word);
		seen = &p->ctx->globals_seen[f - p->ctx->globals];
	}
	if (*seen && f->type != CLI_STRS)
		return cli_usage_error(p->ctx, "--%s given more than once", f->name);
	if (f->type == CLI_BOOL && eq)
		return cli_usage_error(p->ctx, "--%s takes no value", f->name);
	if (f->type != CLI_BOOL) {
		if (!eq && *i + 1 >= argc)
			return cli_usage_error(p->ctx, "--%s needs a value", f->name);
		value = eq ? eq + 1 : argv[++*i];
	}
	*seen = true;
	if (f->seen)
		*f->seen = true;
	if (f->type == CLI_BOOL) {
		*(bool *)f->dst = true;
		return 0;
	}
	return store(p->ctx, f, value);
}

static int parse_positional(struct parse *p, const char *word)
{
	for (; p->next_arg < p->n_flags; p->next_arg++) {
		const struct cli_flag *f = &p->flags[p->next_arg];
		if (f->type == CLI_ARG) {
			p->seen[p->next_arg++] = true;
			return store(p->ctx, f, word);
		}
		if (f->type == CLI_ARGS) {
			struct cli_strv *v = f->dst;

			if (v->n >= CLI_MAX_REPEAT)
				return cli_usage_error(p->ctx, "at most %d %s", CLI_MAX_REPEAT,
						       f->name);
			p->seen[p->next_arg] = true;
			v->v[v->n++] = (char *)word;
			return 0;
		}
	}
	return cli_usage_error(p->ctx, "unexpected argument '%s'", word);
}

static int check_required(const struct parse *p)
{
	for (size_t i = 0; i < p->n_flags; i++) {
		const struct cli_flag *f = &p->flags[i];
		if (!f->required || p->seen[i])
			continue;
		if (f->type == CLI_ARG || f->type == CLI_ARGS)
			return cli_usage_error(p->ctx, "missing %s", f->name);
		return cli_usage_error(p->ctx, "--%s is required", f->name);
	}
	return 0;
}

int cli_args_parse(struct cli_ctx *ctx, const struct cli_flag *flags, size_t n_flags,
		   int argc, char **argv)
{
	struct parse p = {.ctx = ctx, .flags = flags, .n_flags = n_flags};
	bool flags_done = false;

	if (n_flags > CLI_MAX_FLAGS)
		return -E2BIG;
	for (int i = 0; i < argc; i++) {
		const char *w = argv[i];
		int r = 0;

		if (!flags_done && (strcmp(w, "--help") == 0 || strcmp(w, "-h") == 0)) {
			cli_args_help(ctx, flags, n_flags, stdout);
			return CLI_DONE;
		}
		if (!flags_done && strcmp(w, "--") == 0)
			flags_done = true;
		else if (!flags_done && strncmp(w, "--", 2) == 0)
			r = parse_flag(&p, argc, argv, &i);
		else
			r = parse_positional(&p, w);
		if (r < 0)
			return r;
	}
	return check_required(&p);
}

int cli_args_global(struct cli_ctx *ctx, int argc, char **argv, int *i)
{
	struct parse p = {.ctx = ctx};

	return parse_flag(&p, argc, argv, i);
}

static void help_line(const struct cli_flag *f, FILE *out)
{
	char lhs[64];

	if (f->type == CLI_ARG)
		snprintf(lhs, sizeof(lhs), "%s", f->name);
	else if (f->type == CLI_ARGS)
		snprintf(lhs, sizeof(lhs), "%s ...", f->name);
	else if (f->type == CLI_BOOL)
		snprintf(lhs, sizeof(lhs), "--%s", f->name);
	else
		snprintf(lhs, sizeof(lhs), "--%s %s", f->name, f->meta ? f->meta : "VALUE");
	fprintf(out, "  %-28s %s%s%s\n", lhs, f->help ? f->help : "",
		f->required ? " (required)" : "",
		f->type == CLI_STRS ? " (repeatable)" : "");
}

void cli_args_help(const struct cli_ctx *ctx, const struct cli_flag *flags, size_t n_flags,
		   FILE *out)
{
	const struct cli_verb *v = ctx->verb;

	fprintf(out, "usage: bcctl %s%s%s %s\n", v->noun, v->verb ? " " : "",
		v->verb ? v->verb : "", v->usage);
	if (v->summary)
		fprintf(out, "\n%s\n", v->summary);
	if (n_flags)
		fprintf(out, "\n");
	cli_args_print_flags(flags, n_flags, out);
	fprintf(out, "\nglobal flags:\n");
	cli_args_print_flags(ctx->globals, ctx->n_globals, out);
}

void cli_args_print_flags(const struct cli_flag *flags, size_t n_flags, FILE *out)
{
	for (size_t i = 0; i < n_flags; i++)
		help_line(&flags[i], out);
}
