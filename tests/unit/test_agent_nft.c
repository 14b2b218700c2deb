/* test_agent_nft.c: the pure ruleset builder. Golden files pin the batch's
 * text form (libnftnl's rendering of every object) for a spec holding each
 * policy; `make update-golden` rewrites them (BC_UPDATE_GOLDEN=1). Also:
 * fail closed, EUI-64 link-locals, determinism, the per-message size limit
 * at 5,000 instances. The kernel side is tests/net. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netlink.h>

#include "agent/nft.h"
#include "pbjson.h"
#include "tap.h"
#include "util.h"

static const char SPEC[] =
	"{\"generation\":1,\"bridge\":\"bcbr0\",\"ipamSubnet\":\"10.77.0.0/24\","
	"\"ipamGateway\":\"10.77.0.1\",\"ipamSubnet6\":\"fd77::/64\",\"instances\":["
	"{\"id\":\"inst_a\",\"networkPolicy\":\"egress\",\"nics\":[{\"tap\":\"bca0\","
	"\"mac\":\"52:54:00:00:00:0a\",\"ipv4\":\"10.77.0.10\",\"ipv4Prefix\":24,"
	"\"ipv6\":\"fd77::a\",\"ipv6Prefix\":64}]},"
	"{\"id\":\"inst_b\",\"networkPolicy\":\"private\",\"sshFromHostOnly\":true,\"nics\":[{"
	"\"tap\":\"bcb0\",\"mac\":\"52:54:00:00:00:0b\",\"ipv4\":\"10.77.0.11\","
	"\"ipv4Prefix\":24,\"ipv6\":\"fd77::b\",\"ipv6Prefix\":64}]},"
	"{\"id\":\"inst_c\",\"networkPolicy\":\"none\",\"nics\":[{\"tap\":\"bcc0\","
	"\"mac\":\"52:54:00:00:00:0c\",\"ipv4\":\"10.77.0.12\",\"ipv4Prefix\":24}]},"
	"{\"id\":\"inst_d\",\"networkPolicy\":\"private\",\"nics\":[{\"tap\":\"bcd0\"}]},"
	"{\"id\":\"inst_e\",\"nics\":[{\"tap\":\"bce0\"}]}]}";

static const char HOST[][64] = { "10.77.0.1", "fe80::1" };

static char failed[8][RT_ID_MAX + RT_REASON_MAX + 2];
static size_t n_failed;

static void on_fail(const char *id, const char *reason, void *data)
{
	if (n_failed < 8)
		snprintf(failed[n_failed++], sizeof(failed[0]), "%s %s", id, reason);
}

static Bc__Node__V1__NodeSpec *spec_from(const char *json)
{
	ProtobufCMessage *m = NULL;
	bc_error err = { 0 };

	if (pbjson_read(&bc__node__v1__node_spec__descriptor, json, strlen(json), 1 << 20, &m,
			&err) < 0)
		return NULL;
	return (Bc__Node__V1__NodeSpec *)m;
}

static void golden(const char *name, const char *got)
{
	const char *src = getenv("BC_SRC");
	char path[512], *want = NULL;
	size_t len;

	snprintf(path, sizeof(path), "%s/tests/unit/golden/%s", src ? src : ".", name);
	if (getenv("BC_UPDATE_GOLDEN")) {
		ok(file_write_atomic(path, got, strlen(got), 0644) == 0, "golden %s rewritten", name);
		return;
	}
	if (file_read_all(path, 1 << 22, &want, &len) < 0) {
		ok(0, "golden %s readable (make update-golden)", name);
		return;
	}
	ok(strcmp(got, want) == 0, "batch text matches golden/%s", name);
	if (strcmp(got, want) != 0)
		printf("# rerun with BC_UPDATE_GOLDEN=1 and diff to see the change\n");
	free(want);
}

static void test_golden(void)
{
	Bc__Node__V1__NodeSpec *spec = spec_from(SPEC);
	struct nft_net n;
	struct nft_batch b;

	ok(spec != NULL, "spec parses");
	n_failed = 0;
	is_int(nft_net_from_spec(spec, HOST, 2, &n, on_fail, NULL), 0, "net from spec");
	is_int(n.n_taps, 5, "5 taps: 4 expressed, inst_d's blocked");
	ok(n.taps[3].policy == NFT_POLICY_BLOCKED && strcmp(n.taps[3].name, "bcd0") == 0,
	   "inst_d's tap is blocked (all dropped) while the runtime stops it");
	is_int(n_failed, 1, "one instance failed closed");
	is_str(failed[0],
	       "inst_d NetworkPolicy: private needs IPAM addresses and a valid MAC on bcd0",
	       "inst_d: private without addresses, with the reason");
	is_int(nft_net_host_ports(&n, "tcp/2222, udp/67 udp/67"), 0, "host ports parse");
	is_int((long)(n.n_host_tcp * 10 + n.n_host_udp), 11, "one tcp, one udp port (duplicates once)");
	nft_build(&n, 0, 1, true, &b);
	golden("nft_policies.txt", b.text);
	is_int(b.rules_inet, 11, "backstop: 4 rules; host input from bcbr0: 3, 2 for the guest-up port "
	       "and 2 for the identity endpoint's");
	is_int(b.chains_bridge, 13, "bridge chains: marker, tapguard, base x4, f- x4, t- x3");
	nft_batch_free(&b);
	nft_net_clear(&n);
	protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void test_empty(void)
{
	static const struct nft_obj old[] = {
		{ 7, false, "forward" }, { 7, false, "half_a" }, { 7, false, "a_f-x" },
		{ 7, true, "a_taps" }, { 7, false, "b_f-x" }, { 7, true, "b_taps" },
		{ 7, false, "stray" }, { 1, true, "b_taps" }, { 1, false, "input" },
	};
	struct nft_net n = { 0 };
	struct nft_batch b, p;

	nft_build(&n, 1, 1, true, &b);
	golden("nft_empty.txt", b.text);
	/* half a in use: the prologue keeps it, clears half b and strays */
	nft_build_prologue(old, sizeof(old) / sizeof(old[0]), 1, 100, true, &p);
	golden("nft_prologue.txt", p.text);
	nft_batch_free(&p);
	is_int(b.chains_bridge, 6, "empty: marker, tapguard and the 4 base chains");
	is_int(b.rules_inet, 4, "empty: no bridge, no host input rules");
	nft_batch_free(&b);
}

