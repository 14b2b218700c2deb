/* main.c: bcd, the node agent.
 *
 * Start-up: configuration (file, then flags), one bcd per state_dir (a lock
 * file), enrolment if state_dir holds no certificate (join.c), the trust
 * anchors checked (ca.pem: the API CA, never the node CA), the spec and
 * command record of another node set aside (a host joined again as a new
 * node), the runtime, the last applied spec (spec.pb) and the command
 * record. Then four threads, all sharing one mTLS client:
 *
 *   converge  passes; with its runtime workers (runtime_concurrency) the
 *             only threads that touch the runtime (converge.c)
 *   watch     Node.WatchSpec: accepts, persists, hands specs to converge
 *   report    Node.Report on every change and every report interval
 *   renew     Node.RenewCertificate when the certificate is due (renew.c)
 *
 * and Agent.Tunnel's server (tunnel.c) on tunnel_listen, if the node holds
 * a tunnel certificate.
 *
 * The main thread waits for SIGTERM/SIGINT and stops them gracefully.
 * Stopping (or being killed) never stops the instances: the next bcd adopts
 * them. A renewed certificate (SIGUSR1 from the renew thread) stops them the
 * same way and bcd executes itself again on the new files.
 *
 * Exit codes: 0 stopped by a signal, 1 configuration or start-up error,
 * 2 enrolment refused by the controller (bad, expired or used token). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "agent/backoff.h"
#include "agent/bootdata.h"
#include "agent/commands.h"
#include "agent/config.h"
#include "agent/converge.h"
#include "agent/guestready.h"
#include "agent/rebind.h"
#include "agent/guestsig.h"
#include "agent/identity_ep.h"
#include "agent/hostcheck.h"
#include "agent/join.h"
#include "agent/net.h"
#include "agent/renew.h"
#include "agent/report.h"
#include "agent/runtime.h"
#include "agent/snapshot.h"
#include "agent/state.h"
#include "agent/tunnel.h"
#include "agent/watch.h"
#include "agent/agent_metrics.h"
#include "log.h"
#include "metrics.h"
#include "rpc.h"
#include "util.h"
#include "volumes.h"

#define EXIT_CONFIG 1
#define EXIT_JOIN_REFUSED 2
#define JOIN_BACKOFF_MIN_MS 500
#define JOIN_BACKOFF_MAX_MS 10000

struct agent {
	struct agent_config cfg;
	struct join_creds creds;
	rpc_client *client;
	struct rt *rt;
	struct conv *conv;
	struct net *net;
	struct vol *vol;                /* the host's volumes (volumes.h) */
	struct guestready *gr;          /* guests that reported up */
	struct rt_traits traits;        /* advertised (runtime's, net's) */
	struct state_cmds *cmds;
	struct cmds *commands;          /* the command runner (commands.h) */
	struct snap *snap;              /* snapshots on this host (snapshot.h) */
	struct rebind *rebind;          /* identity rebinds (rebind.h) */
	struct backoff_stop stop;
	struct watch watch;
	struct report report;
	struct renew renew;
	bool joined_now;                /* this start enrolled the node */
	struct agent_metrics metrics;
	metrics_srv *metrics_srv;
	struct tunnel_srv *tunnel;      /* NULL: tunnel port off */
	struct guestsig *gsig;          /* the guest-up signal's listener */
	struct identity_ep *idep;       /* the workload-identity endpoint */
	int lock_fd;
};

static int parse_config(struct agent_config *cfg, int argc, char **argv)
{
	struct cfg_cli cli = {0};
	char err[CFG_ERR_MAX];

	cfg_init(cfg);
	if (cfg_from_args(cfg, argc, argv, &cli, err, sizeof(err)) < 0) {
		fprintf(stderr, "bcd: %s\n", err);
		return EXIT_CONFIG;
	}
	if (cli.help) {
		cfg_usage(stdout);
		return 0;
	}
	if (cli.version) {
		printf("bcd %s\n", BCD_VERSION);
		return 0;
	}
	if (cli.check_host)  /* needs no controller nor state_dir */
		return hostcheck_run(cfg->libvirt_uri, stdout);
	if (cfg_finish(cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "bcd: %s\n", err);
		return EXIT_CONFIG;
	}
	if (cli.check) {
		cfg_print(cfg, stdout);
		return 0;
	}
	return -1;  /* run */
}

