/* guestready.c: the marks of guestready.h, a sorted array under a mutex,
 * written through to one small file per instance. */
#include "guestready.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "runtime.h"
#include "util.h"

#define GR_DIR "guest-ready"

struct gr_mark {
	char id[RT_ID_MAX + 1];
	int64_t at_ms;
};

struct guestready {
	char *dir;
	pthread_mutex_t lock;      /* guards marks, n, cap */
	struct gr_mark *marks;     /* sorted by id */
	size_t n, cap;
	void (*notify)(void *ctx);
	void *notify_ctx;
};

static int cmp_mark(const void *a, const void *b)
{
	return strcmp(((const struct gr_mark *)a)->id, ((const struct gr_mark *)b)->id);
}

/* Caller holds the lock. */
static struct gr_mark *find(const struct guestready *g, const char *id)
{
	struct gr_mark key = {0};

	snprintf(key.id, sizeof(key.id), "%s", id);
	return g->n ? bsearch(&key, g->marks, g->n, sizeof(*g->marks), cmp_mark) : NULL;
}

/* Caller holds the lock; id not present. */
static void insert(struct guestready *g, const char *id, int64_t at_ms)
{
	size_t i = 0;

	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 16;
		g->marks = xrealloc(g->marks, g->cap * sizeof(*g->marks));
	}
	while (i < g->n && strcmp(g->marks[i].id, id) < 0)
		i++;
	memmove(&g->marks[i + 1], &g->marks[i], (g->n - i) * sizeof(*g->marks));
	g->marks[i] = (struct gr_mark){.at_ms = at_ms};
	snprintf(g->marks[i].id, sizeof(g->marks[i].id), "%s", id);
	g->n++;
}

/* One file's mark; 0 if it is not one (a temporary file, garbage). */
static int64_t load_one(const char *dir, const char *name)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
	char buf[32];
	int64_t v = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%" SCNd64, &v) != 1)
		v = 0;
	fclose(f);
	return v > 0 ? v : 0;
}

int gr_open(const char *state_dir, struct guestready **ret)
{
	struct guestready *g;
	struct dirent *de;
	DIR *d;

	if (!state_dir || !ret)
		return -EINVAL;
	g = xcalloc(1, sizeof(*g));
	g->dir = xasprintf("%s/" GR_DIR, state_dir);
	pthread_mutex_init(&g->lock, NULL);
	if (mkdir(g->dir, 0700) < 0 && errno != EEXIST) {
		int e = -errno;
		gr_close(g);
		return e;
	}
	d = opendir(g->dir);
	if (!d) {
		int e = -errno;
		gr_close(g);
		return e;
	}
	while ((de = readdir(d))) {
		int64_t at;
		if (!rt_id_valid(de->d_name))
			continue;
		at = load_one(g->dir, de->d_name);
		if (at > 0 && !find(g, de->d_name))
			insert(g, de->d_name, at);
	}
	closedir(d);
	*ret = g;
	return 0;
}

void gr_close(struct guestready *g)
{
	if (!g)
		return;
	pthread_mutex_destroy(&g->lock);
	free(g->marks);
	free(g->dir);
	free(g);
}

void gr_set_notify(struct guestready *g, void (*fn)(void *ctx), void *ctx)
{
	g->notify = fn;
	g->notify_ctx = ctx;
}

int gr_mark(struct guestready *g, const char *id, int64_t at_ms)
{
	char buf[32];
	int e = 0;

	if (!g || !id || !rt_id_valid(id) || at_ms <= 0)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	if (find(g, id)) {
		e = -EALREADY;
	} else {
		_cleanup_free_ char *path = xasprintf("%s/%s", g->dir, id);
		int len = snprintf(buf, sizeof(buf), "%" PRId64 "\n", at_ms);
		e = file_write_atomic(path, buf, (size_t)len, 0600);
		if (e == 0)
			insert(g, id, at_ms);
	}
	pthread_mutex_unlock(&g->lock);
	if (e < 0 && e != -EALREADY)
		log_warn("instance %s: guest-ready mark not recorded: %s", id, strerror(-e));
	if (e == 0 && g->notify)
		g->notify(g->notify_ctx);
	return e;
}

int64_t gr_get(struct guestready *g, const char *id)
{
	struct gr_mark *m;
	int64_t at;

	if (!g || !id)
		return 0;
	pthread_mutex_lock(&g->lock);
	m = find(g, id);
	at = m ? m->at_ms : 0;
	pthread_mutex_unlock(&g->lock);
	return at;
}

void gr_clear(struct guestready *g, const char *id)
{
	struct gr_mark *m;

	if (!g || !id || !rt_id_valid(id))
		return;
	pthread_mutex_lock(&g->lock);
	m = find(g, id);
	if (m) {
		_cleanup_free_ char *path = xasprintf("%s/%s", g->dir, id);
		size_t i = (size_t)(m - g->marks);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("instance %s: %s: %s", id, path, strerror(errno));
		memmove(&g->marks[i], &g->marks[i + 1], (g->n - i - 1) * sizeof(*g->marks));
		g->n--;
	}
	pthread_mutex_unlock(&g->lock);
}
