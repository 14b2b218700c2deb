/* tunnels.c: the tunnel gateway. Tunnels.Connect carries one SSH
 * connection between the caller of Sandboxes.Exec and the guest's sshd:
 * its first message presents the grant's single-use ticket (gRPC), or the
 * WebSocket route's path carries it (the JSON/HTTP transport, docs/
 * http.md); any replica takes it. The replica spends the ticket, re-checks
 * the caller, dials the sandbox's host (node_tunnel.h: bcd's Agent.Tunnel,
 * which connects to the guest's port 22 from the host) and relays bytes
 * both ways, one thread per direction, each blocking on the other side's
 * send: a slow reader slows the writer and nothing queues beyond one
 * message per direction.
 *
 * While the tunnel is open the handler's own thread watches it: every
 * TUNNEL_POLL_SECONDS it reads whether Tunnels.Close asked for it to close
 * or the sandbox is no longer ready (deleted, expired), and every
 * tunnel_recheck_seconds (default 60) it re-authenticates the caller's token and
 * re-decides compute:sandboxes:exec on the sandbox (never the instance):
 * a revoked token, a withdrawn policy or a sandbox that cannot be exec'd
 * into closes the tunnel. The tunnels row (migration 0016) records who,
 * when, where and why it closed; tunnel.opened and tunnel.closed are
 * published. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "auth.h"
#include "authz.h"
#include "bc/compute/v1/tunnels.pb-c.h"
#include "bc/node/v1/agent.pb-c.h"
#include "db.h"
#include "event_data.h"
#include "log.h"
#include "node_tunnel.h"
#include "outbox.h"
#include "rowmsg.h"
#include "sandbox_exec.h"
#include "sandboxes.h"
#include "streams.h"
#include "tunnels.h"
#include "util.h"
#include "validate.h"

static atomic_int_fast64_t open_tunnels;

int64_t tunnels_open_count(void)
{
	return atomic_load(&open_tunnels);
}

/* ------------------------------------------------------------- the row */

/* What the relay keeps of its tunnels row. */
struct tun {
	char id[64], tenant[64], sandbox[64], instance[64], node[64], token_hash[65];
};

/* The ticket of the first message: its ticket field, or the ticket=
 * parameter of the WebSocket route's path. NULL when there is none. */
static const char *first_ticket(const Bc__Compute__V1__TunnelFrame *f, char *buf, size_t len)
{
	const char *q, *v;
	size_t n;

	if (f->ticket && *f->ticket)
		return f->ticket;
	if (!f->path || !(q = strchr(f->path, '?')))
		return NULL;
	for (v = q + 1; v && *v; v = strchr(v, '&') ? strchr(v, '&') + 1 : NULL) {
		if (strncmp(v, "ticket=", 7) != 0)
			continue;
		v += 7;
		n = strcspn(v, "&");
		if (n == 0 || n >= len)
			return NULL;
		memcpy(buf, v, n);
		buf[n] = '\0';
		return buf;
	}
	return NULL;
}

/* Spend the ticket: the row's opened_at and replica, tunnel.opened. */
struct spend {
	const char *hash, *replica;
	struct tun *t;
	bool found;
};

static int spend_tx(struct db *d, void *arg, bc_error *err)
{
	enum { SP_ID, SP_TENANT, SP_SANDBOX, SP_INSTANCE, SP_NODE, SP_TOKEN };
	struct spend *a = arg;
	struct evd_tunnel ev = {0};
	_cleanup_free_ char *json = NULL, *subj = NULL;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, a->hash);
	dbp_str(&p, a->replica);
	rc = db_exec(d, &r, "UPDATE tunnels SET opened_at = now(), replica = $2 WHERE ticket_hash "
		     "= $1 AND opened_at IS NULL AND closed_at IS NULL AND close_requested_at IS "
		     "NULL AND ticket_expires_at > now() RETURNING id, tenant_id, sandbox_id, "
		     "instance_id, node_id, token_hash", &p);
	if (rc < 0)
		return db_fail(err, rc);
	a->found = PQntuples(r) == 1;
	if (a->found) {
		struct tun *t = a->t;

		snprintf(t->id, sizeof(t->id), "%s", db_val(r, 0, SP_ID));
		snprintf(t->tenant, sizeof(t->tenant), "%s", db_val(r, 0, SP_TENANT));
		snprintf(t->sandbox, sizeof(t->sandbox), "%s", db_val(r, 0, SP_SANDBOX));
		snprintf(t->instance, sizeof(t->instance), "%s", db_val(r, 0, SP_INSTANCE));
		snprintf(t->node, sizeof(t->node), "%s", db_val(r, 0, SP_NODE));
		snprintf(t->token_hash, sizeof(t->token_hash), "%s", db_val(r, 0, SP_TOKEN));
	}
	PQclear(r);
	if (!a->found)
		return 0;
	ev = (struct evd_tunnel){.sandbox_id = a->t->sandbox, .tunnel_id = a->t->id,
				 .replica = a->replica};
	subj = xasprintf("instance/%s", a->t->instance);
	if ((rc = evd_tunnel("tunnel.opened", &ev, &json)) < 0 ||
	    (rc = event_publish(d, "tunnel.opened", subj, a->t->tenant, json)) < 0)
		return db_fail(err, rc);
	return 0;
}

