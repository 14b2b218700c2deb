/* bc_bench.c: load generators and their peers for `make bench`. Every mode
 * prints one line of key=value figures; bench/run.sh puts each figure beside
 * its peer measured in the same run.
 *
 *   serve   --listen ADDR                 insecure server with Health only
 *   rpc     --target ADDR [--seconds S] [--concurrency C] [--call list]
 *                                          Health.Check round trips; with
 *                                          --call list (and --ca/--token)
 *                                          Instances.List instead; --call
 *                                          recognize --address A [--cache S]
 *                                          Identity.Recognize(A), through
 *                                          idc_recognize's cache of S s (0:
 *                                          none, every call asks)
 *   create  --target ADDR --ca F --token T --pool P --flavor F --image I
 *           [--concurrency C] [--count N]  Instances.Create throughput
 *   push    (same flags) [--count N]       create -> agent reports running
 *   pgpeer  --conninfo S [--concurrency C] [--count N]
 *                                          bare INSERT transactions
 *   notifypeer --conninfo S [--count N]    NOTIFY -> LISTEN round trips */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "bc/compute/v1/instances.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "identity_client.h"
#include "rpc.h"
#include "util.h"

struct opts {
	const char *mode, *target, *listen, *ca, *token, *pool, *flavor, *image, *conninfo, *call;
	const char *address;
	int seconds, concurrency, count, cache;
};

static struct opts o = {.seconds = 3, .concurrency = 1, .count = 200};

static void parse(int argc, char **argv)
{
	o.mode = argc > 1 ? argv[1] : "";
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i] + 2, *v = argv[i + 1];
		if (!strcmp(k, "target")) o.target = v;
		else if (!strcmp(k, "listen")) o.listen = v;
		else if (!strcmp(k, "ca")) o.ca = v;
		else if (!strcmp(k, "token")) o.token = v;
		else if (!strcmp(k, "pool")) o.pool = v;
		else if (!strcmp(k, "flavor")) o.flavor = v;
		else if (!strcmp(k, "image")) o.image = v;
		else if (!strcmp(k, "conninfo")) o.conninfo = v;
		else if (!strcmp(k, "call")) o.call = v;
		else if (!strcmp(k, "address")) o.address = v;
		else if (!strcmp(k, "cache")) o.cache = atoi(v);
		else if (!strcmp(k, "seconds")) o.seconds = atoi(v);
		else if (!strcmp(k, "concurrency")) o.concurrency = atoi(v);
		else if (!strcmp(k, "count")) o.count = atoi(v);
		else {
			fprintf(stderr, "bc_bench: unknown flag %s\n", argv[i]);
			exit(1);
		}
	}
}

/* ----------------------------------------------------------- latencies */

struct lat {
	pthread_mutex_t mu;
	int64_t *v;
	size_t n, cap;
};

static void lat_add(struct lat *l, int64_t us)
{
	pthread_mutex_lock(&l->mu);
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 4096;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
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
	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(*l->v), cmp64);
	return l->v[(size_t)((double)(l->n - 1) * p)];
}

/* ------------------------------------------------------------- clients */

static rpc_client *client(void)
{
	static char *ca;
	struct rpc_tls tls = {0};
	struct rpc_client_opts co = {.target = o.target, .bearer = o.token};

	if (o.ca) {
		if (!ca && file_read_all(o.ca, 1 << 20, &ca, NULL) < 0) {
			fprintf(stderr, "bc_bench: cannot read %s\n", o.ca);
			exit(1);
		}
		tls.ca_pem = ca;
		co.tls = &tls;
	}
	return rpc_client_new(&co);
}

struct worker {
	rpc_client *c;
	struct lat *lat;
	int64_t end_us;
	int todo;
	int errors;
	pthread_t t;
};

/* Identity.Recognize(--address) through the recognition cache of an
 * enforcement point (identity_client.h), shared by the workers as a
 * service's would be; --cache 0 keeps nothing: every call asks. */
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static struct idc_cache *cache;

