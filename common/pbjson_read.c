/* pbjson_read.c: the reader of the proto3 JSON mapping; see the overview
 * at the top of pbjson_write.c. */
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
#include "json_lex.h"
#include "pbjson_internal.h"
#include "util.h"


struct rd {
	const char *s;
	size_t len, pos;
	int depth;
	bc_error *err;
	size_t plen;
	char path[256];
};

/* Refuse the input: INVALID_INPUT, "<path>: <why> (offset N)", details
 * field = the path of the value being read. */
static int __attribute__((format(printf, 2, 3))) rd_fail(struct rd *r, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (r->plen)
		bc_error_set(r->err, BC_INVALID_INPUT, "%s: %s (offset %zu)", r->path, why, r->pos);
	else
		bc_error_set(r->err, BC_INVALID_INPUT, "%s (offset %zu)", why, r->pos);
	if (r->plen)
		bc_error_detail(r->err, "field", "%s", r->path);
	return -BC_EDOMAIN;
}

static void path_advance(struct rd *r, int n)
{
	if (n > 0)
		r->plen = r->plen + (size_t)n < sizeof(r->path) ? r->plen + (size_t)n
								: sizeof(r->path) - 1;
}

/* Append ".name" (or "name" at the root); returns the length to pop to. */
static size_t path_push_name(struct rd *r, const char *name)
{
	size_t saved = r->plen;

	path_advance(r, snprintf(r->path + r->plen, sizeof(r->path) - r->plen, "%s%s",
				 r->plen ? "." : "", name));
	return saved;
}

static size_t path_push_index(struct rd *r, size_t i)
{
	size_t saved = r->plen;

	path_advance(r, snprintf(r->path + r->plen, sizeof(r->path) - r->plen, "[%zu]", i));
	return saved;
}

static void path_pop(struct rd *r, size_t saved)
{
	r->plen = saved;
	r->path[saved] = '\0';
}

/* The next non-whitespace byte, not consumed; -1 at the end. */
static int rd_peek(struct rd *r)
{
	while (r->pos < r->len) {
		char c = r->s[r->pos];

		if (!json_lex_ws(c))
			return (unsigned char)c;
		r->pos++;
	}
	return -1;
}

static bool rd_eat(struct rd *r, char c)
{
	if (rd_peek(r) != (unsigned char)c)
		return false;
	r->pos++;
	return true;
}

static bool rd_literal(struct rd *r, const char *lit)
{
	size_t n = strlen(lit);

	if (rd_peek(r) < 0 || r->len - r->pos < n || memcmp(r->s + r->pos, lit, n) != 0)
		return false;
	r->pos += n;
	return true;
}

/* Open an object or array, counting depth. */
static int rd_enter(struct rd *r, char open, const char *what)
{
	if (!rd_eat(r, open))
		return rd_fail(r, "expected %s", what);
	if (++r->depth > PBJSON_MAX_DEPTH)
		return rd_fail(r, "nested deeper than %d", PBJSON_MAX_DEPTH);
	return 0;
}

static int rd_leave(struct rd *r, char close)
{
	if (!rd_eat(r, close))
		return rd_fail(r, "expected ',' or '%c'", close);
	r->depth--;
	return 0;
}

/* A JSON string, unescaped into a malloc'd buffer (NUL-terminated; may
 * contain NUL bytes from \u0000, *ret_len says how long it is). */
static int rd_string(struct rd *r, char **ret, size_t *ret_len)
{
	struct json_lex_fault f;
	size_t used;
	int rc;

	if (!rd_eat(r, '"'))
		return rd_fail(r, "expected a string");
	rc = json_lex_string(r->s + r->pos, r->len - r->pos, JSON_LEX_UTF8, ret, ret_len, &used,
			     &f);
	if (rc == -EINVAL) {
		r->pos += f.at;
		return rd_fail(r, "%s", f.why);
	}
	if (rc < 0)
		return rc;
	r->pos += used;
	return 0;
}

/* Length of the JSON number at s (RFC 8259 grammar), 0 if there is none. */
static size_t number_len(const char *s, size_t n)
{
	size_t i = 0, d;

	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0')
		i++;
	else if (i < n && s[i] >= '1' && s[i] <= '9')
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	else
		return 0;
	if (i + 1 < n && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9')
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		d = i + 1;
		if (d < n && (s[d] == '+' || s[d] == '-'))
			d++;
		if (d < n && s[d] >= '0' && s[d] <= '9') {
			for (i = d; i < n && s[i] >= '0' && s[i] <= '9'; i++)
				;
		}
	}
	return i;
}

