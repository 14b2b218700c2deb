/* net.c: bridge, ruleset and taps for the converge pass, and the guard
 * check. The converge thread calls net_converge; the guard thread only
 * re-sends the batch the kernel last accepted. One mutex covers the loaded
 * batch, the trust flag and the counter, and is held across every load so
 * the two threads never interleave transactions. */
#include "net.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "log.h"
#include "netlink.h"
#include "util.h"

struct net {
	bool enforce;
	bool broken;                /* the first load failed: no capability */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct nft_batch loaded;    /* body (half a) of the last load the kernel
				     * accepted (len 0: none): compared, counted */
	struct nft_net net;         /* what it was built from, for reloads */
	unsigned parity;            /* the half the kernel uses */
	bool trusted;
	uint64_t reloads;
	bool stopping, guard_running;
	int interval_ms;
	bool break_next;            /* tests */
	uint32_t fdb_max_learned;   /* the bridge's bound on learned MACs */
	char *host_ports;           /* host ports open to guests */
	bool cut;                   /* net_cut_all: every tap blocked */
	pthread_t guard;
	/* converge thread only: taps this process ensured */
	char (*made)[IFNAMSIZ];
	size_t n_made;
	bool adopted;               /* taps an earlier bcd left were taken over */
};

int net_open(const char *mode, struct net **ret)
{
	struct net *n;

	if (strcmp(mode, "nftables") != 0 && strcmp(mode, "none") != 0)
		return -EINVAL;
	n = xcalloc(1, sizeof(*n));
	n->enforce = strcmp(mode, "nftables") == 0;
	n->trusted = true;
	n->fdb_max_learned = NET_FDB_MAX_LEARNED_DEFAULT;
	n->host_ports = xstrdup(NFT_HOST_PORTS_DEFAULT);
	pthread_mutex_init(&n->lock, NULL);
	pthread_cond_init(&n->wake, NULL);
	*ret = n;
	return 0;
}

void net_close(struct net *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->lock);
	n->stopping = true;
	pthread_cond_broadcast(&n->wake);
	pthread_mutex_unlock(&n->lock);
	if (n->guard_running)
		pthread_join(n->guard, NULL);
	nft_batch_free(&n->loaded);
	nft_net_clear(&n->net);
	free(n->made);
	free(n->host_ports);
	pthread_mutex_destroy(&n->lock);
	pthread_cond_destroy(&n->wake);
	free(n);
}

int net_set_limits(struct net *n, uint32_t fdb_max_learned, const char *host_ports)
{
	struct nft_net probe = { 0 };

	if (nft_net_host_ports(&probe, host_ports) < 0)
		return -EINVAL;
	n->fdb_max_learned = fdb_max_learned;
	free(n->host_ports);
	n->host_ports = xstrdup(host_ports);
	return 0;
}

bool net_enforces(const struct net *n)
{
	return n && n->enforce && !n->broken;
}

/* The loaded tap called name, or NULL. */
static const struct nft_tap *loaded_tap(const struct net *n, const char *name)
{
	for (size_t i = 0; i < n->net.n_taps; i++)
		if (strcmp(n->net.taps[i].name, name) == 0)
			return &n->net.taps[i];
	return NULL;
}

/* A failed load: every instance whose taps are not loaded exactly as
 * wanted is unprotected by the rules in force; they go to error. */
static void fail_changed(const struct net *n, const struct nft_net *want, const char *why,
			 nft_fail_fn fail, void *data)
{
	char reason[RT_REASON_MAX];

	snprintf(reason, sizeof(reason), "NetworkPolicy: rules failed to load: %.110s", why);
	for (size_t i = 0; i < want->n_taps; i++) {
		const struct nft_tap *t = loaded_tap(n, want->taps[i].name);

		if (!t || memcmp(t, &want->taps[i], sizeof(*t)) != 0)
			fail(want->taps[i].instance_id, reason, data);
	}
}

/* The pool's bridge with the gateway address on it; its addresses into
 * host. */
