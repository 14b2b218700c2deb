/* identity_ep.c: bcd's workload-identity endpoint (see identity_ep.h).
 *
 * One listener thread, one poll loop, everything non-blocking (as
 * guestsig.c, whose source-to-instance rule and listening socket it
 * shares): at most IE_CONNS connections with an IE_REQUEST_MAX buffer each
 * (2 s to send a whole request), the bootstrap long-polls parked among
 * them. What waits on the controller (Node.Attest, Node.RenewIdentity,
 * Node.ReportActivity, Node.GetBootData of a warm claim's bootstrap value)
 * runs on IE_WORKERS worker threads fed from a bounded queue, so no guest
 * and no slow controller call holds the loop. The lock guards the
 * per-instance table (in flight, rate bucket, the held value), the queue
 * and the log-once ring; nothing blocking runs under it. */
#include "identity_ep.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bc/node/v1/node.pb-c.h"
#include "bootdata.h"
#include "converge.h"
#include "err.h"
#include "guest_ready.h"
#include "guestsig.h"
#include "jsonw.h"
#include "log.h"
#include "metrics.h"
#include "rpc.h"
#include "runtime.h"
#include "util.h"

#define IE_CONNS 32
#define IE_INSTS 256
#define IE_JOBS 32
#define IE_WORKERS 2
#define IE_CONN_MS 2000
#define IE_REBIND_MS 1000
#define IE_SYNC_MS 1000
#define IE_FETCH_RETRY_MS 5000
#define IE_RPC_MS 15000
#define IE_LOGGED 256

static const char *const result_names[IE_RESULTS] = {
	"attested", "renewed", "reported", "served", "no-bootstrap", "malformed",
	"unknown-source", "busy", "rate-limited", "refused", "unavailable"};

const char *ie_result_name(enum ie_result r)
{
	return r < IE_RESULTS ? result_names[r] : "?";
}

/* --------------------------------------------------------------- state */

enum conn_state { C_FREE, C_READING, C_WAITING };

struct conn {
	enum conn_state st;
	int fd;
	size_t len;
	int64_t deadline;
	char src[INET6_ADDRSTRLEN];
	char id[RT_ID_MAX + 1];   /* C_WAITING: whose bootstrap */
	char buf[IE_REQUEST_MAX];
};

enum fetch_state { F_NONE, F_WANTED, F_FETCHING, F_HELD, F_GONE };

struct inst {
	bool used;
	char id[RT_ID_MAX + 1];
	bool busy;                   /* a request of it is in flight */
	struct ie_rate rate;
	char ref[80];                /* identity_bootstrap_ref ("": none) */
	enum fetch_state fetch;
	int64_t fetch_at;            /* F_WANTED: not before (mono ms) */
	char value[IE_BODY_MAX + 1]; /* F_HELD: the bootstrap value */
	int64_t seen_at;
};

enum job_kind { J_ATTEST, J_RENEW, J_STATE, J_FETCH };

struct job {
	enum job_kind kind;
	int fd;                      /* J_ATTEST, J_RENEW, J_STATE: the guest's connection */
	char id[RT_ID_MAX + 1];
	char src[INET6_ADDRSTRLEN];
	char arg[IE_BODY_MAX + 1];   /* the body (J_STATE: the token), or J_FETCH's ref */
	char state[IE_STATE_MAX + 1]; /* J_STATE: what the guest reports */
};

struct logged {
	char id[RT_ID_MAX + 1];
	enum ie_result r;
};

struct identity_ep {
	struct ie_opts o;
	pthread_t th, workers[IE_WORKERS];
	size_t n_workers;
	int wake[2];
	atomic_bool stop;
	atomic_ullong counts[IE_RESULTS];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job jobs[IE_JOBS];
	size_t n_jobs, head;
	struct inst insts[IE_INSTS];
	struct logged logged[IE_LOGGED];
	size_t n_logged, next_logged;
	/* the listener's own */
	int lfd;
	char bound[64];
	int bind_err;
	int64_t rebind_at, sync_at;
	struct conn conns[IE_CONNS];
};

