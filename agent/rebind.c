/* rebind.c: bcd's side of a memory restore's identity rebind (see
 * rebind.h; docs/rebind.md).
 *
 * The record, data_dir/instances-rebound.json, is one JSON object of
 * instance id to the identity_rebind_ref applied to it, replaced
 * atomically whenever it changes: a restarted bcd never repeats a rebind
 * it finished, and one it had not finished (no entry) runs again, with a
 * new nonce. Failures are kept in memory only: a restart tries at once. */
#include "rebind.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_lex.h"
#include "jsonw.h"
#include "log.h"
#include "rebind_bundle.h"
#include "util.h"

struct applied {
	char id[RT_ID_MAX + 1];
	char ref[REBIND_REF_MAX];
};

struct failure {
	char id[RT_ID_MAX + 1];
	char ref[REBIND_REF_MAX];
	int64_t next_at;           /* mono ms: not before */
	int64_t delay;             /* the last wait, ms */
	bool gone;                 /* the controller has no such bundle: not asked again */
	char why[RT_REASON_MAX];
};

struct rebind {
	char *path;
	rt_boot_data_fn fetch;
	void *ctx;
	pthread_mutex_t lock;
	struct applied *done;
	size_t n_done, cap_done;
	struct failure *fails;
	size_t n_fails, cap_fails;
};

static void *grow_to(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 8;
	return xrealloc(p, *cap * size);
}

/* ------------------------------------------------------------ the record */

static struct applied *find_done(struct rebind *rb, const char *id)
{
	for (size_t i = 0; i < rb->n_done; i++)
		if (strcmp(rb->done[i].id, id) == 0)
			return &rb->done[i];
	return NULL;
}

static struct failure *find_fail(struct rebind *rb, const char *id)
{
	for (size_t i = 0; i < rb->n_fails; i++)
		if (strcmp(rb->fails[i].id, id) == 0)
			return &rb->fails[i];
	return NULL;
}

static void add_done(struct rebind *rb, const char *id, const char *ref)
{
	struct applied *a = find_done(rb, id);

	if (!a) {
		rb->done = grow_to(rb->done, &rb->cap_done, rb->n_done, sizeof(*rb->done));
		a = &rb->done[rb->n_done++];
	}
	snprintf(a->id, sizeof(a->id), "%s", id);
	snprintf(a->ref, sizeof(a->ref), "%s", ref);
}

/* Under the lock: the record replaced whole. */
static int save(struct rebind *rb)
{
	_cleanup_free_ char *json = NULL;
	struct jsonw w;
	int e;

	jsonw_begin(&w);
	for (size_t i = 0; i < rb->n_done; i++)
		jsonw_str(&w, rb->done[i].id, rb->done[i].ref);
	if ((e = jsonw_end(&w, &json)) < 0)
		return e;
	return file_write_atomic(rb->path, json, strlen(json), 0600);
}

/* The string at *p after any whitespace (json_lex_read_str). */
static int read_str(const char **p, char **ret)
{
	*p = json_lex_skip_ws(*p);
	return json_lex_read_str(p, ret);
}

/* The record's text: {"id": "ref", ...}; entries of unusable ids or refs
 * are refused with the whole file. */
static int parse_record(struct rebind *rb, const char *text)
{
	const char *p = json_lex_skip_ws(text);

	if (*p++ != '{')
		return -EINVAL;
	p = json_lex_skip_ws(p);
	if (*p == '}')
		return *json_lex_skip_ws(p + 1) ? -EINVAL : 0;
	for (;;) {
		_cleanup_free_ char *id = NULL, *ref = NULL;
		if (read_str(&p, &id) < 0 || *(p = json_lex_skip_ws(p)) != ':' || (p++, read_str(&p, &ref)) < 0)
			return -EINVAL;
		if (!rt_id_valid(id) || !*ref || !str_is_printable(ref, REBIND_REF_MAX - 1) ||
		    rb->n_done >= REBIND_ENTRIES_MAX)
			return -EINVAL;
		add_done(rb, id, ref);
		p = json_lex_skip_ws(p);
		if (*p == ',') {
			p++;
			continue;
		}
		return *p == '}' && !*json_lex_skip_ws(p + 1) ? 0 : -EINVAL;
	}
}

