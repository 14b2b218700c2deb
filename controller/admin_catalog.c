/* admin_catalog.c: the operator's catalog: pools (runtime, IPAM subnet and
 * gateway, bridge, recreateOnHostLoss, tenants offered to), flavors (shape
 * and placement) and images (https URL and SHA-256). Admin credential only
 * (auth.c). */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "admin_catalog.h"
#include "app.h"
#include "bc/admin/v1/admin.pb-c.h"
#include "db.h"
#include "idem.h"
#include "ipam.h"
#include "log.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

#define LIST_MAX 500

static int list_limit(int32_t limit, bc_error *err)
{
	if (limit < 0 || limit > LIST_MAX)
		return invalid(err, "limit", "limit must be between 1 and %d", LIST_MAX);
	return limit ? limit : 100;
}

static bool valid_ifname(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 15)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return false;
	return true;
}

static bool valid_name(const char *s)
{
	return str_is_slug(s, 63);
}

/* ---------------------------------------------------------------- pools */

static const char *const runtimes[] = {"fake", "libvirt", "cloud-hypervisor"};

#define POOL_COLS                                                                        \
	"id, name, runtime, coalesce(ipam_subnet::text, ''), coalesce(host(ipam_gateway), ''), " \
	"bridge, recreate_on_host_loss, array_to_string(tenant_ids, E'\\n'), " MS("created_at") \
	", coalesce(ipam_subnet6::text, '')"
/* The columns of POOL_COLS, in its order: the two must stay in step. */
enum {
	POOL_ID, POOL_NAME, POOL_RUNTIME, POOL_IPAM_SUBNET, POOL_IPAM_GATEWAY, POOL_BRIDGE,
	POOL_RECREATE, POOL_TENANT_IDS, POOL_CREATED_AT, POOL_IPAM_SUBNET6, POOL_NCOLS
};
COLS_CHECK(POOL_COLS, POOL_NCOLS)

static Bc__Admin__V1__Pool *pool_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Pool *p = rpc_new(c, &bc__admin__v1__pool__descriptor);

	p->id = row_str(c, r, i, POOL_ID);
	p->name = row_str(c, r, i, POOL_NAME);
	p->runtime = row_str(c, r, i, POOL_RUNTIME);
	p->ipam_subnet = row_str(c, r, i, POOL_IPAM_SUBNET);
	p->ipam_gateway = row_str(c, r, i, POOL_IPAM_GATEWAY);
	p->bridge = row_str(c, r, i, POOL_BRIDGE);
	p->recreate_on_host_loss = db_bool(r, i, POOL_RECREATE);
	p->n_tenant_ids = row_strv(c, r, i, POOL_TENANT_IDS, &p->tenant_ids);
	p->created_at = db_i64(r, i, POOL_CREATED_AT);
	p->ipam_subnet6 = row_str(c, r, i, POOL_IPAM_SUBNET6);
	return p;
}

static int check_subnet(const Bc__Admin__V1__CreatePoolRequest *q, char *gw, size_t gwlen,
			bc_error *err)
{
	uint32_t net, g;
	int prefix;

	if (!*q->ipam_subnet) {
		if (*q->ipam_gateway)
			return invalid(err, "ipamGateway", "ipamGateway needs ipamSubnet");
		gw[0] = '\0';
		return 0;
	}
	if (ipam_parse_cidr4(q->ipam_subnet, &net, &prefix) < 0)
		return invalid(err, "ipamSubnet", "ipamSubnet %.64s is not an IPv4 network in CIDR "
			       "form, e.g. 10.0.0.0/24", q->ipam_subnet);
	if (prefix < 8 || prefix > 29)
		return invalid(err, "ipamSubnet", "ipamSubnet prefix must be between /8 and /29");
	if (!*q->ipam_gateway) {
		ipam_format4(net + 1, gw, gwlen);
		return 0;
	}
	if (ipam_parse_ip4(q->ipam_gateway, &g) < 0)
		return invalid(err, "ipamGateway", "ipamGateway is not an IPv4 address");
	if (!ipam_contains4(net, prefix, g) || g == net || g == net + ipam_hosts4(prefix) + 1)
		return invalid(err, "ipamGateway", "ipamGateway must be a host address inside "
			       "ipamSubnet");
	snprintf(gw, gwlen, "%s", q->ipam_gateway);
	return 0;
}

