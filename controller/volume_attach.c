/* volume_attach.c: sandbox volumes named by templates and attached by
 * their sandboxes (docs/volumes.md, "Attach").
 *
 * A template names up to VA_MAX volumes, each by id or by name, with a
 * mount path and a mode. templates.c checks the list (va_check), resolves
 * and decides it outside its transaction (va_decide: manage for a
 * read-write mount, read for a read-only one, on the volume itself, with
 * the caller's own credential), then in its write transaction re-reads
 * what it decided and writes template_volumes (va_write_tx), or, for an
 * update that changes what the guest runs without a new list, checks the
 * current list is the one decided (va_same_tx). A change meanwhile is
 * CONFLICT volumes-changed: the caller retries and is decided again.
 *
 * A sandbox's create (sandboxes.c, instances.c) locks the template's
 * volumes before its instance exists (va_prepare_tx): one read-write
 * attachment alone or any number of read-only ones among live instances,
 * all on one host. The lock is taken in one statement and the attachments
 * read in the next, so the second sees what a create that held the lock
 * before committed. The instance then records its attachments
 * (va_attach_tx), takes the volumes in its cloud-config (bootdata.c) and
 * is placed only on their host, while it carries CAP_INSTANCE_VOLUMES
 * (node_place.c); node_spec.c hands bcd the attachments. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "volume_attach.h"
#include "volumes.h"
#include "util.h"
#include "validate.h"

/* Never a mount point, nor anything inside the second list. */
static const char *const system_paths[] = {
	"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root",
	"/run", "/sbin", "/sys", "/tmp", "/usr", "/var",
};
static const char *const system_trees[] = {"/proc", "/sys", "/dev", "/boot"};

__attribute__((format(printf, 5, 6)))
static int bad_volume(bc_error *err, size_t i, const char *what, const char *reason,
		      const char *fmt, ...)
{
	char field[48], msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(field, sizeof(field), "volumes[%zu]%s", i, what);
	invalid(err, field, "%s", msg);
	return bc_error_detail(err, "reason", "%s", reason);
}

/* a is b, or a directory b is inside (or the other way round) */
static bool nests(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;

	return strncmp(a, b, n) == 0 && (la == lb || (la < lb ? b[n] : a[n]) == '/');
}

static const char *system_path(const char *m)
{
	for (size_t i = 0; i < ARRAY_SIZE(system_paths); i++)
		if (strcmp(m, system_paths[i]) == 0)
			return "is a system path";
	for (size_t i = 0; i < ARRAY_SIZE(system_trees); i++)
		if (nests(system_trees[i], m))
			return "is inside /proc, /sys, /dev or /boot";
	return NULL;
}

int va_check(Bc__Compute__V1__TemplateVolume *const *v, size_t n, bc_error *err)
{
	if (n > VA_MAX) {
		invalid(err, "volumes", "a template names at most %d volumes", VA_MAX);
		return bc_error_detail(err, "reason", "too-many-volumes");
	}
	for (size_t i = 0; i < n; i++) {
		const char *m = v[i]->mount_path, *why;
		if (!*v[i]->volume_id == !*v[i]->name)
			return bad_volume(err, i, "", "volume-id-or-name",
					  "name a volume by volumeId or by name%s", ", not both");
		if (!str_is_printable(v[i]->volume_id, 39) || !str_is_printable(v[i]->name, 64))
			return bad_volume(err, i, "", "volume-id-or-name", "%s",
					  "a volume id or name of printable characters");
		if (strcmp(m, "/") == 0)
			return bad_volume(err, i, ".mountPath", "mount-path-system",
					  "mountPath %s is a system path", m);
		if (!bootdata_mount_path_ok(m))
			return bad_volume(err, i, ".mountPath", "mount-path-invalid", "%s",
					  "mountPath must be absolute, of [A-Za-z0-9._-] segments, "
					  "without . or .. (at most 128 bytes)");
		if ((why = system_path(m)))
			return bad_volume(err, i, ".mountPath", "mount-path-system",
					  "mountPath %s", why);
		for (size_t j = 0; j < i; j++)
			if (nests(v[j]->mount_path, m))
				return bad_volume(err, i, ".mountPath", "mount-path-overlap",
						  "mountPath shares or nests with %s",
						  v[j]->mount_path);
	}
	return 0;
}

static int credential_required(const struct principal *p, bc_error *err)
{
	if (p && p->kind == PRINCIPAL_IDENTITY && !*p->delegation_id)
		return 0;
	bc_error_set(err, BC_ACCESS_DENIED, "naming a volume in a template needs the caller's "
		     "own credential");
	return bc_error_detail(err, "reason", "credential-required");
}

