/* nft.c: the thin applier of nft_build's batches, and the kernel-side
 * counts the guard check compares against what was loaded. A load reads
 * the tables' chains and sets, picks the idle half (nft_build.c), frames
 * the prologue and the body between batch begin and end.
 *
 * One batch, one sendto: nfnetlink processes a batch synchronously inside
 * the send, so when sendto returns every error (and the one ACK the builder
 * asked for, on the last inner message) is already queued on the socket.
 * The receive buffer is raised anyway and always drained. A batch with any
 * error is aborted whole by the kernel: the previous ruleset stays. */
#include "nft.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#define NFT_RCVBUF (4 << 20)

static struct mnl_socket *nl_open(size_t sndbuf)
{
	struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
	int rcv = NFT_RCVBUF, snd = (int)sndbuf;

	if (!nl)
		return NULL;
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		mnl_socket_close(nl);
		return NULL;
	}
	/* FORCE variants: root may exceed rmem_max/wmem_max */
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv));
	if (snd > 0)
		setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd));
	return nl;
}

/* The message of b carrying seq, described for an error. */
static void describe(const struct nft_batch *b, uint32_t seq, int e, char *err, size_t errlen)
{
	static const char *names[] = {
		[NFT_MSG_NEWTABLE] = "add table", [NFT_MSG_DELTABLE] = "delete table",
		[NFT_MSG_NEWCHAIN] = "add chain", [NFT_MSG_NEWRULE] = "add rule",
		[NFT_MSG_NEWSET] = "add set", [NFT_MSG_NEWSETELEM] = "add element",
		[NFT_MSG_DELRULE] = "flush chain", [NFT_MSG_DELCHAIN] = "delete chain",
		[NFT_MSG_DELSET] = "delete set", [NFT_MSG_DELSETELEM] = "flush set",
	};
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	size_t left = b->len;
	const char *what = "message";

	while (mnl_nlmsg_ok(nlh, (int)left)) {
		if (nlh->nlmsg_seq == seq) {
			unsigned t = NFNL_MSG_TYPE(nlh->nlmsg_type);

			if (t < sizeof(names) / sizeof(names[0]) && names[t])
				what = names[t];
			break;
		}
		nlh = mnl_nlmsg_next(nlh, (int *)&left);
	}
	if (err)
		snprintf(err, errlen, "%s (message %u of the batch): %s", what,
			 seq - b->seq_first, strerror(-e));
}

static int existing(struct mnl_socket *nl, struct nft_obj **ret, size_t *ret_n);

/* begin + prologue + body + end in one buffer (*ret, len in ret->len). */
static void frame(const struct nft_batch *pro, const struct nft_batch *body, struct nft_batch *ret)
{
	struct nft_batch f = *body;
	size_t hdr = NLMSG_ALIGN(sizeof(struct nlmsghdr) + sizeof(struct nfgenmsg));

	f.text = NULL;
	f.cap = pro->len + body->len + 2 * hdr;
	f.buf = calloc(1, f.cap);
	if (!f.buf)
		abort();
	nftnl_batch_begin(f.buf, pro->seq_first - 1);
	memcpy(f.buf + hdr, pro->buf, pro->len);
	memcpy(f.buf + hdr + pro->len, body->buf, body->len);
	nftnl_batch_end(f.buf + hdr + pro->len + body->len, pro->seq_last + 1);
	f.len = pro->len + body->len + 2 * hdr;
	*ret = f;
}

/* Read the replies of a sent batch: the first error, and whether the
 * reply to the body's last message (its ACK or its error) came. */
static int replies(struct mnl_socket *nl, const struct nft_batch *f, uint32_t last, char *err,
		   size_t errlen)
{
	struct timeval tv = { .tv_sec = 5 };
	int fd = mnl_socket_get_fd(nl), first = 0;
	bool acked = false, lost = false;
	char buf[16384];

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), acked ? MSG_DONTWAIT : 0);
		const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
		int left = (int)n;

		if (n < 0 && errno == ENOBUFS) {
			lost = true;     /* replies dropped: the ACK may be among them */
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;   /* drained (EAGAIN), or no reply within 5 s */
		for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
			const struct nlmsgerr *me = mnl_nlmsg_get_payload(nlh);

			if (nlh->nlmsg_type != NLMSG_ERROR)
				continue;
			if (me->error && !first) {
				first = me->error;
				describe(f, nlh->nlmsg_seq, me->error, err, errlen);
			}
			if (nlh->nlmsg_seq == last)
				acked = true;
		}
	}
	if (first)
		return first;
	if (!acked) {
		if (err)
			snprintf(err, errlen, "no acknowledgement from the kernel%s",
				 lost ? " (receive buffer overflowed)" : "");
		return lost ? -ENOBUFS : -EPROTO;
	}
	return 0;
}

