/* converge_int.h: what converge.c, converge_jobs.c, converge_fence.c and
 * converge_status.c share; private to those files. */
#ifndef BC_AGENT_CONVERGE_INT_H
#define BC_AGENT_CONVERGE_INT_H

#include <pthread.h>

#include "converge.h"

/* An entry reported until a report that carried it was delivered. */
struct once_item {
	struct conv_item item;
	uint64_t seq;
};

struct once_result {
	struct conv_result result;
	uint64_t seq;
};

/* Ids as a growable, sorted-on-demand array. */
struct idset {
	char (*ids)[RT_ID_MAX + 1];
	size_t n, cap;
};

struct conv {
	struct rt *rt;
	struct net *net;           /* instance networking; NULL: none */
	struct guestready *gr;     /* guests that reported up; NULL: none */
	struct vol *vol;           /* the host's volumes; NULL: none reported */
	struct snap *snap;         /* snapshots; NULL: restores fail */
	struct rebind *rb;         /* identity rebinds; NULL: none */
	/* converge thread only; replaced under lock (conv_tunnel_target) */
	Bc__Node__V1__NodeSpec *spec;
	struct idset adopted;      /* sorted: instances this process owns */
	bool list_failed;
	/* under lock */
	pthread_mutex_t lock;
	pthread_cond_t wake;       /* converge thread: pending spec or stop */
	pthread_cond_t changed;    /* report thread: status seq moved or stop */
	Bc__Node__V1__NodeSpec *pending;
	bool poked;                /* conv_poke: a pass now */
	bool stopping;
	struct conv_status status; /* items/results arrays of status unused */
	struct conv_item *items;   /* published items, sorted */
	size_t n_items;
	struct once_item *gone;
	size_t n_gone, cap_gone;
	struct once_result *results;
	size_t n_results, cap_results;
	/* fencing: policy and time set before the thread starts; the rest
	 * under lock (mono ms) */
	enum conv_fence fence;
	int64_t fence_after_ms;
	int64_t contact_ms;        /* last contact with a controller */
	int64_t confirm_ms;        /* last confirmation of the spec we hold */
	int64_t fenced_at;         /* when the fence began; 0: not fenced */
	uint64_t fence_seq;        /* status seq of the last fenced pass */
	uint64_t reported_seq;     /* newest status seq a delivered report carried */
	/* jobs: the table and the workers under jlock; n_workers set before
	 * the converge thread starts (conv_set_concurrency) */
	pthread_mutex_t jlock;
	pthread_cond_t jwake;      /* workers: a job queued, or jstop */
	struct job **jobs;         /* at most one per instance id */
	size_t n_jobs, cap_jobs;
	unsigned n_workers;        /* 0: jobs run inline in the pass */
	pthread_t *workers;
	size_t n_started;
	bool jstop;
};

enum job_kind { JOB_CREATE, JOB_MOVE, JOB_DESTROY, JOB_REBIND };
enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

/* One slow runtime call (or a few, for one instance) off the pass. */
struct job {
	enum job_kind kind;
	enum job_state state;        /* under jlock */
	char id[RT_ID_MAX + 1];
	Bc__Node__V1__InstanceSpec *spec; /* CREATE, REBIND: a copy, owned */
	enum rt_state from;          /* MOVE, DESTROY: the state the pass listed */
	Bc__Node__V1__DesiredState want; /* CREATE, MOVE */
	bool unnamed;                /* DESTROY: the spec does not name it */
	uint64_t generation;         /* DESTROY: the spec's, for the log */
	/* what a pass reports while it is queued or running (set before it
	 * is queued, then only read) */
	char phase[CONV_STATE_MAX];
	char phase_reason[RT_REASON_MAX];
	/* outcome, once DONE */
	int e;
	enum rt_state st;
	char reason[RT_REASON_MAX];
};

/* A job queued or running, as a pass saw it when it began. */
struct busy {
	char id[RT_ID_MAX + 1];
	enum job_kind kind;
	char phase[CONV_STATE_MAX];
	char phase_reason[RT_REASON_MAX];
};

/* Items built during one pass. */
struct pass {
	struct conv_item *items;
	size_t n, cap;
	struct conv_item *gone;
	size_t n_gone, cap_gone;
	struct idset owned;
	struct conv_item *netfail; /* refused by the network step (state unused) */
	size_t n_netfail, cap_netfail;
	struct busy *busy;         /* jobs queued or running, sorted by id */
	size_t n_busy;
	struct job **done;         /* jobs that ended, taken by this pass */
	size_t n_done;
	bool destroying;           /* a destroy job is under way: creates wait */
};


/* converge_jobs.c: the job table and its workers. */
struct job *job_new(enum job_kind kind, const char *id);
void job_free(struct job *j);
bool job_submit(struct conv *c, struct job *j);
void jobs_take(struct conv *c, struct pass *p, bool harvest);
void jobs_stop(struct conv *c);
const struct busy *busy_of(const struct pass *p, const char *id);
const struct job *done_of(const struct pass *p, const char *id, int k, int k2);
Bc__Node__V1__InstanceSpec *spec_copy(const Bc__Node__V1__InstanceSpec *s);

/* converge_fence.c */
bool fence_step(struct conv *c);
int fence_pass(struct conv *c);
void wake_if_fenced(struct conv *c);

/* converge.c: the pass's helpers the other files use. */
void *grow(void *p, size_t *cap, size_t n, size_t size);
int cmp_item(const void *a, const void *b);
struct conv_item *add_item(struct pass *p, const char *id, const char *state,
			   const char *reason);
void stamp_desired(struct pass *p, Bc__Node__V1__InstanceSpec *const *v, size_t n);
size_t spec_sorted(const struct conv *c, Bc__Node__V1__InstanceSpec ***ret);
int list_actual(struct conv *c, struct rt_instance **ret, size_t *ret_n);
void publish(struct conv *c, struct pass *p, bool complete, const struct rt_storage *stg);
void pass_clear(struct pass *p);
enum rt_state move(struct conv *c, const char *id, enum rt_state cur,
		   Bc__Node__V1__DesiredState want, char *reason);

#endif
