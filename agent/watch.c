/* watch.c: the spec-watch thread (see watch.h).
 *
 * The stream carries NodeUpdate{spec | command}. A spec is fenced by
 * generation (state_accept_spec): an older or equal one is refused and
 * logged ("spec generation N refused: applied M"), never applied. A spec is
 * in the file system (renamed into place) before the converge thread sees
 * it, and flushed to the disk right after it was handed over. While
 * disconnected the converge thread keeps converging the last spec.
 *
 * A burst of updates already received (the controller sends a spec per
 * change, faster than a spec can be persisted) is taken whole before any
 * is handled: of consecutive specs only the newest is persisted and
 * converged (each is the node's whole desired state, so nothing a skipped
 * one said is lost), and commands keep their place after the specs sent
 * before them. One fsync per burst instead of one per generation.
 *
 * Commands: each is persisted before anything else happens and run off
 * this thread by its lane's workers (commands.c); one whose id came before
 * is ignored, so none runs twice. A kind this bcd does not know is answered
 * ok=false "UNSUPPORTED: <kind>" in the next report. */
#include "watch.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "join.h"
#include "log.h"
#include "util.h"

#define RECV_POLL_MS 1000

static void handle_command(struct watch *w, const Bc__Node__V1__Command *cmd)
{
	if (w->commands) {
		cmds_receive(w->commands, cmd);
		return;
	}
	if (!state_cmds_has(w->cmds, cmd->id) && state_cmds_add(w->cmds, cmd->id) == 0)
		conv_add_result(w->conv, cmd->id, false, "UNSUPPORTED: no command runner");
}

static int handle_spec(struct watch *w, const Bc__Node__V1__NodeSpec *spec)
{
	uint64_t applied = atomic_load(&w->applied);
	Bc__Node__V1__NodeSpec *copy = NULL;
	int e;

	if (w->node_id && *spec->node_id && strcmp(spec->node_id, w->node_id) != 0) {
		log_error("spec generation %" PRIu64 " refused: it is for node %.64s, this is %s",
			  spec->generation, spec->node_id, w->node_id);
		return -EINVAL;
	}
	e = state_take_spec(w->state_dir, &applied, spec, &copy);
	if (e == -ESTALE)
		log_warn("spec generation %" PRIu64 " refused: applied %" PRIu64, spec->generation,
			 applied);
	else if (e == -EINVAL)
		log_error("spec generation %" PRIu64 " refused: %zu instances, %zu volumes: too many",
			  spec->generation, spec->n_instances, spec->n_volumes);
	else if (e < 0)
		log_error("spec generation %" PRIu64 ": cannot persist it (%s): not applied",
			  spec->generation, strerror(-e));
	if (e < 0)
		return e;
	atomic_store(&w->applied, applied);
	log_info("spec generation %" PRIu64 " accepted (%zu instances)", spec->generation,
		 spec->n_instances);
	conv_submit(w->conv, copy);
	conv_confirm(w->conv);  /* after the submit: a fence lifts on this spec */
	/* in the file system already; to the disk while converge starts */
	e = state_sync_spec(w->state_dir);
	if (e < 0)
		log_warn("spec generation %" PRIu64 ": cannot flush it to the disk (%s)",
			 spec->generation, strerror(-e));
	return 0;
}

int watch_handle(struct watch *w, const Bc__Node__V1__NodeUpdate *u)
{
	switch (u->update_case) {
	case BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC:
		return u->spec ? handle_spec(w, u->spec) : 0;
	case BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND:
		if (u->command)
			handle_command(w, u->command);
		return 0;
	default:
		log_debug("watch: empty update ignored");
		return 0;
	}
}

void watch_kick(struct watch *w)
{
	atomic_store(&w->kick, true);
}

uint64_t watch_applied(struct watch *w)
{
	return atomic_load(&w->applied);
}

/* The stream works (a message arrived, or it stayed up a while). */
static void healthy(struct backoff *b, bool *down)
{
	backoff_reset(b);
	if (*down)
		log_info("watch: connected to the controller again");
	*down = false;
}

static bool is_spec(const ProtobufCMessage *m)
{
	return ((const Bc__Node__V1__NodeUpdate *)m)->update_case ==
	       BC__NODE__V1__NODE_UPDATE__UPDATE_SPEC;
}

/* Handle a spec held back, then forget it; a persisting failure wins over
 * what came before. */
static int flush_spec(struct watch *w, ProtobufCMessage **held, int r)
{
	int e;

	if (!*held)
		return r;
	e = watch_handle(w, (const Bc__Node__V1__NodeUpdate *)*held);
	protobuf_c_message_free_unpacked(*held, NULL);
	*held = NULL;
	return e < 0 && e != -ESTALE && e != -EINVAL ? e : (r < 0 ? r : e);
}

#define BURST_MAX 1024

/* m and every update the stream already holds (a receive that does not
 * wait; at most BURST_MAX): of consecutive specs only the newest is
 * handled. Frees them all; returns what handling them returned (the
 * worst). A receive that failed without ending the stream (a message that
 * does not unpack) is in *recv_err (with err), after what came before it
 * was handled; a stream that ended says so again at the caller's next
 * receive. */