static int decide_one(rpc_call *c, const char *tenant, const char *pool, size_t i,
		      const Bc__Compute__V1__TemplateVolume *q, struct va_item *out,
		      bc_error *err)
{
	Bc__Compute__V1__SandboxVolume *v = NULL;
	int r;

	if ((r = vol_lookup(c, tenant, q->volume_id, q->name, &v, err)) < 0)
		return r;
	if (strcmp(v->pool_id, pool) != 0)
		return bad_volume(err, i, "", "volume-pool", "volume %s is not in the template's "
				  "pool", v->id);
	if (strcmp(v->state, "ready") != 0) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox volume %s is %s", v->id, v->state);
		bc_error_detail(err, "volumeId", "%s", v->id);
		return bc_error_detail(err, "reason", "volume-not-ready");
	}
	if ((r = vol_decide_on(c, q->read_only ? "compute:sandboxes:read"
				: "compute:sandboxes:manage", v, err)) < 0)
		return r;
	*out = (struct va_item){.read_only = q->read_only};
	snprintf(out->asked_id, sizeof(out->asked_id), "%s", q->volume_id);
	snprintf(out->asked_name, sizeof(out->asked_name), "%s", *q->volume_id ? "" : q->name);
	snprintf(out->id, sizeof(out->id), "%s", v->id);
	snprintf(out->mount, sizeof(out->mount), "%s", q->mount_path);
	return 0;
}

int va_decide(rpc_call *c, const char *tenant, const char *pool,
	      Bc__Compute__V1__TemplateVolume *const *v, size_t n, struct va_set *ret,
	      bc_error *err)
{
	int r;

	ret->n = 0;
	if (n == 0)
		return 0;
	if ((r = credential_required(ctl_principal(c), err)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if ((r = decide_one(c, tenant, pool, i, v[i], &ret->v[i], err)) < 0)
			return r;
		for (size_t j = 0; j < i; j++)
			if (strcmp(ret->v[j].id, ret->v[i].id) == 0)
				return bad_volume(err, i, "", "volume-repeated",
						  "volume %s is named twice", ret->v[i].id);
		ret->n = i + 1;
	}
	return 0;
}

static int changed(bc_error *err, const char *template_id)
{
	bc_error_set(err, BC_CONFLICT, "the volumes of sandbox template %s changed since the "
		     "update was decided; retry", template_id);
	return bc_error_detail(err, "reason", "volumes-changed");
}

int va_write_tx(struct db *d, const char *tenant, const char *template_id,
		const struct va_set *s, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	for (size_t i = 0; i < s->n; i++) {
		const struct va_item *it = &s->v[i];
		p.n = 0;
		dbp_str(&p, tenant);
		dbp_str(&p, it->asked_id);
		dbp_str(&p, it->asked_name);
		rc = db_exec(d, &r, "SELECT id, state FROM volumes WHERE tenant_id = $1 AND state <> "
			     "'deleted' AND (id = $2 OR ($2 = '' AND name = $3)) FOR SHARE", &p);
		if (rc < 0)
			return db_fail(err, rc);
		rc = PQntuples(r) != 1 || strcmp(db_val(r, 0, 0), it->id) != 0 ||
		     strcmp(db_val(r, 0, 1), "ready") != 0;
		PQclear(r);
		if (rc)
			return changed(err, template_id);
	}
	p.n = 0;
	dbp_str(&p, template_id);
	if ((rc = db_exec(d, NULL, "DELETE FROM template_volumes WHERE template_id = $1", &p)) < 0)
		return db_fail(err, rc);
	for (size_t i = 0; i < s->n; i++) {
		p.n = 0;
		dbp_str(&p, template_id);
		dbp_str(&p, s->v[i].id);
		dbp_i64(&p, (int64_t)i);
		dbp_str(&p, s->v[i].mount);
		dbp_bool(&p, s->v[i].read_only);
		rc = db_exec(d, NULL, "INSERT INTO template_volumes (template_id, volume_id, "
			     "position, mount_path, read_only) VALUES ($1, $2, $3, $4, $5)", &p);
		if (rc < 0)
			return db_fail(err, rc);
	}
	return 0;
}

/* va_same_tx's columns. */
enum { VS_VOLUME_ID, VS_READ_ONLY };

int va_same_tx(struct db *d, const char *template_id, const struct va_set *s, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, same;

	dbp_str(&p, template_id);
	rc = db_exec(d, &r, "SELECT volume_id, read_only FROM template_volumes WHERE template_id = "
		     "$1 ORDER BY position", &p);
	if (rc < 0)
		return db_fail(err, rc);
	same = (size_t)PQntuples(r) == s->n;
	for (int i = 0; same && i < PQntuples(r); i++)
		same = strcmp(db_val(r, i, VS_VOLUME_ID), s->v[i].id) == 0 &&
		       (s->v[i].read_only || !db_bool(r, i, VS_READ_ONLY)) &&
		       (!s->v[i].read_only || db_bool(r, i, VS_READ_ONLY));
	PQclear(r);
	return same ? 0 : changed(err, template_id);
}

void va_fill(rpc_call *c, Bc__Compute__V1__SandboxTemplate *t, char *text)
{
	size_t n = 0;
	char *line, *save = NULL;

	for (const char *p = text; *p; p++)
		n += *p == '\n';
	if (!*text)
		return;
	t->volumes = rpc_alloc(c, (n + 1) * sizeof(*t->volumes));
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		Bc__Compute__V1__TemplateVolume *v = rpc_new(c,
			&bc__compute__v1__template_volume__descriptor);
		char *f[4] = {line, NULL, NULL, NULL};
		for (int k = 1; k < 4 && f[k - 1]; k++) {
			f[k] = strchr(f[k - 1], '\t');
			if (f[k])
				*f[k]++ = '\0';
		}
		if (!f[3])
			continue;
		v->volume_id = f[0];
		v->name = f[1];
		v->mount_path = f[2];
		v->read_only = strcmp(f[3], "true") == 0;
		t->volumes[t->n_volumes++] = v;
	}
}

