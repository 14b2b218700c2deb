/* config.c: the controller's configuration keys, in one typed table. A file
 * of "key = value" lines, then "--key value" flags, each overriding the
 * defaults. Unknown keys are refused so a typo never goes unnoticed. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "config.h"
#include "sshcert.h"
#include "util.h"

#define S(n, d) {#n, CONF_STR, offsetof(struct ctl_config, n), d, 0, 0, NULL}
#define I(n, d, lo, hi) {#n, CONF_INT, offsetof(struct ctl_config, n), d, lo, hi, NULL}

static const struct conf_key keys[] = {
	S(database, NULL),
	S(listen, "127.0.0.1:7443"),
	S(http_listen, ""),
	S(metrics_listen, ""),
	S(pki_dir, "/var/lib/bc/pki"),
	S(api_san, ""),
	S(migrations_dir, NULL),
	S(replica, NULL),
	S(log_level, "info"),
	S(admin_token_file, NULL),
	S(kek_file, NULL),
	/* the sandbox SSH CA (sandbox_ca.c, docs/operations.md) */
	S(sandbox_ca_key_file, NULL),
	S(sandbox_account, "sandbox"),
	/* certifyHostKey (sandboxes.c): 0 = sandbox guests keep their own host keys */
	I(sandbox_certify_host_key, "1", 0, 1),
	I(workers, "8", 1, 256),
	I(node_lost_seconds, "60", 2, 86400),
	I(replace_after_seconds, "60", 1, 86400),
	I(spec_resync_seconds, "30", 1, 3600),
	I(max_message_bytes, "1048576", 4096, 64 << 20),
	I(sandbox_reconcile_seconds, "15", 1, 3600),
	/* a warm instance whose guest has not reported up this long after its
	 * creation is drained and replaced (warm.c, docs/sandboxes.md) */
	I(warm_boot_timeout_seconds, "300", 1, 86400),
	I(metering_interval_seconds, "60", 1, 3600),
	I(max_waiting_creates, "4096", 0, 1000000),
	I(max_streams, "1024", 2, 100000),
	I(stream_reserve_nodes, "256", 1, 99999),
	I(max_streams_per_principal, "32", 1, 100000),
	I(max_streams_per_tenant, "128", 1, 100000),
	I(max_unauthenticated_streams, "32", 0, 100000),
	I(stream_db_connections, "8", 2, 1000),
	/* the tunnel gateway (tunnels.c, docs/operations.md) */
	I(max_tunnels, "512", 0, 100000),
	I(tunnel_recheck_seconds, "60", 1, 3600),
	/* workload identity (identity.c, docs/identity.md) */
	I(identity_enabled, "0", 0, 1),
	I(identity_cache_seconds, "2", 0, 10),
	I(identity_bootstrap_seconds, "300", 10, 3600),
	I(sandbox_task_max_age_seconds, "172800", 60, 31536000),
	I(events_watch_max_seconds, "3600", 1, 604800),
	I(http_max_connections, "4096", 1, 1000000),
	I(http_max_connections_per_address, "128", 1, 1000000),
	I(http_threads, "256", 1, 4096),
	I(http_handshake_timeout_seconds, "5", 1, 3600),
	I(http_header_timeout_seconds, "10", 1, 3600),
	I(http_idle_timeout_seconds, "60", 1, 86400),
	I(mcp_max_sessions, "1024", 0, 1000000),
	I(mcp_session_idle_seconds, "3600", 1, 604800),
	S(mcp_allowed_origins, ""),
	/* the web console at /console/ of the JSON/HTTP port (docs/console.md) */
	I(console, "1", 0, 1),
	I(node_cert_lifetime_seconds, "31536000", 60, 10 * 31536000),
	I(join_retry_seconds, "300", 0, 86400),
	I(server_cert_renew_days, "30", 0, 3650),
	I(grpc_recv_timeout_ms, "10000", 100, 600000),
	I(grpc_max_streams_per_connection, "100", 1, 100000),
	I(grpc_unauthenticated_workers, "0", 0, 256),
	I(ip_quarantine_seconds, "120", 0, 86400),
	/* hardening: docs/operations.md, "Hardening" (0 turns a limit off) */
	I(rate_limit_per_second, "50", 0, 1000000),
	I(rate_limit_burst, "100", 1, 1000000),
	I(default_quota_instances, "1000", 0, 10000000),
	I(default_quota_unplaced_instances, "100", 0, 10000000),
	I(default_quota_sandboxes, "500", 0, 10000000),
	I(idempotency_retention_seconds, "604800", 0, 1 << 30),
	I(events_retention_seconds, "2592000", 0, 1 << 30),
	I(command_retention_seconds, "604800", 0, 1 << 30),
	I(policy_attach_max, "256", 1, 100000),
	/* the secret broker (docs/secrets.md): 0 = none configured */
	I(secret_broker, "1", 0, 1),
	/* the snapshot store (snapstore.c, docs/snapshots.md): an S3-compatible
	 * server; its secret access key is sealed (snapshot-store set-secret) */
	S(snapshot_store_endpoint, ""),
	S(snapshot_store_region, "us-east-1"),
	S(snapshot_store_bucket, ""),
	S(snapshot_store_prefix, ""),
	S(snapshot_store_access_key_id, ""),
	S(snapshot_store_ca_file, ""),
	I(snapshot_store_path_style, "0", 0, 1),
	I(snapshot_store_timeout_seconds, "30", 1, 3600),
	S(snapshot_runtimes, "fake,libvirt"),
	/* the runtimes whose memory snapshots restore */
	S(snapshot_memory_runtimes, "fake,libvirt"),
	/* tests only: an http:// endpoint on a loopback address */
	I(snapshot_store_allow_http_loopback_for_tests, "0", 0, 1),
};