static void cache_new(void)
{
	cache = idc_new(1024, o.cache);
}

static void *recognize_worker(void *arg)
{
	struct worker *w = arg;

	pthread_once(&cache_once, cache_new);
	while (mono_us() < w->end_us) {
		struct idc_answer a;
		bc_error err;
		int64_t t0 = mono_us();
		if (idc_recognize(cache, w->c, o.address, t0 / 1000, 5000, &a, &err) != 1) {
			w->errors++;
			continue;
		}
		lat_add(w->lat, mono_us() - t0);
	}
	return NULL;
}

static void *rpc_worker(void *arg)
{
	struct worker *w = arg;
	Grpc__Health__V1__HealthCheckRequest hq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	Bc__Compute__V1__ListInstancesRequest lq = BC__COMPUTE__V1__LIST_INSTANCES_REQUEST__INIT;
	bool list = o.call && !strcmp(o.call, "list");
	const ProtobufCMessage *q = list ? &lq.base : &hq.base;
	const ProtobufCMessageDescriptor *rd = list ? &bc__compute__v1__list_instances_response__descriptor
						    : &grpc__health__v1__health_check_response__descriptor;
	char path[128];

	lq.limit = 10;
	if (list)
		rpc_method_path(&bc__compute__v1__instances__descriptor, "List", path, sizeof(path));
	else
		rpc_method_path(&grpc__health__v1__health__descriptor, "Check", path, sizeof(path));
	while (mono_us() < w->end_us) {
		ProtobufCMessage *resp = NULL;
		bc_error err;
		int64_t t0 = mono_us();
		if (rpc_client_unary(w->c, path, q, rd, &resp, 5000, &err) < 0) {
			w->errors++;
			continue;
		}
		lat_add(w->lat, mono_us() - t0);
		protobuf_c_message_free_unpacked(resp, NULL);
	}
	return NULL;
}

static int run_workers(void *(*fn)(void *), struct lat *lat, int64_t *ret_elapsed_us, int *errors)
{
	struct worker *w = xcalloc((size_t)o.concurrency, sizeof(*w));
	rpc_client *c = client();
	int64_t t0 = mono_us();

	for (int i = 0; i < o.concurrency; i++) {
		w[i] = (struct worker){.c = c, .lat = lat, .end_us = t0 + o.seconds * 1000000LL,
				       .todo = o.count / o.concurrency + (i < o.count % o.concurrency)};
		pthread_create(&w[i].t, NULL, fn, &w[i]);
	}
	for (int i = 0; i < o.concurrency; i++) {
		pthread_join(w[i].t, NULL);
		*errors += w[i].errors;
	}
	*ret_elapsed_us = mono_us() - t0;
	rpc_client_free(c);
	free(w);
	return 0;
}

static int mode_rpc(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	int64_t el = 0;
	int errors = 0;

	int seconds = o.seconds < 1 ? 1 : o.seconds;

	void *(*fn)(void *) = o.call && !strcmp(o.call, "recognize") ? recognize_worker : rpc_worker;

	if (fn == recognize_worker && !o.address) {
		fprintf(stderr, "bc_bench: --call recognize needs --address\n");
		return 1;
	}
	/* warm the channel up first */
	o.seconds = 1;
	run_workers(fn, &lat, &el, &errors);
	lat.n = 0;
	errors = 0;
	o.seconds = seconds;
	run_workers(fn, &lat, &el, &errors);
	printf("p50_us=%lld p99_us=%lld calls_per_s=%.0f calls=%zu errors=%d\n",
	       (long long)pct(&lat, 0.50), (long long)pct(&lat, 0.99),
	       (double)lat.n * 1e6 / (double)el, lat.n, errors);
	return errors ? 1 : 0;
}