/* Count r for id (may be ""); log the first of each (instance, result). */
static void count(struct identity_ep *e, enum ie_result r, const char *id, const char *src,
		  const char *why)
{
	bool seen = false;

	atomic_fetch_add(&e->counts[r], 1);
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->n_logged && !seen; i++)
		seen = e->logged[i].r == r && strcmp(e->logged[i].id, id) == 0;
	if (!seen) {
		snprintf(e->logged[e->next_logged].id, sizeof(e->logged[0].id), "%s", id);
		e->logged[e->next_logged].r = r;
		e->next_logged = (e->next_logged + 1) % IE_LOGGED;
		if (e->n_logged < IE_LOGGED)
			e->n_logged++;
	}
	pthread_mutex_unlock(&e->lock);
	if (seen)
		return;
	if (r <= IE_NO_BOOTSTRAP)
		log_info("instance %s: identity endpoint: %s (from %s%s%s; logged once)", id,
			 result_names[r], src, *why ? ": " : "", why);
	else
		log_warn("identity request from %s (instance %s) refused: %s%s%s (counted; logged "
			 "once)", src, *id ? id : "?", result_names[r], *why ? ": " : "", why);
}

static void wake(struct identity_ep *e)
{
	if (write(e->wake[1], "x", 1) < 0 && errno != EAGAIN)
		log_debug("identity endpoint: wake: %s", strerror(errno));
}

/* The instance's slot, made when new (NULL: the table is full). Lock held. */
static struct inst *inst_get(struct identity_ep *e, const char *id, bool make)
{
	struct inst *free_slot = NULL;

	for (size_t i = 0; i < IE_INSTS; i++) {
		if (e->insts[i].used && strcmp(e->insts[i].id, id) == 0)
			return &e->insts[i];
		if (!e->insts[i].used && !free_slot)
			free_slot = &e->insts[i];
	}
	if (!make || !free_slot)
		return NULL;
	*free_slot = (struct inst){.used = true, .seen_at = mono_ms()};
	snprintf(free_slot->id, sizeof(free_slot->id), "%s", id);
	return free_slot;
}

static void inst_forget_value(struct inst *in)
{
	OPENSSL_cleanse(in->value, sizeof(in->value));
}

/* ------------------------------------------------------------ answers */

static const char *status_text(int code)
{
	switch (code) {
	case 200: return "OK";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 409: return "Conflict";
	case 429: return "Too Many Requests";
	default: return "Service Unavailable";
	}
}

/* One whole answer on fd (non-blocking: a few hundred bytes into an empty
 * socket buffer), then no more writing. */
static void respond(int fd, int status, const char *type, const char *body)
{
	char head[192];
	size_t bl = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 status, status_text(status), type, bl);

	if (send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && bl)
		(void)!send(fd, body, bl, MSG_NOSIGNAL | MSG_DONTWAIT);
	shutdown(fd, SHUT_WR);
}

static void respond_error(int fd, int status, const char *code, const char *reason)
{
	struct jsonw w;
	char *json = NULL;

	jsonw_begin(&w);
	jsonw_str(&w, "code", code);
	jsonw_str(&w, "reason", reason);
	if (jsonw_end(&w, &json) < 0)
		json = NULL;
	respond(fd, status, "application/json", json ? json : "{}");
	free(json);
}

/* ------------------------------------------------------------- workers */

/* The controller's refusal of j passed on to the guest (503 when it did
 * not answer), counted. */
static void forward_refused(struct identity_ep *e, const struct job *j, bc_error *err)
{
	const char *reason = bc_error_get_detail(err, "reason");
	int status = ie_http_status(err->code);
	char why[200];

	snprintf(why, sizeof(why), "%s %s: %.120s", bc_code_name(err->code),
		 reason ? reason : "", err->message);
	if (status == 503)
		respond_error(j->fd, 503, "UNAVAILABLE", "controller-unavailable");
	else
		respond_error(j->fd, status, bc_code_name(err->code), reason ? reason : "");
	count(e, status == 503 ? IE_UNAVAILABLE : IE_REFUSED, j->id, j->src, why);
	bc_error_clear(err);
}

/* Node.ReportActivity for j; answer the guest {sandboxId, lifecycle,
 * changed}. */