static int handle_burst(struct watch *w, rpc_stream *st, ProtobufCMessage *m, int *recv_err,
			bc_error *err)
{
	ProtobufCMessage *held = NULL;
	size_t skipped = 0, n = 0;
	int r = 0, got = 0;

	*recv_err = 0;
	do {
		if (!is_spec(m)) {
			r = flush_spec(w, &held, r);
			watch_handle(w, (const Bc__Node__V1__NodeUpdate *)m);
			protobuf_c_message_free_unpacked(m, NULL);
		} else if (held) {
			skipped++;
			protobuf_c_message_free_unpacked(held, NULL);
			held = m;
		} else {
			held = m;
		}
		m = NULL;
		if (++n >= BURST_MAX)
			break;
		got = rpc_stream_recv(st, &bc__node__v1__node_update__descriptor, &m, 0, err);
		if (got < 0 && got != -ETIMEDOUT)
			*recv_err = got;
	} while (got == 1);
	if (skipped) {
		atomic_fetch_add(&w->superseded, skipped);
		log_debug("watch: %zu spec(s) superseded before persisting", skipped);
	}
	return flush_spec(w, &held, r);
}

/* One stream: open, receive until it ends, fails, is kicked or we stop.
 * 0 if it ended cleanly (or was kicked), -BC_EDOMAIN with err otherwise. */
static int session(struct watch *w, struct backoff *b, bool *down, bc_error *err)
{
	Bc__Node__V1__WatchSpecRequest req = BC__NODE__V1__WATCH_SPEC_REQUEST__INIT;
	int64_t opened = mono_ms();
	rpc_stream *st;
	char path[128];
	int r = 0, recv_err;

	req.applied_generation = atomic_load(&w->applied);
	rpc_method_path(&bc__node__v1__node__descriptor, "WatchSpec", path, sizeof(path));
	st = rpc_stream_open(w->client, path, &req.base, 0, err);
	if (!st)
		return -BC_EDOMAIN;
	log_debug("watch: stream open (applied generation %" PRIu64 ")", req.applied_generation);
	while (!backoff_stopped(w->stop) && !atomic_exchange(&w->kick, false)) {
		ProtobufCMessage *m = NULL;
		r = rpc_stream_recv(st, &bc__node__v1__node_update__descriptor, &m, RECV_POLL_MS, err);
		if (r != -ETIMEDOUT && r <= 0)
			break;
		if (r == 1)
			conv_contact(w->conv);
		if (r == 1 || mono_ms() - opened >= WATCH_HEALTHY_MS)
			healthy(b, down);
		if (r == -ETIMEDOUT) {
			r = 0;
			continue;
		}
		r = handle_burst(w, st, m, &recv_err, err);
		if (r < 0 && r != -ESTALE && r != -EINVAL) {
			r = bc_error_set(err, BC_INTERNAL, "spec not persisted: %s", strerror(-r));
			break;
		}
		r = 0;
		if (recv_err < 0) {
			r = recv_err;
			break;
		}
	}
	rpc_stream_free(st);
	return r;
}

/* Log a failed session once per outage (then at debug); true if the
 * controller refuses this node. */
static bool log_failure(const bc_error *err, bool *down)
{
	bool refused = join_err_retired(err);

	if (refused && !*down)
		log_error("watch: controller refuses this node: %s: %s; retrying every %d s",
			  bc_code_name(err->code), err->message, WATCH_REFUSED_MS / 1000);
	else if (!*down)
		log_warn("watch: stream failed: %s: %s; reconnecting with backoff",
			 bc_code_name(err->code), err->message);
	else
		log_debug("watch: stream failed again: %s: %s", bc_code_name(err->code),
			  err->message);
	*down = true;
	return refused;
}

/* Wait ms before the next stream. While the channel is not connected,
 * the wait drives its connection attempt and ends as soon as it is
 * connected: a controller back is watched again within gRPC's reconnect
 * backoff (at most 2 s, rpc_client.c), not after the 15-20 s gRPC takes
 * when nobody polls the channel. A channel that is connected (the
 * controller itself failed the stream) waits the whole ms. */
static void pause_before_retry(struct watch *w, int64_t ms)
{
	int64_t until = deadline_in(ms), left;

	if (rpc_client_wait_ready(w->client, 0) == 0) {
		backoff_sleep(w->stop, ms);
		return;
	}
	while (!backoff_stopped(w->stop) && (left = deadline_left(until)) > 0)
		if (rpc_client_wait_ready(w->client, left < 500 ? (int)left : 500) == 0)
			return;
}

void watch_run(struct watch *w)
{
	struct backoff b;
	bool down = false;

	backoff_init(&b, WATCH_BACKOFF_MIN_MS, WATCH_BACKOFF_MAX_MS);
	log_info("watch: watching spec from generation %" PRIu64, watch_applied(w));
	while (!backoff_stopped(w->stop)) {
		bc_error err = {0};
		int r = session(w, &b, &down, &err);
		if (r != 0 && log_failure(&err, &down))
			backoff_sleep(w->stop, WATCH_REFUSED_MS);
		else
			pause_before_retry(w, backoff_next(&b));
	}
	log_info("watch: stopped");
}
