/* commands.c: host commands, bcd's side (see commands.h).
 *
 * The file state_dir/commands.d/<id>, rewritten whole (tmp, fsync, rename,
 * directory fsync) at each step, is text:
 *
 *	bc-command 1
 *	id=cmd_...            kind=...   instance=...   lane=control|bulk
 *	retry_safe=0|1        deadline=<unix ms>        args=<hex>
 *	received=<unix ms>    started=<unix ms>         runs=<n>
 *	finished=<unix ms>    ok=0|1     error=<hex>    result=<hex>
 *	end
 *
 * one key=value a line (args, error and result in hex: any bytes, one
 * line); unknown keys are skipped (a newer bcd's file read by an older
 * one); a file without its "end" line is not one. The kinds are a table
 * (kinds[]): {kind, default lane, handler}; each lane has its own workers
 * (control CMDS_CONTROL_WORKERS, bulk CMDS_BULK_WORKERS), so a snapshot
 * never holds a probe back, and no command runs on the converge pass. */
#include "commands.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "snapshot.h"
#include "util.h"

/* ------------------------------------------------------------ file format */

#define CMD_FILE_MAGIC "bc-command 1"

bool cmd_id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	return n >= 1 && n <= CMDS_ID_MAX &&
	       strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static bool word_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	return n <= max && strspn(s, "abcdefghijklmnopqrstuvwxyz"
				     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_kv(struct sbuf *b, const char *k, const char *v)
{
	sb_add(b, k, strlen(k));
	sb_add(b, "=", 1);
	sb_add(b, v, strlen(v));
	sb_add(b, "\n", 1);
}

static void sb_i64(struct sbuf *b, const char *k, int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, v);
	sb_kv(b, k, s);
}

static void sb_hex(struct sbuf *b, const char *k, const char *v)
{
	size_t n = strlen(v);
	char *h = xmalloc(2 * n + 1);

	hex_encode(v, n, h);
	sb_kv(b, k, h);
	free(h);
}

int cmd_rec_encode(const struct cmd_rec *r, char **ret, size_t *ret_len)
{
	struct sbuf b = {0};

	if (!cmd_id_ok(r->id) || !word_ok(r->kind, CMDS_KIND_MAX) || !*r->kind)
		return -EINVAL;
	sb_add(&b, CMD_FILE_MAGIC "\n", strlen(CMD_FILE_MAGIC) + 1);
	sb_kv(&b, "id", r->id);
	sb_kv(&b, "kind", r->kind);
	sb_kv(&b, "instance", word_ok(r->instance_id, RT_ID_MAX) ? r->instance_id : "");
	sb_kv(&b, "lane", word_ok(r->lane, sizeof(r->lane) - 1) ? r->lane : "control");
	sb_i64(&b, "retry_safe", r->retry_safe);
	sb_i64(&b, "deadline", r->deadline);
	sb_hex(&b, "args", r->args ? r->args : "");
	sb_i64(&b, "received", r->received_ms);
	sb_i64(&b, "started", r->started_ms);
	sb_i64(&b, "runs", r->runs);
	sb_i64(&b, "finished", r->finished_ms);
	sb_i64(&b, "ok", r->ok);
	sb_hex(&b, "error", r->error);
	if (r->result)
		sb_hex(&b, "result", r->result);
	sb_add(&b, "end\n", 4);
	*ret = b.p;
	*ret_len = b.len;
	return 0;
}

void cmd_rec_clear(struct cmd_rec *r)
{
	free(r->args);
	free(r->result);
	memset(r, 0, sizeof(*r));
}

/* hex into a malloc'd NUL-terminated string; NULL if not hex or holding a
 * NUL. */
static char *unhex(const char *h, size_t max)
{
	size_t n = strlen(h);
	char *out;

	if (n % 2 || n / 2 > max)
		return NULL;
	out = xcalloc(1, n / 2 + 1);
	if (hex_decode(h, n / 2, out) < 0 || strlen(out) != n / 2) {
		free(out);
		return NULL;
	}
	return out;
}

