/* config.c: bcd's configuration keys in one typed table, exactly the keys
 * of docs/operations.md. Unknown keys are refused so a typo never goes
 * unnoticed; every value is bounded. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "conf.h"
#include "nft.h"
#include "util.h"

#define CFG_VALUE_MAX 4096
#define LABEL_KEY_MAX 63
#define LABEL_VALUE_MAX 255

#define S(n, d, h) {#n, CONF_STR, offsetof(struct agent_config, n), d, 0, 0, h}
#define U32(n, d, lo, hi, h) {#n, CONF_U32, offsetof(struct agent_config, n), d, lo, hi, h}
#define U64(n, d, lo, hi, h) {#n, CONF_U64, offsetof(struct agent_config, n), d, lo, hi, h}

static const struct conf_key keys[] = {
	S(controller, NULL, "controller (or load balancer) address host:port"),
	S(ca_file, NULL, "API CA (api-ca.pem) to trust the controller with"),
	S(join_token, NULL, "join token, used once while state_dir holds no certificate"),
	S(state_dir, "/var/lib/bcd", "certificates, spec.pb, runtime state"),
	S(runtime, "fake", "fake or libvirt"),
	S(network, "none", "nftables (bridge, taps, tap guards and policies) or none"),
	S(guest_host_ports, NFT_HOST_PORTS_DEFAULT,
	  "nftables: host ports guests may open connections to, e.g. \"udp/67 tcp/53\" (none: no port)"),
	U32(bridge_fdb_max_learned, "4096", 0, 1u << 24,
	    "nftables: MACs the pool's bridge learns from its uplinks at most (0: no bound)"),
	S(metrics_listen, "", "Prometheus /metrics address, e.g. 127.0.0.1:9464 (empty: off)"),
	S(hostname, NULL, "default: gethostname()"),
	S(address, "127.0.0.1", "where the controller reaches this agent"),
	S(labels, "", "node labels k=v,k=v"),
	U32(capacity_vcpus, "0", 0, 1u << 20, "vCPUs offered (0: host value)"),
	U64(capacity_memory_mib, "0", 0, 1ull << 40, "memory offered in MiB (0: host value)"),
	U64(capacity_disk_gib, "0", 0, 1ull << 30, "disk offered in GiB (0: host value)"),
	U32(report_interval_seconds, "10", 1, 3600, "periodic Node.Report"),
	S(log_level, "info", "debug, info, warn, error"),
	S(libvirt_uri, "qemu:///system", "libvirt runtime: the libvirtd to use"),
	S(data_dir, "", "libvirt runtime: images and instance disks (empty: state_dir/data)"),
	S(volumes_dir, "", "sandbox volumes' sparse raw files (empty: data_dir/volumes)"),
	U32(volume_reserve_percent, "5", 0, 100,
	    "volumes: percent of their filesystem kept free (for overlays and bcd's files)"),
	U64(volume_reserve_min_gib, "2", 0, 1ull << 30, "volumes: the reserve in GiB at least"),
	S(image_ca_file, "", "CA file trusted for image URLs (empty: the system's CAs)"),
	S(snapshot_ca_file, "", "CA file trusted for the snapshot store (empty: the system's CAs)"),
	U32(snapshot_store_allow_http_loopback_for_tests, "0", 0, 1,
	    "TESTS ONLY: 1 lets snapshots move over plain http to 127.0.0.1/[::1]/localhost"),
	S(domain_type, "auto", "auto (kvm with hardware virtualisation, else qemu), kvm or qemu"),
	U32(stop_timeout_seconds, "30", 1, 3600, "ACPI shutdown time before a stop forces the guest off"),
	U64(image_max_gib, "64", 1, 1ull << 16, "largest image downloaded, GiB"),
	U32(cert_renew_percent, "67", 10, 95, "renew the node certificate after this percent of its life"),
	U32(cert_warn_seconds, "2592000", 0, 10 * 31536000,
	    "reports warn cert-expiring when the node certificate expires within this (0: never)"),
	U32(node_lost_seconds, "60", 2, 86400,
	    "fence after this long without a controller (at most the controller's)"),
	S(fence, "pause", "when fenced: pause (and cut the network), stop, or off"),
	S(tunnel_listen, "[::]:7444",
	  "Agent.Tunnel (the controller's ssh tunnels into instances), mTLS (empty: off)"),
	S(tunnel_advertise, "",
	  "host:port the controller dials for tunnels (empty: address and tunnel_listen's port)"),
	U32(tunnel_max, "256", 1, 65536, "tunnels open at once at most"),
	S(tunnel_protocol, "raw",
	  "tunnel_listen's protocol: raw (TLS byte stream, capability tunnel.raw) or grpc "
	  "(Agent.Tunnel, for controllers that predate raw)"),
	S(guest_ready, "auto",
	  "the guest-up signal's listener on the pool gateway, tcp/9469: on, off, or auto "
	  "(on with network = nftables, the bcd that owns the bridge)"),
	S(identity_endpoint, "auto",
	  "the workload-identity endpoint on the pool gateway, tcp/9470 (docs/identity.md): on, "
	  "off, or auto (on with network = nftables); while it runs bcd advertises "
	  "instance.identity"),
	U32(identity_port, "9470", 1, 65535,
	    "the identity endpoint's port: guests are told 9470, change it only in tests"),
	U32(runtime_concurrency, "2", 0, 64,
	    "slow runtime calls (create, first start, destroy) run at once off the converge pass "
	    "(0: inline in the pass)"),
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int cfg_set(struct agent_config *c, const char *name, const char *value, char *err, size_t errlen)
{
	const struct conf_key *k = conf_key_find(keys, ARRAY_SIZE(keys), name);

	if (!k)
		return fail(err, errlen, "unknown key '%.64s'", name);
	if (!str_is_printable(value, CFG_VALUE_MAX))
		return fail(err, errlen, "%s: value too long or not printable", k->name);
	if (conf_set_value(k, c, value) < 0)
		return fail(err, errlen, "%s must be an integer in [%lld, %lld]", k->name, k->min,
			    k->max);
	return 0;
}

void cfg_init(struct agent_config *c)
{
	char err[CFG_ERR_MAX];

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (keys[i].def && cfg_set(c, keys[i].name, keys[i].def, err, sizeof(err)) < 0)
			abort();  /* the table's own defaults are wrong */
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* A key = value line of the file: cfg_set, its error kept in sub. */
struct file_ctx {
	struct agent_config *c;
	char sub[CFG_ERR_MAX];
};

