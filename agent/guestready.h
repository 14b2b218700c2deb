/* guestready.h: which instances' guests reported up in their current boot.
 *
 * A guest announces once per boot that it is up (cloud-init's final stage
 * done, sshd listening); whoever accepts that announcement (bcd's listener
 * for real guests, the fake runtime for its records) calls gr_mark, and the
 * converge pass reports the time as InstanceStatus.guest_ready_at. The
 * converge pass clears an instance's mark whenever a new boot begins (its
 * create, a start from stopped) and when it destroys it, so a mark always
 * belongs to the boot that is running.
 *
 * Each mark is kept in memory and in state_dir/guest-ready/<id> (the time,
 * unix ms, in decimal), written before memory changes: a restarted bcd
 * knows the guests that came up before it, which will not announce again.
 * Thread-safe. */
#ifndef BC_AGENT_GUESTREADY_H
#define BC_AGENT_GUESTREADY_H

#include <stdint.h>

struct guestready;

/* Open (creating state_dir/guest-ready, 0700) and load the marks. *ret
 * owned, release with gr_close. 0 or -errno. */
int gr_open(const char *state_dir, struct guestready **ret);

/* Release. NULL-safe. */
void gr_close(struct guestready *g);

/* Called (outside the lock) after each new mark, e.g. to run a converge
 * pass at once. Set once, before other threads use g. */
void gr_set_notify(struct guestready *g, void (*fn)(void *ctx), void *ctx);

/* Record that id's guest is up since at_ms (unix ms, > 0). 0; -EALREADY
 * if this boot is already marked (the first mark stands); -EINVAL for a bad
 * id or time; -errno if the record cannot be written (memory unchanged). */
int gr_mark(struct guestready *g, const char *id, int64_t at_ms);

/* When id's guest reported up in its current boot; 0 if it did not (or g
 * is NULL). */
int64_t gr_get(struct guestready *g, const char *id);

/* Forget id's mark (a new boot begins, or the instance is gone). NULL-safe;
 * no mark is not an error. */
void gr_clear(struct guestready *g, const char *id);

#endif
