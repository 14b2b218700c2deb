/* nft.h: the instance firewall as data (nft_build.c) and its applier (nft.c).
 *
 * The desired taps and policies (`struct nft_net`, derived from the NodeSpec
 * and the host's bridge addresses) are turned by a pure builder into one
 * nftables batch holding two tables, each replaced whole (add, delete,
 * create) in the same transaction:
 *
 *  - bridge bcd_instances: per-tap guards and policies, dispatched through
 *    verdict maps keyed by interface name (constant per-packet cost);
 *  - inet bcd_taps: the backstop, dropping traffic from or to an instance
 *    tap that reaches the IP layer (a tap not on its bridge).
 *
 * The applier sends the batch in one sendto and checks the kernel's tables
 * against what it loaded (nft_check). Nothing here shells out to nft. */
#ifndef BC_AGENT_NFT_H
#define BC_AGENT_NFT_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

#define NFT_TABLE_BRIDGE "bcd_instances"
#define NFT_TABLE_INET "bcd_taps"
#define NFT_HOST_MAX 16     /* host addresses per family on the bridges */
#define NFT_PORTS_MAX 64    /* host ports per protocol open to the guests */
/* the host ports open to guests unless configured: DHCP (v4, v6) and DNS */
#define NFT_HOST_PORTS_DEFAULT "udp/67 udp/547 udp/53 tcp/53"

enum nft_policy {
	NFT_POLICY_EGRESS,      /* anything (the default) */
	NFT_POLICY_PRIVATE,     /* only the pool's IPAM subnet */
	NFT_POLICY_NONE,        /* only the host's own bridge addresses */
	NFT_POLICY_BLOCKED,     /* internal: a refused instance's tap, all dropped */
};

/* One tap (NIC) of one instance. */
struct nft_tap {
	char name[IFNAMSIZ];
	char instance_id[RT_ID_MAX + 1];
	bool guarded;           /* MAC and at least one IPAM address */
	uint8_t mac[6];
	bool has4, has6;
	struct in_addr ip4;
	struct in6_addr ip6;
	struct in6_addr ll6;    /* EUI-64 link-local of mac (guarded only) */
	enum nft_policy policy;
	bool ssh_host_only;
};

/* Everything the ruleset is built from. */
struct nft_net {
	struct nft_tap *taps;
	size_t n_taps, cap_taps;
	bool has_subnet4, has_subnet6;
	struct in_addr subnet4;
	unsigned plen4;
	struct in6_addr subnet6;
	unsigned plen6;
	struct in_addr host4[NFT_HOST_MAX];
	size_t n_host4;
	struct in6_addr host6[NFT_HOST_MAX];
	size_t n_host6;
	/* the pool's bridge: traffic from it to the host itself reaches only
	 * these ports (network byte order; ICMP and replies to the host's
	 * own connections always pass) */
	char bridge[IFNAMSIZ];
	uint16_t host_tcp[NFT_PORTS_MAX], host_udp[NFT_PORTS_MAX];
	size_t n_host_tcp, n_host_udp;
	/* the pool's IPAM gateway: guests also reach BC_GUEST_READY_PORT and
	 * BC_IDENTITY_PORT (tcp) on it and on nothing else (the guest-up
	 * signal, guestsig.h; the identity endpoint, identity_ep.h) */
	bool has_gw4;
	struct in_addr gw4;
};

/* A built batch body: the netlink messages making every set, regular
 * chain, element and rule, and optionally their text form (libnftnl's
 * rendering of every object, for golden files). nft_apply frames it with
 * batch begin/end and the prologue. */
struct nft_batch {
	char *buf;
	size_t len, cap;
	uint32_t seq_first, seq_last;
	char *text;             /* NULL unless asked for */
	size_t rules_bridge;    /* rules in bcd_instances */
	size_t rules_inet;      /* rules in bcd_taps */
	size_t chains_bridge;   /* base, marker and this half's chains */
	unsigned parity;        /* the half: 0 "a_", 1 "b_" */
};

/* Parse the pool's IPAM subnets ("10.0.0.0/24", "fd00::/64"; empty = none)
 * into n. -EINVAL for a malformed one. */
int nft_net_subnets(struct nft_net *n, const char *subnet4, const char *subnet6);