static void test_host_ports(void)
{
	static const char *bad[] = { "tcp/0", "tcp/65536", "sctp/5", "tcp/", "tcp/22x", "22",
				     "udp/-1" };
	struct nft_net n = { 0 };
	char many[NFT_PORTS_MAX * 12 + 16] = "";

	is_int(nft_net_host_ports(&n, "udp/53 tcp/53"), 0, "udp/53 tcp/53");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		is_int(nft_net_host_ports(&n, bad[i]), -EINVAL, "host ports '%s' refused", bad[i]);
	is_int((long)(n.n_host_tcp + n.n_host_udp), 2, "a refused list leaves the ports unchanged");
	is_int(nft_net_host_ports(&n, "none"), 0, "none");
	is_int((long)(n.n_host_tcp + n.n_host_udp), 0, "none: no port");
	is_int(nft_net_host_ports(&n, NFT_HOST_PORTS_DEFAULT), 0, "the default parses");
	for (int i = 1; i <= NFT_PORTS_MAX + 1; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "tcp/%d ", i);
	is_int(nft_net_host_ports(&n, many), -EINVAL, "more than NFT_PORTS_MAX ports refused");
}

static void test_fail_closed(void)
{
	static const struct {
		const char *nic, *policy, *reason;
	} cases[] = {
		{ "{\"tap\":\"t1\",\"ipv4\":\"10.0.0.2\"}", "none",
		  "NetworkPolicy: none needs IPAM addresses and a valid MAC on t1" },
		{ "{\"tap\":\"t1\",\"mac\":\"52:54:00:00:00:01\"}", "private",
		  "NetworkPolicy: private needs IPAM addresses and a valid MAC on t1" },
		{ "{\"tap\":\"t1\",\"mac\":\"01:00:5e:00:00:01\",\"ipv4\":\"10.0.0.2\"}", "private",
		  "NetworkPolicy: private needs IPAM addresses and a valid MAC on t1" },
		{ "{\"tap\":\"t1\",\"mac\":\"52:54:00:00:00:01\",\"ipv4\":\"10.0.0.300\"}", "",
		  "NetworkPolicy: bad ipv4 on t1" },
		{ "{\"tap\":\"a-very-long-tap-name\"}", "", "NetworkPolicy: bad tap name" },
		{ "{\"tap\":\"t1\"}", "open", "NetworkPolicy: unknown policy open" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *json = xasprintf("{\"instances\":[{\"id\":\"i1\",\"networkPolicy\":\"%s\","
				       "\"nics\":[%s]}]}",
				       cases[i].policy, cases[i].nic);
		Bc__Node__V1__NodeSpec *spec = spec_from(json);
		struct nft_net n;

		n_failed = 0;
		nft_net_from_spec(spec, NULL, 0, &n, on_fail, NULL);
		is_int(n.n_taps, strstr(cases[i].nic, "long") ? 0 : 1,
		       "case %zu: only a blocked tap (none with a bad name)", i);
		ok(n.n_taps == 0 || n.taps[0].policy == NFT_POLICY_BLOCKED, "case %zu: blocked", i);
		is_int(n_failed, 1, "case %zu: instance failed", i);
		if (n_failed)
			is_str(failed[0] + 3, cases[i].reason, "case %zu: reason", i);
		nft_net_clear(&n);
		protobuf_c_message_free_unpacked(&spec->base, NULL);
		free(json);
	}
	{
		Bc__Node__V1__NodeSpec *spec = spec_from(
			"{\"instances\":[{\"id\":\"i1\",\"nics\":[{\"tap\":\"t1\"}]},"
			"{\"id\":\"i2\",\"nics\":[{\"tap\":\"t1\"}]}]}");
		struct nft_net n;

		n_failed = 0;
		nft_net_from_spec(spec, NULL, 0, &n, on_fail, NULL);
		is_int(n.n_taps, 1, "a tap used twice: the first instance keeps it");
		is_str(failed[0], "i2 NetworkPolicy: tap t1 already used by i1", "the second fails");
		nft_net_clear(&n);
		protobuf_c_message_free_unpacked(&spec->base, NULL);
	}
	{
		struct nft_net n = { 0 };

		is_int(nft_net_subnets(&n, "10.0.0.0/33", ""), -EINVAL, "bad subnet refused");
		is_int(nft_net_host_addr(&n, "10.0.0.x"), -EINVAL, "bad host address refused");
	}
}

static void test_eui64(void)
{
	Bc__Node__V1__NodeSpec *spec = spec_from(SPEC);
	struct nft_net n;
	char ll[INET6_ADDRSTRLEN];

	nft_net_from_spec(spec, HOST, 2, &n, NULL, NULL);
	inet_ntop(AF_INET6, &n.taps[0].ll6, ll, sizeof(ll));
	is_str(ll, "fe80::5054:ff:fe00:a", "EUI-64 link-local of 52:54:00:00:00:0a");
	ok(!n.taps[4].guarded, "a NIC without MAC and addresses is not guarded");
	nft_net_clear(&n);
	protobuf_c_message_free_unpacked(&spec->base, NULL);
}

/* 5,000 guarded instances: identical bytes twice, and no message past the
 * u16 limit of nested netlink attributes. */
static void test_large(void)
{
	struct nft_net n = { 0 };
	struct nft_batch a, b;
	size_t biggest = 0, left;
	const struct nlmsghdr *nlh;

	nft_net_subnets(&n, "10.0.0.0/16", "fd00::/64");
	nft_net_host_addr(&n, "10.0.0.1");
	for (int i = 0; i < 5000; i++) {
		char *json = xasprintf("{\"id\":\"i%d\",\"networkPolicy\":\"%s\",\"sshFromHostOnly\":%s,"
				       "\"nics\":[{\"tap\":\"t%d\",\"mac\":\"52:54:00:00:%02x:%02x\","
				       "\"ipv4\":\"10.0.%d.%d\",\"ipv6\":\"fd00::%x\"}]}",
				       i, i % 3 ? "egress" : "private", i % 2 ? "true" : "false", i,
				       i >> 8, i & 255, 1 + i / 250, i % 250 + 2, i + 2);
		ProtobufCMessage *m = NULL;
		bc_error err = { 0 };
		char reason[RT_REASON_MAX];

		pbjson_read(&bc__node__v1__instance_spec__descriptor, json, strlen(json), 4096, &m,
			    &err);
		if (nft_net_add_instance(&n, (Bc__Node__V1__InstanceSpec *)m, reason) < 0)
			printf("# %s\n", reason);
		protobuf_c_message_free_unpacked(m, NULL);
		free(json);
	}
	is_int(n.n_taps, 5000, "5,000 taps");
	nft_build(&n, 1, 7, false, &a);
	nft_build(&n, 1, 7, false, &b);
	ok(a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0, "the builder is deterministic");
	left = a.len;
	for (nlh = (const struct nlmsghdr *)a.buf; NLMSG_OK(nlh, left); nlh = NLMSG_NEXT(nlh, left))
		if (nlh->nlmsg_len > biggest)
			biggest = nlh->nlmsg_len;
	is_int(left, 0, "the batch is a clean sequence of messages");
	ok(biggest < 65535, "largest message %zu bytes < 64 KiB", biggest);
	printf("# 5,000 instances: %zu bytes, %zu bridge rules\n", a.len, a.rules_bridge);
	nft_batch_free(&a);
	nft_batch_free(&b);
	nft_net_clear(&n);
}

int main(void)
{
	test_golden();
	test_host_ports();
	test_empty();
	test_fail_closed();
	test_eui64();
	test_large();
	done_testing();
}