struct close_arg {
	const struct tun *t;
	const char *reason;
};

static int close_tx(struct db *d, void *arg, bc_error *err)
{
	const struct close_arg *a = arg;
	struct evd_tunnel ev = {.sandbox_id = a->t->sandbox, .tunnel_id = a->t->id,
				.reason = a->reason};
	_cleanup_free_ char *json = NULL, *subj = NULL;
	struct dbp p = {0};
	int rc;

	dbp_str(&p, a->t->id);
	dbp_str(&p, a->reason);
	if ((rc = db_exec(d, NULL, "UPDATE tunnels SET closed_at = now(), close_reason = $2 WHERE "
			  "id = $1 AND closed_at IS NULL", &p)) < 0)
		return db_fail(err, rc);
	subj = xasprintf("instance/%s", a->t->instance);
	if ((rc = evd_tunnel("tunnel.closed", &ev, &json)) < 0 ||
	    (rc = event_publish(d, "tunnel.closed", subj, a->t->tenant, json)) < 0)
		return db_fail(err, rc);
	return 0;
}

/* Record the end (best effort: a row left open is closed by nobody else,
 * so this retries the pool once more; the log says it either way). */
static void tunnel_close_row(rpc_call *c, const struct tun *t, const char *reason)
{
	struct close_arg a = {.t = t, .reason = reason};
	bc_error err = {0};

	if (stream_db_take(c, &err) == 0 &&
	    db_tx(ctl_db(c), "READ COMMITTED", close_tx, &a, &err) == 0) {
		stream_db_give(c);
		return;
	}
	stream_db_give(c);
	log_warn("tunnel %s: cannot record its end (%s): %s", t->id, reason, err.message);
}

/* ------------------------------------------------------------ decisions */

/* Re-authenticate the tunnel's caller by its token and re-decide exec on
 * its sandbox, with the call's principal replaced by the caller's (the
 * stream's admission does not depend on it: streams.c). With a pool
 * connection held. */
static int recheck(rpc_call *c, const struct tun *t, bc_error *err)
{
	struct principal *p = rpc_call_principal(c);
	struct sbx_brief b;
	int rc;

	if ((rc = auth_token_hash(ctl_db(c), t->token_hash, p, err)) < 0)
		return rc;
	if (strcmp(p->tenant_id, t->tenant) != 0 && !auth_is_operator(p))
		return bc_error_set(err, BC_NOT_FOUND, "sandbox %s not found", t->sandbox);
	if ((rc = sbx_decide_brief(c, t->tenant, t->sandbox, "compute:sandboxes:exec", &b,
				   err)) < 0 ||
	    (rc = sbx_exec_runnable(t->sandbox, &b, err)) < 0)
		return rc;
	if (strcmp(b.instance_id, t->instance) != 0)
		return bc_error_set(err, BC_INVALID_STATE, "sandbox %s runs another instance now",
				    t->sandbox);
	return 0;
}

/* Tunnels.Close asked, or the sandbox is gone or expired: the reason, or
 * NULL to stay open. */