static void run_activity(struct identity_ep *e, struct job *j)
{
	Bc__Node__V1__ActivityRequest q = BC__NODE__V1__ACTIVITY_REQUEST__INIT;
	ProtobufCMessage *resp = NULL;
	bc_error err = {0};
	struct jsonw w;
	char path[128], *json = NULL;
	int rc;

	q.capability_token = j->arg;
	q.instance_id = j->id;
	q.address = j->src;
	q.state = j->state;
	rpc_method_path(&bc__node__v1__node__descriptor, "ReportActivity", path, sizeof(path));
	rc = rpc_client_unary((rpc_client *)e->o.client, path, &q.base,
			      &bc__node__v1__activity_response__descriptor, &resp, IE_RPC_MS, &err);
	OPENSSL_cleanse(j->arg, sizeof(j->arg));
	if (rc < 0) {
		forward_refused(e, j, &err);
		return;
	}
	const Bc__Node__V1__ActivityResponse *a = (const void *)resp;

	jsonw_begin(&w);
	jsonw_str(&w, "sandboxId", a->sandbox_id);
	jsonw_str(&w, "lifecycle", a->lifecycle);
	jsonw_bool(&w, "changed", a->changed);
	if (jsonw_end(&w, &json) < 0)
		respond_error(j->fd, 503, "UNAVAILABLE", "answer-unwritable");
	else
		respond(j->fd, 200, "application/json", json);
	free(json);
	count(e, IE_REPORTED, j->id, j->src, a->lifecycle);
	protobuf_c_message_free_unpacked(resp, NULL);
}

/* Node.Attest or Node.RenewIdentity for j; answer the guest. */
static void run_forward(struct identity_ep *e, struct job *j)
{
	Bc__Node__V1__AttestRequest aq = BC__NODE__V1__ATTEST_REQUEST__INIT;
	Bc__Node__V1__RenewIdentityRequest rq = BC__NODE__V1__RENEW_IDENTITY_REQUEST__INIT;
	const bool attest = j->kind == J_ATTEST;
	ProtobufCMessage *resp = NULL;
	bc_error err = {0};
	char path[128];
	int rc;

	if (attest) {
		aq.bootstrap = j->arg;
		aq.instance_id = j->id;
		aq.address = j->src;
	} else {
		rq.capability_token = j->arg;
		rq.instance_id = j->id;
		rq.address = j->src;
	}
	rpc_method_path(&bc__node__v1__node__descriptor, attest ? "Attest" : "RenewIdentity",
			path, sizeof(path));
	rc = rpc_client_unary((rpc_client *)e->o.client, path, attest ? &aq.base : &rq.base,
			      &bc__node__v1__attest_response__descriptor, &resp, IE_RPC_MS, &err);
	OPENSSL_cleanse(j->arg, sizeof(j->arg));
	if (rc < 0) {
		forward_refused(e, j, &err);
		return;
	}
	const Bc__Node__V1__AttestResponse *a = (const void *)resp;
	struct jsonw w;
	char *json = NULL;

	jsonw_begin(&w);
	jsonw_str(&w, "epochId", a->epoch_id);
	jsonw_str(&w, "sandboxId", a->sandbox_id);
	if (attest)   /* a renewal does not repeat the caller's own token */
		jsonw_str(&w, "capabilityToken", a->capability_token);
	jsonw_i64(&w, "leaseExpiresAt", a->lease_expires_at);
	jsonw_i64(&w, "renewAfterSeconds", a->renew_after_seconds);
	if (jsonw_end(&w, &json) < 0) {
		respond_error(j->fd, 503, "UNAVAILABLE", "answer-unwritable");
	} else {
		respond(j->fd, 200, "application/json", json);
		OPENSSL_cleanse(json, strlen(json));
	}
	free(json);
	if (a->capability_token)
		OPENSSL_cleanse(a->capability_token, strlen(a->capability_token));
	count(e, attest ? IE_ATTESTED : IE_RENEWED, j->id, j->src, a->epoch_id);
	protobuf_c_message_free_unpacked(resp, NULL);
}

