/* test_pbjson.c: proto3 JSON for protobuf-c messages. Round trips compare
 * packed protobuf bytes (write -> read -> pack == pack); golden strings pin
 * the exact output; every refusal is checked for its field path. A small
 * hand-made descriptor covers the types bc's protos do not use (float,
 * double, sint/sfixed/fixed, proto2 optional, an int64-keyed map, a
 * recursive field for the depth limit). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "bc/compute/v1/instances.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "pbjson.h"
#include "tap.h"

/* ------------------------------------------------ a hand-made message */

typedef struct IntMapEntry {
	ProtobufCMessage base;
	int64_t key;
	double value;
} IntMapEntry;

typedef struct Scalars Scalars;
struct Scalars {
	ProtobufCMessage base;
	double d;
	float f;
	int32_t s32;
	int64_t sf64;
	uint32_t fx32;
	size_t n_ds;
	double *ds;
	protobuf_c_boolean has_opt;
	int32_t opt;
	size_t n_bs;
	ProtobufCBinaryData *bs;
	size_t n_im;
	IntMapEntry **im;
	protobuf_c_boolean flag;
	size_t n_u64s;
	uint64_t *u64s;
	Scalars *child;
};

extern const ProtobufCMessageDescriptor scalars_descriptor, int_map_entry_descriptor;

static void int_map_entry_init(IntMapEntry *m)
{
	static const IntMapEntry init = {PROTOBUF_C_MESSAGE_INIT(&int_map_entry_descriptor), 0, 0};

	*m = init;
}

static void scalars_init(Scalars *m)
{
	static const Scalars init = {PROTOBUF_C_MESSAGE_INIT(&scalars_descriptor)};

	*m = init;
}

#define FIELD(name, id, label, type, q, off, desc, flags) \
	{name, id, label, type, q, off, desc, NULL, flags, 0, NULL, NULL}

static const ProtobufCFieldDescriptor int_map_entry_fields[] = {
	FIELD("key", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_INT64, 0,
	      offsetof(IntMapEntry, key), NULL, 0),
	FIELD("value", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, 0,
	      offsetof(IntMapEntry, value), NULL, 0),
};
static const unsigned int_map_entry_by_name[] = {0, 1};
static const ProtobufCIntRange int_map_entry_ranges[] = {{1, 0}, {0, 2}};

const ProtobufCMessageDescriptor int_map_entry_descriptor = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "test.Scalars.ImEntry", "ImEntry",
	"Scalars__ImEntry", "test", sizeof(IntMapEntry), 2, int_map_entry_fields,
	int_map_entry_by_name, 1, int_map_entry_ranges,
	(ProtobufCMessageInit)int_map_entry_init, NULL, NULL, NULL,
};

static const ProtobufCFieldDescriptor scalars_fields[] = {
	FIELD("d", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, 0, offsetof(Scalars, d), NULL, 0),
	FIELD("f", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FLOAT, 0, offsetof(Scalars, f), NULL, 0),
	FIELD("s32", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT32, 0, offsetof(Scalars, s32),
	      NULL, 0),
	FIELD("sf64", 4, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SFIXED64, 0,
	      offsetof(Scalars, sf64), NULL, 0),
	FIELD("fx32", 5, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FIXED32, 0,
	      offsetof(Scalars, fx32), NULL, 0),
	FIELD("ds", 6, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_DOUBLE, offsetof(Scalars, n_ds),
	      offsetof(Scalars, ds), NULL, PROTOBUF_C_FIELD_FLAG_PACKED),
	FIELD("opt", 7, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32,
	      offsetof(Scalars, has_opt), offsetof(Scalars, opt), NULL, 0),
	FIELD("bs", 8, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_BYTES, offsetof(Scalars, n_bs),
	      offsetof(Scalars, bs), NULL, 0),
	FIELD("im", 9, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_MESSAGE, offsetof(Scalars, n_im),
	      offsetof(Scalars, im), &int_map_entry_descriptor, 0),
	FIELD("flag", 10, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_BOOL, 0, offsetof(Scalars, flag),
	      NULL, 0),
	FIELD("u64s", 11, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_UINT64,
	      offsetof(Scalars, n_u64s), offsetof(Scalars, u64s), NULL, PROTOBUF_C_FIELD_FLAG_PACKED),
	FIELD("child", 12, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_MESSAGE, 0,
	      offsetof(Scalars, child), &scalars_descriptor, 0),
};
/* bs child d ds f flag fx32 im opt s32 sf64 u64s */
static const unsigned scalars_by_name[] = {7, 11, 0, 5, 1, 9, 4, 8, 6, 2, 3, 10};
static const ProtobufCIntRange scalars_ranges[] = {{1, 0}, {0, 12}};

const ProtobufCMessageDescriptor scalars_descriptor = {
	PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "test.Scalars", "Scalars", "Scalars", "test",
	sizeof(Scalars), 12, scalars_fields, scalars_by_name, 1, scalars_ranges,
	(ProtobufCMessageInit)scalars_init, NULL, NULL, NULL,
};

