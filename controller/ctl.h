/* ctl.h: what the controller's subsystems share: the configuration, the
 * application object, the caller (principal) of an API call, and the entry
 * points of each subsystem. */
#ifndef BC_CTL_H
#define BC_CTL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "db.h"
#include "err.h"
#include "rpc.h"

/* The newest schema version this binary knows; equals the number of files in
 * migrations/ (checked by a unit test). serve refuses any other version. */
#define CTL_SCHEMA_VERSION 11

struct ctl_config {
	char *database;
	char *listen;
	char *http_listen;   /* "" = no JSON/HTTP transport */
	char *metrics_listen; /* "" = no /metrics endpoint */
	char *pki_dir;
	char *api_san;
	char *migrations_dir;
	char *replica;
	char *log_level;
	char *admin_token_file;
	int workers;
	int node_lost_seconds;
	int replace_after_seconds;   /* a host's admission refusal stands this long */
	int spec_resync_seconds;
	int max_message_bytes;
	int sandbox_reconcile_seconds;
	int metering_interval_seconds;
	int max_waiting_creates;     /* Sandboxes.Create waits held off the workers */
	/* streams (streams.c) */
	int max_streams;
	int stream_reserve_nodes;
	int max_streams_per_principal;
	int max_streams_per_tenant;
	int max_unauthenticated_streams;
	int stream_db_connections;
	int events_watch_max_seconds;
	/* JSON/HTTP connection limits (rpc_server_opts http_*) */
	int http_max_connections, http_max_connections_per_address, http_threads;
	int http_handshake_timeout_seconds, http_header_timeout_seconds;
	int http_idle_timeout_seconds;
	int node_cert_lifetime_seconds; /* node certificates (Join, RenewCertificate) */
	int join_retry_seconds;      /* a Join retried this long after gets the same answer */
	int server_cert_renew_days;  /* serve reissues server.pem this close to expiry */
	int grpc_recv_timeout_ms;    /* a streaming call's request must arrive within */
	int grpc_max_streams_per_connection;
	int grpc_unauthenticated_workers; /* 0: workers / 4, at least 1 */
	int ip_quarantine_seconds;   /* a released address waits this long (ipam.c) */
	/* hardening (docs/operations.md, "Hardening"): 0 turns each off */
	int rate_limit_per_second, rate_limit_burst;   /* per principal, per replica */
	int default_quota_instances, default_quota_unplaced_instances,
	    default_quota_sandboxes;                    /* a tenant without its own quota */
	int idempotency_retention_seconds, events_retention_seconds;
	int policy_attach_max;                          /* policies applying to one identity */
};

/* Load defaults, then the file at path (if not NULL), then argv flags
 * "--key value" from argv[first..argc). -EINVAL with a message on stderr. */
int config_load(struct ctl_config *c, const char *path, int argc, char **argv, int first);
void config_free(struct ctl_config *c);

struct watch_registry;
struct waiter;

struct ctl_app {
	struct ctl_config cfg;
	rpc_server *server;
	struct watch_registry *watches;
	char *api_ca_pem, *node_ca_pem, *node_ca_key_pem;
	atomic_bool stopping;        /* set once by the stopping thread, read by all */
	pthread_t listen_thread, reconcile_thread, sbx_thread;
	struct metrics_srv *metrics;
	int waiting;                 /* calls holding a worker in a create's wait */
	struct waiter *waiter;       /* sandbox creates waiting off the workers (waiter.c) */
	struct waiter *inst_waiter;  /* instance creates waiting off the workers */
	struct streams *streams;     /* stream admission and database pool */
};

/* The caller of an API call, set by the pre-call hook. */
enum principal_kind { PRINCIPAL_NONE, PRINCIPAL_IDENTITY, PRINCIPAL_NODE };

struct principal {
	enum principal_kind kind;
	char id[64];         /* identity id or node id */
	char tenant_id[64];  /* identities */
	char pool_id[64];    /* nodes */
	bool is_admin;
	char identity_kind[16];  /* user | service | agent */
	/* an agent: the user it acts for and the live delegation; others: "" */
	char user_id[64];
	char delegation_id[64];
};

/* From a call: the app, this thread's database, the principal. */
struct ctl_app *ctl_app(const rpc_call *call);
struct db *ctl_db(const rpc_call *call);
const struct principal *ctl_principal(const rpc_call *call);

/* migrate.c */
int migrate_apply(struct db *d, const char *dir, int *ret_version);
int migrate_current(struct db *d, int *ret_version);
const char *migrate_default_dir(const char *configured);