/* One bcd per state directory: two would fight over the same VMs. */
static int lock_state_dir(struct agent *a)
{
	_cleanup_free_ char *path = xasprintf("%s/bcd.lock", a->cfg.state_dir);
	int e = mkdir_p(a->cfg.state_dir, 0700);

	if (e < 0) {
		log_error("state_dir %s: cannot create: %s", a->cfg.state_dir, strerror(-e));
		return e;
	}
	a->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (a->lock_fd < 0 || flock(a->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		e = -errno;
		log_error("state_dir %s: %s", a->cfg.state_dir,
			  e == -EWOULDBLOCK ? "another bcd is running on it" : strerror(-e));
		return e;
	}
	return 0;
}

/* Load the node's credentials, joining first if there are none. Returns
 * 0 or an exit code. Transient join failures are retried (SIGTERM still
 * ends the process here: signals are not blocked yet). */
static int ensure_joined(struct agent *a)
{
	struct backoff b;
	int e = join_load(a->cfg.state_dir, &a->creds);

	if (e == 0)
		return 0;
	if (e != -ENOENT) {
		log_error("state_dir %s: node credentials unreadable: %s", a->cfg.state_dir,
			  strerror(-e));
		return EXIT_CONFIG;
	}
	backoff_init(&b, JOIN_BACKOFF_MIN_MS, JOIN_BACKOFF_MAX_MS);
	for (;;) {
		bc_error err = {0};
		e = join_enrol(&a->cfg, &a->creds, &err);
		if (e == 0)
			break;
		if (err.code == BC_INVALID_CONFIG || err.code == BC_INTERNAL) {
			log_error("cannot join: %s", err.message);
			return EXIT_CONFIG;
		}
		if (!join_err_transient(&err)) {
			log_error("join refused: %s: %s%s%s", bc_code_name(err.code), err.message,
				  bc_error_get_detail(&err, "reason") ? " reason=" : "",
				  bc_error_get_detail(&err, "reason") ?: "");
			return EXIT_JOIN_REFUSED;
		}
		log_warn("join: controller %s unavailable: %s: %s; retrying", a->cfg.controller,
			 bc_code_name(err.code), err.message);
		usleep((useconds_t)backoff_next(&b) * 1000);
	}
	log_info("joined as node %s (pool %s)", a->creds.node_id, a->creds.pool_id);
	a->joined_now = true;
	return 0;
}

/* ca.pem must not trust the node CA for the controller (an older bcd kept
 * it there): dropped, or bcd refuses to start. 0 or an exit code. */
static int check_trust(struct agent *a)
{
	int dropped = 0, e = join_repair_ca(a->cfg.state_dir, &a->creds, &dropped);

	if (e == -ENOKEY) {
		log_error("%s/%s holds no CA but the node CA, which issued this node's certificate: "
			  "copy the API CA (the controller's api-ca.pem) there and start again",
			  a->cfg.state_dir, JOIN_CA_FILE);
		return EXIT_CONFIG;
	}
	if (e < 0) {
		log_error("%s/%s: cannot check it: %s", a->cfg.state_dir, JOIN_CA_FILE, strerror(-e));
		return EXIT_CONFIG;
	}
	if (dropped > 0)
		log_warn("%s/%s: removed %d certificate(s) that issued this node's certificate (the "
			 "node CA): the controller is trusted with the API CA alone", a->cfg.state_dir,
			 JOIN_CA_FILE, dropped);
	return 0;
}

/* Another node's spec.pb and command record (the host joined again) are
 * set aside, never adopted. 0 or an exit code. */
static int check_owner(struct agent *a)
{
	_cleanup_free_ char *owner = NULL;
	int e = state_set_aside_foreign(a->cfg.state_dir, a->creds.node_id, a->joined_now, &owner);

	if (e < 0) {
		log_error("%s: cannot set aside another node's spec: %s", a->cfg.state_dir,
			  strerror(-e));
		return EXIT_CONFIG;
	}
	if (e > 0)
		log_warn("%s: spec and command record of node %s set aside (renamed *.%s.*): this "
			 "host is node %s now", a->cfg.state_dir, owner, owner, a->creds.node_id);
	return 0;
}

/* The runtime's wake-up (an image download ended): a converge pass now.
 * Downloads start from passes, so the conv exists by then. */
static void wake_converge(void *ctx)
{
	struct agent *a = ctx;

	if (a->conv)
		conv_poke(a->conv);
}

static int open_runtime(struct agent *a)
{
	struct rt_config rc = {.state_dir = a->cfg.state_dir,
			       .capacity_vcpus = a->cfg.capacity_vcpus,
			       .capacity_memory_mib = a->cfg.capacity_memory_mib,
			       .capacity_disk_gib = a->cfg.capacity_disk_gib,
			       .node_id = a->creds.node_id,
			       .libvirt_uri = a->cfg.libvirt_uri,
			       .data_dir = a->cfg.data_dir,
			       .volumes_dir = a->cfg.volumes_dir,
			       .image_ca_file = a->cfg.image_ca_file,
			       .image_max_bytes = a->cfg.image_max_gib << 30,
			       .domain_type = a->cfg.domain_type,
			       .stop_timeout_ms = a->cfg.stop_timeout_seconds * 1000,
			       .boot_data = bootdata_fetch,
			       .boot_data_ctx = a->client,
			       .wake = wake_converge,
			       .wake_ctx = a,
			       .guest_ready = a->gr};
	int e = rt_open(a->cfg.runtime, &rc, &a->rt);

	if (e == -ENOENT)
		log_error("runtime %s: not built into this bcd", a->cfg.runtime);
	else if (e < 0)
		log_error("runtime %s: cannot open: %s", a->cfg.runtime, strerror(-e));
	return e;
}

/* The cpu.model label this node reports: the configured one, else
 * /proc/cpuinfo's (report.c). Owned by the caller; NULL if unknown. */
static char *node_cpu_model(const struct agent_config *cfg)
{
	_cleanup_free_ char *cpuinfo = NULL;

	for (size_t i = 0; i < cfg->n_labels; i++)
		if (strcmp(cfg->label_list[i].key, "cpu.model") == 0)
			return xstrdup(cfg->label_list[i].value);
	if (file_read_all("/proc/cpuinfo", 1 << 22, &cpuinfo, NULL) < 0)
		return NULL;
	return report_cpu_model(cpuinfo);
}

/* Snapshots in data_dir/snapshots (what a killed bcd left there removed). */
static int open_snapshots(struct agent *a)
{
	_cleanup_free_ char *data = *a->cfg.data_dir ? xstrdup(a->cfg.data_dir)
						     : xasprintf("%s/data", a->cfg.state_dir);
	_cleanup_free_ char *cpu = node_cpu_model(&a->cfg);
	struct snap_config sc = {
		.data_dir = data, .ca_file = a->cfg.snapshot_ca_file, .cpu_model = cpu,
		.allow_http_loopback = a->cfg.snapshot_store_allow_http_loopback_for_tests != 0,
		.max_bytes = a->cfg.image_max_gib << 30, .rt = a->rt};
	int e = snap_open(&sc, &a->snap);

	if (e < 0)
		log_error("%s/%s: %s", data, SNAP_DIR, strerror(-e));
	else if (sc.allow_http_loopback)
		log_warn("snapshot_store_allow_http_loopback_for_tests = 1: snapshots may move "
			 "over plain http to loopback (tests only)");
	return e;
}

/* Identity rebinds, recorded in data_dir/instances-rebound.json; bundles
 * fetched with Node.GetBootData bound to their instance. */
static int open_rebind(struct agent *a)
{
	_cleanup_free_ char *data = *a->cfg.data_dir ? xstrdup(a->cfg.data_dir)
						     : xasprintf("%s/data", a->cfg.state_dir);
	int e;

	if (mkdir(data, 0700) < 0 && errno != EEXIST)
		e = -errno;
	else
		e = rebind_open(data, bootdata_fetch, a->client, &a->rebind);
	if (e < 0)
		log_error("%s/%s: %s", data, REBIND_FILE, strerror(-e));
	return e;
}

/* The volumes of the spec, made by each converge pass. The fake runtime
 * runs no guests but makes real (sparse) files: its volume store stands
 * in for a filesystem of capacity_disk_gib, so the numbers it reports
 * follow its configured capacity, not the test machine's disk. */
static int open_volumes(struct agent *a)
{
	struct vol_config vc = {.dir = a->cfg.volumes_dir,
				.reserve_percent = a->cfg.volume_reserve_percent,
				.reserve_min = a->cfg.volume_reserve_min_gib << 30,
				.fs_size = a->rt->ops == &rt_fake_ops ? a->cfg.capacity_disk_gib << 30
								       : 0};
	int e = vol_open(&vc, &a->vol);

	if (e < 0)
		log_error("volumes_dir %s: %s", a->cfg.volumes_dir, strerror(-e));
	else
		conv_set_volumes(a->conv, a->vol);
	return e;
}

/* The last applied spec, handed to converge; its generation, 0 if none.
 * An unreadable spec.pb is not fatal: without a spec nothing is destroyed,
 * and the controller sends the full spec to an agent at generation 0. */
static uint64_t load_spec(struct agent *a)
{
	Bc__Node__V1__NodeSpec *spec = NULL;
	uint64_t gen;
	int e = state_load_spec(a->cfg.state_dir, &spec);

	if (e == -ENOENT) {
		log_info("no applied spec yet");
		return 0;
	}
	if (e < 0) {
		log_error("%s/%s unreadable (%s): starting without a spec", a->cfg.state_dir,
			  STATE_SPEC_FILE, strerror(-e));
		return 0;
	}
	gen = spec->generation;
	log_info("loaded spec generation %" PRIu64 " (%zu instances): adopting", gen,
		 spec->n_instances);
	conv_submit(a->conv, spec);
	return gen;
}

/* tunnel_advertise when not set: address and the tunnel port (IPv6
 * literals bracketed); "" when the port is not known (":0"). */
static void default_advertise(struct agent_config *cfg, int port)
{
	const char *colon = strrchr(cfg->tunnel_listen, ':');

	if (!*cfg->tunnel_listen || (*cfg->tunnel_advertise && port == 0))
		return;
	if (port == 0)
		port = colon ? atoi(colon + 1) : 0;
	free(cfg->tunnel_advertise);
	if (port <= 0)
		cfg->tunnel_advertise = xstrdup("");
	else if (strchr(cfg->address, ':'))
		cfg->tunnel_advertise = xasprintf("[%s]:%d", cfg->address, port);
	else
		cfg->tunnel_advertise = xasprintf("%s:%d", cfg->address, port);
}

/* The guest-up signal's listener (guestsig.h): with guest_ready = auto
 * only in the bcd that owns the bridge (network = nftables), so that the
 * fake-runtime agents of a test stack never take the gateway's port from
 * a real one on the same host. */
static void start_guestsig(struct agent *a)
{
	struct gs_opts go = {.conv = a->conv, .gr = a->gr};
	int e;

	if (strcmp(a->cfg.guest_ready, "off") == 0 ||
	    (strcmp(a->cfg.guest_ready, "auto") == 0 && !net_enforces(a->net))) {
		log_info("guest-up signal: no listener (guest_ready = %s, network = %s)",
			 a->cfg.guest_ready, a->cfg.network);
		return;
	}
	if ((e = gs_start(&go, &a->gsig)) < 0)
		log_warn("guest-up signal: no listener: %s", strerror(-e));
}

/* The workload-identity endpoint (identity_ep.h), as the guest-up
 * listener: with identity_endpoint = auto only in the bcd that owns the
 * bridge. While it runs, the reports advertise instance.identity (the
 * controller's bind check for warm claims with identity). */
static void start_identity(struct agent *a)
{
	struct ie_opts o = {.conv = a->conv, .client = a->client,
			    .port = (uint16_t)a->cfg.identity_port};
	int e;

	if (strcmp(a->cfg.identity_endpoint, "off") == 0 ||
	    (strcmp(a->cfg.identity_endpoint, "auto") == 0 && !net_enforces(a->net))) {
		log_info("identity endpoint: off (identity_endpoint = %s, network = %s)",
			 a->cfg.identity_endpoint, a->cfg.network);
		return;
	}
	if ((e = ie_start(&o, &a->idep)) < 0) {
		log_warn("identity endpoint: not started: %s", strerror(-e));
		return;
	}
	if (a->report.info.n_caps < REPORT_MAX_CAPS)
		a->report.info.caps[a->report.info.n_caps++] = IE_CAPABILITY;
}

/* Agent.Tunnel on tunnel_listen, with tunnel.pem; a failure is logged and
 * bcd runs without (its instances matter more). */
static void start_tunnel(struct agent *a)
{
	struct tunnel_opts o = {.listen = a->cfg.tunnel_listen, .cert_pem = a->creds.tunnel_cert_pem,
				.key_pem = a->creds.key_pem, .ca_pem = a->creds.ca_pem,
				.conv = a->conv, .state_dir = a->cfg.state_dir,
				.fake = a->rt->ops == &rt_fake_ops, .max = a->cfg.tunnel_max,
				.raw = strcmp(a->cfg.tunnel_protocol, "raw") == 0};
	bool fixed = *a->cfg.tunnel_advertise != '\0';
	int port = 0;

	if (!*a->cfg.tunnel_listen) {
		log_info("tunnel: tunnel_listen is empty: no tunnels into this node's instances");
		return;
	}
	if (!a->creds.tunnel_cert_pem) {
		log_warn("tunnel: no %s/%s yet: no tunnels until the controller issues one (at the "
			 "next certificate renewal)", a->cfg.state_dir, JOIN_TUNNEL_CERT_FILE);
		return;
	}
	if (tunnel_start(&o, &a->tunnel, &port) < 0)
		return;
	if (!fixed)
		default_advertise(&a->cfg, port);
	a->report.info.tunnel_address = a->cfg.tunnel_advertise;
	/* the controller dials a node with this capability raw (tunnel.h) */
	if (o.raw && a->report.info.n_caps < REPORT_MAX_CAPS)
		a->report.info.caps[a->report.info.n_caps++] = TUNNEL_RAW_CAP;
	log_info("tunnel: %s on %s (port %d), advertised as %s",
		 o.raw ? "the raw tunnel protocol" : "Agent.Tunnel", a->cfg.tunnel_listen, port,
		 a->cfg.tunnel_advertise);
}

/* The renew thread's news: main restarts bcd on the new certificate. */
static void renewed(void *ctx)
{
	(void)ctx;
	kill(getpid(), SIGUSR1);
}

static int start_up(struct agent *a)
{
	enum conv_fence fence;
	int e;

	a->client = join_client_new(&a->cfg, &a->creds);
	if (!a->client) {
		log_error("cannot make an mTLS client for %s", a->cfg.controller);
		return EXIT_CONFIG;
	}
	e = gr_open(a->cfg.state_dir, &a->gr);
	if (e < 0) {
		log_error("%s/guest-ready: %s", a->cfg.state_dir, strerror(-e));
		return EXIT_CONFIG;
	}
	gr_set_notify(a->gr, wake_converge, a);
	if (open_runtime(a) < 0)
		return EXIT_CONFIG;
	e = state_cmds_open(a->cfg.state_dir, &a->cmds);
	if (e < 0) {
		log_error("%s/%s unreadable: %s", a->cfg.state_dir, STATE_CMDS_FILE, strerror(-e));
		return EXIT_CONFIG;
	}
	if (open_snapshots(a) < 0)
		return EXIT_CONFIG;
	{
		struct cmds_opts co = {.state_dir = a->cfg.state_dir, .seen = a->cmds, .rt = a->rt,
				       .fake = a->rt->ops == &rt_fake_ops, .snap = a->snap};
		if ((e = cmds_open(&co, &a->commands)) < 0) {
			log_error("%s/%s: %s", a->cfg.state_dir, CMDS_DIR, strerror(-e));
			return EXIT_CONFIG;
		}
	}
	a->conv = conv_new(a->rt);
	conv_set_snapshots(a->conv, a->snap);
	if (open_rebind(a) < 0)
		return EXIT_CONFIG;
	conv_set_rebind(a->conv, a->rebind);
	if (open_volumes(a) < 0)
		return EXIT_CONFIG;
	if (net_open(a->cfg.network, &a->net) < 0) {
		log_error("network %s: nftables or none", a->cfg.network);
		return EXIT_CONFIG;
	}
	if (net_set_limits(a->net, a->cfg.bridge_fdb_max_learned, a->cfg.guest_host_ports) < 0) {
		log_error("guest_host_ports '%s': tcp/PORT or udp/PORT items", a->cfg.guest_host_ports);
		return EXIT_CONFIG;
	}
	conv_set_net(a->conv, a->net);
	conv_set_guestready(a->conv, a->gr);
	conv_set_concurrency(a->conv, a->cfg.runtime_concurrency);
	if (conv_fence_parse(a->cfg.fence, &fence) == 0)  /* checked by cfg_finish */
		conv_set_fence(a->conv, fence, (int64_t)a->cfg.node_lost_seconds * 1000);
	backoff_stop_init(&a->stop);
	a->watch = (struct watch){.client = a->client, .conv = a->conv,
				  .state_dir = a->cfg.state_dir, .node_id = a->creds.node_id,
				  .cmds = a->cmds, .commands = a->commands, .stop = &a->stop};
	atomic_store(&a->watch.applied, load_spec(a));
	a->report = (struct report){.client = a->client, .conv = a->conv, .watch = &a->watch,
				    .cmds = a->commands};
	/* the fake runtime advertises the policy capabilities as the spec's
	 * FakeDaemon does; a real runtime only when this bcd enforces them */
	a->traits = a->rt->ops->traits;
	if (a->rt->ops != &rt_fake_ops)
		a->traits.network_policy = a->traits.ssh_host_only = net_enforces(a->net);
	if (a->rt->ops != &rt_fake_ops && !net_enforces(a->net))
		log_warn("runtime %s with network = %s: nothing makes the instances' taps, so an "
			 "instance with a NIC will not start", a->cfg.runtime, a->cfg.network);
	report_init(&a->report, &a->cfg, &a->traits);
	report_set_cert(&a->report, a->creds.cert_pem, a->cfg.cert_warn_seconds);
	start_tunnel(a);
	start_guestsig(a);
	start_identity(a);
	a->renew = (struct renew){.state_dir = a->cfg.state_dir,
				  .percent = a->cfg.cert_renew_percent, .client = a->client,
				  .creds = &a->creds, .stop = &a->stop, .renewed = renewed, .ctx = a};
	return 0;
}

static void *converge_main(void *p)
{
	conv_run(((struct agent *)p)->conv);
	return NULL;
}

static void *watch_main(void *p)
{
	watch_run(&((struct agent *)p)->watch);
	return NULL;
}

static void *report_main(void *p)
{
	report_run(&((struct agent *)p)->report);
	return NULL;
}

static void *renew_main(void *p)
{
	renew_run(&((struct agent *)p)->renew);
	return NULL;
}


/* Run the threads until SIGTERM or SIGINT (or SIGUSR1: a renewed
 * certificate); then stop them in order. Returns the signal. */
static int run(struct agent *a)
{
	void *(*const bodies[])(void *) = {converge_main, watch_main, report_main, renew_main};
	pthread_t th[ARRAY_SIZE(bodies)];
	sigset_t set;
	int sig = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);  /* threads inherit the mask */
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		if (pthread_create(&th[i], NULL, bodies[i], a) != 0)
			fatal("cannot start a thread");
	cmds_start(a->commands);
	if (net_guard_start(a->net, NET_GUARD_INTERVAL_MS) < 0)
		fatal("cannot start the guard-check thread");
	if (a->cfg.metrics_listen && *a->cfg.metrics_listen) {
		int port = 0, err = 0;
		a->metrics = (struct agent_metrics){.conv = a->conv, .net = a->net,
						 .report = &a->report, .tunnel = a->tunnel,
						 .guestsig = a->gsig, .identity = a->idep};
		a->metrics_srv = metrics_serve(a->cfg.metrics_listen, agent_metrics_render,
					       &a->metrics, &port, &err);
		if (!a->metrics_srv)
			fatal("cannot serve metrics on %s: %s", a->cfg.metrics_listen, strerror(err));
		log_info("metrics on %s (port %d)", a->cfg.metrics_listen, port);
	}
	log_info("bcd %s running: node %s, runtime %s, controller %s", BCD_VERSION,
		 a->creds.node_id, a->cfg.runtime, a->cfg.controller);
	while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
		log_info("SIGHUP ignored: restart bcd to change its configuration");
	if (sig == SIGUSR1)
		log_info("new certificate: restarting (instances keep running)");
	else
		log_info("signal %d: stopping (instances keep running)", sig);
	metrics_stop(a->metrics_srv);
	a->metrics_srv = NULL;
	tunnel_stop(a->tunnel);
	gs_stop(a->gsig);
	a->gsig = NULL;
	ie_stop(a->idep);
	a->idep = NULL;
	a->tunnel = NULL;
	backoff_stop_request(&a->stop);
	conv_stop(a->conv);
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		pthread_join(th[i], NULL);
	cmds_stop(a->commands);
	return sig;
}