/* ------------------------------------------------------------ helpers */

static char *write_json(const void *m, int flags)
{
	char *json = NULL;

	if (pbjson_write(m, flags, &json) < 0)
		return NULL;
	return json;
}

static int packed_equal(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
	size_t na = protobuf_c_message_get_packed_size(a);
	size_t nb = protobuf_c_message_get_packed_size(b);
	uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);
	int eq;

	protobuf_c_message_pack(a, pa);
	protobuf_c_message_pack(b, pb);
	eq = na == nb && memcmp(pa, pb, na) == 0;
	free(pa);
	free(pb);
	return eq;
}

/* write -> read -> pack must equal pack, and writing again the same text. */
static void roundtrip(const void *msg, int flags, const char *what)
{
	const ProtobufCMessage *m = msg;
	ProtobufCMessage *back = NULL;
	char *json = write_json(m, flags), *again = NULL;
	bc_error err = {0};
	int r;

	ok(json != NULL, "%s: written", what);
	if (!json)
		return;
	r = pbjson_read(m->descriptor, json, strlen(json), 0, &back, &err);
	is_int(r, 0, "%s: read back", what);
	if (r < 0) {
		printf("#   %s\n#   %s\n", err.message, json);
		free(json);
		return;
	}
	ok(packed_equal(m, back), "%s: packed bytes equal", what);
	again = write_json(back, flags);
	is_str(again, json, "%s: written again identically", what);
	free(again);
	free(json);
	protobuf_c_message_free_unpacked(back, NULL);
}

static ProtobufCMessage *read_ok(const ProtobufCMessageDescriptor *d, const char *json,
				 const char *what)
{
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	int r = pbjson_read(d, json, strlen(json), 0, &m, &err);

	is_int(r, 0, "read: %s", what);
	if (r < 0)
		printf("#   %s\n", err.message);
	return m;
}

/* The input is refused with INVALID_INPUT naming field (NULL: no field). */
static void refused(const ProtobufCMessageDescriptor *d, const char *json, const char *field,
		    const char *what)
{
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	int r = pbjson_read(d, json, strlen(json), 0, &m, &err);
	const char *got = bc_error_get_detail(&err, "field");

	int pass = r == -BC_EDOMAIN && err.code == BC_INVALID_INPUT && m == NULL &&
		   (field ? got && strcmp(got, field) == 0 : got == NULL);

	ok(pass, "refused: %s%s%s", what, field ? " at " : "", field ? field : "");
	if (!pass)
		printf("#   r=%d field=%s message=%s\n", r, got ? got : "(none)", err.message);
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
}

/* ------------------------------------------------------------- golden */

static void test_golden(void)
{
	Bc__Compute__V1__CreateInstanceRequest req = BC__COMPUTE__V1__CREATE_INSTANCE_REQUEST__INIT;
	Bc__Compute__V1__Wait wait = BC__COMPUTE__V1__WAIT__INIT;
	char *keys[] = {"ssh-ed25519 AAAA a@b", "k2"};
	Bc__Node__V1__StatusReport rep = BC__NODE__V1__STATUS_REPORT__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry l1 = BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry l2 = BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry *labels[] = {&l1, &l2};
	Bc__Node__V1__Capacity cap = BC__NODE__V1__CAPACITY__INIT;
	Bc__Node__V1__InstanceSpec inst = BC__NODE__V1__INSTANCE_SPEC__INIT;
	char *json;

	req.tenant_id = "ten_1";
	req.flavor = "small";
	req.n_ssh_keys = 2;
	req.ssh_keys = keys;
	wait.timeout_ms = 5000;
	req.wait = &wait;
	json = write_json(&req, 0);
	is_str(json, "{\"tenantId\":\"ten_1\",\"flavor\":\"small\",\"sshKeys\":"
		     "[\"ssh-ed25519 AAAA a@b\",\"k2\"],\"wait\":{\"timeoutMs\":5000}}",
	       "golden: CreateInstanceRequest compact");
	free(json);

	json = write_json(&req, PBJSON_EMIT_DEFAULTS);
	is_str(json, "{\"tenantId\":\"ten_1\",\"poolId\":\"\",\"flavor\":\"small\",\"imageId\":\"\","
		     "\"sshKeys\":[\"ssh-ed25519 AAAA a@b\",\"k2\"],\"userData\":\"\","
		     "\"networkPolicy\":\"\",\"idempotencyKey\":\"\",\"wait\":{\"timeoutMs\":5000}}",
	       "golden: CreateInstanceRequest with defaults");
	free(json);

	json = write_json(&cap, PBJSON_EMIT_DEFAULTS | PBJSON_PRETTY);
	is_str(json, "{\n  \"vcpus\": 0,\n  \"memoryMib\": 0,\n  \"diskGib\": 0,\n  \"gpus\": 0\n}",
	       "golden: Capacity defaults, pretty");
	free(json);
	json = write_json(&cap, PBJSON_PRETTY);
	is_str(json, "{}", "golden: empty message");
	free(json);

	rep.applied_generation = 18446744073709551615ULL;
	l1.key = "zone";
	l1.value = "a";
	l2.key = "gpu";
	l2.value = "yes";
	rep.n_labels = 2;
	rep.labels = labels;
	cap.vcpus = 64;
	cap.memory_mib = 262144;
	rep.capacity = &cap;
	rep.complete = 1;
	json = write_json(&rep, PBJSON_PRETTY);
	is_str(json, "{\n"
		     "  \"appliedGeneration\": 18446744073709551615,\n"
		     "  \"labels\": {\n"
		     "    \"zone\": \"a\",\n"
		     "    \"gpu\": \"yes\"\n"
		     "  },\n"
		     "  \"complete\": true,\n"
		     "  \"capacity\": {\n"
		     "    \"vcpus\": 64,\n"
		     "    \"memoryMib\": 262144\n"
		     "  }\n"
		     "}",
	       "golden: StatusReport pretty with a map and big uint64");
	free(json);

	inst.desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED;
	inst.numa_node = -1;
	json = write_json(&inst, 0);
	is_str(json, "{\"desiredState\":\"DESIRED_PAUSED\",\"numaNode\":-1}", "golden: enum by name");
	free(json);
	inst.desired_state = 77;
	json = write_json(&inst, 0);
	is_str(json, "{\"desiredState\":77,\"numaNode\":-1}", "golden: unknown enum as number");
	free(json);
}

