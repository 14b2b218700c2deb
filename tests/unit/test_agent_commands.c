/* test_agent_commands.c: bcd's command file (commands.d/<id>) format, the
 * restart rules, and what a restart does with the files it finds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/commands.h"
#include "agent/state.h"
#include "tap.h"
#include "util.h"

static char tmpdir[64];

static void rm_rf(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
}

static struct cmd_rec mkrec(const char *id, const char *kind)
{
	struct cmd_rec r = {0};

	snprintf(r.id, sizeof(r.id), "%s", id);
	snprintf(r.kind, sizeof(r.kind), "%s", kind);
	snprintf(r.lane, sizeof(r.lane), "control");
	r.args = xstrdup("{\"ms\":5}");
	r.received_ms = 1700000000000LL;
	return r;
}

static void test_roundtrip(void)
{
	struct cmd_rec r = mkrec("cmd_01abc", "instance.snapshot"), d;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;

	snprintf(r.instance_id, sizeof(r.instance_id), "inst_x");
	snprintf(r.lane, sizeof(r.lane), "bulk");
	free(r.args);
	r.args = xstrdup("{\"a\":\"line1\\nline2\",\n\"b\":[1,2]}"); /* a raw newline too */
	r.retry_safe = true;
	r.deadline = 1700000360000LL;
	r.started_ms = 1700000001000LL;
	r.runs = 2;
	r.finished_ms = 1700000002000LL;
	r.ok = true;
	snprintf(r.error, sizeof(r.error), "no=error\nreally");
	r.result = xstrdup("{\"url\":\"https://x/y?z=1\"}");
	is_int(cmd_rec_encode(&r, &buf, &len), 0, "a record encodes");
	ok(len == strlen(buf) && strncmp(buf, "bc-command 1\n", 13) == 0, "... starting with its magic line");
	ok(len > 4 && strcmp(buf + len - 4, "end\n") == 0, "... ending with its end line");
	is_int(cmd_rec_decode(buf, len, &d), 0, "... and decodes");
	is_str(d.id, r.id, "id kept");
	is_str(d.kind, r.kind, "kind kept");
	is_str(d.instance_id, "inst_x", "instance kept");
	is_str(d.lane, "bulk", "lane kept");
	ok(d.retry_safe, "retry_safe kept");
	ok(d.deadline == r.deadline && d.received_ms == r.received_ms &&
	   d.started_ms == r.started_ms && d.finished_ms == r.finished_ms,
	   "deadline and the received/started/finished times kept");
	is_int(d.runs, 2, "runs kept");
	ok(d.ok, "ok kept");
	is_str(d.args, r.args, "args kept byte for byte (newlines included)");
	is_str(d.error, r.error, "error kept (newline and '=' included)");
	is_str(d.result, r.result, "result kept");
	cmd_rec_clear(&d);
	cmd_rec_clear(&r);
}

static void test_bad_files(void)
{
	struct cmd_rec r = mkrec("cmd_b", "fake.sleep"), d;
	_cleanup_free_ char *buf = NULL;
	char *s;
	size_t len = 0;

	cmd_rec_encode(&r, &buf, &len);
	/* a file cut anywhere before its end line is not one */
	is_int(cmd_rec_decode(buf, len - 4, &d), -EBADMSG, "without its end line: refused");
	is_int(cmd_rec_decode(buf, len - 1, &d), -EBADMSG, "cut in the end line: refused");
	is_int(cmd_rec_decode(buf, 20, &d), -EBADMSG, "cut after the id: refused");
	s = xasprintf("%sextra=1\n", buf);
	is_int(cmd_rec_decode(s, strlen(s), &d), -EBADMSG, "a line after end: refused");
	free(s);
	s = xasprintf("bc-command 2\n%s", strchr(buf, '\n') + 1);
	is_int(cmd_rec_decode(s, strlen(s), &d), -EBADMSG, "another format version: refused");
	free(s);
	s = xstrdup(buf);
	memcpy(strstr(s, "args=") + 5, "zz", 2);
	is_int(cmd_rec_decode(s, strlen(s), &d), -EBADMSG, "args that are not hex: refused");
	free(s);
	s = xstrdup(buf);
	memcpy(strstr(s, "id=cmd_b"), "id=cmd/b", 8);
	is_int(cmd_rec_decode(s, strlen(s), &d), -EBADMSG, "an id that cannot name a file: refused");
	free(s);
	/* a key of a newer bcd is skipped */
	s = xasprintf("bc-command 1\nfuture_key=whatever\n%s", strchr(buf, '\n') + 1);
	is_int(cmd_rec_decode(s, strlen(s), &d), 0, "an unknown key: skipped");
	is_str(d.id, "cmd_b", "... the rest read");
	cmd_rec_clear(&d);
	free(s);
	ok(!cmd_id_ok("") && !cmd_id_ok("../x") && !cmd_id_ok("a.b") && cmd_id_ok("cmd_AZaz09-_"),
	   "command ids: [A-Za-z0-9_-] only");
	cmd_rec_clear(&r);
}

