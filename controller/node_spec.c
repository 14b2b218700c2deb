/* node_spec.c: "push a NodeSpec", end to end. A write records a change to
 * what a node runs (spec_bump, spec_bump_instance: a node_spec_changes row
 * and a NOTIFY, in the writer's transaction); the node's WatchSpec stream,
 * woken by watch.c's LISTEN thread, takes the rows (spec_take_changes,
 * which bumps the generation once), builds the node's full NodeSpec and
 * sends it when its generation is newer than the one sent. GetBootData
 * hands the node the sealed user data its instances' specs name.
 *
 * A build reads the database in one REPEATABLE READ snapshot so the
 * generation matches the contents. The spec is heap-allocated throughout
 * (every string too) and freed with protobuf_c_message_free_unpacked.
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
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "ipam.h"
#include "log.h"
#include "node.h"
#include "node_commands.h"
#include "sealed.h"
#include "sandbox_restore.h"
#include "streams.h"
#include "util.h"
#include "validate.h"
#include "watch.h"

#define SPEC_INST_COLS                                                                       \
	"i.id, p.runtime, i.desired_state, i.vcpus, i.memory_mib, i.disk_gib, i.huge_pages, "  \
	"i.numa_node, i.image_id, im.url, im.sha256, im.format, im.size_bytes, "               \
	"i.network_policy, i.ssh_from_host_only, coalesce(i.mac::text, ''), coalesce((SELECT " \
	"host(l.address) FROM ip_leases l WHERE l.instance_id = i.id LIMIT 1), ''), i.gpus, "   \
	"i.tenant_id, coalesce(i.user_data_ref, ''), coalesce(masklen(p.ipam_subnet), 0), "               \
	"coalesce(p.ipam_subnet6::text, ''), (i.warm_template_id IS NOT NULL AND "                \
	"i.desired_state = 'paused'), coalesce(rs.id, ''), coalesce(rs.sha256, ''), "           \
	"coalesce(rs.size_bytes, 0), coalesce(rs.include_memory, false), "                     \
	"coalesce(rs.principal_instance_id, ''), coalesce(rs.runtime, ''), "                   \
	"coalesce(rs.cpu_model, ''), coalesce((SELECT string_agg(v.id || ' ' || v.serial || ' ' " \
	"|| iv.read_only::text, E'\\n' ORDER BY v.id) FROM instance_volumes iv JOIN volumes v ON " \
	"v.id = iv.volume_id WHERE iv.instance_id = i.id), ''), "                               \
	"coalesce(i.identity_bootstrap_ref, ''), coalesce(i.identity_rebind_ref, '')"
/* what a restore reads of its snapshot (sandbox_restore.c) */
#define SPEC_RESTORE_JOIN " LEFT JOIN sandbox_snapshots rs ON rs.id = i.restore_snapshot_id "
/* The columns of SPEC_INST_COLS, in order. */
enum {
	SI_ID, SI_RUNTIME, SI_DESIRED, SI_VCPUS, SI_MEMORY_MIB, SI_DISK_GIB, SI_HUGE_PAGES,
	SI_NUMA_NODE, SI_IMAGE_ID, SI_IMAGE_URL, SI_IMAGE_SHA256, SI_IMAGE_FORMAT, SI_IMAGE_SIZE,
	SI_NETWORK_POLICY, SI_SSH_HOST_ONLY, SI_MAC, SI_IPV4, SI_GPUS, SI_TENANT, SI_USER_DATA_REF,
	SI_IPV4_PREFIX, SI_SUBNET6, SI_PAUSE_AFTER_READY, SI_RESTORE_ID, SI_RESTORE_SHA256,
	SI_RESTORE_SIZE, SI_RESTORE_MEMORY, SI_RESTORE_PRINCIPAL, SI_RESTORE_RUNTIME, SI_RESTORE_CPU,
	SI_VOLUMES, SI_IDENTITY_REF, SI_REBIND_REF
};

