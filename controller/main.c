/* main.c: bc-controller. Subcommands init, migrate, serve, meter, secrets
 * (kek.c), pki (sandbox_ca.c), command (node_commands.c), snapshot-store
 * (snapstore_cmd.c), version.
 *
 * serve's threads: the gRPC workers and one thread per open stream (each
 * with its own PostgreSQL connection, see server.c), the LISTEN thread
 * (watch.c) that wakes WatchSpec streams on NOTIFY, and the reconciler
 * (reconcile.c), and the waiter (waiter.c) that holds sandbox creates
 * waiting for readiness off the workers. The main thread only waits for
 * SIGTERM/SIGINT. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "config.h"
#include "db.h"
#include "init.h"
#include "ipam.h"
#include "kek.h"
#include "log.h"
#include "doctor.h"
#include "meter.h"
#include "migrate.h"
#include "pki.h"
#include "quota.h"
#include "ratelimit.h"
#include "rpc.h"
#include "node_commands.h"
#include "node_tunnel.h"
#include "sandbox_ca.h"
#include "sealed.h"
#include "server.h"
#include "snapstore.h"
#include "util.h"

#ifndef BC_VERSION
#define BC_VERSION "0.1.0"
#endif

static void usage(void)
{
	fprintf(stderr,
		"usage: bc-controller COMMAND [--config FILE] [--key value]...\n"
		"commands:\n"
		"  init [--new-admin-token]  create PKI, migrate, mint the first admin token\n"
		"  migrate                   apply migrations\n"
		"  serve                     serve the API and the node API\n"
		"  meter                     run one metering pass (usage of open windows)\n"
		"  doctor                    self-check (volume stores, ...): findings, exit 1 on a fail\n"
		"  secrets VERB              init-kek, rotate-kek, migrate, status (bc-controller\n"
		"                            secrets --help)\n"
		"  pki VERB                  add-sandbox-ca (bc-controller pki --help)\n"
		"  command VERB              enqueue, show: host commands (bc-controller command\n"
		"                            --help)\n"
		"  snapshot-store VERB       set-secret, check, presign, delete (bc-controller\n"
		"                            snapshot-store --help)\n"
		"  version                   print the version\n");
}

static int check_schema(const struct ctl_app *app)
{
	struct db *d = db_open(app->cfg.database);
	int v = 0, r;

	if (!d) {
		log_error("serve: cannot connect to the database");
		return -EIO;
	}
	r = migrate_current(d, &v);
	db_close(d);
	if (r < 0)
		return r;
	if (v != CTL_SCHEMA_VERSION) {
		log_error("serve: database schema version %d, this binary serves version %d: %s", v,
			  CTL_SCHEMA_VERSION,
			  v < CTL_SCHEMA_VERSION ? "run bc-controller migrate" : "upgrade this binary");
		return -EINVAL;
	}
	return 0;
}

/* serve keeps no plain blob: the keys must load and every row be sealed. */
static int check_sealed(const struct ctl_app *app)
{
	struct db *d;
	int64_t plain = 0, stale = 0;
	int r;

	if ((r = sealed_keys_load(app->cfg.kek_file)) < 0)
		return r;
	if (!(d = db_open(app->cfg.database)))
		return -EIO;
	r = sealed_count(d, &plain, &stale);
	db_close(d);
	if (r == 0 && plain > 0) {
		log_error("serve: %lld sealed blobs are still stored plain: run bc-controller "
			  "secrets migrate", (long long)plain);
		return -EPROTO;
	}
	if (r == 0 && stale > 0)
		log_warn("serve: %lld sealed blobs are wrapped by an older key-encryption key: "
			 "bc-controller secrets rotate-kek rewraps them", (long long)stale);
	return r;
}

/* A configured snapshot store must be a valid one (snapstore.c). */
static int check_snapstore(const struct ctl_app *app)
{
	bc_error err;

	bc_error_clear(&err);
	if (!*app->cfg.snapshot_store_endpoint || snapstore_require(&app->cfg, &err) == 0)
		return 0;
	log_error("serve: %s", err.message);
	return -EINVAL;
}

static int cmd_serve(struct ctl_app *app)
{
	sigset_t set;
	int sig = 0, r;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((r = check_schema(app)) < 0 || (r = check_sealed(app)) < 0 ||
	    (r = check_snapstore(app)) < 0 || (r = pki_load(app)) < 0 ||
	    (r = init_renew_server_cert(app)) < 0 || (r = sandbox_ca_serve(app)) < 0)
		return r;
	node_tunnel_check(app);
	rpc_global_init();
	if ((r = server_start(app)) < 0) {
		rpc_global_shutdown();
		sandbox_ca_unload(app);
		return r;
	}
	sigwait(&set, &sig);
	log_info("serve: signal %d, shutting down", sig);
	server_stop(app);
	rpc_global_shutdown();
	sealed_keys_unload();
	sandbox_ca_unload(app);
	return 0;
}