static int file_key(void *ctx, const char *name, const char *value)
{
	struct file_ctx *f = ctx;

	return cfg_set(f->c, name, value, f->sub, sizeof(f->sub));
}

int cfg_load_file(struct agent_config *c, const char *path, char *err, size_t errlen)
{
	_cleanup_free_ char *buf = NULL;
	struct file_ctx f = {.c = c};
	int e, lineno = 0;

	e = file_read_all(path, 1 << 20, &buf, NULL);
	if (e < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-e));
		return e;
	}
	e = conf_parse(buf, 0, file_key, &f, &lineno);
	if (e == -EBADMSG) {
		snprintf(err, errlen, "%s: line %d: expected key = value", path, lineno);
		return -EINVAL;
	}
	if (e < 0)
		snprintf(err, errlen, "%s: line %d: %s", path, lineno, f.sub);
	return e;
}

/* "--state-dir" -> "state_dir"; value split off "--key=value". */
static void flag_name(const char *arg, char *name, size_t len, const char **ret_inline)
{
	const char *eq = strchr(arg, '=');
	size_t n = eq ? (size_t)(eq - arg) : strlen(arg);

	if (n >= len)
		n = len - 1;
	memcpy(name, arg, n);
	name[n] = '\0';
	for (char *p = name; *p; p++)
		if (*p == '-')
			*p = '_';
	*ret_inline = eq ? eq + 1 : NULL;
}

/* Flags that are not keys; returns true if argv[*i] was one. */
static bool cli_flag(int argc, char **argv, int *i, struct cfg_cli *cli)
{
	const char *a = argv[*i];

	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
		cli->help = true;
	else if (strcmp(a, "--version") == 0 || strcmp(a, "version") == 0)
		cli->version = true;
	else if (strcmp(a, "-n") == 0)
		cli->check = true;
	else if (strcmp(a, "--check-host") == 0)
		cli->check_host = true;
	else if (strcmp(a, "--config") == 0 && *i + 1 < argc)
		cli->config_path = argv[++*i];
	else if (strncmp(a, "--config=", 9) == 0)
		cli->config_path = a + 9;
	else
		return false;
	return true;
}

static int apply_flags(struct agent_config *c, int argc, char **argv, struct cfg_cli *cli,
		       char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		char name[64];
		const char *value;
		if (cli_flag(argc, argv, &i, cli))
			continue;
		if (strncmp(argv[i], "--", 2) != 0)
			return fail(err, errlen, "unexpected argument '%.64s'", argv[i]);
		flag_name(argv[i] + 2, name, sizeof(name), &value);
		if (!value && i + 1 >= argc)
			return fail(err, errlen, "%.64s needs a value", argv[i]);
		if (!value)
			value = argv[++i];
		if (cfg_set(c, name, value, err, errlen) < 0)
			return -EINVAL;
	}
	return 0;
}

