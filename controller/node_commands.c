/* node_commands.c: host commands, the controller's side (node_commands.h).
 *
 * A row of commands (0019) goes queued -> delivered -> succeeded | failed.
 * cmd_enqueue inserts it in the caller's transaction with a NOTIFY
 * bc_node_spec '<node>' (the spec stream's own wake-up), so the node's
 * WatchSpec stream sends it right after the COMMIT, in seq order, once the
 * spec it sent names the command's instance (cmd_stream_send); a stream that
 * opens again re-sends the delivered ones not settled, which bcd dedups by
 * id. A report settles the node's own commands (cmd_settle) and NOTIFYs
 * bc_command_settled '<id>' in the same transaction; the reconciler's
 * leader fails those past their deadline ("timeout") and purges settled
 * rows after command_retention_seconds (cmd_tick). */
#include "node_commands.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "json.h"
#include "jsonw.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "streams.h"
#include "util.h"

#define CMD_SEND_BATCH 64
#define CMD_PURGE_BATCH 1000
#define CMD_PURGE_EVERY_MS 30000
#define CMD_ERROR_MAX 1024

static int64_t n_ignored, n_timed_out;

static bool kind_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n >= 1 && n <= CMD_KIND_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static bool lane_ok(const char *s)
{
	return strcmp(s, "control") == 0 || strcmp(s, "bulk") == 0;
}

/* A JSON object of at most CMD_ARGS_MAX bytes. */
static bool args_ok(const char *s)
{
	struct json *j = NULL;
	bool ok;

	if (strlen(s) > CMD_ARGS_MAX || json_parse(s, strlen(s), &j, NULL) < 0)
		return false;
	ok = j->type == JSON_OBJECT;
	json_free(j);
	return ok;
}

/* ------------------------------------------------------------ enqueue */

int cmd_enqueue(struct db *d, const struct cmd_new *c, char ret_id[CMD_ID_LEN],
		bool *ret_created)
{
	enum { EQ_ID, EQ_CREATED };
	const char *lane = c->lane ? c->lane : "control";
	const char *args = c->args_json && *c->args_json ? c->args_json : "{}";
	int64_t timeout = c->timeout_ms > 0 ? c->timeout_ms : CMD_TIMEOUT_DEFAULT_MS;
	char id[CMD_ID_LEN];
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	if (!c->node_id || !*c->node_id || !kind_ok(c->kind) || !lane_ok(lane) ||
	    !args_ok(args) || (c->key && !str_is_printable(c->key, 256)) ||
	    (c->instance_id && *c->instance_id && !id_valid("inst", c->instance_id)))
		return -EINVAL;
	id_new("cmd", id, sizeof(id));
	dbp_str(&p, id);
	dbp_str(&p, c->node_id);
	dbp_nstr(&p, c->instance_id);
	dbp_str(&p, c->kind);
	dbp_str(&p, lane);
	dbp_bool(&p, c->retry_safe);
	dbp_nstr(&p, c->key);
	dbp_str(&p, args);
	dbp_i64(&p, timeout);
	/* a key taken already: that command (ON CONFLICT waits for a
	 * concurrent insert of the same key; its row is read again below) */
	rc = db_exec(d, &r, "WITH i AS (INSERT INTO commands (id, node_id, instance_id, kind, lane, "
		     "retry_safe, key, args, deadline) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, "
		     "now() + $9::bigint * interval '1 millisecond') ON CONFLICT (key) DO NOTHING "
		     "RETURNING id, node_id) SELECT id, pg_notify('bc_node_spec', node_id) IS NULL "
		     "FROM i", &p);
	if (rc < 0)
		return rc;
	if (PQntuples(r) == 1) {
		snprintf(ret_id, CMD_ID_LEN, "%s", db_val(r, 0, EQ_ID));
		PQclear(r);
		if (ret_created)
			*ret_created = true;
		return 0;
	}
	PQclear(r);
	{
		_cleanup_free_ char *old = NULL;
		struct dbp k = {0};
		dbp_str(&k, c->key ? c->key : "");
		rc = db_scalar(d, "SELECT id FROM commands WHERE key = $1", &k, &old);
		if (rc < 0)
			return rc == -ENOENT ? -EAGAIN : rc;
		snprintf(ret_id, CMD_ID_LEN, "%s", old);
	}
	if (ret_created)
		*ret_created = false;
	return 0;
}

/* ------------------------------------------------------------ get */

enum { CG_ID, CG_NODE, CG_INST, CG_KIND, CG_LANE, CG_STATE, CG_RETRY, CG_ERROR, CG_RESULT };

