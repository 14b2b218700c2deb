/* nft_build.c: the instance firewall as data. Pure: turns a struct nft_net
 * into one nftables batch (libnftnl objects serialized into a buffer); no
 * I/O. nft.c sends it.
 *
 * bridge bcd_instances, in nft's words:
 *
 *   set taps, guarded, ssh_only { type ifname }   every / guarded / ssh taps
 *   set host4, bound4 { type ipv4_addr }          host's / guarded addresses
 *   set host6, bound6 { type ipv6_addr }          (bound6: with link-locals)
 *   map from, to { type ifname : verdict }        tap -> jump f-<tap>/t-<tap>
 *   chain tapguard     every tap: only ip/arp/ip6 frames, no DHCP server
 *                      replies (by port and by content), RAs, redirects,
 *                      IPv6 fragments, host addresses
 *   chain f-<tap>      frames from the tap: MAC, source addresses, ARP,
 *                      neighbour adverts, then the policy's destinations
 *   chain t-<tap>      frames into a private/none tap: the policy's sources
 *   chain prerouting (hook prerouting), input (hook input):
 *       iifname @taps jump tapguard; iifname vmap @from;
 *       binding: from a port not in @guarded, no @bound4/@bound6 source,
 *       ARP sender or advert target.
 *       Prerouting runs before the bridge learns a frame's source MAC, so
 *       a frame these drop never moves a MAC to the port it came in on;
 *       input again for link-local group frames (01:80:c2:...), which the
 *       bridge delivers locally without prerouting.
 *   chain forward (hook forward): oifname @ssh_only tcp dport 22 drop,
 *       IPv6 fragments into @ssh_only dropped (they hide the port);
 *       oifname vmap @to
 *   chain output (hook output): oifname @ssh_only tcp dport 22 from other
 *       than @host4/@host6 drop; oifname vmap @to
 *
 * inet bcd_taps: iifname/oifname @taps drop in input, forward, output;
 * in input, from the pool's bridge to the host itself only ICMP, replies
 * (ct state established/related), the ports of @host_tcp/@host_udp and
 * tcp BC_GUEST_READY_PORT and BC_IDENTITY_PORT on the pool's IPv4 gateway
 * (the guest-up signal, guestsig.h; the identity endpoint, identity_ep.h;
 * whatever the instance's network_policy: the bridge table's
 * private/none policies let a guest reach its subnet's gateway / the
 * host's addresses). Those ports are "opened" like the others, by the drop
 * rules not naming them: nothing accepts.
 *
 * Two halves, "a_" and "b_" (parity): every set and regular chain carries
 * its half's prefix; a load fills the half the base chains do not use,
 * then flushes and refills the base chains (never deleted) to use it, in
 * one transaction (the prologue, built from what the kernel holds, clears
 * the half being filled). The half in use is left whole: the kernel picks
 * a chain's rules by the generation at base-chain entry but set elements
 * by the generation at lookup, so a packet crossing the commit would meet
 * deleted elements if the sets in use were replaced (tests/net/replace.t
 * saw ~1 spoofed frame in 8,000 slip through that way). Deleting and
 * re-creating base chains has a like gap: a new hook runs before the old
 * one at the same priority.
 *
 * Every rule is a conjunction ending in drop; nothing accepts, so the order
 * of the ssh rules ahead of any accept holds trivially. */
#include "nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/if_ether.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_bridge.h>

#include "guest_ready.h"
#include "nft_msg.h"
#include "util.h"

/* Set ids, unique within the batch. */
enum { SID_TAPS = 1, SID_GUARDED, SID_SSH, SID_HOST4, SID_HOST6, SID_BOUND4, SID_BOUND6,
       SID_FROM, SID_TO, SID_ITAPS, SID_TAPGUARD, SID_HTCP, SID_HUDP };

/* The name of a set (or of the tapguard chain) in this load's half */
#define SETN(id) (o->names[id])

/* ---------------------------------------------------------- the tables */

#define BR NFPROTO_BRIDGE
static const char TB[] = NFT_TABLE_BRIDGE;

static const uint8_t ZERO16[16];
static const uint8_t BCAST4[4] = { 255, 255, 255, 255 };
static const uint8_t MCAST6_MASK[16] = { 0xff }, MCAST6_NET[16] = { 0xff };
static const uint8_t LL6_MASK[16] = { 0xff, 0xc0 }, LL6_NET[16] = { 0xfe, 0x80 };

