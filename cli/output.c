/* output.c: everything bcctl prints. Replies go to stdout as proto3 JSON
 * (pbjson, --format json) or as text: aligned tables for lists and a
 * descriptor-driven "field: value" listing for single objects, so a new
 * proto field shows up without code here. Errors go to stderr as text and,
 * with --format json, also to stdout as a JSON object. Strings that come
 * from the server are printed with control characters replaced, so a
 * hostile name cannot drive the terminal. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pbjson.h"
#include "util.h"

#define CLI_TABLE_MAX_COLS 16
#define FIELD_NAME_WIDTH 22

/* ------------------------------------------------------------ helpers */

const char *cli_fmt_time(int64_t ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || !gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, len, "-");
	return buf;
}

static void put_clean(const char *s, FILE *out)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, out);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

void cli_print_more(const char *cursor)
{
	fflush(stdout);
	if (cursor && *cursor)
		fprintf(stderr, "# more results: --cursor %s\n", cursor);
}

/* --------------------------------------------------------------- JSON */

int cli_print_json(const ProtobufCMessage *msg, FILE *out)
{
	char *json = NULL;
	int r = pbjson_write(msg, PBJSON_PRETTY, &json);

	if (r < 0)
		return r;
	fputs(json, out);
	fputc('\n', out);
	free(json);
	return 0;
}

static void json_string(const char *s, FILE *out)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c == '\t')
			fputs("\\t", out);
		else if (c < 0x20 || c == 0x7f)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

void cli_print_error(const bc_error *err, FILE *err_out, FILE *json_out)
{
	fprintf(err_out, "error: %s: ", bc_code_name(err->code));
	put_clean(err->message, err_out);
	fputc('\n', err_out);
	for (size_t i = 0; i < err->n_details; i++) {
		fprintf(err_out, "  ");
		put_clean(err->details[i].key, err_out);
		fprintf(err_out, ": ");
		put_clean(err->details[i].value, err_out);
		fputc('\n', err_out);
	}
	if (!json_out)
		return;
	fprintf(json_out, "{\n  \"error\": {\n    \"code\": ");
	json_string(bc_code_name(err->code), json_out);
	fprintf(json_out, ",\n    \"message\": ");
	json_string(err->message, json_out);
	fprintf(json_out, ",\n    \"details\": {");
	for (size_t i = 0; i < err->n_details; i++) {
		fprintf(json_out, "%s\n      ", i ? "," : "");
		json_string(err->details[i].key, json_out);
		fprintf(json_out, ": ");
		json_string(err->details[i].value, json_out);
	}
	fprintf(json_out, "%s}\n  }\n}\n", err->n_details ? "\n    " : "");
}

/* ------------------------------------------------ descriptor listing */

static void print_message(const ProtobufCMessage *m, const char *prefix, FILE *out);

static void print_kv(const char *name, const char *value, FILE *out)
{
	char key[160];

	snprintf(key, sizeof(key), "%s:", name);
	fprintf(out, "%-*s ", FIELD_NAME_WIDTH, key);
	put_clean(*value ? value : "-", out);
	fputc('\n', out);
}

