/* sbx_bench.c: the sandbox rows of `make bench` (bench/sandboxes.sh). Each
 * mode prints one line of key=value figures.
 *
 *   ready   --target ADDR --ca F --token T --template ID [--concurrency C] [--count N]
 *           Sandboxes.Create, then Get every 2 ms until ready: create -> ready
 *           latency per sandbox, and sandboxes made ready per second
 *   peer    --conninfo S [--concurrency C] [--count N]
 *           the same rows a create writes (instance, authorization row,
 *           sandbox, booking, address lease, idempotency-free events), as
 *           bare INSERTs in one PostgreSQL transaction each
 *   sql     --conninfo S --sql Q [--count N]
 *           one statement N times: p50/p99
 *   warm    as ready, with the create's wait (--wait-ms, default 20000): a
 *           warm claim -> ready; also prints how many answers said warm
 *   warm-peer --conninfo S [--concurrency C] [--count N]
 *           the same row updates as a claim and its readiness, bare: in one
 *           transaction the oldest paused row taken FOR UPDATE SKIP LOCKED
 *           and handed over, the instance's authorization row moved, the
 *           sandbox's inserted, the sandbox inserted, the node's generation
 *           bumped, an event; then, as the host's report, the instance
 *           running, the sandbox ready and its event in a second one
 *   attest  --target ADDR --ca F --cert F --key F --conninfo S --template ID
 *           [--count N]
 *           as bcd (the node's mTLS identity): for up to N sandboxes of the
 *           template whose epoch is pending, the bootstrap value from the
 *           sealed boot data (Node.GetBootData, untimed), then Node.Attest
 *           timed per call, each after a Health.Check on the same channel,
 *           timed too: attest p50/p99 beside health p50/p99
 *   warm-attest  as warm (--template of a template with identity on,
 *           --concurrency, --count; no wait) plus --cert/--key/--conninfo:
 *           each claim, then as bcd and its guest: the claim's
 *           identity_bootstrap_ref (read from the database, as bcd reads it
 *           from its NodeSpec), Node.GetBootData of it, Node.Attest: warm
 *           claim -> identity live per sandbox */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "rpc.h"
#include "util.h"

struct opts {
	const char *mode, *target, *ca, *token, *template_id, *conninfo, *sql, *cert, *key;
	int concurrency, count, wait_ms;
};

static struct opts o = {.concurrency = 1, .count = 100};
static int warm_answers;
/* SBX_BENCH_TRACE=FILE: one line per sandbox made ready, "<id> <start>
 * <end>" in wall-clock microseconds, to line up with the daemons' logs */
static FILE *trace;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void parse(int argc, char **argv)
{
	o.mode = argc > 1 ? argv[1] : "";
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i] + 2, *v = argv[i + 1];
		if (!strcmp(k, "target")) o.target = v;
		else if (!strcmp(k, "ca")) o.ca = v;
		else if (!strcmp(k, "token")) o.token = v;
		else if (!strcmp(k, "template")) o.template_id = v;
		else if (!strcmp(k, "conninfo")) o.conninfo = v;
		else if (!strcmp(k, "sql")) o.sql = v;
		else if (!strcmp(k, "cert")) o.cert = v;
		else if (!strcmp(k, "key")) o.key = v;
		else if (!strcmp(k, "concurrency")) o.concurrency = atoi(v);
		else if (!strcmp(k, "count")) o.count = atoi(v);
		else if (!strcmp(k, "wait-ms")) o.wait_ms = atoi(v);
		else {
			fprintf(stderr, "sbx_bench: unknown flag %s\n", argv[i]);
			exit(1);
		}
	}
	if (o.concurrency < 1)
		o.concurrency = 1;
}

struct lat {
	pthread_mutex_t mu;
	int64_t *v;
	size_t n, cap;
};

