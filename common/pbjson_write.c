/* pbjson_write.c and pbjson_read.c: the proto3 JSON mapping for protobuf-c messages, from
 * descriptors alone.
 *
 * The writer walks a message by its ProtobufCMessageDescriptor and prints
 * lowerCamelCase names (protoc's ToJsonName of the field name; protobuf-c
 * 1.4 keeps no json_name), 64-bit integers as numbers, enums by name, bytes
 * as padded standard base64, NaN/Infinity as strings, maps as objects.
 *
 * The reader is a small recursive-descent parser that fills the message as
 * it goes: no DOM, no external JSON library. Everything is bounded (depth,
 * input size) and everything unexpected is refused with INVALID_INPUT and
 * the dotted path of the offending field ("wait.timeoutMs", "nics[2].mac").
 * What it builds is indistinguishable from protobuf_c_message_unpack's
 * output as far as protobuf_c_message_free_unpacked(m, NULL) is concerned:
 * every message, array, string and byte buffer is malloc'd, strings are
 * always fresh copies (never the shared protobuf_c_empty_string), and a
 * repeated field's count only ever covers initialised elements, so a parse
 * that fails half-way is freed by the same call.
 *
 * protobuf-c has no map flag: a repeated field of a nested "...Entry" message
 * with exactly key = 1 and value = 2 is treated as a map. google.protobuf.Any
 * and the other well-known types get no special form. Numbers are formatted
 * and parsed in the C locale whatever the process locale is. */
#include "pbjson.h"
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pbjson_internal.h"
#include "util.h"


struct wbuf {
	char *p;
	size_t len, cap;
	bool oom;
	int flags;
};

static void w_put(struct wbuf *b, const void *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void w_puts(struct wbuf *b, const char *s)
{
	w_put(b, s, strlen(s));
}

static void w_putc(struct wbuf *b, char c)
{
	w_put(b, &c, 1);
}

static void __attribute__((format(printf, 2, 3))) w_printf(struct wbuf *b, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		w_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* In pretty mode a newline and two spaces per level; nothing otherwise. */
static void w_newline(struct wbuf *b, int level)
{
	if (!(b->flags & PBJSON_PRETTY))
		return;
	w_putc(b, '\n');
	for (int i = 0; i < level; i++)
		w_put(b, "  ", 2);
}

/* A JSON string. Control characters are escaped (\n \r \t \b \f by name,
 * the rest as \u00XX); valid UTF-8 passes through; a byte that is not part
 * of valid UTF-8 becomes U+FFFD (as UTF-8, which is also what reading the
 * output back and writing it again gives) so the output is always valid. */
static void w_string(struct wbuf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t n = strlen((const char *)s);

	w_putc(b, '"');
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t run = 0, k;

		if (c == '"' || c == '\\') {
			w_putc(b, '\\');
			w_putc(b, (char)c);
			i++;
			continue;
		}
		if (c < 0x20) {
			const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" :
					  c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
			if (esc)
				w_puts(b, esc);
			else
				w_printf(b, "\\u%04x", c);
			i++;
			continue;
		}
		while (i + run < n && s[i + run] >= 0x20 && s[i + run] != '"' &&
		       s[i + run] != '\\' && (k = json_lex_utf8_seq(s + i + run, n - i - run)) > 0)
			run += k;
		if (run == 0) {
			w_put(b, "\xef\xbf\xbd", 3);	/* U+FFFD */
			i++;
			continue;
		}
		w_put(b, s + i, run);
		i += run;
	}
	w_putc(b, '"');
}

static const char b64_chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void w_base64(struct wbuf *b, const ProtobufCBinaryData *bd)
{
	const uint8_t *d = bd->data;
	size_t n = d ? bd->len : 0;

	w_putc(b, '"');
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16;
		char q[4];

		if (i + 1 < n)
			v |= (uint32_t)d[i + 1] << 8;
		if (i + 2 < n)
			v |= d[i + 2];
		q[0] = b64_chars[(v >> 18) & 63];
		q[1] = b64_chars[(v >> 12) & 63];
		q[2] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
		q[3] = i + 2 < n ? b64_chars[v & 63] : '=';
		w_put(b, q, 4);
	}
	w_putc(b, '"');
}

