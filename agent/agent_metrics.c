/* agent_metrics.c: bcd's Prometheus figures: the spec it converged, its
 * instances by state, the reports delivered (complete or delta), and the
 * firewall's health (tamper reloads, whether addresses are trusted), the
 * tunnels (tunnel.c), the guest-up signals (guestsig.c). Read on
 * every scrape from the converge pass's snapshot, the report thread's
 * counters and the net module; nothing is kept here. */
#include "agent_metrics.h"

#include <stdio.h>
#include <string.h>

#include "converge.h"
#include "guestsig.h"
#include "identity_ep.h"
#include "metrics.h"
#include "net.h"
#include "report.h"
#include "tunnel.h"

static const char *const states[] = {"provisioning", "starting", "running", "paused",
				     "stopped",      "error",    "deleted"};

static void render_instances(FILE *out, struct conv *c)
{
	struct conv_status st = {0};
	size_t counts[sizeof(states) / sizeof(states[0])] = {0};

	conv_snapshot(c, &st);
	for (size_t i = 0; i < st.n_items; i++)
		for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++)
			if (strcmp(st.items[i].state, states[k]) == 0)
				counts[k]++;
	metrics_head(out, "bcd_spec_applied_generation", "gauge",
		     "NodeSpec generation the last converge pass applied");
	metrics_line(out, "bcd_spec_applied_generation", NULL, (double)st.applied_generation);
	metrics_head(out, "bcd_instances", "gauge", "instances the runtime holds, by state");
	for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
		char label[48];
		snprintf(label, sizeof(label), "state=\"%s\"", states[k]);
		metrics_line(out, "bcd_instances", label, (double)counts[k]);
	}
	conv_status_clear(&st);
}

static void render_reports(FILE *out, const struct report *r)
{
	uint64_t complete, delta;

	report_counts(r, &complete, &delta);
	metrics_head(out, "bcd_reports_total", "counter",
		     "Node.Reports delivered: complete (every instance) or delta (what changed)");
	metrics_line(out, "bcd_reports_total", "kind=\"complete\"", (double)complete);
	metrics_line(out, "bcd_reports_total", "kind=\"delta\"", (double)delta);
}

static void render_net(FILE *out, struct net *n)
{
	metrics_head(out, "bcd_net_enforced", "gauge", "1 when bcd enforces tap guards (network = nftables)");
	metrics_line(out, "bcd_net_enforced", NULL, net_enforces(n) ? 1 : 0);
	if (!net_enforces(n))
		return;
	metrics_head(out, "bcd_nft_tamper_reloads_total", "counter",
		     "rulesets reloaded because the kernel's tables differed from what was loaded");
	metrics_line(out, "bcd_nft_tamper_reloads_total", NULL, (double)net_reloads(n));
	metrics_head(out, "bcd_nft_addresses_trusted", "gauge",
		     "0 while the loaded rules may not be in force (addresses untrusted)");
	metrics_line(out, "bcd_nft_addresses_trusted", NULL, net_trusted(n) ? 1 : 0);
}

void agent_metrics_render(FILE *out, void *arg)
{
	const struct agent_metrics *m = arg;

	metrics_head(out, "bcd_up", "gauge", "1 while bcd runs");
	metrics_line(out, "bcd_up", NULL, 1);
	if (m->conv)
		render_instances(out, m->conv);
	if (m->report)
		render_reports(out, m->report);
	if (m->net)
		render_net(out, m->net);
	tunnel_metrics_render(out, m->tunnel);
	gs_metrics_render(out, m->guestsig);
	ie_metrics_render(out, m->identity);
}