static void test_escaping(void)
{
	Bc__Compute__V1__CreateInstanceRequest req = BC__COMPUTE__V1__CREATE_INSTANCE_REQUEST__INIT;
	Bc__Compute__V1__CreateInstanceRequest *back;
	char *json;

	req.user_data = "a\"b\\c\nd\te\x01\x1f\x7f/\xc3\xa9\xf0\x9f\x98\x80\xff!";
	json = write_json(&req, 0);
	is_str(json, "{\"userData\":\"a\\\"b\\\\c\\nd\\te\\u0001\\u001f\x7f/\xc3\xa9"
		     "\xf0\x9f\x98\x80\xef\xbf\xbd!\"}",
	       "escaping: quotes, backslash, control chars, UTF-8 kept, bad byte replaced");
	free(json);

	back = (void *)read_ok(&bc__compute__v1__create_instance_request__descriptor,
			       "{\"userData\":\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\r\\\"\\u0041\"}",
			       "escapes");
	if (back) {
		is_str(back->user_data, "\xc3\xa9\xf0\x9f\x98\x80/\b\f\r\"A", "escapes decoded");
		protobuf_c_message_free_unpacked(&back->base, NULL);
	}

	req.user_data = "\xe2\x82\xac \xf4\x8f\xbf\xbf \x01";
	roundtrip(&req, 0, "UTF-8 and control chars");
}

/* --------------------------------------------------------- round trips */

