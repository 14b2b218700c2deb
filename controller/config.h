/* config.h: the controller's configuration (config.c): every key, loaded
 * once at start and read-only after. */
#ifndef BC_CTL_CONFIG_H
#define BC_CTL_CONFIG_H

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
	char *kek_file;     /* key-encryption keys of the sealed store (kek.c) */
	char *sandbox_ca_key_file; /* the sandbox SSH CA's ed25519 key (sandbox_ca.c) */
	char *sandbox_account;     /* the guests' login for Sandboxes.Exec */
	int sandbox_certify_host_key; /* 1: certified host keys when a sandbox CA exists */
	int workers;
	int node_lost_seconds;
	int replace_after_seconds;   /* a host's admission refusal stands this long */
	int spec_resync_seconds;
	int max_message_bytes;
	int sandbox_reconcile_seconds;
	int warm_boot_timeout_seconds; /* warm guests not up by then are drained (warm.c) */
	int metering_interval_seconds;
	int max_waiting_creates;     /* Sandboxes.Create waits held off the workers */
	/* streams (streams.c) */
	int max_streams;
	int stream_reserve_nodes;
	int max_streams_per_principal;
	int max_streams_per_tenant;
	int max_unauthenticated_streams;
	int max_tunnels;
	int tunnel_recheck_seconds;
	/* workload identity (identity.c): on for every template that leaves
	 * it to the deployment; recognition cache bound; bootstrap expiry;
	 * a task-bound sandbox's whole life */
	int identity_enabled, identity_cache_seconds, identity_bootstrap_seconds;
	int sandbox_task_max_age_seconds;
	int stream_db_connections;
	int events_watch_max_seconds;
	/* JSON/HTTP connection limits (rpc_server_opts http_*) */
	int http_max_connections, http_max_connections_per_address, http_threads;
	int http_handshake_timeout_seconds, http_header_timeout_seconds;
	int http_idle_timeout_seconds;
	/* MCP at /mcp of the JSON/HTTP port (docs/mcp.md): 0 sessions: off */
	int mcp_max_sessions, mcp_session_idle_seconds;
	char *mcp_allowed_origins;
	int console;                 /* the web console at /console/ (docs/console.md) */
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
	int command_retention_seconds; /* settled commands (node_commands.c) */
	int policy_attach_max;                          /* policies applying to one identity */
	int secret_broker;           /* 1: a secret broker is configured (secrets.c) */
	/* the snapshot store (snapstore.c, docs/snapshots.md); "" endpoint: none */
	char *snapshot_store_endpoint, *snapshot_store_region, *snapshot_store_bucket;
	char *snapshot_store_prefix, *snapshot_store_access_key_id, *snapshot_store_ca_file;
	int snapshot_store_path_style;
	int snapshot_store_timeout_seconds;
	int snapshot_store_allow_http_loopback_for_tests;
	char *snapshot_runtimes;   /* comma-separated runtimes with the snapshot trait */
	char *snapshot_memory_runtimes; /* ... of them, those whose memory snapshots restore */
};

/* Load defaults, then the file at path (if not NULL), then argv flags
 * "--key value" from argv[first..argc). -EINVAL with a message on stderr. */
int config_load(struct ctl_config *c, const char *path, int argc, char **argv, int first);
/* Free what config_load allocated; c may be loaded again after. */
void config_free(struct ctl_config *c);

#endif