static int check_pool(const Bc__Admin__V1__CreatePoolRequest *q, char *gw, size_t gwlen,
		      bc_error *err)
{
	unsigned char net6[16];
	bool rt_ok = false;
	int prefix6, r;

	if (!valid_name(q->name))
		return invalid(err, "name", "name must be 1-63 characters of a-z, 0-9, '.' and '-', "
			       "starting with a letter or digit");
	for (size_t i = 0; i < ARRAY_SIZE(runtimes); i++)
		rt_ok |= strcmp(q->runtime, runtimes[i]) == 0;
	if (!rt_ok)
		return invalid(err, "runtime", "runtime must be fake, libvirt or cloud-hypervisor");
	if (!valid_ifname(q->bridge))
		return invalid(err, "bridge", "bridge must be a Linux interface name (1-15 "
			       "characters of a-z, A-Z, 0-9, '-', '_', '.')");
	if ((r = check_subnet(q, gw, gwlen, err)) < 0)
		return r;
	if (*q->ipam_subnet6 && (ipam_parse_cidr6(q->ipam_subnet6, net6, &prefix6) < 0 ||
				 prefix6 != 64))
		return invalid(err, "ipamSubnet6", "ipamSubnet6 must be an IPv6 /64 network");
	if (q->n_tenant_ids > 256)
		return invalid(err, "tenantIds", "at most 256 tenants");
	for (size_t i = 0; i < q->n_tenant_ids; i++)
		if (!str_is_slug(q->tenant_ids[i], 63))
			return invalid(err, "tenantIds", "tenantIds[%zu] is not a tenant id", i);
	return idem_check_key(q->idempotency_key, err);
}

struct pool_create {
	rpc_call *call;
	const Bc__Admin__V1__CreatePoolRequest *q;
	char gw[16];
	struct idem k;
	PGresult *res;
};

static char *join_lines(char *const *v, size_t n)
{
	size_t len = 1;
	char *s, *p;

	for (size_t i = 0; i < n; i++)
		len += strlen(v[i]) + 1;
	s = p = xmalloc(len);
	*p = '\0';
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%s", i ? "\n" : "", v[i]);
	return s;
}

static int pool_create_tx(struct db *d, void *arg, bc_error *err)
{
	struct pool_create *a = arg;
	const Bc__Admin__V1__CreatePoolRequest *q = a->q;
	_cleanup_free_ char *existing = NULL, *tenants = NULL;
	char id[64];
	struct dbp p = {0};
	int r;

	if ((r = idem_lookup(d, &a->k, &existing, err)) < 0)
		return r;
	if (existing)
		snprintf(id, sizeof(id), "%s", existing);
	else {
		id_new("pool", id, sizeof(id));
		tenants = join_lines(q->tenant_ids, q->n_tenant_ids);
		dbp_str(&p, id);
		dbp_str(&p, q->name);
		dbp_str(&p, q->runtime);
		dbp_nstr(&p, q->ipam_subnet);
		dbp_nstr(&p, a->gw);
		dbp_nstr(&p, q->ipam_subnet6);
		dbp_str(&p, q->bridge);
		dbp_bool(&p, q->recreate_on_host_loss);
		dbp_str(&p, tenants);
		r = db_exec(d, NULL, "INSERT INTO pools (id, name, runtime, ipam_subnet, ipam_gateway, "
			    "ipam_subnet6, bridge, recreate_on_host_loss, tenant_ids) VALUES ($1, $2, "
			    "$3, $4, $5, $6, $7, $8, coalesce(string_to_array(nullif($9, ''), E'\\n'), '{}'))", &p);
		if (r == -EEXIST) {
			bc_error_set(err, BC_CONFLICT, "a pool named %s exists", q->name);
			return bc_error_detail(err, "reason", "name-taken");
		}
		if (r < 0 || (r = idem_record(d, &a->k, id, err)) < 0)
			return db_fail(err, r);
	}
	p.n = 0;
	dbp_str(&p, id);
	r = db_exec(d, &a->res, "SELECT " POOL_COLS " FROM pools WHERE id = $1", &p);
	return r < 0 ? db_fail(err, r) : 0;
}