static void test_recover(void)
{
	struct cmd_rec r = mkrec("cmd_r", "fake.sleep");

	is_int(cmd_recover(&r), CMD_RECOVER_RUN, "received, never started: run");
	r.started_ms = 1;
	is_int(cmd_recover(&r), CMD_RECOVER_FAIL, "started, not finished, not retry-safe: failed");
	r.retry_safe = true;
	is_int(cmd_recover(&r), CMD_RECOVER_RUN, "started, not finished, retry-safe: run again");
	r.finished_ms = 2;
	is_int(cmd_recover(&r), CMD_RECOVER_REPORT, "finished: reported");
	r.retry_safe = false;
	is_int(cmd_recover(&r), CMD_RECOVER_REPORT, "finished, not retry-safe: reported");
	cmd_rec_clear(&r);
}

static void put(const char *dir, struct cmd_rec *r)
{
	_cleanup_free_ char *path = xasprintf("%s/%s/%s", dir, CMDS_DIR, r->id), *buf = NULL;
	size_t len = 0;

	cmd_rec_encode(r, &buf, &len);
	if (file_write_atomic(path, buf, len, 0600) < 0)
		fprintf(stderr, "# cannot write %s\n", path);
	cmd_rec_clear(r);
}

static const struct cmds_result *find(const struct cmds_result *v, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, id) == 0)
			return &v[i];
	return NULL;
}