/* A warm claim's bootstrap value, bound to the instance; held in memory. */
static void run_fetch(struct identity_ep *e, struct job *j)
{
	char reason[RT_REASON_MAX] = "", *data = NULL;
	size_t len = 0;
	bool ok;
	int rc;
	struct inst *in;

	rc = bootdata_fetch(e->o.client, j->id, j->arg, (void **)&data, &len, reason);
	ok = rc == 0 && len > 0 && len <= IE_BODY_MAX;
	for (size_t i = 0; ok && i < len; i++)
		ok = data[i] > ' ' && data[i] <= '~';
	pthread_mutex_lock(&e->lock);
	in = inst_get(e, j->id, false);
	if (in && strcmp(in->ref, j->arg) == 0 && in->fetch == F_FETCHING) {
		if (ok) {
			memcpy(in->value, data, len);
			in->value[len] = '\0';
			in->fetch = F_HELD;
		} else if (rc == 0 || strncmp(reason, "NOT_FOUND", 9) == 0) {
			in->fetch = F_GONE;   /* not a value, or used and deleted: never handed out */
		} else {
			in->fetch = F_WANTED;
			in->fetch_at = mono_ms() + IE_FETCH_RETRY_MS;
		}
	}
	pthread_mutex_unlock(&e->lock);
	if (data) {
		OPENSSL_cleanse(data, len);
		free(data);
	}
	if (rc < 0)
		log_warn("instance %s: identity bootstrap %s not fetched: %s%s", j->id, j->arg, reason,
			 strncmp(reason, "NOT_FOUND", 9) ? " (retrying)" : "");
	else if (!ok)
		log_warn("instance %s: identity bootstrap %s is not a value: ignored", j->id, j->arg);
	else
		log_info("instance %s: identity bootstrap %s held for its guest", j->id, j->arg);
	wake(e);
}

static void *worker(void *arg)
{
	struct identity_ep *e = arg;

	for (;;) {
		struct job j;

		pthread_mutex_lock(&e->lock);
		while (e->n_jobs == 0 && !atomic_load(&e->stop))
			pthread_cond_wait(&e->cond, &e->lock);
		if (e->n_jobs == 0) {
			pthread_mutex_unlock(&e->lock);
			return NULL;
		}
		j = e->jobs[e->head];
		OPENSSL_cleanse(&e->jobs[e->head], sizeof(j));
		e->head = (e->head + 1) % IE_JOBS;
		e->n_jobs--;
		pthread_mutex_unlock(&e->lock);
		if (j.kind == J_FETCH) {
			if (!atomic_load(&e->stop))
				run_fetch(e, &j);
		} else if (atomic_load(&e->stop)) {
			respond_error(j.fd, 503, "UNAVAILABLE", "stopping");
		} else if (j.kind == J_STATE) {
			run_activity(e, &j);
		} else {
			run_forward(e, &j);
		}
		if (j.kind != J_FETCH) {
			struct inst *in;

			close(j.fd);
			pthread_mutex_lock(&e->lock);
			if ((in = inst_get(e, j.id, false)))
				in->busy = false;
			pthread_mutex_unlock(&e->lock);
		}
		OPENSSL_cleanse(&j, sizeof(j));
	}
}

/* Queue j (lock held): false when the queue is full. */
static bool enqueue(struct identity_ep *e, const struct job *j)
{
	if (e->n_jobs == IE_JOBS)
		return false;
	e->jobs[(e->head + e->n_jobs) % IE_JOBS] = *j;
	e->n_jobs++;
	pthread_cond_signal(&e->cond);
	return true;
}

/* ------------------------------------------------------------ listener */

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	OPENSSL_cleanse(c->buf, c->len);
	c->fd = -1;
	c->len = 0;
	c->st = C_FREE;
}

/* The held bootstrap of c's instance, answered and forgotten; true when
 * there was one. */
static bool serve_held(struct identity_ep *e, struct conn *c)
{
	char value[IE_BODY_MAX + 1];
	struct inst *in;
	bool held = false;

	pthread_mutex_lock(&e->lock);
	in = inst_get(e, c->id, false);
	if (in && in->fetch == F_HELD) {
		memcpy(value, in->value, sizeof(value));
		inst_forget_value(in);
		in->fetch = F_GONE;
		in->busy = false;
		held = true;
	}
	pthread_mutex_unlock(&e->lock);
	if (!held)
		return false;
	respond(c->fd, 200, "text/plain", value);
	OPENSSL_cleanse(value, sizeof(value));
	count(e, IE_SERVED, c->id, c->src, "");
	conn_close(c);
	return true;
}

