/* pbjson_internal.h: what the JSON writer (pbjson_write.c) and reader
 * (pbjson_read.c) share: field naming, map detection, member access and
 * the ordering of map keys (pbjson_common.c); UTF-8 and the rest of JSON's
 * lexical level come from json_lex.h. */
#ifndef BC_PBJSON_INTERNAL_H
#define BC_PBJSON_INTERNAL_H

#include <locale.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "json_lex.h"

#define PBJSON_MAX_DEPTH 32
#define PBJSON_DEFAULT_MAX_BYTES (4u << 20)
#define PBJSON_MAX_NAME 128
#define PBJSON_MAX_NUMBER 512	/* digits in one number token */

locale_t pbj_c_locale(void);
void pbj_json_name(const char *name, char *out, size_t outlen);
bool pbj_name_matches(const char *field_name, const char *key);
/* Standard or URL-safe base64 s[0..n), padding optional but correct if
 * present: 0 with ret->data malloc'd (NULL when empty), -EINVAL, -ENOMEM.
 * Also the MCP file tools' (common/mcp_exec.c). */
int pbj_b64_decode(const char *s, size_t n, ProtobufCBinaryData *ret);
bool pbj_is_map(const ProtobufCFieldDescriptor *f);
size_t pbj_elt_size(ProtobufCType t);
void *pbj_member(const ProtobufCMessage *m, unsigned offset);
bool pbj_is_pointer_type(ProtobufCType t);
ssize_t pbj_map_shadowed(ProtobufCMessage *const *entries, size_t n,
			    const ProtobufCFieldDescriptor *kf, bool *shadowed);

#endif