static void test_roundtrips(void)
{
	Bc__Node__V1__NodeSpec spec = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec i1 = BC__NODE__V1__INSTANCE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec i2 = BC__NODE__V1__INSTANCE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec *insts[] = {&i1, &i2};
	Bc__Node__V1__NicSpec nic = BC__NODE__V1__NIC_SPEC__INIT;
	Bc__Node__V1__NicSpec *nics[] = {&nic};
	Bc__Node__V1__ImageRef img = BC__NODE__V1__IMAGE_REF__INIT;
	Bc__Node__V1__VolumeAttachment va = BC__NODE__V1__VOLUME_ATTACHMENT__INIT;
	Bc__Node__V1__VolumeAttachment *vas[] = {&va};
	Bc__Node__V1__RestoreFrom rf = BC__NODE__V1__RESTORE_FROM__INIT;
	Bc__Node__V1__VolumeSpec vs = BC__NODE__V1__VOLUME_SPEC__INIT;
	Bc__Node__V1__VolumeSpec *vss[] = {&vs};
	uint32_t pins[] = {0, 1, 4294967295u};
	Bc__Node__V1__NodeUpdate up = BC__NODE__V1__NODE_UPDATE__INIT;
	Bc__Node__V1__NodeSpec empty_spec = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__Command cmd = BC__NODE__V1__COMMAND__INIT;
	static uint8_t blob[] = {0x00, 0xff, 0x10, '"', '\\', 0x80};
	Bc__Node__V1__StatusReport rep = BC__NODE__V1__STATUS_REPORT__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry l1 = BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry l2 = BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry *labels[] = {&l1, &l2};
	Bc__Node__V1__InstanceStatus st = BC__NODE__V1__INSTANCE_STATUS__INIT;
	Bc__Node__V1__InstanceStatus *sts[] = {&st};
	Bc__Node__V1__CommandResult res = BC__NODE__V1__COMMAND_RESULT__INIT;
	Bc__Node__V1__CommandResult *ress[] = {&res};
	Bc__Node__V1__VolumeStorage vst = BC__NODE__V1__VOLUME_STORAGE__INIT;
	char *caps[] = {"gpu", "", "snapshots"};
	Bc__Admin__V1__Node node = BC__ADMIN__V1__NODE__INIT;
	Bc__Admin__V1__Node__LabelsEntry nl = BC__ADMIN__V1__NODE__LABELS_ENTRY__INIT;
	Bc__Admin__V1__Node__LabelsEntry *nls[] = {&nl};
	Bc__Admin__V1__Capacity c1 = BC__ADMIN__V1__CAPACITY__INIT, c2 = BC__ADMIN__V1__CAPACITY__INIT;
	const int modes[] = {0, PBJSON_PRETTY, PBJSON_EMIT_DEFAULTS,
			     PBJSON_PRETTY | PBJSON_EMIT_DEFAULTS};
	char what[64];

	spec.generation = 18446744073709551615ULL;
	spec.node_id = "node_01hx";
	spec.bridge = "br0";
	spec.ipam_subnet6 = "fd00::/64";
	i1.id = "inst_1";
	i1.desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
	i1.vcpus = 4;
	i1.memory_mib = 8192;
	i1.numa_node = -1;
	i1.n_pinned_vcpus = 3;
	i1.pinned_vcpus = pins;
	img.id = "img_1";
	img.size_bytes = 1ULL << 40;
	i1.image = &img;
	nic.tap = "tap0";
	nic.mac = "52:54:00:12:34:56";
	nic.ipv4_prefix = 24;
	i1.n_nics = 1;
	i1.nics = nics;
	va.volume_id = "vol_1";
	va.read_only = 1;
	i1.n_volumes = 1;
	i1.volumes = vas;
	i1.ssh_from_host_only = 1;
	rf.snapshot_id = "snap_1";
	i1.restore_from = &rf;
	i2.id = "inst_2";
	i2.numa_node = -2147483647 - 1;
	spec.n_instances = 2;
	spec.instances = insts;
	vs.id = "vol_1";
	vs.size_bytes = 10;
	spec.n_volumes = 1;
	spec.volumes = vss;

	cmd.id = "cmd_1";
	cmd.kind = "instance.snapshot";
	cmd.args_json.data = blob;
	cmd.args_json.len = sizeof(blob);
	cmd.deadline = -9223372036854775807LL - 1;

	rep.applied_generation = 3;
	st.id = "inst_1";
	st.state = "running";
	rep.n_instances = 1;
	rep.instances = sts;
	vst.available_bytes = 1;
	rep.volume_storage = &vst;
	rep.n_capabilities = 3;
	rep.capabilities = caps;
	l1.key = "zone";
	l1.value = "eu-1";
	l2.key = "";
	l2.value = "";
	rep.n_labels = 2;
	rep.labels = labels;
	res.id = "cmd_1";
	res.ok = 1;
	res.result_json.data = blob;
	res.result_json.len = 1;
	rep.n_results = 1;
	rep.results = ress;
	rep.hostname = "h\xc3\xa9";

	node.id = "node_1";
	nl.key = "rack";
	nl.value = "r7";
	node.n_labels = 1;
	node.labels = nls;
	c1.vcpus = 1;
	node.capacity = &c1;
	node.booked = &c2;
	node.last_report_at = 1700000000123LL;
	node.spec_generation = 9;

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		snprintf(what, sizeof(what), "NodeSpec mode %d", modes[i]);
		roundtrip(&spec, modes[i], what);
		up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND;
		up.command = &cmd;
		snprintf(what, sizeof(what), "NodeUpdate command mode %d", modes[i]);
		roundtrip(&up, modes[i], what);
		up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
		up.spec = &empty_spec;
		snprintf(what, sizeof(what), "NodeUpdate empty spec mode %d", modes[i]);
		roundtrip(&up, modes[i], what);
		snprintf(what, sizeof(what), "StatusReport mode %d", modes[i]);
		roundtrip(&rep, modes[i], what);
		snprintf(what, sizeof(what), "admin Node mode %d", modes[i]);
		roundtrip(&node, modes[i], what);
	}
	up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
	up.spec = &empty_spec;
	{
		char *json = write_json(&up, 0);
		is_str(json, "{\"spec\":{}}", "oneof member written even when empty");
		free(json);
	}
	up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND;
	up.command = &cmd;
	{
		char *json = write_json(&up, 0);
		is_str(json, "{\"command\":{\"id\":\"cmd_1\",\"kind\":\"instance.snapshot\","
			     "\"argsJson\":\"AP8QIlyA\",\"deadline\":-9223372036854775808}}",
		       "oneof command: bytes base64, int64 min as a number");
		free(json);
	}
}

/* ------------------------------------------------------------ reading */