static void end_wait(struct identity_ep *e, struct conn *c, bool answer)
{
	struct inst *in;

	pthread_mutex_lock(&e->lock);
	if ((in = inst_get(e, c->id, false)))
		in->busy = false;
	pthread_mutex_unlock(&e->lock);
	if (answer) {
		respond(c->fd, 204, "text/plain", NULL);
		count(e, IE_NO_BOOTSTRAP, c->id, c->src, "");
	}
	conn_close(c);
}

/* Admit a whole request of instance id: busy and rate checks, then the
 * instance is marked in flight. IE_RESULTS when admitted. */
static enum ie_result admit(struct identity_ep *e, const char *id)
{
	enum ie_result r = IE_RESULTS;
	struct inst *in;

	pthread_mutex_lock(&e->lock);
	in = inst_get(e, id, true);
	if (!in)
		r = IE_UNAVAILABLE;
	else if (in->busy)
		r = IE_BUSY;
	else if (!ie_rate_take(&in->rate, mono_ms()))
		r = IE_RATE_LIMITED;
	else
		in->busy = true;
	pthread_mutex_unlock(&e->lock);
	return r;
}

static void refuse(struct identity_ep *e, struct conn *c, enum ie_result r, const char *id)
{
	static const struct {
		int status;
		const char *code, *reason;
	} a[IE_RESULTS] = {
		[IE_MALFORMED] = {400, "INVALID_INPUT", "malformed-request"},
		[IE_UNKNOWN_SOURCE] = {403, "ACCESS_DENIED", "unknown-source"},
		[IE_BUSY] = {409, "CONFLICT", "request-in-flight"},
		[IE_RATE_LIMITED] = {429, "RESOURCE_EXHAUSTED", "rate-limited"},
		[IE_UNAVAILABLE] = {503, "UNAVAILABLE", "overloaded"},
	};

	respond_error(c->fd, a[r].status, a[r].code, a[r].reason);
	count(e, r, id, c->src, "");
	conn_close(c);
}

/* The job of a POST q on fd: its kind and argument; a state report's
 * body "STATE:TOKEN" (ie_parse checked its shape) split. */
static void job_of(const struct ie_req *q, int fd, struct job *ret)
{
	const char *colon = strchr(q->body, ':');

	*ret = (struct job){.kind = q->route == IE_ROUTE_ATTEST ? J_ATTEST : J_RENEW, .fd = fd};
	if (q->route != IE_ROUTE_STATE) {
		snprintf(ret->arg, sizeof(ret->arg), "%s", q->body);
		return;
	}
	ret->kind = J_STATE;   /* without a ':' (never: ie_parse) the state is "": refused */
	if (colon)
		snprintf(ret->state, sizeof(ret->state), "%.*s", (int)(colon - q->body), q->body);
	snprintf(ret->arg, sizeof(ret->arg), "%s", colon ? colon + 1 : q->body);
}

static void handle(struct identity_ep *e, struct conn *c, const struct ie_req *q)
{
	char id[RT_ID_MAX + 1] = "";
	enum ie_result r;
	struct job j;
	bool queued;

	if (!gs_source_instance(e->o.conv, c->src, id, NULL)) {
		refuse(e, c, IE_UNKNOWN_SOURCE, "");
		return;
	}
	if ((r = admit(e, id)) != IE_RESULTS) {
		refuse(e, c, r, id);
		return;
	}
	if (q->route == IE_ROUTE_BOOTSTRAP) {
		c->st = C_WAITING;
		c->deadline = mono_ms() + IE_POLL_MS;
		snprintf(c->id, sizeof(c->id), "%s", id);
		OPENSSL_cleanse(c->buf, c->len);
		serve_held(e, c);
		return;
	}
	job_of(q, c->fd, &j);
	snprintf(j.id, sizeof(j.id), "%s", id);
	snprintf(j.src, sizeof(j.src), "%s", c->src);
	pthread_mutex_lock(&e->lock);
	queued = enqueue(e, &j);
	if (!queued)
		inst_get(e, id, false)->busy = false;
	pthread_mutex_unlock(&e->lock);
	OPENSSL_cleanse(&j, sizeof(j));
	if (!queued) {
		refuse(e, c, IE_UNAVAILABLE, id);
		return;
	}
	OPENSSL_cleanse(c->buf, c->len);
	c->fd = -1;   /* the worker answers and closes it */
	conn_close(c);
}