static int pools_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	const Bc__Admin__V1__CreatePoolRequest *q = (const void *)m;
	Bc__Admin__V1__CreatePoolRequest h = *q;
	struct pool_create a = {.call = c, .q = q};
	int r;

	if ((r = check_pool(q, a.gw, sizeof(a.gw), err)) < 0)
		return r;
	h.idempotency_key = (char *)"";
	a.k = (struct idem){.tenant_id = "root", .caller_id = ctl_principal(c)->id,
			    .scope = "pools.create", .key = q->idempotency_key};
	idem_hash(&h.base, a.k.request_hash);
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", pool_create_tx, &a, err)) < 0)
		return r;
	*ret = &pool_from_row(c, a.res, 0)->base;
	PQclear(a.res);
	log_info("pool %s: created (%s)", ((Bc__Admin__V1__Pool *)*ret)->id, q->name);
	return 0;
}

static int pool_fetch(rpc_call *c, const char *id, Bc__Admin__V1__Pool **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = check_id(err, "poolId", "pool", id)) < 0)
		return rc;
	dbp_str(&p, id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " POOL_COLS " FROM pools WHERE id = $1 AND "
		     "deleted_at IS NULL", &p, err,
			  "pool %s not found", id)) < 0)
		return rc;
	*ret = pool_from_row(c, r, 0);
	PQclear(r);
	return 0;
}

static int pools_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__GetPoolRequest *q = (const void *)m;
	Bc__Admin__V1__Pool *p = NULL;
	int r = pool_fetch(c, q->pool_id, &p, err);

	if (r == 0)
		*ret = &p->base;
	return r;
}

static int pools_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	const Bc__Admin__V1__ListPoolsRequest *q = (const void *)m;
	Bc__Admin__V1__ListPoolsResponse *resp;
	struct dbp p = {0};
	PGresult *r = NULL;
	int limit = list_limit(q->limit, err), rc;

	if (limit < 0)
		return limit;
	if (*q->cursor && (rc = check_id(err, "cursor", "pool", q->cursor)) < 0)
		return rc;
	dbp_str(&p, q->cursor);
	dbp_i64(&p, limit);
	rc = db_exec(ctl_db(c), &r, "SELECT " POOL_COLS " FROM pools WHERE deleted_at IS NULL "
		     "AND id > $1 ORDER BY id LIMIT $2", &p);
	if (rc < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, &bc__admin__v1__list_pools_response__descriptor);
	resp->n_items = (size_t)PQntuples(r);
	resp->items = rpc_alloc(c, (resp->n_items + 1) * sizeof(*resp->items));
	for (int i = 0; i < PQntuples(r); i++)
		resp->items[i] = pool_from_row(c, r, i);
	if ((int)resp->n_items == limit)
		resp->cursor = resp->items[limit - 1]->id;
	PQclear(r);
	*ret = &resp->base;
	return 0;
}

struct pool_delete {
	const char *id;
};

static int pool_delete_tx(struct db *d, void *arg, bc_error *err)
{
	struct pool_delete *a = arg;
	_cleanup_free_ char *busy = NULL;
	struct dbp p = {0};
	int r;

	dbp_str(&p, a->id);
	r = db_scalar(d, "SELECT (SELECT count(*) FROM nodes WHERE pool_id = $1 AND state <> "
		      "'retired') + (SELECT count(*) FROM instances WHERE pool_id = $1 AND state "
		      "<> 'deleted') FROM pools WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
		      &p, &busy);
	if (r == -ENOENT)
		return bc_error_set(err, BC_NOT_FOUND, "pool %s not found", a->id);
	if (r < 0)
		return db_fail(err, r);
	if (atoi(busy) > 0) {
		bc_error_set(err, BC_CONFLICT, "pool %s still has nodes or instances", a->id);
		return bc_error_detail(err, "reason", "pool-in-use");
	}
	r = db_exec(d, NULL, "UPDATE pools SET deleted_at = now() WHERE id = $1", &p);
	return r < 0 ? db_fail(err, r) : 0;
}