static bool num(const char *v, int64_t *ret)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno || end == v || *end)
		return false;
	*ret = x;
	return true;
}

static int decode_kv(struct cmd_rec *r, const char *k, const char *v)
{
	int64_t x = 0;
	char *s;

	if (strcmp(k, "id") == 0 || strcmp(k, "kind") == 0 || strcmp(k, "instance") == 0 ||
	    strcmp(k, "lane") == 0) {
		char *dst = k[0] == 'i' && k[1] == 'd' ? r->id :
			    k[0] == 'k' ? r->kind : k[0] == 'i' ? r->instance_id : r->lane;
		size_t cap = k[0] == 'i' && k[1] == 'd' ? sizeof(r->id) :
			     k[0] == 'k' ? sizeof(r->kind) :
			     k[0] == 'i' ? sizeof(r->instance_id) : sizeof(r->lane);
		if (strlen(v) >= cap || !word_ok(v, cap - 1))
			return -EBADMSG;
		memcpy(dst, v, strlen(v) + 1);
		return 0;
	}
	if (strcmp(k, "args") == 0 || strcmp(k, "result") == 0 || strcmp(k, "error") == 0) {
		if (!(s = unhex(v, CMDS_BLOB_MAX)))
			return -EBADMSG;
		if (k[0] == 'e') {
			snprintf(r->error, sizeof(r->error), "%s", s);
			free(s);
		} else if (k[0] == 'a') {
			free(r->args);
			r->args = s;
		} else {
			free(r->result);
			r->result = s;
		}
		return 0;
	}
	if (strcmp(k, "retry_safe") == 0 || strcmp(k, "deadline") == 0 ||
	    strcmp(k, "received") == 0 || strcmp(k, "started") == 0 || strcmp(k, "runs") == 0 ||
	    strcmp(k, "finished") == 0 || strcmp(k, "ok") == 0) {
		if (!num(v, &x) || x < 0)
			return -EBADMSG;
		if (strcmp(k, "retry_safe") == 0)
			r->retry_safe = x != 0;
		else if (strcmp(k, "deadline") == 0)
			r->deadline = x;
		else if (strcmp(k, "received") == 0)
			r->received_ms = x;
		else if (strcmp(k, "started") == 0)
			r->started_ms = x;
		else if (strcmp(k, "runs") == 0)
			r->runs = (uint32_t)x;
		else if (strcmp(k, "finished") == 0)
			r->finished_ms = x;
		else
			r->ok = x != 0;
		return 0;
	}
	return 0; /* a key of a newer bcd */
}

int cmd_rec_decode(const char *buf, size_t len, struct cmd_rec *ret)
{
	_cleanup_free_ char *copy = NULL;
	struct cmd_rec r = {0};
	char *save = NULL, *line;
	bool end = false;
	int e = 0;

	memset(ret, 0, sizeof(*ret));
	if (len < strlen(CMD_FILE_MAGIC) + 1 || memchr(buf, '\0', len) ||
	    memcmp(buf, CMD_FILE_MAGIC "\n", strlen(CMD_FILE_MAGIC) + 1) != 0 ||
	    buf[len - 1] != '\n')
		return -EBADMSG;
	copy = xcalloc(1, len + 1);
	memcpy(copy, buf, len);
	line = strtok_r(copy + strlen(CMD_FILE_MAGIC) + 1, "\n", &save);
	for (; line && !e; line = strtok_r(NULL, "\n", &save)) {
		char *eq;
		if (end) {
			e = -EBADMSG; /* nothing after "end" */
			break;
		}
		if (strcmp(line, "end") == 0) {
			end = true;
			continue;
		}
		if (!(eq = strchr(line, '='))) {
			e = -EBADMSG;
			break;
		}
		*eq = '\0';
		e = decode_kv(&r, line, eq + 1);
	}
	if (!e && (!end || !cmd_id_ok(r.id) || !*r.kind || !r.received_ms))
		e = -EBADMSG;
	if (e) {
		cmd_rec_clear(&r);
		return e;
	}
	if (!r.args)
		r.args = xstrdup("");
	if (!*r.lane)
		snprintf(r.lane, sizeof(r.lane), "control");
	*ret = r;
	return 0;
}