static const char *poll_closed(rpc_call *c, const struct tun *t, char *buf, size_t len)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	bc_error err = {0};
	const char *why = NULL;

	if (stream_db_take(c, &err) < 0)
		return NULL; /* busy pool: ask again at the next poll */
	dbp_str(&p, t->id);
	if (db_exec(ctl_db(c), &r, "SELECT t.close_requested_at IS NOT NULL, s.state, "
		    "s.expires_at <= now() FROM tunnels t JOIN sandboxes s ON s.id = t.sandbox_id "
		    "WHERE t.id = $1", &p) == 0 && PQntuples(r) == 1) {
		enum { PC_CLOSE_REQUESTED, PC_SANDBOX_STATE, PC_EXPIRED };

		if (db_bool(r, 0, PC_CLOSE_REQUESTED))
			why = "closed by Tunnels.Close";
		else if (strcmp(db_val(r, 0, PC_SANDBOX_STATE), "ready") != 0)
			why = buf, snprintf(buf, len, "sandbox %s is %s", t->sandbox,
					    db_val(r, 0, PC_SANDBOX_STATE));
		else if (db_bool(r, 0, PC_EXPIRED))
			why = buf, snprintf(buf, len, "sandbox %s expired", t->sandbox);
	}
	PQclear(r);
	stream_db_give(c);
	return why;
}

/* ---------------------------------------------------------------- relay */

struct relay {
	rpc_call *call;
	struct node_tun node;     /* gRPC (node.st) or raw (node.raw) */
	const struct tun *t;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	int running;              /* pumps not yet returned */
	char reason[160];         /* the first end's cause */
};

static void relay_end(struct relay *rl, const char *reason)
{
	pthread_mutex_lock(&rl->mu);
	if (!rl->stop) {
		rl->stop = true;
		snprintf(rl->reason, sizeof(rl->reason), "%s", reason);
	}
	pthread_cond_broadcast(&rl->cv);
	pthread_mutex_unlock(&rl->mu);
}

static bool relay_stopped(struct relay *rl)
{
	bool s;

	pthread_mutex_lock(&rl->mu);
	s = rl->stop;
	pthread_mutex_unlock(&rl->mu);
	return s;
}

static void pump_done(struct relay *rl)
{
	pthread_mutex_lock(&rl->mu);
	rl->running--;
	pthread_cond_broadcast(&rl->cv);
	pthread_mutex_unlock(&rl->mu);
}

/* The caller's bytes on their way to the host: the pieces of each message
 * (rpc_call_read hands them over as gRPC's TLS layer left them, a few KiB
 * each) gathered into writes of up to `cap` bytes: one TLS write of 64 KiB
 * (tlsconn's chunk) to a raw host, one TunnelChunk of up to
 * TUNNEL_CHUNK_MAX (what bcd takes) to a gRPC one. */
#define UP_RAW_CAP (64 * 1024)
#define FRAME_DATA_FIELD 2 /* bc.compute.v1.TunnelFrame.data */

struct up {
	struct relay *rl;
	uint8_t *buf;
	size_t n, cap;
};

/* p to the host: -EHOSTDOWN when it cannot take it (a code no receive
 * returns: rpc_call_read passes it through). */
static int up_write(struct up *u, const uint8_t *p, size_t len)
{
	Bc__Node__V1__TunnelChunk ch = BC__NODE__V1__TUNNEL_CHUNK__INIT;
	int r;

	if (u->rl->node.raw) {
		r = tlsc_write_all(u->rl->node.raw, p, len);
	} else {
		ch.data.data = (uint8_t *)p;
		ch.data.len = len;
		r = rpc_stream_send(u->rl->node.st, &ch.base);
	}
	return r < 0 ? -EHOSTDOWN : 0;
}

static int up_flush(struct up *u)
{
	size_t n = u->n;

	u->n = 0;
	return n ? up_write(u, u->buf, n) : 0;
}

/* rpc_read_fn: one piece of a caller message; a piece of at least `cap`
 * bytes (a WebSocket message) goes as it is. */
static int up_piece(void *arg, const uint8_t *p, size_t len)
{
	struct up *u = arg;

	while (len > 0) {
		size_t k;

		if (u->n == 0 && len >= u->cap) {
			k = u->rl->node.raw ? len : u->cap;
			if (up_write(u, p, k) < 0)
				return -EHOSTDOWN;
		} else {
			k = u->cap - u->n < len ? u->cap - u->n : len;
			memcpy(u->buf + u->n, p, k);
			u->n += k;
			if (u->n == u->cap && up_flush(u) < 0)
				return -EHOSTDOWN;
		}
		p += k;
		len -= k;
	}
	return 0;
}

