/* snapshot.c: taking, fetching and collecting snapshots on the host
 * (snapshot.h). The runtime captures and restores (runtime.h: capture,
 * restore); this file moves the bytes and keeps data_dir/snapshots
 * clean. */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonw.h"
#include "log.h"
#include "util.h"
#include "xfer.h"

#define HELD_MAX 16

/* A recent download failure of one (digest, URL). */
struct held {
	char sha[XFER_SHA_HEX];
	char *url;
	int e;
	char reason[RT_REASON_MAX];
	int64_t until;  /* mono ms */
};

struct snap {
	char *dir;                 /* data_dir/snapshots */
	char *ca_file;
	char *cpu_model;
	bool allow_http;
	uint64_t max_bytes;
	uint32_t retry_delay_ms;
	struct rt *rt;
	pthread_mutex_t fetch_mu;  /* one download at a time; guards held */
	struct held held[HELD_MAX];
};

/* ------------------------------------------------------------ open */

/* Remove name in d, a file or a flat directory of files (a runtime's
 * capture work directory, .capture.<id>.d). */
static int remove_entry(DIR *d, const char *name)
{
	int fd;
	DIR *sub;
	struct dirent *de;

	if (unlinkat(dirfd(d), name, 0) == 0)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if ((fd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return -errno;
	if (!(sub = fdopendir(fd))) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(sub)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(sub), de->d_name, 0);
	closedir(sub);
	return unlinkat(dirfd(d), name, AT_REMOVEDIR) == 0 ? 0 : -errno;
}

/* Remove what a killed bcd left: every capture (no command runs yet),
 * after the runtime gave back what a capture took (capture_recover), and
 * partial downloads of other processes. */
static void sweep(const char *dir, struct rt *rt)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		bool capture = strncmp(de->d_name, SNAP_CAPTURE_PREFIX,
				       strlen(SNAP_CAPTURE_PREFIX)) == 0;
		if (!capture && !xfer_stale_part(de->d_name))
			continue;
		if (capture && rt->ops->capture_recover && de->d_type != DT_REG) {
			_cleanup_free_ char *work = xasprintf("%s/%s", dir, de->d_name);
			rt->ops->capture_recover(rt, work);
		}
		if (remove_entry(d, de->d_name) == 0)
			log_info("snapshots: removed %s/%s, left by an earlier bcd", dir, de->d_name);
	}
	closedir(d);
}

int snap_open(const struct snap_config *cfg, struct snap **ret)
{
	struct snap *s;
	int e;

	if (!cfg->data_dir || !*cfg->data_dir || !cfg->rt)
		return -EINVAL;
	s = xcalloc(1, sizeof(*s));
	s->dir = xasprintf("%s/%s", cfg->data_dir, SNAP_DIR);
	if ((e = mkdir_p(s->dir, 0700)) < 0) {
		free(s->dir);
		free(s);
		return e;
	}
	s->ca_file = xstrdup(cfg->ca_file ? cfg->ca_file : "");
	s->cpu_model = xstrdup(cfg->cpu_model ? cfg->cpu_model : "");
	s->allow_http = cfg->allow_http_loopback;
	s->max_bytes = cfg->max_bytes ? cfg->max_bytes : 64ull << 30;
	s->retry_delay_ms = cfg->retry_delay_ms;
	s->rt = cfg->rt;
	pthread_mutex_init(&s->fetch_mu, NULL);
	sweep(s->dir, s->rt);
	*ret = s;
	return 0;
}

void snap_free(struct snap *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < HELD_MAX; i++)
		free(s->held[i].url);
	pthread_mutex_destroy(&s->fetch_mu);
	free(s->dir);
	free(s->ca_file);
	free(s->cpu_model);
	free(s);
}

/* ------------------------------------------------------------ take */

static char *result_json(const char *sha, uint64_t size, const char *cpu, int64_t paused,
			 const char *runtime, bool mem, unsigned attempts)
{
	struct jsonw w;
	char *out = NULL;

	jsonw_begin(&w);
	jsonw_str(&w, "sha256", sha);
	jsonw_i64(&w, "sizeBytes", (int64_t)size);
	jsonw_str(&w, "cpuModel", cpu);
	jsonw_i64(&w, "pausedMs", paused);
	jsonw_str(&w, "runtime", runtime);
	jsonw_bool(&w, "includeMemory", mem);
	jsonw_i64(&w, "attempts", attempts);
	return jsonw_end(&w, &out) == 0 ? out : NULL;
}