static void lat_add(struct lat *l, int64_t us)
{
	pthread_mutex_lock(&l->mu);
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 256;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		if (!l->v)
			abort();
	}
	l->v[l->n++] = us;
	pthread_mutex_unlock(&l->mu);
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static int64_t pct(struct lat *l, double p)
{
	if (l->n == 0)
		return 0;
	qsort(l->v, l->n, sizeof(*l->v), cmp64);
	return l->v[(size_t)((double)(l->n - 1) * p)];
}

struct worker {
	rpc_client *c;
	struct lat *lat;
	int todo, errors, seq;
	pthread_t t;
};

static rpc_client *client(void)
{
	static char *ca;
	struct rpc_tls tls = {0};
	struct rpc_client_opts co = {.target = o.target, .bearer = o.token};

	if (!ca && file_read_all(o.ca, 1 << 20, &ca, NULL) < 0) {
		fprintf(stderr, "sbx_bench: cannot read %s\n", o.ca);
		exit(1);
	}
	tls.ca_pem = ca;
	co.tls = &tls;
	return rpc_client_new(&co);
}

/* ---------------------------------------------------------------- ready */

/* 1 when the answer is already ready, 0 when not yet, -1 on failure. */
static int create_one(rpc_client *c, char *ret_id, size_t len)
{
	Bc__Compute__V1__CreateSandboxRequest q = BC__COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT;
	Bc__Compute__V1__Sandbox *s = NULL;
	char path[128];
	bc_error err;
	int ret;

	Bc__Compute__V1__Wait wait = BC__COMPUTE__V1__WAIT__INIT;

	q.template_id = (char *)o.template_id;
	if (o.wait_ms > 0) {
		wait.timeout_ms = o.wait_ms;
		q.wait = &wait;
	}
	rpc_method_path(&bc__compute__v1__sandboxes__descriptor, "Create", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &bc__compute__v1__sandbox__descriptor,
			     (ProtobufCMessage **)&s, 30000, &err) < 0) {
		fprintf(stderr, "create: %s: %s\n", bc_code_name(err.code), err.message);
		return -1;
	}
	snprintf(ret_id, len, "%s", s->id);
	if (s->warm)
		__atomic_add_fetch(&warm_answers, 1, __ATOMIC_RELAXED);
	ret = strcmp(s->state, "ready") == 0;
	protobuf_c_message_free_unpacked(&s->base, NULL);
	return ret;
}

static bool is_ready(rpc_client *c, const char *id)
{
	Bc__Compute__V1__GetSandboxRequest q = BC__COMPUTE__V1__GET_SANDBOX_REQUEST__INIT;
	Bc__Compute__V1__Sandbox *s = NULL;
	char path[128];
	bc_error err;
	bool ready;

	q.sandbox_id = (char *)id;
	rpc_method_path(&bc__compute__v1__sandboxes__descriptor, "Get", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &bc__compute__v1__sandbox__descriptor,
			     (ProtobufCMessage **)&s, 5000, &err) < 0)
		return false;
	ready = strcmp(s->state, "ready") == 0;
	protobuf_c_message_free_unpacked(&s->base, NULL);
	return ready;
}

static void *ready_worker(void *arg)
{
	struct worker *w = arg;
	char id[64];

	for (int i = 0; i < w->todo; i++) {
		int64_t t0 = mono_us(), w0 = wall_us();
		int rc = create_one(w->c, id, sizeof(id));
		bool ok = rc == 1;
		if (rc < 0) {
			w->errors++;
			continue;
		}
		while (!ok && !(ok = is_ready(w->c, id)) && mono_us() - t0 < 30000000)
			usleep(2000);
		if (!ok) {
			w->errors++;
			continue;
		}
		lat_add(w->lat, mono_us() - t0);
		if (trace) {
			pthread_mutex_lock(&trace_mu);
			fprintf(trace, "%s %" PRId64 " %" PRId64 "\n", id, w0, wall_us());
			pthread_mutex_unlock(&trace_mu);
		}
	}
	return NULL;
}