enum cmd_recovery cmd_recover(const struct cmd_rec *r)
{
	if (r->finished_ms)
		return CMD_RECOVER_REPORT;
	if (r->started_ms && !r->retry_safe)
		return CMD_RECOVER_FAIL;
	return CMD_RECOVER_RUN;
}

/* ------------------------------------------------------------ the kinds */

struct cmds;
/* 0 with *result (malloc'd JSON or NULL), or <0 with error filled;
 * -ECANCELED: bcd is stopping, the command is left unfinished. */
typedef int (*cmd_handler)(struct cmds *c, const struct cmd_rec *r, char **result, char *error,
			   size_t errlen);

struct cmd_kind {
	const char *kind;
	const char *lane;   /* default lane */
	cmd_handler run;
	bool fake_only;     /* only with the fake runtime (tests) */
};

enum { LANE_CONTROL, LANE_BULK, LANE_N };

struct job {
	struct cmd_rec rec;
	const struct cmd_kind *kind; /* NULL: unknown (finished at receipt) */
	int lane;
	enum { JOB_QUEUED, JOB_RUNNING, JOB_FINISHED } st;
	struct job *next_q;          /* its lane's queue */
};

struct cmds {
	char *dir;
	struct state_cmds *seen;
	struct rt *rt;
	struct snap *snap;
	bool fake;
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct job **jobs;           /* every job known */
	size_t n_jobs, cap_jobs;
	struct job *q_head[LANE_N], *q_tail[LANE_N];
	pthread_t *threads;
	size_t n_threads;
	atomic_bool stopping;
	_Atomic uint64_t seq;
};

static int run_probe(struct cmds *c, const struct cmd_rec *r, char **result, char *error,
		     size_t errlen)
{
	struct rt_instance *v = NULL;
	const char *state = "absent";
	size_t n = 0;
	int e;

	if (!c->rt) {
		snprintf(error, errlen, "no runtime");
		return -ENODEV;
	}
	if (!*r->instance_id) {
		snprintf(error, errlen, "instance.probe needs an instance");
		return -EINVAL;
	}
	if ((e = c->rt->ops->list(c->rt, &v, &n)) < 0) {
		snprintf(error, errlen, "runtime list failed: %s", strerror(-e));
		return e;
	}
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, r->instance_id) == 0)
			state = rt_state_name(v[i].state);
	*result = xasprintf("{\"instance\":\"%s\",\"state\":\"%s\"}", r->instance_id, state);
	free(v);
	return 0;
}

static int run_fake_sleep(struct cmds *c, const struct cmd_rec *r, char **result, char *error,
			  size_t errlen)
{
	const char *ms = strstr(r->args, "\"ms\"");
	long long want = 0;
	int64_t until;

	if (ms && (ms = strchr(ms, ':')))
		want = strtoll(ms + 1, NULL, 10);
	if (want < 0 || want > 3600 * 1000LL) {
		snprintf(error, errlen, "fake.sleep: ms must be 0..3600000");
		return -EINVAL;
	}
	until = mono_ms() + want;
	while (mono_ms() < until) {
		if (atomic_load(&c->stopping))
			return -ECANCELED;
		usleep(20 * 1000);
	}
	*result = xasprintf("{\"sleptMs\":%lld,\"run\":%u}", want, r->runs);
	return 0;
}