static int pools_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	const Bc__Admin__V1__DeletePoolRequest *q = (const void *)m;
	Bc__Admin__V1__DeletePoolResponse *resp;
	Bc__Admin__V1__Pool *pool = NULL;
	struct pool_delete a = {.id = q->pool_id};
	int r;

	if ((r = pool_fetch(c, q->pool_id, &pool, err)) < 0)
		return r;
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", pool_delete_tx, &a, err)) < 0)
		return r;
	resp = rpc_new(c, &bc__admin__v1__delete_pool_response__descriptor);
	resp->pool = pool;
	*ret = &resp->base;
	log_info("pool %s: deleted", q->pool_id);
	return 0;
}

/* -------------------------------------------------------------- flavors */

#define FLAVOR_COLS                                                                      \
	"id, name, vcpus, memory_mib, disk_gib, gpus, huge_pages, numa_node, pin_vcpus, " \
	MS("created_at")
/* The columns of FLAVOR_COLS, in its order: the two must stay in step. */
enum {
	FLAVOR_ID, FLAVOR_NAME, FLAVOR_VCPUS, FLAVOR_MEMORY_MIB, FLAVOR_DISK_GIB, FLAVOR_GPUS,
	FLAVOR_HUGE_PAGES, FLAVOR_NUMA_NODE, FLAVOR_PIN_VCPUS, FLAVOR_CREATED_AT, FLAVOR_NCOLS
};
COLS_CHECK(FLAVOR_COLS, FLAVOR_NCOLS)

static Bc__Admin__V1__Flavor *flavor_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Flavor *f = rpc_new(c, &bc__admin__v1__flavor__descriptor);

	f->id = row_str(c, r, i, FLAVOR_ID);
	f->name = row_str(c, r, i, FLAVOR_NAME);
	f->vcpus = (uint32_t)db_i64(r, i, FLAVOR_VCPUS);
	f->memory_mib = (uint64_t)db_i64(r, i, FLAVOR_MEMORY_MIB);
	f->disk_gib = (uint64_t)db_i64(r, i, FLAVOR_DISK_GIB);
	f->gpus = (uint32_t)db_i64(r, i, FLAVOR_GPUS);
	f->huge_pages = row_str(c, r, i, FLAVOR_HUGE_PAGES);
	f->numa_node = (int32_t)db_i64(r, i, FLAVOR_NUMA_NODE);
	f->pin_vcpus = db_bool(r, i, FLAVOR_PIN_VCPUS);
	f->created_at = db_i64(r, i, FLAVOR_CREATED_AT);
	return f;
}

static int check_flavor(const Bc__Admin__V1__CreateFlavorRequest *q, bc_error *err)
{
	if (!valid_name(q->name))
		return invalid(err, "name", "name must be 1-63 characters of a-z, 0-9, '.' and '-'");
	if (q->vcpus < 1 || q->vcpus > 512)
		return invalid(err, "vcpus", "vcpus must be between 1 and 512");
	if (q->memory_mib < 64 || q->memory_mib > (8ull << 20))
		return invalid(err, "memoryMib", "memoryMib must be between 64 and 8388608");
	if (q->disk_gib < 1 || q->disk_gib > 65536)
		return invalid(err, "diskGib", "diskGib must be between 1 and 65536");
	if (q->gpus > 16)
		return invalid(err, "gpus", "gpus must be between 0 and 16");
	if (*q->huge_pages && strcmp(q->huge_pages, "2M") && strcmp(q->huge_pages, "1G"))
		return invalid(err, "hugePages", "hugePages must be empty, 2M or 1G");
	if (q->has_numa_node && (q->numa_node < -1 || q->numa_node > 63))
		return invalid(err, "numaNode", "numaNode must be between 0 and 63");
	return 0;
}