static void test_reading(void)
{
	const ProtobufCMessageDescriptor *cd = &bc__compute__v1__create_instance_request__descriptor;
	const ProtobufCMessageDescriptor *sd = &bc__node__v1__node_spec__descriptor;
	Bc__Compute__V1__CreateInstanceRequest *req;
	Bc__Node__V1__NodeSpec *spec;
	Bc__Node__V1__NodeUpdate *up;
	Bc__Node__V1__StatusReport *rep;
	Bc__Node__V1__Command *cmd;

	req = (void *)read_ok(cd, " {\"tenant_id\" : \"t\", \"ssh_keys\":[\"a\",\"b\"],\n"
				  "\t\"wait\":{\"timeout_ms\":\"250\"}} \n", "snake_case and whitespace");
	if (req) {
		is_str(req->tenant_id, "t", "snake_case tenant_id");
		ok(req->n_ssh_keys == 2 && strcmp(req->ssh_keys[1], "b") == 0, "snake_case ssh_keys");
		ok(req->wait && req->wait->timeout_ms == 250, "int32 from a decimal string");
		ok(req->pool_id && req->pool_id[0] == '\0', "unset string is empty");
		protobuf_c_message_free_unpacked(&req->base, NULL);
	}
	req = (void *)read_ok(cd, "{\"tenantId\":null,\"wait\":null,\"sshKeys\":null,\"flavor\":\"\"}",
			      "nulls");
	if (req) {
		ok(req->wait == NULL && req->n_ssh_keys == 0 && req->tenant_id[0] == '\0',
		   "null leaves defaults");
		protobuf_c_message_free_unpacked(&req->base, NULL);
	}

	spec = (void *)read_ok(sd, "{\"generation\":18446744073709551615}", "uint64 max number");
	if (spec) {
		ok(spec->generation == UINT64_MAX, "uint64 max exact");
		protobuf_c_message_free_unpacked(&spec->base, NULL);
	}
	spec = (void *)read_ok(sd, "{\"generation\":\"18446744073709551615\"}", "uint64 as string");
	if (spec) {
		ok(spec->generation == UINT64_MAX, "uint64 max from string");
		protobuf_c_message_free_unpacked(&spec->base, NULL);
	}
	spec = (void *)read_ok(sd, "{\"generation\":1.5e3,\"instances\":[{\"desiredState\":2,"
				   "\"numaNode\":-2147483648,\"pinnedVcpus\":[\"7\",1e0,4294967295]},"
				   "{\"desired_state\":\"DESIRED_STOPPED\",\"memoryMib\":100.000}]}",
			       "exponents, enum by number and name");
	if (spec) {
		ok(spec->generation == 1500, "1.5e3 is the integer 1500");
		ok(spec->n_instances == 2 && spec->instances[0]->desired_state == 2 &&
		   spec->instances[1]->desired_state == BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED,
		   "enum by number and by name");
		ok(spec->instances[0]->numa_node == INT32_MIN, "int32 min");
		ok(spec->instances[0]->n_pinned_vcpus == 3 && spec->instances[0]->pinned_vcpus[0] == 7 &&
		   spec->instances[0]->pinned_vcpus[2] == UINT32_MAX, "repeated uint32");
		ok(spec->instances[1]->memory_mib == 100, "100.000 is an integer");
		protobuf_c_message_free_unpacked(&spec->base, NULL);
	}

	up = (void *)read_ok(&bc__node__v1__node_update__descriptor,
			     "{\"command\":{\"argsJson\":\"_-8Q\",\"deadline\":\"-9223372036854775808\"}}",
			     "oneof with URL-safe unpadded base64");
	if (up) {
		cmd = up->command;
		ok(up->update_case == BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND && cmd, "oneof case set");
		ok(cmd && cmd->args_json.len == 3 && cmd->args_json.data[0] == 0xff &&
		   cmd->args_json.data[1] == 0xef && cmd->args_json.data[2] == 0x10,
		   "URL-safe base64 decoded");
		ok(cmd && cmd->deadline == INT64_MIN, "int64 min from string");
		protobuf_c_message_free_unpacked(&up->base, NULL);
	}
	up = (void *)read_ok(&bc__node__v1__node_update__descriptor,
			     "{\"spec\":null,\"command\":{\"argsJson\":\"AAE=\"}}",
			     "null oneof member then another");
	if (up) {
		ok(up->update_case == BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND &&
		   up->command->args_json.len == 2, "padded base64, null member ignored");
		protobuf_c_message_free_unpacked(&up->base, NULL);
	}
	up = (void *)read_ok(&bc__node__v1__node_update__descriptor,
			     "{\"spec\":{\"generation\":1},\"command\":null}",
			     "oneof member then a null other");
	if (up) {
		ok(up->update_case == BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC &&
		   up->spec->generation == 1, "null does not conflict with a set member");
		protobuf_c_message_free_unpacked(&up->base, NULL);
	}
	rep = (void *)read_ok(&bc__node__v1__status_report__descriptor,
			      "{\"labels\":{\"a\":\"1\",\"b\":\"\",\"\":\"x\"},\"complete\":false}",
			      "map");
	if (rep) {
		ok(rep->n_labels == 3 && strcmp(rep->labels[0]->key, "a") == 0 &&
		   strcmp(rep->labels[0]->value, "1") == 0 && rep->labels[2]->key[0] == '\0' &&
		   strcmp(rep->labels[2]->value, "x") == 0, "map entries in order");
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	}
}