/* Text of one scalar at p: buf, or the string itself for string fields. */
static const char *scalar_text(const ProtobufCFieldDescriptor *f, const void *p, char *buf,
			       size_t len)
{
	const ProtobufCEnumValue *ev;

	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		snprintf(buf, len, "%" PRId32, *(const int32_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		snprintf(buf, len, "%" PRIu32, *(const uint32_t *)p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		if (ends_with(f->name, "_at"))
			return cli_fmt_time(*(const int64_t *)p, buf, len);
		snprintf(buf, len, "%" PRId64, *(const int64_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		snprintf(buf, len, "%" PRIu64, *(const uint64_t *)p);
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		snprintf(buf, len, "%g", (double)*(const float *)p);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		snprintf(buf, len, "%g", *(const double *)p);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		snprintf(buf, len, "%s", *(const protobuf_c_boolean *)p ? "true" : "false");
		break;
	case PROTOBUF_C_TYPE_ENUM:
		ev = protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
		snprintf(buf, len, "%s", ev ? ev->name : "?");
		break;
	case PROTOBUF_C_TYPE_STRING:
		return *(char *const *)p ? *(char *const *)p : "";
	case PROTOBUF_C_TYPE_BYTES:
		snprintf(buf, len, "<%zu bytes>", ((const ProtobufCBinaryData *)p)->len);
		break;
	case PROTOBUF_C_TYPE_MESSAGE:
		snprintf(buf, len, "?");
		break;
	}
	return buf;
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return 8;
	case PROTOBUF_C_TYPE_DOUBLE:
		return sizeof(double);
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	default:
		return 4;
	}
}

static bool is_map_entry(const ProtobufCFieldDescriptor *f)
{
	const ProtobufCMessageDescriptor *d = f->descriptor;

	return f->type == PROTOBUF_C_TYPE_MESSAGE && d->n_fields == 2 &&
	       ends_with(d->name, "Entry") && strcmp(d->fields[0].name, "key") == 0 &&
	       strcmp(d->fields[1].name, "value") == 0;
}

/* A map as "k=v, k=v" on one line. */
static void print_map(const char *name, ProtobufCMessage *const *items, size_t n, FILE *out)
{
	char line[4096] = "", kb[64], vb[64];
	size_t used = 0;

	for (size_t i = 0; i < n && used < sizeof(line); i++) {
		const ProtobufCMessageDescriptor *d = items[i]->descriptor;
		const char *base = (const char *)items[i];
		const char *k = scalar_text(&d->fields[0], base + d->fields[0].offset, kb, sizeof(kb));
		const char *v = scalar_text(&d->fields[1], base + d->fields[1].offset, vb, sizeof(vb));
		used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s=%s",
					 i ? ", " : "", k, v);
	}
	print_kv(name, line, out);
}

static void print_repeated(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			   const char *name, FILE *out)
{
	size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
	const char *arr = *(char *const *)((const char *)m + f->offset);
	char line[4096] = "", buf[64], sub[160];
	size_t used = 0, sz = elem_size(f->type);

	if (is_map_entry(f)) {
		print_map(name, (ProtobufCMessage *const *)arr, n, out);
		return;
	}
	if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
		for (size_t i = 0; i < n; i++) {
			snprintf(sub, sizeof(sub), "%s[%zu].", name, i);
			print_message(((ProtobufCMessage *const *)arr)[i], sub, out);
		}
		if (n == 0)
			print_kv(name, "", out);
		return;
	}
	for (size_t i = 0; i < n && used < sizeof(line); i++)
		used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s", i ? ", " : "",
					 scalar_text(f, arr + i * sz, buf, sizeof(buf)));
	print_kv(name, line, out);
}

static void print_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			const char *prefix, FILE *out)
{
	const char *p = (const char *)m + f->offset;
	char name[160], buf[64];

	snprintf(name, sizeof(name), "%s%s", prefix, f->name);
	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		if (*(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			return;
	} else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		print_repeated(m, f, name, out);
		return;
	} else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
		   !*(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset)) {
		return;
	}
	if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
		const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
		if (sub) {
			snprintf(name, sizeof(name), "%s%s.", prefix, f->name);
			print_message(sub, name, out);
		}
		return;
	}
	print_kv(name, scalar_text(f, p, buf, sizeof(buf)), out);
}

static void print_message(const ProtobufCMessage *m, const char *prefix, FILE *out)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	for (unsigned i = 0; i < d->n_fields; i++)
		print_field(m, &d->fields[i], prefix, out);
}

void cli_print_fields(const ProtobufCMessage *msg, FILE *out)
{
	print_message(msg, "", out);
}

/* -------------------------------------------------------------- tables */

struct cli_table {
	size_t n_cols, n_cells, cap;
	char **cells;           /* row-major, headers first */
};

static void table_push(struct cli_table *t, char *cell)
{
	if (t->n_cells == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->cells = realloc(t->cells, t->cap * sizeof(*t->cells));
		if (!t->cells)
			abort();
	}
	t->cells[t->n_cells++] = cell;
}

struct cli_table *cli_table_new(const char *const *headers, size_t n_cols)
{
	struct cli_table *t = xcalloc(1, sizeof(*t));

	t->n_cols = n_cols < CLI_TABLE_MAX_COLS ? n_cols : CLI_TABLE_MAX_COLS;
	for (size_t i = 0; i < t->n_cols; i++)
		table_push(t, xstrdup(headers[i]));
	return t;
}

void cli_table_cell(struct cli_table *t, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	if (!*s) {
		free(s);
		s = xstrdup("-");
	}
	for (char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	table_push(t, s);
}

void cli_table_print(const struct cli_table *t, FILE *out)
{
	size_t width[CLI_TABLE_MAX_COLS] = {0};

	for (size_t i = 0; i < t->n_cells; i++) {
		size_t n = strlen(t->cells[i]);
		if (n > width[i % t->n_cols])
			width[i % t->n_cols] = n;
	}
	for (size_t i = 0; i < t->n_cells; i++) {
		size_t col = i % t->n_cols;
		bool last = col == t->n_cols - 1 || i == t->n_cells - 1;
		if (last)
			fprintf(out, "%s\n", t->cells[i]);
		else
			fprintf(out, "%-*s  ", (int)width[col], t->cells[i]);
	}
}

void cli_table_free(struct cli_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_cells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}