static int flavors_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	const Bc__Admin__V1__CreateFlavorRequest *q = (const void *)m;
	struct dbp p = {0};
	PGresult *r = NULL;
	char id[64];
	int rc;

	if ((rc = check_flavor(q, err)) < 0)
		return rc;
	id_new("flv", id, sizeof(id));
	dbp_str(&p, id);
	dbp_str(&p, q->name);
	dbp_u64(&p, q->vcpus);
	dbp_u64(&p, q->memory_mib);
	dbp_u64(&p, q->disk_gib);
	dbp_u64(&p, q->gpus);
	dbp_str(&p, q->huge_pages);
	dbp_i64(&p, q->has_numa_node ? q->numa_node : -1);
	dbp_bool(&p, q->pin_vcpus);
	rc = db_exec(ctl_db(c), &r, "INSERT INTO flavors (id, name, vcpus, memory_mib, disk_gib, "
		     "gpus, huge_pages, numa_node, pin_vcpus) VALUES ($1, $2, $3, $4, $5, $6, $7, "
		     "$8, $9) RETURNING " FLAVOR_COLS, &p);
	if (rc == -EEXIST) {
		bc_error_set(err, BC_CONFLICT, "a flavor named %s exists", q->name);
		return bc_error_detail(err, "reason", "name-taken");
	}
	if (rc < 0)
		return db_fail(err, rc);
	*ret = &flavor_from_row(c, r, 0)->base;
	PQclear(r);
	log_info("flavor %s: created (%s)", id, q->name);
	return 0;
}

/* --------------------------------------------------------------- images */

#define IMAGE_COLS "id, name, format, url, sha256, size_bytes, " MS("created_at")
/* The columns of IMAGE_COLS, in its order: the two must stay in step. */
enum {
	IMAGE_ID, IMAGE_NAME, IMAGE_FORMAT, IMAGE_URL, IMAGE_SHA256, IMAGE_SIZE_BYTES,
	IMAGE_CREATED_AT, IMAGE_NCOLS
};
COLS_CHECK(IMAGE_COLS, IMAGE_NCOLS)

static Bc__Admin__V1__Image *image_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Admin__V1__Image *im = rpc_new(c, &bc__admin__v1__image__descriptor);

	im->id = row_str(c, r, i, IMAGE_ID);
	im->name = row_str(c, r, i, IMAGE_NAME);
	im->format = row_str(c, r, i, IMAGE_FORMAT);
	im->url = row_str(c, r, i, IMAGE_URL);
	im->sha256 = row_str(c, r, i, IMAGE_SHA256);
	im->size_bytes = (uint64_t)db_i64(r, i, IMAGE_SIZE_BYTES);
	im->created_at = db_i64(r, i, IMAGE_CREATED_AT);
	return im;
}

static bool is_sha256(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s))
			return false;
	return true;
}

static int check_image(const Bc__Admin__V1__CreateImageRequest *q, bc_error *err)
{
	if (!valid_name(q->name))
		return invalid(err, "name", "name must be 1-63 characters of a-z, 0-9, '.' and '-'");
	if (strcmp(q->format, "qcow2") && strcmp(q->format, "raw"))
		return invalid(err, "format", "format must be qcow2 or raw");
	if (strncmp(q->url, "https://", 8) != 0 || strlen(q->url) < 9 ||
	    !str_is_printable(q->url, 2048) || strchr(q->url, ' '))
		return invalid(err, "url", "url must be an https:// URL of at most 2048 characters");
	if (!is_sha256(q->sha256))
		return invalid(err, "sha256", "sha256 must be 64 lowercase hex digits");
	if (q->size_bytes == 0 || q->size_bytes > (1ull << 44))
		return invalid(err, "sizeBytes", "sizeBytes must be between 1 and 16 TiB");
	return 0;
}