static void test_restart(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/state", tmpdir);
	_cleanup_free_ char *cdir = xasprintf("%s/%s", dir, CMDS_DIR);
	_cleanup_free_ char *tmp = xasprintf("%s/cmd_t.tmp.123", cdir), *buf = NULL;
	struct cmd_rec done = mkrec("cmd_done", "instance.probe");
	struct cmd_rec mid = mkrec("cmd_mid", "fake.sleep");
	struct cmd_rec safe = mkrec("cmd_safe", "fake.sleep");
	struct cmd_rec fresh = mkrec("cmd_unknown", "no.such");
	struct cmd_rec old = mkrec("cmd_old", "instance.probe");
	struct state_cmds *seen = NULL;
	struct cmds *c = NULL;
	struct cmds_result *v = NULL;
	const struct cmds_result *x;
	struct cmd_rec d;
	size_t n = 0, qd, run, fin, len = 0;
	char *ids[1];

	mkdir_p(cdir, 0700);
	done.started_ms = now_ms() - 1000;
	done.runs = 1;
	done.finished_ms = now_ms(); /* within CMDS_KEEP_MS */
	done.ok = true;
	done.result = xstrdup("{\"state\":\"running\"}");
	mid.started_ms = 5;
	mid.runs = 1;
	safe.started_ms = 5;
	safe.runs = 1;
	safe.retry_safe = true;
	put(dir, &done);
	put(dir, &mid);
	put(dir, &safe);
	put(dir, &fresh);
	old.started_ms = 5;
	old.finished_ms = 6; /* finished long ago, never acked */
	put(dir, &old);
	file_write_atomic(tmp, "bc-comm", 7, 0600); /* a write cut before its rename */
	is_int(state_cmds_open(dir, &seen), 0, "the id set opens");
	{
		struct cmds_opts o = {.state_dir = dir, .seen = seen, .rt = NULL, .fake = true};
		is_int(cmds_open(&o, &c), 0, "the runner opens over five command files");
	}
	cmds_results(c, &v, &n);
	is_int(n, 3, "three results to report after the restart");
	x = find(v, n, "cmd_done");
	ok(x && x->ok && x->result && strcmp(x->result, "{\"state\":\"running\"}") == 0,
	   "finished before: its result reported as it was");
	x = find(v, n, "cmd_mid");
	ok(x && !x->ok && strcmp(x->error, CMDS_RESTARTED_ERROR) == 0,
	   "started, not retry-safe: failed \"" CMDS_RESTARTED_ERROR "\"");
	x = find(v, n, "cmd_unknown");
	ok(x && !x->ok && strcmp(x->error, "UNSUPPORTED: no.such") == 0,
	   "never started, an unknown kind: UNSUPPORTED: <kind>");
	ok(!find(v, n, "cmd_safe"), "the retry-safe one has no result yet");
	ok(!find(v, n, "cmd_old"), "a result never acked within CMDS_KEEP_MS is dropped");
	{
		_cleanup_free_ char *p = xasprintf("%s/cmd_old", cdir);
		ok(access(p, F_OK) != 0, "... with its file");
	}
	cmds_results_free(v, n);
	cmds_counts(c, &qd, &run, &fin);
	is_int(qd, 1, "... it is queued to run again");
	ok(state_cmds_has(seen, "cmd_done") && state_cmds_has(seen, "cmd_mid") &&
	   state_cmds_has(seen, "cmd_safe") && state_cmds_has(seen, "cmd_unknown"),
	   "every id found is in the id set");
	ok(access(tmp, F_OK) != 0, "a temporary file left by a cut write is removed");
	{
		_cleanup_free_ char *p = xasprintf("%s/cmd_mid", cdir);
		ok(file_read_all(p, 1 << 20, &buf, &len) == 0 && cmd_rec_decode(buf, len, &d) == 0 &&
		   d.finished_ms > 0 && !d.ok && strcmp(d.error, CMDS_RESTARTED_ERROR) == 0,
		   "the failure is written to its file (a second restart reports it again)");
		cmd_rec_clear(&d);
	}
	/* the same id from the stream again: ignored, never a second run */
	{
		Bc__Node__V1__Command cmd = BC__NODE__V1__COMMAND__INIT;
		cmd.id = "cmd_mid";
		cmd.kind = "fake.sleep";
		is_int(cmds_receive(c, &cmd), 0, "cmd_mid received again");
		cmds_counts(c, &qd, &run, &fin);
		is_int(qd, 1, "... ignored: nothing more queued");
		cmd.id = "cmd_new";
		cmd.kind = "no.such";
		is_int(cmds_receive(c, &cmd), 0, "a new command received");
		ok(state_cmds_has(seen, "cmd_new"), "... its id recorded");
		{
			_cleanup_free_ char *p = xasprintf("%s/cmd_new", cdir);
			ok(access(p, F_OK) == 0, "... its file written");
		}
	}
	ids[0] = "cmd_done";
	cmds_settled(c, ids, 1);
	{
		_cleanup_free_ char *p = xasprintf("%s/cmd_done", cdir);
		ok(access(p, F_OK) != 0, "settled by the controller: its file is removed");
	}
	cmds_results(c, &v, &n);
	ok(!find(v, n, "cmd_done") && find(v, n, "cmd_mid"), "... and it is no longer reported");
	cmds_results_free(v, n);
	cmds_free(c);
	state_cmds_free(seen);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_agent_commands.XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	test_roundtrip();
	test_bad_files();
	test_recover();
	test_restart();
	rm_rf(tmpdir);
	done_testing();
}
