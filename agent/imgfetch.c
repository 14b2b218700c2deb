/* imgfetch.c: image downloads on worker threads (imgfetch.h).
 *
 * Jobs live in a small table under one mutex: the converge thread adds
 * them and reaps the finished ones (joining the worker); a worker only
 * runs image_ensure and marks its job done. */
#include "imgfetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define JOBS_MAX 64  /* finished failures kept until asked for */
#define HELD_MAX 16
/* A failed download is answered from memory this long before the image is
 * fetched again: a wrong digest must not mean a multi-GiB download every
 * converge pass. */
#define HOLD_MS 60000

struct job {
	struct imgfetch *f;
	char sha[65];
	char *url;
	pthread_t thread;
	bool started, done;
	int e;
	char reason[IMAGE_REASON_MAX];
};

/* A recent failure of one (digest, URL) (converge thread only): another
 * URL claiming the same digest is tried on its own. */
struct held {
	char sha[65];
	char *url;
	int e;
	char reason[IMAGE_REASON_MAX];
	int64_t until;  /* mono ms */
};

struct imgfetch {
	char *images_dir, *ca_file;
	struct held held[HELD_MAX];
	uint64_t max_bytes;
	void (*wake)(void *ctx);
	void *ctx;
	atomic_bool cancel;
	pthread_mutex_t lock;
	struct job *jobs[JOBS_MAX];
};

struct imgfetch *imgfetch_new(const char *images_dir, const char *ca_file, uint64_t max_bytes,
			      void (*wake)(void *ctx), void *ctx)
{
	struct imgfetch *f = xcalloc(1, sizeof(*f));

	f->images_dir = xstrdup(images_dir);
	f->ca_file = ca_file ? xstrdup(ca_file) : NULL;
	f->max_bytes = max_bytes;
	f->wake = wake;
	f->ctx = ctx;
	atomic_init(&f->cancel, false);
	pthread_mutex_init(&f->lock, NULL);
	return f;
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	if (j->started)
		pthread_join(j->thread, NULL);
	free(j->url);
	free(j);
}

void imgfetch_free(struct imgfetch *f)
{
	if (!f)
		return;
	atomic_store(&f->cancel, true);
	for (size_t i = 0; i < JOBS_MAX; i++)
		job_free(f->jobs[i]);  /* joins: the worker sees the cancel */
	pthread_mutex_destroy(&f->lock);
	for (size_t i = 0; i < HELD_MAX; i++)
		free(f->held[i].url);
	free(f->images_dir);
	free(f->ca_file);
	free(f);
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct imgfetch *f = j->f;
	struct image_fetch o = {f->images_dir, f->ca_file, f->max_bytes, &f->cancel};
	char reason[IMAGE_REASON_MAX] = "";
	char *path = NULL;
	int e = image_ensure(&o, j->url, j->sha, &path, reason);

	free(path);
	pthread_mutex_lock(&f->lock);
	j->e = e;
	memcpy(j->reason, reason, sizeof(reason));
	j->done = true;
	pthread_mutex_unlock(&f->lock);
	if (f->wake && !atomic_load(&f->cancel))
		f->wake(f->ctx);
	return NULL;
}

/* Under the lock: the job of sha, or NULL; *running counts unfinished
 * jobs, *free_slot is a free table index (-1: none). */
static struct job *find(struct imgfetch *f, const char *sha, size_t *running, int *free_slot)
{
	struct job *hit = NULL;

	*running = 0;
	*free_slot = -1;
	for (size_t i = 0; i < JOBS_MAX; i++) {
		struct job *j = f->jobs[i];
		if (!j) {
			if (*free_slot < 0)
				*free_slot = (int)i;
			continue;
		}
		if (!j->done)
			(*running)++;
		if (strcmp(j->sha, sha) == 0)
			hit = j;
	}
	return hit;
}

static void forget(struct imgfetch *f, struct job *j)
{
	for (size_t i = 0; i < JOBS_MAX; i++)
		if (f->jobs[i] == j)
			f->jobs[i] = NULL;
}

static int in_progress(const char *sha, const char *what, char *reason)
{
	snprintf(reason, IMAGE_REASON_MAX, "ImageFetching: %.16s... %s", sha, what);
	return -EINPROGRESS;
}

/* Start a download of sha in slot (lock held). */
static int start(struct imgfetch *f, int slot, const char *url, const char *sha, char *reason)
{
	struct job *j = xcalloc(1, sizeof(*j));

	j->f = f;
	snprintf(j->sha, sizeof(j->sha), "%s", sha);
	j->url = xstrdup(url);
	if (pthread_create(&j->thread, NULL, worker, j) != 0) {
		job_free(j);
		return in_progress(sha, "(no thread: retried)", reason);
	}
	j->started = true;
	f->jobs[slot] = j;
	return in_progress(sha, "downloading", reason);
}

/* A finished job's outcome, once (lock held; the job is forgotten). */
static struct job *take_done(struct imgfetch *f, struct job *j)
{
	forget(f, j);
	return j;
}

static void hold(struct imgfetch *f, const struct job *j)
{
	struct held *slot = &f->held[0];

	for (size_t i = 0; i < HELD_MAX; i++)
		if (f->held[i].until < slot->until)
			slot = &f->held[i];  /* the oldest (or an empty one) */
	memcpy(slot->sha, j->sha, sizeof(slot->sha));
	free(slot->url);
	slot->url = xstrdup(j->url);
	slot->e = j->e;
	memcpy(slot->reason, j->reason, sizeof(slot->reason));
	slot->until = mono_ms() + HOLD_MS;
}

/* The failure held for (sha, url), if it is recent: its code, else 0. */
static int held_failure(struct imgfetch *f, const char *sha, const char *url, char *reason)
{
	for (size_t i = 0; i < HELD_MAX; i++)
		if (strcmp(f->held[i].sha, sha) == 0 && f->held[i].url &&
		    strcmp(f->held[i].url, url) == 0 && f->held[i].until > mono_ms()) {
			memcpy(reason, f->held[i].reason, IMAGE_REASON_MAX);
			return f->held[i].e;
		}
	return 0;
}

int imgfetch_get(struct imgfetch *f, const char *url, const char *sha, char **ret_path,
		 char *reason)
{
	_cleanup_free_ char *path = NULL;
	struct job *j, *done = NULL;
	size_t running;
	int slot, e = 0;

	if (!image_sha256_valid(sha) || !url || strncmp(url, "https://", 8) != 0) {
		struct image_fetch o = {f->images_dir, f->ca_file, f->max_bytes, &f->cancel};
		return image_ensure(&o, url, sha, ret_path, reason);  /* the refusal */
	}
	if ((e = held_failure(f, sha, url, reason)) < 0)
		return e;
	path = xasprintf("%s/%s", f->images_dir, sha);
	pthread_mutex_lock(&f->lock);
	j = find(f, sha, &running, &slot);
	if (j && j->done)
		done = take_done(f, j);
	else if (j)
		e = in_progress(sha, "downloading", reason);
	else if (access(path, F_OK) == 0)
		e = 0;
	else if (running >= IMGFETCH_MAX || slot < 0)
		e = in_progress(sha, "waiting for a download slot", reason);
	else
		e = start(f, slot, url, sha, reason);
	pthread_mutex_unlock(&f->lock);
	if (done) {
		e = done->e;
		if (e < 0 && e != -ECANCELED) {
			memcpy(reason, done->reason, IMAGE_REASON_MAX);
			hold(f, done);
		}
		job_free(done);  /* joins a finished worker */
	}
	if (e == 0) {
		*ret_path = path;
		path = NULL;
	}
	return e;
}
