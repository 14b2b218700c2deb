/* doctor.c: the control plane's self-check. Each check is one query that
 * returns its findings as rows (node, message); the table below names the
 * check and its severity. `bc-controller doctor` prints them, and the
 * admin method Doctor.Run (POST /api/admin/doctor/run) returns them, so an
 * operator asks "why" in one place. Later checks join the table.
 *
 * The volume-store checks (docs/volumes.md, "Booking against real
 * headroom"):
 *   vps.volumes.storage-unreported  warn: a host that keeps volumes
 *       (bc.dev/cap.instance.volumes) never reported its store (an older
 *       bcd): it takes no volume;
 *   vps.volumes.storage-stale       warn: a connected host's store report
 *       is over an hour old (it sends no status, or nothing keeps it);
 *   vps.volumes.storage-full        fail: the volumes booked on a host
 *       exceed what its store can hold (its headroom is negative), for
 *       example after the filesystem filled up. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/admin/v1/admin.pb-c.h"
#include "doctor.h"
#include "log.h"
#include "util.h"
#include "volumes.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static const struct check {
	const char *name, *severity;
	const char *sql;        /* rows: node id, message */
} checks[] = {
	{"vps.volumes.storage-unreported", "warn",
	 "SELECT n.id, 'keeps volumes (bc.dev/cap.instance.volumes) but never reported its "
	 "volume store: it takes no volume (an older bcd?)' FROM nodes n WHERE n.state <> "
	 "'retired' AND n.labels ? 'bc.dev/cap.instance.volumes' AND NOT EXISTS (SELECT 1 FROM "
	 "host_volume_storage h WHERE h.node_id = n.id) ORDER BY n.id"},
	{"vps.volumes.storage-stale", "warn",
	 "SELECT n.id, 'its volume store report is ' || floor(extract(epoch FROM now() - "
	 "h.reported_at) / 60) || ' minutes old while it reports (bookings use the old "
	 "numbers)' FROM nodes n JOIN host_volume_storage h ON h.node_id = n.id WHERE n.state = "
	 "'ready' AND n.last_report_at > now() - interval '" STR(DOCTOR_CONNECTED_SECONDS)
	 " seconds' AND h.reported_at < now() - interval '" STR(DOCTOR_STORAGE_STALE_SECONDS)
	 " seconds' ORDER BY n.id"},
	{"vps.volumes.storage-full", "fail",
	 "SELECT n.id, 'the volumes booked on it exceed what its volume store can hold by ' || "
	 "ceil(-hr / 1073741824.0) || ' GiB (available ' || h.available_bytes / 1073741824 || "
	 "' GiB, reserved ' || h.reserved_bytes / 1073741824 || ' GiB, booked ' || coalesce(("
	 "SELECT sum(a.disk_gib) FROM allocations a WHERE a.node_id = n.id AND a.owner_kind = "
	 "'volume' AND a.released_at IS NULL), 0) || ' GiB)' FROM nodes n JOIN "
	 "host_volume_storage h ON h.node_id = n.id, LATERAL (SELECT " VOL_HEADROOM_SQL " AS hr) x "
	 "WHERE n.state <> 'retired' AND hr < 0 ORDER BY n.id"},
};

static void add(struct doctor_finding **v, size_t *n, const struct check *c, const char *node,
		const char *msg)
{
	struct doctor_finding *f;

	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	f = &(*v)[(*n)++];
	snprintf(f->check, sizeof(f->check), "%s", c->name);
	snprintf(f->severity, sizeof(f->severity), "%s", c->severity);
	snprintf(f->node_id, sizeof(f->node_id), "%s", node ? node : "");
	snprintf(f->message, sizeof(f->message), "%s", msg ? msg : "");
}

/* The columns every check's SELECT answers, in order. */
enum { DC_SUBJECT, DC_DETAIL };

int doctor_run(struct db *d, struct doctor_finding **ret, size_t *ret_n)
{
	struct doctor_finding *v = NULL;
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(checks); i++) {
		PGresult *r = NULL;
		int rc = db_exec(d, &r, checks[i].sql, NULL);
		if (rc < 0) {
			free(v);
			return rc;
		}
		for (int k = 0; k < PQntuples(r); k++)
			add(&v, &n, &checks[i], db_val(r, k, DC_SUBJECT), db_val(r, k, DC_DETAIL));
		PQclear(r);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int doctor_command(struct ctl_app *app)
{
	struct db *d = db_open(app->cfg.database);
	struct doctor_finding *f = NULL;
	size_t n = 0;
	bool failed = false;
	int r;

	if (!d) {
		log_error("doctor: cannot connect to the database");
		return -EIO;
	}
	r = doctor_run(d, &f, &n);
	db_close(d);
	if (r < 0) {
		log_error("doctor: a check could not run: %s", strerror(-r));
		return -EIO;
	}
	for (size_t i = 0; i < n; i++) {
		printf("%s %s %s: %s\n", f[i].severity, f[i].check, f[i].node_id, f[i].message);
		failed = failed || strcmp(f[i].severity, "fail") == 0;
	}
	if (n == 0)
		printf("ok\n");
	free(f);
	return failed ? -EIO : 0;
}

static int doctor_rpc_run(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			  bc_error *err)
{
	Bc__Admin__V1__DoctorReport *rep;
	struct doctor_finding *f = NULL;
	size_t n = 0;
	int rc;

	if (m->n_unknown_fields)
		return bc_error_set(err, BC_INVALID_INPUT, "the request has unknown fields");
	if ((rc = doctor_run(ctl_db(c), &f, &n)) < 0)
		return db_fail(err, rc);
	rep = rpc_new(c, &bc__admin__v1__doctor_report__descriptor);
	rep->ok = true;
	rep->findings = rpc_alloc(c, (n + 1) * sizeof(*rep->findings));
	for (size_t i = 0; i < n; i++) {
		Bc__Admin__V1__DoctorFinding *x = rpc_new(c,
			&bc__admin__v1__doctor_finding__descriptor);
		x->check = rpc_strdup(c, f[i].check);
		x->severity = rpc_strdup(c, f[i].severity);
		x->node_id = rpc_strdup(c, f[i].node_id);
		x->message = rpc_strdup(c, f[i].message);
		rep->ok = rep->ok && strcmp(f[i].severity, "fail") != 0;
		rep->findings[rep->n_findings++] = x;
	}
	free(f);
	*ret = &rep->base;
	return 0;
}

const struct rpc_handler *doctor_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Run", RPC_UNARY, {.unary = doctor_rpc_run}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