/* The node's header, in order (build_tx). */
#define SPEC_NODE_COLS                                                                       \
	"n.spec_generation, n.pool_id, p.bridge, coalesce(p.ipam_subnet::text, ''), "          \
	"coalesce(host(p.ipam_gateway), ''), coalesce(p.ipam_subnet6::text, '')"
enum { SN_GENERATION, SN_POOL, SN_BRIDGE, SN_SUBNET, SN_GATEWAY, SN_SUBNET6 };

/* The node's volumes in its spec, and their columns in this order. */
#define SPEC_VOL_COLS "id, serial, size_gib"
enum { SV_ID, SV_SERIAL, SV_SIZE_GIB };

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
	const char *subnet6 = db_val(r, i, SI_SUBNET6);
	unsigned char net[16];
	char tap[16], v6[64] = "";
	int prefix;

	bc__node__v1__nic_spec__init(n);
	ipam_tap_name(db_val(r, i, SI_ID), 0, tap);
	n->tap = xstrdup(tap);
	n->mac = dup_col(r, i, SI_MAC);
	n->ipv4 = dup_col(r, i, SI_IPV4);
	n->ipv4_prefix = *n->ipv4 ? (uint32_t)db_i64(r, i, SI_IPV4_PREFIX) : 0;
	if (*subnet6 && *n->mac && ipam_parse_cidr6(subnet6, net, &prefix) == 0 &&
	    ipam_eui64(net, n->mac, v6, sizeof(v6)) == 0)
		n->ipv6_prefix = 64;
	n->ipv6 = xstrdup(v6);
	return n;
}

/* The instance's attachments from SI_VOLUMES' "id serial true|false" lines. */
static void inst_volumes(Bc__Node__V1__InstanceSpec *s, const char *text)
{
	size_t n = *text ? 1 : 0;

	for (const char *p = text; *p; p++)
		n += *p == '\n';
	s->volumes = xcalloc(n + 1, sizeof(*s->volumes));
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char id[64] = "", serial[64] = "", ro[8] = "", line[160];
		snprintf(line, sizeof(line), "%.*s", (int)(len < 159 ? len : 159), p);
		if (sscanf(line, "%63s %63s %7s", id, serial, ro) == 3) {
			Bc__Node__V1__VolumeAttachment *v = xmalloc(sizeof(*v));
			bc__node__v1__volume_attachment__init(v);
			v->volume_id = xstrdup(id);
			v->serial = xstrdup(serial);
			v->read_only = strcmp(ro, "true") == 0;
			s->volumes[s->n_volumes++] = v;
		}
		p += len + (end ? 1 : 0);
	}
}

