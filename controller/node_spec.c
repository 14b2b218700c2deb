/* nodespec.c: build a node's full NodeSpec from the database, in one
 * REPEATABLE READ snapshot so the generation matches the contents. The spec
 * is heap-allocated throughout (every string too) and freed with
 * protobuf_c_message_free_unpacked.
 *
 * A node's stream keeps its last build (struct nodespec_cache): when every
 * change row taken since named its instance (spec_bump_instance: a warm
 * claim, a warm instance's boot-then-pause, an instance placed, started,
 * stopped, paused, resumed, deleted, re-placed, drained), the next build
 * reads the node's header and only those instances again (an instance no
 * longer on the node, or deleted, is dropped) and keeps the rest; any row
 * naming none (spec_bump: everything else), a new stream and every
 * spec_resync_seconds make it whole. On a host of hundreds of instances a
 * claim's push reads one row instead of hundreds. */
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
	const char *dirty;   /* only these instances (newline-separated); NULL: all */
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
	if (b->dirty) {
		dbp_str(&p, b->dirty);
		rc = db_exec(d, &r, "SELECT " SPEC_INST_COLS " FROM instances i JOIN pools p ON p.id "
			     "= i.pool_id JOIN images im ON im.id = i.image_id WHERE i.node_id = $1 AND "
			     "i.state <> 'deleted' AND i.id = ANY (string_to_array($2, E'\\n'))", &p);
	} else {
		rc = db_exec(d, &r, "SELECT " SPEC_INST_COLS " FROM instances i JOIN pools p ON p.id "
			     "= i.pool_id JOIN images im ON im.id = i.image_id WHERE i.node_id = $1 AND "
			     "i.state <> 'deleted' ORDER BY i.id", &p);
	}
	if (rc < 0)
		return db_fail(err, rc);
	s->instances = xcalloc((size_t)PQntuples(r) + 1, sizeof(*s->instances));
	for (int i = 0; i < PQntuples(r); i++)
		s->instances[s->n_instances++] = inst(r, i);
	PQclear(r);
	return 0;
}

/* ------------------------------------------------------------ the cache */

static int cmp_inst(const void *a, const void *b)
{
	const Bc__Node__V1__InstanceSpec *x = *(Bc__Node__V1__InstanceSpec *const *)a;
	const Bc__Node__V1__InstanceSpec *y = *(Bc__Node__V1__InstanceSpec *const *)b;

	return strcmp(x->id, y->id);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* fresh (the node's header and the instances named in dirty, as they are
 * now) gets every instance of old that dirty does not name; the named ones
 * of old are freed (gone from the node, deleted, or replaced by fresh's),
 * then old's shell. */
static void merge(Bc__Node__V1__NodeSpec *old, Bc__Node__V1__NodeSpec *fresh, const char *dirty)
{
	_cleanup_free_ char *ids = xstrdup(dirty);
	_cleanup_free_ char **named = NULL;
	size_t n_named = 0, n = fresh->n_instances;
	Bc__Node__V1__InstanceSpec **v;
	char *save = NULL;

	named = xcalloc(strlen(dirty) / 2 + 2, sizeof(*named));
	for (char *id = strtok_r(ids, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
		named[n_named++] = id;
	qsort(named, n_named, sizeof(*named), cmp_str);
	v = xcalloc(old->n_instances + fresh->n_instances + 1, sizeof(*v));
	memcpy(v, fresh->instances, fresh->n_instances * sizeof(*v));
	for (size_t i = 0; i < old->n_instances; i++) {
		Bc__Node__V1__InstanceSpec *it = old->instances[i];
		if (n_named && bsearch(&it->id, named, n_named, sizeof(*named), cmp_str))
			protobuf_c_message_free_unpacked(&it->base, NULL);
		else
			v[n++] = it;
	}
	qsort(v, n, sizeof(*v), cmp_inst);
	free(fresh->instances);
	fresh->instances = v;
	fresh->n_instances = n;
	old->n_instances = 0; /* moved to fresh, or freed above */
	protobuf_c_message_free_unpacked(&old->base, NULL);
}

int nodespec_build_delta(struct db *d, const char *node_id, struct nodespec_cache *c, bool all,
			 const char *dirty, Bc__Node__V1__NodeSpec **ret, bc_error *err)
{
	struct build b = {.node_id = node_id};
	int r;

	if (!all && c->spec && !(dirty && *dirty)) {
		/* nothing named: the instances are those of the last build */
		b.dirty = "";
	} else if (!all && c->spec) {
		b.dirty = dirty;
	}
	r = db_tx(d, "REPEATABLE READ READ ONLY", build_tx, &b, err);
	if (r < 0) {
		if (b.spec)
			protobuf_c_message_free_unpacked(&b.spec->base, NULL);
		return r;
	}
	if (b.dirty)
		merge(c->spec, b.spec, b.dirty);
	else if (c->spec)
		protobuf_c_message_free_unpacked(&c->spec->base, NULL);
	c->spec = b.spec;
	*ret = c->spec;
	return 0;
}

void nodespec_cache_clear(struct nodespec_cache *c)
{
	if (c->spec)
		protobuf_c_message_free_unpacked(&c->spec->base, NULL);
	c->spec = NULL;
}