int cmd_get(struct db *d, const char *id, struct cmd_info *ret)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	const char *v;
	int rc;

	memset(ret, 0, sizeof(*ret));
	dbp_str(&p, id);
	rc = db_exec(d, &r, "SELECT id, node_id, coalesce(instance_id, ''), kind, lane, state, "
		     "retry_safe, error, result::text FROM commands WHERE id = $1", &p);
	if (rc < 0)
		return rc;
	if (PQntuples(r) == 0) {
		PQclear(r);
		return -ENOENT;
	}
	snprintf(ret->id, sizeof(ret->id), "%s", db_val(r, 0, CG_ID));
	snprintf(ret->node_id, sizeof(ret->node_id), "%s", db_val(r, 0, CG_NODE));
	snprintf(ret->instance_id, sizeof(ret->instance_id), "%s", db_val(r, 0, CG_INST));
	snprintf(ret->kind, sizeof(ret->kind), "%s", db_val(r, 0, CG_KIND));
	snprintf(ret->lane, sizeof(ret->lane), "%s", db_val(r, 0, CG_LANE));
	snprintf(ret->state, sizeof(ret->state), "%s", db_val(r, 0, CG_STATE));
	ret->retry_safe = db_bool(r, 0, CG_RETRY);
	ret->error = xstrdup(db_val(r, 0, CG_ERROR));
	v = db_val(r, 0, CG_RESULT);
	ret->result_json = v ? xstrdup(v) : NULL;
	PQclear(r);
	return 0;
}

void cmd_info_clear(struct cmd_info *c)
{
	free(c->error);
	free(c->result_json);
	memset(c, 0, sizeof(*c));
}

/* ------------------------------------------------------------ stream */

static bool spec_names(const Bc__Node__V1__NodeSpec *spec, const char *inst)
{
	for (size_t i = 0; spec && i < spec->n_instances; i++)
		if (strcmp(spec->instances[i]->id, inst) == 0)
			return true;
	return false;
}

enum { CS_ID, CS_KIND, CS_INST, CS_LANE, CS_RETRY, CS_ARGS, CS_DEADLINE, CS_SEQ };

/* Mark ids (newline-separated) delivered. */
static int mark_delivered(rpc_call *c, const char *ids, bc_error *err)
{
	struct dbp p = {0};
	int r;

	if (!*ids)
		return 0;
	if ((r = stream_db_take(c, err)) < 0)
		return r;
	dbp_str(&p, ids);
	r = db_exec(ctl_db(c), NULL, "UPDATE commands SET state = 'delivered', delivered_at = "
		    "coalesce(delivered_at, now()) WHERE id = ANY (string_to_array($1, E'\\n')) AND "
		    "state = 'queued'", &p);
	stream_db_give(c);
	return r < 0 ? db_fail(err, r) : 0;
}

struct held {
	struct nodespec_cache *cache;
	uint64_t sent;
};

/* The spec the node holds, as far as the stream knows (NULL: none). A
 * stream that opened at the generation the node applied sent none and
 * built none: build it now (whole), once. */
static const Bc__Node__V1__NodeSpec *held_spec(rpc_call *c, const char *node, struct held *h,
					       bc_error *err)
{
	Bc__Node__V1__NodeSpec *spec = NULL;

	if (h->cache->spec || !h->sent)
		return h->cache->spec;
	if (stream_db_take(c, err) < 0)
		return NULL;
	if (nodespec_build_delta(ctl_db(c), node, h->cache, true, NULL, &spec, err) < 0)
		spec = NULL;
	stream_db_give(c);
	return spec;
}

