/* nft_msg.h: the building blocks of nft_build.c, private to it: netlink
 * messages appended to a batch (with their text form) and the expressions
 * of rules. Every rule nft_build makes is a conjunction of matches ending
 * in a verdict. */
#ifndef BC_AGENT_NFT_MSG_H
#define BC_AGENT_NFT_MSG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <linux/netfilter/nf_tables.h>

#include "nft.h"

/* nft's datatype ids, so that `nft list` renders the sets readably */
#define DT_IPADDR 7
#define DT_IP6ADDR 8
#define DT_IFNAME 41
#define DT_INET_SERVICE 13

enum { L2 = NFT_PAYLOAD_LL_HEADER, L3 = NFT_PAYLOAD_NETWORK_HEADER,
       L4 = NFT_PAYLOAD_TRANSPORT_HEADER };

/* The batch being built. */
struct nft_out {
	struct nft_batch *b;
	FILE *text;         /* the text form, or NULL */
	uint32_t seq;       /* the next message's */
	size_t last;        /* offset of the last inner message */
	unsigned parity;    /* the half being built: names "a_..." or "b_..." */
	char names[16][24]; /* set (and tapguard) names of that half, by id */
};

/* A rule being built (nft_rule_new, matches, then nft_rule_emit/nft_drop). */
struct nft_rule {
	struct nftnl_rule *r;
};

/* Room for the next message at the end of the batch. */
struct nlmsghdr *nft_msg_begin(struct nft_out *o);

void nft_emit_table(struct nft_out *o, int family, const char *name, int type);
/* A base chain when hook >= 0, else a regular one. */
void nft_emit_chain(struct nft_out *o, int family, const char *table, const char *name, int hook);
/* Declare a set (map: a verdict map) keyed by key_type/key_len. */
void nft_emit_set(struct nft_out *o, int family, const char *table, const char *name, uint32_t id,
		  uint32_t key_type, uint32_t key_len, bool map);
/* n keys of len bytes; chains (maps only): each key's jump target. */
void nft_emit_elems(struct nft_out *o, int family, const char *table, const char *name,
		    uint32_t id, const void *keys, size_t len, size_t n, char (*chains)[32]);

/* Every rule of one chain (nft's "flush chain"). */
void nft_emit_flush(struct nft_out *o, int family, const char *table, const char *chain);
/* Delete the chain (what 0), the set (1) or every element of the set (2). */
void nft_emit_delete(struct nft_out *o, int family, const char *table, const char *name, int what);

struct nft_rule nft_rule_new(int family, const char *table, const char *chain);
void nft_rule_emit(struct nft_out *o, struct nft_rule *r);
/* End r with drop and emit it. */
void nft_drop(struct nft_out *o, struct nft_rule *r);

/* expressions, all on register 1 */
void nft_x_meta(struct nft_rule *r, uint32_t key);
void nft_x_payload(struct nft_rule *r, uint32_t base, uint32_t off, uint32_t len);
void nft_x_cmp(struct nft_rule *r, uint32_t op, const void *data, uint32_t len);
void nft_x_mask(struct nft_rule *r, const void *mask, uint32_t len);
/* conntrack key (NFT_CT_STATE: 4 bytes of NF_CT_STATE_* bits) */
void nft_x_ct(struct nft_rule *r, uint32_t key);
/* 1 if the IPv6 packet carries extension header type (44: fragment), else 0
 * (one byte) */
void nft_x_exthdr6_present(struct nft_rule *r, uint8_t type);
/* reg 1 in (inv: not in) the named set; map: jump through its verdict */
void nft_x_lookup(struct nft_rule *r, const char *set, uint32_t id, bool inv, bool map);
void nft_x_verdict(struct nft_rule *r, int verdict, const char *chain);

/* matches */
void nft_m_ethertype(struct nft_rule *r, uint16_t type);
void nft_m_l4(struct nft_rule *r, uint8_t proto);
void nft_m_u8(struct nft_rule *r, uint32_t base, uint32_t off, uint8_t v);
void nft_m_port(struct nft_rule *r, uint32_t off, uint16_t port);
void nft_m_ifset(struct nft_rule *r, uint32_t meta, const char *set, uint32_t id, bool inv);
/* field (base/off/len) masked by plen bits != prefix */
void nft_m_not_prefix(struct nft_rule *r, uint32_t base, uint32_t off, uint32_t len,
		      const void *prefix, unsigned plen);

#endif