/* reg 1 (ipv6, already loaded and about to be masked): outside prefix */
static void m6_not(struct nft_rule *r, uint32_t off, const uint8_t *mask, const uint8_t *net)
{
	nft_x_payload(r, L3, off, 16);
	nft_x_mask(r, mask, 16);
	nft_x_cmp(r, NFT_CMP_NEQ, net, 16);
}

/* DHCP and BOOTP server messages from a tap, whatever their source port:
 * to a client port (68, 546), a BOOTP reply (op 2) carrying the DHCP magic
 * cookie on any port, and DHCPv6 server messages (advertise, reply,
 * reconfigure, relay-reply) to the server port; and, as before, anything
 * from a server port (67, 547). */
static void dhcp_replies(struct nft_out *o)
{
	static const uint8_t cookie[4] = { 0x63, 0x82, 0x53, 0x63 };
	static const struct { uint16_t type; uint32_t off; uint16_t port; } ports[] = {
		{ ETH_P_IP, 0, 67 }, { ETH_P_IP, 2, 68 },
		{ ETH_P_IPV6, 0, 547 }, { ETH_P_IPV6, 2, 546 },
	};
	static const uint8_t v6_server[] = { 2, 7, 10, 13 };
	struct nft_rule r;

	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
		nft_m_ethertype(&r, ports[i].type);
		nft_m_l4(&r, IPPROTO_UDP);
		nft_m_port(&r, ports[i].off, ports[i].port);
		nft_drop(o, &r);
	}
	/* UDP payload = transport header + 8: op at 0, cookie at 236 */
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IP);
	nft_m_l4(&r, IPPROTO_UDP);
	nft_m_u8(&r, L4, 8, 2);
	nft_x_payload(&r, L4, 8 + 236, 4);
	nft_x_cmp(&r, NFT_CMP_EQ, cookie, 4);
	nft_drop(o, &r);
	for (size_t i = 0; i < sizeof(v6_server); i++) {
		r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
		nft_m_ethertype(&r, ETH_P_IPV6);
		nft_m_l4(&r, IPPROTO_UDP);
		nft_m_port(&r, 2, 547);
		nft_m_u8(&r, L4, 8, v6_server[i]);
		nft_drop(o, &r);
	}
}

/* Every tap, guarded or not: only ip/arp/ip6 frames, well-formed ARP for
 * IPv4 over Ethernet, no DHCP server replies, no router advertisements or
 * redirects, never the host's addresses. */
static void chain_tapguard(struct nft_out *o)
{
	static const uint8_t arp_eth_ip4[6] = { 0, 1, 8, 0, 6, 4 };
	uint16_t t_ip = htons(ETH_P_IP), t_arp = htons(ETH_P_ARP), t_ip6 = htons(ETH_P_IPV6);
	uint8_t one = 1;
	struct nft_rule r;

	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_x_payload(&r, L2, 12, 2);
	nft_x_cmp(&r, NFT_CMP_NEQ, &t_ip, 2);
	nft_x_cmp(&r, NFT_CMP_NEQ, &t_arp, 2);
	nft_x_cmp(&r, NFT_CMP_NEQ, &t_ip6, 2);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_ARP);
	nft_x_payload(&r, L3, 0, 6);
	nft_x_cmp(&r, NFT_CMP_NEQ, arp_eth_ip4, 6);
	nft_drop(o, &r);
	dhcp_replies(o);
	/* an IPv6 fragment can hide the L4 header from every port rule */
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_x_exthdr6_present(&r, IPPROTO_FRAGMENT);
	nft_x_cmp(&r, NFT_CMP_EQ, &one, 1);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IP);
	nft_m_l4(&r, IPPROTO_ICMP);
	nft_m_u8(&r, L4, 0, 5);             /* redirect */
	nft_drop(o, &r);
	for (int type = 134; type <= 137; type += 3) {  /* router advert, redirect */
		r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
		nft_m_ethertype(&r, ETH_P_IPV6);
		nft_m_l4(&r, IPPROTO_ICMPV6);
		nft_m_u8(&r, L4, 0, (uint8_t)type);
		nft_drop(o, &r);
	}
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IP);
	nft_x_payload(&r, L3, 12, 4);
	nft_x_lookup(&r, SETN(SID_HOST4), SID_HOST4, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_ARP);
	nft_x_payload(&r, L3, 14, 4);
	nft_x_lookup(&r, SETN(SID_HOST4), SID_HOST4, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_x_payload(&r, L3, 8, 16);
	nft_x_lookup(&r, SETN(SID_HOST6), SID_HOST6, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, SETN(SID_TAPGUARD));
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_m_l4(&r, IPPROTO_ICMPV6);
	nft_m_u8(&r, L4, 0, 136);
	nft_x_payload(&r, L4, 8, 16);
	nft_x_lookup(&r, SETN(SID_HOST6), SID_HOST6, false, false);
	nft_drop(o, &r);
}

