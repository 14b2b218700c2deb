/* pbjson.h: proto3 JSON mapping for protobuf-c messages, driven only by
 * descriptors (no per-message code). Used by bcctl's --format json, the
 * JSON/HTTP transport and tests.
 *
 * Names are lowerCamelCase (json_name); 64-bit integers are written as JSON
 * numbers (the spec's epoch-ms fields are numbers) and read from numbers or
 * decimal strings; enums by name; bytes as base64; maps as objects. Fields
 * equal to their default are omitted unless PBJSON_EMIT_DEFAULTS. */
#ifndef BC_PBJSON_H
#define BC_PBJSON_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "err.h"

#define PBJSON_EMIT_DEFAULTS 1
#define PBJSON_PRETTY 2

/* Serialise msg; *ret_json malloc'd. 0 or -ENOMEM. */
int pbjson_write(const ProtobufCMessage *msg, int flags, char **ret_json);

/* Parse JSON text into a new message of descriptor d (free with
 * protobuf_c_message_free_unpacked(m, NULL)). Unknown fields, wrong types,
 * out-of-range numbers, depth > 32 or input > max_bytes are refused:
 * -BC_EDOMAIN with err = INVALID_INPUT naming the offending field path in
 * details "field". Both camelCase and the proto snake_case names accepted. */
int pbjson_read(const ProtobufCMessageDescriptor *d, const char *json, size_t len,
		size_t max_bytes, ProtobufCMessage **ret, bc_error *err);

#endif
