/* Unit tests of the controller's pure parts: IPAM arithmetic, tap names,
 * and that the binary's schema version matches the migrations shipped. */
#include <dirent.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "controller/ipam.h"
#include "controller/migrate.h"
#include "tap.h"

static int count_migrations(void)
{
	const char *src = getenv("BC_SRC");
	char path[1024];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "%s/migrations", src ? src : ".");
	if (!(d = opendir(path)))
		return -1;
	while ((e = readdir(d)))
		n += strlen(e->d_name) > 4 && strcmp(e->d_name + strlen(e->d_name) - 4, ".sql") == 0;
	closedir(d);
	return n;
}

int main(void)
{
	uint32_t net, ip;
	int prefix;
	unsigned char n6[16];
	char buf[64], tap[16], mac[18];

	ok(ipam_parse_cidr4("10.77.0.0/24", &net, &prefix) == 0, "parse 10.77.0.0/24");
	is_int(prefix, 24, "prefix 24");
	ipam_format4(net, buf, sizeof(buf));
	is_str(buf, "10.77.0.0", "network formatted");
	ok(ipam_parse_cidr4("10.77.0.1/24", &net, &prefix) < 0, "host bits set refused");
	ok(ipam_parse_cidr4("10.77.0.0/33", &net, &prefix) < 0, "prefix 33 refused");
	ok(ipam_parse_cidr4("10.77.0.0/024", &net, &prefix) < 0, "leading zero prefix refused");
	ok(ipam_parse_cidr4("10.77.0.0", &net, &prefix) < 0, "no prefix refused");
	ok(ipam_parse_cidr4("300.1.1.0/24", &net, &prefix) < 0, "bad octet refused");
	ok(ipam_parse_cidr4("10.77.0.0/24 ", &net, &prefix) < 0, "trailing space refused");
	ok(ipam_parse_cidr4("", &net, &prefix) < 0, "empty refused");
	ipam_parse_cidr4("10.77.0.0/24", &net, &prefix);
	ipam_parse_ip4("10.77.0.9", &ip);
	ok(ipam_contains4(net, prefix, ip), "10.77.0.9 inside");
	ipam_parse_ip4("10.77.1.9", &ip);
	ok(!ipam_contains4(net, prefix, ip), "10.77.1.9 outside");
	is_int(ipam_hosts4(24), 254, "254 hosts in a /24");
	is_int(ipam_hosts4(31), 0, "no hosts in a /31");
	ok(ipam_parse_cidr6("fd00:77::/64", n6, &prefix) == 0 && prefix == 64, "parse v6 /64");
	ok(ipam_parse_cidr6("fd00:77::1/64", n6, &prefix) < 0, "v6 host bits refused");
	ipam_parse_cidr6("fd00:77::/64", n6, &prefix);
	ok(ipam_eui64(n6, "52:54:00:12:34:56", buf, sizeof(buf)) == 0, "eui64");
	is_str(buf, "fd00:77::5054:ff:fe12:3456", "EUI-64 flips the U/L bit");
	ok(ipam_eui64(n6, "52:54:00:12:34", buf, sizeof(buf)) < 0, "short MAC refused");
	ipam_tap_name("inst_01jd0000000000000000000abc", 0, tap);
	ok(strlen(tap) <= 15, "tap name fits IFNAMSIZ (%s)", tap);
	is_str(tap, "bct00000000abc0", "tap name from the id's tail");
	ipam_random_mac(mac);
	ok(strlen(mac) == 17 && mac[0] == '0' && mac[1] == '2', "random MAC is local unicast %s",
	   mac);
	is_int(count_migrations(), CTL_SCHEMA_VERSION,
	       "CTL_SCHEMA_VERSION equals the migrations shipped");
	done_testing();
}