static int bridge(const struct net *n, const Bc__Node__V1__NodeSpec *spec,
		  char (*host)[NL_ADDR_MAX], size_t max, size_t *ret_n)
{
	char gw[NL_ADDR_MAX] = "";
	const char *slash = strchr(spec->ipam_subnet, '/');
	int e;

	*ret_n = 0;
	if (!*spec->bridge)
		return 0;
	if (*spec->ipam_gateway && slash)
		snprintf(gw, sizeof(gw), "%s%s", spec->ipam_gateway, slash);
	e = nl_bridge_ensure(spec->bridge, gw, NULL);
	if (e < 0)
		return e;
	e = nl_bridge_fdb_max_learned(spec->bridge, n->fdb_max_learned);
	if (e < 0)
		return e;
	return nl_addrs(spec->bridge, host, max, ret_n);
}

/* Load want unless the kernel already got it (b: its body in half a,
 * compared byte for byte). Under lock. */
static int load(struct net *n, struct nft_net *want, struct nft_batch *b, char *err, size_t len)
{
	int e;

	if (n->loaded.len == b->len && memcmp(n->loaded.buf, b->buf, b->len) == 0) {
		nft_batch_free(b);
		return 0;
	}
	e = nft_apply(want, n->break_next ? NFT_APPLY_BREAK : 0, &n->parity, err, len);
	n->break_next = false;
	if (e < 0) {
		nft_batch_free(b);
		return e;
	}
	nft_batch_free(&n->loaded);
	n->loaded = *b;
	nft_net_clear(&n->net);
	n->net = *want;
	memset(want, 0, sizeof(*want));
	n->trusted = true;
	log_info("nftables: ruleset loaded (%zu taps, %zu rules)", n->net.n_taps,
		 n->loaded.rules_bridge + n->loaded.rules_inet);
	return 0;
}

struct failed {
	char (*ids)[RT_ID_MAX + 1];
	size_t n;
	nft_fail_fn fail;
	void *data;
};

static void note_fail(const char *id, const char *reason, void *data)
{
	struct failed *f = data;

	f->ids = realloc(f->ids, (f->n + 1) * sizeof(*f->ids));
	if (!f->ids)
		abort();
	snprintf(f->ids[f->n++], sizeof(f->ids[0]), "%s", id);
	f->fail(id, reason, f->data);
}

static bool is_failed(const struct failed *f, const char *id)
{
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->ids[i], id) == 0)
			return true;
	return false;
}

static void made_add(struct net *n, const char *tap)
{
	n->made = realloc(n->made, (n->n_made + 1) * sizeof(*n->made));
	if (!n->made)
		abort();
	snprintf(n->made[n->n_made++], IFNAMSIZ, "%s", tap);
}

/* Once per process: every tap (a tun device) enslaved to the bridge is
 * taken as made, so that one an earlier bcd left for an instance that is
 * gone since is removed like any other. Uplinks and other ports are not
 * taps and stay untouched. */
static void adopt_taps(struct net *n, const char *bridge)
{
	char dir[128];
	struct dirent *e;
	DIR *d;

	if (n->adopted || !bridge || !*bridge || strchr(bridge, '/'))
		return;
	n->adopted = true;
	snprintf(dir, sizeof(dir), "/sys/class/net/%s/brif", bridge);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		char tun[sizeof(e->d_name) + 32];
		if (e->d_name[0] == '.' || strlen(e->d_name) >= IFNAMSIZ)
			continue;
		snprintf(tun, sizeof(tun), "/sys/class/net/%s/tun_flags", e->d_name);
		if (access(tun, F_OK) == 0)
			made_add(n, e->d_name);
	}
	closedir(d);
}

/* Every tap of w blocked: all frames from or to it dropped. */
static void block_all(struct nft_net *w)
{
	for (size_t i = 0; i < w->n_taps; i++)
		w->taps[i].policy = NFT_POLICY_BLOCKED;
}

/* A tap's bridge port: no learning; the NIC's MAC static on it; a guarded
 * (or blocked) tap's port locked to it. What the loaded ruleset says of
 * the tap; a tap it does not name gets a locked port with no entry:
 * nothing passes. */