/* Upload the capture at path; 0 with *result. */
static int upload(struct snap *s, const char *path, const char *url, const atomic_bool *cancel,
		  bool mem, int64_t paused, char **result, char *error, size_t errlen)
{
	const struct xfer_opts o = {.ca_file = s->ca_file, .allow_http_loopback = s->allow_http,
				    .cancel = cancel, .retry_delay_ms = s->retry_delay_ms};
	char sha[XFER_SHA_HEX], why[RT_REASON_MAX] = "";
	uint64_t size = 0;
	unsigned attempts = 0;
	int e = xfer_put_file(&o, url, path, sha, &size, &attempts, why, sizeof(why));

	if (e < 0) {
		snprintf(error, errlen, "SnapshotUploadFailed: %s", why);
		return e;
	}
	if (!(*result = result_json(sha, size, s->cpu_model, paused, s->rt->ops->name, mem,
				    attempts))) {
		snprintf(error, errlen, "SnapshotUploadFailed: cannot write the result");
		return -ENOMEM;
	}
	return 0;
}

int snap_take(struct snap *s, const char *cmd_id, const char *instance_id, const char *args,
	      const atomic_bool *cancel, char **result, char *error, size_t errlen)
{
	const struct xfer_opts o = {.allow_http_loopback = s->allow_http};
	_cleanup_free_ char *url = NULL, *path = NULL;
	char reason[RT_REASON_MAX] = "";
	int64_t paused = 0;
	bool mem = true;
	int e;

	if (!s->rt->ops->capture || !s->rt->ops->name) {
		snprintf(error, errlen, "UNSUPPORTED: runtime %s takes no snapshots", s->rt->ops->name);
		return -EOPNOTSUPP;
	}
	if (!instance_id || !rt_id_valid(instance_id) || snap_parse_args(args, &url, &mem) < 0) {
		snprintf(error, errlen, "SnapshotRefused: instance.snapshot needs an instance and "
					"args {putUrl, includeMemory}");
		return -EINVAL;
	}
	if (!xfer_url_ok(&o, url)) {
		snprintf(error, errlen, "SnapshotRefused: the upload URL is not https");
		return -EINVAL;
	}
	path = xasprintf("%s/%s%s", s->dir, SNAP_CAPTURE_PREFIX, cmd_id);
	unlink(path);  /* an earlier run's, if any */
	e = s->rt->ops->capture(s->rt, instance_id, mem, path, &paused, reason);
	if (e < 0) {
		snprintf(error, errlen, "SnapshotCaptureFailed: %s", *reason ? reason : strerror(-e));
		unlink(path);
		return e;
	}
	log_info("instance %s: captured %s for command %s (paused %" PRId64 " ms): uploading",
		 instance_id, mem ? "memory and disk" : "disk", cmd_id, paused);
	e = upload(s, path, url, cancel, mem, paused, result, error, errlen);
	unlink(path);
	return e;
}

/* ------------------------------------------------------------ fetch */

int snap_check(const Bc__Node__V1__RestoreFrom *r, const char *runtime, const char *cpu_model,
	       bool allow_http_loopback, char *reason)
{
	const struct xfer_opts o = {.allow_http_loopback = allow_http_loopback};
	const char *why = NULL;
	size_t n = r->sha256 ? strlen(r->sha256) : 0;

	if (n != 64 || strspn(r->sha256, "0123456789abcdef") != 64)
		why = "sha256 is not 64 lowercase hex digits";
	else if (!xfer_url_ok(&o, r->url))
		why = "only https URLs are fetched";
	else if (r->runtime && *r->runtime && strcmp(r->runtime, runtime) != 0)
		why = "taken on another runtime";
	else if (r->include_memory && (!r->cpu_model || !cpu_model || !*cpu_model ||
				       strcmp(r->cpu_model, cpu_model) != 0))
		why = "a memory snapshot of another CPU model";
	if (!why)
		return 0;
	snprintf(reason, RT_REASON_MAX, "SnapshotRefused: %s", why);
	return -EINVAL;
}

