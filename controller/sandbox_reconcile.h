/* sandbox_reconcile.h: the sandbox reconciler (sandbox_reconcile.c) and
 * the sandbox figures of /metrics. */
#ifndef BC_CTL_SANDBOX_RECONCILE_H
#define BC_CTL_SANDBOX_RECONCILE_H

#include <stdio.h>

#include "db.h"

/* The sandbox reconciler: one worker across replicas (advisory lock),
 * every period_seconds and on NOTIFY bc_sandboxes. */
void *sbx_reconcile_thread(void *app);

/* Prometheus text for the controller's /metrics: the sandbox histograms,
 * read from the database (the same on every replica). */
void sbx_metrics_render(FILE *out, struct db *d);

#endif