static int run_snapshot(struct cmds *c, const struct cmd_rec *r, char **result, char *error,
			size_t errlen)
{
	if (!c->snap) {
		snprintf(error, errlen, "UNSUPPORTED: no snapshot store on this host");
		return -EOPNOTSUPP;
	}
	return snap_take(c->snap, r->id, r->instance_id, r->args, &c->stopping, result, error,
			 errlen);
}

static const struct cmd_kind kinds[] = {
	{"instance.probe", "control", run_probe, false},
	{"instance.snapshot", "bulk", run_snapshot, false},
	{"fake.sleep", "control", run_fake_sleep, true},
};

static const struct cmd_kind *kind_find(const struct cmds *c, const char *kind)
{
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		if (strcmp(kinds[i].kind, kind) == 0 && (!kinds[i].fake_only || c->fake))
			return &kinds[i];
	return NULL;
}

/* ------------------------------------------------------------ files */

static char *rec_path(const struct cmds *c, const char *id)
{
	return xasprintf("%s/%s", c->dir, id);
}

static int rec_save(const struct cmds *c, const struct cmd_rec *r)
{
	_cleanup_free_ char *path = rec_path(c, r->id), *buf = NULL;
	size_t len = 0;
	int e = cmd_rec_encode(r, &buf, &len);

	return e < 0 ? e : file_write_atomic(path, buf, len, 0600);
}

static void rec_unlink(const struct cmds *c, const char *id)
{
	_cleanup_free_ char *path = rec_path(c, id);

	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("command %s: cannot remove %s: %s", id, path, strerror(errno));
}

/* ------------------------------------------------------------ jobs */

static int lane_of(const char *lane)
{
	return strcmp(lane, "bulk") == 0 ? LANE_BULK : LANE_CONTROL;
}

/* With the lock held. */
static void job_add(struct cmds *c, struct job *j)
{
	if (c->n_jobs == c->cap_jobs) {
		c->cap_jobs = c->cap_jobs ? c->cap_jobs * 2 : 16;
		c->jobs = xrealloc(c->jobs, c->cap_jobs * sizeof(*c->jobs));
	}
	c->jobs[c->n_jobs++] = j;
}

/* With the lock held. */
static void job_enqueue(struct cmds *c, struct job *j)
{
	j->st = JOB_QUEUED;
	j->next_q = NULL;
	if (c->q_tail[j->lane])
		c->q_tail[j->lane]->next_q = j;
	else
		c->q_head[j->lane] = j;
	c->q_tail[j->lane] = j;
	pthread_cond_broadcast(&c->work);
}

static void job_free(struct job *j)
{
	cmd_rec_clear(&j->rec);
	free(j);
}

/* Finish j with this outcome: its file first, then it is reportable. */
static void job_finish(struct cmds *c, struct job *j, bool ok, const char *error, char *result)
{
	int e;

	j->rec.finished_ms = now_ms();
	j->rec.ok = ok;
	snprintf(j->rec.error, sizeof(j->rec.error), "%s", error ? error : "");
	free(j->rec.result);
	j->rec.result = result;
	if ((e = rec_save(c, &j->rec)) < 0)
		log_warn("command %s: cannot record its end (%s): reported, and run again if "
			 "retry-safe after a restart", j->rec.id, strerror(-e));
	log_info("command %s (%s): %s%s%s", j->rec.id, j->rec.kind, ok ? "succeeded" : "failed",
		 ok ? "" : ": ", ok ? "" : j->rec.error);
	pthread_mutex_lock(&c->lock);
	j->st = JOB_FINISHED;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&c->seq, 1);
}

struct worker {
	struct cmds *c;
	int lane;
};

