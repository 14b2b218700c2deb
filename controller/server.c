/* server.c: the controller's gRPC server: TLS with optional client
 * certificates (verified against the node CA), one PostgreSQL connection per
 * worker thread (streams borrow one from the pool of streams.c while they
 * read), authentication before every handler and before a stream gets a
 * thread, and every API service from one table (services[]); with
 * http_listen set, the same handlers over JSON/HTTP too (docs/http.md).
 * Per-call context (the app, the thread's database, the caller): app.c. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "admin_catalog.h"
#include "doctor.h"
#include "app.h"
#include "auth.h"
#include "bc/admin/v1/admin.pb-c.h"
#include "bc/admin/v1/iam.pb-c.h"
#include "bc/compute/v1/events.pb-c.h"
#include "bc/compute/v1/identity.pb-c.h"
#include "bc/compute/v1/instances.pb-c.h"
#include "bc/compute/v1/sandboxes.pb-c.h"
#include "bc/compute/v1/secrets.pb-c.h"
#include "bc/compute/v1/tunnels.pb-c.h"
#include "bc/compute/v1/usage.pb-c.h"
#include "bc/compute/v1/volumes.pb-c.h"
#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "events_api.h"
#include "iam_offers.h"
#include "identity.h"
#include "iam_policies.h"
#include "iam_tenants.h"
#include "instance_actions.h"
#include "instances.h"
#include "log.h"
#include "node_commands.h"
#include "rpc_static.h"
#include "meter.h"
#include "metrics.h"
#include "node.h"
#include "node_tunnel.h"
#include "reconcile.h"
#include "sandbox_reconcile.h"
#include "sandboxes.h"
#include "secrets.h"
#include "server.h"
#include "streams.h"
#include "templates.h"
#include "tunnels.h"
#include "util.h"
#include "volumes.h"
#include "snapshots.h"
#include "waiter.h"
#include "watch.h"

/* Every API service and the files its handlers come from. A service whose
 * handlers live in several files (Node, Instances) has one row per file;
 * server_register adds it once, with the handlers of all its rows. */
static const struct service_part {
	const ProtobufCServiceDescriptor *desc;
	const struct rpc_handler *(*handlers)(size_t *ret_n);
} services[] = {
	{&bc__node__v1__node__descriptor, node_join_handlers},
	{&bc__node__v1__node__descriptor, node_spec_handlers},
	{&bc__node__v1__node__descriptor, node_report_handlers},
	{&bc__node__v1__node__descriptor, wid_node_handlers},
	{&bc__admin__v1__nodes__descriptor, node_admin_handlers},
	{&bc__admin__v1__pools__descriptor, pools_handlers},
	{&bc__admin__v1__flavors__descriptor, flavors_handlers},
	{&bc__admin__v1__images__descriptor, images_handlers},
	{&bc__admin__v1__tenants__descriptor, tenants_handlers},
	{&bc__admin__v1__identities__descriptor, idn_handlers},
	{&bc__admin__v1__api_tokens__descriptor, tok_handlers},
	{&bc__admin__v1__delegations__descriptor, dlg_handlers},
	{&bc__admin__v1__policies__descriptor, pol_handlers},
	{&bc__admin__v1__quotas__descriptor, quotas_handlers},
	{&bc__admin__v1__offers__descriptor, offers_handlers},
	{&bc__admin__v1__doctor__descriptor, doctor_handlers},
	{&bc__compute__v1__instances__descriptor, inst_handlers},
	{&bc__compute__v1__instances__descriptor, inst_actions},
	{&bc__compute__v1__sandbox_templates__descriptor, tmpl_handlers},
	{&bc__compute__v1__sandboxes__descriptor, sbx_handlers},
	{&bc__compute__v1__sandbox_volumes__descriptor, vol_handlers},
	{&bc__compute__v1__sandbox_snapshots__descriptor, snap_handlers},
	{&bc__compute__v1__events__descriptor, events_handlers},
	{&bc__compute__v1__usage__descriptor, usage_handlers},
	{&bc__compute__v1__secrets__descriptor, secrets_handlers},
	{&bc__compute__v1__tunnels__descriptor, tunnels_handlers},
	{&bc__compute__v1__identity__descriptor, wid_handlers},
};

/* WebSockets of the JSON/HTTP transport: the exec tunnel (tunnels.c). */
static const struct rpc_ws_route ws_routes[] = {
	{TUNNEL_WS_PREFIX, TUNNEL_CONNECT_METHOD},
};

static void *thread_db_open(void *user)
{
	struct ctl_app *app = user;
	struct db *d = db_open(app->cfg.database);

	if (!d) {
		/* keep a handle that reconnects lazily on first use */
		d = xcalloc(1, sizeof(*d));
		d->conninfo = xstrdup(app->cfg.database);
	}
	return d;
}

