/* pbjson_common.c: the helpers the proto3 JSON writer and reader share
 * (see pbjson_write.c, pbjson_read.c): protoc's JSON field names, map
 * detection, member access, UTF-8 sequences, map key order. */
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


static locale_t c_loc;
static pthread_once_t c_loc_once = PTHREAD_ONCE_INIT;

static void c_loc_init(void)
{
	c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* The C locale for this thread's number formatting; (locale_t)0 (which
 * uselocale treats as "no change") if it could not be made. */
locale_t pbj_c_locale(void)
{
	pthread_once(&c_loc_once, c_loc_init);
	return c_loc;
}

/* protoc's ToJsonName: drop each '_' and upper-case the letter after it. */
void pbj_json_name(const char *name, char *out, size_t outlen)
{
	bool up = false;
	size_t n = 0;

	for (; *name && n + 1 < outlen; name++) {
		if (*name == '_') {
			up = true;
			continue;
		}
		out[n++] = up && *name >= 'a' && *name <= 'z' ? (char)(*name - 'a' + 'A') : *name;
		up = false;
	}
	out[n] = '\0';
}

bool pbj_name_matches(const char *field_name, const char *key)
{
	char camel[PBJSON_MAX_NAME];

	if (strcmp(field_name, key) == 0)
		return true;
	pbj_json_name(field_name, camel, sizeof(camel));
	return strcmp(camel, key) == 0;
}

static bool is_map_key_type(ProtobufCType t)
{
	return t != PROTOBUF_C_TYPE_FLOAT && t != PROTOBUF_C_TYPE_DOUBLE &&
	       t != PROTOBUF_C_TYPE_BYTES && t != PROTOBUF_C_TYPE_ENUM &&
	       t != PROTOBUF_C_TYPE_MESSAGE;
}

bool pbj_is_map(const ProtobufCFieldDescriptor *f)
{
	const ProtobufCMessageDescriptor *d = f->descriptor;
	size_t n;

	if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE || !d)
		return false;
	if (d->n_fields != 2 || d->fields[0].id != 1 || d->fields[1].id != 2 ||
	    strcmp(d->fields[0].name, "key") != 0 || strcmp(d->fields[1].name, "value") != 0 ||
	    d->fields[0].label == PROTOBUF_C_LABEL_REPEATED ||
	    d->fields[1].label == PROTOBUF_C_LABEL_REPEATED || !is_map_key_type(d->fields[0].type))
		return false;
	n = strlen(d->short_name);
	return n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0;
}

size_t pbj_elt_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
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

void *pbj_member(const ProtobufCMessage *m, unsigned offset)
{
	return (char *)m + offset;
}

bool pbj_is_pointer_type(ProtobufCType t)
{
	return t == PROTOBUF_C_TYPE_STRING || t == PROTOBUF_C_TYPE_MESSAGE;
}

/* The code point of a valid sequence of length k (from utf8_seq). */
static unsigned long utf8_decode(const unsigned char *s, size_t k)
{
	static const unsigned char lead_mask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
	unsigned long cp = s[0] & lead_mask[k];

	for (size_t i = 1; i < k; i++)
		cp = (cp << 6) | (s[i] & 0x3f);
	return cp;
}

/* Compare two strings by the code points the writer prints for them (an
 * invalid byte reads as U+FFFD), so keys that print alike compare equal;
 * for valid UTF-8 this is plain byte order. NULL is "". */
static int utf8_cmp(const char *a, const char *b)
{
	const unsigned char *s = (const unsigned char *)(a ? a : "");
	const unsigned char *t = (const unsigned char *)(b ? b : "");
	size_t ns = strlen((const char *)s), nt = strlen((const char *)t);

	while (ns && nt) {
		size_t ks = json_lex_utf8_seq(s, ns), kt = json_lex_utf8_seq(t, nt);
		unsigned long cs = ks ? utf8_decode(s, ks) : 0xfffd;
		unsigned long ct = kt ? utf8_decode(t, kt) : 0xfffd;

		if (cs != ct)
			return cs < ct ? -1 : 1;
		s += ks ? ks : 1;
		ns -= ks ? ks : 1;
		t += kt ? kt : 1;
		nt -= kt ? kt : 1;
	}
	return (ns > 0) - (nt > 0);
}

/* Map entries in key order, equal keys in input order: used to drop
 * shadowed entries when writing and to refuse duplicate keys when reading. */
struct entry_ref {
	const ProtobufCMessage *e;
	size_t i;
};

static int key_cmp(const void *pa, const void *pb, void *ctx)
{
	const ProtobufCFieldDescriptor *kf = ctx;
	const struct entry_ref *a = pa, *b = pb;
	const void *x = pbj_member(a->e, kf->offset), *y = pbj_member(b->e, kf->offset);
	int c = 0;

	switch (kf->type) {
	case PROTOBUF_C_TYPE_STRING:
		c = utf8_cmp(*(char *const *)x, *(char *const *)y);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64: {
		int64_t s = *(const int64_t *)x, t = *(const int64_t *)y;
		c = (s > t) - (s < t);
		break;
	}
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64: {
		uint64_t s = *(const uint64_t *)x, t = *(const uint64_t *)y;
		c = (s > t) - (s < t);
		break;
	}
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32: {
		uint32_t s = *(const uint32_t *)x, t = *(const uint32_t *)y;
		c = (s > t) - (s < t);
		break;
	}
	case PROTOBUF_C_TYPE_BOOL: {
		int s = !!*(const protobuf_c_boolean *)x, t = !!*(const protobuf_c_boolean *)y;
		c = s - t;
		break;
	}
	default: {
		int32_t s = *(const int32_t *)x, t = *(const int32_t *)y;
		c = (s > t) - (s < t);
		break;
	}
	}
	if (c)
		return c;
	return (a->i > b->i) - (a->i < b->i);
}

/* shadowed[i] = true for every entry a later entry with the same key
 * overrides (and for NULL entries). Returns the number of shadowed
 * non-NULL entries, or -ENOMEM. */
ssize_t pbj_map_shadowed(ProtobufCMessage *const *entries, size_t n,
			    const ProtobufCFieldDescriptor *kf, bool *shadowed)
{
	_cleanup_free_ struct entry_ref *refs = NULL;
	ssize_t dups = 0;
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		shadowed[i] = entries[i] == NULL;
	if (n < 2)
		return 0;
	refs = calloc(n, sizeof(*refs));
	if (!refs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (entries[i])
			refs[k++] = (struct entry_ref){entries[i], i};
	qsort_r(refs, k, sizeof(*refs), key_cmp, (void *)kf);
	for (size_t i = 0; i + 1 < k; i++) {
		struct entry_ref a = refs[i], b = refs[i + 1];

		a.i = b.i = 0;
		if (key_cmp(&a, &b, (void *)kf) == 0) {
			shadowed[refs[i].i] = true;
			dups++;
		}
	}
	return dups;
}