static int cmd_migrate(struct ctl_app *app)
{
	struct db *d = db_open(app->cfg.database);
	int v = 0, r;

	if (!d) {
		log_error("migrate: cannot connect to the database");
		return -EIO;
	}
	r = migrate_apply(d, migrate_default_dir(app->cfg.migrations_dir), &v);
	db_close(d);
	if (r == 0)
		printf("schema version %d\n", v);
	return r;
}

static int cmd_meter(struct ctl_app *app)
{
	struct db *d = db_open(app->cfg.database);
	int64_t lines = 0, t0;
	bc_error err;
	int r;

	if (!d) {
		log_error("meter: cannot connect to the database");
		return -EIO;
	}
	bc_error_clear(&err);
	r = check_schema(app);
	t0 = mono_ms();
	if (r == 0 && (r = meter_pass(d, &lines, &err)) < 0)
		log_error("meter: pass failed: %s", err.message);
	db_close(d);
	if (r == 0)
		printf("usage lines written: %lld in %lld ms\n", (long long)lines,
		       (long long)(mono_ms() - t0));
	return r;
}

int main(int argc, char **argv)
{
	struct ctl_app app;
	const char *cmd, *config = NULL;
	bool new_token = false;
	enum log_level lvl = LOG_LVL_INFO;
	char **rest, **cargs, *verb = NULL;
	int nrest = 0, ncargs = 0, first = 2, r;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage();
		return argc < 2 ? 1 : 0;
	}
	cmd = argv[1];
	if (strcmp(cmd, "version") == 0) {
		printf("bc-controller %s (schema %d)\n", BC_VERSION, CTL_SCHEMA_VERSION);
		return 0;
	}
	if ((strcmp(cmd, "secrets") == 0 || strcmp(cmd, "pki") == 0 ||
	     strcmp(cmd, "command") == 0 || strcmp(cmd, "snapshot-store") == 0) && argc > 2 &&
	    (argv[2][0] != '-' || strcmp(argv[2], "--help") == 0))
		verb = argv[first++];
	rest = xcalloc((size_t)argc, sizeof(char *));
	cargs = xcalloc((size_t)argc, sizeof(char *));
	/* snapshot-store's own arguments come first: presign put KEY */
	while (strcmp(cmd, "snapshot-store") == 0 && first < argc && argv[first][0] != '-')
		cargs[ncargs++] = argv[first++];
	for (int i = first; i < argc; i++) {
		bool val = false;
		if ((strcmp(cmd, "command") == 0 && cmd_admin_flag(argv[i], &val)) ||
		    (strcmp(cmd, "snapshot-store") == 0 && snapstore_command_flag(argv[i], &val))) {
			cargs[ncargs++] = argv[i];
			if (val && i + 1 < argc)
				cargs[ncargs++] = argv[++i];
		} else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			config = argv[++i];
		else if (strcmp(argv[i], "--new-admin-token") == 0)
			new_token = true;
		else
			rest[nrest++] = argv[i];
	}
	memset(&app, 0, sizeof(app));
	r = config_load(&app.cfg, config, nrest, rest, 0);
	free(rest);
	if (r < 0) {
		free(cargs);
		config_free(&app.cfg);
		return 1;
	}
	if (!app.cfg.database && strcmp(cmd, "pki") != 0) {
		fprintf(stderr, "bc-controller: the database key is required\n");
		free(cargs);
		config_free(&app.cfg);
		return 1;
	}
	ratelimit_configure(&app.cfg);
	quota_configure(&app.cfg);
	if (log_level_parse(app.cfg.log_level, &lvl) < 0)
		fprintf(stderr, "bc-controller: unknown log_level %s\n", app.cfg.log_level);
	log_init("bc-controller", lvl);
	ipam_set_quarantine(app.cfg.ip_quarantine_seconds);
	if (strcmp(cmd, "init") == 0)
		r = init_run(&app, new_token);
	else if (strcmp(cmd, "migrate") == 0)
		r = cmd_migrate(&app);
	else if (strcmp(cmd, "serve") == 0)
		r = cmd_serve(&app);
	else if (strcmp(cmd, "meter") == 0)
		r = cmd_meter(&app);
	else if (strcmp(cmd, "doctor") == 0)
		r = doctor_command(&app);
	else if (strcmp(cmd, "secrets") == 0)
		r = kek_command(&app, verb ? 1 : 0, &verb) == 0 ? 0 : -EINVAL;
	else if (strcmp(cmd, "pki") == 0)
		r = sandbox_ca_command(&app, verb ? 1 : 0, &verb) == 0 ? 0 : -EINVAL;
	else if (strcmp(cmd, "command") == 0)
		r = cmd_admin(&app, verb, ncargs, cargs) == 0 ? 0 : -EINVAL;
	else if (strcmp(cmd, "snapshot-store") == 0)
		r = snapstore_command(&app, verb, ncargs, cargs) == 0 ? 0 : -EINVAL;
	else {
		usage();
		r = -EINVAL;
	}
	free(cargs);
	free(app.api_ca_pem);
	free(app.node_ca_pem);
	pki_free_secret(app.node_ca_key_pem);
	config_free(&app.cfg);
	return r < 0 ? 1 : 0;
}
