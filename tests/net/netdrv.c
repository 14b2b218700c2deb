/* netdrv.c: drives the agent's networking code (netlink.c, nft_net.c,
 * nft_build.c, nft.c) from the network tests, inside whatever network
 * namespace it is started in. A NodeSpec is given as JSON (pbjson).
 *
 *   netdrv apply SPEC.json          build + load; "error <id> <reason>" per
 *                                   instance failing closed; exit 1 on a
 *                                   failed load (message on stderr)
 *   netdrv text SPEC.json           print the batch's text form
 *   netdrv loop N A.json B.json     load A and B alternately N times
 *   netdrv check SPEC.json          exit 0 if the kernel matches SPEC's batch
 *   netdrv counts                   the kernel's rule/chain counts
 *   netdrv links SPEC.json          bridge (with ipam_gateway) and every tap
 *   netdrv remove                   delete both tables
 *   netdrv converge [--break] SPEC.json...
 *                                   agent/net.c's converge step (bridge,
 *                                   ruleset, taps) for each spec in turn, in
 *                                   one process; --break: the next load is
 *                                   sent broken, so the kernel refuses it
 *   netdrv pass DIR [--break] [--fence] SPEC.json...
 *                                   converge passes (agent/converge.c) with
 *                                   the fake runtime in DIR and networking;
 *                                   prints "<id> <state> <reason>" after each;
 *                                   --fence: no controller from then on, the
 *                                   next passes are fenced (bcd cut off)
 *   netdrv cut SPEC.json            converge, then net_cut_all (fencing):
 *                                   every tap's frames dropped
 *   netdrv guard SPEC.json SECONDS  converge, then run the guard-check
 *                                   thread for SECONDS; prints the reloads;
 *                                   with NETDRV_METRICS=ADDR also serves
 *                                   bcd's /metrics there meanwhile
 *
 * Host addresses are read from the spec's bridge when it exists. The host
 * ports open to guests are NETDRV_HOST_PORTS (default bcd's default), the
 * bridge's bound on learned MACs NETDRV_FDB_MAX_LEARNED (converge, guard,
 * pass; default bcd's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "agent/agent_metrics.h"
#include "agent/converge.h"
#include "agent/net.h"
#include "agent/netlink.h"
#include "agent/nft.h"
#include "log.h"
#include "metrics.h"
#include "pbjson.h"
#include "util.h"

static Bc__Node__V1__NodeSpec *load(const char *path)
{
	ProtobufCMessage *m = NULL;
	bc_error err = { 0 };
	char *buf = NULL;
	size_t len = 0;

	if (file_read_all(path, 64 << 20, &buf, &len) < 0) {
		fprintf(stderr, "netdrv: cannot read %s\n", path);
		exit(2);
	}
	if (pbjson_read(&bc__node__v1__node_spec__descriptor, buf, len, 64 << 20, &m, &err) < 0) {
		fprintf(stderr, "netdrv: %s: bad NodeSpec JSON\n", path);
		exit(2);
	}
	free(buf);
	return (Bc__Node__V1__NodeSpec *)m;
}

static const char *host_ports(void)
{
	const char *p = getenv("NETDRV_HOST_PORTS");

	return p ? p : NFT_HOST_PORTS_DEFAULT;
}

/* bcd's limits from the environment, on a net before its first converge */
static void limits(struct net *n)
{
	const char *m = getenv("NETDRV_FDB_MAX_LEARNED");

	if (net_set_limits(n, m ? (uint32_t)atol(m) : NET_FDB_MAX_LEARNED_DEFAULT,
			   host_ports()) < 0) {
		fprintf(stderr, "netdrv: bad NETDRV_HOST_PORTS\n");
		exit(2);
	}
}

static void print_fail(const char *id, const char *reason, void *data)
{
	printf("error %s %s\n", id, reason);
}