/* One batch after seq *after; 1 if a full batch was sent (more may wait). */
static int send_batch(rpc_call *c, const char *node, struct held *h, bool resend, int64_t *after,
		      bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	char *ids = xstrdup("");
	int rc, n, sent = 0;
	bool waiting = false;

	if ((rc = stream_db_take(c, err)) < 0) {
		free(ids);
		return rc;
	}
	dbp_str(&p, node);
	dbp_bool(&p, resend);
	dbp_i64(&p, *after);
	dbp_i64(&p, CMD_SEND_BATCH);
	rc = db_exec(ctl_db(c), &r, "SELECT id, kind, coalesce(instance_id, ''), lane, retry_safe, "
		     "args::text, (extract(epoch FROM deadline) * 1000)::bigint, seq FROM commands "
		     "WHERE node_id = $1 AND (state = 'queued' OR ($2 AND state IN ('delivered', "
		     "'running'))) AND seq > $3 ORDER BY seq LIMIT $4", &p);
	stream_db_give(c); /* a slow reader never holds a pool connection */
	if (rc < 0) {
		free(ids);
		return db_fail(err, rc);
	}
	n = PQntuples(r);
	for (int i = 0; i < n; i++) {
		Bc__Node__V1__NodeUpdate up = BC__NODE__V1__NODE_UPDATE__INIT;
		Bc__Node__V1__Command cmd = BC__NODE__V1__COMMAND__INIT;
		const char *inst = db_val(r, i, CS_INST), *args = db_val(r, i, CS_ARGS);
		char *more;

		if (*inst && !spec_names(held_spec(c, node, h, err), inst)) {
			/* in order: this one and every later one wait for the
			 * spec naming its instance (a later wake sends them) */
			log_debug("node %s: command %s waits for a spec naming %s", node,
				  db_val(r, i, CS_ID), inst);
			waiting = true;
			break;
		}
		cmd.id = (char *)db_val(r, i, CS_ID);
		cmd.kind = (char *)db_val(r, i, CS_KIND);
		cmd.instance_id = (char *)inst;
		cmd.lane = (char *)db_val(r, i, CS_LANE);
		cmd.retry_safe = db_bool(r, i, CS_RETRY);
		cmd.args_json.data = (uint8_t *)args;
		cmd.args_json.len = strlen(args);
		cmd.deadline = db_i64(r, i, CS_DEADLINE);
		up.update_case = BC__NODE__V1__NODE_UPDATE__UPDATE_COMMAND;
		up.command = &cmd;
		rc = rpc_call_send(c, &up.base);
		if (rc < 0)
			break;
		log_info("node %s: command %s (%s%s%s) %s", node, cmd.id, cmd.kind, *inst ? ", " : "",
			 inst, resend ? "sent (again, if it was before)" : "sent");
		*after = db_i64(r, i, CS_SEQ);
		more = *ids ? xasprintf("%s\n%s", ids, cmd.id) : xstrdup(cmd.id);
		free(ids);
		ids = more;
		sent++;
	}
	PQclear(r);
	if (sent) {
		int m = mark_delivered(c, ids, err);
		if (rc >= 0)
			rc = m;
	}
	free(ids);
	if (rc < 0)
		return rc == -ECANCELED ? 0 : rc;
	return !waiting && n == CMD_SEND_BATCH;
}

int cmd_stream_send(rpc_call *c, const char *node, struct nodespec_cache *cache, uint64_t sent,
		    bool *resend, bc_error *err)
{
	struct held h = {.cache = cache, .sent = sent};
	int64_t after = 0;
	int r;

	while ((r = send_batch(c, node, &h, *resend, &after, err)) == 1)
		;
	if (r == 0)
		*resend = false;
	return r;
}

/* ------------------------------------------------------------ settle */

/* One result as a JSON object for jsonb_to_recordset; NULL if it cannot
 * be (not UTF-8). A result_json that is not a JSON value is dropped. */
static char *result_obj(const Bc__Node__V1__CommandResult *x)
{
	_cleanup_free_ char *res = NULL;
	struct json *j = NULL;
	struct jsonw w;
	char *out = NULL;

	if (x->result_json.len && x->result_json.len <= CMD_ARGS_MAX) {
		res = xcalloc(1, x->result_json.len + 1);
		memcpy(res, x->result_json.data, x->result_json.len);
		if (strlen(res) != x->result_json.len ||
		    json_parse(res, x->result_json.len, &j, NULL) < 0) {
			free(res);
			res = NULL;
		}
		json_free(j);
	}
	jsonw_begin(&w);
	jsonw_str(&w, "id", x->id);
	jsonw_bool(&w, "ok", x->ok);
	jsonw_str(&w, "error", str_is_printable(x->error, CMD_ERROR_MAX) ? x->error :
			       "(error text not printable)");
	if (res)
		jsonw_raw(&w, "result", res);
	return jsonw_end(&w, &out) == 0 ? out : NULL;
}