static void thread_db_close(void *user, void *state)
{
	db_close(state);
}

/* GET /metrics: the sandbox figures, read from the database on the
 * metrics thread's own connection. */
static void metrics_render(FILE *out, void *arg)
{
	static struct db *d;
	struct ctl_app *app = arg;

	if (!d)
		d = db_open(app->cfg.database);
	if (d && db_ensure(d) == 0)
		sbx_metrics_render(out, d);
	cmd_metrics_render(out);
}

static int metrics_start(struct ctl_app *app)
{
	int port = 0, e = 0;

	if (!app->cfg.metrics_listen || !*app->cfg.metrics_listen)
		return 0;
	app->metrics = metrics_serve(app->cfg.metrics_listen, metrics_render, app, &port, &e);
	if (!app->metrics) {
		log_error("serve: cannot serve /metrics on %s: %s", app->cfg.metrics_listen,
			  strerror(e));
		return -e;
	}
	log_info("serve: replica %s serving /metrics on %s (port %d)", app->cfg.replica,
		 app->cfg.metrics_listen, port);
	return 0;
}

/* The replica's database connections against the database's limit. */
static int check_budget(struct ctl_app *app)
{
	struct db *d = db_open(app->cfg.database);
	int r;

	if (!d) {
		log_error("serve: cannot connect to the database to check its connection limit");
		return -EIO;
	}
	r = streams_check_budget(d, &app->cfg);
	db_close(d);
	return r;
}

/* Add the service of services[first] with the handlers of every row
 * naming it, in table order. 0 or rpc_server_add_service's error. */
static int add_service(rpc_server *srv, size_t first)
{
	const ProtobufCServiceDescriptor *desc = services[first].desc;
	_cleanup_free_ struct rpc_handler *all = NULL;
	size_t n = 0, cap = 0, k;

	for (size_t i = first; i < ARRAY_SIZE(services); i++)
		if (services[i].desc == desc) {
			services[i].handlers(&k);
			cap += k;
		}
	all = xcalloc(cap, sizeof(*all));
	for (size_t i = first; i < ARRAY_SIZE(services); i++) {
		const struct rpc_handler *h;

		if (services[i].desc != desc)
			continue;
		h = services[i].handlers(&k);
		memcpy(all + n, h, k * sizeof(*h));
		n += k;
	}
	return rpc_server_add_service(srv, desc, all, n);
}

/* Register every service of the table, each once. */
static int server_register(rpc_server *srv)
{
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(services); i++) {
		bool seen = false;

		for (size_t j = 0; j < i && !seen; j++)
			seen = services[j].desc == services[i].desc;
		if (!seen && (r = add_service(srv, i)) < 0)
			return r;
	}
	return 0;
}

/* The background threads: the LISTEN thread, the reconciler, the sandbox
 * reconciler. On a failure those started are stopped (app->stopping) and
 * joined: -errno, logged. */
static int start_threads(struct ctl_app *app)
{
	const struct {
		pthread_t *t;
		void *(*fn)(void *);
		const char *name;
	} th[] = {
		{&app->listen_thread, watch_listen_thread, "LISTEN"},
		{&app->reconcile_thread, reconcile_thread, "reconciler"},
		{&app->sbx_thread, sbx_reconcile_thread, "sandbox reconciler"},
	};
	int e;

	for (size_t i = 0; i < ARRAY_SIZE(th); i++) {
		if ((e = pthread_create(th[i].t, NULL, th[i].fn, app)) == 0)
			continue;
		log_error("serve: cannot start the %s thread: %s", th[i].name, strerror(e));
		app->stopping = true;
		while (i-- > 0)
			pthread_join(*th[i].t, NULL);
		return -e;
	}
	return 0;
}

