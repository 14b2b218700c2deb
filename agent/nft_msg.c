/* nft_msg.c: netlink messages of an nftables batch built with libnftnl,
 * appended to a growing buffer with their text form (libnftnl's rendering,
 * what the golden files hold), and the expressions rules are made of. */
#include "nft_msg.h"

#include <arpa/inet.h>
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
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>

#define ELEMS_PER_MSG 200   /* NFTA_SET_ELEM_LIST is a nested u16-sized attr */
#define MSG_ROOM 65536      /* headroom before each message */

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (!q)
		abort();
	return q;
}


struct nlmsghdr *nft_msg_begin(struct nft_out *o)
{
	struct nft_batch *b = o->b;

	if (b->cap - b->len < MSG_ROOM) {
		size_t old = b->cap;

		b->cap = b->cap * 2 + MSG_ROOM;
		b->buf = xrealloc(b->buf, b->cap);
		/* alignment gaps are never written: keep the bytes defined */
		memset(b->buf + old, 0, b->cap - old);
	}
	return (struct nlmsghdr *)(b->buf + b->len);
}

static void msg_end(struct nft_out *o, struct nlmsghdr *nlh)
{
	o->b->len += NLMSG_ALIGN(nlh->nlmsg_len);
	o->b->seq_last = o->seq++;
}

static struct nlmsghdr *hdr(struct nft_out *o, int type, int family, uint16_t flags)
{
	o->last = o->b->len;
	return nftnl_nlmsg_build_hdr((char *)nft_msg_begin(o), (uint16_t)type, (uint16_t)family,
				     flags, o->seq);
}

void nft_emit_table(struct nft_out *o, int family, const char *name, int type)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct nlmsghdr *nlh;
	char line[256];

	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, (uint32_t)family);
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, name);
	nlh = hdr(o, type, family, type == NFT_MSG_NEWTABLE ? NLM_F_CREATE : 0);
	nftnl_table_nlmsg_build_payload(nlh, t);
	msg_end(o, nlh);
	if (o->text) {
		nftnl_table_snprintf(line, sizeof(line), t, NFTNL_OUTPUT_DEFAULT, 0);
		fprintf(o->text, "%s %s\n", type == NFT_MSG_NEWTABLE ? "add" : "delete",
			line);
	}
	nftnl_table_free(t);
}

/* A base chain when hook >= 0, else a regular one. */
void nft_emit_chain(struct nft_out *o, int family, const char *table, const char *name, int hook)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	struct nlmsghdr *nlh;
	char line[512];

	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, (uint32_t)family);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	if (hook >= 0) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, family == NFPROTO_BRIDGE ? -200 : 0);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	}
	nlh = hdr(o, NFT_MSG_NEWCHAIN, family, NLM_F_CREATE);
	nftnl_chain_nlmsg_build_payload(nlh, c);
	msg_end(o, nlh);
	if (family == NFPROTO_BRIDGE)
		o->b->chains_bridge++;
	if (o->text) {
		nftnl_chain_snprintf(line, sizeof(line), c, NFTNL_OUTPUT_DEFAULT, 0);
		fprintf(o->text, "add chain %s\n", line);
	}
	nftnl_chain_free(c);
}

static struct nftnl_set *set_new(int family, const char *table, const char *name, uint32_t id)
{
	struct nftnl_set *s = nftnl_set_alloc();

	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, (uint32_t)family);
	nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, name);
	nftnl_set_set_u32(s, NFTNL_SET_ID, id);
	return s;
}

/* Declare a set (map: a verdict map) keyed by key_type/key_len. */
void nft_emit_set(struct nft_out *o, int family, const char *table, const char *name,
		     uint32_t id, uint32_t key_type, uint32_t key_len, bool map)
{
	struct nftnl_set *s = set_new(family, table, name, id);
	struct nlmsghdr *nlh;
	char line[512];

	nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, key_type);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, key_len);
	if (key_type == DT_IFNAME) {
		/* nft renders interface names only when told they are host
		 * byte order strings */
		struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(64);

		nftnl_udata_put_u32(u, NFTNL_UDATA_SET_KEYBYTEORDER, 1);
		nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(u),
				   nftnl_udata_buf_len(u));
		nftnl_udata_buf_free(u);
	}
	if (map) {
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_MAP);
		nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
		nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, 0);
	}
	nlh = hdr(o, NFT_MSG_NEWSET, family, NLM_F_CREATE);
	nftnl_set_nlmsg_build_payload(nlh, s);
	msg_end(o, nlh);
	if (o->text) {
		nftnl_set_snprintf(line, sizeof(line), s, NFTNL_OUTPUT_DEFAULT, 0);
		fprintf(o->text, "add set %s\n", line);
	}
	nftnl_set_free(s);
}