/* The caller to the host. The caller's half-close half-closes the host's
 * side; the host's answer still flows down. */
static void *pump_up(void *arg)
{
	struct relay *rl = arg;
	struct up u = {.rl = rl, .cap = rl->node.raw ? UP_RAW_CAP : TUNNEL_CHUNK_MAX};
	int r;

	u.buf = xmalloc(u.cap);
	while (!relay_stopped(rl)) {
		r = rpc_call_read(rl->call, FRAME_DATA_FIELD, up_piece, &u, 1000);
		if (r == -ETIMEDOUT)
			continue;
		if (r == 0) {
			if (rl->node.raw)
				tlsc_close_write(rl->node.raw);
			else
				rpc_stream_close_send(rl->node.st);
			break;
		}
		if (r == 1)
			r = up_flush(&u);
		if (r == -EHOSTDOWN) {
			relay_end(rl, "host closed");
			break;
		}
		if (r < 0) {
			relay_end(rl, r == -EMSGSIZE ? "caller sent an oversized message" :
				  "caller went away");
			break;
		}
	}
	free(u.buf);
	pump_done(rl);
	return NULL;
}

/* The host to the caller over the raw protocol: as much as has arrived,
 * up to TUNNEL_CHUNK_MAX, per message. */
static void pump_down_raw(struct relay *rl)
{
	Bc__Compute__V1__TunnelFrame f = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	uint8_t *buf = xmalloc(TUNNEL_CHUNK_MAX);

	while (!relay_stopped(rl)) {
		ssize_t n = tlsc_read(rl->node.raw, buf, TUNNEL_CHUNK_MAX, 1000);

		if (n == -ETIMEDOUT)
			continue;
		if (n <= 0) {
			relay_end(rl, n == 0 ? "host closed" : "host closed: the connection broke");
			break;
		}
		f.data.data = buf;
		f.data.len = (size_t)n;
		if (rpc_call_send(rl->call, &f.base) < 0) {
			relay_end(rl, "caller went away");
			break;
		}
	}
	free(buf);
}

/* The host to the caller; the host's end ends the tunnel. */
static void *pump_down(void *arg)
{
	struct relay *rl = arg;
	Bc__Compute__V1__TunnelFrame f = BC__COMPUTE__V1__TUNNEL_FRAME__INIT;
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	int r;

	if (rl->node.raw) {
		pump_down_raw(rl);
		pump_done(rl);
		return NULL;
	}
	while (!relay_stopped(rl)) {
		r = rpc_stream_recv(rl->node.st, &bc__node__v1__tunnel_chunk__descriptor, &m, 1000,
				    &err);
		if (r == -ETIMEDOUT)
			continue;
		if (r <= 0) {
			char why[160];

			snprintf(why, sizeof(why), "host closed%s%.120s", r < 0 ? ": " : "",
				 r < 0 ? err.message : "");
			relay_end(rl, why);
			break;
		}
		f.data = ((Bc__Node__V1__TunnelChunk *)m)->data;
		r = f.data.len ? rpc_call_send(rl->call, &f.base) : 0;
		protobuf_c_message_free_unpacked(m, NULL);
		if (r < 0) {
			relay_end(rl, "caller went away");
			break;
		}
	}
	pump_done(rl);
	return NULL;
}

/* Watch the open tunnel until it ends: the pumps, Tunnels.Close, the
 * sandbox, the periodic re-check, the server's shutdown. */
static void relay_watch(struct relay *rl)
{
	int64_t next_poll = mono_ms() + TUNNEL_POLL_SECONDS * 1000;
	int64_t every = (int64_t)ctl_app(rl->call)->cfg.tunnel_recheck_seconds * 1000;
	int64_t next_check = mono_ms() + every;
	char buf[160];
	const char *why;
	bc_error err;

	for (;;) {
		struct timespec ts = deadline_ts(1000);

		pthread_mutex_lock(&rl->mu);
		if (!rl->stop && rl->running > 0)
			pthread_cond_timedwait(&rl->cv, &rl->mu, &ts);
		if (rl->stop || rl->running == 0) {
			pthread_mutex_unlock(&rl->mu);
			break;
		}
		pthread_mutex_unlock(&rl->mu);
		if (ctl_app(rl->call)->stopping) {
			relay_end(rl, "the controller replica is stopping");
			break;
		}
		if (mono_ms() >= next_poll) {
			next_poll = mono_ms() + TUNNEL_POLL_SECONDS * 1000;
			if ((why = poll_closed(rl->call, rl->t, buf, sizeof(buf)))) {
				relay_end(rl, why);
				break;
			}
		}
		if (mono_ms() >= next_check) {
			next_check = mono_ms() + every;
			memset(&err, 0, sizeof(err));
			if (stream_db_take(rl->call, &err) < 0)
				continue; /* a busy pool delays the re-check, never skips it */
			if (recheck(rl->call, rl->t, &err) < 0) {
				snprintf(buf, sizeof(buf), "re-check refused: %.120s", err.message);
				relay_end(rl, buf);
			}
			stream_db_give(rl->call);
		}
	}
}