/* Run fn on o.concurrency threads sharing one client; elapsed in *ret_us. */
static int run(void *(*fn)(void *), struct lat *lat, rpc_client *c, int64_t *ret_us)
{
	struct worker *w = calloc((size_t)o.concurrency, sizeof(*w));
	int64_t t0 = mono_us();
	int errors = 0;

	for (int i = 0; i < o.concurrency; i++) {
		w[i] = (struct worker){.c = c, .lat = lat, .seq = i,
				       .todo = o.count / o.concurrency + (i < o.count % o.concurrency)};
		pthread_create(&w[i].t, NULL, fn, &w[i]);
	}
	for (int i = 0; i < o.concurrency; i++) {
		pthread_join(w[i].t, NULL);
		errors += w[i].errors;
	}
	*ret_us = mono_us() - t0;
	free(w);
	return errors;
}

static int64_t tv_us(const struct timeval *tv)
{
	return (int64_t)tv->tv_sec * 1000000 + tv->tv_usec;
}

/* also prints cpu_us: the client's own CPU (user + system, every thread)
 * during the run */
static int mode_ready(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	rpc_client *c = client();
	int64_t el = 0;
	struct rusage ru0, ru1;
	int errors;

	getrusage(RUSAGE_SELF, &ru0);
	errors = run(ready_worker, &lat, c, &el);
	getrusage(RUSAGE_SELF, &ru1);
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d warm=%d cpu_us=%lld\n",
	       (double)lat.n * 1e6 / (double)el, (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors, warm_answers,
	       (long long)(tv_us(&ru1.ru_utime) + tv_us(&ru1.ru_stime) - tv_us(&ru0.ru_utime) -
			   tv_us(&ru0.ru_stime)));
	rpc_client_free(c);
	return errors ? 1 : 0;
}

/* ----------------------------------------------------------------- peer */

#define PEER_TABLES                                                                        \
	"CREATE TABLE IF NOT EXISTS p_inst (id text PRIMARY KEY, tenant text, shape jsonb, "   \
	"state text, created_at timestamptz DEFAULT now()); CREATE TABLE IF NOT EXISTS "      \
	"p_authz (id text PRIMARY KEY, attrs jsonb); CREATE TABLE IF NOT EXISTS p_sbx (id "    \
	"text PRIMARY KEY, inst text, expires_at timestamptz); CREATE TABLE IF NOT EXISTS "   \
	"p_alloc (id bigserial PRIMARY KEY, owner text, vcpus int); CREATE TABLE IF NOT "     \
	"EXISTS p_lease (addr bigserial PRIMARY KEY, inst text); CREATE TABLE IF NOT EXISTS " \
	"p_event (id bigserial PRIMARY KEY, type text, data jsonb)"

#define PEER_TXN                                                                           \
	"BEGIN; INSERT INTO p_inst (id, tenant, shape, state) VALUES ($1 || 'i', 't', "       \
	"'{\"vcpus\": 1}', 'provisioning'); INSERT INTO p_authz VALUES ($1 || 'a', "          \
	"'{\"ttlSeconds\": \"3600\"}'); INSERT INTO p_authz VALUES ($1 || 'b', '{}'); INSERT " \
	"INTO p_alloc (owner, vcpus) VALUES ($1, 1); INSERT INTO p_lease (inst) VALUES ($1); " \
	"INSERT INTO p_sbx VALUES ($1, $1 || 'i', now() + interval '1 hour'); INSERT INTO "   \
	"p_event (type, data) VALUES ('instance.created', '{}'), ('sandbox.created', '{}'); " \
	"COMMIT"

