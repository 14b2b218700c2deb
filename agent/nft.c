/* nft.c: the thin applier of nft_build's batches, and the kernel-side
 * counts the guard check compares against what was loaded.
 *
 * One batch, one sendto: nfnetlink processes a batch synchronously inside
 * the send, so when sendto returns every error (and the one ACK the builder
 * asked for, on the last inner message) is already queued on the socket.
 * The receive buffer is raised anyway and always drained. A batch with any
 * error is aborted whole by the kernel: the previous ruleset stays. */
#include "nft.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/rule.h>
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

int nft_apply(const struct nft_batch *b, char *err, size_t errlen)
{
	char buf[16384];
	struct mnl_socket *nl;
	bool acked = false, lost = false;
	int first = 0, fd;

	if (err && errlen)
		*err = '\0';
	nl = nl_open(b->len + 65536);
	if (!nl) {
		int e = -errno;

		if (err)
			snprintf(err, errlen, "netlink: %s", strerror(errno));
		return e;
	}
	fd = mnl_socket_get_fd(nl);
	if (mnl_socket_sendto(nl, b->buf, b->len) < 0) {
		int e = -errno;

		if (err)
			snprintf(err, errlen, "sendto: %s", strerror(errno));
		mnl_socket_close(nl);
		return e;
	}
	for (int waits = 0; !acked || waits == 0;) {
		ssize_t n = recv(fd, buf, sizeof(buf), acked ? MSG_DONTWAIT : 0);
		const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
		int left = (int)n;

		if (n < 0 && errno == ENOBUFS) {
			lost = true;     /* replies dropped: the ACK may be among them */
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
			const struct nlmsgerr *me = mnl_nlmsg_get_payload(nlh);

			if (nlh->nlmsg_type != NLMSG_ERROR)
				continue;
			if (me->error && !first) {
				first = me->error;
				describe(b, nlh->nlmsg_seq, me->error, err, errlen);
			}
			if (nlh->nlmsg_seq == b->seq_last)
				acked = true;
		}
		waits = 1;
	}
	mnl_socket_close(nl);
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

/* ------------------------------------------------------------- counts */

static int count_cb(const struct nlmsghdr *nlh, void *data)
{
	(*(long *)data)++;
	return MNL_CB_OK;
}

/* Dump (GETRULE or GETCHAIN) of one table: how many objects, -1 if the
 * table does not exist. */
static int dump_count(struct mnl_socket *nl, int type, int family, const char *table, long *ret)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	static uint32_t seq;
	uint32_t portid = mnl_socket_get_portid(nl), s = (uint32_t)time(NULL) + ++seq * 7;
	struct nlmsghdr *nlh;
	long count = 0;
	int r;

	nlh = nftnl_nlmsg_build_hdr(buf, (uint16_t)type, (uint16_t)family, NLM_F_DUMP, s);
	if (type == NFT_MSG_GETRULE) {
		struct nftnl_rule *rl = nftnl_rule_alloc();

		nftnl_rule_set_str(rl, NFTNL_RULE_TABLE, table);
		nftnl_rule_nlmsg_build_payload(nlh, rl);
		nftnl_rule_free(rl);
	} else {
		struct nftnl_chain *c = nftnl_chain_alloc();

		nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
		nftnl_chain_nlmsg_build_payload(nlh, c);
		nftnl_chain_free(c);
	}
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	while ((r = (int)mnl_socket_recvfrom(nl, buf, sizeof(buf))) > 0) {
		r = mnl_cb_run(buf, (size_t)r, s, portid, count_cb, &count);
		if (r <= 0)
			break;
	}
	if (r < 0 && errno == ENOENT) {
		*ret = -1;
		return 0;
	}
	if (r < 0)
		return -errno;
	/* chain dumps are not filtered by table on every kernel: counted
	 * objects of other tables would only make the check stricter */
	*ret = count;
	return 0;
}

int nft_counts(struct nft_counts *ret)
{
	struct mnl_socket *nl = nl_open(0);
	struct nft_counts c;
	int e;

	if (!nl)
		return -errno;
	e = dump_count(nl, NFT_MSG_GETRULE, NFPROTO_BRIDGE, NFT_TABLE_BRIDGE, &c.rules_bridge);
	if (!e)
		e = dump_count(nl, NFT_MSG_GETRULE, NFPROTO_INET, NFT_TABLE_INET, &c.rules_inet);
	if (!e)
		e = dump_count(nl, NFT_MSG_GETCHAIN, NFPROTO_BRIDGE, NFT_TABLE_BRIDGE,
			       &c.chains_bridge);
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