/* The guards of one guarded tap: its MAC, its addresses. */
static void tap_guards(struct nft_out *o, const struct nft_tap *t, const char *chain)
{
	struct nft_rule r;

	r = nft_rule_new(BR, TB, chain);
	nft_x_payload(&r, L2, 6, 6);
	nft_x_cmp(&r, NFT_CMP_NEQ, t->mac, 6);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_IP);
	nft_x_payload(&r, L3, 12, 4);
	if (t->has4)
		nft_x_cmp(&r, NFT_CMP_NEQ, &t->ip4, 4);
	nft_x_cmp(&r, NFT_CMP_NEQ, ZERO16, 4);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_ARP);
	nft_x_payload(&r, L3, 14, 4);
	if (t->has4)
		nft_x_cmp(&r, NFT_CMP_NEQ, &t->ip4, 4);
	nft_x_cmp(&r, NFT_CMP_NEQ, ZERO16, 4);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_ARP);
	nft_x_payload(&r, L3, 8, 6);
	nft_x_cmp(&r, NFT_CMP_NEQ, t->mac, 6);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_x_payload(&r, L3, 8, 16);
	if (t->has6)
		nft_x_cmp(&r, NFT_CMP_NEQ, &t->ip6, 16);
	nft_x_cmp(&r, NFT_CMP_NEQ, ZERO16, 16);
	nft_x_cmp(&r, NFT_CMP_NEQ, &t->ll6, 16);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_m_l4(&r, IPPROTO_ICMPV6);
	nft_m_u8(&r, L4, 0, 136);
	nft_x_payload(&r, L4, 8, 16);
	if (t->has6)
		nft_x_cmp(&r, NFT_CMP_NEQ, &t->ip6, 16);
	nft_x_cmp(&r, NFT_CMP_NEQ, &t->ll6, 16);
	nft_drop(o, &r);
}

/* The policy of a private/none tap on one side: from the tap (dst: the
 * field checked is the destination) or into it (the source). */
static void tap_policy(struct nft_out *o, const struct nft_net *n, const struct nft_tap *t,
		       const char *chain, bool from)
{
	uint32_t off4 = from ? 16 : 12, off6 = from ? 24 : 8;
	struct nft_rule r;

	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_IP);
	if (t->policy == NFT_POLICY_PRIVATE) {
		if (n->has_subnet4)
			nft_m_not_prefix(&r, L3, off4, 4, &n->subnet4, n->plen4);
	} else {
		nft_x_payload(&r, L3, off4, 4);
		nft_x_lookup(&r, SETN(SID_HOST4), SID_HOST4, true, false);
	}
	nft_x_payload(&r, L3, off4, 4);
	nft_x_cmp(&r, NFT_CMP_NEQ, from ? BCAST4 : ZERO16, 4);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ethertype(&r, ETH_P_IPV6);
	if (t->policy == NFT_POLICY_PRIVATE) {
		if (n->has_subnet6)
			nft_m_not_prefix(&r, L3, off6, 16, &n->subnet6, n->plen6);
		m6_not(&r, off6, LL6_MASK, LL6_NET);
	} else {
		nft_x_payload(&r, L3, off6, 16);
		nft_x_lookup(&r, SETN(SID_HOST6), SID_HOST6, true, false);
	}
	if (from) {
		m6_not(&r, off6, MCAST6_MASK, MCAST6_NET);
	} else {
		nft_x_payload(&r, L3, off6, 16);
		nft_x_cmp(&r, NFT_CMP_NEQ, ZERO16, 16);
	}
	nft_drop(o, &r);
}

/* From a port that is not a guarded tap: no guarded address as source,
 * ARP sender or advert target (the binding of addresses to their taps). */