/* Start the pumps, watch, stop them. The end's reason in rl->reason. */
static int relay_run(struct relay *rl)
{
	pthread_condattr_t ca;
	pthread_t up, down;
	int e;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&rl->mu, NULL);
	pthread_cond_init(&rl->cv, &ca);
	pthread_condattr_destroy(&ca);
	rl->running = 2;
	if ((e = pthread_create(&up, NULL, pump_up, rl)) != 0) {
		snprintf(rl->reason, sizeof(rl->reason), "cannot start a relay thread");
		goto out;
	}
	if ((e = pthread_create(&down, NULL, pump_down, rl)) != 0) {
		relay_end(rl, "cannot start a relay thread");
		pthread_join(up, NULL);
		goto out;
	}
	atomic_fetch_add(&open_tunnels, 1);
	relay_watch(rl);
	relay_end(rl, "closed");
	/* a pump blocked in a send to a peer that does not read: cancel */
	if (rl->node.raw)
		tlsc_cancel(rl->node.raw);
	else
		rpc_stream_cancel(rl->node.st);
	rpc_call_cancel(rl->call);
	pthread_join(up, NULL);
	pthread_join(down, NULL);
	atomic_fetch_sub(&open_tunnels, 1);
out:
	pthread_cond_destroy(&rl->cv);
	pthread_mutex_destroy(&rl->mu);
	return e ? -e : 0;
}

/* -------------------------------------------------------------- Connect */

/* Wait for the first message and spend its ticket; then re-check the
 * caller and dial the host. *ret_node on success. */
static int tunnel_open(rpc_call *c, struct tun *t, struct node_tun *ret_node, bc_error *err)
{
	struct ctl_app *app = ctl_app(c);
	ProtobufCMessage *m = NULL;
	char buf[128], hash[65];
	const char *ticket;
	struct spend s = {.hash = hash, .replica = app->cfg.replica, .t = t};
	int r;

	r = rpc_call_recv(c, &m, TUNNEL_FIRST_MESSAGE_MS);
	if (r == -ETIMEDOUT)
		return bc_error_set(err, BC_DEADLINE_EXCEEDED, "no ticket within %d s",
				    TUNNEL_FIRST_MESSAGE_MS / 1000);
	if (r <= 0)
		return bc_error_set(err, BC_INVALID_INPUT, "the first message must carry a ticket");
	ticket = first_ticket((const void *)m, buf, sizeof(buf));
	if (!ticket || strlen(ticket) > 100) {
		protobuf_c_message_free_unpacked(m, NULL);
		return invalid(err, "ticket", "the first message must carry the grant's ticket");
	}
	sha256_hex(ticket, strlen(ticket), hash);
	protobuf_c_message_free_unpacked(m, NULL);
	if ((r = stream_db_take(c, err)) < 0)
		return r;
	if ((r = db_tx(ctl_db(c), "READ COMMITTED", spend_tx, &s, err)) == 0 && !s.found) {
		log_info("tunnel: refused a ticket from %s: unknown, expired or already used",
			 rpc_call_peer(c));
		r = bc_error_set(err, BC_UNAUTHENTICATED,
				 "the ticket is invalid, expired or already used");
	}
	if (r == 0 && (r = recheck(c, t, err)) < 0) {
		stream_db_give(c);
		snprintf(buf, sizeof(buf), "refused at open: %.100s", err->message);
		tunnel_close_row(c, t, buf);
		return r;
	}
	if (r == 0 && (r = node_tunnel_dial(app, ctl_db(c), t->node, t->instance, t->id, ret_node,
					    err)) < 0) {
		stream_db_give(c);
		snprintf(buf, sizeof(buf), "host unreachable: %.100s", err->message);
		tunnel_close_row(c, t, buf);
		return r;
	}
	stream_db_give(c);
	return r;
}

