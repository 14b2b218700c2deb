/* test_agent_state.c: the spec acceptance rule (fencing), spec.pb
 * persistence across a simulated restart, the command-id set, identity
 * files, and the small runtime helpers. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/runtime.h"
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

/* An owned spec of generation gen with n instances ins_0.. (vcpus i+1). */
static Bc__Node__V1__NodeSpec *mkspec(uint64_t gen, size_t n)
{
	Bc__Node__V1__NodeSpec s = BC__NODE__V1__NODE_SPEC__INIT;
	Bc__Node__V1__InstanceSpec is[8], *ip[8];
	Bc__Node__V1__NicSpec nic = BC__NODE__V1__NIC_SPEC__INIT, *nicp = &nic;
	char ids[8][16];

	s.generation = gen;
	s.node_id = "node_test";
	s.bridge = "bcbr0";
	nic.tap = "bct0";
	nic.mac = "02:00:00:00:00:01";
	nic.ipv4 = "10.0.0.5";
	nic.ipv4_prefix = 24;
	for (size_t i = 0; i < n && i < 8; i++) {
		is[i] = (Bc__Node__V1__InstanceSpec)BC__NODE__V1__INSTANCE_SPEC__INIT;
		snprintf(ids[i], sizeof(ids[i]), "ins_%zu", i);
		is[i].id = ids[i];
		is[i].runtime = "fake";
		is[i].vcpus = (uint32_t)i + 1;
		is[i].memory_mib = 256;
		is[i].desired_state = BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
		is[i].network_policy = "private";
		is[i].n_nics = 1;
		is[i].nics = &nicp;
		ip[i] = &is[i];
	}
	s.n_instances = n;
	s.instances = ip;
	return state_spec_dup(&s);
}

static void test_accept(void)
{
	Bc__Node__V1__NodeSpec *s5 = mkspec(5, 1);
	Bc__Node__V1__NodeSpec big = BC__NODE__V1__NODE_SPEC__INIT;

	is_int(state_accept_spec(4, s5), 0, "newer generation accepted");
	is_int(state_accept_spec(0, s5), 0, "first spec accepted");
	is_int(state_accept_spec(5, s5), -ESTALE, "equal generation refused");
	is_int(state_accept_spec(6, s5), -ESTALE, "older generation refused");
	is_int(state_accept_spec(UINT64_MAX, s5), -ESTALE, "anything refused after max generation");
	is_int(state_accept_spec(0, NULL), -EINVAL, "NULL spec refused");
	big.generation = 9;
	big.n_instances = STATE_MAX_INSTANCES + 1;
	is_int(state_accept_spec(1, &big), -EINVAL, "too many instances refused");
	big.n_instances = 0;
	big.n_volumes = STATE_MAX_VOLUMES + 1;
	is_int(state_accept_spec(1, &big), -EINVAL, "too many volumes refused");
	state_spec_free(s5);
}

static void test_persist_roundtrip(void)
{
	Bc__Node__V1__NodeSpec *s = mkspec(7, 3), *back = NULL;

	is_int(state_load_spec(tmpdir, &back), -ENOENT, "no spec.pb yet: -ENOENT");
	is_int(state_sync_spec(tmpdir), -ENOENT, "nothing to flush yet: -ENOENT");
	is_int(state_save_spec(tmpdir, s), 0, "spec saved");
	is_int(state_sync_spec(tmpdir), 0, "and flushed to the disk");
	is_int(state_load_spec(tmpdir, &back), 0, "spec loaded");
	ok(back != NULL, "loaded spec exists");
	if (back) {
		is_int(back->generation, 7, "generation survives");
		is_str(back->node_id, "node_test", "node id survives");
		is_int(back->n_instances, 3, "instances survive");
		is_str(back->instances[2]->id, "ins_2", "instance id survives");
		is_int(back->instances[2]->vcpus, 3, "vcpus survive");
		is_str(back->instances[1]->network_policy, "private", "policy survives");
		is_int(back->instances[0]->n_nics, 1, "nics survive");
		is_str(back->instances[0]->nics[0]->mac, "02:00:00:00:00:01", "mac survives");
	}
	{
		char path[128];
		struct stat st;
		snprintf(path, sizeof(path), "%s/spec.pb", tmpdir);
		ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "spec.pb is 0600");
	}
	state_spec_free(back);
	state_spec_free(s);
}

static void test_corrupt(void)
{
	char path[128];
	Bc__Node__V1__NodeSpec *back = NULL;
	_cleanup_free_ char *dir = xasprintf("%s/corrupt", tmpdir);

	mkdir_p(dir, 0700);
	snprintf(path, sizeof(path), "%s/spec.pb", dir);
	file_write_atomic(path, "\xff\xff\xff\xff\xff", 5, 0600);
	is_int(state_load_spec(dir, &back), -EBADMSG, "garbage spec.pb: -EBADMSG");
	ok(back == NULL, "nothing returned for garbage");
}

/* The agent's receive path across a simulated restart: apply 3, refuse 2
 * and 3, "restart" (reload from disk), refuse 3 again, accept 4. */