/* n objects nested through "child"; *ret_path is the innermost one's path. */
static char *nest(int n, char **ret_path)
{
	char *s = calloc((size_t)n, 12), *path = calloc((size_t)n, 7);

	for (int i = 0; i < n - 1; i++) {
		strcat(s, "{\"child\":");
		strcat(path, i ? ".child" : "child");
	}
	strcat(s, "{}");
	for (int i = 0; i < n - 1; i++)
		strcat(s, "}");
	*ret_path = path;
	return s;
}

static void test_refusals(void)
{
	const ProtobufCMessageDescriptor *cd = &bc__compute__v1__create_instance_request__descriptor;
	const ProtobufCMessageDescriptor *sd = &bc__node__v1__node_spec__descriptor;
	const ProtobufCMessageDescriptor *ud = &bc__node__v1__node_update__descriptor;
	const ProtobufCMessageDescriptor *rd = &bc__node__v1__status_report__descriptor;
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	char *deep, *path;

	refused(cd, "{\"bogus\":1}", "bogus", "unknown field");
	refused(cd, "{\"wait\":{\"bogus\":1}}", "wait.bogus", "unknown nested field");
	refused(cd, "{\"wait\":{\"timeoutMs\":1.5}}", "wait.timeoutMs", "fraction for int32");
	refused(cd, "{\"wait\":{\"timeout_ms\":2147483648}}", "wait.timeoutMs", "int32 overflow");
	refused(cd, "{\"wait\":{\"timeoutMs\":-2147483649}}", "wait.timeoutMs", "int32 underflow");
	refused(cd, "{\"wait\":{\"timeoutMs\":\"12x\"}}", "wait.timeoutMs", "junk in numeric string");
	refused(cd, "{\"wait\":{\"timeoutMs\":\" 12\"}}", "wait.timeoutMs", "space in numeric string");
	refused(cd, "{\"wait\":{\"timeoutMs\":true}}", "wait.timeoutMs", "bool for int32");
	refused(cd, "{\"wait\":{\"timeoutMs\":1e400}}", "wait.timeoutMs", "huge exponent");
	refused(cd, "{\"wait\":5}", "wait", "number for a message");
	refused(cd, "{\"flavor\":\"a\",\"flavor\":\"b\"}", "flavor", "duplicate key");
	refused(cd, "{\"tenantId\":\"a\",\"tenant_id\":\"b\"}", "tenantId",
		"same field by both names");
	refused(cd, "{\"sshKeys\":\"x\"}", "sshKeys", "string for a list");
	refused(cd, "{\"sshKeys\":[\"a\",1]}", "sshKeys[1]", "number in a string list");
	refused(cd, "{\"sshKeys\":[\"a\",null]}", "sshKeys[1]", "null in a list");
	refused(cd, "{\"flavor\":\"\xff\"}", "flavor", "invalid UTF-8");
	refused(cd, "{\"flavor\":\"\xc0\xaf\"}", "flavor", "overlong UTF-8");
	refused(cd, "{\"flavor\":\"\xed\xa0\x80\"}", "flavor", "UTF-8 surrogate");
	refused(cd, "{\"flavor\":\"\\ud800\"}", "flavor", "lone high surrogate escape");
	refused(cd, "{\"flavor\":\"\\udc00x\"}", "flavor", "lone low surrogate escape");
	refused(cd, "{\"flavor\":\"a\\u0000b\"}", "flavor", "NUL in a string");
	refused(cd, "{\"flavor\":\"a\nb\"}", "flavor", "raw newline in a string");
	refused(cd, "{\"flavor\":\"\\x\"}", "flavor", "bad escape");
	refused(cd, "{\"flavor\":'a'}", "flavor", "single quotes");
	refused(cd, "{\"fla\\u0000vor\":\"a\"}", "fla", "NUL in a key");
	refused(cd, "{\"tenantId\":\"a\",}", NULL, "trailing comma");
	refused(cd, "{\"tenantId\":\"a\"} x", NULL, "trailing garbage");
	refused(cd, "{\"tenantId\":\"a\"}{}", NULL, "two objects");
	refused(cd, "[]", NULL, "array at the top");
	refused(cd, "null", NULL, "null at the top");
	refused(cd, "", NULL, "empty input");
	refused(cd, "{\"tenantId\":\"a\"", NULL, "truncated object");
	refused(cd, "{\"tenantId\":\"a", "tenantId", "unterminated string");
	refused(cd, "{tenantId:\"a\"}", NULL, "unquoted key");

	refused(sd, "{\"generation\":-1}", "generation", "negative uint64");
	refused(sd, "{\"generation\":18446744073709551616}", "generation", "uint64 overflow");
	refused(sd, "{\"generation\":\"-0x1\"}", "generation", "hex string");
	refused(sd, "{\"generation\":01}", NULL, "leading zero");
	refused(sd, "{\"generation\":+1}", "generation", "leading plus");
	refused(sd, "{\"generation\":1.}", NULL, "bare decimal point");
	refused(sd, "{\"generation\":NaN}", "generation", "NaN for an integer");
	refused(sd, "{\"instances\":[{\"nics\":[{},{},{\"mac\":5}]}]}", "instances[0].nics[2].mac",
		"number for a string deep in lists");
	refused(sd, "{\"instances\":[{},{\"desiredState\":\"DESIRED_FLYING\"}]}",
		"instances[1].desiredState", "unknown enum name");
	refused(sd, "{\"instances\":[{\"desiredState\":1.5}]}", "instances[0].desiredState",
		"fractional enum number");
	refused(sd, "{\"instances\":[{\"sshFromHostOnly\":\"true\"}]}",
		"instances[0].sshFromHostOnly", "string for a bool");
	refused(sd, "{\"instances\":[{\"sshFromHostOnly\":1}]}", "instances[0].sshFromHostOnly",
		"number for a bool");
	refused(sd, "{\"instances\":[{\"pinnedVcpus\":[1,-1]}]}", "instances[0].pinnedVcpus[1]",
		"negative uint32 in a list");
	refused(sd, "{\"instances\":{}}", "instances", "object for a list");

	refused(ud, "{\"spec\":{},\"command\":{}}", "command", "two oneof members");
	refused(ud, "{\"command\":{\"argsJson\":\"!!!!\"}}", "command.argsJson", "bad base64");
	refused(ud, "{\"command\":{\"argsJson\":\"A\"}}", "command.argsJson", "truncated base64");
	refused(ud, "{\"command\":{\"argsJson\":\"AA=\"}}", "command.argsJson", "bad padding");
	refused(ud, "{\"command\":{\"argsJson\":\"AA AA\"}}", "command.argsJson",
		"space in base64");
	refused(ud, "{\"command\":{\"argsJson\":5}}", "command.argsJson", "number for bytes");

	refused(rd, "{\"labels\":{\"a\":\"1\",\"a\":\"2\"}}", "labels", "duplicate map key");
	refused(rd, "{\"labels\":{\"a\":null}}", "labels.a", "null map value");
	refused(rd, "{\"labels\":{\"a\":1}}", "labels.a", "number for a string map value");
	refused(rd, "{\"labels\":[]}", "labels", "array for a map");
	refused(rd, "{\"labels\":{\"a\\u0000\":\"x\"}}", "labels.a", "NUL in a map key");

	deep = nest(33, &path);
	refused(&scalars_descriptor, deep, path, "nesting deeper than 32");
	free(deep);
	free(path);
	deep = nest(32, &path);
	m = read_ok(&scalars_descriptor, deep, "nesting of exactly 32");
	protobuf_c_message_free_unpacked(m, NULL);
	m = NULL;
	free(deep);
	free(path);

	is_int(pbjson_read(cd, "{\"flavor\":\"abc\"}", 16, 15, &m, &err), -BC_EDOMAIN,
	       "input over max_bytes refused");
	ok(m == NULL && err.code == BC_INVALID_INPUT, "max_bytes is INVALID_INPUT");
	is_int(pbjson_read(cd, "{\"flavor\":\"abc\"}", 16, 16, &m, &err), 0,
	       "input at max_bytes accepted");
	protobuf_c_message_free_unpacked(m, NULL);
	m = NULL;
	is_int(pbjson_read(cd, "{\"flavor\":\"abc\"}x", 16, 0, &m, &err), 0,
	       "len bounds the input, not NUL");
	protobuf_c_message_free_unpacked(m, NULL);
	m = NULL;
	is_int(pbjson_read(cd, "{\"flavor\":\"a\0b\"}", 16, 0, &m, &err), -BC_EDOMAIN,
	       "raw NUL inside the input refused");
	is_int(pbjson_read(cd, NULL, 0, 0, &m, &err), -BC_EDOMAIN, "NULL empty input refused");
	is_int(pbjson_read(NULL, "{}", 2, 0, &m, &err), -EINVAL, "NULL descriptor");
}