static int create_one(rpc_client *c, char *ret_id, size_t len)
{
	Bc__Compute__V1__CreateInstanceRequest q = BC__COMPUTE__V1__CREATE_INSTANCE_REQUEST__INIT;
	Bc__Compute__V1__Instance *inst = NULL;
	char path[128];
	bc_error err;

	q.pool_id = (char *)o.pool;
	q.flavor = (char *)o.flavor;
	q.image_id = (char *)o.image;
	rpc_method_path(&bc__compute__v1__instances__descriptor, "Create", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &bc__compute__v1__instance__descriptor,
			     (ProtobufCMessage **)&inst, 30000, &err) < 0) {
		fprintf(stderr, "create: %s: %s\n", bc_code_name(err.code), err.message);
		return -1;
	}
	snprintf(ret_id, len, "%s", inst->id);
	protobuf_c_message_free_unpacked(&inst->base, NULL);
	return 0;
}

static void *create_worker(void *arg)
{
	struct worker *w = arg;
	char id[64];

	for (int i = 0; i < w->todo; i++) {
		int64_t t0 = mono_us();
		if (create_one(w->c, id, sizeof(id)) < 0) {
			w->errors++;
			continue;
		}
		lat_add(w->lat, mono_us() - t0);
	}
	return NULL;
}