static void run_job(struct cmds *c, struct job *j)
{
	char error[CMDS_ERROR_MAX] = "";
	char *result = NULL;
	int e;

	if (j->rec.deadline && now_ms() > j->rec.deadline) {
		job_finish(c, j, false, "deadline passed before the command started", NULL);
		return;
	}
	j->rec.started_ms = now_ms();
	j->rec.runs++;
	if ((e = rec_save(c, &j->rec)) < 0) {
		/* never run what could not be recorded as started */
		log_error("command %s: cannot record its start (%s): not run", j->rec.id,
			  strerror(-e));
		job_finish(c, j, false, "cannot record the command's start on the host", NULL);
		return;
	}
	log_info("command %s (%s%s%s, lane %s): run %u started", j->rec.id, j->rec.kind,
		 *j->rec.instance_id ? ", " : "", j->rec.instance_id, j->rec.lane, j->rec.runs);
	e = j->kind->run(c, &j->rec, &result, error, sizeof(error));
	if (e == -ECANCELED) {
		free(result);
		log_info("command %s: stopped with bcd: started, not finished", j->rec.id);
		return;
	}
	job_finish(c, j, e == 0, e == 0 ? "" : (*error ? error : strerror(-e)), result);
}

static void *worker_main(void *p)
{
	struct worker *w = p;
	struct cmds *c = w->c;

	pthread_mutex_lock(&c->lock);
	while (!atomic_load(&c->stopping)) {
		struct job *j = c->q_head[w->lane];
		if (!j) {
			pthread_cond_wait(&c->work, &c->lock);
			continue;
		}
		c->q_head[w->lane] = j->next_q;
		if (!c->q_head[w->lane])
			c->q_tail[w->lane] = NULL;
		j->st = JOB_RUNNING;
		pthread_mutex_unlock(&c->lock);
		run_job(c, j);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	free(w);
	return NULL;
}

/* ------------------------------------------------------------ open */

static void recover_one(struct cmds *c, const char *name)
{
	_cleanup_free_ char *path = rec_path(c, name), *buf = NULL;
	struct job *j;
	size_t len = 0;
	int e;

	if (strstr(name, ".tmp.")) { /* a write that never got renamed */
		unlink(path);
		return;
	}
	if (!cmd_id_ok(name))
		return;
	j = xcalloc(1, sizeof(*j));
	if ((e = file_read_all(path, 4 * CMDS_BLOB_MAX, &buf, &len)) < 0 ||
	    (e = cmd_rec_decode(buf, len, &j->rec)) < 0 || strcmp(j->rec.id, name) != 0) {
		log_error("command %s: %s unreadable (%s): left as it is, not run", name, path,
			  strerror(e < 0 ? -e : EBADMSG));
		free(j->rec.args);
		free(j->rec.result);
		free(j);
		return;
	}
	if (!state_cmds_has(c->seen, j->rec.id) && (e = state_cmds_add(c->seen, j->rec.id)) < 0)
		log_warn("command %s: cannot record its id (%s)", j->rec.id, strerror(-e));
	j->kind = kind_find(c, j->rec.kind);
	j->lane = lane_of(j->rec.lane);
	switch (cmd_recover(&j->rec)) {
	case CMD_RECOVER_REPORT:
		log_info("command %s (%s): finished before the restart: reported", j->rec.id,
			 j->rec.kind);
		j->st = JOB_FINISHED;
		job_add(c, j);
		break;
	case CMD_RECOVER_FAIL:
		log_warn("command %s (%s): bcd restarted during it and it is not retry-safe: failed",
			 j->rec.id, j->rec.kind);
		job_add(c, j);
		job_finish(c, j, false, CMDS_RESTARTED_ERROR, NULL);
		break;
	case CMD_RECOVER_RUN:
		job_add(c, j);
		if (!j->kind) {
			char msg[CMDS_ERROR_MAX];
			snprintf(msg, sizeof(msg), "UNSUPPORTED: %.64s", j->rec.kind);
			job_finish(c, j, false, msg, NULL);
			break;
		}
		log_info("command %s (%s): %s after the restart", j->rec.id, j->rec.kind,
			 j->rec.started_ms ? "retry-safe, runs again" : "never started, runs");
		job_enqueue(c, j);
		break;
	}
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int cmds_open(const struct cmds_opts *o, struct cmds **ret)
{
	struct cmds *c = xcalloc(1, sizeof(*c));
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int e;

	c->dir = xasprintf("%s/%s", o->state_dir, CMDS_DIR);
	c->seen = o->seen;
	c->rt = o->rt;
	c->fake = o->fake;
	c->snap = o->snap;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work, NULL);
	if ((e = mkdir_p(c->dir, 0700)) < 0 || !(d = opendir(c->dir))) {
		e = e < 0 ? e : -errno;
		cmds_free(c);
		return e;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			names = xrealloc(names, cap * sizeof(*names));
		}
		names[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	/* ids sort by creation time (cmd_<ULID>): the order they came in */
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_name);
	for (size_t i = 0; i < n; i++) {
		recover_one(c, names[i]);
		free(names[i]);
	}
	free(names);
	*ret = c;
	return 0;
}

void cmds_start(struct cmds *c)
{
	static const int per_lane[LANE_N] = {CMDS_CONTROL_WORKERS, CMDS_BULK_WORKERS};

	c->threads = xcalloc(CMDS_CONTROL_WORKERS + CMDS_BULK_WORKERS, sizeof(*c->threads));
	for (int l = 0; l < LANE_N; l++)
		for (int i = 0; i < per_lane[l]; i++) {
			struct worker *w = xmalloc(sizeof(*w));
			*w = (struct worker){.c = c, .lane = l};
			if (pthread_create(&c->threads[c->n_threads], NULL, worker_main, w) != 0)
				fatal("cannot start a command worker");
			c->n_threads++;
		}
}

void cmds_stop(struct cmds *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	atomic_store(&c->stopping, true);
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < c->n_threads; i++)
		pthread_join(c->threads[i], NULL);
	free(c->threads);
	c->threads = NULL;
	c->n_threads = 0;
}