static int held_failure(struct snap *s, const char *sha, const char *url, char *reason)
{
	for (size_t i = 0; i < HELD_MAX; i++)
		if (strcmp(s->held[i].sha, sha) == 0 && s->held[i].url &&
		    strcmp(s->held[i].url, url) == 0 && s->held[i].until > mono_ms()) {
			memcpy(reason, s->held[i].reason, RT_REASON_MAX);
			return s->held[i].e;
		}
	return 0;
}

static void hold(struct snap *s, const char *sha, const char *url, int e, const char *reason)
{
	struct held *slot = &s->held[0];

	for (size_t i = 0; i < HELD_MAX; i++)
		if (s->held[i].until < slot->until)
			slot = &s->held[i];
	snprintf(slot->sha, sizeof(slot->sha), "%s", sha);
	free(slot->url);
	slot->url = xstrdup(url);
	slot->e = e;
	snprintf(slot->reason, sizeof(slot->reason), "%s", reason);
	slot->until = mono_ms() + SNAP_HOLD_MS;
}

static int download(struct snap *s, const Bc__Node__V1__RestoreFrom *r, char **ret_path,
		    char *reason)
{
	const struct xfer_opts o = {.ca_file = s->ca_file, .allow_http_loopback = s->allow_http};
	char why[RT_REASON_MAX] = "";
	uint64_t max = r->size_bytes ? r->size_bytes : s->max_bytes;
	int e = xfer_get_verified(&o, r->url, s->dir, r->sha256, max, ret_path, why, sizeof(why));

	if (e == 0)
		return 0;
	snprintf(reason, RT_REASON_MAX, "%s: %.120s",
		 e == -EBADMSG ? "SnapshotDigestMismatch" : "SnapshotFetchFailed", why);
	return e == -EBADMSG || e == -ECANCELED ? e : -EIO;
}

int snap_fetch(struct snap *s, const Bc__Node__V1__RestoreFrom *r, char **ret_path,
	       char *reason)
{
	int e = snap_check(r, s->rt->ops->name, s->cpu_model, s->allow_http, reason);

	if (e < 0)
		return e;
	pthread_mutex_lock(&s->fetch_mu);
	e = held_failure(s, r->sha256, r->url, reason);
	if (e == 0) {
		e = download(s, r, ret_path, reason);
		if (e < 0 && e != -ECANCELED)
			hold(s, r->sha256, r->url, e, reason);
	}
	pthread_mutex_unlock(&s->fetch_mu);
	return e;
}

/* ------------------------------------------------------------ gc */

static bool restored_from(const Bc__Node__V1__NodeSpec *spec, const char *sha)
{
	for (size_t i = 0; spec && i < spec->n_instances; i++) {
		const Bc__Node__V1__InstanceSpec *in = spec->instances[i];
		if (in->desired_state != BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED &&
		    in->restore_from && in->restore_from->sha256 &&
		    strcmp(in->restore_from->sha256, sha) == 0)
			return true;
	}
	return false;
}

static bool is_object(const char *name)
{
	return strlen(name) == 64 && strspn(name, "0123456789abcdef") == 64;
}

void snap_gc(struct snap *s, const Bc__Node__V1__NodeSpec *spec)
{
	DIR *d;
	struct dirent *de;

	/* never under a download's feet, and never waiting for one (the
	 * converge pass calls this): a busy lock skips this collection */
	if (pthread_mutex_trylock(&s->fetch_mu) != 0)
		return;
	if (!(d = opendir(s->dir))) {
		pthread_mutex_unlock(&s->fetch_mu);
		return;
	}
	while ((de = readdir(d))) {
		bool stale = xfer_stale_part(de->d_name);
		if (!stale && (!is_object(de->d_name) || restored_from(spec, de->d_name)))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			log_info("snapshots: %s removed: %s", de->d_name,
				 stale ? "partial download of an earlier bcd"
				       : "no instance restores from it");
	}
	closedir(d);
	pthread_mutex_unlock(&s->fetch_mu);
}