int cfg_from_args(struct agent_config *c, int argc, char **argv, struct cfg_cli *cli, char *err,
		  size_t errlen)
{
	struct cfg_cli first = {0};
	struct agent_config scratch;
	int e;

	/* pass 1 only finds --config (and rejects bad syntax early) */
	cfg_init(&scratch);
	e = apply_flags(&scratch, argc, argv, &first, err, errlen);
	cfg_free(&scratch);
	if (e < 0)
		return e;
	if (first.config_path && (e = cfg_load_file(c, first.config_path, err, errlen)) < 0)
		return e;
	*cli = (struct cfg_cli){0};
	return apply_flags(c, argc, argv, cli, err, errlen);
}

/* Keys as the controller accepts them: [A-Za-z0-9./_-], not bc.dev/cap.*
 * (the controller writes those from capabilities). */
static bool label_key_ok(const char *s)
{
	if (!*s || strlen(s) > LABEL_KEY_MAX || strncmp(s, "bc.dev/cap.", 11) == 0)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-/", *s))
			return false;
	return true;
}

static bool label_value_ok(const char *s)
{
	return str_is_printable(s, LABEL_VALUE_MAX);
}

static int parse_labels(struct agent_config *c, char *err, size_t errlen)
{
	_cleanup_free_ char *copy = xstrdup(c->labels);
	char *save = NULL;

	for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *k = trim(kv), *eq = strchr(k, '=');
		if (!*k)
			continue;
		if (!eq)
			return fail(err, errlen, "labels: '%.64s' is not k=v", k);
		*eq = '\0';
		k = trim(k);
		if (!label_key_ok(k) || !label_value_ok(trim(eq + 1)))
			return fail(err, errlen, "labels: bad key or value near '%.64s'", k);
		if (c->n_labels == CFG_MAX_LABELS)
			return fail(err, errlen, "labels: more than %d", CFG_MAX_LABELS);
		c->label_list[c->n_labels].key = xstrdup(k);
		c->label_list[c->n_labels].value = xstrdup(trim(eq + 1));
		c->n_labels++;
	}
	return 0;
}

static bool host_ports_ok(const char *list)
{
	struct nft_net probe = { 0 };

	return nft_net_host_ports(&probe, list) == 0;
}

int cfg_finish(struct agent_config *c, char *err, size_t errlen)
{
	char host[256];

	if (!c->controller || !*c->controller)
		return fail(err, errlen, "%s is required", "controller");
	if (!c->state_dir || !*c->state_dir)
		return fail(err, errlen, "%s is required", "state_dir");
	if (log_level_parse(c->log_level, &c->log_lvl) < 0)
		return fail(err, errlen, "log_level '%.32s': debug, info, warn or error", c->log_level);
	if (strcmp(c->network, "nftables") != 0 && strcmp(c->network, "none") != 0)
		return fail(err, errlen, "network '%.32s': nftables or none", c->network);
	if (!host_ports_ok(c->guest_host_ports))
		return fail(err, errlen,
			    "guest_host_ports '%.64s': tcp/PORT or udp/PORT items (at most %d each)",
			    c->guest_host_ports, NFT_PORTS_MAX);
	if (strcmp(c->domain_type, "auto") && strcmp(c->domain_type, "kvm") &&
	    strcmp(c->domain_type, "qemu"))
		return fail(err, errlen, "domain_type '%.32s': auto, kvm or qemu", c->domain_type);
	if (strcmp(c->fence, "pause") && strcmp(c->fence, "stop") && strcmp(c->fence, "off"))
		return fail(err, errlen, "fence '%.32s': pause, stop or off", c->fence);
	if (strcmp(c->guest_ready, "auto") && strcmp(c->guest_ready, "on") &&
	    strcmp(c->guest_ready, "off"))
		return fail(err, errlen, "guest_ready '%.32s': auto, on or off", c->guest_ready);
	if (strcmp(c->identity_endpoint, "auto") && strcmp(c->identity_endpoint, "on") &&
	    strcmp(c->identity_endpoint, "off"))
		return fail(err, errlen, "identity_endpoint '%.32s': auto, on or off",
			    c->identity_endpoint);
	if (*c->data_dir && *c->data_dir != '/')
		return fail(err, errlen, "data_dir '%.64s' must be an absolute path", c->data_dir);
	if (*c->volumes_dir && *c->volumes_dir != '/')
		return fail(err, errlen, "volumes_dir '%.64s' must be an absolute path",
			    c->volumes_dir);
	if (!*c->volumes_dir) {
		free(c->volumes_dir);
		c->volumes_dir = *c->data_dir ? xasprintf("%s/volumes", c->data_dir)
					      : xasprintf("%s/data/volumes", c->state_dir);
	}
	if (*c->tunnel_advertise && (strlen(c->tunnel_advertise) > 255 ||
				     !strrchr(c->tunnel_advertise, ':') ||
				     strchr(c->tunnel_advertise, ' ') ||
				     atoi(strrchr(c->tunnel_advertise, ':') + 1) <= 0))
		return fail(err, errlen, "tunnel_advertise '%.64s' must be host:port",
			    c->tunnel_advertise);
	if (strcmp(c->tunnel_protocol, "raw") != 0 && strcmp(c->tunnel_protocol, "grpc") != 0)
		return fail(err, errlen, "tunnel_protocol '%.16s' must be raw or grpc",
			    c->tunnel_protocol);
	if (!c->hostname || !*c->hostname) {
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		free(c->hostname);
		c->hostname = xstrdup(host);
	}
	if (strlen(c->hostname) > 253)
		return fail(err, errlen, "%s is longer than 253 characters", "hostname");
	for (size_t i = 0; i < c->n_labels; i++) {
		free(c->label_list[i].key);
		free(c->label_list[i].value);
	}
	c->n_labels = 0;
	return parse_labels(c, err, errlen);
}