/* ----------------------------------------------- types bc does not use */

static void test_scalars(void)
{
	Scalars s, *back = NULL;
	IntMapEntry e1, e2;
	IntMapEntry *ims[] = {&e1, &e2};
	double ds[] = {0.1, -2.5e-300, 1e300, 0};
	uint8_t b1[] = {0xde, 0xad};
	ProtobufCBinaryData bs[] = {{2, b1}, {0, NULL}, {1, b1}};
	uint64_t u64s[] = {UINT64_MAX, 0};
	Scalars child;
	char *json;

	scalars_init(&s);
	scalars_init(&child);
	int_map_entry_init(&e1);
	int_map_entry_init(&e2);
	json = write_json(&s, 0);
	is_str(json, "{}", "scalars: all default");
	free(json);

	s.d = 0.1;
	s.f = 0.1f;
	s.s32 = -5;
	s.sf64 = INT64_MIN;
	s.fx32 = UINT32_MAX;
	s.has_opt = 1;
	s.opt = 0;
	s.flag = 1;
	json = write_json(&s, 0);
	is_str(json, "{\"d\":0.1,\"f\":0.1,\"s32\":-5,\"sf64\":-9223372036854775808,"
		     "\"fx32\":4294967295,\"opt\":0,\"flag\":true}",
	       "scalars: shortest floats, optional present at zero");
	free(json);

	s.d = NAN;
	s.f = -INFINITY;
	json = write_json(&s, 0);
	ok(json && strstr(json, "\"d\":\"NaN\"") && strstr(json, "\"f\":\"-Infinity\""),
	   "NaN and -Infinity as strings");
	free(json);
	s.d = 1.0 / 3;
	s.f = 3.4028235e38f;
	s.n_ds = 4;
	s.ds = ds;
	s.n_bs = 3;
	s.bs = bs;
	e1.key = -5;
	e1.value = 1.5;
	e2.key = INT64_MAX;
	e2.value = INFINITY;
	s.n_im = 2;
	s.im = ims;
	s.n_u64s = 2;
	s.u64s = u64s;
	child.s32 = 1;
	s.child = &child;
	json = write_json(&s, 0);
	ok(json && strstr(json, "\"im\":{\"-5\":1.5,\"9223372036854775807\":\"Infinity\"}"),
	   "int64-keyed map: keys quoted");
	ok(json && strstr(json, "\"bs\":[\"3q0=\",\"\",\"3g==\"]"), "repeated bytes base64");
	ok(json && strstr(json, "\"ds\":[0.1,-2.5e-300,1e+300,0]"), "repeated doubles");
	free(json);
	roundtrip(&s, 0, "scalars");
	roundtrip(&s, PBJSON_EMIT_DEFAULTS | PBJSON_PRETTY, "scalars pretty with defaults");

	back = (void *)read_ok(&scalars_descriptor,
			       "{\"d\":\"Infinity\",\"f\":\"NaN\",\"s32\":\"-7\",\"opt\":null,"
			       "\"im\":{\"-1\":\"2.5\",\"3\":-0},\"ds\":[\"1e-5\",2]}",
			       "float strings, map with int keys");
	if (back) {
		ok(isinf(back->d) && back->d > 0 && isnan(back->f) && back->s32 == -7,
		   "special floats from strings");
		ok(!back->has_opt, "null optional stays absent");
		ok(back->n_im == 2 && back->im[0]->key == -1 && back->im[0]->value == 2.5 &&
		   back->im[1]->key == 3, "int-keyed map read");
		ok(back->n_ds == 2 && back->ds[0] == 1e-5 && back->ds[1] == 2, "doubles from strings");
		protobuf_c_message_free_unpacked(&back->base, NULL);
	}
	back = (void *)read_ok(&scalars_descriptor, "{\"opt\":0}", "optional at zero");
	if (back) {
		ok(back->has_opt && back->opt == 0, "optional zero is present");
		protobuf_c_message_free_unpacked(&back->base, NULL);
	}
	refused(&scalars_descriptor, "{\"d\":1e309}", "d", "double overflow");
	refused(&scalars_descriptor, "{\"f\":3.5e38}", "f", "float overflow");
	refused(&scalars_descriptor, "{\"f\":\"inf\"}", "f", "inf spelled wrongly");
	refused(&scalars_descriptor, "{\"im\":{\"x\":1}}", "im.x", "non-numeric int map key");
	refused(&scalars_descriptor, "{\"im\":{\"1\":1,\"01\":2}}", "im.01", "leading zero key");
	refused(&scalars_descriptor, "{\"im\":{\"1\":1,\"1e0\":2}}", "im", "same int key twice");
	refused(&scalars_descriptor, "{\"fx32\":4294967296}", "fx32", "fixed32 overflow");
	refused(&scalars_descriptor, "{\"sf64\":-9223372036854775809}", "sf64", "sfixed64 underflow");
}

