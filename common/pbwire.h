/* pbwire.h: checks on protobuf wire bytes that protobuf-c cannot make once
 * it has unpacked them.
 *
 * protobuf-c hands a `string` field over as a C string, so "a\0b" on the
 * wire arrives as "a": whatever follows a NUL is lost without a trace. The
 * walker here reads the bytes themselves, driven by the message descriptor,
 * and finds such a string at any depth (nested messages, repeated fields,
 * map entries, oneofs). It never allocates and is safe on hostile input:
 * every length is checked against what is left, recursion is bounded. */
#ifndef BC_PBWIRE_H
#define BC_PBWIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest nesting of messages the walker follows (protobuf's own default
 * recursion limit). */
#define PBWIRE_MAX_DEPTH 100

/* Walk buf[0..len) as a message of descriptor d: 0 if no string field in
 * it holds a NUL byte, -EILSEQ if one does, -EBADMSG if the bytes are not a
 * well-formed message (a varint or length running past the end or longer
 * than 10 bytes, a group, an unknown wire type, nesting deeper than
 * PBWIRE_MAX_DEPTH). Unknown fields are skipped; bytes fields may hold
 * anything. */
int pbwire_find_nul(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len);

#endif
