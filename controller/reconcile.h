/* reconcile.h: the reconciler thread (reconcile.c). */
#ifndef BC_CTL_RECONCILE_H
#define BC_CTL_RECONCILE_H

/* Node loss, re-placements, unplaced instances, metering, teardown,
 * retention (one leader across replicas); app is the struct ctl_app. */
void *reconcile_thread(void *app);

#endif