static void binding(struct nft_out *o, const char *chain)
{
	struct nft_rule r;

	r = nft_rule_new(BR, TB, chain);
	nft_m_ifset(&r, NFT_META_IIFNAME, SETN(SID_GUARDED), SID_GUARDED, true);
	nft_m_ethertype(&r, ETH_P_IP);
	nft_x_payload(&r, L3, 12, 4);
	nft_x_lookup(&r, SETN(SID_BOUND4), SID_BOUND4, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ifset(&r, NFT_META_IIFNAME, SETN(SID_GUARDED), SID_GUARDED, true);
	nft_m_ethertype(&r, ETH_P_ARP);
	nft_x_payload(&r, L3, 14, 4);
	nft_x_lookup(&r, SETN(SID_BOUND4), SID_BOUND4, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ifset(&r, NFT_META_IIFNAME, SETN(SID_GUARDED), SID_GUARDED, true);
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_x_payload(&r, L3, 8, 16);
	nft_x_lookup(&r, SETN(SID_BOUND6), SID_BOUND6, false, false);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, chain);
	nft_m_ifset(&r, NFT_META_IIFNAME, SETN(SID_GUARDED), SID_GUARDED, true);
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_m_l4(&r, IPPROTO_ICMPV6);
	nft_m_u8(&r, L4, 0, 136);
	nft_x_payload(&r, L4, 8, 16);
	nft_x_lookup(&r, SETN(SID_BOUND6), SID_BOUND6, false, false);
	nft_drop(o, &r);
}

static void dispatch(struct nft_out *o, const char *chain, uint32_t meta, const char *map, uint32_t id)
{
	struct nft_rule r = nft_rule_new(BR, TB, chain);

	nft_x_meta(&r, meta);
	nft_x_lookup(&r, map, id, false, true);
	nft_rule_emit(o, &r);
}

static void base_chains(struct nft_out *o)
{
	static const char *in_chains[] = { "prerouting", "input" };
	uint8_t one = 1;
	struct nft_rule r;

	for (int i = 0; i < 2; i++) {
		r = nft_rule_new(BR, TB, in_chains[i]);
		nft_m_ifset(&r, NFT_META_IIFNAME, SETN(SID_TAPS), SID_TAPS, false);
		nft_x_verdict(&r, NFT_JUMP, SETN(SID_TAPGUARD));
		nft_rule_emit(o, &r);
		dispatch(o, in_chains[i], NFT_META_IIFNAME, SETN(SID_FROM), SID_FROM);
		binding(o, in_chains[i]);
	}
	/* ssh: from another bridge port never; both ahead of any accept */
	r = nft_rule_new(BR, TB, "forward");
	nft_m_ifset(&r, NFT_META_OIFNAME, SETN(SID_SSH), SID_SSH, false);
	nft_m_l4(&r, IPPROTO_TCP);
	nft_m_port(&r, 2, 22);
	nft_drop(o, &r);
	r = nft_rule_new(BR, TB, "forward");
	nft_m_ifset(&r, NFT_META_OIFNAME, SETN(SID_SSH), SID_SSH, false);
	nft_m_ethertype(&r, ETH_P_IPV6);
	nft_x_exthdr6_present(&r, IPPROTO_FRAGMENT);
	nft_x_cmp(&r, NFT_CMP_EQ, &one, 1);
	nft_drop(o, &r);
	dispatch(o, "forward", NFT_META_OIFNAME, SETN(SID_TO), SID_TO);
	/* ssh from the host: only from its own bridge addresses */
	for (int v6 = 0; v6 < 2; v6++) {
		r = nft_rule_new(BR, TB, "output");
		nft_m_ifset(&r, NFT_META_OIFNAME, SETN(SID_SSH), SID_SSH, false);
		nft_m_ethertype(&r, v6 ? ETH_P_IPV6 : ETH_P_IP);
		nft_m_l4(&r, IPPROTO_TCP);
		nft_m_port(&r, 2, 22);
		nft_x_payload(&r, L3, v6 ? 8 : 12, v6 ? 16 : 4);
		nft_x_lookup(&r, v6 ? "host6" : "host4", v6 ? SID_HOST6 : SID_HOST4, true, false);
		nft_drop(o, &r);
	}
	dispatch(o, "output", NFT_META_OIFNAME, SETN(SID_TO), SID_TO);
}

/* Key arrays for the sets. */
struct keys {
	char (*ifs)[IFNAMSIZ];
	char (*chains)[32];
	size_t n;
};

static void keys_init(struct keys *k, size_t cap, bool chains)
{
	k->ifs = xcalloc(cap ? cap : 1, sizeof(*k->ifs));
	k->chains = chains ? xcalloc(cap ? cap : 1, sizeof(*k->chains)) : NULL;
	k->n = 0;
}

static void keys_add(struct keys *k, const char *ifname, const char *chain)
{
	strncpy(k->ifs[k->n], ifname, IFNAMSIZ);
	if (chain)
		snprintf(k->chains[k->n], sizeof(k->chains[k->n]), "%s", chain);
	k->n++;
}

static void keys_free(struct keys *k)
{
	free(k->ifs);
	free(k->chains);
}

/* A refused instance's tap: nothing in, nothing out. */
static void blocked(struct nft_out *o, const char *chain)
{
	struct nft_rule r = nft_rule_new(BR, TB, chain);

	nft_drop(o, &r);
}

static bool has_from_chain(const struct nft_tap *t)
{
	return t->guarded || t->policy != NFT_POLICY_EGRESS;
}

static void bridge_table(struct nft_out *o, const struct nft_net *n)
{
	size_t nt = n->n_taps, n4 = 0, n6 = 0;
	struct keys taps, guarded, ssh, from, to;
	struct in_addr *b4 = xcalloc(nt + 1, sizeof(*b4));
	struct in6_addr *b6 = xcalloc(2 * nt + 1, sizeof(*b6));
	char name[32];

	nft_emit_set(o, BR, TB, SETN(SID_TAPS), SID_TAPS, DT_IFNAME, IFNAMSIZ, false);
	nft_emit_set(o, BR, TB, SETN(SID_GUARDED), SID_GUARDED, DT_IFNAME, IFNAMSIZ, false);
	nft_emit_set(o, BR, TB, SETN(SID_SSH), SID_SSH, DT_IFNAME, IFNAMSIZ, false);
	nft_emit_set(o, BR, TB, SETN(SID_HOST4), SID_HOST4, DT_IPADDR, 4, false);
	nft_emit_set(o, BR, TB, SETN(SID_HOST6), SID_HOST6, DT_IP6ADDR, 16, false);
	nft_emit_set(o, BR, TB, SETN(SID_BOUND4), SID_BOUND4, DT_IPADDR, 4, false);
	nft_emit_set(o, BR, TB, SETN(SID_BOUND6), SID_BOUND6, DT_IP6ADDR, 16, false);
	nft_emit_set(o, BR, TB, SETN(SID_FROM), SID_FROM, DT_IFNAME, IFNAMSIZ, true);
	nft_emit_set(o, BR, TB, SETN(SID_TO), SID_TO, DT_IFNAME, IFNAMSIZ, true);
	nft_emit_chain(o, BR, TB, SETN(SID_TAPGUARD), -1);
	keys_init(&taps, nt, false);
	keys_init(&guarded, nt, false);
	keys_init(&ssh, nt, false);
	keys_init(&from, nt, true);
	keys_init(&to, nt, true);
	for (size_t i = 0; i < nt; i++) {
		const struct nft_tap *t = &n->taps[i];

		keys_add(&taps, t->name, NULL);
		if (t->ssh_host_only)
			keys_add(&ssh, t->name, NULL);
		if (t->guarded) {
			keys_add(&guarded, t->name, NULL);
			if (t->has4)
				b4[n4++] = t->ip4;
			if (t->has6)
				b6[n6++] = t->ip6;
			b6[n6++] = t->ll6;
		}
		if (has_from_chain(t)) {
			snprintf(name, sizeof(name), "%c_f-%s", 'a' + o->parity, t->name);
			nft_emit_chain(o, BR, TB, name, -1);
			keys_add(&from, t->name, name);
		}
		if (t->policy != NFT_POLICY_EGRESS) {
			snprintf(name, sizeof(name), "%c_t-%s", 'a' + o->parity, t->name);
			nft_emit_chain(o, BR, TB, name, -1);
			keys_add(&to, t->name, name);
		}
	}
	o->b->chains_bridge += 4;   /* the base chains, made by the prologue */
	nft_emit_elems(o, BR, TB, SETN(SID_TAPS), SID_TAPS, taps.ifs, IFNAMSIZ, taps.n, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_GUARDED), SID_GUARDED, guarded.ifs, IFNAMSIZ, guarded.n, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_SSH), SID_SSH, ssh.ifs, IFNAMSIZ, ssh.n, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_HOST4), SID_HOST4, n->host4, 4, n->n_host4, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_HOST6), SID_HOST6, n->host6, 16, n->n_host6, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_BOUND4), SID_BOUND4, b4, 4, n4, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_BOUND6), SID_BOUND6, b6, 16, n6, NULL);
	nft_emit_elems(o, BR, TB, SETN(SID_FROM), SID_FROM, from.ifs, IFNAMSIZ, from.n, from.chains);
	nft_emit_elems(o, BR, TB, SETN(SID_TO), SID_TO, to.ifs, IFNAMSIZ, to.n, to.chains);
	chain_tapguard(o);
	for (size_t i = 0; i < nt; i++) {
		const struct nft_tap *t = &n->taps[i];

		snprintf(name, sizeof(name), "%c_f-%s", 'a' + o->parity, t->name);
		if (t->policy == NFT_POLICY_BLOCKED) {
			blocked(o, name);
			snprintf(name, sizeof(name), "%c_t-%s", 'a' + o->parity, t->name);
			blocked(o, name);
			continue;
		}
		if (t->guarded)
			tap_guards(o, t, name);
		if (t->policy == NFT_POLICY_EGRESS)
			continue;
		tap_policy(o, n, t, name, true);
		snprintf(name, sizeof(name), "%c_t-%s", 'a' + o->parity, t->name);
		tap_policy(o, n, t, name, false);
	}
	base_chains(o);
	keys_free(&taps);
	keys_free(&guarded);
	keys_free(&ssh);
	keys_free(&from);
	keys_free(&to);
	free(b4);
	free(b6);
}