/* Elements of one set, ELEMS_PER_MSG per message. keys: n keys of len
 * bytes each; chains (maps only): the jump target of each key. */
void nft_emit_elems(struct nft_out *o, int family, const char *table, const char *name,
		       uint32_t id, const void *keys, size_t len, size_t n, char (*chains)[32])
{
	for (size_t i = 0; i < n; i += ELEMS_PER_MSG) {
		struct nftnl_set *s = set_new(family, table, name, id);
		struct nlmsghdr *nlh;

		for (size_t k = i; k < n && k < i + ELEMS_PER_MSG; k++) {
			struct nftnl_set_elem *e = nftnl_set_elem_alloc();

			nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, (const char *)keys + k * len,
					   (uint32_t)len);
			if (chains) {
				nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, NFT_JUMP);
				nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, chains[k]);
			}
			nftnl_set_elem_add(s, e);
		}
		nlh = hdr(o, NFT_MSG_NEWSETELEM, family, NLM_F_CREATE);
		nftnl_set_elems_nlmsg_build_payload(nlh, s);
		msg_end(o, nlh);
		if (o->text) {
			char line[2048];
			struct nftnl_set_elems_iter *it = nftnl_set_elems_iter_create(s);
			struct nftnl_set_elem *e;

			while ((e = nftnl_set_elems_iter_next(it))) {
				nftnl_set_elem_snprintf(line, sizeof(line), e,
							NFTNL_OUTPUT_DEFAULT, 0);
				fprintf(o->text, "add element %s %s %s\n", table, name, line);
			}
			nftnl_set_elems_iter_destroy(it);
		}
		nftnl_set_free(s);
	}
}

/* ---------------------------------------------------------------- rules */

struct nft_rule nft_rule_new(int family, const char *table, const char *chain)
{
	struct nft_rule r = { nftnl_rule_alloc() };

	nftnl_rule_set_u32(r.r, NFTNL_RULE_FAMILY, (uint32_t)family);
	nftnl_rule_set_str(r.r, NFTNL_RULE_TABLE, table);
	nftnl_rule_set_str(r.r, NFTNL_RULE_CHAIN, chain);
	return r;
}

static void add_expr(struct nft_rule *r, struct nftnl_expr *e)
{
	nftnl_rule_add_expr(r->r, e);
}

void nft_x_meta(struct nft_rule *r, uint32_t key)
{
	struct nftnl_expr *e = nftnl_expr_alloc("meta");

	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
	add_expr(r, e);
}

void nft_x_payload(struct nft_rule *r, uint32_t base, uint32_t off, uint32_t len)
{
	struct nftnl_expr *e = nftnl_expr_alloc("payload");

	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
	add_expr(r, e);
}

void nft_x_cmp(struct nft_rule *r, uint32_t op, const void *data, uint32_t len)
{
	struct nftnl_expr *e = nftnl_expr_alloc("cmp");

	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
	add_expr(r, e);
}

void nft_x_ct(struct nft_rule *r, uint32_t key)
{
	struct nftnl_expr *e = nftnl_expr_alloc("ct");

	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
	add_expr(r, e);
}

void nft_x_exthdr6_present(struct nft_rule *r, uint8_t type)
{
	struct nftnl_expr *e = nftnl_expr_alloc("exthdr");

	nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_DREG, NFT_REG_1);
	nftnl_expr_set_u8(e, NFTNL_EXPR_EXTHDR_TYPE, type);
	nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OFFSET, 0);
	nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_LEN, 1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_FLAGS, NFT_EXTHDR_F_PRESENT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OP, NFT_EXTHDR_OP_IPV6);
	add_expr(r, e);
}

void nft_x_mask(struct nft_rule *r, const void *mask, uint32_t len)
{
	static const uint8_t zero[16];
	struct nftnl_expr *e = nftnl_expr_alloc("bitwise");

	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, len);
	add_expr(r, e);
}

/* reg 1 in (inv: not in) the named set; a map: jump through its verdict. */
void nft_x_lookup(struct nft_rule *r, const char *set, uint32_t id, bool inv, bool map)
{
	struct nftnl_expr *e = nftnl_expr_alloc("lookup");

	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, id);
	if (map)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_VERDICT);
	if (inv)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
	add_expr(r, e);
}

void nft_x_verdict(struct nft_rule *r, int verdict, const char *chain)
{
	struct nftnl_expr *e = nftnl_expr_alloc("immediate");

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
	if (chain)
		nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
	add_expr(r, e);
}