static void tear_down(struct agent *a)
{
	gs_stop(a->gsig);   /* it reads the conv and the marks */
	a->gsig = NULL;
	ie_stop(a->idep);   /* it reads the conv and calls the client */
	a->idep = NULL;
	if (a->conv) {
		report_fini(&a->report);
		backoff_stop_destroy(&a->stop);
	}
	cmds_free(a->commands); /* its workers stopped in run(); probes use the runtime */
	rt_close(a->rt);  /* first: its download workers may poke the conv */
	conv_free(a->conv);
	snap_free(a->snap);  /* after the commands and the conv's workers that use it */
	rebind_free(a->rebind);
	vol_free(a->vol);
	gr_close(a->gr);
	net_close(a->net);
	state_cmds_free(a->cmds);
	rpc_client_free(a->client);
	join_creds_free(&a->creds);
	if (a->lock_fd >= 0)
		close(a->lock_fd);
	cfg_free(&a->cfg);
}

int main(int argc, char **argv)
{
	struct agent a = {.lock_fd = -1};
	int rc = parse_config(&a.cfg, argc, argv), sig = 0;

	if (rc >= 0) {
		cfg_free(&a.cfg);
		return rc;
	}
	log_init("bcd", a.cfg.log_lvl);
	signal(SIGPIPE, SIG_IGN);
	if (lock_state_dir(&a) < 0) {
		tear_down(&a);
		return EXIT_CONFIG;
	}
	cfg_fill_host(&a.cfg);
	default_advertise(&a.cfg, 0);
	rpc_global_init();
	curl_global_init(CURL_GLOBAL_DEFAULT);  /* before any thread: images */
	rc = ensure_joined(&a);
	if (rc == 0)
		rc = check_trust(&a);
	if (rc == 0)
		rc = check_owner(&a);
	if (rc == 0)
		rc = start_up(&a);
	if (rc == 0)
		sig = run(&a);
	tear_down(&a);
	rpc_global_shutdown();
	if (sig == SIGUSR1) {
		/* the state dir's lock and every descriptor are close-on-exec */
		execv("/proc/self/exe", argv);
		log_error("cannot restart bcd: %s", strerror(errno));
		return EXIT_CONFIG;
	}
	return rc;
}
