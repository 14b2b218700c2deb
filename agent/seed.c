/* seed.c: NoCloud seed texts (pure) and the cidata ISO (seed.h). */
#include "seed.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime.h"
#include "spawn.h"
#include "util.h"

#define ISO_TIMEOUT_MS 60000

char *seed_meta_data(const char *instance_id)
{
	char host[RT_ID_MAX + 1];

	snprintf(host, sizeof(host), "%s", instance_id);
	for (char *p = host; *p; p++)
		if (*p == '_' || *p == '.')
			*p = '-';
	/* ids are [A-Za-z0-9_.-]: safe inside YAML double quotes */
	return xasprintf("instance-id: \"%s\"\nlocal-hostname: \"%s\"\n", instance_id, host);
}

static bool mac_ok(const char *m)
{
	unsigned x[6];
	char tail;

	return m && strlen(m) == 17 &&
	       sscanf(m, "%2x:%2x:%2x:%2x:%2x:%2x%c", &x[0], &x[1], &x[2], &x[3], &x[4], &x[5],
		      &tail) == 6;
}

static bool addr_ok(int af, const char *a, uint32_t prefix)
{
	unsigned char buf[16];

	return a && *a && inet_pton(af, a, buf) == 1 && prefix <= (af == AF_INET ? 32u : 128u);
}

static int put_nic(FILE *f, size_t i, const Bc__Node__V1__NicSpec *n, const char *gw,
		   bool *routed)
{
	bool v4 = n->ipv4 && *n->ipv4, v6 = n->ipv6 && *n->ipv6;

	if (!mac_ok(n->mac) || (v4 && !addr_ok(AF_INET, n->ipv4, n->ipv4_prefix)) ||
	    (v6 && !addr_ok(AF_INET6, n->ipv6, n->ipv6_prefix)))
		return -EINVAL;
	fprintf(f, "  nic%zu:\n    match:\n      macaddress: \"%s\"\n", i, n->mac);
	fprintf(f, "    dhcp4: false\n    dhcp6: false\n    accept-ra: false\n");
	if (v4 || v6)
		fprintf(f, "    addresses:\n");
	if (v4)
		fprintf(f, "      - \"%s/%" PRIu32 "\"\n", n->ipv4, n->ipv4_prefix);
	if (v6)
		fprintf(f, "      - \"%s/%" PRIu32 "\"\n", n->ipv6, n->ipv6_prefix);
	/* gateway4, not a 0.0.0.0/0 route: Debian's cloud-init renders routes
	 * for ifupdown as `post-up route add ...`, which needs net-tools (the
	 * guest then had no default route), and gateway4 as ifupdown's own
	 * `gateway` line (iproute2); netplan and networkd take either. */
	if (v4 && gw && *gw && !*routed) {
		fprintf(f, "    gateway4: \"%s\"\n", gw);
		*routed = true;
	}
	return 0;
}

int seed_network_config(const Bc__Node__V1__InstanceSpec *s, const char *gw, char **ret)
{
	char *buf = NULL;
	size_t len = 0;
	bool routed = false;
	FILE *f;
	int e = 0;

	if (gw && *gw && !addr_ok(AF_INET, gw, 0))
		return -EINVAL;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	fprintf(f, "version: 2\n");
	if (s->n_nics)
		fprintf(f, "ethernets:\n");
	for (size_t i = 0; i < s->n_nics && e == 0; i++)
		e = put_nic(f, i, s->nics[i], gw, &routed);
	if (fclose(f) != 0 && e == 0)
		e = -ENOMEM;
	if (e < 0) {
		free(buf);
		return e;
	}
	*ret = buf;
	return 0;
}

static int write_in(const char *dir, const char *name, const void *buf, size_t len)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);

	return file_replace(path, buf ? buf : "", buf ? len : 0, 0600);
}

static void remove_work(const char *dir)
{
	static const char *const names[] = {"user-data", "meta-data", "network-config"};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		_cleanup_free_ char *path = xasprintf("%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

static int make_iso(const char *dir, const char *iso, char *reason)
{
	_cleanup_free_ char *ud = xasprintf("%s/user-data", dir);
	_cleanup_free_ char *md = xasprintf("%s/meta-data", dir);
	_cleanup_free_ char *nc = xasprintf("%s/network-config", dir);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", iso);
	char out[SPAWN_OUT_MAX];
	char *argv[] = {"genisoimage", "-quiet", "-output", tmp, "-volid", "cidata", "-joliet",
			"-rock", "-input-charset", "utf-8", ud, md, nc, NULL};
	int e = spawn_run(argv, ISO_TIMEOUT_MS, out);

	if (e == 0 && (chmod(tmp, 0600) < 0 || rename(tmp, iso) < 0))
		e = -errno;
	if (e < 0) {
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = '\0';
		snprintf(reason, SEED_REASON_MAX, "SeedFailed: genisoimage: %.100s",
			 *out ? out : strerror(-e));
		unlink(tmp);
	}
	return e;
}

int seed_write_iso(const char *dir, const char *iso, const void *user_data, size_t ud_len,
		   const char *meta_data, const char *network_config, char *reason)
{
	int e = mkdir_p(dir, 0700);

	if (e == 0)
		e = write_in(dir, "user-data", user_data, ud_len);
	if (e == 0)
		e = write_in(dir, "meta-data", meta_data, strlen(meta_data));
	if (e == 0)
		e = write_in(dir, "network-config", network_config, strlen(network_config));
	if (e < 0)
		snprintf(reason, SEED_REASON_MAX, "SeedFailed: %s", strerror(-e));
	else
		e = make_iso(dir, iso, reason);
	remove_work(dir);
	return e;
}
