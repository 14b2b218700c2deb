/* rpc_status.c: the wire forms shared by server and client.
 *
 * A bc_error travels as the gRPC status code and message plus the
 * grpc-status-details-bin trailer: google.rpc.Status{code, message,
 * details: [Any(google.rpc.ErrorInfo{reason = bc_code_name(code),
 * domain = "bc", metadata = details})]}. This file packs and parses that,
 * builds method paths from service descriptors, moves protobuf-c messages
 * in and out of grpc byte buffers with a size check, and converts clocks. */
#include "rpc_internal.h"

#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "google/protobuf/any.pb-c.h"
#include "google/rpc/status.pb-c.h"
#include "log.h"
#include "pbwire.h"
#include "util.h"

static uint8_t *pack_alloc(const ProtobufCMessage *m, size_t *ret_len)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		return NULL;
	*ret_len = protobuf_c_message_pack(m, buf);
	return buf;
}

/* See rpc_internal.h. 0 or -ENOMEM. */
int rpc_status_pack(const bc_error *e, uint8_t **ret_buf, size_t *ret_len)
{
	Google__Rpc__ErrorInfo info = GOOGLE__RPC__ERROR_INFO__INIT;
	Google__Rpc__ErrorInfo__MetadataEntry ents[BC_ERR_MAX_DETAILS];
	Google__Rpc__ErrorInfo__MetadataEntry *entp[BC_ERR_MAX_DETAILS];
	Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
	Google__Protobuf__Any *anyp = &any;
	Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
	size_t n = e->n_details < BC_ERR_MAX_DETAILS ? e->n_details : BC_ERR_MAX_DETAILS;
	uint8_t *info_buf, *buf;
	size_t info_len, len;

	for (size_t i = 0; i < n; i++) {
		google__rpc__error_info__metadata_entry__init(&ents[i]);
		ents[i].key = (char *)e->details[i].key;
		ents[i].value = (char *)e->details[i].value;
		entp[i] = &ents[i];
	}
	info.reason = (char *)bc_code_name(e->code);
	info.domain = (char *)RPC_ERROR_DOMAIN;
	info.n_metadata = n;
	info.metadata = entp;
	info_buf = pack_alloc(&info.base, &info_len);
	if (!info_buf)
		return -ENOMEM;
	any.type_url = (char *)RPC_ERRORINFO_TYPE_URL;
	any.value.data = info_buf;
	any.value.len = info_len;
	st.code = bc_code_grpc_status(e->code);
	st.message = (char *)e->message;
	st.n_details = 1;
	st.details = &anyp;
	buf = pack_alloc(&st.base, &len);
	free(info_buf);
	if (!buf)
		return -ENOMEM;
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

static const Google__Protobuf__Any *find_error_info(const Google__Rpc__Status *st)
{
	for (size_t i = 0; i < st->n_details; i++)
		if (st->details[i]->type_url &&
		    strcmp(st->details[i]->type_url, RPC_ERRORINFO_TYPE_URL) == 0)
			return st->details[i];
	return NULL;
}

/* Apply our ErrorInfo from a packed Status to e; -ENOENT if absent. */
static int status_apply(const uint8_t *bin, size_t bin_len, bc_error *e)
{
	Google__Rpc__Status *st = NULL;
	Google__Rpc__ErrorInfo *info = NULL;
	const Google__Protobuf__Any *any;
	int r = -ENOENT;

	st = google__rpc__status__unpack(NULL, bin_len, bin);
	if (!st)
		return -EBADMSG;
	any = find_error_info(st);
	if (any)
		info = google__rpc__error_info__unpack(NULL, any->value.len, any->value.data);
	if (info && info->domain && strcmp(info->domain, RPC_ERROR_DOMAIN) == 0) {
		bc_error_set(e, bc_code_from_name(info->reason), "%s",
			     st->message ? st->message : "");
		for (size_t i = 0; i < info->n_metadata; i++)
			bc_error_detail(e, info->metadata[i]->key, "%s",
					info->metadata[i]->value);
		r = 0;
	}
	if (info)
		google__rpc__error_info__free_unpacked(info, NULL);
	google__rpc__status__free_unpacked(st, NULL);
	return r;
}

/* See rpc_internal.h. */
void rpc_status_to_error(int grpc_status, const char *msg, size_t msg_len,
			 const uint8_t *bin, size_t bin_len, bc_error *e)
{
	if (bin && status_apply(bin, bin_len, e) == 0)
		return;
	bc_error_set(e, bc_code_from_grpc_status(grpc_status), "%.*s",
		     (int)(msg_len > INT_MAX ? INT_MAX : msg_len), msg ? msg : "");
	if (e->code == BC_OK)
		bc_error_set(e, BC_INTERNAL, "status OK without a reply");
}

/* "/<desc->name>/<method>" into buf. -ENOENT if desc has no such method,
 * -ENOSPC if buf is too small. */
int rpc_method_path(const ProtobufCServiceDescriptor *desc, const char *method,
		    char *buf, size_t len)
{
	int n;

	if (!desc || !method || !protobuf_c_service_descriptor_get_method_by_name(desc, method))
		return -ENOENT;
	n = snprintf(buf, len, "/%s/%s", desc->name, method);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return 0;
}

/* See rpc_internal.h. */
grpc_byte_buffer *rpc_bb_pack(const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	grpc_slice s = grpc_slice_malloc(len);
	grpc_byte_buffer *bb;

	protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
	bb = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	return bb;
}

/* Read bb into one slice: 0, -EMSGSIZE if longer than max, -EBADMSG. */
static int bb_read_all(grpc_byte_buffer *bb, size_t max, grpc_slice *ret)
{
	grpc_byte_buffer_reader rd;
	grpc_slice all;

	if (grpc_byte_buffer_length(bb) > max)
		return -EMSGSIZE;
	if (!grpc_byte_buffer_reader_init(&rd, bb))
		return -EBADMSG;
	all = grpc_byte_buffer_reader_readall(&rd);
	grpc_byte_buffer_reader_destroy(&rd);
	if (GRPC_SLICE_LENGTH(all) > max) {
		grpc_slice_unref(all);
		return -EMSGSIZE;
	}
	*ret = all;
	return 0;
}

static int bb_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d, size_t max,
		     bool refuse_nul, ProtobufCMessage **ret)
{
	ProtobufCMessage *m;
	grpc_slice all;
	int r = bb_read_all(bb, max, &all);

	if (r < 0)
		return r;
	m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
	r = m ? 0 : -EBADMSG;
	if (m && refuse_nul)
		r = pbwire_find_nul(d, GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all));
	grpc_slice_unref(all);
	if (r < 0) {
		if (m)
			protobuf_c_message_free_unpacked(m, NULL);
		return r;
	}
	*ret = m;
	return 0;
}

