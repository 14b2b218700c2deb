/* nft_net.c: the desired taps and policies (struct nft_net) from the
 * NodeSpec's instances and the host's bridge addresses. A NIC whose policy
 * cannot be expressed fails its whole instance (fail closed): the caller
 * reports it in error and never starts it. */
#include "nft.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int nft_policy_parse(const char *s, enum nft_policy *ret)
{
	if (!s || !*s || strcmp(s, "egress") == 0)
		*ret = NFT_POLICY_EGRESS;
	else if (strcmp(s, "private") == 0)
		*ret = NFT_POLICY_PRIVATE;
	else if (strcmp(s, "none") == 0)
		*ret = NFT_POLICY_NONE;
	else
		return -EINVAL;
	return 0;
}

static int parse_prefix(const char *s, int af, void *addr, unsigned *plen)
{
	char buf[INET6_ADDRSTRLEN + 8], *slash, *end;
	unsigned long p;
	unsigned max = af == AF_INET ? 32 : 128;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	slash = strchr(buf, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	p = strtoul(slash + 1, &end, 10);
	if (*end || end == slash + 1 || p > max || inet_pton(af, buf, addr) != 1)
		return -EINVAL;
	*plen = (unsigned)p;
	return 0;
}

int nft_net_subnets(struct nft_net *n, const char *subnet4, const char *subnet6)
{
	if (subnet4 && *subnet4) {
		if (parse_prefix(subnet4, AF_INET, &n->subnet4, &n->plen4) < 0)
			return -EINVAL;
		n->has_subnet4 = true;
	}
	if (subnet6 && *subnet6) {
		if (parse_prefix(subnet6, AF_INET6, &n->subnet6, &n->plen6) < 0)
			return -EINVAL;
		n->has_subnet6 = true;
	}
	return 0;
}

int nft_net_host_addr(struct nft_net *n, const char *addr)
{
	if (strchr(addr, ':')) {
		if (n->n_host6 >= NFT_HOST_MAX)
			return -ENOSPC;
		if (inet_pton(AF_INET6, addr, &n->host6[n->n_host6]) != 1)
			return -EINVAL;
		n->n_host6++;
		return 0;
	}
	if (n->n_host4 >= NFT_HOST_MAX)
		return -ENOSPC;
	if (inet_pton(AF_INET, addr, &n->host4[n->n_host4]) != 1)
		return -EINVAL;
	n->n_host4++;
	return 0;
}

/* One "proto/port" of a host port list into n's arrays. */
static int host_port_add(uint16_t *tcp, size_t *n_tcp, uint16_t *udp, size_t *n_udp,
			 const char *item)
{
	bool is_tcp = strncmp(item, "tcp/", 4) == 0;
	char *end;
	unsigned long port;
	size_t *cnt = is_tcp ? n_tcp : n_udp;
	uint16_t *arr = is_tcp ? tcp : udp;

	if (!is_tcp && strncmp(item, "udp/", 4) != 0)
		return -EINVAL;
	if (!isdigit((unsigned char)item[4]))
		return -EINVAL;
	errno = 0;
	port = strtoul(item + 4, &end, 10);
	if (errno || *end || port == 0 || port > 65535)
		return -EINVAL;
	for (size_t i = 0; i < *cnt; i++)
		if (arr[i] == htons((uint16_t)port))
			return 0;
	if (*cnt >= NFT_PORTS_MAX)
		return -EINVAL;
	arr[(*cnt)++] = htons((uint16_t)port);
	return 0;
}

int nft_net_host_ports(struct nft_net *n, const char *list)
{
	uint16_t tcp[NFT_PORTS_MAX], udp[NFT_PORTS_MAX];
	size_t n_tcp = 0, n_udp = 0;
	_cleanup_free_ char *copy = xstrdup(list ? list : "");
	char *save = NULL;

	for (char *it = strtok_r(copy, " ,\t", &save); it; it = strtok_r(NULL, " ,\t", &save)) {
		if (strcmp(it, "none") == 0)
			continue;
		if (host_port_add(tcp, &n_tcp, udp, &n_udp, it) < 0)
			return -EINVAL;
	}
	memcpy(n->host_tcp, tcp, n_tcp * sizeof(tcp[0]));
	memcpy(n->host_udp, udp, n_udp * sizeof(udp[0]));
	n->n_host_tcp = n_tcp;
	n->n_host_udp = n_udp;
	return 0;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char tail;

	if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		   &tail) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)v[i];
	if (mac[0] & 1)         /* multicast/broadcast: never a NIC's */
		return -EINVAL;
	return 0;
}

/* fe80::/64 with the modified EUI-64 interface id of mac (RFC 4291). */
static void eui64_ll(const uint8_t mac[6], struct in6_addr *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->s6_addr[0] = 0xfe;
	ret->s6_addr[1] = 0x80;
	ret->s6_addr[8] = mac[0] ^ 0x02;
	ret->s6_addr[9] = mac[1];
	ret->s6_addr[10] = mac[2];
	ret->s6_addr[11] = 0xff;
	ret->s6_addr[12] = 0xfe;
	ret->s6_addr[13] = mac[3];
	ret->s6_addr[14] = mac[4];
	ret->s6_addr[15] = mac[5];
}

/* One NIC into t; -EINVAL with reason when it cannot be expressed. */
static int nic_to_tap(const Bc__Node__V1__InstanceSpec *s, const Bc__Node__V1__NicSpec *nic,
		      enum nft_policy pol, struct nft_tap *t, char *reason)
{
	bool has_mac;