/* The exact integer a JSON number denotes: -EINVAL if it has a fractional
 * part, -ERANGE if its magnitude exceeds 2^64-1. "1e3" and "2.50e1" are
 * integers; "1.5" is not. */
static int number_to_int(const char *t, size_t n, bool *ret_neg, uint64_t *ret_mag)
{
	size_t i = 0, int_start, int_end, frac_start = 0, frac_end = 0, ndig;
	long long exp10 = 0, shift;
	bool eneg = false;
	char digits[PBJSON_MAX_NUMBER];
	uint64_t v = 0;

	*ret_neg = t[0] == '-';
	i = *ret_neg;
	for (int_start = i; i < n && t[i] >= '0' && t[i] <= '9'; i++)
		;
	int_end = i;
	if (i < n && t[i] == '.') {
		for (frac_start = ++i; i < n && t[i] >= '0' && t[i] <= '9'; i++)
			;
		frac_end = i;
	}
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		if (t[i] == '+' || t[i] == '-')
			eneg = t[i++] == '-';
		for (; i < n; i++)
			if (exp10 < 100000)
				exp10 = exp10 * 10 + (t[i] - '0');
	}
	ndig = (int_end - int_start) + (frac_end - frac_start);
	if (ndig > sizeof(digits))
		return -ERANGE;
	memcpy(digits, t + int_start, int_end - int_start);
	memcpy(digits + (int_end - int_start), t + frac_start, frac_end - frac_start);
	shift = (eneg ? -exp10 : exp10) - (long long)(frac_end - frac_start);
	while (ndig > 0 && digits[ndig - 1] == '0' && shift < 0) {
		ndig--;
		shift++;
	}
	for (size_t k = 0; k < ndig; k++) {
		unsigned d = (unsigned)(digits[k] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (v == 0) {
		*ret_mag = 0;
		return 0;
	}
	if (shift < 0)
		return -EINVAL;
	for (; shift > 0; shift--) {
		if (v > UINT64_MAX / 10)
			return -ERANGE;
		v *= 10;
	}
	*ret_mag = v;
	return 0;
}

static const char *int_type_name(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return "uint32";
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return "int64";
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return "uint64";
	default:
		return "int32";
	}
}

/* Store (neg, mag) into dst as integer type t; false if out of range. */
static bool int_store(ProtobufCType t, bool neg, uint64_t mag, void *dst)
{
	if (mag == 0)
		neg = false;
	switch (t) {
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		if (neg || mag > UINT32_MAX)
			return false;
		*(uint32_t *)dst = (uint32_t)mag;
		return true;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		if (neg)
			return false;
		*(uint64_t *)dst = mag;
		return true;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		if (mag > (uint64_t)INT64_MAX + neg)
			return false;
		*(int64_t *)dst = neg ? (int64_t)(0 - mag) : (int64_t)mag;
		return true;
	default:	/* int32, sint32, sfixed32, enum */
		if (mag > (uint64_t)INT32_MAX + neg)
			return false;
		*(int32_t *)dst = neg ? (int32_t)(0 - (uint32_t)mag) : (int32_t)mag;
		return true;
	}
}

/* The text of a number: a bare JSON number, or a JSON string holding
 * exactly one (proto3 JSON allows both for every numeric type). *ret_owned
 * is set when the text had to be unescaped into a malloc'd buffer. */
static int rd_number_text(struct rd *r, const char **ret, size_t *ret_n, char **ret_owned,
			  bool *ret_quoted)
{
	int c = rd_peek(r);
	size_t n;
	int e;

	*ret_owned = NULL;
	*ret_quoted = c == '"';
	if (c == '"') {
		e = rd_string(r, ret_owned, &n);
		if (e < 0)
			return e;
		*ret = *ret_owned;
		*ret_n = n;
		return 0;
	}
	if (c != '-' && !(c >= '0' && c <= '9'))
		return rd_fail(r, "expected a number");
	n = number_len(r->s + r->pos, r->len - r->pos);
	if (n == 0)
		return rd_fail(r, "malformed number");
	*ret = r->s + r->pos;
	*ret_n = n;
	r->pos += n;
	return 0;
}