void nft_rule_emit(struct nft_out *o, struct nft_rule *r)
{
	struct nlmsghdr *nlh;
	uint32_t family = nftnl_rule_get_u32(r->r, NFTNL_RULE_FAMILY);

	nlh = hdr(o, NFT_MSG_NEWRULE, (int)family, NLM_F_CREATE | NLM_F_APPEND);
	nftnl_rule_nlmsg_build_payload(nlh, r->r);
	msg_end(o, nlh);
	if (family == NFPROTO_BRIDGE)
		o->b->rules_bridge++;
	else
		o->b->rules_inet++;
	if (o->text) {
		char line[8192];

		nftnl_rule_snprintf(line, sizeof(line), r->r, NFTNL_OUTPUT_DEFAULT, 0);
		fprintf(o->text, "add rule %s\n", line);
	}
	nftnl_rule_free(r->r);
	r->r = NULL;
}

void nft_drop(struct nft_out *o, struct nft_rule *r)
{
	nft_x_verdict(r, NF_DROP, NULL);
	nft_rule_emit(o, r);
}

/* match helpers on the bridge's frames */
void nft_m_ethertype(struct nft_rule *r, uint16_t type)
{
	uint16_t v = htons(type);

	nft_x_payload(r, L2, 12, 2);
	nft_x_cmp(r, NFT_CMP_EQ, &v, 2);
}

void nft_m_l4(struct nft_rule *r, uint8_t proto)
{
	nft_x_meta(r, NFT_META_L4PROTO);
	nft_x_cmp(r, NFT_CMP_EQ, &proto, 1);
}

void nft_m_u8(struct nft_rule *r, uint32_t base, uint32_t off, uint8_t v)
{
	nft_x_payload(r, base, off, 1);
	nft_x_cmp(r, NFT_CMP_EQ, &v, 1);
}

void nft_m_port(struct nft_rule *r, uint32_t off, uint16_t port)
{
	uint16_t v = htons(port);

	nft_x_payload(r, L4, off, 2);
	nft_x_cmp(r, NFT_CMP_EQ, &v, 2);
}

void nft_m_ifset(struct nft_rule *r, uint32_t meta, const char *set, uint32_t id, bool inv)
{
	nft_x_meta(r, meta);
	nft_x_lookup(r, set, id, inv, false);
}

/* field (base/off/len) masked by plen bits != prefix */
void nft_m_not_prefix(struct nft_rule *r, uint32_t base, uint32_t off, uint32_t len,
			 const void *prefix, unsigned plen)
{
	uint8_t mask[16] = { 0 }, net[16];

	for (unsigned i = 0; i < plen; i++)
		mask[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	for (unsigned i = 0; i < len; i++)
		net[i] = ((const uint8_t *)prefix)[i] & mask[i];
	nft_x_payload(r, base, off, len);
	nft_x_mask(r, mask, len);
	nft_x_cmp(r, NFT_CMP_NEQ, net, len);
}



void nft_emit_flush(struct nft_out *o, int family, const char *table, const char *chain)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	struct nlmsghdr *nlh;

	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, (uint32_t)family);
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nlh = hdr(o, NFT_MSG_DELRULE, family, 0);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	msg_end(o, nlh);
	if (o->text)
		fprintf(o->text, "flush chain %s %s %s\n",
			family == NFPROTO_BRIDGE ? "bridge" : "inet", table, chain);
	nftnl_rule_free(r);
}

void nft_emit_delete(struct nft_out *o, int family, const char *table, const char *name, int what)
{
	static const char *const word[] = { "chain", "set", "elements of" };
	struct nlmsghdr *nlh;

	if (what) {
		struct nftnl_set *s = set_new(family, table, name, 0);

		nftnl_set_unset(s, NFTNL_SET_ID);
		if (what == 2) {
			nlh = hdr(o, NFT_MSG_DELSETELEM, family, 0);
			nftnl_set_elems_nlmsg_build_payload(nlh, s);
		} else {
			nlh = hdr(o, NFT_MSG_DELSET, family, 0);
			nftnl_set_nlmsg_build_payload(nlh, s);
		}
		nftnl_set_free(s);
	} else {
		struct nftnl_chain *c = nftnl_chain_alloc();

		nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, (uint32_t)family);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
		nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
		nlh = hdr(o, NFT_MSG_DELCHAIN, family, 0);
		nftnl_chain_nlmsg_build_payload(nlh, c);
		nftnl_chain_free(c);
	}
	msg_end(o, nlh);
	if (o->text)
		fprintf(o->text, "delete %s %s %s\n", word[what], table, name);
}