static int key_set(struct ctl_config *c, const char *name, const char *value)
{
	const struct conf_key *k = conf_key_find(keys, ARRAY_SIZE(keys), name);

	if (!k) {
		fprintf(stderr, "config: unknown key '%s'\n", name);
		return -EINVAL;
	}
	if (conf_set_value(k, c, value) < 0) {
		fprintf(stderr, "config: %s must be an integer in [%lld, %lld]\n", name, k->min,
			k->max);
		return -EINVAL;
	}
	return 0;
}

static int file_key(void *c, const char *name, const char *value)
{
	return key_set(c, name, value);
}

static int load_file(struct ctl_config *c, const char *path)
{
	_cleanup_free_ char *buf = NULL;
	int r, lineno = 0;

	r = file_read_all(path, 1 << 20, &buf, NULL);
	if (r < 0) {
		fprintf(stderr, "config: cannot read %s: %s\n", path, strerror(-r));
		return r;
	}
	r = conf_parse(buf, 0, file_key, c, &lineno);
	if (r == -EBADMSG) {
		fprintf(stderr, "config: %s: line %d: expected key = value\n", path, lineno);
		return -EINVAL;
	}
	return r;
}

int config_load(struct ctl_config *c, const char *path, int argc, char **argv, int first)
{
	char host[256];
	int r;

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (keys[i].def && (r = key_set(c, keys[i].name, keys[i].def)) < 0)
			return r;
	if (path && (r = load_file(c, path)) < 0)
		return r;
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		char name[64];
		if (strncmp(a, "--", 2) != 0 || i + 1 >= argc) {
			fprintf(stderr, "config: expected --key value, got '%s'\n", a);
			return -EINVAL;
		}
		snprintf(name, sizeof(name), "%s", a + 2);
		for (char *p = name; *p; p++)
			if (*p == '-')
				*p = '_';
		if ((r = key_set(c, name, argv[++i])) < 0)
			return r;
	}
	if (!c->replica) {
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "controller");
		host[sizeof(host) - 1] = '\0';
		c->replica = xstrdup(host);
	}
	if (!c->admin_token_file)
		c->admin_token_file = xasprintf("%s/admin.token", c->pki_dir);
	if (!c->kek_file)
		c->kek_file = xasprintf("%s/kek.keys", c->pki_dir);
	if (!c->sandbox_ca_key_file)
		c->sandbox_ca_key_file = xasprintf("%s/sandbox-ssh-ca.key", c->pki_dir);
	if (!sshcert_account_valid(c->sandbox_account)) {
		fprintf(stderr, "config: sandbox_account must be a POSIX user name "
			"([a-z_][a-z0-9_-]{0,31}), got '%s'\n", c->sandbox_account);
		return -EINVAL;
	}
	return 0;
}

void config_free(struct ctl_config *c)
{
	conf_free_strings(keys, ARRAY_SIZE(keys), c);
}