static int rd_int(struct rd *r, ProtobufCType t, void *dst)
{
	_cleanup_free_ char *owned = NULL;
	const char *text;
	size_t n;
	bool neg, quoted;
	uint64_t mag;
	int e;

	e = rd_number_text(r, &text, &n, &owned, &quoted);
	if (e < 0)
		return e;
	if (n == 0 || n > PBJSON_MAX_NUMBER || number_len(text, n) != n)
		return n > PBJSON_MAX_NUMBER ? rd_fail(r, "number out of range for %s",
						       int_type_name(t))
					     : rd_fail(r, "expected a number");
	e = number_to_int(text, n, &neg, &mag);
	if (e == -EINVAL)
		return rd_fail(r, "not an integer");
	if (e < 0 || !int_store(t, neg, mag, dst))
		return rd_fail(r, "number out of range for %s", int_type_name(t));
	return 0;
}

static int rd_float(struct rd *r, bool is_float, void *dst)
{
	_cleanup_free_ char *owned = NULL, *copy = NULL;
	const char *text;
	size_t n;
	bool quoted;
	double v;
	locale_t old;
	int e;

	e = rd_number_text(r, &text, &n, &owned, &quoted);
	if (e < 0)
		return e;
	if (quoted && (strcmp(text, "NaN") == 0 || strcmp(text, "Infinity") == 0 ||
		       strcmp(text, "-Infinity") == 0)) {
		v = text[0] == 'N' ? NAN : text[0] == '-' ? -INFINITY : INFINITY;
	} else {
		if (n == 0 || n > PBJSON_MAX_NUMBER || number_len(text, n) != n)
			return rd_fail(r, "expected a number");
		copy = strndup(text, n);
		if (!copy)
			return -ENOMEM;
		old = uselocale(pbj_c_locale());
		v = strtod(copy, NULL);
		uselocale(old);
		/* a float is out of range if it would round to infinity */
		if (isinf(v) || (is_float && fabs(v) >= 0x1.ffffffp+127))
			return rd_fail(r, "number out of range for %s", is_float ? "float" : "double");
	}
	if (is_float)
		*(float *)dst = (float)v;
	else
		*(double *)dst = v;
	return 0;
}

static int rd_bool(struct rd *r, void *dst)
{
	if (rd_literal(r, "true"))
		*(protobuf_c_boolean *)dst = 1;
	else if (rd_literal(r, "false"))
		*(protobuf_c_boolean *)dst = 0;
	else
		return rd_fail(r, "expected true or false");
	return 0;
}

static int rd_enum(struct rd *r, const ProtobufCEnumDescriptor *ed, void *dst)
{
	_cleanup_free_ char *name = NULL;
	const ProtobufCEnumValue *ev;
	size_t n;
	int e;

	if (rd_peek(r) != '"')
		return rd_int(r, PROTOBUF_C_TYPE_ENUM, dst);
	e = rd_string(r, &name, &n);
	if (e < 0)
		return e;
	ev = strlen(name) == n ? protobuf_c_enum_descriptor_get_value_by_name(ed, name) : NULL;
	if (!ev)
		return rd_fail(r, "unknown %s value", ed->short_name);
	*(int *)dst = ev->value;
	return 0;
}

/* C strings end at the first NUL: refuse \u0000 rather than truncate. */
static int rd_cstring(struct rd *r, void *dst)
{
	char *s = NULL;
	size_t n;
	int e;

	if (rd_peek(r) != '"')
		return rd_fail(r, "expected a string");
	e = rd_string(r, &s, &n);
	if (e < 0)
		return e;
	if (strlen(s) != n) {
		free(s);
		return rd_fail(r, "NUL character in string");
	}
	*(char **)dst = s;
	return 0;
}

static int b64_val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* See pbjson_internal.h. */
int pbj_b64_decode(const char *s, size_t n, ProtobufCBinaryData *ret)
{
	size_t pad = 0, out_n = 0;
	uint32_t acc = 0;
	uint8_t *out;
	int bits = 0;

	while (pad < 2 && n > 0 && s[n - 1] == '=') {
		n--;
		pad++;
	}
	if (n % 4 == 1 || (pad && (n + pad) % 4 != 0))
		return -EINVAL;
	if (n == 0) {
		ret->data = NULL;
		ret->len = 0;
		return 0;
	}
	out = malloc(n * 3 / 4 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int v = b64_val(s[i]);

		if (v < 0) {
			free(out);
			return -EINVAL;
		}
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[out_n++] = (uint8_t)(acc >> bits);
		}
	}
	ret->data = out;
	ret->len = out_n;
	return 0;
}