/* The spec's nft_net, with the host addresses of its bridge if it exists. */
static void net_of(const char *path, struct nft_net *n)
{
	Bc__Node__V1__NodeSpec *spec = load(path);
	char host[NFT_HOST_MAX * 2][NL_ADDR_MAX];
	size_t n_host = 0;

	if (*spec->bridge && nl_link_exists(spec->bridge))
		nl_addrs(spec->bridge, host, NFT_HOST_MAX * 2, &n_host);
	if (nft_net_from_spec(spec, (const char(*)[64])host, n_host, n, print_fail, NULL) < 0) {
		fprintf(stderr, "netdrv: bad pool subnet\n");
		exit(2);
	}
	if (nft_net_host_ports(n, host_ports()) < 0) {
		fprintf(stderr, "netdrv: bad NETDRV_HOST_PORTS\n");
		exit(2);
	}
	protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void build(const char *path, bool text, struct nft_batch *b)
{
	struct nft_net n;

	net_of(path, &n);
	nft_build(&n, 0, 1, text, b);
	nft_net_clear(&n);
}

static int apply(const struct nft_net *n)
{
	char err[256];
	int e = nft_apply(n, 0, NULL, err, sizeof(err));

	if (e < 0)
		fprintf(stderr, "netdrv: load failed: %s\n", err);
	return e;
}

static int links(const char *path)
{
	Bc__Node__V1__NodeSpec *spec = load(path);
	char a4[80] = "", a6[80] = "";
	const char *slash;
	int e;

	if (*spec->ipam_gateway && (slash = strchr(spec->ipam_subnet, '/')))
		snprintf(a4, sizeof(a4), "%s%s", spec->ipam_gateway, slash);
	e = nl_bridge_ensure(spec->bridge, a4, a6);
	for (size_t i = 0; !e && i < spec->n_instances; i++)
		for (size_t k = 0; !e && k < spec->instances[i]->n_nics; k++)
			e = nl_tap_ensure(spec->instances[i]->nics[k]->tap, spec->bridge);
	protobuf_c_message_free_unpacked(&spec->base, NULL);
	if (e < 0)
		fprintf(stderr, "netdrv: links: %s\n", strerror(-e));
	return e;
}

/* converge [--break] SPEC... | guard SPEC SECONDS: one net (as bcd has) for
 * every spec in turn. */
static int converge(int argc, char **argv)
{
	bool guard = strcmp(argv[1], "guard") == 0, cut = strcmp(argv[1], "cut") == 0;
	struct net *n;
	int e = 0;

	net_open("nftables", &n);
	limits(n);
	for (int i = 2; i < (guard || cut ? 3 : argc); i++) {
		Bc__Node__V1__NodeSpec *spec;

		if (strcmp(argv[i], "--break") == 0) {
			net_test_break_next_load(n);
			continue;
		}
		spec = load(argv[i]);
		e = net_converge(n, spec, print_fail, NULL);
		printf("converge %s: load %s\n", argv[i], e < 0 ? "refused" : "ok");
		printf("taps held %zu\n", net_taps_held(n));
		protobuf_c_message_free_unpacked(&spec->base, NULL);
	}
	if (cut) {
		e = net_cut_all(n, true);
		printf("cut: %s\n", e < 0 ? "refused" : "ok");
	}
	if (guard) {
		/* NETDRV_METRICS=ADDR: bcd's /metrics, so a test scrapes the counter */
		const char *maddr = getenv("NETDRV_METRICS");
		struct agent_metrics am = {.net = n};
		metrics_srv *ms = maddr ? metrics_serve(maddr, agent_metrics_render, &am, NULL, NULL)
					: NULL;

		net_guard_start(n, NET_GUARD_INTERVAL_MS);
		sleep((unsigned)atoi(argv[3]));
		metrics_stop(ms);
		printf("reloads %llu trusted %d\n", (unsigned long long)net_reloads(n),
		       net_trusted(n));
	}
	net_close(n);
	return cut && e < 0 ? e : 0;
}

/* pass DIR [--break] SPEC...: the converge pass with networking, as bcd
 * runs it, over the fake runtime. */
static int pass(int argc, char **argv)
{
	struct rt_config rc = { .state_dir = argv[2], .capacity_vcpus = 64,
				.capacity_memory_mib = 1 << 20, .capacity_disk_gib = 1 << 10 };
	struct conv_status st;
	struct rt *rt;
	struct net *n;
	struct conv *c;
	int e = rt_open("fake", &rc, &rt);

	if (e < 0)
		return e;
	net_open("nftables", &n);
	limits(n);
	c = conv_new(rt);
	conv_set_net(c, n);
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "--break") == 0) {
			net_test_break_next_load(n);
			continue;
		}
		if (strcmp(argv[i], "--fence") == 0) {
			conv_set_fence(c, CONV_FENCE_PAUSE, 1);
			usleep(10000);
			continue;
		}
		conv_submit(c, load(argv[i]));
		conv_pass(c);
		conv_snapshot(c, &st);
		printf("pass %s\n", argv[i]);
		for (size_t k = 0; k < st.n_items; k++)
			printf("%s %s %s\n", st.items[k].id, st.items[k].state, st.items[k].reason);
		conv_status_clear(&st);
	}
	conv_free(c);
	net_close(n);
	rt_close(rt);
	return 0;
}