/* inet input, from the pool's bridge to the host, not a reply to a
 * connection the host made: the start of every rule there. */
static struct nft_rule from_bridge_new(const char *bridge)
{
	static const uint32_t est_rel = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) |
					NF_CT_STATE_BIT(IP_CT_RELATED);
	static const uint32_t zero;
	struct nft_rule r = nft_rule_new(NFPROTO_INET, NFT_TABLE_INET, "input");
	char name[IFNAMSIZ] = { 0 };

	snprintf(name, sizeof(name), "%s", bridge);
	nft_x_meta(&r, NFT_META_IIFNAME);
	nft_x_cmp(&r, NFT_CMP_EQ, name, IFNAMSIZ);
	nft_x_ct(&r, NFT_CT_STATE);
	nft_x_mask(&r, &est_rel, 4);
	nft_x_cmp(&r, NFT_CMP_EQ, &zero, 4);
	return r;
}

/* The host's own services, from the guests: only ICMP and the ports the
 * operator opened (tcp/udp), new connections to anything else dropped. */
static void host_input(struct nft_out *o, const struct nft_net *n)
{
	static const uint8_t allowed[] = { IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, IPPROTO_ICMPV6 };
	static const uint8_t ipv4 = NFPROTO_IPV4;
	const uint16_t ready = htons(BC_GUEST_READY_PORT), ident = htons(BC_IDENTITY_PORT);
	static const uint16_t gw_ports[] = { BC_GUEST_READY_PORT, BC_IDENTITY_PORT };
	struct nft_rule r;

	nft_emit_set(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_HTCP), SID_HTCP, DT_INET_SERVICE, 2,
		     false);
	nft_emit_set(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_HUDP), SID_HUDP, DT_INET_SERVICE, 2,
		     false);
	nft_emit_elems(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_HTCP), SID_HTCP, n->host_tcp, 2,
		       n->n_host_tcp, NULL);
	nft_emit_elems(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_HUDP), SID_HUDP, n->host_udp, 2,
		       n->n_host_udp, NULL);
	if (!n->bridge[0])
		return;
	for (int udp = 0; udp < 2; udp++) {
		r = from_bridge_new(n->bridge);
		nft_m_l4(&r, udp ? IPPROTO_UDP : IPPROTO_TCP);
		if (!udp) {
			nft_x_payload(&r, L4, 2, 2);
			nft_x_cmp(&r, NFT_CMP_NEQ, &ready, 2);
			nft_x_payload(&r, L4, 2, 2);
			nft_x_cmp(&r, NFT_CMP_NEQ, &ident, 2);
		}
		nft_x_payload(&r, L4, 2, 2);
		nft_x_lookup(&r, SETN(udp ? SID_HUDP : SID_HTCP), udp ? SID_HUDP : SID_HTCP, true,
			     false);
		nft_drop(o, &r);
	}
	/* the guest-up signal's and the identity endpoint's ports (unless the
	 * operator opened them): only over IPv4, only to the gateway */
	for (int k = 0; k < 4; k++) {
		const int v4 = k % 2;

		r = from_bridge_new(n->bridge);
		nft_m_l4(&r, IPPROTO_TCP);
		nft_m_port(&r, 2, gw_ports[k / 2]);
		nft_x_payload(&r, L4, 2, 2);
		nft_x_lookup(&r, SETN(SID_HTCP), SID_HTCP, true, false);
		nft_x_meta(&r, NFT_META_NFPROTO);
		nft_x_cmp(&r, v4 ? NFT_CMP_EQ : NFT_CMP_NEQ, &ipv4, 1);
		if (v4 && n->has_gw4) {
			nft_x_payload(&r, L3, 16, 4);
			nft_x_cmp(&r, NFT_CMP_NEQ, &n->gw4, 4);
		}
		nft_drop(o, &r);
	}
	r = from_bridge_new(n->bridge);
	nft_x_meta(&r, NFT_META_L4PROTO);
	for (size_t i = 0; i < sizeof(allowed); i++)
		nft_x_cmp(&r, NFT_CMP_NEQ, &allowed[i], 1);
	nft_drop(o, &r);
}