/* Add a host address ("10.0.0.1" or "fe80::1"); -ENOSPC past NFT_HOST_MAX,
 * -EINVAL if unparsable. */
int nft_net_host_addr(struct nft_net *n, const char *addr);

/* Set the host ports open to guests from a list like "udp/67 tcp/53"
 * (space or comma separated; "" or "none": no port). -EINVAL, n's ports
 * unchanged, for a malformed list or more than NFT_PORTS_MAX per protocol. */
int nft_net_host_ports(struct nft_net *n, const char *list);

/* Add the NICs of one instance. On -EINVAL the instance's policy cannot be
 * expressed (fail closed): nothing is added and reason (RT_REASON_MAX)
 * says why; the caller reports the instance in error. */
int nft_net_add_instance(struct nft_net *n, const Bc__Node__V1__InstanceSpec *s, char *reason);

/* Called for each instance that fails closed, with its reason. Its taps
 * stay in the ruleset, every frame from or to them dropped, until the
 * runtime has stopped it. */
typedef void (*nft_fail_fn)(const char *instance_id, const char *reason, void *data);

/* n (zeroed first) from spec and the host's bridge addresses (n_host
 * strings, no prefix); no host port open (nft_net_host_ports after). Instances whose NICs cannot be expressed are left
 * out and passed to fail. -EINVAL for a malformed pool subnet. Release with
 * nft_net_clear. */
int nft_net_from_spec(const Bc__Node__V1__NodeSpec *spec, const char (*host)[64], size_t n_host,
		      struct nft_net *n, nft_fail_fn fail, void *data);

/* Release the taps of n (n itself is the caller's). */
void nft_net_clear(struct nft_net *n);

/* "egress" (or ""), "private", "none"; -EINVAL otherwise. */
int nft_policy_parse(const char *s, enum nft_policy *ret);

/* Build the body replacing both tables' contents for n. Messages get
 * sequence numbers from seq on. With text, ret->text holds the rendering.
 * Pure: no I/O. *ret is released with nft_batch_free. */
int nft_build(const struct nft_net *n, unsigned parity, uint32_t seq, bool text,
	      struct nft_batch *ret);

/* A chain or set the kernel holds in one of the two tables. */
struct nft_obj {
	int family;             /* NFPROTO_BRIDGE or NFPROTO_INET */
	bool set;
	char name[256];
};

/* The prologue that goes before a body: both tables and their base chains
 * made if absent (never deleted: see nft_build.c), every rule flushed,
 * every other chain and set in old deleted. Pure. */
int nft_build_prologue(const struct nft_obj *old, size_t n_old, unsigned parity, uint32_t seq,
		       bool text, struct nft_batch *ret);

/* The half an object name belongs to: 0 ("a_..."), 1 ("b_..."), -1 none. */
int nft_obj_parity(const char *name);

/* True for the base chains the prologue keeps. */
bool nft_is_base_chain(int family, const char *name);

void nft_batch_free(struct nft_batch *b);

/* Tests: append a rule for a chain that does not exist, so that the kernel
 * refuses the whole transaction. */
void nft_batch_break(struct nft_batch *b);

/* --- nft.c: the applier (needs CAP_NET_ADMIN in the current netns) --- */

#define NFT_APPLY_BREAK 1   /* tests: send the batch broken (nft_batch_break) */

/* Load n in one transaction: read what the kernel holds, build the body in
 * the half not in use and the prologue, send. 0: committed, *ret_parity
 * the half now in use. Otherwise a negative errno and the kernel's
 * previous ruleset is untouched; err (errlen) says which message failed. */
int nft_apply(const struct nft_net *n, unsigned flags, unsigned *ret_parity, char *err,
	      size_t errlen);

/* What the kernel holds now. A missing table counts -1. */
struct nft_counts {
	long rules_bridge, rules_inet, chains_bridge;
};
int nft_counts(unsigned parity, struct nft_counts *ret);

/* True if the kernel's tables match what b loaded (rule and chain counts
 * of the base chains, the marker and b's half). */
bool nft_matches(const struct nft_batch *b, const struct nft_counts *c);

/* Remove both tables (tests, shutdown of the networking). 0 if absent. */
int nft_remove(void);

#endif