static void conn_read(struct identity_ep *e, struct conn *c)
{
	struct ie_req q;
	ssize_t k;
	int r;

	if (c->st == C_WAITING) {   /* only the guest hanging up is expected */
		char b[64];

		k = recv(c->fd, b, sizeof(b), MSG_DONTWAIT);
		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
			end_wait(e, c, false);
		return;
	}
	k = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		if (c->len > 0)
			count(e, IE_MALFORMED, "", c->src, "closed mid-request");
		conn_close(c);
		return;
	}
	c->len += (size_t)k;
	r = ie_parse(c->buf, c->len, &q);
	if (r < 0) {
		char id[RT_ID_MAX + 1] = "";

		gs_source_instance(e->o.conv, c->src, id, NULL);
		refuse(e, c, IE_MALFORMED, id);
	} else if (r > 0) {
		handle(e, c, &q);
	}
	OPENSSL_cleanse(&q, sizeof(q));
}

static void do_accept(struct identity_ep *e)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(e->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct conn *c = NULL;

	if (fd < 0)
		return;
	for (size_t i = 0; i < IE_CONNS && !c; i++)
		if (e->conns[i].st == C_FREE)
			c = &e->conns[i];
	if (!c) {
		close(fd);
		count(e, IE_UNAVAILABLE, "", "?", "too many connections");
		return;
	}
	*c = (struct conn){.st = C_READING, .fd = fd, .deadline = mono_ms() + IE_CONN_MS};
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->src, sizeof(c->src));
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->src, sizeof(c->src));
}

static void rebind(struct identity_ep *e)
{
	uint16_t port = e->o.port ? e->o.port : BC_IDENTITY_PORT;
	struct conv_guest *cg = NULL;
	struct in_addr a;
	size_t n = 0;
	char gw[64];
	int fd;

	if (mono_ms() < e->rebind_at)
		return;
	e->rebind_at = mono_ms() + IE_REBIND_MS;
	conv_guests(e->o.conv, gw, &cg, &n);
	free(cg);
	if (e->lfd >= 0 && strcmp(gw, e->bound) == 0)
		return;
	if (e->lfd >= 0)
		close(e->lfd);
	e->lfd = -1;
	e->bound[0] = '\0';
	if (!*gw)
		return;
	if ((fd = gs_listen(gw, port, &a)) < 0) {
		if (-fd != e->bind_err)
			log_warn("identity endpoint: cannot listen on %s:%d: %s (retrying)", gw, port,
				 strerror(-fd));
		e->bind_err = -fd;
		return;
	}
	e->bind_err = 0;
	e->lfd = fd;
	snprintf(e->bound, sizeof(e->bound), "%s", gw);
	log_info("identity endpoint: listening on %s:%d", gw, port);
}

/* Follow the spec: the refs warm claims gave (fetch each once), and
 * forget instances it no longer names. */
static void sync_spec(struct identity_ep *e)
{
	struct conv_guest *cg = NULL;
	int64_t now = mono_ms();
	size_t n = 0;
	char gw[64];

	if (now < e->sync_at)
		return;
	e->sync_at = now + IE_SYNC_MS;
	conv_guests(e->o.conv, gw, &cg, &n);
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < n; i++) {
		struct inst *in = inst_get(e, cg[i].id, cg[i].idref[0] != '\0');

		if (!in)
			continue;
		in->seen_at = now;
		if (strcmp(in->ref, cg[i].idref) != 0) {
			snprintf(in->ref, sizeof(in->ref), "%s", cg[i].idref);
			inst_forget_value(in);
			in->fetch = *in->ref ? F_WANTED : F_NONE;
			in->fetch_at = 0;
		}
		if (in->fetch == F_WANTED && now >= in->fetch_at) {
			struct job j = {.kind = J_FETCH, .fd = -1};

			snprintf(j.id, sizeof(j.id), "%s", in->id);
			snprintf(j.arg, sizeof(j.arg), "%s", in->ref);
			if (enqueue(e, &j))
				in->fetch = F_FETCHING;
		}
	}
	for (size_t i = 0; i < IE_INSTS; i++) {
		struct inst *in = &e->insts[i];

		if (in->used && !in->busy && in->fetch != F_FETCHING && in->seen_at < now) {
			inst_forget_value(in);
			in->used = false;
		}
	}
	pthread_mutex_unlock(&e->lock);
	free(cg);
}