/* inet bcd_taps: an instance tap is only ever a bridge port; whatever of
 * it reaches the IP layer is dropped. */
static void inet_table(struct nft_out *o, const struct nft_net *n)
{
	static const struct { const char *chain; int hook; uint32_t meta; } r4[] = {
		{ "input", NF_INET_LOCAL_IN, NFT_META_IIFNAME },
		{ "forward", NF_INET_FORWARD, NFT_META_IIFNAME },
		{ "forward", NF_INET_FORWARD, NFT_META_OIFNAME },
		{ "output", NF_INET_LOCAL_OUT, NFT_META_OIFNAME },
	};
	struct keys taps;

	nft_emit_set(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_ITAPS), SID_ITAPS, DT_IFNAME, IFNAMSIZ, false);
	keys_init(&taps, n->n_taps, false);
	for (size_t i = 0; i < n->n_taps; i++)
		keys_add(&taps, n->taps[i].name, NULL);
	nft_emit_elems(o, NFPROTO_INET, NFT_TABLE_INET, SETN(SID_ITAPS), SID_ITAPS, taps.ifs, IFNAMSIZ, taps.n,
		   NULL);
	keys_free(&taps);
	for (size_t i = 0; i < sizeof(r4) / sizeof(r4[0]); i++) {
		struct nft_rule r = nft_rule_new(NFPROTO_INET, NFT_TABLE_INET, r4[i].chain);

		nft_m_ifset(&r, r4[i].meta, SETN(SID_ITAPS), SID_ITAPS, false);
		nft_drop(o, &r);
	}
	host_input(o, n);
}