/* ------------------------------------------------------------- attaching */

/* va_prepare_tx's second read, in template order */
enum { AT_ID, AT_SERIAL, AT_NODE, AT_STATE, AT_MOUNT, AT_RO, AT_HOLDER, AT_HOLDER_RW };

static int in_use(bc_error *err, const char *id, const char *holder)
{
	bc_error_set(err, BC_CONFLICT, "sandbox volume %s is in use by instance %s", id, holder);
	bc_error_detail(err, "volumeId", "%s", id);
	bc_error_detail(err, "by", "%s", holder);
	return bc_error_detail(err, "reason", "volume-in-use");
}

static int judge_row(const PGresult *r, int i, struct va_attach *a, bc_error *err)
{
	const char *id = db_val(r, i, AT_ID), *holder = db_val(r, i, AT_HOLDER);

	if (strcmp(db_val(r, i, AT_STATE), "ready") != 0) {
		bc_error_set(err, BC_INVALID_STATE, "sandbox volume %s is %s", id,
			     db_val(r, i, AT_STATE));
		bc_error_detail(err, "volumeId", "%s", id);
		return bc_error_detail(err, "reason", "volume-not-ready");
	}
	if (i > 0 && strcmp(a->node, db_val(r, i, AT_NODE)) != 0) {
		bc_error_set(err, BC_INVALID_STATE, "the template's volumes are on different hosts "
			     "(%s, %s)", a->node, db_val(r, i, AT_NODE));
		return bc_error_detail(err, "reason", "volumes-on-different-hosts");
	}
	/* a read-write attachment alone; read-only ones only beside each other */
	if (holder && (!db_bool(r, i, AT_RO) || db_bool(r, i, AT_HOLDER_RW)))
		return in_use(err, id, holder);
	snprintf(a->node, sizeof(a->node), "%s", db_val(r, i, AT_NODE));
	snprintf(a->ids[i], sizeof(a->ids[i]), "%s", id);
	snprintf(a->serials[i], sizeof(a->serials[i]), "%s", db_val(r, i, AT_SERIAL));
	snprintf(a->mounts[i], sizeof(a->mounts[i]), "%s", db_val(r, i, AT_MOUNT));
	a->boot[i] = (struct bootdata_volume){.serial = a->serials[i], .mount_path = a->mounts[i],
					      .read_only = db_bool(r, i, AT_RO)};
	return 0;
}

int va_prepare_tx(struct db *d, const char *template_id, struct va_attach *a, bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	a->n = 0;
	a->node[0] = '\0';
	dbp_str(&p, template_id);
	/* the lock first (in id order), the attachments in the next statement */
	rc = db_exec(d, NULL, "SELECT v.id FROM volumes v JOIN template_volumes tv ON "
		     "tv.volume_id = v.id WHERE tv.template_id = $1 ORDER BY v.id FOR UPDATE OF v",
		     &p);
	if (rc < 0)
		return db_fail(err, rc);
	rc = db_exec(d, &r, "SELECT v.id, v.serial, v.node_id, v.state, tv.mount_path, "
		     "tv.read_only, h.instance_id, coalesce(h.rw, false) FROM template_volumes tv "
		     "JOIN volumes v ON v.id = tv.volume_id LEFT JOIN LATERAL (SELECT "
		     "iv.instance_id, NOT iv.read_only AS rw FROM instance_volumes iv JOIN instances "
		     "i ON i.id = iv.instance_id WHERE iv.volume_id = v.id AND i.state <> 'deleted' "
		     "ORDER BY iv.read_only, iv.instance_id LIMIT 1) h ON true WHERE tv.template_id "
		     "= $1 ORDER BY tv.position", &p);
	if (rc < 0)
		return db_fail(err, rc);
	for (int i = 0; i < PQntuples(r) && i < VA_MAX && rc == 0; i++)
		rc = judge_row(r, i, a, err);
	if (rc == 0)
		a->n = (size_t)(PQntuples(r) < VA_MAX ? PQntuples(r) : VA_MAX);
	PQclear(r);
	return rc;
}

int va_attach_tx(struct db *d, const char *instance_id, const struct va_attach *a,
		 bc_error *err)
{
	struct dbp p = {0};
	int rc;

	for (size_t i = 0; i < a->n; i++) {
		p.n = 0;
		dbp_str(&p, instance_id);
		dbp_str(&p, a->ids[i]);
		dbp_bool(&p, a->boot[i].read_only);
		rc = db_exec(d, NULL, "INSERT INTO instance_volumes (instance_id, volume_id, "
			     "read_only) VALUES ($1, $2, $3)", &p);
		if (rc < 0)
			return db_fail(err, rc);
	}
	return 0;
}