/* auth.c: authenticate a call (bearer token or node certificate). */
int auth_pre_call(rpc_call *call, bc_error *err);
/* The methods (besides grpc.health.v1.Health's) that need no credential,
 * NULL-terminated. */
extern const char *const auth_open_methods[];
/* The operator: an administrator of the root tenant (the admin API's
 * callers; implicit allow everywhere). */
#define AUTH_ROOT_TENANT "root"
bool auth_is_operator(const struct principal *p);
/* Token hashing and minting (tokens are stored as SHA-256 only). */
void auth_token_new(char *out, size_t len);
int auth_create_admin(struct db *d, const char *tenant_id, const char *name, char *ret_token,
		      size_t len);
/* Resolve the tenant a call acts in: the request's tenant_id, or the
 * caller's own when empty. Non-admins may act only in their own tenant
 * (another tenant's is NOT_FOUND). */
int auth_tenant(const rpc_call *call, const char *requested, const char **ret_tenant,
		bc_error *err);

/* quota.c: the default per-tenant limits from the config (see authz.h) */
void quota_configure(const struct ctl_config *c);

/* ratelimit.c: one token bucket (tokens, when last refilled) */
struct ratelimit_bucket {
	double tokens;
	int64_t at_ms;       /* 0: new, full */
};
/* Take a token from b at now_ms, refilling rate a second up to burst:
 * 0, or -EAGAIN with *ret_retry_s (>= 1) until one is back. Pure. */
int ratelimit_bucket_take(struct ratelimit_bucket *b, int64_t now_ms, int rate, int burst,
			  int *ret_retry_s);
/* Set the rate and burst from the config (rate 0: no limit). */
void ratelimit_configure(const struct ctl_config *c);
/* One request of principal_id: 0, or RESOURCE_EXHAUSTED with details
 * reason rate-limited and retryAfterSeconds. */
int ratelimit_take(const char *principal_id, bc_error *err);

/* init.c */
int init_run(struct ctl_app *app, bool new_admin_token);
int pki_load(struct ctl_app *app);
/* Reissue server.pem/server.key from the API CA (same SANs: localhost,
 * loopback and api_san) when it expires within server_cert_renew_days
 * (0: never); 0 or -errno. Called by serve before it listens. */
int init_renew_server_cert(struct ctl_app *app);

/* services: registration of each API group on the server. */
int admin_register(rpc_server *s);
int admin_catalog_register(rpc_server *s);
int instances_register(rpc_server *s);
int nodeapi_register(rpc_server *s);
/* nodeapi.c: 0 if cert_pem (the node's verified client certificate) carries
 * the serial issued to node last, or a renewed one not presented before,
 * which becomes the only one accepted; -EACCES for any other (or none),
 * -errno from the database. */
int nodeapi_check_serial(struct db *d, const char *node, const char *cert_pem);
int iam_tenants_register(rpc_server *s);
int events_register(rpc_server *s);
int iam_policies_register(rpc_server *s);

/* events.c: record a change to what a node runs, inside the caller's tx
 * (a node_spec_changes row naming no instance, so the next build is whole,
 * and a NOTIFY; the node's stream bumps the generation when it takes them:
 * spec_take_changes, 1 if it moved, with the instances the rows named). */
int spec_bump(struct db *d, const char *node_id);
/* the same for a change to that one instance's entry alone (its desired
 * state, its placement, its deletion) */
int spec_bump_instance(struct db *d, const char *node_id, const char *instance_id);
int spec_take_changes(struct db *d, const char *node_id, bool *all, char **dirty);

/* events.c: the reconciler's retention pass (every 30 s): purge
 * the events and idempotency keys older than their config keys'
 * retention, a bounded batch each. */
void events_retention_tick(struct db *d, const struct ctl_config *cfg);

/* watch.c: the LISTEN thread and the registry of open WatchSpec streams. */
struct watch_registry *watch_registry_new(void);
void watch_registry_free(struct watch_registry *r);
void *watch_listen_thread(void *app);

/* reconcile.c: node loss and unplaced instances (one leader). */
void *reconcile_thread(void *app);

/* meter.c: one metering pass (usage lines of every open hourly window,
 * recomputed from the bookings; idempotent), in a transaction of its own;
 * *ret_lines (may be NULL) the lines it changed. meter_tick runs a pass
 * when interval_seconds have passed since the last (reconciler only). */