/* The shortest %g form that reads back as the same value. */
static void w_double(struct wbuf *b, double v, bool is_float)
{
	char tmp[40] = "0";
	locale_t old;

	if (isnan(v)) {
		w_puts(b, "\"NaN\"");
		return;
	}
	if (isinf(v)) {
		w_puts(b, v < 0 ? "\"-Infinity\"" : "\"Infinity\"");
		return;
	}
	old = uselocale(pbj_c_locale());
	for (int p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof(tmp), "%.*g", p, v);
		if (is_float ? strtof(tmp, NULL) == (float)v : strtod(tmp, NULL) == v)
			break;
	}
	uselocale(old);
	w_puts(b, tmp);
}

static void w_enum(struct wbuf *b, const ProtobufCEnumDescriptor *ed, int v)
{
	const ProtobufCEnumValue *ev = ed ? protobuf_c_enum_descriptor_get_value(ed, v) : NULL;

	if (ev)
		w_string(b, ev->name);
	else
		w_printf(b, "%d", v);
}

static void w_message(struct wbuf *b, const ProtobufCMessage *m, int level);

/* One value of field f stored at p (an element, for repeated fields). */
static void w_value(struct wbuf *b, const ProtobufCFieldDescriptor *f, const void *p, int level)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		w_printf(b, "%" PRId32, *(const int32_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		w_printf(b, "%" PRIu32, *(const uint32_t *)p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		w_printf(b, "%" PRId64, *(const int64_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		w_printf(b, "%" PRIu64, *(const uint64_t *)p);
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		w_double(b, *(const float *)p, true);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		w_double(b, *(const double *)p, false);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		w_puts(b, *(const protobuf_c_boolean *)p ? "true" : "false");
		break;
	case PROTOBUF_C_TYPE_ENUM:
		w_enum(b, f->descriptor, *(const int *)p);
		break;
	case PROTOBUF_C_TYPE_STRING:
		w_string(b, *(char *const *)p);
		break;
	case PROTOBUF_C_TYPE_BYTES:
		w_base64(b, p);
		break;
	case PROTOBUF_C_TYPE_MESSAGE:
		if (*(ProtobufCMessage *const *)p)
			w_message(b, *(ProtobufCMessage *const *)p, level);
		else
			w_puts(b, "{}");
		break;
	}
}

/* A map key: always a JSON string. */
static void w_map_key(struct wbuf *b, const ProtobufCFieldDescriptor *kf, const void *p)
{
	if (kf->type == PROTOBUF_C_TYPE_STRING) {
		w_string(b, *(char *const *)p);
		return;
	}
	w_putc(b, '"');
	if (kf->type == PROTOBUF_C_TYPE_BOOL)
		w_puts(b, *(const protobuf_c_boolean *)p ? "true" : "false");
	else
		w_value(b, kf, p, 0);
	w_putc(b, '"');
}

static void w_key(struct wbuf *b, const char *name, int level, bool *first)
{
	char camel[PBJSON_MAX_NAME];

	if (!*first)
		w_putc(b, ',');
	*first = false;
	w_newline(b, level);
	pbj_json_name(name, camel, sizeof(camel));
	w_string(b, camel);
	w_puts(b, b->flags & PBJSON_PRETTY ? ": " : ":");
}

static void w_map(struct wbuf *b, const ProtobufCFieldDescriptor *f, ProtobufCMessage *const *entries,
		  size_t n, int level)
{
	const ProtobufCMessageDescriptor *ed = f->descriptor;
	_cleanup_free_ bool *shadowed = calloc(n ? n : 1, sizeof(bool));
	bool first = true;

	if (!shadowed || pbj_map_shadowed(entries, n, &ed->fields[0], shadowed) < 0) {
		b->oom = true;
		return;
	}
	w_putc(b, '{');
	for (size_t i = 0; i < n; i++) {
		if (shadowed[i])
			continue;
		if (!first)
			w_putc(b, ',');
		first = false;
		w_newline(b, level + 1);
		w_map_key(b, &ed->fields[0], pbj_member(entries[i], ed->fields[0].offset));
		w_puts(b, b->flags & PBJSON_PRETTY ? ": " : ":");
		w_value(b, &ed->fields[1], pbj_member(entries[i], ed->fields[1].offset), level + 1);
	}
	if (!first)
		w_newline(b, level);
	w_putc(b, '}');
}

static void w_repeated(struct wbuf *b, const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
		       int level)
{
	size_t n = *(const size_t *)pbj_member(m, f->quantifier_offset);
	const char *arr = *(char *const *)pbj_member(m, f->offset);
	size_t sz = pbj_elt_size(f->type);

	if (!arr)
		n = 0;
	if (pbj_is_map(f)) {
		w_map(b, f, (ProtobufCMessage *const *)arr, n, level);
		return;
	}
	w_putc(b, '[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			w_putc(b, ',');
		w_newline(b, level + 1);
		w_value(b, f, arr + i * sz, level + 1);
	}
	if (n)
		w_newline(b, level);
	w_putc(b, ']');
}

static bool is_zero(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;
		return !s || !*s;
	}
	case PROTOBUF_C_TYPE_BYTES:
		return ((const ProtobufCBinaryData *)p)->len == 0;
	case PROTOBUF_C_TYPE_FLOAT:
		return *(const float *)p == 0;
	case PROTOBUF_C_TYPE_DOUBLE:
		return *(const double *)p == 0;
	case PROTOBUF_C_TYPE_MESSAGE:
		return *(void *const *)p == NULL;
	default:
		return pbj_elt_size(f->type) == 8 ? *(const uint64_t *)p == 0 : *(const uint32_t *)p == 0;
	}
}

/* Whether field f is written: set oneof members, optional fields that are
 * present (as protobuf-c's packer decides), proto3 fields that differ from
 * their zero value, and with defaults also zero-valued proto3 scalars and
 * empty lists. Unset message fields are never written. */
static bool w_field_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			    bool defaults)
{
	const void *p = pbj_member(m, f->offset);

	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		if (*(const uint32_t *)pbj_member(m, f->quantifier_offset) != f->id)
			return false;
		return !pbj_is_pointer_type(f->type) || *(void *const *)p != NULL;
	}
	switch (f->label) {
	case PROTOBUF_C_LABEL_REQUIRED:
		return true;
	case PROTOBUF_C_LABEL_OPTIONAL:
		if (pbj_is_pointer_type(f->type))
			return *(void *const *)p != NULL && *(void *const *)p != f->default_value;
		return *(const protobuf_c_boolean *)pbj_member(m, f->quantifier_offset);
	case PROTOBUF_C_LABEL_REPEATED:
		return *(const size_t *)pbj_member(m, f->quantifier_offset) > 0 || defaults;
	default:
		if (f->type == PROTOBUF_C_TYPE_MESSAGE)
			return *(void *const *)p != NULL;
		return !is_zero(f, p) || defaults;
	}
}

static void w_message(struct wbuf *b, const ProtobufCMessage *m, int level)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	bool first = true;

	w_putc(b, '{');
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		if (!w_field_present(m, f, b->flags & PBJSON_EMIT_DEFAULTS))
			continue;
		w_key(b, f->name, level + 1, &first);
		if (f->label == PROTOBUF_C_LABEL_REPEATED)
			w_repeated(b, m, f, level + 1);
		else
			w_value(b, f, pbj_member(m, f->offset), level + 1);
	}
	if (!first)
		w_newline(b, level);
	w_putc(b, '}');
}

/* Serialise msg as proto3 JSON (see the file comment). flags: any of
 * PBJSON_EMIT_DEFAULTS, PBJSON_PRETTY. *ret_json is malloc'd, NUL-terminated,
 * the caller frees it. 0, -EINVAL for a NULL argument, or -ENOMEM. */
int pbjson_write(const ProtobufCMessage *msg, int flags, char **ret_json)
{
	struct wbuf b = {.flags = flags};

	if (!msg || !msg->descriptor || !ret_json)
		return -EINVAL;
	w_message(&b, msg, 0);
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	*ret_json = b.p;
	return 0;
}