static Bc__Node__V1__InstanceSpec *inst(const PGresult *r, int i)
{
	Bc__Node__V1__InstanceSpec *s = xmalloc(sizeof(*s));
	Bc__Node__V1__ImageRef *im = xmalloc(sizeof(*im));

	bc__node__v1__instance_spec__init(s);
	bc__node__v1__image_ref__init(im);
	s->id = dup_col(r, i, SI_ID);
	s->runtime = dup_col(r, i, SI_RUNTIME);
	s->desired_state = desired(db_val(r, i, SI_DESIRED));
	s->vcpus = (uint32_t)db_i64(r, i, SI_VCPUS);
	s->memory_mib = (uint64_t)db_i64(r, i, SI_MEMORY_MIB);
	s->disk_gib = (uint64_t)db_i64(r, i, SI_DISK_GIB);
	s->huge_pages = dup_col(r, i, SI_HUGE_PAGES);
	s->numa_node = (int32_t)db_i64(r, i, SI_NUMA_NODE);
	im->id = dup_col(r, i, SI_IMAGE_ID);
	im->url = dup_col(r, i, SI_IMAGE_URL);
	im->sha256 = dup_col(r, i, SI_IMAGE_SHA256);
	im->format = dup_col(r, i, SI_IMAGE_FORMAT);
	im->size_bytes = (uint64_t)db_i64(r, i, SI_IMAGE_SIZE);
	s->image = im;
	s->network_policy = dup_col(r, i, SI_NETWORK_POLICY);
	s->ssh_from_host_only = db_bool(r, i, SI_SSH_HOST_ONLY);
	if (*db_val(r, i, SI_MAC)) {
		s->nics = xmalloc(sizeof(*s->nics));
		s->nics[0] = nic(r, i);
		s->n_nics = 1;
	}
	s->gpus = (uint32_t)db_i64(r, i, SI_GPUS);
	s->tenant_id = dup_col(r, i, SI_TENANT);
	s->user_data_ref = dup_col(r, i, SI_USER_DATA_REF);
	/* a memory restore's own identity (rebind.c), fetched like the boot data */
	s->identity_rebind_ref = dup_col(r, i, SI_REBIND_REF);
	/* a warm claim's bootstrap value, fetched by bcd like the boot data */
	s->identity_bootstrap_ref = dup_col(r, i, SI_IDENTITY_REF);
	/* a warm instance (unclaimed, desired paused): paused only once its
	 * guest reported up, so the pool holds booted guests */
	s->pause_after_ready = db_bool(r, i, SI_PAUSE_AFTER_READY);
	if (*db_val(r, i, SI_RESTORE_ID)) { /* its URL: restore_render, after the build */
		Bc__Node__V1__RestoreFrom *f = xmalloc(sizeof(*f));
		bc__node__v1__restore_from__init(f);
		f->snapshot_id = dup_col(r, i, SI_RESTORE_ID);
		f->url = xstrdup("");
		f->sha256 = dup_col(r, i, SI_RESTORE_SHA256);
		f->principal_instance_id = dup_col(r, i, SI_RESTORE_PRINCIPAL);
		f->size_bytes = (uint64_t)db_i64(r, i, SI_RESTORE_SIZE);
		f->include_memory = db_bool(r, i, SI_RESTORE_MEMORY);
		f->runtime = dup_col(r, i, SI_RESTORE_RUNTIME);
		f->cpu_model = dup_col(r, i, SI_RESTORE_CPU);
		s->restore_from = f;
	}
	inst_volumes(s, db_val(r, i, SI_VOLUMES));
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
	if ((rc = db_one(d, &r, "SELECT " SPEC_NODE_COLS " FROM nodes n JOIN pools p ON p.id = "
		     "n.pool_id WHERE n.id = $1", &p, err,
			  "node %s not found", b->node_id)) < 0)
		return rc;
	s = xmalloc(sizeof(*s));
	bc__node__v1__node_spec__init(s);
	s->generation = (uint64_t)db_i64(r, 0, SN_GENERATION);
	s->node_id = xstrdup(b->node_id);
	s->pool_id = dup_col(r, 0, SN_POOL);
	s->bridge = dup_col(r, 0, SN_BRIDGE);
	s->ipam_subnet = dup_col(r, 0, SN_SUBNET);
	s->ipam_gateway = dup_col(r, 0, SN_GATEWAY);
	s->ipam_subnet6 = dup_col(r, 0, SN_SUBNET6);
	PQclear(r);
	b->spec = s;
	/* the node's ready volumes, read with the header on every build */
	if ((rc = db_exec(d, &r, "SELECT " SPEC_VOL_COLS " FROM volumes WHERE node_id = $1 AND "
			  "state = 'ready' ORDER BY id", &p)) < 0)
		return db_fail(err, rc);
	s->volumes = xcalloc((size_t)PQntuples(r) + 1, sizeof(*s->volumes));
	for (int i = 0; i < PQntuples(r); i++) {
		Bc__Node__V1__VolumeSpec *v = xmalloc(sizeof(*v));
		bc__node__v1__volume_spec__init(v);
		v->id = dup_col(r, i, SV_ID);
		v->serial = dup_col(r, i, SV_SERIAL);
		v->size_bytes = (uint64_t)db_i64(r, i, SV_SIZE_GIB) << 30;
		s->volumes[s->n_volumes++] = v;
	}
	PQclear(r);
	if (b->dirty) {
		dbp_str(&p, b->dirty);
		rc = db_exec(d, &r, "SELECT " SPEC_INST_COLS " FROM instances i JOIN pools p ON p.id "
			     "= i.pool_id JOIN images im ON im.id = i.image_id" SPEC_RESTORE_JOIN "WHERE i.node_id = $1 AND "
			     "i.state <> 'deleted' AND i.id = ANY (string_to_array($2, E'\\n'))", &p);
	} else {
		rc = db_exec(d, &r, "SELECT " SPEC_INST_COLS " FROM instances i JOIN pools p ON p.id "
			     "= i.pool_id JOIN images im ON im.id = i.image_id" SPEC_RESTORE_JOIN "WHERE i.node_id = $1 AND "
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

/* ------------------------------------------------------------ change rows */

/* A change to what node_id runs: a row in node_spec_changes (insert-only,
 * so writers on one node never wait for each other) and a notification to
 * the node's spec stream, which takes the rows and bumps the generation
 * (spec_take_changes). instance_id, when the change is to that one
 * instance's entry alone, lets the next build read only it again
 * (nodespec_build_delta); NULL: anything of the node may have changed. */
int spec_bump_instance(struct db *d, const char *node_id, const char *instance_id)
{
	struct dbp p = {0};

	if (!node_id)
		return 0;
	dbp_str(&p, node_id);
	dbp_nstr(&p, instance_id);
	return db_exec(d, NULL, "WITH c AS (INSERT INTO node_spec_changes (node_id, instance_id) "
		       "VALUES ($1, $2) RETURNING 1) SELECT pg_notify('bc_node_spec', $1) FROM c",
		       &p);
}

int spec_bump(struct db *d, const char *node_id)
{
	return spec_bump_instance(d, node_id, NULL);
}

/* The node's spec stream: take every change row this statement sees and,
 * if there was any, bump the generation once; a volume this statement sees
 * deleting gets that generation, the first without it (volumes.c releases
 * its booking once the host applied it). A spec built afterwards
 * (nodespec_build, a later snapshot) carries every change taken here; a
 * change committed later keeps its row for the next take. Returns 1 if the
 * generation moved, 0 if not, <0 on failure. The instances the taken rows
 * name are appended to *dirty (newline-separated); *all is set when a row
 * named none (anything of the node may have changed). */
/* The columns of spec_take_changes's SELECT. */
enum { TC_MOVED, TC_ALL, TC_IDS };

int spec_take_changes(struct db *d, const char *node_id, bool *all, char **dirty)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	const char *ids;
	int rc;

	dbp_str(&p, node_id);
	rc = db_exec(d, &r, "WITH c AS (DELETE FROM node_spec_changes WHERE node_id = $1 RETURNING "
		     "instance_id), u AS (UPDATE nodes SET spec_generation = spec_generation + 1 "
		     "WHERE id = $1 AND EXISTS (SELECT 1 FROM c) RETURNING spec_generation), v AS "
		     "(UPDATE volumes SET deleting_generation = u.spec_generation FROM u WHERE "
		     "node_id = $1 AND state = 'deleting' AND deleting_generation IS NULL) SELECT "
		     "(SELECT count(*) FROM u), coalesce(bool_or(instance_id IS NULL), false), "
		     "coalesce(string_agg(DISTINCT instance_id, E'\\n'), '') FROM c", &p);
	if (rc < 0)
		return rc;
	rc = db_i64(r, 0, TC_MOVED) > 0;
	if (db_bool(r, 0, TC_ALL))
		*all = true;
	ids = db_val(r, 0, TC_IDS);
	if (ids && *ids) {
		char *n = *dirty && **dirty ? xasprintf("%s\n%s", *dirty, ids) : xstrdup(ids);
		free(*dirty);
		*dirty = n;
	}
	PQclear(r);
	return rc;
}

/* ------------------------------------------------------------- watchspec */

/* See node.h. */
int spec_read_generation(struct db *d, const char *node, bool pending, uint64_t *ret,
			 bc_error *err)
{
	_cleanup_free_ char *v = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, node);
	rc = db_scalar(d, pending ? "SELECT CASE WHEN state = 'retired' THEN -1 ELSE "
		       "spec_generation + (EXISTS (SELECT 1 FROM node_spec_changes c WHERE "
		       "c.node_id = $1))::int END FROM nodes WHERE id = $1" :
				    "SELECT CASE WHEN state = 'retired' THEN -1 ELSE spec_generation "
				    "END FROM nodes WHERE id = $1", &p, &v);
	if (rc < 0 && rc != -ENOENT)
		return db_fail(err, rc);
	if (rc == -ENOENT || atoll(v) < 0) {
		bc_error_set(err, BC_ACCESS_DENIED, "node %s is retired", node);
		return bc_error_detail(err, "reason", "node-retired");
	}
	*ret = (uint64_t)atoll(v);
	return 0;
}

/* What a node's stream knows between builds: its last build, and what
 * changed since (the instances the taken change rows named, or all). */
struct spec_state {
	struct nodespec_cache cache;
	bool all;
	char *dirty;
};

static int send_spec(rpc_call *c, const char *node, uint64_t *sent, struct spec_state *ss,
		     bc_error *err)
{
	Bc__Node__V1__NodeSpec *spec = NULL;
	Bc__Node__V1__NodeUpdate up = BC__NODE__V1__NODE_UPDATE__INIT;
	bool whole = ss->all || !ss->cache.spec;
	int r = nodespec_build_delta(ctl_db(c), node, &ss->cache, ss->all, ss->dirty, &spec, err);

	if (r < 0)
		return r;
	restore_render(ctl_app(c), ctl_db(c), spec);
	ss->all = false;
	free(ss->dirty);
	ss->dirty = NULL;
	if (spec->generation > *sent) {
		up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
		up.spec = spec;
		stream_db_give(c); /* a slow reader never holds a pool connection */
		r = rpc_call_send(c, &up.base);
		if (r == 0) {
			*sent = spec->generation;
			log_debug("node %s: sent spec generation %llu (%zu instances, %s)", node,
				  (unsigned long long)spec->generation, spec->n_instances,
				  whole ? "built whole" : "changed ones read again");
		}
	}
	return r == -ECANCELED ? 0 : r;
}

/* Take the node's spec changes and push a new spec if its generation
 * moved past the one sent, on the call's pool connection. */
static int spec_update(rpc_call *c, const char *node, uint64_t *sent, struct spec_state *ss,
		       bc_error *err)
{
	uint64_t gen = 0;
	int r;

	if ((r = spec_take_changes(ctl_db(c), node, &ss->all, &ss->dirty)) < 0)
		return db_fail(err, r);
	if ((r = spec_read_generation(ctl_db(c), node, false, &gen, err)) < 0)
		return r;
	if (gen > *sent)
		return send_spec(c, node, sent, ss, err);
	return 0;
}

static int node_watch(rpc_call *c, const ProtobufCMessage *m, bc_error *err)
{
	const Bc__Node__V1__WatchSpecRequest *q = (const void *)m;
	struct ctl_app *app = ctl_app(c);
	const char *node = ctl_principal(c)->id;
	struct watch_entry *e = watch_add(app->watches, node);
	uint64_t sent = q->applied_generation, seen = 0, seq = 1;
	struct spec_state ss = {.all = true};
	bool resend = true; /* commands delivered to an earlier stream, not settled */
	int64_t resync = 0;
	int r = 0;

	log_info("node %s: watching its spec from generation %llu", node,
		 (unsigned long long)sent);
	while (!app->stopping && !rpc_call_wait_cancelled(c, 0)) {
		if (seq != seen || mono_ms() >= resync) {
			if (mono_ms() >= resync)
				ss.all = true; /* a whole build now and then, whatever changed */
			seen = seq;
			resync = mono_ms() + app->cfg.spec_resync_seconds * 1000LL;
			/* the changes committed since the last take move the
			 * generation once; the spec is built after, so it
			 * carries all of them. A pool connection only for
			 * this: the stream holds none while it waits. */
			if ((r = stream_db_take(c, err)) < 0)
				break;
			r = spec_update(c, node, &sent, &ss, err);
			stream_db_give(c);
			if (r < 0)
				break;
			/* after the spec they need (node_commands.c) */
			if ((r = cmd_stream_send(c, node, &ss.cache, sent, &resend, err)) < 0)
				break;
		}
		seq = watch_wait(app->watches, e, seen, 500);
	}
	nodespec_cache_clear(&ss.cache);
	free(ss.dirty);
	watch_remove(app->watches, e);
	log_info("node %s: spec watch ended", node);
	return r;
}

/* ------------------------------------------------------------- boot data */

/* The user data of an instance placed on the calling node and not being
 * deleted, named by the ref its InstanceSpec carries. Anything else (another
 * node's instance, a wrong ref, a deleted one) is the same NOT_FOUND, so a
 * node learns nothing about instances that are not its own. The broker
 * releases nothing for a tenant that is not active (suspended, deleting,
 * deleted): ACCESS_DENIED, reason tenant-inactive. */
static int node_boot_data(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	const Bc__Node__V1__GetBootDataRequest *q = (const void *)m;
	const char *node = ctl_principal(c)->id;
	Bc__Node__V1__BootData *bd;
	_cleanup_free_ char *ref = NULL;
	char *data = NULL;
	struct dbp p = {0};
	size_t len = 0;
	int rc;

	if (!id_valid("inst", q->instance_id))
		return invalid(err, "instanceId", "instanceId is not an instance id");
	if (!*q->ref || !str_is_printable(q->ref, SEALED_REF_MAX - 1))
		return invalid(err, "ref", "ref is not a boot data reference");
	dbp_str(&p, q->instance_id);
	dbp_str(&p, node);
	dbp_str(&p, q->ref);
	/* the ref is the instance's user data, its warm claim's bootstrap or
	 * its identity rebind bundle */
	rc = db_scalar(ctl_db(c), "SELECT CASE WHEN t.state = 'active' THEN $3::text ELSE "
		       "'' END FROM instances i JOIN tenants t ON t.id = i.tenant_id WHERE i.id = $1 "
		       "AND i.node_id = $2 AND $3 IN (i.user_data_ref, i.identity_bootstrap_ref, i.identity_rebind_ref) AND "
		       "i.desired_state <> 'deleted' "
		       "AND i.state NOT IN ('deleting', 'deleted')", &p, &ref);
	if (rc == 0 && !*ref) {
		/* the broker releases nothing for a tenant that is not active */
		log_info("node %s: boot data of instance %s refused: its tenant is not active", node,
			 q->instance_id);
		bc_error_set(err, BC_ACCESS_DENIED, "the tenant of instance %s is not active",
			     q->instance_id);
		return bc_error_detail(err, "reason", "tenant-inactive");
	}
	if (rc == 0)
		rc = sealed_get(ctl_db(c), ref, &data, &len);
	if (rc == -ENOENT) {
		log_info("node %s: boot data of instance %s refused: not its own", node,
			 q->instance_id);
		return bc_error_set(err, BC_NOT_FOUND, "no boot data %s for instance %s on node %s",
				    q->ref, q->instance_id, node);
	}
	if (rc < 0)
		return db_fail(err, rc);
	bd = rpc_new(c, &bc__node__v1__boot_data__descriptor);
	bd->user_data.data = rpc_alloc(c, len ? len : 1);
	memcpy(bd->user_data.data, data, len);
	bd->user_data.len = len;
	OPENSSL_cleanse(data, len);
	free(data);
	log_debug("node %s: boot data of instance %s sent (%zu bytes)", node, q->instance_id, len);
	*ret = &bd->base;
	return 0;
}

const struct rpc_handler *node_spec_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"WatchSpec", RPC_SERVER_STREAM, {.sstream = node_watch}},
		{"GetBootData", RPC_UNARY, {.unary = node_boot_data}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
