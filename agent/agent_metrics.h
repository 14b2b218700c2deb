/* agent_metrics.h: what bcd shows on GET /metrics (metrics_listen). */
#ifndef BC_AGENT_METRICS_H
#define BC_AGENT_METRICS_H

#include <stdio.h>

struct conv;
struct net;
struct report;
struct tunnel_srv;
struct guestsig;
struct identity_ep;

struct agent_metrics {
	struct conv *conv;            /* may be NULL */
	struct net *net;              /* may be NULL */
	const struct report *report;  /* may be NULL */
	struct tunnel_srv *tunnel;    /* NULL: the tunnel port is off */
	struct guestsig *guestsig;    /* NULL: no guest-up listener */
	struct identity_ep *identity; /* NULL: no identity endpoint */
};

/* metrics_render_fn for common/metrics.c: arg is a struct agent_metrics. */
void agent_metrics_render(FILE *out, void *arg);

#endif