static int mode_create(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	int64_t el = 0;
	int errors = 0;

	o.seconds = 3600;
	run_workers(create_worker, &lat, &el, &errors);
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d\n",
	       (double)lat.n * 1e6 / (double)el, (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	return errors ? 1 : 0;
}

static const char *get_state(rpc_client *c, const char *id, char *buf, size_t len)
{
	Bc__Compute__V1__GetInstanceRequest q = BC__COMPUTE__V1__GET_INSTANCE_REQUEST__INIT;
	Bc__Compute__V1__Instance *inst = NULL;
	char path[128];
	bc_error err;

	q.instance_id = (char *)id;
	rpc_method_path(&bc__compute__v1__instances__descriptor, "Get", path, sizeof(path));
	if (rpc_client_unary(c, path, &q.base, &bc__compute__v1__instance__descriptor,
			     (ProtobufCMessage **)&inst, 5000, &err) < 0)
		return "";
	snprintf(buf, len, "%s", inst->state);
	protobuf_c_message_free_unpacked(&inst->base, NULL);
	return buf;
}

static int mode_push(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	rpc_client *c = client();
	char id[64], st[32] = "";
	int errors = 0;

	for (int i = 0; i < o.count; i++) {
		int64_t t0;
		if (create_one(c, id, sizeof(id)) < 0) {
			errors++;
			continue;
		}
		t0 = mono_us();
		st[0] = '\0';
		while (strcmp(get_state(c, id, st, sizeof(st)), "running") != 0 &&
		       mono_us() - t0 < 10000000)
			usleep(500);
		if (strcmp(st, "running") != 0) {
			errors++; /* never ran: not a latency */
			continue;
		}
		lat_add(&lat, mono_us() - t0);
	}
	printf("p50_us=%lld p99_us=%lld n=%zu errors=%d\n", (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	rpc_client_free(c);
	return errors ? 1 : 0;
}

/* ---------------------------------------------------------------- peers */

static void *pg_worker(void *arg)
{
	struct worker *w = arg;
	PGconn *c = PQconnectdb(o.conninfo);

	for (int i = 0; i < w->todo && PQstatus(c) == CONNECTION_OK; i++) {
		int64_t t0 = mono_us();
		PGresult *r = PQexec(c, "BEGIN; INSERT INTO bench_peer (v) VALUES (md5(random()::text)) "
				     "RETURNING id; COMMIT");
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			w->errors++;
		else
			lat_add(w->lat, mono_us() - t0);
		PQclear(r);
	}
	PQfinish(c);
	return NULL;
}

static int mode_pgpeer(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct worker *w = xcalloc((size_t)o.concurrency, sizeof(*w));
	PGconn *c = PQconnectdb(o.conninfo);
	int64_t t0;
	int errors = 0;

	PQclear(PQexec(c, "CREATE TABLE IF NOT EXISTS bench_peer (id bigserial PRIMARY KEY, v text)"));
	PQfinish(c);
	t0 = mono_us();
	for (int i = 0; i < o.concurrency; i++) {
		w[i] = (struct worker){.lat = &lat,
				       .todo = o.count / o.concurrency + (i < o.count % o.concurrency)};
		pthread_create(&w[i].t, NULL, pg_worker, &w[i]);
	}
	for (int i = 0; i < o.concurrency; i++) {
		pthread_join(w[i].t, NULL);
		errors += w[i].errors;
	}
	printf("per_s=%.1f p50_us=%lld p99_us=%lld n=%zu errors=%d\n",
	       (double)lat.n * 1e6 / (double)(mono_us() - t0), (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n, errors);
	free(w);
	return errors ? 1 : 0;
}

static int mode_notifypeer(void)
{
	struct lat lat = {.mu = PTHREAD_MUTEX_INITIALIZER};
	PGconn *l = PQconnectdb(o.conninfo), *s = PQconnectdb(o.conninfo);

	/* a table of its own: pgpeer's inserts must not meet this row */
	PQclear(PQexec(s, "CREATE TABLE IF NOT EXISTS bench_notify (id int PRIMARY KEY, v text)"));
	PQclear(PQexec(s, "INSERT INTO bench_notify (id, v) VALUES (1, 'x') ON CONFLICT DO NOTHING"));
	PQclear(PQexec(l, "LISTEN bench_peer"));
	for (int i = 0; i < o.count; i++) {
		struct pollfd p = {.fd = PQsocket(l), .events = POLLIN};
		int64_t t0 = mono_us();
		PGnotify *n = NULL;
		PQclear(PQexec(s, "BEGIN; UPDATE bench_notify SET v = v WHERE id = 1; "
				  "NOTIFY bench_peer, 'x'; COMMIT"));
		while (!n && poll(&p, 1, 5000) > 0) {
			PQconsumeInput(l);
			n = PQnotifies(l);
		}
		if (n) {
			lat_add(&lat, mono_us() - t0);
			PQfreemem(n);
		}
	}
	printf("p50_us=%lld p99_us=%lld n=%zu\n", (long long)pct(&lat, 0.5),
	       (long long)pct(&lat, 0.99), lat.n);
	PQfinish(l);
	PQfinish(s);
	return 0;
}

static int mode_serve(void)
{
	struct rpc_server_opts so = {.listen = o.listen, .workers = 4};
	rpc_server *s = rpc_server_new(&so, NULL);
	sigset_t set;
	int sig, port = 0;

	if (!s || rpc_server_start(s, &port) < 0) {
		fprintf(stderr, "bc_bench: cannot serve on %s\n", o.listen);
		return 1;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	printf("listening port=%d\n", port);
	fflush(stdout);
	sigwait(&set, &sig);
	rpc_server_free(s, 1000);
	return 0;
}

int main(int argc, char **argv)
{
	int r;

	parse(argc, argv);
	rpc_global_init();
	if (!strcmp(o.mode, "serve"))
		r = mode_serve();
	else if (!strcmp(o.mode, "rpc"))
		r = mode_rpc();
	else if (!strcmp(o.mode, "create"))
		r = mode_create();
	else if (!strcmp(o.mode, "push"))
		r = mode_push();
	else if (!strcmp(o.mode, "pgpeer"))
		r = mode_pgpeer();
	else if (!strcmp(o.mode, "notifypeer"))
		r = mode_notifypeer();
	else {
		fprintf(stderr, "usage: bc_bench serve|rpc|create|push|pgpeer|notifypeer ...\n");
		r = 1;
	}
	rpc_global_shutdown();
	return r;
}