int main(int argc, char **argv)
{
	struct nft_batch a;
	struct nft_net na, nb;
	struct nft_counts c;
	int e = 0;

	log_init("netdrv", LOG_LVL_INFO);
	if (argc < 2)
		goto usage;
	if (strcmp(argv[1], "apply") == 0 && argc == 3) {
		net_of(argv[2], &na);
		e = apply(&na);
		nft_net_clear(&na);
	} else if (strcmp(argv[1], "text") == 0 && argc == 3) {
		build(argv[2], true, &a);
		fputs(a.text, stdout);
		nft_batch_free(&a);
	} else if (strcmp(argv[1], "loop") == 0 && argc == 5) {
		long n = atol(argv[2]), failed = 0;

		net_of(argv[3], &na);
		net_of(argv[4], &nb);
		for (long i = 0; i < n; i++)
			if (apply(i % 2 ? &nb : &na) < 0)
				failed++;
		printf("loads %ld failed %ld\n", n, failed);
		e = failed ? -EIO : 0;
		nft_net_clear(&na);
		nft_net_clear(&nb);
	} else if (strcmp(argv[1], "check") == 0 && argc == 3) {
		/* whichever half the kernel uses */
		build(argv[2], false, &a);
		e = nft_counts(0, &c);
		if (!e && !nft_matches(&a, &c)) {
			e = nft_counts(1, &c);
			if (!e && !nft_matches(&a, &c))
				e = -ESTALE;
		}
		nft_batch_free(&a);
	} else if (strcmp(argv[1], "counts") == 0) {
		e = nft_counts(0, &c);
		if (!e)
			printf("half a: rules_bridge %ld rules_inet %ld chains_bridge %ld\n", c.rules_bridge,
			       c.rules_inet, c.chains_bridge);
	} else if (strcmp(argv[1], "links") == 0 && argc == 3) {
		e = links(argv[2]);
	} else if ((strcmp(argv[1], "converge") == 0 && argc >= 3) ||
		   (strcmp(argv[1], "guard") == 0 && argc == 4) ||
		   (strcmp(argv[1], "cut") == 0 && argc == 3)) {
		setvbuf(stdout, NULL, _IOLBF, 0);
		e = converge(argc, argv);
	} else if (strcmp(argv[1], "pass") == 0 && argc >= 4) {
		setvbuf(stdout, NULL, _IOLBF, 0);
		e = pass(argc, argv);
	} else if (strcmp(argv[1], "remove") == 0) {
		e = nft_remove();
	} else {
		goto usage;
	}
	return e < 0 ? 1 : 0;
usage:
	fprintf(stderr, "usage: netdrv apply|text|check SPEC.json | loop N A B | counts | links "
			"SPEC.json | remove\n");
	return 2;
}