static int tunnel_connect(rpc_call *c, bc_error *err)
{
	struct principal *p = rpc_alloc(c, sizeof(*p));
	struct relay rl = {.call = c};
	struct tun t = {0};
	int r;

	/* the principal the re-checks fill in (pre_call's is the stranger's) */
	rpc_call_set_principal(c, p, NULL);
	if ((r = tunnel_open(c, &t, &rl.node, err)) < 0)
		return r;
	rl.t = &t;
	log_info("tunnel %s: open: sandbox %s instance %s on node %s for %s", t.id, t.sandbox,
		 t.instance, t.node, p->id);
	r = relay_run(&rl);
	node_tun_free(&rl.node);
	log_info("tunnel %s: closed: %s", t.id, rl.reason);
	tunnel_close_row(c, &t, rl.reason);
	if (r < 0)
		return bc_error_set(err, BC_UNAVAILABLE, "%s", rl.reason);
	if (strncmp(rl.reason, "re-check refused", 16) == 0 ||
	    strcmp(rl.reason, "closed by Tunnels.Close") == 0)
		return bc_error_set(err, BC_ACCESS_DENIED, "tunnel closed: %s", rl.reason);
	return 0;
}

/* ------------------------------------------------------------ retention */

int tunnels_purge(struct db *d, int retention_seconds)
{
	return db_purge(d, "WITH g AS (DELETE FROM tunnels WHERE id IN (SELECT id FROM tunnels "
			"WHERE coalesce(closed_at, ticket_expires_at) < now() - make_interval(secs "
			"=> $1) AND (closed_at IS NOT NULL OR opened_at IS NULL) LIMIT $2) RETURNING "
			"1) SELECT count(*) FROM g", retention_seconds, TUNNELS_PURGE_BATCH);
}

/* ---------------------------------------------------------- List, Close */

#define TUN_COLS                                                                          \
	"id, tenant_id, sandbox_id, instance_id, node_id, identity_id, CASE WHEN closed_at "  \
	"IS NOT NULL THEN 'closed' WHEN opened_at IS NOT NULL THEN 'open' WHEN "               \
	"ticket_expires_at <= now() THEN 'expired' ELSE 'issued' END, " MS("created_at")      \
	", coalesce(" MS("opened_at") ", 0), coalesce(" MS("closed_at") ", 0), "              \
	"coalesce(close_reason, ''), coalesce(replica, ''), " MS("ticket_expires_at") ", "    \
	MS("cert_valid_before")

enum {
	TUN_ID, TUN_TENANT, TUN_SANDBOX, TUN_INSTANCE, TUN_NODE, TUN_IDENTITY, TUN_STATE,
	TUN_CREATED, TUN_OPENED, TUN_CLOSED, TUN_REASON, TUN_REPLICA, TUN_TICKET_EXPIRES,
	TUN_CERT_VALID_BEFORE, TUN_NCOLS
};
COLS_CHECK(TUN_COLS, TUN_NCOLS)

static Bc__Compute__V1__Tunnel *tun_from_row(rpc_call *c, const PGresult *r, int i)
{
	Bc__Compute__V1__Tunnel *x = rpc_new(c, &bc__compute__v1__tunnel__descriptor);

	x->id = row_str(c, r, i, TUN_ID);
	x->tenant_id = row_str(c, r, i, TUN_TENANT);
	x->sandbox_id = row_str(c, r, i, TUN_SANDBOX);
	x->instance_id = row_str(c, r, i, TUN_INSTANCE);
	x->node_id = row_str(c, r, i, TUN_NODE);
	x->identity_id = row_str(c, r, i, TUN_IDENTITY);
	x->state = row_str(c, r, i, TUN_STATE);
	x->created_at = db_i64(r, i, TUN_CREATED);
	x->opened_at = db_i64(r, i, TUN_OPENED);
	x->closed_at = db_i64(r, i, TUN_CLOSED);
	x->close_reason = row_str(c, r, i, TUN_REASON);
	x->replica = row_str(c, r, i, TUN_REPLICA);
	x->ticket_expires_at = db_i64(r, i, TUN_TICKET_EXPIRES);
	x->cert_valid_before = db_i64(r, i, TUN_CERT_VALID_BEFORE);
	return x;
}