void cmds_free(struct cmds *c)
{
	if (!c)
		return;
	cmds_stop(c);
	for (size_t i = 0; i < c->n_jobs; i++)
		job_free(c->jobs[i]);
	free(c->jobs);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->work);
	free(c->dir);
	free(c);
}

/* ------------------------------------------------------------ receive */

int cmds_receive(struct cmds *c, const Bc__Node__V1__Command *cmd)
{
	struct job *j;
	int e;

	if (!cmd_id_ok(cmd->id)) {
		log_warn("command with a bad id ignored");
		return -EINVAL;
	}
	if (state_cmds_has(c->seen, cmd->id)) {
		log_debug("command %s: received before, ignored", cmd->id);
		return 0;
	}
	j = xcalloc(1, sizeof(*j));
	snprintf(j->rec.id, sizeof(j->rec.id), "%s", cmd->id);
	snprintf(j->rec.kind, sizeof(j->rec.kind), "%.64s",
		 word_ok(cmd->kind, CMDS_KIND_MAX) && *cmd->kind ? cmd->kind : "invalid");
	snprintf(j->rec.instance_id, sizeof(j->rec.instance_id), "%s",
		 rt_id_valid(cmd->instance_id) ? cmd->instance_id : "");
	j->kind = kind_find(c, j->rec.kind);
	snprintf(j->rec.lane, sizeof(j->rec.lane), "%s",
		 strcmp(cmd->lane, "control") == 0 || strcmp(cmd->lane, "bulk") == 0 ? cmd->lane :
		 j->kind ? j->kind->lane : "control");
	j->lane = lane_of(j->rec.lane);
	j->rec.retry_safe = cmd->retry_safe;
	j->rec.deadline = cmd->deadline;
	j->rec.args = xcalloc(1, cmd->args_json.len + 1);
	if (cmd->args_json.data && cmd->args_json.len <= CMDS_BLOB_MAX)
		memcpy(j->rec.args, cmd->args_json.data, cmd->args_json.len);
	j->rec.args[strnlen(j->rec.args, cmd->args_json.len)] = '\0';
	j->rec.received_ms = now_ms();
	/* persisted before anything else happens: a restart finds it */
	if ((e = rec_save(c, &j->rec)) < 0 || (e = state_cmds_add(c->seen, j->rec.id)) < 0) {
		log_error("command %s (%s): cannot persist it (%s): not run", j->rec.id,
			  j->rec.kind, strerror(-e));
		rec_unlink(c, j->rec.id);
		job_free(j);
		return e;
	}
	log_info("command %s (%s%s%s, lane %s%s) received", j->rec.id, j->rec.kind,
		 *j->rec.instance_id ? ", " : "", j->rec.instance_id, j->rec.lane,
		 j->rec.retry_safe ? ", retry-safe" : "");
	pthread_mutex_lock(&c->lock);
	job_add(c, j);
	if (j->kind)
		job_enqueue(c, j);
	pthread_mutex_unlock(&c->lock);
	if (!j->kind) {
		char msg[CMDS_ERROR_MAX];
		snprintf(msg, sizeof(msg), "UNSUPPORTED: %.64s", j->rec.kind);
		job_finish(c, j, false, msg, NULL);
	}
	return 0;
}