/* The half the base chains use now, from the marker chain; -1 if none. */
static int in_use(const struct nft_obj *old, size_t n_old)
{
	int half = -1;

	for (size_t i = 0; i < n_old; i++)
		if (old[i].family == NFPROTO_BRIDGE && !old[i].set) {
			if (strcmp(old[i].name, "half_a") == 0)
				half = half == -1 ? 0 : -2;
			else if (strcmp(old[i].name, "half_b") == 0)
				half = half == -1 ? 1 : -2;
		}
	return half < 0 ? -1 : half;
}

int nft_apply(const struct nft_net *n, unsigned flags, unsigned *ret_parity, char *err,
	      size_t errlen)
{
	struct nft_batch body, pro, f;
	struct nft_obj *old = NULL;
	struct mnl_socket *nl;
	unsigned parity;
	size_t n_old = 0;
	int e;

	if (err && errlen)
		*err = '\0';
	nl = nl_open(0);
	if (!nl) {
		e = -errno;
		if (err)
			snprintf(err, errlen, "netlink: %s", strerror(errno));
		return e;
	}
	e = existing(nl, &old, &n_old);
	if (e < 0) {
		if (err)
			snprintf(err, errlen, "reading the tables: %s", strerror(-e));
		mnl_socket_close(nl);
		return e;
	}
	parity = in_use(old, n_old) == 0 ? 1 : 0;
	nft_build(n, parity, 1, false, &body);
	if (flags & NFT_APPLY_BREAK)
		nft_batch_break(&body);
	nft_build_prologue(old, n_old, parity, body.seq_last + 2, false, &pro);
	free(old);
	frame(&pro, &body, &f);
	{
		int snd = (int)f.len + 65536;

		setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd));
	}
	if (mnl_socket_sendto(nl, f.buf, f.len) < 0) {
		e = -errno;
		if (err)
			snprintf(err, errlen, "sendto: %s", strerror(errno));
	} else {
		e = replies(nl, &f, body.seq_last, err, errlen);
	}
	free(f.buf);
	nft_batch_free(&pro);
	nft_batch_free(&body);
	mnl_socket_close(nl);
	if (e == 0 && ret_parity)
		*ret_parity = parity;
	return e;
}

/* ------------------------------------------------------------- dumps */

struct dump {
	const char *table;      /* objects of this table only */
	int parity;             /* counting: base chains, the marker, this half */
	int family;
	int type;               /* NFT_MSG_GETRULE, GETCHAIN, GETSET */
	long count;
	struct nft_obj *objs;   /* chains and sets, when collecting */
	size_t n_objs;
	bool collect;
};

static void collect(struct dump *d, const char *name, bool set)
{
	struct nft_obj *o;

	d->objs = realloc(d->objs, (d->n_objs + 1) * sizeof(*d->objs));
	if (!d->objs)
		abort();
	o = &d->objs[d->n_objs++];
	o->family = d->family;
	o->set = set;
	snprintf(o->name, sizeof(o->name), "%s", name);
}

static int dump_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dump *d = data;
	const char *table = NULL, *name = NULL;

	if (d->type == NFT_MSG_GETRULE) {
		struct nftnl_rule *r = nftnl_rule_alloc();

		if (nftnl_rule_nlmsg_parse(nlh, r) == 0) {
			name = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
			if (name && (nft_is_base_chain(d->family, name) ||
				     nft_obj_parity(name) == d->parity))
				d->count++;
		}
		nftnl_rule_free(r);
	} else if (d->type == NFT_MSG_GETCHAIN) {
		struct nftnl_chain *c = nftnl_chain_alloc();

		if (nftnl_chain_nlmsg_parse(nlh, c) == 0) {
			table = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
			name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
			if (table && name && strcmp(table, d->table) == 0) {
				if (nft_is_base_chain(d->family, name) ||
				    nft_obj_parity(name) == d->parity ||
				    strcmp(name, d->parity ? "half_b" : "half_a") == 0)
					d->count++;
				if (d->collect)
					collect(d, name, false);
			}
		}
		nftnl_chain_free(c);
	} else if (d->type == NFT_MSG_GETSET) {
		struct nftnl_set *st = nftnl_set_alloc();

		if (nftnl_set_nlmsg_parse(nlh, st) == 0) {
			table = nftnl_set_get_str(st, NFTNL_SET_TABLE);
			name = nftnl_set_get_str(st, NFTNL_SET_NAME);
			if (table && name && strcmp(table, d->table) == 0) {
				d->count++;
				if (d->collect)
					collect(d, name, true);
			}
		}
		nftnl_set_free(st);
	}
	return MNL_CB_OK;
}

/* Dump one kind of object of one table; d->count -1 if the table does
 * not exist. */