static Bc__Compute__V1__Tunnel **tuns_from(rpc_call *c, const PGresult *r, size_t *ret_n)
{
	int n = PQntuples(r);
	Bc__Compute__V1__Tunnel **v = rpc_alloc(c, sizeof(*v) * (size_t)(n ? n : 1));

	for (int i = 0; i < n; i++)
		v[i] = tun_from_row(c, r, i);
	*ret_n = (size_t)n;
	return v;
}

/* The sandbox the request names, decided for action. */
static int tun_scope(rpc_call *c, const char *tenant_id, const char *sandbox_id,
		     const char *action, const char **ret_tenant, bc_error *err)
{
	struct sbx_brief b;
	int r;

	if ((r = auth_tenant(c, tenant_id, ret_tenant, err)) < 0 ||
	    (r = check_id(err, "sandboxId", "sbx", sandbox_id)) < 0)
		return r;
	return sbx_decide_brief(c, *ret_tenant, sandbox_id, action, &b, err);
}

static int tun_list(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		    bc_error *err)
{
	const Bc__Compute__V1__ListTunnelsRequest *q = (const void *)m;
	Bc__Compute__V1__ListTunnelsResponse *a;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = tun_scope(c, q->tenant_id, q->sandbox_id, "compute:tunnels:read", &tenant,
			    err)) < 0)
		return rc;
	dbp_str(&p, q->sandbox_id);
	dbp_str(&p, tenant);
	dbp_bool(&p, q->closed);
	if ((rc = db_exec(ctl_db(c), &r, "SELECT " TUN_COLS " FROM tunnels WHERE sandbox_id = $1 "
			  "AND tenant_id = $2 AND ($3 OR (closed_at IS NULL AND opened_at IS NOT "
			  "NULL)) ORDER BY created_at DESC, id LIMIT 200", &p)) < 0)
		return db_fail(err, rc);
	a = rpc_new(c, &bc__compute__v1__list_tunnels_response__descriptor);
	a->items = tuns_from(c, r, &a->n_items);
	PQclear(r);
	*ret = &a->base;
	return 0;
}

static int tun_close(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Compute__V1__CloseTunnelsRequest *q = (const void *)m;
	Bc__Compute__V1__CloseTunnelsResponse *a;
	const char *tenant;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = tun_scope(c, q->tenant_id, q->sandbox_id, "compute:tunnels:close", &tenant,
			    err)) < 0 ||
	    (*q->tunnel_id && (rc = check_id(err, "tunnelId", "tun", q->tunnel_id)) < 0))
		return rc;
	dbp_str(&p, q->sandbox_id);
	dbp_str(&p, tenant);
	dbp_str(&p, q->tunnel_id);
	/* an unused ticket closes at once; an open tunnel's replica closes it
	 * within TUNNEL_POLL_SECONDS */
	if ((rc = db_exec(ctl_db(c), &r, "UPDATE tunnels SET close_requested_at = now(), "
			  "closed_at = CASE WHEN opened_at IS NULL THEN now() END, close_reason = "
			  "CASE WHEN opened_at IS NULL THEN 'closed by Tunnels.Close before use' END "
			  "WHERE sandbox_id = $1 AND tenant_id = $2 AND ($3 = '' OR id = $3) AND "
			  "closed_at IS NULL AND close_requested_at IS NULL RETURNING " TUN_COLS,
			  &p)) < 0)
		return db_fail(err, rc);
	a = rpc_new(c, &bc__compute__v1__close_tunnels_response__descriptor);
	a->items = tuns_from(c, r, &a->n_items);
	PQclear(r);
	if (*q->tunnel_id && a->n_items == 0)
		return bc_error_set(err, BC_NOT_FOUND, "no open tunnel %s into sandbox %s",
				    q->tunnel_id, q->sandbox_id);
	*ret = &a->base;
	return 0;
}

const struct rpc_handler *tunnels_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Connect", RPC_BIDI, {.bidi = tunnel_connect}},
		{"List", RPC_UNARY, {.unary = tun_list}},
		{"Close", RPC_UNARY, {.unary = tun_close}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