static uint64_t meminfo_total_mib(void)
{
	_cleanup_free_ char *buf = NULL;
	const char *p;

	if (file_read_all("/proc/meminfo", 1 << 16, &buf, NULL) < 0)
		return 0;
	p = strstr(buf, "MemTotal:");
	return p ? strtoull(p + 9, NULL, 10) / 1024 : 0;
}

void cfg_fill_host(struct agent_config *c)
{
	struct statvfs vfs;

	if (!c->capacity_vcpus) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		c->capacity_vcpus = n > 0 ? (uint32_t)n : 1;
	}
	if (!c->capacity_memory_mib)
		c->capacity_memory_mib = meminfo_total_mib();
	if (!c->capacity_disk_gib && statvfs(c->state_dir, &vfs) == 0)
		c->capacity_disk_gib = (uint64_t)vfs.f_bavail * vfs.f_frsize >> 30;
}

void cfg_print(const struct agent_config *c, FILE *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		const void *field = (const char *)c + keys[i].off;
		const char *s;
		switch (keys[i].type) {
		case CONF_STR:
			s = *(char *const *)field;
			if (s && *s && strcmp(keys[i].name, "join_token") == 0)
				s = "(set, not shown)";
			fprintf(out, "%s = %s\n", keys[i].name, s ? s : "");
			break;
		case CONF_INT:
			fprintf(out, "%s = %d\n", keys[i].name, *(const int *)field);
			break;
		case CONF_U32:
			fprintf(out, "%s = %" PRIu32 "\n", keys[i].name, *(const uint32_t *)field);
			break;
		case CONF_U64:
			fprintf(out, "%s = %" PRIu64 "\n", keys[i].name, *(const uint64_t *)field);
			break;
		}
	}
}

void cfg_usage(FILE *out)
{
	fprintf(out, "usage: bcd --config FILE [--key value]...\n"
		     "       bcd --controller HOST:PORT --ca-file api-ca.pem --join-token bcjt_... "
		     "--state-dir DIR [--runtime fake]\n"
		     "       bcd -n ...   check the configuration and print it\n"
		     "       bcd --check-host [--libvirt-uri URI]   check this host for the libvirt "
		     "runtime\n"
		     "       bcd --version\n\nkeys (file: key = value; flag: --key value):\n");
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		fprintf(out, "  %-24s %s%s%s\n", keys[i].name, keys[i].help,
			keys[i].def && *keys[i].def ? "; default " : "",
			keys[i].def && *keys[i].def ? keys[i].def : "");
}

void cfg_free(struct agent_config *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (keys[i].type == CONF_STR) {
			char **p = (char **)((char *)c + keys[i].off);
			if (*p && strcmp(keys[i].name, "join_token") == 0)
				explicit_bzero(*p, strlen(*p));
			free(*p);
			*p = NULL;
		}
	for (size_t i = 0; i < c->n_labels; i++) {
		free(c->label_list[i].key);
		free(c->label_list[i].value);
	}
	c->n_labels = 0;
}