/* ------------------------------------------------------------ results */

/* With the lock held: drop job i (its file too). */
static void job_drop(struct cmds *c, size_t i)
{
	rec_unlink(c, c->jobs[i]->rec.id);
	job_free(c->jobs[i]);
	c->jobs[i] = c->jobs[--c->n_jobs];
}

void cmds_results(struct cmds *c, struct cmds_result **ret, size_t *ret_n)
{
	struct cmds_result *v;
	int64_t now = now_ms();
	size_t n = 0;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_jobs;) {
		struct job *j = c->jobs[i];
		if (j->st == JOB_FINISHED && now - j->rec.finished_ms > CMDS_KEEP_MS) {
			log_warn("command %s: no controller acknowledged its result in %lld h: "
				 "dropped", j->rec.id, CMDS_KEEP_MS / 3600000);
			job_drop(c, i);
			continue;
		}
		i++;
	}
	v = xcalloc(c->n_jobs ? c->n_jobs : 1, sizeof(*v));
	for (size_t i = 0; i < c->n_jobs; i++) {
		const struct job *j = c->jobs[i];
		if (j->st != JOB_FINISHED)
			continue;
		snprintf(v[n].id, sizeof(v[n].id), "%s", j->rec.id);
		v[n].ok = j->rec.ok;
		snprintf(v[n].error, sizeof(v[n].error), "%s", j->rec.error);
		v[n].result = j->rec.result ? xstrdup(j->rec.result) : NULL;
		n++;
	}
	pthread_mutex_unlock(&c->lock);
	*ret = v;
	*ret_n = n;
}

void cmds_results_free(struct cmds_result *r, size_t n)
{
	for (size_t i = 0; r && i < n; i++)
		free(r[i].result);
	free(r);
}

void cmds_settled(struct cmds *c, char **ids, size_t n)
{
	pthread_mutex_lock(&c->lock);
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < c->n_jobs; i++)
			if (c->jobs[i]->st == JOB_FINISHED && strcmp(c->jobs[i]->rec.id, ids[k]) == 0) {
				log_debug("command %s: settled by the controller", ids[k]);
				job_drop(c, i);
				break;
			}
	pthread_mutex_unlock(&c->lock);
}

uint64_t cmds_seq(struct cmds *c)
{
	return c ? atomic_load(&c->seq) : 0;
}

void cmds_counts(struct cmds *c, size_t *queued, size_t *running, size_t *finished)
{
	*queued = *running = *finished = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_jobs; i++) {
		if (c->jobs[i]->st == JOB_QUEUED)
			(*queued)++;
		else if (c->jobs[i]->st == JOB_RUNNING)
			(*running)++;
		else
			(*finished)++;
	}
	pthread_mutex_unlock(&c->lock);
}