int meter_pass(struct db *d, int64_t *ret_lines, bc_error *err);
void meter_tick(struct db *d, int interval_seconds);
int usage_register(rpc_server *s);

/* teardown.c: tear a `deleting` tenant down, one transaction (a no-op for
 * a tenant not deleting, or one another pass holds); *ret_done (may be
 * NULL) once the tenant became deleted. teardown_tick runs it for every
 * deleting tenant (reconciler only). */
int teardown_tenant(struct db *d, const char *tenant, bool *ret_done, bc_error *err);
void teardown_tick(struct db *d);

/* iam_react.c: withdraw the open sandboxes of agents no longer active or
 * whose delegation was revoked, delete those of deleted owners
 * (reconciler only). */
void iam_react_tick(struct db *d);

/* streams.c: admission of streaming calls (per replica, reserve for
 * nodes, per principal, per tenant, strangers together) and the bounded
 * database pool their handlers read from. */
struct streams *streams_new(const struct ctl_config *cfg);
void streams_free(struct streams *s);
/* The server's stream_admit/stream_done: 0, or -BC_EDOMAIN with
 * QUOTA_EXCEEDED (gRPC RESOURCE_EXHAUSTED, HTTP 429), details.reason
 * stream-limit-{replica,principal,tenant,unauthenticated} and limit. */
int streams_admit(rpc_call *call, bc_error *err);
void streams_done(rpc_call *call);
/* A stream handler takes a pool connection before it reads (ctl_db(call)
 * is it until given back) and gives it back before it waits: 0, or
 * UNAVAILABLE when none came free within 30 s or the server stops.
 * stream_db_give is a no-op when the call holds none. */
int stream_db_take(rpc_call *call, bc_error *err);
void stream_db_give(rpc_call *call);
/* At start: refuse (-ERANGE, logged) when the connections this replica may
 * open exceed what the database allows, or (-EINVAL) a reserve not below
 * max_streams. */
int streams_check_budget(struct db *d, const struct ctl_config *cfg);

/* server.c */
int server_start(struct ctl_app *app);
void server_stop(struct ctl_app *app);

/* validate.c: INVALID_INPUT naming the field (details.field). Returns
 * -BC_EDOMAIN. */
int invalid(bc_error *err, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* An id of the given prefix, else INVALID_INPUT on field. */
int check_id(bc_error *err, const char *field, const char *prefix, const char *value);
/* Map a database failure to the caller: UNAVAILABLE/INTERNAL. */
int db_fail(bc_error *err, int rc);
/* Run a statement that must return a row: 0 with *ret (PQclear it), or
 * NOT_FOUND with the printf-style message when it returns none, or the
 * database failure as db_fail maps it. */
int db_one(struct db *d, PGresult **ret, const char *sql, const struct dbp *p, bc_error *err,
	   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ipam.c: pure address helpers (IPv4 subnets, IPv6 /64s, MACs). */
int ipam_parse_ip4(const char *s, uint32_t *ret);
int ipam_parse_cidr4(const char *s, uint32_t *ret_net, int *ret_prefix);
int ipam_parse_cidr6(const char *s, unsigned char ret_net[16], int *ret_prefix);
bool ipam_contains4(uint32_t net, int prefix, uint32_t ip);
/* Number of leasable host addresses (excludes network and broadcast). */
uint32_t ipam_hosts4(int prefix);
void ipam_format4(uint32_t ip, char *out, size_t len);
/* A locally administered unicast MAC from 5 random bytes. */
void ipam_random_mac(char out[18]);
/* The EUI-64 IPv6 address in net/64 for mac; -EINVAL for a bad MAC. */
int ipam_eui64(const unsigned char net[16], const char *mac, char *out, size_t len);
/* Tap name for NIC idx of instance id: "bct" + 11 id chars + idx (<= 15). */
void ipam_tap_name(const char *instance_id, int idx, char out[16]);
/* How long a released address waits before it is leased again (config key
 * ip_quarantine_seconds): set once at start, before any thread; read by
 * lease_nic (placement.c). */
void ipam_set_quarantine(int seconds);
int ipam_quarantine(void);

/* events.c: publish an event inside the caller's transaction. data_json
 * may be NULL ("{}"). Statements may insert events themselves: no lock is
 * needed, the order is given after commit (events_sequence). */
int event_publish(struct db *d, const char *type, const char *subject, const char *tenant_id,
		  const char *data_json);
/* Number the committed events that have no seq yet (bc_events_sequence);
 * readers call it before reading, in a transaction of its own. */
int events_sequence(struct db *d);

#endif
