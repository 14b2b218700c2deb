/* backoff.h: capped exponential backoff with jitter, and an interruptible
 * sleep that every bcd thread uses to notice shutdown promptly. */
#ifndef BC_AGENT_BACKOFF_H
#define BC_AGENT_BACKOFF_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct backoff {
	int64_t min_ms;
	int64_t max_ms;
	int64_t cur_ms;
};

/* Start at min_ms, double up to max_ms. */
void backoff_init(struct backoff *b, int64_t min_ms, int64_t max_ms);

/* The next delay: a random value in [cur/2, cur] ("equal jitter"), then
 * cur doubles (capped at max). Always >= 1 ms. */
int64_t backoff_next(struct backoff *b);

/* Back to min_ms after a success. */
void backoff_reset(struct backoff *b);

/* A stop flag threads can sleep on. */
struct backoff_stop {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
};

/* Initialise (flag clear) / destroy a stop flag. */
void backoff_stop_init(struct backoff_stop *s);
void backoff_stop_destroy(struct backoff_stop *s);
/* Set the flag and wake every sleeper. Any thread. */
void backoff_stop_request(struct backoff_stop *s);
/* True once backoff_stop_request was called. Any thread. */
bool backoff_stopped(struct backoff_stop *s);
/* Sleep up to ms; true if stop was requested (at once or meanwhile). */
bool backoff_sleep(struct backoff_stop *s, int64_t ms);

#endif