/* See rpc_internal.h. */
int rpc_bb_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
		  size_t max, ProtobufCMessage **ret)
{
	return bb_unpack(bb, d, max, false, ret);
}

/* See rpc_internal.h. The wire bytes are walked only once protobuf-c took
 * them, so a malformed message is reported as such. */
int rpc_bb_unpack_request(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
			  size_t max, ProtobufCMessage **ret)
{
	return bb_unpack(bb, d, max, true, ret);
}

/* See rpc_internal.h. */
gpr_timespec rpc_deadline_in(int timeout_ms)
{
	if (timeout_ms < 0)
		return gpr_inf_future(GPR_CLOCK_MONOTONIC);
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* See rpc_internal.h. gpr's monotonic clock has its own origin, so go
 * through the remaining time. */
int64_t rpc_timespec_mono_ms(gpr_timespec t)
{
	gpr_timespec now, left;

	if (gpr_time_cmp(t, gpr_inf_future(t.clock_type)) == 0)
		return INT64_MAX;
	now = gpr_now(t.clock_type);
	left = gpr_time_sub(t, now);
	return mono_ms() + (int64_t)left.tv_sec * 1000 + left.tv_nsec / 1000000;
}

/* gRPC's own log lines go to our log at debug level: common/ never logs
 * above debug; daemons decide what a failure means. */
static void grpc_log_to_debug(gpr_log_func_args *a)
{
	log_debug("grpc: %s:%d: %s", a->file, a->line, a->message);
}

/* Our own count of the gRPC init references we hold (gRPC keeps its own,
 * which it does not show). */
static atomic_int inits;

/* Process-wide gRPC init; refcounted by gRPC. */
void rpc_global_init(void)
{
	gpr_set_log_function(grpc_log_to_debug);
	if (atomic_fetch_add(&inits, 1) == 0) { /* rpc_internal.h */
		mallopt(M_MMAP_THRESHOLD, RPC_MMAP_THRESHOLD);
		mallopt(M_TRIM_THRESHOLD, RPC_TRIM_THRESHOLD);
	}
	grpc_init();
}

/* Drop one gRPC init reference; the last one tears gRPC down. gRPC may
 * finish that on a thread of its own after grpc_shutdown returns; a process
 * that exits meanwhile would leave what it was freeing (TLS sessions of
 * failed handshakes among them) unreachable, which LeakSanitizer reports on
 * a loaded machine. So the last reference waits (at most 5 s) until gRPC
 * says it is no longer initialized. */
void rpc_global_shutdown(void)
{
	bool last = atomic_fetch_sub(&inits, 1) == 1;
	int64_t end = mono_ms() + 5000;

	grpc_shutdown();
	while (last && grpc_is_initialized() && mono_ms() < end) {
		struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
}
