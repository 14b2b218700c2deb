/* test_agent_config.c: bcd's configuration (file, flags over the file,
 * types, bounds, labels, refusals) and the StatusReport builder (what a
 * report carries: instances, capabilities, labels with cpu.model, capacity,
 * volume storage, command results). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/report.h"
#include "agent/runtime.h"
#include "tap.h"
#include "util.h"

static char tmpdir[64];

static int from_args(struct agent_config *c, struct cfg_cli *cli, char *err, int argc, ...)
{
	char *argv[32];
	va_list ap;

	argv[0] = "bcd";
	va_start(ap, argc);
	for (int i = 1; i < argc && i < 32; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	cfg_init(c);
	return cfg_from_args(c, argc, argv, cli, err, CFG_ERR_MAX);
}

static void test_defaults(void)
{
	struct agent_config c;
	char err[CFG_ERR_MAX];

	cfg_init(&c);
	is_str(c.state_dir, "/var/lib/bcd", "default state_dir");
	is_str(c.runtime, "fake", "default runtime");
	is_str(c.network, "none", "default network: none (the host is not touched)");
	is_str(c.address, "127.0.0.1", "default address");
	is_int(c.report_interval_seconds, 10, "default report interval");
	ok(c.controller == NULL, "controller has no default");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "controller is required");
	ok(strstr(err, "controller") != NULL, "error names the key");
	cfg_set(&c, "controller", "127.0.0.1:7443", err, sizeof(err));
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "valid with a controller");
	ok(c.hostname && *c.hostname, "hostname defaults to gethostname()");
	is_int(c.log_lvl, LOG_LVL_INFO, "log level info");
	cfg_free(&c);
}

static void test_file_and_flags(void)
{
	_cleanup_free_ char *path = xasprintf("%s/bcd.conf", tmpdir);
	const char *text = "# bcd\ncontroller = 10.0.0.1:7443\n"
			   "state_dir = /tmp/from-file   # trailing comment\n"
			   "capacity_vcpus = 8\nlabels = zone=a, rack=r1\n\n"
			   "report_interval_seconds = 5\n";
	struct agent_config c;
	struct cfg_cli cli;
	char err[CFG_ERR_MAX] = "";

	file_write_atomic(path, text, strlen(text), 0644);
	is_int(from_args(&c, &cli, err, 7, "--config", path, "--state-dir", "/tmp/from-flag",
			 "--capacity_memory_mib=4096", "-n"),
	       0, "file plus flags parsed");
	is_str(cli.config_path, path, "--config seen");
	ok(cli.check, "-n seen");
	is_str(c.controller, "10.0.0.1:7443", "file value kept");
	is_str(c.state_dir, "/tmp/from-flag", "flag wins over the file");
	is_int(c.capacity_vcpus, 8, "u32 from the file");
	is_int(c.capacity_memory_mib, 4096, "--key=value form");
	is_int(c.report_interval_seconds, 5, "interval from the file");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "finished");
	is_int(c.n_labels, 2, "two labels");
	if (c.n_labels == 2) {
		is_str(c.label_list[0].key, "zone", "label key trimmed");
		is_str(c.label_list[1].value, "r1", "label value trimmed");
	}
	cfg_free(&c);
}

static void test_refusals(void)
{
	_cleanup_free_ char *bad = xasprintf("%s/bad.conf", tmpdir);
	struct agent_config c;
	struct cfg_cli cli;
	char err[CFG_ERR_MAX] = "";

	is_int(from_args(&c, &cli, err, 3, "--no-such-key", "1"), -EINVAL, "unknown flag refused");
	ok(strstr(err, "no_such_key") != NULL, "error names it");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 3, "--report-interval-seconds", "0"), -EINVAL,
	       "interval 0 refused");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 3, "--capacity-vcpus", "-1"), -EINVAL, "negative refused");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 3, "--capacity-vcpus", "12x"), -EINVAL, "junk refused");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 2, "--controller"), -EINVAL, "flag without value refused");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 2, "stray"), -EINVAL, "stray argument refused");
	cfg_free(&c);
	file_write_atomic(bad, "controller 1.2.3.4\n", 19, 0644);
	is_int(from_args(&c, &cli, err, 3, "--config", bad), -EINVAL, "line without = refused");
	ok(strstr(err, "line 1") != NULL, "error names the line");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 5, "--controller", "x:1", "--labels", "novalue"), 0,
	       "labels are checked at finish");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "label without = refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--labels", "bc.dev/cap.x=1");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "reserved label prefix refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--log-level", "loud");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "bad log level refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--network", "iptables");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "unknown network refused");
	is_str(err, "network 'iptables': nftables or none", "with the choices");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--network", "nftables");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "network nftables accepted");
	cfg_free(&c);
	from_args(&c, &cli, err, 3, "--controller", "x:1");
	is_str(c.libvirt_uri, "qemu:///system", "default libvirt_uri");
	is_str(c.domain_type, "auto", "default domain_type");
	is_str(c.data_dir, "", "default data_dir: state_dir/data");
	is_int(c.stop_timeout_seconds, 30, "default stop_timeout_seconds");
	is_int(c.volume_reserve_percent, 5, "default volume_reserve_percent");
	is_int(c.volume_reserve_min_gib, 2, "default volume_reserve_min_gib");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "finished");
	is_str(c.volumes_dir, "/var/lib/bcd/data/volumes", "default volumes_dir: state_dir/data/volumes");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--data-dir", "/d");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "data_dir /d");
	is_str(c.volumes_dir, "/d/volumes", "volumes_dir follows data_dir");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--volumes-dir", "vols");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "relative volumes_dir refused");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 5, "--controller", "x:1", "--volume-reserve-percent", "101"),
	       -EINVAL, "volume_reserve_percent above 100 refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 3, "--controller", "x:1");
	is_str(c.guest_host_ports, "udp/67 udp/547 udp/53 tcp/53", "default guest_host_ports");
	is_int(c.bridge_fdb_max_learned, 4096, "default bridge_fdb_max_learned");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--guest-host-ports", "tcp/22,udp/0");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "guest_host_ports with port 0 refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--guest-host-ports", "none");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "guest_host_ports none accepted");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--domain-type", "xen");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "domain_type xen refused");
	is_str(err, "domain_type 'xen': auto, kvm or qemu", "with the choices");
	cfg_free(&c);
	from_args(&c, &cli, err, 5, "--controller", "x:1", "--data-dir", "rel/dir");
	is_int(cfg_finish(&c, err, sizeof(err)), -EINVAL, "relative data_dir refused");
	cfg_free(&c);
	from_args(&c, &cli, err, 7, "--controller", "x:1", "--domain-type", "qemu",
		  "--runtime", "libvirt");
	is_int(cfg_finish(&c, err, sizeof(err)), 0, "domain_type qemu, runtime libvirt accepted");
	cfg_free(&c);
	is_int(from_args(&c, &cli, err, 2, "--version"), 0, "--version");
	ok(cli.version, "version asked");
	cfg_free(&c);
}

static void test_fill_host(void)
{
	struct agent_config c;

	cfg_init(&c);
	free(c.state_dir);
	c.state_dir = xstrdup(tmpdir);
	c.capacity_vcpus = 3;
	cfg_fill_host(&c);
	is_int(c.capacity_vcpus, 3, "a given capacity is kept");
	ok(c.capacity_memory_mib > 0, "memory from /proc/meminfo");
	cfg_free(&c);
}

static void test_cpu_model(void)
{
	char *m = report_cpu_model("processor\t: 0\nvendor_id\t: X\nmodel name\t: Fancy CPU @ 3GHz  \n"
				   "flags\t: a b\n");

	is_str(m, "Fancy CPU @ 3GHz", "model name parsed and trimmed");
	free(m);
	ok(report_cpu_model("processor: 0\n") == NULL, "no model name: NULL");
	ok(report_cpu_model(NULL) == NULL, "NULL text: NULL");
}

static const char *label(const Bc__Node__V1__StatusReport *r, const char *key)
{
	for (size_t i = 0; i < r->n_labels; i++)
		if (strcmp(r->labels[i]->key, key) == 0)
			return r->labels[i]->value;
	return NULL;
}

static void test_report_build(void)
{
	struct cfg_label labels[] = {{"zone", "a"}};
	struct report_info info = {.hostname = "h1", .agent_version = "9.9", .labels = labels,
				   .n_labels = 1, .cpu_model = "Fancy CPU", .vcpus = 8,
				   .memory_mib = 16384, .disk_gib = 100};
	struct conv_item items[] = {{"ins_a", "running", ""},
				    {"ins_b", "stopped", "ResourcesExhausted: memory"}};
	struct conv_result results[] = {{"cmd_1", false, "UNSUPPORTED: x"}};
	struct conv_status st = {.applied_generation = 7, .complete = true, .items = items,
				 .n_items = 2, .has_storage = true,
				 .storage = {.available = 100, .reserved = 5, .outstanding = 3,
					     .committed = 3, .allocated = 2},
				 .results = results, .n_results = 1};
	struct report_msg m;
	uint8_t *buf;
	size_t len;
	Bc__Node__V1__StatusReport *back;

	info.n_caps = rt_capabilities(&rt_fake_ops.traits, info.caps, REPORT_MAX_CAPS);
	report_build(&info, &st, 1000000, &m);
	len = protobuf_c_message_get_packed_size(&m.msg.base);
	buf = xmalloc(len);
	protobuf_c_message_pack(&m.msg.base, buf);
	back = bc__node__v1__status_report__unpack(NULL, len, buf);
	ok(back != NULL, "the report packs and unpacks");
	if (back) {
		is_int(back->applied_generation, 7, "applied generation");
		ok(back->complete, "complete");
		is_int(back->n_instances, 2, "instances");
		is_str(back->instances[1]->reason, "ResourcesExhausted: memory", "reason carried");
		is_int(back->n_capabilities, 3, "three capabilities");
		is_str(back->capabilities[0], "instance.network-policy", "capability");
		is_str(label(back, "zone"), "a", "config label");
		is_str(label(back, "cpu.model"), "Fancy CPU", "cpu.model label");
		ok(back->capacity && back->capacity->memory_mib == 16384, "capacity");
		ok(back->volume_storage && back->volume_storage->reserved_bytes == 5, "storage");
		ok(back->volume_storage && back->volume_storage->allocated_bytes == 2,
		   "storage: allocated bytes");
		is_int(back->n_results, 1, "command result");
		is_str(back->hostname, "h1", "hostname");
		is_str(back->agent_version, "9.9", "agent version");
		is_int(back->n_warnings, 0, "no certificate expiry known: no warning");
		bc__node__v1__status_report__free_unpacked(back, NULL);
	}
	free(buf);
	report_msg_clear(&m);

	labels[0].key = "cpu.model";
	st.has_storage = false;
	report_build(&info, &st, 1000000, &m);
	is_int(m.msg.n_labels, 1, "a configured cpu.model wins over /proc/cpuinfo");
	ok(m.msg.volume_storage == NULL, "no storage numbers: field absent");
	report_msg_clear(&m);

	/* the certificate expires at 100 days; warnings start 30 days before */
	info.cert_not_after_ms = 100LL * 86400000;
	info.cert_warn_ms = 30LL * 86400000;
	report_build(&info, &st, 69LL * 86400000, &m);
	is_int(m.msg.n_warnings, 0, "31 days left: no warning");
	report_msg_clear(&m);
	report_build(&info, &st, 71LL * 86400000 - 3600000, &m);
	is_int(m.msg.n_warnings, 1, "29 days left: a warning");
	if (m.msg.n_warnings == 1) {
		is_str(m.msg.warnings[0]->code, "cert-expiring", "its code");
		is_str(m.msg.warnings[0]->message,
		       "the node certificate expires in 29d 1h 0m and is not renewed yet", "its text");
	}
	report_msg_clear(&m);
	info.cert_warn_ms = 0;
	report_build(&info, &st, 99LL * 86400000, &m);
	is_int(m.msg.n_warnings, 0, "cert_warn_seconds 0: never");
	report_msg_clear(&m);

	/* a volume not made for room: volume-storage, after cert-expiring */
	st.has_storage = true;
	snprintf(st.storage.warning, sizeof(st.storage.warning), "volume vol_a needs 5 bytes");
	info.cert_warn_ms = 30LL * 86400000;
	report_build(&info, &st, 71LL * 86400000, &m);
	is_int(m.msg.n_warnings, 2, "certificate and volume store: two warnings");
	if (m.msg.n_warnings == 2) {
		is_str(m.msg.warnings[1]->code, "volume-storage", "the volume store's code");
		is_str(m.msg.warnings[1]->message, "volume vol_a needs 5 bytes", "its text");
	}
	report_msg_clear(&m);
	info.cert_warn_ms = 0;
	report_build(&info, &st, 71LL * 86400000, &m);
	ok(m.msg.n_warnings == 1 && strcmp(m.msg.warnings[0]->code, "volume-storage") == 0,
	   "the volume store's warning alone");
	report_msg_clear(&m);
}

static void test_cert_warning(void)
{
	char buf[128];

	ok(!report_cert_warning(0, 0, 1000, buf, sizeof(buf)), "unknown expiry: none");
	ok(!report_cert_warning(0, 5000, 5000, buf, sizeof(buf)), "exactly the window away: none");
	ok(report_cert_warning(1, 5000, 5000, buf, sizeof(buf)), "inside the window: a warning");
	ok(report_cert_warning(9000, 5000, 5000, buf, sizeof(buf)), "expired: a warning");
	is_str(buf, "the node certificate expired 4 s ago; join the host again", "saying so");
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/bcd-cfg-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_defaults();
	test_file_and_flags();
	test_refusals();
	test_fill_host();
	test_cpu_model();
	test_report_build();
	test_cert_warning();
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "# cannot remove %s\n", tmpdir);
	}
	done_testing();
}