int rebind_open(const char *dir, rt_boot_data_fn fetch, void *ctx, struct rebind **ret)
{
	struct rebind *rb = xcalloc(1, sizeof(*rb));
	_cleanup_free_ char *text = NULL;
	int e;

	rb->path = xasprintf("%s/%s", dir, REBIND_FILE);
	rb->fetch = fetch;
	rb->ctx = ctx;
	pthread_mutex_init(&rb->lock, NULL);
	e = file_read_all(rb->path, 1 << 20, &text, NULL);
	if (e == 0 && parse_record(rb, text) < 0) {
		log_warn("%s: not a record of rebinds: ignored (the instances' rebinds run again)",
			 rb->path);
		rb->n_done = 0;
	} else if (e < 0 && e != -ENOENT) {
		rebind_free(rb);
		return e;
	}
	*ret = rb;
	return 0;
}

void rebind_free(struct rebind *rb)
{
	if (!rb)
		return;
	pthread_mutex_destroy(&rb->lock);
	free(rb->done);
	free(rb->fails);
	free(rb->path);
	free(rb);
}

/* ------------------------------------------------------------- queries */

bool rebind_due(struct rebind *rb, const Bc__Node__V1__InstanceSpec *s)
{
	const struct applied *a;
	const struct failure *f;
	bool due;

	if (!s->identity_rebind_ref || !*s->identity_rebind_ref)
		return false;
	pthread_mutex_lock(&rb->lock);
	a = find_done(rb, s->id);
	f = find_fail(rb, s->id);
	due = !(a && strcmp(a->ref, s->identity_rebind_ref) == 0) &&
	      !(f && strcmp(f->ref, s->identity_rebind_ref) == 0 &&
		(f->gone || mono_ms() < f->next_at));
	pthread_mutex_unlock(&rb->lock);
	return due;
}

void rebind_status(struct rebind *rb, const char *id, char *ref, char *why)
{
	const struct applied *a;
	const struct failure *f;

	pthread_mutex_lock(&rb->lock);
	a = find_done(rb, id);
	f = find_fail(rb, id);
	snprintf(ref, REBIND_REF_MAX, "%s", a ? a->ref : "");
	snprintf(why, RT_REASON_MAX, "%s", f && (!a || strcmp(a->ref, f->ref) != 0) ? f->why : "");
	pthread_mutex_unlock(&rb->lock);
}

static bool spec_names(const Bc__Node__V1__NodeSpec *spec, const char *id, const char **ret_ref)
{
	for (size_t i = 0; i < spec->n_instances; i++)
		if (strcmp(spec->instances[i]->id, id) == 0) {
			*ret_ref = spec->instances[i]->identity_rebind_ref;
			return true;
		}
	return false;
}

void rebind_gc(struct rebind *rb, const Bc__Node__V1__NodeSpec *spec)
{
	const char *ref;
	size_t k = 0, n;

	pthread_mutex_lock(&rb->lock);
	n = rb->n_done;
	for (size_t i = 0; i < rb->n_done; i++)
		if (spec_names(spec, rb->done[i].id, &ref))
			rb->done[k++] = rb->done[i];
	rb->n_done = k;
	if (k != n && save(rb) < 0)
		log_warn("%s: cannot rewrite the record", rb->path);
	k = 0;
	for (size_t i = 0; i < rb->n_fails; i++)
		if (spec_names(spec, rb->fails[i].id, &ref) && ref &&
		    strcmp(ref, rb->fails[i].ref) == 0)
			rb->fails[k++] = rb->fails[i];
	rb->n_fails = k;
	pthread_mutex_unlock(&rb->lock);
}

/* ------------------------------------------------------------ delivery */

/* A failed attempt: remembered with its wait; reason as reported. */
static int failed(struct rebind *rb, const Bc__Node__V1__InstanceSpec *s, int e, bool gone,
		  char *reason)
{
	struct failure *f;

	pthread_mutex_lock(&rb->lock);
	f = find_fail(rb, s->id);
	if (!f) {
		rb->fails = grow_to(rb->fails, &rb->cap_fails, rb->n_fails, sizeof(*rb->fails));
		f = &rb->fails[rb->n_fails++];
		memset(f, 0, sizeof(*f));
		snprintf(f->id, sizeof(f->id), "%s", s->id);
	}
	if (strcmp(f->ref, s->identity_rebind_ref) != 0)
		f->delay = 0;
	snprintf(f->ref, sizeof(f->ref), "%s", s->identity_rebind_ref);
	f->delay = e == -EOPNOTSUPP ? REBIND_RETRY_MAX_MS
		   : f->delay ? (f->delay * 2 > REBIND_RETRY_MAX_MS ? REBIND_RETRY_MAX_MS
								    : f->delay * 2)
			      : REBIND_RETRY_MIN_MS;
	f->next_at = mono_ms() + f->delay;
	f->gone = gone;
	snprintf(f->why, sizeof(f->why), "%s", reason);
	pthread_mutex_unlock(&rb->lock);
	log_warn("instance %s: %s (%s)", s->id, reason,
		 gone ? "not asked for again" : "tried again later");
	return e;
}