	memset(t, 0, sizeof(*t));
	if (!nic->tap || !*nic->tap || strlen(nic->tap) >= IFNAMSIZ || strchr(nic->tap, '/')) {
		snprintf(reason, RT_REASON_MAX, "NetworkPolicy: bad tap name");
		return -EINVAL;
	}
	strcpy(t->name, nic->tap);
	snprintf(t->instance_id, sizeof(t->instance_id), "%s", s->id);
	t->policy = pol;
	t->ssh_host_only = s->ssh_from_host_only;
	has_mac = nic->mac && *nic->mac && parse_mac(nic->mac, t->mac) == 0;
	if (nic->ipv4 && *nic->ipv4) {
		if (inet_pton(AF_INET, nic->ipv4, &t->ip4) != 1) {
			snprintf(reason, RT_REASON_MAX, "NetworkPolicy: bad ipv4 on %s", t->name);
			return -EINVAL;
		}
		t->has4 = true;
	}
	if (nic->ipv6 && *nic->ipv6) {
		if (inet_pton(AF_INET6, nic->ipv6, &t->ip6) != 1) {
			snprintf(reason, RT_REASON_MAX, "NetworkPolicy: bad ipv6 on %s", t->name);
			return -EINVAL;
		}
		t->has6 = true;
	}
	if (pol != NFT_POLICY_EGRESS && (!has_mac || (!t->has4 && !t->has6))) {
		snprintf(reason, RT_REASON_MAX,
			 "NetworkPolicy: %s needs IPAM addresses and a valid MAC on %s",
			 pol == NFT_POLICY_NONE ? "none" : "private", t->name);
		return -EINVAL;
	}
	t->guarded = has_mac && (t->has4 || t->has6);
	if (t->guarded)
		eui64_ll(t->mac, &t->ll6);
	return 0;
}

int nft_net_add_instance(struct nft_net *n, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	enum nft_policy pol;
	struct nft_tap *v;
	size_t need = n->n_taps + s->n_nics;

	if (nft_policy_parse(s->network_policy, &pol) < 0) {
		snprintf(reason, RT_REASON_MAX, "NetworkPolicy: unknown policy %.32s",
			 s->network_policy);
		return -EINVAL;
	}
	if (need > n->cap_taps) {
		size_t cap = n->cap_taps ? n->cap_taps * 2 : 16;

		while (cap < need)
			cap *= 2;
		v = realloc(n->taps, cap * sizeof(*v));
		if (!v)
			abort();
		n->taps = v;
		n->cap_taps = cap;
	}
	for (size_t i = 0; i < s->n_nics; i++) {
		int e = nic_to_tap(s, s->nics[i], pol, &n->taps[n->n_taps + i], reason);

		if (e < 0)
			return e;
		for (size_t j = 0; j < n->n_taps + i; j++)
			if (strcmp(n->taps[j].name, n->taps[n->n_taps + i].name) == 0) {
				snprintf(reason, RT_REASON_MAX,
					 "NetworkPolicy: tap %s already used by %s",
					 n->taps[j].name, n->taps[j].instance_id);
				return -EINVAL;
			}
	}
	n->n_taps = need;
	return 0;
}

void nft_net_clear(struct nft_net *n)
{
	free(n->taps);
	n->taps = NULL;
	n->n_taps = n->cap_taps = 0;
}


/* The taps of a refused instance, blocked (those with usable names that
 * no other instance holds). */
static void block(struct nft_net *n, const Bc__Node__V1__InstanceSpec *s)
{
	for (size_t i = 0; i < s->n_nics; i++) {
		const char *tap = s->nics[i]->tap;
		struct nft_tap *t;
		bool taken = false;

		if (!tap || !*tap || strlen(tap) >= IFNAMSIZ || strchr(tap, '/'))
			continue;
		for (size_t j = 0; j < n->n_taps && !taken; j++)
			taken = strcmp(n->taps[j].name, tap) == 0;
		if (taken)
			continue;
		if (n->n_taps == n->cap_taps) {
			n->cap_taps = n->cap_taps ? n->cap_taps * 2 : 16;
			n->taps = realloc(n->taps, n->cap_taps * sizeof(*n->taps));
			if (!n->taps)
				abort();
		}
		t = &n->taps[n->n_taps++];
		memset(t, 0, sizeof(*t));
		strcpy(t->name, tap);
		snprintf(t->instance_id, sizeof(t->instance_id), "%s", s->id);
		t->policy = NFT_POLICY_BLOCKED;
	}
}

int nft_net_from_spec(const Bc__Node__V1__NodeSpec *spec, const char (*host)[64], size_t n_host,
		      struct nft_net *n, nft_fail_fn fail, void *data)
{
	char reason[RT_REASON_MAX];
	int e;

	memset(n, 0, sizeof(*n));
	if (spec->bridge && strlen(spec->bridge) < IFNAMSIZ)
		snprintf(n->bridge, sizeof(n->bridge), "%s", spec->bridge);
	e = nft_net_subnets(n, spec->ipam_subnet, spec->ipam_subnet6);
	if (e < 0)
		return e;
	if (spec->ipam_gateway && *spec->ipam_gateway) {
		if (inet_pton(AF_INET, spec->ipam_gateway, &n->gw4) != 1)
			return -EINVAL;
		n->has_gw4 = true;
	}
	for (size_t i = 0; i < n_host; i++)
		if ((e = nft_net_host_addr(n, host[i])) < 0 && e != -ENOSPC)
			return e;
	/* desired DELETED instances keep their guards: the spec names them
	 * until their domain is gone */
	for (size_t i = 0; i < spec->n_instances; i++) {
		const Bc__Node__V1__InstanceSpec *s = spec->instances[i];

		reason[0] = '\0';
		if (nft_net_add_instance(n, s, reason) < 0) {
			block(n, s);
			if (fail)
				fail(s->id, reason, data);
		}
	}
	return 0;
}