static void *run(void *arg)
{
	struct identity_ep *e = arg;
	struct pollfd pf[2 + IE_CONNS];
	struct conn *who[2 + IE_CONNS];

	while (!atomic_load(&e->stop)) {
		int64_t now = mono_ms();
		size_t n = 0;

		rebind(e);
		sync_spec(e);
		pf[n] = (struct pollfd){.fd = e->wake[0], .events = POLLIN};
		who[n++] = NULL;
		if (e->lfd >= 0) {
			pf[n] = (struct pollfd){.fd = e->lfd, .events = POLLIN};
			who[n++] = NULL;
		}
		for (size_t i = 0; i < IE_CONNS; i++) {
			struct conn *c = &e->conns[i];

			if (c->st == C_WAITING && serve_held(e, c))
				continue;
			if (c->st != C_FREE && now >= c->deadline) {
				if (c->st == C_WAITING) {
					end_wait(e, c, true);
				} else {
					count(e, IE_MALFORMED, "", c->src, "not sent within 2 s");
					conn_close(c);
				}
			}
			if (c->st == C_FREE)
				continue;
			pf[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
			who[n++] = c;
		}
		if (poll(pf, n, 250) <= 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (!pf[i].revents)
				continue;
			if (pf[i].fd == e->wake[0]) {
				char b[16];

				while (read(e->wake[0], b, sizeof(b)) > 0)
					;
			} else if (pf[i].fd == e->lfd && !who[i]) {
				do_accept(e);
			} else if (who[i]->st != C_FREE) {
				conn_read(e, who[i]);
			}
		}
	}
	return NULL;
}

int ie_start(const struct ie_opts *o, struct identity_ep **ret)
{
	struct identity_ep *e = xcalloc(1, sizeof(*e));
	int rc = 0;

	e->o = *o;
	e->lfd = -1;
	for (size_t i = 0; i < IE_CONNS; i++)
		e->conns[i].fd = -1;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	if (pipe2(e->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
		rc = -errno;
		free(e);
		return rc;
	}
	for (; e->n_workers < IE_WORKERS; e->n_workers++)
		if ((rc = pthread_create(&e->workers[e->n_workers], NULL, worker, e)) != 0)
			break;
	if (e->n_workers < IE_WORKERS || (rc = pthread_create(&e->th, NULL, run, e)) != 0) {
		atomic_store(&e->stop, true);
		pthread_cond_broadcast(&e->cond);
		for (size_t i = 0; i < e->n_workers; i++)
			pthread_join(e->workers[i], NULL);
		close(e->wake[0]);
		close(e->wake[1]);
		free(e);
		return -rc;
	}
	*ret = e;
	return 0;
}

void ie_stop(struct identity_ep *e)
{
	if (!e)
		return;
	atomic_store(&e->stop, true);
	wake(e);
	pthread_join(e->th, NULL);
	pthread_mutex_lock(&e->lock);
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	for (size_t i = 0; i < e->n_workers; i++)   /* each drains the queue first */
		pthread_join(e->workers[i], NULL);
	for (size_t i = 0; i < IE_CONNS; i++)
		if (e->conns[i].st != C_FREE)
			conn_close(&e->conns[i]);
	if (e->lfd >= 0)
		close(e->lfd);
	close(e->wake[0]);
	close(e->wake[1]);
	OPENSSL_cleanse(e->insts, sizeof(e->insts));
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e);
}

uint64_t ie_count(struct identity_ep *e, enum ie_result r)
{
	return e && r < IE_RESULTS ? atomic_load(&e->counts[r]) : 0;
}

void ie_metrics_render(FILE *out, struct identity_ep *e)
{
	if (!e)
		return;
	metrics_head(out, "bcd_identity_requests_total", "counter",
		     "requests to the identity endpoint by result (attested, renewed, reported, "
		     "served: answered; the rest refused)");
	for (int r = 0; r < IE_RESULTS; r++) {
		char label[48];

		snprintf(label, sizeof(label), "result=\"%s\"", result_names[r]);
		metrics_line(out, "bcd_identity_requests_total", label,
			     (double)atomic_load(&e->counts[r]));
	}
}