static bool spec_has_mac(const Bc__Node__V1__InstanceSpec *s, const char *mac)
{
	for (size_t i = 0; i < s->n_nics; i++)
		if (s->nics[i]->mac && strcasecmp(s->nics[i]->mac, mac) == 0)
			return true;
	return false;
}

/* The fetched bundle checked against s: 0 with *b filled. */
static int check(const Bc__Node__V1__InstanceSpec *s, const char *data, size_t len,
		 struct rb_bundle *b, char *reason)
{
	char why[RB_WHY_MAX];

	if (rb_bundle_parse(data, len, s->id, b, why) < 0) {
		snprintf(reason, RT_REASON_MAX, "IdentityRebind: bundle refused: %s", why);
		return -EBADMSG;
	}
	for (size_t i = 0; i < b->n_nics; i++)
		if (!spec_has_mac(s, b->nics[i].mac)) {
			snprintf(reason, RT_REASON_MAX, "IdentityRebind: bundle refused: NIC %s is "
				 "not the instance's", b->nics[i].mac);
			rb_bundle_clear(b);
			return -EBADMSG;
		}
	return 0;
}

static int deliver(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const struct rb_bundle *b,
		   char *reason)
{
	unsigned char raw[RB_NONCE_LEN / 2];
	char nonce[RB_NONCE_LEN + 1], why[RT_REASON_MAX] = "";
	void *tar = NULL;
	size_t len = 0;
	int e;

	if (random_bytes(raw, sizeof(raw)) < 0)
		abort();
	hex_encode(raw, sizeof(raw), nonce);
	if ((e = rb_tar(b, nonce, &tar, &len)) < 0) {
		snprintf(reason, RT_REASON_MAX, "IdentityRebind: no archive: %s", strerror(-e));
		return e;
	}
	e = rt->ops->rebind ? rt->ops->rebind(rt, s, tar, len, nonce, why) : -EOPNOTSUPP;
	OPENSSL_cleanse(tar, len);
	free(tar);
	if (e < 0)
		snprintf(reason, RT_REASON_MAX, "IdentityRebind: %.140s",
			 *why ? why : e == -EOPNOTSUPP ? "not supported by this runtime"
						       : strerror(-e));
	return e;
}

int rebind_run(struct rebind *rb, struct rt *rt, const Bc__Node__V1__InstanceSpec *s,
	       char *reason)
{
	struct rb_bundle b = {0};
	char why[RT_REASON_MAX] = "";
	void *data = NULL;
	size_t len = 0;
	int e;

	reason[0] = '\0';
	e = rb->fetch ? rb->fetch(rb->ctx, s->id, s->identity_rebind_ref, &data, &len, why)
		      : -ENOTCONN;
	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "IdentityRebind: bundle not fetched: %.120s",
			 *why ? why : strerror(-e));
		return failed(rb, s, e, strncmp(why, "NOT_FOUND", 9) == 0, reason);
	}
	e = check(s, data, len, &b, reason);
	OPENSSL_cleanse(data, len);
	free(data);
	if (e < 0)
		return failed(rb, s, e, false, reason);
	e = deliver(rt, s, &b, reason);
	rb_bundle_clear(&b);
	if (e < 0)
		return failed(rb, s, e, false, reason);
	pthread_mutex_lock(&rb->lock);
	add_done(rb, s->id, s->identity_rebind_ref);
	if ((e = save(rb)) < 0)
		log_warn("%s: cannot record the rebind of %s: %s", rb->path, s->id, strerror(-e));
	for (size_t i = 0; i < rb->n_fails; i++)
		if (strcmp(rb->fails[i].id, s->id) == 0)
			rb->fails[i] = rb->fails[--rb->n_fails];
	pthread_mutex_unlock(&rb->lock);
	log_info("instance %s: identity rebind %s acknowledged by its guest", s->id,
		 s->identity_rebind_ref);
	return 0;
}