static int rd_bytes(struct rd *r, void *dst)
{
	_cleanup_free_ char *s = NULL;
	size_t n;
	int e;

	if (rd_peek(r) != '"')
		return rd_fail(r, "expected a base64 string");
	e = rd_string(r, &s, &n);
	if (e < 0)
		return e;
	e = pbj_b64_decode(s, n, dst);
	if (e == -EINVAL)
		return rd_fail(r, "invalid base64");
	return e;
}

/* One non-message value of field f into dst (a field or an element). */
static int rd_value(struct rd *r, const ProtobufCFieldDescriptor *f, void *dst)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_BOOL:
		return rd_bool(r, dst);
	case PROTOBUF_C_TYPE_STRING:
		return rd_cstring(r, dst);
	case PROTOBUF_C_TYPE_BYTES:
		return rd_bytes(r, dst);
	case PROTOBUF_C_TYPE_ENUM:
		return rd_enum(r, f->descriptor, dst);
	case PROTOBUF_C_TYPE_FLOAT:
		return rd_float(r, true, dst);
	case PROTOBUF_C_TYPE_DOUBLE:
		return rd_float(r, false, dst);
	case PROTOBUF_C_TYPE_MESSAGE:
		return -EINVAL;
	default:
		return rd_int(r, f->type, dst);
	}
}

static ProtobufCMessage *msg_new(const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = malloc(d->sizeof_message);

	if (!m)
		return NULL;
	if (d->message_init) {
		d->message_init(m);
	} else {
		memset(m, 0, d->sizeof_message);
		m->descriptor = d;
	}
	return m;
}

static int rd_message(struct rd *r, ProtobufCMessage *m);

/* A sub-message into *slot: allocated and linked before it is parsed so
 * that a failure part-way is freed with the root. */
static int rd_submessage(struct rd *r, const ProtobufCMessageDescriptor *d, void *slot)
{
	ProtobufCMessage *sub = msg_new(d);

	if (!sub)
		return -ENOMEM;
	*(ProtobufCMessage **)slot = sub;
	return rd_message(r, sub);
}

/* A zeroed slot at the end of a repeated field's array (not yet counted). */
static void *grow(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, size_t *cap)
{
	void **arr = pbj_member(m, f->offset);
	size_t n = *(size_t *)pbj_member(m, f->quantifier_offset), sz = pbj_elt_size(f->type);
	char *slot;

	if (n == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		void *p = realloc(*arr, nc * sz);

		if (!p)
			return NULL;
		*arr = p;
		*cap = nc;
	}
	slot = (char *)*arr + n * sz;
	memset(slot, 0, sz);
	return slot;
}

static int rd_element(struct rd *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
		      size_t *cap)
{
	size_t *n = pbj_member(m, f->quantifier_offset);
	void *slot = grow(m, f, cap);
	int e;

	if (!slot)
		return -ENOMEM;
	if (rd_peek(r) == 'n')
		return rd_fail(r, "null is not allowed in a list");
	if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
		ProtobufCMessage *sub = msg_new(f->descriptor);

		if (!sub)
			return -ENOMEM;
		*(ProtobufCMessage **)slot = sub;
		(*n)++;
		return rd_message(r, sub);
	}
	e = rd_value(r, f, slot);
	if (e == 0)
		(*n)++;
	return e;
}

static int rd_repeated(struct rd *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	size_t cap = 0, i = 0;
	int e;

	e = rd_enter(r, '[', "an array");
	if (e < 0)
		return e;
	if (rd_eat(r, ']')) {
		r->depth--;
		return 0;
	}
	do {
		size_t saved = path_push_index(r, i++);

		e = rd_element(r, m, f, &cap);
		if (e < 0)
			return e;
		path_pop(r, saved);
	} while (rd_eat(r, ','));
	return rd_leave(r, ']');
}