static void test_map_shadowing(void)
{
	Bc__Node__V1__StatusReport rep = BC__NODE__V1__STATUS_REPORT__INIT;
	Bc__Node__V1__StatusReport__LabelsEntry l[3] = {
		BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT,
		BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT,
		BC__NODE__V1__STATUS_REPORT__LABELS_ENTRY__INIT};
	Bc__Node__V1__StatusReport__LabelsEntry *labels[] = {&l[0], &l[1], &l[2]};
	char *json;

	l[0].key = "a";
	l[0].value = "1";
	l[1].key = "b";
	l[1].value = "2";
	l[2].key = "a";
	l[2].value = "3";
	rep.n_labels = 3;
	rep.labels = labels;
	json = write_json(&rep, 0);
	is_str(json, "{\"labels\":{\"b\":\"2\",\"a\":\"3\"}}",
	       "duplicate map entries: the last one wins, as in protobuf");
	free(json);
	l[0].key = "k\xff";
	l[2].key = "k\xfe";
	json = write_json(&rep, 0);
	is_str(json, "{\"labels\":{\"b\":\"2\",\"k\xef\xbf\xbd\":\"3\"}}",
	       "keys that print alike are one key: the last one wins");
	free(json);
	is_int(pbjson_write(NULL, 0, &json), -EINVAL, "write NULL message");
}

int main(void)
{
	test_golden();
	test_escaping();
	test_roundtrips();
	test_reading();
	test_refusals();
	test_scalars();
	test_map_shadowing();
	done_testing();
}