int nft_build(const struct nft_net *n, unsigned parity, uint32_t seq, bool text,
	      struct nft_batch *ret)
{
	static const char *const base[] = {
		[SID_TAPS] = "taps", [SID_GUARDED] = "guarded", [SID_SSH] = "ssh_only",
		[SID_HOST4] = "host4", [SID_HOST6] = "host6", [SID_BOUND4] = "bound4",
		[SID_BOUND6] = "bound6", [SID_FROM] = "from", [SID_TO] = "to",
		[SID_ITAPS] = "taps", [SID_TAPGUARD] = "tapguard",
		[SID_HTCP] = "host_tcp", [SID_HUDP] = "host_udp",
	};
	struct nft_batch b = { 0 };
	struct nft_out o = { &b, NULL, seq, 0, parity & 1, { { 0 } } };
	struct nlmsghdr *last;
	size_t text_len = 0;

	if (text)
		o.text = open_memstream(&b.text, &text_len);
	b.seq_first = seq;
	b.parity = parity & 1;
	for (size_t i = 1; i < sizeof(base) / sizeof(base[0]); i++)
		snprintf(o.names[i], sizeof(o.names[i]), "%c_%s", 'a' + o.parity, base[i]);
	/* the marker saying which half the base chains use (no half's prefix,
	 * so the next prologue deletes it) */
	nft_emit_chain(&o, BR, TB, o.parity ? "half_b" : "half_a", -1);
	bridge_table(&o, n);
	inet_table(&o, n);
	/* errors are always reported; one ACK, of the last inner message,
	 * says the whole batch was processed (kernels before 6.10 never ACK
	 * batch begin/end, and one ACK per message can overflow the socket) */
	last = (struct nlmsghdr *)(b.buf + o.last);
	last->nlmsg_flags |= NLM_F_ACK;
	if (o.text)
		fclose(o.text);
	*ret = b;
	return 0;
}