/* A map key (always a JSON string) converted to the key field's type. */
static int map_key_set(struct rd *r, ProtobufCMessage *e, const ProtobufCFieldDescriptor *kf,
		       char *key, size_t n)
{
	void *dst = pbj_member(e, kf->offset);
	bool neg;
	uint64_t mag;

	if (kf->type == PROTOBUF_C_TYPE_STRING) {
		char *copy;

		if (strlen(key) != n)
			return rd_fail(r, "NUL character in map key");
		copy = strdup(key);
		if (!copy)
			return -ENOMEM;
		*(char **)dst = copy;
		return 0;
	}
	if (kf->type == PROTOBUF_C_TYPE_BOOL) {
		if (strcmp(key, "true") != 0 && strcmp(key, "false") != 0)
			return rd_fail(r, "map key is not a bool");
		*(protobuf_c_boolean *)dst = key[0] == 't';
		return 0;
	}
	if (n == 0 || number_len(key, n) != n || number_to_int(key, n, &neg, &mag) < 0 ||
	    !int_store(kf->type, neg, mag, dst))
		return rd_fail(r, "map key is not a valid %s", int_type_name(kf->type));
	return 0;
}

static int rd_map_entry(struct rd *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			size_t *cap)
{
	const ProtobufCMessageDescriptor *ed = f->descriptor;
	const ProtobufCFieldDescriptor *vf = &ed->fields[1];
	_cleanup_free_ char *key = NULL;
	size_t klen, saved;
	ProtobufCMessage *entry;
	void *slot;
	int e;

	e = rd_string(r, &key, &klen);
	if (e < 0)
		return e;
	if (!rd_eat(r, ':'))
		return rd_fail(r, "expected ':'");
	saved = path_push_name(r, key);
	slot = grow(m, f, cap);
	entry = slot ? msg_new(ed) : NULL;
	if (!entry)
		return -ENOMEM;
	*(ProtobufCMessage **)slot = entry;
	(*(size_t *)pbj_member(m, f->quantifier_offset))++;
	e = map_key_set(r, entry, &ed->fields[0], key, klen);
	if (e < 0)
		return e;
	if (rd_peek(r) == 'n')
		return rd_fail(r, "null is not allowed as a map value");
	if (vf->type == PROTOBUF_C_TYPE_MESSAGE)
		e = rd_submessage(r, vf->descriptor, pbj_member(entry, vf->offset));
	else
		e = rd_value(r, vf, pbj_member(entry, vf->offset));
	if (e < 0)
		return e;
	if (vf->label == PROTOBUF_C_LABEL_OPTIONAL && !pbj_is_pointer_type(vf->type))
		*(protobuf_c_boolean *)pbj_member(entry, vf->quantifier_offset) = 1;
	path_pop(r, saved);
	return 0;
}

static int rd_map(struct rd *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	size_t cap = 0, n;
	_cleanup_free_ bool *shadowed = NULL;
	ssize_t dups;
	int e;

	e = rd_enter(r, '{', "an object");
	if (e < 0)
		return e;
	if (rd_eat(r, '}')) {
		r->depth--;
		return 0;
	}
	do {
		e = rd_map_entry(r, m, f, &cap);
		if (e < 0)
			return e;
	} while (rd_eat(r, ','));
	e = rd_leave(r, '}');
	if (e < 0)
		return e;
	n = *(size_t *)pbj_member(m, f->quantifier_offset);
	shadowed = calloc(n, sizeof(bool));
	if (!shadowed)
		return -ENOMEM;
	dups = pbj_map_shadowed(*(ProtobufCMessage ***)pbj_member(m, f->offset), n,
			    &((const ProtobufCMessageDescriptor *)f->descriptor)->fields[0], shadowed);
	if (dups < 0)
		return (int)dups;
	return dups ? rd_fail(r, "duplicate map key") : 0;
}

/* Mark a singular field as present: the oneof case or the has_ flag. */
static void set_present(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
		*(uint32_t *)pbj_member(m, f->quantifier_offset) = f->id;
	else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && !pbj_is_pointer_type(f->type))
		*(protobuf_c_boolean *)pbj_member(m, f->quantifier_offset) = 1;
}