int server_start(struct ctl_app *app)
{
	_cleanup_free_ char *cp = xasprintf("%s/server.pem", app->cfg.pki_dir);
	_cleanup_free_ char *kp = xasprintf("%s/server.key", app->cfg.pki_dir);
	char *cert = NULL, *key = NULL;
	struct rpc_tls tls = {0};
	struct rpc_server_opts o = {0};
	bool http = app->cfg.http_listen && *app->cfg.http_listen;
	int r, port = 0, err = 0;

	if ((r = file_read_all(cp, 1 << 20, &cert, NULL)) < 0 ||
	    (r = file_read_all(kp, 1 << 20, &key, NULL)) < 0) {
		log_error("serve: cannot read the server certificate in %s", app->cfg.pki_dir);
		free(cert);
		return r;
	}
	tls.cert_pem = cert;
	tls.key_pem = key;
	tls.ca_pem = app->node_ca_pem;
	tls.request_client_cert = true;
	o.listen = app->cfg.listen;
	o.http_listen = app->cfg.http_listen;
	o.tls = &tls;
	o.workers = app->cfg.workers;
	o.max_message_bytes = (size_t)app->cfg.max_message_bytes;
	o.recv_timeout_ms = app->cfg.grpc_recv_timeout_ms;
	o.max_streams_per_connection = app->cfg.grpc_max_streams_per_connection;
	o.open_workers = app->cfg.grpc_unauthenticated_workers;
	o.open_methods = auth_open_methods;
	o.user = app;
	o.thread_init = thread_db_open;
	o.thread_fini = thread_db_close;
	o.pre_call = auth_pre_call;
	o.max_streams = app->cfg.max_streams;
	o.stream_admit = streams_admit;
	o.stream_done = streams_done;
	if ((r = check_budget(app)) < 0)
		goto out;
	app->streams = streams_new(&app->cfg);
	o.http_max_conns = app->cfg.http_max_connections;
	o.http_max_conns_per_addr = app->cfg.http_max_connections_per_address;
	o.http_threads = app->cfg.http_threads;
	o.http_handshake_timeout_ms = app->cfg.http_handshake_timeout_seconds * 1000;
	o.http_header_timeout_ms = app->cfg.http_header_timeout_seconds * 1000;
	o.http_idle_timeout_ms = app->cfg.http_idle_timeout_seconds * 1000;
	o.mcp_max_sessions = app->cfg.mcp_max_sessions;
	o.mcp_idle_timeout_ms = app->cfg.mcp_session_idle_seconds * 1000;
	o.mcp_allowed_origins = app->cfg.mcp_allowed_origins;
	if (app->cfg.console) {
		o.static_files = console_files;
		o.n_static_files = console_files_count;
		o.static_prefix = "/console/";
	}
	o.ws_routes = ws_routes;
	o.n_ws_routes = ARRAY_SIZE(ws_routes);
	app->watches = watch_registry_new();
	app->server = rpc_server_new(&o, &err);
	if (!app->server) {
		log_error("serve: cannot create the server: %s", strerror(err));
		r = -err;
		goto out;
	}
	if ((r = server_register(app->server)) < 0) {
		log_error("serve: service registration failed: %s", strerror(-r));
		goto out;
	}
	if ((r = metrics_start(app)) < 0)
		goto out;
	if (app->cfg.max_waiting_creates > 0 &&
	    (!(app->waiter = waiter_start(app, app->cfg.database, app->cfg.max_waiting_creates,
					  &sbx_waiter_kind)) ||
	     !(app->inst_waiter = waiter_start(app, app->cfg.database,
					       app->cfg.max_waiting_creates, &inst_waiter_kind)))) {
		log_error("serve: cannot start the waiter thread");
		r = -EAGAIN;
		goto out;
	}
	if ((r = rpc_server_start(app->server, &port)) < 0) {
		log_error("serve: cannot listen on %s%s%s: %s", app->cfg.listen,
			  http ? " or " : "", http ? app->cfg.http_listen : "", strerror(-r));
		goto out;
	}
	if ((r = start_threads(app)) < 0)
		goto out;
	log_info("serve: replica %s listening on %s (port %d)", app->cfg.replica, app->cfg.listen,
		 port);
	if (http)
		log_info("serve: replica %s serving JSON/HTTP on %s (port %d)", app->cfg.replica,
			 app->cfg.http_listen, rpc_server_http_port(app->server));
out:
	free(cert);
	if (key)
		OPENSSL_cleanse(key, strlen(key));
	free(key);
	if (r < 0) {
		rpc_server_free(app->server, 0);
		app->server = NULL;
		waiter_stop(app->waiter);
		app->waiter = NULL;
		waiter_stop(app->inst_waiter);
		app->inst_waiter = NULL;
		metrics_stop(app->metrics);
		app->metrics = NULL;
		watch_registry_free(app->watches);
		app->watches = NULL;
		streams_free(app->streams);
		app->streams = NULL;
	}
	return r;
}

void server_stop(struct ctl_app *app)
{
	app->stopping = true;
	/* waiting creates answer with a last read during the grace (the waiter
	 * sees `stopping`); the waiter goes once no handler can add any */
	rpc_server_free(app->server, 5000);
	node_tunnel_shutdown(); /* no tunnel is relayed any more */
	waiter_stop(app->waiter);
	waiter_stop(app->inst_waiter);
	pthread_join(app->listen_thread, NULL);
	pthread_join(app->reconcile_thread, NULL);
	pthread_join(app->sbx_thread, NULL);
	metrics_stop(app->metrics);
	watch_registry_free(app->watches);
	streams_free(app->streams);
}