static int images_create(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			 bc_error *err)
{
	const Bc__Admin__V1__CreateImageRequest *q = (const void *)m;
	struct dbp p = {0};
	PGresult *r = NULL;
	char id[64];
	int rc;

	if ((rc = check_image(q, err)) < 0)
		return rc;
	id_new("img", id, sizeof(id));
	dbp_str(&p, id);
	dbp_str(&p, q->name);
	dbp_str(&p, q->format);
	dbp_str(&p, q->url);
	dbp_str(&p, q->sha256);
	dbp_u64(&p, q->size_bytes);
	rc = db_exec(ctl_db(c), &r, "INSERT INTO images (id, name, format, url, sha256, size_bytes) "
		     "VALUES ($1, $2, $3, $4, $5, $6) RETURNING " IMAGE_COLS, &p);
	if (rc == -EEXIST) {
		bc_error_set(err, BC_CONFLICT, "an image named %s exists", q->name);
		return bc_error_detail(err, "reason", "name-taken");
	}
	if (rc < 0)
		return db_fail(err, rc);
	*ret = &image_from_row(c, r, 0)->base;
	PQclear(r);
	log_info("image %s: created (%s)", id, q->name);
	return 0;
}

/* ---------------------------------------------- flavors and images alike */

/* Get, List and Delete of flavors and images differ only in their table,
 * columns and message types: one description each drives them. */
struct catalog {
	const char *kind;            /* "flavor", "image": messages and field */
	const char *sql_get;         /* $1 = id or name */
	const char *sql_list;        /* $1 = cursor (a name), $2 = limit */
	const char *sql_delete;      /* $1 = id */
	const ProtobufCMessageDescriptor *list_desc, *delete_desc;
	ProtobufCMessage *(*from_row)(rpc_call *c, const PGresult *r, int i);
	const char *(*name_of)(const ProtobufCMessage *m);
};

static ProtobufCMessage *flavor_row(rpc_call *c, const PGresult *r, int i)
{
	return &flavor_from_row(c, r, i)->base;
}

static ProtobufCMessage *image_row(rpc_call *c, const PGresult *r, int i)
{
	return &image_from_row(c, r, i)->base;
}

static const char *flavor_name(const ProtobufCMessage *m)
{
	return ((const Bc__Admin__V1__Flavor *)m)->name;
}

static const char *image_name(const ProtobufCMessage *m)
{
	return ((const Bc__Admin__V1__Image *)m)->name;
}

static const struct catalog flavor_catalog = {
	.kind = "flavor",
	.sql_get = "SELECT " FLAVOR_COLS " FROM flavors WHERE (id = $1 OR name = $1) AND "
		   "deleted_at IS NULL",
	.sql_list = "SELECT " FLAVOR_COLS " FROM flavors WHERE deleted_at IS NULL AND name > $1 "
		    "ORDER BY name LIMIT $2",
	.sql_delete = "UPDATE flavors SET deleted_at = now() WHERE id = $1",
	.list_desc = &bc__admin__v1__list_flavors_response__descriptor,
	.delete_desc = &bc__admin__v1__delete_flavor_response__descriptor,
	.from_row = flavor_row,
	.name_of = flavor_name,
};

static const struct catalog image_catalog = {
	.kind = "image",
	.sql_get = "SELECT " IMAGE_COLS " FROM images WHERE (id = $1 OR name = $1) AND "
		   "deleted_at IS NULL",
	.sql_list = "SELECT " IMAGE_COLS " FROM images WHERE deleted_at IS NULL AND name > $1 "
		    "ORDER BY name LIMIT $2",
	.sql_delete = "UPDATE images SET deleted_at = now() WHERE id = $1",
	.list_desc = &bc__admin__v1__list_images_response__descriptor,
	.delete_desc = &bc__admin__v1__delete_image_response__descriptor,
	.from_row = image_row,
	.name_of = image_name,
};

/* Look up a live entry by id or name; NOT_FOUND. */
static int catalog_fetch(rpc_call *c, const struct catalog *k, const char *key,
			 ProtobufCMessage **ret, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (!key || !*key || !str_is_printable(key, 64))
		return invalid(err, k->kind, "%s must be a %s id or name", k->kind, k->kind);
	dbp_str(&p, key);
	if ((rc = db_one(ctl_db(c), &r, k->sql_get, &p, err,
			  "%s %s not found", k->kind, key)) < 0)
		return rc;
	*ret = k->from_row(c, r, 0);
	PQclear(r);
	return 0;
}

/* A field of a message by name, through its descriptor. */
static void *field_at(ProtobufCMessage *m, const char *name, size_t **ret_count)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);

	if (!f)
		abort(); /* a programming error: the names are the protos' */
	if (ret_count)
		*ret_count = (size_t *)((char *)m + f->quantifier_offset);
	return (char *)m + f->offset;
}