static void *peer_worker(void *arg)
{
	struct worker *w = arg;
	PGconn *c = PQconnectdb(o.conninfo);

	for (int i = 0; i < w->todo && PQstatus(c) == CONNECTION_OK; i++) {
		char id[64], *sql;
		int64_t t0 = mono_us();
		PGresult *r;
		id_new("p", id, sizeof(id));
		/* multi-statement text cannot take parameters: the id is ours */
		sql = xasprintf("%s", PEER_TXN);
		for (char *p; (p = strstr(sql, "$1"));) {
			char *n = xasprintf("%.*s'%s'%s", (int)(p - sql), sql, id, p + 2);
			free(sql);
			sql = n;
		}
		r = PQexec(c, sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			w->errors++;
		else
			lat_add(w->lat, mono_us() - t0);
		PQclear(r);
		free(sql);
	}
	PQfinish(c);
	return NULL;
}

static int mode_peer(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	PGconn *c = PQconnectdb(o.conninfo);
	int64_t el = 0;
	int errors;

	PQclear(PQexec(c, PEER_TABLES));
	PQfinish(c);
	errors = run(peer_worker, &lat, NULL, &el);
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d\n",
	       (double)lat.n * 1e6 / (double)el, (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	return errors ? 1 : 0;
}

/* ------------------------------------------------------------ warm peer */

#define WPEER_TABLES                                                                       \
	"DROP TABLE IF EXISTS w_inst, w_authz, w_sbx, w_change, w_event; CREATE TABLE w_inst (id " \
	"text PRIMARY KEY, tmpl text, state text, desired text, sbx text, claimed_at "       \
	"timestamptz, created_at timestamptz DEFAULT clock_timestamp()); CREATE INDEX ON "    \
	"w_inst (tmpl, created_at, id) WHERE tmpl IS NOT NULL; CREATE TABLE w_authz (id text " \
	"PRIMARY KEY, owner text, attrs jsonb); CREATE TABLE w_sbx (id text PRIMARY KEY, "    \
	"inst text, state text, created_at timestamptz DEFAULT now(), ready_at timestamptz); " \
	"CREATE TABLE w_change (id bigserial PRIMARY KEY, node text); CREATE TABLE w_event "  \
	"(id bigserial PRIMARY KEY, type text, data jsonb)"

#define WPEER_CLAIM                                                                        \
	"BEGIN; WITH c AS (SELECT id FROM w_inst WHERE tmpl = 't' AND state = 'paused' ORDER " \
	"BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED), u AS (UPDATE w_inst i SET sbx = " \
	"$1, tmpl = NULL, claimed_at = now(), desired = 'running' FROM c WHERE i.id = c.id "  \
	"RETURNING i.id) UPDATE w_authz a SET owner = 'o', attrs = a.attrs || "               \
	"jsonb_build_object('sandboxId', $1::text) FROM u WHERE a.id = u.id; INSERT INTO "    \
	"w_authz VALUES ($1, 'o', '{\"ttlSeconds\": \"3600\"}'); INSERT INTO w_sbx (id, "   \
	"inst, state) SELECT $1, id, 'starting' FROM w_inst WHERE sbx = $1; INSERT INTO "      \
	"w_change (node) VALUES ('n'); INSERT INTO w_event (type, data) VALUES "              \
	"('sandbox.created', '{}'); COMMIT; "                                                  \
	"BEGIN; UPDATE w_inst SET state = 'running' WHERE sbx = $1; UPDATE w_sbx SET state = " \
	"'ready', ready_at = now() WHERE id = $1; INSERT INTO w_event (type, data) VALUES "   \
	"('sandbox.ready', '{}'); COMMIT"

static char *with_id(const char *text, const char *id)
{
	char *sql = xasprintf("%s", text);

	for (char *p; (p = strstr(sql, "$1"));) {
		char *n = xasprintf("%.*s'%s'%s", (int)(p - sql), sql, id, p + 2);
		free(sql);
		sql = n;
	}
	return sql;
}

static void *wpeer_worker(void *arg)
{
	struct worker *w = arg;
	PGconn *c = PQconnectdb(o.conninfo);

	for (int i = 0; i < w->todo && PQstatus(c) == CONNECTION_OK; i++) {
		char id[64], *sql;
		int64_t t0 = mono_us();
		PGresult *r;
		id_new("s", id, sizeof(id));
		/* multi-statement text cannot take parameters: the id is ours */
		sql = with_id(WPEER_CLAIM, id);
		r = PQexec(c, sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			w->errors++;
		else
			lat_add(w->lat, mono_us() - t0);
		PQclear(r);
		free(sql);
	}
	PQfinish(c);
	return NULL;
}

static int mode_wpeer(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	PGconn *c = PQconnectdb(o.conninfo);
	char *fill;
	int64_t el = 0;
	int errors;

	PQclear(PQexec(c, WPEER_TABLES));
	/* a pool as large as the run: every claim finds a paused row */
	fill = xasprintf("INSERT INTO w_inst (id, tmpl, state, desired) SELECT 'w' || g, 't', "
			 "'paused', 'paused' FROM generate_series(1, %d) g; INSERT INTO w_authz "
			 "SELECT id, 'author', '{}' FROM w_inst", o.count);
	PQclear(PQexec(c, fill));
	free(fill);
	PQfinish(c);
	errors = run(wpeer_worker, &lat, NULL, &el);
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d\n",
	       (double)lat.n * 1e6 / (double)el, (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	return errors ? 1 : 0;
}

static int mode_sql(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	PGconn *c = PQconnectdb(o.conninfo);
	int errors = 0;

	for (int i = 0; i < o.count && PQstatus(c) == CONNECTION_OK; i++) {
		int64_t t0 = mono_us();
		PGresult *r = PQexec(c, o.sql);
		if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
			errors++;
		else
			lat_add(&lat, mono_us() - t0);
		PQclear(r);
	}
	PQfinish(c);
	printf("p50_us=%lld p99_us=%lld n=%zu errors=%d\n", (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	return errors ? 1 : 0;
}

/* -------------------------------------------------------------- identity */

/* The node's own mTLS client (what bcd holds). */
static rpc_client *node_client(void)
{
	static char *ca, *cert, *key;
	struct rpc_tls tls = {0};
	struct rpc_client_opts co = {.target = o.target};

	if ((!ca && file_read_all(o.ca, 1 << 20, &ca, NULL) < 0) ||
	    (!cert && file_read_all(o.cert, 1 << 20, &cert, NULL) < 0) ||
	    (!key && file_read_all(o.key, 1 << 20, &key, NULL) < 0)) {
		fprintf(stderr, "sbx_bench: cannot read --ca, --cert or --key\n");
		exit(1);
	}
	tls.ca_pem = ca;
	tls.cert_pem = cert;
	tls.key_pem = key;
	co.tls = &tls;
	return rpc_client_new(&co);
}

static PGconn *db(void)
{
	PGconn *pg = PQconnectdb(o.conninfo ? o.conninfo : "");

	if (PQstatus(pg) != CONNECTION_OK) {
		fprintf(stderr, "sbx_bench: %s", PQerrorMessage(pg));
		exit(1);
	}
	return pg;
}

/* Node.GetBootData(instance, ref); the first bcb_ value in it (whole when
 * the data is the value itself, a warm claim's) into out. 0 or -1. */
static int boot_value(rpc_client *nc, const char *instance, const char *ref, char *out,
		      size_t len)
{
	Bc__Node__V1__GetBootDataRequest q = BC__NODE__V1__GET_BOOT_DATA_REQUEST__INIT;
	Bc__Node__V1__BootData *b = NULL;
	char path[128], *v;
	size_t n = 0;
	bc_error err;
	int rc = -1;

	q.instance_id = (char *)instance;
	q.ref = (char *)ref;
	rpc_method_path(&bc__node__v1__node__descriptor, "GetBootData", path, sizeof(path));
	if (rpc_client_unary(nc, path, &q.base, &bc__node__v1__boot_data__descriptor,
			     (ProtobufCMessage **)&b, 10000, &err) < 0) {
		fprintf(stderr, "GetBootData %s: %s\n", instance, err.message);
		return -1;
	}
	v = memmem(b->user_data.data, b->user_data.len, "bcb_", 4);
	if (v) {
		size_t left = b->user_data.len - (size_t)(v - (char *)b->user_data.data);

		for (n = 4; n < left && n < 68 && isxdigit((unsigned char)v[n]); n++)
			;
	}
	if (n == 68 && len > n) {
		memcpy(out, v, n);
		out[n] = '\0';
		rc = 0;
	}
	protobuf_c_message_free_unpacked(&b->base, NULL);
	return rc;
}

/* Node.Attest as the node: 0 when the epoch went live. */
static int attest_one(rpc_client *nc, const char *value, const char *instance, const char *addr)
{
	Bc__Node__V1__AttestRequest q = BC__NODE__V1__ATTEST_REQUEST__INIT;
	ProtobufCMessage *a = NULL;
	char path[128];
	bc_error err;

	q.bootstrap = (char *)value;
	q.instance_id = (char *)instance;
	q.address = (char *)addr;
	rpc_method_path(&bc__node__v1__node__descriptor, "Attest", path, sizeof(path));
	if (rpc_client_unary(nc, path, &q.base, &bc__node__v1__attest_response__descriptor, &a,
			     10000, &err) < 0) {
		fprintf(stderr, "Attest %s: %s: %s\n", instance, bc_code_name(err.code), err.message);
		return -1;
	}
	protobuf_c_message_free_unpacked(a, NULL);
	return 0;
}

static int health_one(rpc_client *c)
{
	Grpc__Health__V1__HealthCheckRequest q = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	ProtobufCMessage *a = NULL;
	char path[128];
	bc_error err;

	rpc_method_path(&grpc__health__v1__health__descriptor, "Check", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &grpc__health__v1__health_check_response__descriptor,
			     &a, 10000, &err) < 0) {
		fprintf(stderr, "Health.Check: %s\n", err.message);
		return -1;
	}
	protobuf_c_message_free_unpacked(a, NULL);
	return 0;
}

enum { PA_INSTANCE, PA_REF, PA_ADDRESS };
static int mode_attest(void)
{
	struct lat al = {.mu = PTHREAD_MUTEX_INITIALIZER}, hl = al;
	rpc_client *nc = node_client();
	PGconn *pg = db();
	char n[16];
	const char *pv[2] = {o.template_id, n};
	PGresult *r;
	int errors = 0;

	snprintf(n, sizeof(n), "%d", o.count);
	r = PQexecParams(pg, "SELECT i.id, i.user_data_ref, host(l.address) FROM sandboxes s JOIN "
			 "instances i ON i.id = s.instance_id JOIN ip_leases l ON l.instance_id = "
			 "i.id JOIN identity_epochs e ON e.sandbox_id = s.id AND e.state = 'pending' "
			 "WHERE s.template_id = $1 AND i.node_id IS NOT NULL ORDER BY s.id LIMIT "
			 "$2::int", 2, NULL, pv, NULL, NULL, 0);
	for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
		char value[80];
		int64_t t0;

		if (boot_value(nc, PQgetvalue(r, i, PA_INSTANCE), PQgetvalue(r, i, PA_REF), value,
			       sizeof(value)) < 0) {
			errors++;
			continue;
		}
		t0 = mono_us();
		if (health_one(nc) == 0)
			lat_add(&hl, mono_us() - t0);
		t0 = mono_us();
		if (attest_one(nc, value, PQgetvalue(r, i, PA_INSTANCE), PQgetvalue(r, i, PA_ADDRESS)))
			errors++;
		else
			lat_add(&al, mono_us() - t0);
	}
	PQclear(r);
	printf("p50_us=%lld p99_us=%lld n=%zu errors=%d health_p50_us=%lld health_p99_us=%lld\n",
	       (long long)pct(&al, 0.5), (long long)pct(&al, 0.99), al.n, errors,
	       (long long)pct(&hl, 0.5), (long long)pct(&hl, 0.99));
	PQfinish(pg);
	rpc_client_free(nc);
	return errors || !al.n ? 1 : 0;
}

static rpc_client *warm_nc;
static PGconn **warm_pg;   /* one per worker, connected before the clock starts */

/* One claim created without wait: its id and instance. 0 or -1. */
static int claim_one(rpc_client *c, char *ret_inst, size_t len)
{
	Bc__Compute__V1__CreateSandboxRequest q = BC__COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT;
	Bc__Compute__V1__Sandbox *s = NULL;
	char path[128];
	bc_error err;

	q.template_id = (char *)o.template_id;
	q.task = "bench";
	rpc_method_path(&bc__compute__v1__sandboxes__descriptor, "Create", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &bc__compute__v1__sandbox__descriptor,
			     (ProtobufCMessage **)&s, 30000, &err) < 0) {
		fprintf(stderr, "create: %s: %s\n", bc_code_name(err.code), err.message);
		return -1;
	}
	snprintf(ret_inst, len, "%s", s->instance_id);
	if (s->warm)
		__atomic_add_fetch(&warm_answers, 1, __ATOMIC_RELAXED);
	protobuf_c_message_free_unpacked(&s->base, NULL);
	return 0;
}

static void *warm_attest_worker(void *arg)
{
	struct worker *w = arg;
	PGconn *pg = warm_pg[w->seq];

	for (int i = 0; i < w->todo; i++) {
		int64_t t0 = mono_us();
		char inst[64], value[80];
		const char *pv[1] = {inst};
		PGresult *r = NULL;
		int rc = claim_one(w->c, inst, sizeof(inst));

		if (rc == 0)
			r = PQexecParams(pg, "SELECT i.id, i.identity_bootstrap_ref, host(l.address) "
					 "FROM instances i JOIN ip_leases l ON l.instance_id = i.id "
					 "WHERE i.id = $1 AND i.identity_bootstrap_ref IS NOT NULL",
					 1, NULL, pv, NULL, NULL, 0);
		if (rc == 0 && (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1))
			rc = -1;   /* not a warm claim with identity */
		if (rc == 0)
			rc = boot_value(warm_nc, inst, PQgetvalue(r, 0, PA_REF), value, sizeof(value));
		if (rc == 0)
			rc = attest_one(warm_nc, value, inst, PQgetvalue(r, 0, PA_ADDRESS));
		PQclear(r);
		if (rc < 0)
			w->errors++;
		else
			lat_add(w->lat, mono_us() - t0);
	}
	return NULL;
}

static int mode_warm_attest(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	rpc_client *c = client();
	int64_t el = 0;
	int errors;

	warm_nc = node_client();
	warm_pg = calloc((size_t)o.concurrency, sizeof(*warm_pg));
	for (int i = 0; i < o.concurrency; i++)
		warm_pg[i] = db();
	errors = run(warm_attest_worker, &lat, c, &el);
	for (int i = 0; i < o.concurrency; i++)
		PQfinish(warm_pg[i]);
	free(warm_pg);
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d warm=%d\n",
	       (double)lat.n * 1e6 / (double)el, (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors, warm_answers);
	rpc_client_free(warm_nc);
	rpc_client_free(c);
	return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	parse(argc, argv);
	if (getenv("SBX_BENCH_TRACE") && !(trace = fopen(getenv("SBX_BENCH_TRACE"), "a"))) {
		perror("sbx_bench: SBX_BENCH_TRACE");
		return 1;
	}
	if (!strcmp(o.mode, "ready"))
		return mode_ready();
	if (!strcmp(o.mode, "peer"))
		return mode_peer();
	if (!strcmp(o.mode, "sql"))
		return mode_sql();
	if (!strcmp(o.mode, "warm")) {
		if (!o.wait_ms)
			o.wait_ms = 20000;
		return mode_ready();
	}
	if (!strcmp(o.mode, "warm-peer"))
		return mode_wpeer();
	if (!strcmp(o.mode, "attest"))
		return mode_attest();
	if (!strcmp(o.mode, "warm-attest"))
		return mode_warm_attest();
	fprintf(stderr, "usage: sbx_bench ready|peer|sql|warm|warm-peer|attest|warm-attest ...\n");
	return 2;
}