int cmd_settle(struct db *d, const char *node, const Bc__Node__V1__StatusReport *q,
	       int *ret_settled, int *ret_ignored)
{
	enum { ST_SETTLED, ST_FOREIGN };
	size_t len = 1, cap = 256;
	char *arr = xmalloc(cap);
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc, bad = 0;

	*ret_settled = *ret_ignored = 0;
	if (!q->n_results) {
		free(arr);
		return 0;
	}
	arr[0] = '[';
	for (size_t i = 0; i < q->n_results; i++) {
		char *o = id_valid("cmd", q->results[i]->id) ? result_obj(q->results[i]) : NULL;
		size_t n;
		if (!o) {
			bad++;
			continue;
		}
		n = strlen(o);
		if (len + n + 3 > cap) {
			cap = (len + n + 3) * 2;
			arr = xrealloc(arr, cap);
		}
		if (len > 1)
			arr[len++] = ',';
		memcpy(arr + len, o, n);
		len += n;
		free(o);
	}
	arr[len++] = ']';
	arr[len] = '\0';
	dbp_str(&p, node);
	dbp_str(&p, arr);
	rc = db_exec(d, &r, "WITH r AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(id text, ok "
		     "boolean, error text, result jsonb)), u AS (UPDATE commands c SET state = CASE "
		     "WHEN r.ok THEN 'succeeded' ELSE 'failed' END, error = coalesce(r.error, ''), "
		     "result = r.result, settled_at = now() FROM r WHERE c.id = r.id AND c.node_id = "
		     "$1 AND c.state IN ('queued', 'delivered', 'running') RETURNING c.id, pg_notify("
		     "'" CMD_SETTLED_CHANNEL "', c.id)) SELECT (SELECT count(*) FROM u), (SELECT "
		     "count(*) FROM r WHERE NOT EXISTS (SELECT 1 FROM commands c WHERE c.id = r.id "
		     "AND c.node_id = $1))", &p);
	free(arr);
	if (rc < 0)
		return rc;
	*ret_settled = (int)db_i64(r, 0, ST_SETTLED);
	*ret_ignored = (int)db_i64(r, 0, ST_FOREIGN) + bad;
	PQclear(r);
	if (*ret_ignored) {
		__atomic_fetch_add(&n_ignored, *ret_ignored, __ATOMIC_RELAXED);
		log_warn("node %s: %d command result(s) ignored: unknown, or not this node's", node,
			 *ret_ignored);
	}
	return 0;
}

/* ------------------------------------------------------------ sweeper */

static void sweep(struct db *d)
{
	enum { SW_ID, SW_NODE, SW_KIND };
	PGresult *r = NULL;

	if (db_exec(d, &r, "WITH u AS (UPDATE commands SET state = 'failed', error = 'timeout', "
		    "settled_at = now() WHERE state IN ('queued', 'delivered', 'running') AND "
		    "deadline < now() RETURNING id, node_id, kind, pg_notify('" CMD_SETTLED_CHANNEL
		    "', id)) SELECT id, node_id, kind FROM u", NULL) < 0)
		return;
	for (int i = 0; i < PQntuples(r); i++)
		log_warn("command %s (%s) on node %s: failed: timeout", db_val(r, i, SW_ID),
			 db_val(r, i, SW_KIND), db_val(r, i, SW_NODE));
	__atomic_fetch_add(&n_timed_out, PQntuples(r), __ATOMIC_RELAXED);
	PQclear(r);
}

void cmd_tick(struct db *d, const struct ctl_config *cfg)
{
	static int64_t next_ms;
	int n;

	sweep(d);
	if (mono_ms() < next_ms)
		return;
	next_ms = mono_ms() + CMD_PURGE_EVERY_MS;
	n = db_purge(d, "WITH g AS (DELETE FROM commands WHERE id IN (SELECT id FROM commands WHERE "
		     "settled_at < now() - make_interval(secs => $1) ORDER BY settled_at LIMIT $2) "
		     "RETURNING 1) SELECT count(*) FROM g", cfg->command_retention_seconds,
		     CMD_PURGE_BATCH);
	if (n > 0)
		log_info("commands: %d settled command(s) purged (retention %d s)", n,
			 cfg->command_retention_seconds);
}

void cmd_metrics_render(FILE *out)
{
	metrics_head(out, "better_compute_command_results_ignored_total", "counter",
		     "Command results of reports this replica ignored: unknown ids, or not the "
		     "reporting node's commands.");
	metrics_line(out, "better_compute_command_results_ignored_total", NULL,
		     (double)__atomic_load_n(&n_ignored, __ATOMIC_RELAXED));
	metrics_head(out, "better_compute_commands_timed_out_total", "counter",
		     "Commands this replica's reconciler failed past their deadline.");
	metrics_line(out, "better_compute_commands_timed_out_total", NULL,
		     (double)__atomic_load_n(&n_timed_out, __ATOMIC_RELAXED));
}

/* ------------------------------------------------------------ admin */

static const char *const flags_value[] = {"--node", "--kind", "--instance", "--lane",
					  "--timeout", "--key", "--args", "--id"};

bool cmd_admin_flag(const char *arg, bool *takes_value)
{
	*takes_value = false;
	if (strcmp(arg, "--retry-safe") == 0)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(flags_value); i++)
		if (strcmp(arg, flags_value[i]) == 0)
			return *takes_value = true;
	return false;
}