/* The base chains of both tables: made once, never deleted by a load. */
static const struct {
	int family;
	const char *table, *name;
	int hook;
} BASE[] = {
	{ NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, "prerouting", NF_BR_PRE_ROUTING },
	{ NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, "forward", NF_BR_FORWARD },
	{ NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, "input", NF_BR_LOCAL_IN },
	{ NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, "output", NF_BR_LOCAL_OUT },
	{ NFPROTO_INET, NFT_TABLE_INET, "input", NF_INET_LOCAL_IN },
	{ NFPROTO_INET, NFT_TABLE_INET, "forward", NF_INET_FORWARD },
	{ NFPROTO_INET, NFT_TABLE_INET, "output", NF_INET_LOCAL_OUT },
};

bool nft_is_base_chain(int family, const char *name)
{
	for (size_t i = 0; i < sizeof(BASE) / sizeof(BASE[0]); i++)
		if (BASE[i].family == family && strcmp(BASE[i].name, name) == 0)
			return true;
	return false;
}

int nft_obj_parity(const char *name)
{
	if ((name[0] == 'a' || name[0] == 'b') && name[1] == '_')
		return name[0] - 'a';
	return -1;
}

int nft_build_prologue(const struct nft_obj *old, size_t n_old, unsigned parity, uint32_t seq,
		       bool text, struct nft_batch *ret)
{
	struct nft_batch b = { 0 };
	struct nft_out o = { &b, NULL, seq, 0, parity & 1, { { 0 } } };
	size_t text_len = 0;

	if (text)
		o.text = open_memstream(&b.text, &text_len);
	b.seq_first = seq;
	for (int t = 0; t < 2; t++) {
		int family = t ? NFPROTO_INET : BR;
		const char *table = t ? NFT_TABLE_INET : TB;

		nft_emit_table(&o, family, table, NFT_MSG_NEWTABLE);
		for (size_t i = 0; i < sizeof(BASE) / sizeof(BASE[0]); i++) {
			bool there = false;

			if (BASE[i].family != family)
				continue;
			for (size_t k = 0; k < n_old && !there; k++)
				there = old[k].family == family && !old[k].set &&
					strcmp(old[k].name, BASE[i].name) == 0;
			/* made only if absent: an update of a live base chain
			 * is refused (EBUSY) */
			if (!there)
				nft_emit_chain(&o, family, table, BASE[i].name, BASE[i].hook);
			nft_emit_flush(&o, family, table, BASE[i].name);
		}
		/* the other half stays whole: a packet that entered a base
		 * chain before the commit finishes in it */
		/* elements first (a map's jumps hold its chains), then the
		 * chains (their rules hold the sets), then the sets */
		for (int step = 0; step < 3; step++)
			for (size_t i = 0; i < n_old; i++)
				if (old[i].family == family && old[i].set == (step != 1) &&
				    !(step == 1 && nft_is_base_chain(family, old[i].name)) &&
				    nft_obj_parity(old[i].name) != 1 - (int)o.parity)
					nft_emit_delete(&o, family, table, old[i].name,
							step == 0 ? 2 : step == 2);
	}
	if (o.text)
		fclose(o.text);
	b.chains_bridge = 0;
	*ret = b;
	return 0;
}

void nft_batch_break(struct nft_batch *b)
{
	struct nft_out o = { b, NULL, b->seq_last + 1, 0 };
	struct nft_rule r = nft_rule_new(BR, TB, "no-such-chain");

	nft_drop(&o, &r);
	b->rules_bridge--;
}

void nft_batch_free(struct nft_batch *b)
{
	if (!b)
		return;
	free(b->buf);
	free(b->text);
	memset(b, 0, sizeof(*b));
}