static void test_take_and_restart(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/take", tmpdir);
	Bc__Node__V1__NodeSpec *s3 = mkspec(3, 2), *s2 = mkspec(2, 5), *s4 = mkspec(4, 1);
	Bc__Node__V1__NodeSpec *copy = NULL, *loaded = NULL;
	uint64_t applied = 0;

	mkdir_p(dir, 0700);
	is_int(state_take_spec(dir, &applied, s3, &copy), 0, "generation 3 taken");
	is_int(applied, 3, "applied generation is 3");
	ok(copy && copy != s3 && copy->generation == 3, "an independent copy is handed out");
	state_spec_free(copy);
	copy = NULL;
	is_int(state_take_spec(dir, &applied, s2, &copy), -ESTALE, "generation 2 refused");
	is_int(state_take_spec(dir, &applied, s3, &copy), -ESTALE, "generation 3 again refused");
	ok(copy == NULL, "nothing handed out on refusal");
	is_int(applied, 3, "applied generation unchanged by refusals");
	is_int(state_load_spec(dir, &loaded), 0, "restart: spec reloaded");
	if (loaded) {
		is_int(loaded->generation, 3, "refused spec never reached the disk");
		is_int(loaded->n_instances, 2, "disk holds generation 3's instances");
		applied = loaded->generation;
	}
	state_spec_free(loaded);
	is_int(state_take_spec(dir, &applied, s3, &copy), -ESTALE,
	       "after restart the same generation is still refused");
	is_int(state_take_spec(dir, &applied, s4, &copy), 0, "after restart a newer one is taken");
	is_int(applied, 4, "applied generation 4");
	state_spec_free(copy);
	loaded = NULL;
	state_load_spec(dir, &loaded);
	ok(loaded && loaded->generation == 4, "generation 4 persisted");
	state_spec_free(loaded);
	state_spec_free(s2);
	state_spec_free(s3);
	state_spec_free(s4);
}

static void test_take_unwritable(void)
{
	Bc__Node__V1__NodeSpec *s = mkspec(9, 1), *copy = NULL;
	uint64_t applied = 1;
	int e = state_take_spec("/nonexistent/bcd-test", &applied, s, &copy);

	ok(e < 0 && e != -ESTALE, "write failure is an error, not an acceptance");
	is_int(applied, 1, "applied generation unchanged when persisting failed");
	ok(copy == NULL, "nothing handed to converge when persisting failed");
	state_spec_free(s);
}

static void test_cmds(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/cmds", tmpdir);
	_cleanup_free_ char *path = xasprintf("%s/cmds/commands", tmpdir);
	struct state_cmds *s = NULL;
	FILE *f;

	mkdir_p(dir, 0700);
	is_int(state_cmds_open(dir, &s), 0, "empty command set opened");
	is_int(state_cmds_count(s), 0, "no commands yet");
	ok(!state_cmds_has(s, "cmd_a"), "cmd_a not recorded");
	is_int(state_cmds_add(s, "cmd_b"), 0, "cmd_b recorded");
	is_int(state_cmds_add(s, "cmd_a"), 0, "cmd_a recorded");
	is_int(state_cmds_add(s, "cmd_a"), -EEXIST, "cmd_a twice refused");
	is_int(state_cmds_add(s, "bad id"), -EINVAL, "id with a space refused");
	is_int(state_cmds_add(s, ""), -EINVAL, "empty id refused");
	ok(state_cmds_has(s, "cmd_a") && state_cmds_has(s, "cmd_b"), "both found");
	state_cmds_free(s);
	s = NULL;
	/* a crash in the middle of an append leaves a torn line */
	f = fopen(path, "a");
	fputs("cmd_tor", f);
	fclose(f);
	is_int(state_cmds_open(dir, &s), 0, "reopened after a torn append");
	is_int(state_cmds_count(s), 2, "restart keeps both recorded commands");
	ok(state_cmds_has(s, "cmd_a") && state_cmds_has(s, "cmd_b"), "both still found");
	ok(!state_cmds_has(s, "cmd_tor"), "torn line dropped");
	is_int(state_cmds_add(s, "cmd_c"), 0, "append after truncating the torn line");
	state_cmds_free(s);
	s = NULL;
	state_cmds_open(dir, &s);
	is_int(state_cmds_count(s), 3, "three commands after another restart");
	ok(state_cmds_has(s, "cmd_c"), "cmd_c found, not glued to the torn line");
	state_cmds_free(s);
}

static void test_read_line(void)
{
	_cleanup_free_ char *p1 = xasprintf("%s/node.id", tmpdir);
	_cleanup_free_ char *p2 = xasprintf("%s/empty.id", tmpdir);
	char *v = NULL;

	file_write_atomic(p1, "node_abc\n", 9, 0644);
	file_write_atomic(p2, "\n", 1, 0644);
	is_int(state_read_line(tmpdir, "node.id", &v), 0, "node.id read");
	is_str(v, "node_abc", "trailing newline stripped");
	free(v);
	v = NULL;
	is_int(state_read_line(tmpdir, "empty.id", &v), -EBADMSG, "empty file refused");
	is_int(state_read_line(tmpdir, "missing.id", &v), -ENOENT, "missing file: -ENOENT");
}

