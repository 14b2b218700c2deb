/* ipam.c: pure address arithmetic for IP address management: parsing and
 * checking subnets, formatting, MACs, EUI-64 and tap names. The leases
 * themselves are rows in ip_leases (placement.c); a released address sits
 * in ip_quarantine (migration 0010) for ip_quarantine_seconds, held here,
 * before lease_try hands it out again. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipam.h"
#include "util.h"

int ipam_parse_ip4(const char *s, uint32_t *ret)
{
	struct in_addr a;

	if (!s || strlen(s) > 15 || inet_pton(AF_INET, s, &a) != 1)
		return -EINVAL;
	*ret = ntohl(a.s_addr);
	return 0;
}

static int parse_prefix(const char *s, int max, int *ret)
{
	char *end;
	long v;

	if (!*s || strlen(s) > 3)
		return -EINVAL;
	v = strtol(s, &end, 10);
	if (*end || v < 0 || v > max || (s[0] == '0' && s[1]))
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int ipam_parse_cidr4(const char *s, uint32_t *ret_net, int *ret_prefix)
{
	char buf[24];
	char *slash;
	uint32_t ip, mask;
	int prefix;

	if (!s || strlen(s) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", s);
	if (!(slash = strchr(buf, '/')))
		return -EINVAL;
	*slash = '\0';
	if (ipam_parse_ip4(buf, &ip) < 0 || parse_prefix(slash + 1, 32, &prefix) < 0)
		return -EINVAL;
	mask = prefix ? ~0u << (32 - prefix) : 0;
	if (ip & ~mask)
		return -EINVAL; /* host bits set: not a network address */
	*ret_net = ip;
	*ret_prefix = prefix;
	return 0;
}

int ipam_parse_cidr6(const char *s, unsigned char ret_net[16], int *ret_prefix)
{
	char buf[64];
	char *slash;
	unsigned char a[16];
	int prefix;

	if (!s || strlen(s) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", s);
	if (!(slash = strchr(buf, '/')))
		return -EINVAL;
	*slash = '\0';
	if (inet_pton(AF_INET6, buf, a) != 1 || parse_prefix(slash + 1, 128, &prefix) < 0)
		return -EINVAL;
	for (int bit = prefix; bit < 128; bit++)
		if (a[bit / 8] & (0x80 >> (bit % 8)))
			return -EINVAL;
	memcpy(ret_net, a, 16);
	*ret_prefix = prefix;
	return 0;
}

bool ipam_contains4(uint32_t net, int prefix, uint32_t ip)
{
	uint32_t mask = prefix ? ~0u << (32 - prefix) : 0;

	return (ip & mask) == net;
}

uint32_t ipam_hosts4(int prefix)
{
	if (prefix > 30)
		return 0;
	return (uint32_t)((1ull << (32 - prefix)) - 2);
}

void ipam_format4(uint32_t ip, char *out, size_t len)
{
	snprintf(out, len, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
}

void ipam_random_mac(char out[18])
{
	unsigned char b[5];

	if (random_bytes(b, sizeof(b)) < 0)
		abort();
	snprintf(out, 18, "02:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4]);
}

static int parse_mac(const char *mac, unsigned char m[6])
{
	unsigned int v[6];
	char tail;

	if (!mac || strlen(mac) != 17 ||
	    sscanf(mac, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		   &tail) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		m[i] = (unsigned char)v[i];
	return 0;
}

int ipam_eui64(const unsigned char net[16], const char *mac, char *out, size_t len)
{
	unsigned char a[16], m[6];

	if (parse_mac(mac, m) < 0 || len < INET6_ADDRSTRLEN)
		return -EINVAL;
	memcpy(a, net, 8);
	a[8] = m[0] ^ 0x02;
	a[9] = m[1];
	a[10] = m[2];
	a[11] = 0xff;
	a[12] = 0xfe;
	a[13] = m[3];
	a[14] = m[4];
	a[15] = m[5];
	return inet_ntop(AF_INET6, a, out, (socklen_t)len) ? 0 : -EINVAL;
}

void ipam_tap_name(const char *instance_id, int idx, char out[16])
{
	size_t n = strlen(instance_id);
	const char *tail = n > 11 ? instance_id + n - 11 : instance_id;

	snprintf(out, 16, "bct%s%d", tail, idx % 10);
}

static int quarantine_seconds = 120;

void ipam_set_quarantine(int seconds)
{
	quarantine_seconds = seconds > 0 ? seconds : 0;
}

int ipam_quarantine(void)
{
	return quarantine_seconds;
}