static int rd_field(struct rd *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
	int e;

	if (f->label == PROTOBUF_C_LABEL_REPEATED)
		return pbj_is_map(f) ? rd_map(r, m, f) : rd_repeated(r, m, f);
	if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
		set_present(m, f);	/* so that free_unpacked sees the child */
		return rd_submessage(r, f->descriptor, pbj_member(m, f->offset));
	}
	e = rd_value(r, f, pbj_member(m, f->offset));
	if (e == 0)
		set_present(m, f);
	return e;
}

static const ProtobufCFieldDescriptor *field_by_key(const ProtobufCMessageDescriptor *d,
						    const char *key)
{
	for (unsigned i = 0; i < d->n_fields; i++)
		if (pbj_name_matches(d->fields[i].name, key))
			return &d->fields[i];
	return NULL;
}

static int rd_member(struct rd *r, ProtobufCMessage *m, unsigned char *seen)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const ProtobufCFieldDescriptor *f;
	_cleanup_free_ char *key = NULL;
	char camel[PBJSON_MAX_NAME];
	size_t klen, saved;
	uint32_t *oneof_case;
	int e;

	e = rd_string(r, &key, &klen);
	if (e < 0)
		return e;
	if (!rd_eat(r, ':'))
		return rd_fail(r, "expected ':'");
	f = strlen(key) == klen ? field_by_key(d, key) : NULL;
	if (f)
		pbj_json_name(f->name, camel, sizeof(camel));
	saved = path_push_name(r, f ? camel : key);
	if (!f)
		return rd_fail(r, "unknown field");
	if (seen[f - d->fields]++)
		return rd_fail(r, "duplicate field");
	if (rd_literal(r, "null")) {	/* proto3 JSON: null is the default */
		path_pop(r, saved);
		return 0;
	}
	oneof_case = pbj_member(m, f->quantifier_offset);
	if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *oneof_case != 0 && *oneof_case != f->id)
		return rd_fail(r, "another member of the same oneof is already set");
	e = rd_field(r, m, f);
	if (e < 0)
		return e;
	path_pop(r, saved);
	return 0;
}

static int check_required(struct rd *r, const ProtobufCMessage *m, const unsigned char *seen)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		/* a required string or message left NULL would crash the packer */
		if (f->label == PROTOBUF_C_LABEL_REQUIRED && !seen[i] && !f->default_value &&
		    pbj_is_pointer_type(f->type)) {
			char camel[PBJSON_MAX_NAME];

			pbj_json_name(f->name, camel, sizeof(camel));
			path_push_name(r, camel);
			return rd_fail(r, "missing required field");
		}
	}
	return 0;
}

static int rd_message(struct rd *r, ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	_cleanup_free_ unsigned char *seen = NULL;
	int e;

	e = rd_enter(r, '{', "an object");
	if (e < 0)
		return e;
	seen = calloc(d->n_fields ? d->n_fields : 1, 1);
	if (!seen)
		return -ENOMEM;
	if (!rd_eat(r, '}')) {
		do {
			e = rd_member(r, m, seen);
			if (e < 0)
				return e;
		} while (rd_eat(r, ','));
		e = rd_leave(r, '}');
		if (e < 0)
			return e;
	} else {
		r->depth--;
	}
	return check_required(r, m, seen);
}

/* Parse proto3 JSON into a new message of descriptor d (see pbjson.h and
 * the file comment). max_bytes 0 means the default cap of 4 MiB. Returns
 * 0, -EINVAL for NULL arguments, -ENOMEM, or -BC_EDOMAIN with err filled. */
int pbjson_read(const ProtobufCMessageDescriptor *d, const char *json, size_t len,
		size_t max_bytes, ProtobufCMessage **ret, bc_error *err)
{
	struct rd r = {.s = json, .len = len, .err = err};
	ProtobufCMessage *m;
	int e;

	if (!d || !ret || (!json && len))
		return -EINVAL;
	if (!max_bytes)
		max_bytes = PBJSON_DEFAULT_MAX_BYTES;
	if (len > max_bytes)
		return rd_fail(&r, "input larger than %zu bytes", max_bytes);
	m = msg_new(d);
	if (!m)
		return -ENOMEM;
	e = rd_message(&r, m);
	if (e == 0 && rd_peek(&r) >= 0)
		e = rd_fail(&r, "unexpected data after the object");
	if (e < 0) {
		protobuf_c_message_free_unpacked(m, NULL);
		return e;
	}
	*ret = m;
	return 0;
}