struct admin_args {
	struct cmd_new n;
	const char *id;
	char ret_id[CMD_ID_LEN];
	bool created;
};

static int admin_parse(int argc, char **argv, struct admin_args *a)
{
	for (int i = 0; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(f, "--retry-safe") == 0) {
			a->n.retry_safe = true;
			continue;
		}
		if (!v)
			return -EINVAL;
		i++;
		if (strcmp(f, "--node") == 0)
			a->n.node_id = v;
		else if (strcmp(f, "--kind") == 0)
			a->n.kind = v;
		else if (strcmp(f, "--instance") == 0)
			a->n.instance_id = v;
		else if (strcmp(f, "--lane") == 0)
			a->n.lane = v;
		else if (strcmp(f, "--key") == 0)
			a->n.key = v;
		else if (strcmp(f, "--args") == 0)
			a->n.args_json = v;
		else if (strcmp(f, "--id") == 0)
			a->id = v;
		else if (strcmp(f, "--timeout") == 0) {
			if (duration_parse_ms(v, &a->n.timeout_ms) < 0 || a->n.timeout_ms <= 0)
				return -EINVAL;
		} else
			return -EINVAL;
	}
	return 0;
}

static int enqueue_tx(struct db *d, void *arg, bc_error *err)
{
	struct admin_args *a = arg;
	int rc = cmd_enqueue(d, &a->n, a->ret_id, &a->created);

	if (rc == -EINVAL)
		return bc_error_set(err, BC_INVALID_INPUT, "a bad field: --kind [a-z0-9._-], "
				    "--lane control|bulk, --args a JSON object, --instance inst_...");
	return rc < 0 ? db_fail(err, rc) : 0;
}

static void admin_usage(void)
{
	fprintf(stderr,
		"usage: bc-controller command VERB [--config FILE] ...\n"
		"  enqueue --node ID --kind KIND [--instance ID] [--lane control|bulk]\n"
		"          [--retry-safe] [--timeout DURATION] [--key KEY] [--args JSON]\n"
		"                  queue a host command; prints {\"id\", \"created\"}\n"
		"  show --id ID    the command as JSON (state, error, result)\n");
}

static int admin_show(struct db *d, const char *id)
{
	struct cmd_info c;
	_cleanup_free_ char *out = NULL;
	struct jsonw w;
	int rc = cmd_get(d, id, &c);

	if (rc < 0) {
		fprintf(stderr, "bc-controller: command %s: %s\n", id,
			rc == -ENOENT ? "not found" : "database error");
		return 1;
	}
	jsonw_begin(&w);
	jsonw_str(&w, "id", c.id);
	jsonw_str(&w, "nodeId", c.node_id);
	jsonw_str(&w, "instanceId", c.instance_id);
	jsonw_str(&w, "kind", c.kind);
	jsonw_str(&w, "lane", c.lane);
	jsonw_bool(&w, "retrySafe", c.retry_safe);
	jsonw_str(&w, "state", c.state);
	jsonw_str(&w, "error", c.error);
	if (c.result_json)
		jsonw_raw(&w, "result", c.result_json);
	else
		jsonw_null(&w, "result");
	rc = jsonw_end(&w, &out);
	cmd_info_clear(&c);
	if (rc < 0)
		return 1;
	printf("%s\n", out);
	return 0;
}

int cmd_admin(struct ctl_app *app, const char *verb, int argc, char **argv)
{
	struct admin_args a = {0};
	struct db *d;
	bc_error err;
	int rc;

	if (!verb || (strcmp(verb, "enqueue") != 0 && strcmp(verb, "show") != 0) ||
	    admin_parse(argc, argv, &a) < 0) {
		admin_usage();
		return 2;
	}
	if (!(d = db_open(app->cfg.database))) {
		fprintf(stderr, "bc-controller: cannot connect to the database\n");
		return 1;
	}
	if (strcmp(verb, "show") == 0) {
		rc = a.id ? admin_show(d, a.id) : (admin_usage(), 2);
		db_close(d);
		return rc;
	}
	if (!a.n.node_id || !a.n.kind) {
		db_close(d);
		admin_usage();
		return 2;
	}
	bc_error_clear(&err);
	rc = db_tx(d, "READ COMMITTED", enqueue_tx, &a, &err);
	db_close(d);
	if (rc < 0) {
		fprintf(stderr, "bc-controller: command enqueue: %s\n", err.message);
		return 1;
	}
	printf("{\"id\":\"%s\",\"created\":%s}\n", a.ret_id, a.created ? "true" : "false");
	return 0;
}
