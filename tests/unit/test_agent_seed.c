/* test_agent_seed.c: the NoCloud seed texts (agent/seed.c): meta-data and
 * network-config v2 from an InstanceSpec and the pool gateway. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/seed.h"
#include "tap.h"

static void test_meta(void)
{
	char *m = seed_meta_data("inst_01abc.x");

	is_str(m, "instance-id: \"inst_01abc.x\"\nlocal-hostname: \"inst-01abc-x\"\n",
	       "meta-data: id and a valid host name");
	free(m);
}

/* What a Debian guest's cloud-init makes of network-config for ifupdown
 * (tests/unit/cloudinit_eni.py, the cloud-init installed here): the
 * default route must be ifupdown's own `gateway` line of iface, never a
 * `route` command (net-tools, absent from the guest image). */
static void eni_default_route(const char *nc, const char *iface, const char *gw)
{
	const char *src = getenv("BC_SRC");
	char tmpl[] = "/tmp/test_seed_XXXXXX", cmd[512], line[256], want[128];
	char *text = NULL;
	size_t len = 0;
	bool in_iface = false, gw_line = false, route_cmd = false;
	FILE *f, *p;
	int fd = mkstemp(tmpl);

	ok(fd >= 0 && write(fd, nc, strlen(nc)) == (ssize_t)strlen(nc), "network-config written");
	if (fd >= 0)
		close(fd);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/unit/cloudinit_eni.py < %s 2>&1",
		 src ? src : ".", tmpl);
	p = popen(cmd, "r");
	f = open_memstream(&text, &len);
	snprintf(want, sizeof(want), "gateway %s", gw);
	while (p && f && fgets(line, sizeof(line), p)) {
		fputs(line, f);
		if (strncmp(line, "iface ", 6) == 0)
			in_iface = strncmp(line + 6, iface, strlen(iface)) == 0 &&
				   line[6 + strlen(iface)] == ' ';
		line[strcspn(line, "\n")] = '\0';
		if (in_iface && strcmp(line + strspn(line, " "), want) == 0)
			gw_line = true;
		if (strstr(line, "route add") || strstr(line, "route del"))
			route_cmd = true;
	}
	ok(p && pclose(p) == 0, "cloud-init renders it for ifupdown");
	if (f)
		fclose(f);
	ok(gw_line, "ifupdown's iface %s has `%s`", iface, want);
	ok(!route_cmd, "and no `route` command (net-tools)");
	if (!gw_line || route_cmd)
		printf("# rendered:\n# %s\n", text ? text : "");
	free(text);
	unlink(tmpl);
}

static void test_network(void)
{
	Bc__Node__V1__NicSpec n0 = BC__NODE__V1__NIC_SPEC__INIT, n1 = BC__NODE__V1__NIC_SPEC__INIT;
	Bc__Node__V1__NicSpec *nics[] = {&n0, &n1};
	Bc__Node__V1__InstanceSpec s = BC__NODE__V1__INSTANCE_SPEC__INIT;
	char *out = NULL;

	n0.mac = "52:54:00:12:34:56", n0.ipv4 = "10.77.0.5", n0.ipv4_prefix = 24;
	n0.ipv6 = "fd00::5054:ff:fe12:3456", n0.ipv6_prefix = 64;
	n1.mac = "52:54:00:ab:cd:ef", n1.ipv4 = "10.78.0.9", n1.ipv4_prefix = 16;
	s.id = "inst_1", s.nics = nics, s.n_nics = 2;
	is_int(seed_network_config(&s, "10.77.0.1", &out), 0, "two NICs");
	is_str(out,
	       "version: 2\n"
	       "ethernets:\n"
	       "  nic0:\n"
	       "    match:\n"
	       "      macaddress: \"52:54:00:12:34:56\"\n"
	       "    dhcp4: false\n    dhcp6: false\n    accept-ra: false\n"
	       "    addresses:\n"
	       "      - \"10.77.0.5/24\"\n"
	       "      - \"fd00::5054:ff:fe12:3456/64\"\n"
	       "    gateway4: \"10.77.0.1\"\n"
	       "  nic1:\n"
	       "    match:\n"
	       "      macaddress: \"52:54:00:ab:cd:ef\"\n"
	       "    dhcp4: false\n    dhcp6: false\n    accept-ra: false\n"
	       "    addresses:\n"
	       "      - \"10.78.0.9/16\"\n",
	       "network-config: static addresses by MAC, one default route");
	eni_default_route(out, "nic0", "10.77.0.1");
	free(out);
	out = NULL;
	s.n_nics = 0;
	is_int(seed_network_config(&s, "", &out), 0, "no NICs");
	is_str(out, "version: 2\n", "no NICs: version only");
	free(out);
	out = NULL;
	s.n_nics = 1;
	n0.mac = "52:54:00:12:34:5\"";
	is_int(seed_network_config(&s, "10.77.0.1", &out), -EINVAL, "quote in a MAC refused");
	n0.mac = "52:54:00:12:34:56";
	n0.ipv4 = "10.77.0.5\"\nruncmd: [x]";
	is_int(seed_network_config(&s, "10.77.0.1", &out), -EINVAL, "YAML injection refused");
	n0.ipv4 = "10.77.0.5";
	n0.ipv4_prefix = 33;
	is_int(seed_network_config(&s, "10.77.0.1", &out), -EINVAL, "prefix 33 refused");
	n0.ipv4_prefix = 24;
	is_int(seed_network_config(&s, "10.77.0.1/24", &out), -EINVAL, "gateway with a prefix");
	ok(out == NULL, "nothing returned on refusal");
}

int main(void)
{
	test_meta();
	test_network();
	done_testing();
}