static int dump(struct mnl_socket *nl, struct dump *d)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	static uint32_t seq;
	uint32_t portid = mnl_socket_get_portid(nl), s = (uint32_t)time(NULL) + ++seq * 7;
	struct nlmsghdr *nlh;
	int r;

	nlh = nftnl_nlmsg_build_hdr(buf, (uint16_t)d->type, (uint16_t)d->family, NLM_F_DUMP, s);
	if (d->type == NFT_MSG_GETRULE) {
		struct nftnl_rule *rl = nftnl_rule_alloc();

		nftnl_rule_set_str(rl, NFTNL_RULE_TABLE, d->table);
		nftnl_rule_nlmsg_build_payload(nlh, rl);
		nftnl_rule_free(rl);
	} else if (d->type == NFT_MSG_GETSET) {
		struct nftnl_set *st = nftnl_set_alloc();

		nftnl_set_set_str(st, NFTNL_SET_TABLE, d->table);
		nftnl_set_nlmsg_build_payload(nlh, st);
		nftnl_set_free(st);
	}
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	d->count = 0;
	while ((r = (int)mnl_socket_recvfrom(nl, buf, sizeof(buf))) > 0) {
		r = mnl_cb_run(buf, (size_t)r, s, portid, dump_cb, d);
		if (r <= 0)
			break;
	}
	if (r < 0 && errno == ENOENT) {
		d->count = -1;
		return 0;
	}
	return r < 0 ? -errno : 0;
}

/* The chains and sets both tables hold now. *ret malloc'd. */
static int existing(struct mnl_socket *nl, struct nft_obj **ret, size_t *ret_n)
{
	struct dump d = { .collect = true };
	int e = 0;

	for (int t = 0; t < 2 && !e; t++)
		for (int k = 0; k < 2 && !e; k++) {
			d.table = t ? NFT_TABLE_INET : NFT_TABLE_BRIDGE;
			d.family = t ? NFPROTO_INET : NFPROTO_BRIDGE;
			d.type = k ? NFT_MSG_GETSET : NFT_MSG_GETCHAIN;
			e = dump(nl, &d);
		}
	if (e) {
		free(d.objs);
		return e;
	}
	*ret = d.objs;
	*ret_n = d.n_objs;
	return 0;
}

static long count_of(struct mnl_socket *nl, int type, int family, const char *table,
		     unsigned parity, int *e)
{
	struct dump d = { .table = table, .family = family, .type = type, .parity = (int)parity };

	if (!*e)
		*e = dump(nl, &d);
	return d.count;
}

int nft_counts(unsigned parity, struct nft_counts *ret)
{
	struct mnl_socket *nl = nl_open(0);
	struct nft_counts c;
	int e;

	if (!nl)
		return -errno;
	e = 0;
	c.rules_bridge = count_of(nl, NFT_MSG_GETRULE, NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, parity, &e);
	c.rules_inet = count_of(nl, NFT_MSG_GETRULE, NFPROTO_INET, NFT_TABLE_INET, parity, &e);
	c.chains_bridge = count_of(nl, NFT_MSG_GETCHAIN, NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, parity,
				   &e);
	mnl_socket_close(nl);
	if (e)
		return e;
	*ret = c;
	return 0;
}

bool nft_matches(const struct nft_batch *b, const struct nft_counts *c)
{
	return c->rules_bridge == (long)b->rules_bridge && c->rules_inet == (long)b->rules_inet &&
	       c->chains_bridge == (long)b->chains_bridge;
}

int nft_remove(void)
{
	char buf[4096];
	struct mnl_socket *nl = nl_open(0);
	uint32_t seq = (uint32_t)time(NULL);
	struct mnl_nlmsg_batch *mb;
	struct nlmsghdr *nlh;
	int e = 0;

	if (!nl)
		return -errno;
	/* add-then-delete: never fails on an absent table */
	mb = mnl_nlmsg_batch_start(buf, sizeof(buf));
	nftnl_batch_begin(mnl_nlmsg_batch_current(mb), seq++);
	mnl_nlmsg_batch_next(mb);
	for (int i = 0; i < 4; i++) {
		struct nftnl_table *t = nftnl_table_alloc();
		int family = i < 2 ? NFPROTO_BRIDGE : NFPROTO_INET;

		nftnl_table_set_str(t, NFTNL_TABLE_NAME, i < 2 ? NFT_TABLE_BRIDGE : NFT_TABLE_INET);
		nlh = nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(mb),
					    i % 2 ? NFT_MSG_DELTABLE : NFT_MSG_NEWTABLE,
					    (uint16_t)family,
					    (i % 2 ? 0 : NLM_F_CREATE) | (i == 3 ? NLM_F_ACK : 0),
					    seq++);
		nftnl_table_nlmsg_build_payload(nlh, t);
		nftnl_table_free(t);
		mnl_nlmsg_batch_next(mb);
	}
	nftnl_batch_end(mnl_nlmsg_batch_current(mb), seq);
	mnl_nlmsg_batch_next(mb);
	if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(mb), mnl_nlmsg_batch_size(mb)) < 0) {
		e = -errno;
	} else {
		ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));

		if (n < 0)
			e = -errno;
		else if (mnl_cb_run(buf, (size_t)n, 0, mnl_socket_get_portid(nl), NULL, NULL) < 0)
			e = -errno;
	}
	mnl_nlmsg_batch_stop(mb);
	mnl_socket_close(nl);
	return e;
}
