/* nodespec.c: build a node's full NodeSpec from the database, in one
 * REPEATABLE READ snapshot so the generation matches the contents. The spec
 * is heap-allocated throughout (every string too) and freed with
 * protobuf_c_message_free_unpacked. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bc/node/v1/node.pb-c.h"
#include "ctl.h"
#include "nodespec.h"
#include "util.h"

#define SPEC_INST_COLS                                                                       \
	"i.id, p.runtime, i.desired_state, i.vcpus, i.memory_mib, i.disk_gib, i.huge_pages, "  \
	"i.numa_node, i.image_id, im.url, im.sha256, im.format, im.size_bytes, "               \
	"i.network_policy, i.ssh_from_host_only, coalesce(i.mac::text, ''), coalesce((SELECT " \
	"host(l.address) FROM ip_leases l WHERE l.instance_id = i.id LIMIT 1), ''), i.gpus, "   \
	"i.tenant_id, coalesce(i.user_data_ref, ''), coalesce(masklen(p.ipam_subnet), 0), "               \
	"coalesce(p.ipam_subnet6::text, '')"

struct build {
	const char *node_id;
	Bc__Node__V1__NodeSpec *spec;
};

static char *dup_col(const PGresult *r, int i, int c)
{
	const char *v = db_val(r, i, c);

	return xstrdup(v ? v : "");
}

static Bc__Node__V1__DesiredState desired(const char *s)
{
	if (strcmp(s, "paused") == 0)
		return BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED;
	if (strcmp(s, "stopped") == 0)
		return BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED;
	if (strcmp(s, "deleted") == 0)
		return BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED;
	return BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
}

static Bc__Node__V1__NicSpec *nic(const PGresult *r, int i)
{
	Bc__Node__V1__NicSpec *n = xmalloc(sizeof(*n));
	const char *subnet6 = db_val(r, i, 21);
	unsigned char net[16];
	char tap[16], v6[64] = "";
	int prefix;

	bc__node__v1__nic_spec__init(n);
	ipam_tap_name(db_val(r, i, 0), 0, tap);
	n->tap = xstrdup(tap);
	n->mac = dup_col(r, i, 15);
	n->ipv4 = dup_col(r, i, 16);
	n->ipv4_prefix = *n->ipv4 ? (uint32_t)db_i64(r, i, 20) : 0;
	if (*subnet6 && *n->mac && ipam_parse_cidr6(subnet6, net, &prefix) == 0 &&
	    ipam_eui64(net, n->mac, v6, sizeof(v6)) == 0)
		n->ipv6_prefix = 64;
	n->ipv6 = xstrdup(v6);
	return n;
}

static Bc__Node__V1__InstanceSpec *inst(const PGresult *r, int i)
{
	Bc__Node__V1__InstanceSpec *s = xmalloc(sizeof(*s));
	Bc__Node__V1__ImageRef *im = xmalloc(sizeof(*im));

	bc__node__v1__instance_spec__init(s);
	bc__node__v1__image_ref__init(im);
	s->id = dup_col(r, i, 0);
	s->runtime = dup_col(r, i, 1);
	s->desired_state = desired(db_val(r, i, 2));
	s->vcpus = (uint32_t)db_i64(r, i, 3);
	s->memory_mib = (uint64_t)db_i64(r, i, 4);
	s->disk_gib = (uint64_t)db_i64(r, i, 5);
	s->huge_pages = dup_col(r, i, 6);
	s->numa_node = (int32_t)db_i64(r, i, 7);
	im->id = dup_col(r, i, 8);
	im->url = dup_col(r, i, 9);
	im->sha256 = dup_col(r, i, 10);
	im->format = dup_col(r, i, 11);
	im->size_bytes = (uint64_t)db_i64(r, i, 12);
	s->image = im;
	s->network_policy = dup_col(r, i, 13);
	s->ssh_from_host_only = db_bool(r, i, 14);
	if (*db_val(r, i, 15)) {
		s->nics = xmalloc(sizeof(*s->nics));
		s->nics[0] = nic(r, i);
		s->n_nics = 1;
	}
	s->gpus = (uint32_t)db_i64(r, i, 17);
	s->tenant_id = dup_col(r, i, 18);
	s->user_data_ref = dup_col(r, i, 19);
	s->identity_rebind_ref = xstrdup("");
	return s;
}

static int build_tx(struct db *d, void *arg, bc_error *err)
{
	struct build *b = arg;
	Bc__Node__V1__NodeSpec *s;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (b->spec) { /* a retried pass starts over */
		protobuf_c_message_free_unpacked(&b->spec->base, NULL);
		b->spec = NULL;
	}
	dbp_str(&p, b->node_id);
	if ((rc = db_one(d, &r, "SELECT n.spec_generation, n.pool_id, p.bridge, coalesce(p.ipam_subnet::"
		     "text, ''), coalesce(host(p.ipam_gateway), ''), coalesce(p.ipam_subnet6::text, "
		     "'') FROM nodes n JOIN pools p ON p.id = n.pool_id WHERE n.id = $1", &p, err,
			  "node %s not found", b->node_id)) < 0)
		return rc;
	s = xmalloc(sizeof(*s));
	bc__node__v1__node_spec__init(s);
	s->generation = (uint64_t)db_i64(r, 0, 0);
	s->node_id = xstrdup(b->node_id);
	s->pool_id = dup_col(r, 0, 1);
	s->bridge = dup_col(r, 0, 2);
	s->ipam_subnet = dup_col(r, 0, 3);
	s->ipam_gateway = dup_col(r, 0, 4);
	s->ipam_subnet6 = dup_col(r, 0, 5);
	PQclear(r);
	b->spec = s;
	rc = db_exec(d, &r, "SELECT " SPEC_INST_COLS " FROM instances i JOIN pools p ON p.id = "
		     "i.pool_id JOIN images im ON im.id = i.image_id WHERE i.node_id = $1 AND "
		     "i.state <> 'deleted' ORDER BY i.id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	s->instances = xcalloc((size_t)PQntuples(r) + 1, sizeof(*s->instances));
	for (int i = 0; i < PQntuples(r); i++)
		s->instances[s->n_instances++] = inst(r, i);
	PQclear(r);
	return 0;
}

int nodespec_build(struct db *d, const char *node_id, Bc__Node__V1__NodeSpec **ret,
		   bc_error *err)
{
	struct build b = {.node_id = node_id};
	int r = db_tx(d, "REPEATABLE READ READ ONLY", build_tx, &b, err);

	if (r < 0) {
		if (b.spec)
			protobuf_c_message_free_unpacked(&b.spec->base, NULL);
		return r;
	}
	*ret = b.spec;
	return 0;
}
