/* config.h: bcd's configuration (docs/operations.md, "bcd"), one typed
 * table of keys. A file of "key = value" lines, then "--key value" flags
 * (dashes or underscores) that win over the file. */
#ifndef BC_AGENT_CONFIG_H
#define BC_AGENT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

#define CFG_MAX_LABELS 64
#define CFG_ERR_MAX 256

struct cfg_label {
	char *key;
	char *value;
};

struct agent_config {
	char *controller;               /* host:port (required) */
	char *ca_file;                  /* API CA, required at join */
	char *join_token;
	char *state_dir;
	char *runtime;
	char *network;                  /* nftables | none */
	char *guest_host_ports;         /* host ports open to guests: "udp/67 tcp/53" */
	uint32_t bridge_fdb_max_learned; /* bound on MACs the bridge learns, 0 = none */
	char *metrics_listen;           /* GET /metrics address; "" = off */
	char *hostname;                 /* default: gethostname() */
	char *address;
	char *labels;                   /* "k=v,k=v", parsed into label_list */
	uint32_t capacity_vcpus;        /* 0: host value (cfg_fill_host) */
	uint64_t capacity_memory_mib;
	uint64_t capacity_disk_gib;
	uint32_t report_interval_seconds;
	char *log_level;
	/* runtime = libvirt */
	char *libvirt_uri;
	char *data_dir;                 /* "" = state_dir/data */
	char *image_ca_file;            /* "" = the system's CAs */
	char *snapshot_ca_file;         /* "" = the system's CAs */
	uint32_t snapshot_store_allow_http_loopback_for_tests; /* tests only: 1 = http to loopback */
	char *volumes_dir;              /* "" = data_dir/volumes (set by cfg_finish) */
	uint32_t volume_reserve_percent; /* of the volumes' filesystem, kept free */
	uint64_t volume_reserve_min_gib; /* the reserve at least */
	char *domain_type;              /* auto | kvm | qemu */
	uint32_t stop_timeout_seconds;
	uint32_t cert_renew_percent;    /* Node.RenewCertificate after this much of its life */
	uint32_t cert_warn_seconds;     /* reports warn this long before it expires (0: never) */
	uint64_t image_max_gib;
	uint32_t node_lost_seconds;     /* fence after this long without a controller */
	char *fence;                    /* pause | stop | off */
	uint32_t runtime_concurrency;   /* converge job workers; 0: inline */
	char *tunnel_listen;            /* Agent.Tunnel's mTLS port; "" = off */
	char *tunnel_advertise;         /* host:port the controller dials ("" = address:port) */
	uint32_t tunnel_max;            /* tunnels open at once */
	char *tunnel_protocol;          /* "raw" or "grpc" */
	char *guest_ready;              /* auto | on | off: the guest-up listener */
	char *identity_endpoint;        /* auto | on | off: identity_ep.h */
	uint32_t identity_port;         /* BC_IDENTITY_PORT; tests only */
	/* derived by cfg_finish */
	struct cfg_label label_list[CFG_MAX_LABELS];
	size_t n_labels;
	enum log_level log_lvl;
};

/* What the command line asked for besides keys. */
struct cfg_cli {
	const char *config_path;  /* --config FILE, borrowed from argv */
	bool help;                /* -h, --help */
	bool version;             /* --version, or the word "version" */
	bool check;               /* -n: check and print the configuration */
	bool check_host;          /* --check-host: hostcheck.h, then exit */
};

/* Defaults of every key. */
void cfg_init(struct agent_config *c);

/* Set one key from text (type-checked against the table). 0, or -EINVAL
 * with a message in err. */
int cfg_set(struct agent_config *c, const char *key, const char *value, char *err, size_t errlen);

/* Apply a "key = value" file; '#' starts a comment. 0 or -errno/-EINVAL. */
int cfg_load_file(struct agent_config *c, const char *path, char *err, size_t errlen);

/* The whole command line: --config FILE first, then every --key value
 * (or --key=value) over it. Fills cli. 0 or -EINVAL with err. */
int cfg_from_args(struct agent_config *c, int argc, char **argv, struct cfg_cli *cli, char *err,
		  size_t errlen);

/* Check required keys, parse labels and log_level, default the hostname.
 * 0 or -EINVAL with err. */
int cfg_finish(struct agent_config *c, char *err, size_t errlen);

/* Fill capacities left 0 with this host's values (online CPUs, MemTotal,
 * free space of state_dir's filesystem). */
void cfg_fill_host(struct agent_config *c);

/* Print the normalised configuration (join_token redacted). */
void cfg_print(const struct agent_config *c, FILE *out);

/* Usage text, with every key and its default. */
void cfg_usage(FILE *out);

/* Free every string (join_token wiped) and the parsed labels. */
void cfg_free(struct agent_config *c);

#endif