static int secure(struct net *n, const char *tap)
{
	static const uint8_t none[6];
	const struct nft_tap *t;
	uint8_t mac[6];
	bool use_mac = false, lock = true;

	pthread_mutex_lock(&n->lock);
	t = loaded_tap(n, tap);
	if (t) {
		memcpy(mac, t->mac, 6);
		use_mac = memcmp(mac, none, 6) != 0 && !(mac[0] & 1);
		lock = t->guarded || t->policy == NFT_POLICY_BLOCKED;
	}
	pthread_mutex_unlock(&n->lock);
	return nl_port_secure(tap, use_mac ? mac : NULL, lock);
}

/* Taps of the instances allowed to run, enslaved; taps this process made
 * (or found on the bridge at its first pass) that the spec no longer names,
 * removed: the pass destroyed their domains
 * before this step, and their guards went with the load above. A desired-
 * DELETED instance keeps its tap and guards while the spec names it. */
static void taps(struct net *n, const Bc__Node__V1__NodeSpec *spec, struct failed *f)
{
	char reason[RT_REASON_MAX];
	size_t keep = 0;

	adopt_taps(n, spec->bridge);
	for (size_t i = 0; i < spec->n_instances; i++) {
		const Bc__Node__V1__InstanceSpec *s = spec->instances[i];

		if (is_failed(f, s->id) ||
		    s->desired_state == BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
			continue;
		for (size_t k = 0; k < s->n_nics; k++) {
			const char *tap = s->nics[k]->tap;
			int e = nl_tap_ensure(tap, spec->bridge);

			if (e == 0)
				e = secure(n, tap);
			if (e < 0) {
				snprintf(reason, sizeof(reason), "tap %s: %s", tap, strerror(-e));
				note_fail(s->id, reason, f);
				break;
			}
			made_add(n, tap);
		}
	}
	/* the entries just added are the live ones: older duplicates and
	 * taps no longer named go */
	for (size_t i = 0; i < n->n_made; i++) {
		bool later = false, named = false;

		for (size_t j = i + 1; j < n->n_made && !later; j++)
			later = strcmp(n->made[i], n->made[j]) == 0;
		if (later)
			continue; /* an older duplicate: the later entry stands for it */
		for (size_t j = 0; j < spec->n_instances && !named; j++)
			for (size_t k = 0; k < spec->instances[j]->n_nics && !named; k++)
				named = strcmp(spec->instances[j]->nics[k]->tap, n->made[i]) == 0;
		if (!named) {
			if (nl_link_delete(n->made[i]) == 0)
				log_info("tap %s removed", n->made[i]);
			continue;
		}
		memmove(n->made[keep++], n->made[i], IFNAMSIZ);
	}
	n->n_made = keep;
}

int net_converge(struct net *n, const Bc__Node__V1__NodeSpec *spec, nft_fail_fn fail,
		 void *data)
{
	char host[NFT_HOST_MAX * 2][NL_ADDR_MAX], err[256];
	struct failed f = { NULL, 0, fail, data };
	struct nft_net want;
	struct nft_batch b;
	size_t n_host = 0;
	int e;

	if (!n || !n->enforce)
		return 0;
	e = bridge(n, spec, host, NFT_HOST_MAX * 2, &n_host);
	if (e < 0) {
		snprintf(err, sizeof(err), "NetworkPolicy: bridge %s: %s", spec->bridge,
			 strerror(-e));
		for (size_t i = 0; i < spec->n_instances; i++)
			if (spec->instances[i]->n_nics)
				fail(spec->instances[i]->id, err, data);
		return e;
	}
	e = nft_net_from_spec(spec, (const char(*)[64])host, n_host, &want, note_fail, &f);
	if (e == 0)
		e = nft_net_host_ports(&want, n->host_ports);   /* checked by net_set_limits */
	if (e < 0) {
		for (size_t i = 0; i < spec->n_instances; i++)
			if (spec->instances[i]->n_nics)
				fail(spec->instances[i]->id, "NetworkPolicy: bad pool subnet", data);
		free(f.ids);
		return e;
	}
	pthread_mutex_lock(&n->lock);
	if (n->cut)
		block_all(&want);
	nft_build(&want, 0, 1, false, &b);
	e = load(n, &want, &b, err, sizeof(err));
	if (e < 0) {
		log_error("nftables: ruleset refused, previous rules stay: %s", err);
		if (!n->loaded.len)
			n->broken = true;
		fail_changed(n, &want, err, note_fail, &f);
	}
	pthread_mutex_unlock(&n->lock);
	nft_net_clear(&want);
	taps(n, spec, &f);
	free(f.ids);
	return e;
}

int net_cut_all(struct net *n, bool cut)
{
	struct nft_net want;
	struct nft_batch b;
	char err[256];
	int e = 0;

	if (!n || !n->enforce)
		return 0;
	pthread_mutex_lock(&n->lock);
	n->cut = cut;
	if (cut && n->loaded.len) {
		want = n->net;
		want.taps = xcalloc(want.n_taps ? want.n_taps : 1, sizeof(*want.taps));
		memcpy(want.taps, n->net.taps, n->net.n_taps * sizeof(*want.taps));
		want.cap_taps = want.n_taps;
		block_all(&want);
		nft_build(&want, 0, 1, false, &b);
		e = load(n, &want, &b, err, sizeof(err));
		if (e < 0)
			log_error("nftables: cutting every instance's network failed: %s", err);
		else
			log_warn("nftables: every instance's network cut");
		nft_net_clear(&want);
	}
	pthread_mutex_unlock(&n->lock);
	return e;
}

int net_guard_check(struct net *n)
{
	struct nft_counts c;
	char err[256];
	int e;

	pthread_mutex_lock(&n->lock);
	if (!n->loaded.len) {
		pthread_mutex_unlock(&n->lock);
		return 0;
	}
	e = nft_counts(n->parity, &c);
	if (e == 0 && nft_matches(&n->loaded, &c)) {
		pthread_mutex_unlock(&n->lock);
		return 0;
	}
	n->trusted = false;
	if (e == 0)
		log_warn("nftables: tables differ from the loaded ruleset (bridge rules %ld of %zu, "
			 "chains %ld of %zu, inet rules %ld of %zu): reloading, addresses untrusted",
			 c.rules_bridge, n->loaded.rules_bridge, c.chains_bridge,
			 n->loaded.chains_bridge, c.rules_inet, n->loaded.rules_inet);
	else
		log_warn("nftables: cannot read the tables (%s): reloading", strerror(-e));
	e = nft_apply(&n->net, 0, &n->parity, err, sizeof(err));
	if (e == 0) {
		n->trusted = true;
		n->reloads++;
		log_warn("nftables: ruleset reloaded (tamper reloads: %" PRIu64 ")", n->reloads);
	} else {
		log_error("nftables: reload failed, addresses stay untrusted: %s", err);
	}
	pthread_mutex_unlock(&n->lock);
	return e < 0 ? e : 1;
}

static void *guard_main(void *p)
{
	struct net *n = p;
	struct timespec until;

	pthread_mutex_lock(&n->lock);
	while (!n->stopping) {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += n->interval_ms / 1000;
		until.tv_nsec += (long)(n->interval_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&n->wake, &n->lock, &until);
		if (n->stopping)
			break;
		pthread_mutex_unlock(&n->lock);
		net_guard_check(n);
		pthread_mutex_lock(&n->lock);
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

int net_guard_start(struct net *n, int interval_ms)
{
	if (!n->enforce || n->guard_running)
		return 0;
	n->interval_ms = interval_ms > 0 ? interval_ms : NET_GUARD_INTERVAL_MS;
	if (pthread_create(&n->guard, NULL, guard_main, n) != 0)
		return -EAGAIN;
	n->guard_running = true;
	return 0;
}

bool net_trusted(struct net *n)
{
	bool t;

	pthread_mutex_lock(&n->lock);
	t = n->trusted;
	pthread_mutex_unlock(&n->lock);
	return t;
}

size_t net_taps_held(const struct net *n)
{
	return n->n_made;
}

uint64_t net_reloads(struct net *n)
{
	uint64_t r;

	pthread_mutex_lock(&n->lock);
	r = n->reloads;
	pthread_mutex_unlock(&n->lock);
	return r;
}

void net_test_break_next_load(struct net *n)
{
	n->break_next = true;
}
