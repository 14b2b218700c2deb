/* watch.h: the LISTEN thread and the registry of open WatchSpec streams
 * (see watch.c). */
#ifndef BC_CTL_WATCH_H
#define BC_CTL_WATCH_H

#include <stdint.h>

struct watch_registry;
struct watch_entry;

/* A new, empty registry; watch_registry_free frees it (NULL-safe) once
 * no stream uses it. */
struct watch_registry *watch_registry_new(void);
void watch_registry_free(struct watch_registry *r);
/* The LISTEN thread (bc_node_spec, bc_events, sandbox wakes): wakes the
 * registry's entries on each notification until app (struct ctl_app)
 * stops. */
void *watch_listen_thread(void *app);

/* The key Events.Watch streams register under (no node id starts with '*'). */
#define WATCH_EVENTS "*events"

struct watch_entry *watch_add(struct watch_registry *r, const char *node_id);
/* The same, and poke(arg) is called each time the entry's sequence moves,
 * with the registry's lock held: it must not call into the registry (a
 * thread sleeping on many entries wakes on its own condition). */
struct watch_entry *watch_add_poke(struct watch_registry *r, const char *node_id,
				   void (*poke)(void *arg), void *arg);
void watch_remove(struct watch_registry *r, struct watch_entry *e);
/* Wake the streams of node_id (NULL: every stream). */
void watch_notify(struct watch_registry *r, const char *node_id);
/* Wait until the entry's sequence differs from seen or timeout_ms passed;
 * returns the current sequence. */
uint64_t watch_wait(struct watch_registry *r, struct watch_entry *e, uint64_t seen, int timeout_ms);

#endif