static void test_runtime_helpers(void)
{
	const char *caps[8];
	size_t n;
	enum rt_state st;
	char long_id[RT_ID_MAX + 2];

	ok(rt_lookup("fake") == &rt_fake_ops, "fake runtime found by name");
	ok(rt_lookup("nope") == NULL, "unknown runtime not found");
	ok(rt_lookup(NULL) == NULL, "NULL name not found");
	n = rt_capabilities(&rt_fake_ops.traits, caps, 8);
	is_int(n, 3, "fake advertises three capabilities");
	if (n == 3) {
		is_str(caps[0], "instance.network-policy", "network policy capability");
		is_str(caps[1], "instance.ssh-host-only", "ssh-host-only capability");
		is_str(caps[2], "instance.volumes", "volumes capability");
	}
	is_int(rt_capabilities(&rt_fake_ops.traits, caps, 1), 1, "capability output bounded");
	ok(rt_id_valid("ins_01hzy"), "plain id valid");
	ok(!rt_id_valid("../etc"), "path id invalid");
	ok(!rt_id_valid(".hidden"), "leading dot invalid");
	ok(!rt_id_valid(""), "empty id invalid");
	ok(!rt_id_valid("a/b"), "slash invalid");
	memset(long_id, 'a', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	ok(!rt_id_valid(long_id), "over-long id invalid");
	long_id[RT_ID_MAX] = '\0';
	ok(rt_id_valid(long_id), "id of exactly RT_ID_MAX valid");
	is_int(rt_state_parse("paused", &st), 0, "state parsed");
	is_int(st, RT_STATE_PAUSED, "paused");
	is_int(rt_state_parse("zombie", &st), -EINVAL, "unknown state refused");
	is_str(rt_state_name(RT_STATE_RUNNING), "running", "state name");
}

/* How many entries of dir start with prefix. */
static int count_prefix(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d)
		closedir(d);
	return n;
}

/* Another node's spec.pb and commands are set aside, never adopted. */
static void test_set_aside(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/aside", tmpdir);
	Bc__Node__V1__NodeSpec *s = mkspec(9, 1);   /* node_id node_test */
	struct state_cmds *cmds = NULL;
	char *owner = NULL;

	mkdir_p(dir, 0700);
	is_int(state_set_aside_foreign(dir, "node_new", false, &owner), 0, "empty dir: nothing");
	is_int(state_save_spec(dir, s), 0, "a spec of node_test");
	is_int(state_cmds_open(dir, &cmds), 0, "commands");
	is_int(state_cmds_add(cmds, "cmd_1"), 0, "one recorded");
	state_cmds_free(cmds);
	is_int(state_set_aside_foreign(dir, "node_test", false, &owner), 0, "its own node: kept");
	ok(owner == NULL, "no owner reported");
	is_int(state_set_aside_foreign(dir, "node_new", false, &owner), 2,
	       "another node's spec and commands: both set aside");
	is_str(owner, "node_test", "the old owner is named");
	free(owner);
	owner = NULL;
	is_int(count_prefix(dir, "spec.pb.node_test."), 1, "spec.pb renamed, not deleted");
	is_int(count_prefix(dir, "commands.node_test."), 1, "commands renamed, not deleted");
	ok(access(dir, F_OK) == 0 && count_prefix(dir, "spec.pb") == 1, "no spec.pb left");
	is_int(state_cmds_open(dir, &cmds), 0, "a fresh command record");
	is_int((int)state_cmds_count(cmds), 0, "empty");
	is_int(state_cmds_add(cmds, "cmd_2"), 0, "one recorded");
	state_cmds_free(cmds);
	is_int(state_set_aside_foreign(dir, "node_new", true, &owner), 1,
	       "joined now: whatever is there is set aside");
	is_str(owner, "before-join", "owner unknown without a spec");
	free(owner);
	state_spec_free(s);
}

/* Pause after ready: PAUSED with pause_after_ready runs until the guest
 * reported up; nothing else changes. */
static void test_effective_desired(void)
{
	const Bc__Node__V1__DesiredState P = BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED,
		R = BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING,
		S = BC__NODE__V1__DESIRED_STATE__DESIRED_STOPPED,
		D = BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED;

	is_int(state_effective_desired(P, true, 0), R, "warm, guest not up: kept running");
	is_int(state_effective_desired(P, true, 1764648000000), P, "warm, guest up: paused");
	is_int(state_effective_desired(P, false, 0), P, "PAUSED without pause_after_ready: paused");
	is_int(state_effective_desired(R, true, 0), R, "RUNNING stays RUNNING");
	is_int(state_effective_desired(S, true, 0), S, "STOPPED stays STOPPED");
	is_int(state_effective_desired(D, true, 0), D, "DELETED stays DELETED");
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-state-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_accept();
	test_persist_roundtrip();
	test_corrupt();
	test_take_and_restart();
	test_take_unwritable();
	test_cmds();
	test_read_line();
	test_runtime_helpers();
	test_set_aside();
	test_effective_desired();
	rm_rf(tmpdir);
	done_testing();
}