static int catalog_list(rpc_call *c, const struct catalog *k, int32_t limit_in,
			const char *cursor, ProtobufCMessage **ret, bc_error *err)
{
	ProtobufCMessage *resp, **items;
	struct dbp p = {0};
	PGresult *r = NULL;
	size_t *n_items;
	int limit = list_limit(limit_in, err), rc;

	if (limit < 0)
		return limit;
	dbp_str(&p, cursor);
	dbp_i64(&p, limit);
	if ((rc = db_exec(ctl_db(c), &r, k->sql_list, &p)) < 0)
		return db_fail(err, rc);
	resp = rpc_new(c, k->list_desc);
	items = rpc_alloc(c, ((size_t)PQntuples(r) + 1) * sizeof(*items));
	*(ProtobufCMessage ***)field_at(resp, "items", &n_items) = items;
	for (int i = 0; i < PQntuples(r); i++)
		items[(*n_items)++] = k->from_row(c, r, i);
	if ((int)*n_items == limit)
		*(const char **)field_at(resp, "cursor", NULL) = k->name_of(items[limit - 1]);
	PQclear(r);
	*ret = resp;
	return 0;
}

static int catalog_delete(rpc_call *c, const struct catalog *k, const char *key,
			  ProtobufCMessage **ret, bc_error *err)
{
	ProtobufCMessage *resp, *entry = NULL;
	struct dbp p = {0};
	int r;

	if ((r = catalog_fetch(c, k, key, &entry, err)) < 0)
		return r;
	dbp_str(&p, *(char **)field_at(entry, "id", NULL));
	if ((r = db_exec(ctl_db(c), NULL, k->sql_delete, &p)) < 0)
		return db_fail(err, r);
	resp = rpc_new(c, k->delete_desc);
	*(ProtobufCMessage **)field_at(resp, k->kind, NULL) = entry;
	*ret = resp;
	return 0;
}

static int flavors_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	return catalog_fetch(c, &flavor_catalog, ((const Bc__Admin__V1__GetFlavorRequest *)m)->flavor, ret,
			     err);
}

static int flavors_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			bc_error *err)
{
	const Bc__Admin__V1__ListFlavorsRequest *q = (const void *)m;

	return catalog_list(c, &flavor_catalog, q->limit, q->cursor, ret, err);
}

static int flavors_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	return catalog_delete(c, &flavor_catalog, ((const Bc__Admin__V1__DeleteFlavorRequest *)m)->flavor,
			      ret, err);
}

static int images_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		      bc_error *err)
{
	return catalog_fetch(c, &image_catalog, ((const Bc__Admin__V1__GetImageRequest *)m)->image, ret,
			     err);
}

static int images_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Admin__V1__ListImagesRequest *q = (const void *)m;

	return catalog_list(c, &image_catalog, q->limit, q->cursor, ret, err);
}

static int images_delete(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			 bc_error *err)
{
	return catalog_delete(c, &image_catalog, ((const Bc__Admin__V1__DeleteImageRequest *)m)->image,
			      ret, err);
}

#define U(name, f) {name, RPC_UNARY, {.unary = f}}

const struct rpc_handler *pools_handlers(size_t *ret_n)
{
	static const struct rpc_handler pools[] = {
		U("Create", pools_create), U("Get", pools_get), U("List", pools_list),
		U("Delete", pools_delete)};

	*ret_n = ARRAY_SIZE(pools);
	return pools;
}

const struct rpc_handler *flavors_handlers(size_t *ret_n)
{
	static const struct rpc_handler flavors[] = {
		U("Create", flavors_create), U("Get", flavors_get), U("List", flavors_list),
		U("Delete", flavors_delete)};

	*ret_n = ARRAY_SIZE(flavors);
	return flavors;
}

const struct rpc_handler *images_handlers(size_t *ret_n)
{
	static const struct rpc_handler images[] = {
		U("Create", images_create), U("Get", images_get), U("List", images_list),
		U("Delete", images_delete)};

	*ret_n = ARRAY_SIZE(images);
	return images;
}
