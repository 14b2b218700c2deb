/* rtdrv.c: drives the libvirt runtime (agent/runtime_libvirt.c) from the
 * end-to-end tests, one operation per process, the way bcd's converge
 * thread calls it. Each run opens the runtime afresh, so consecutive runs
 * are also restarts of the agent.
 *
 *   rtdrv STATE_DIR create SPEC.json...   InstanceSpec as JSON; asked again
 *                                         while its image downloads; several
 *                                         specs: one runtime, one after another
 *   rtdrv STATE_DIR adopt SPEC.json
 *   rtdrv STATE_DIR start|pause|resume|stop|destroy ID
 *   rtdrv STATE_DIR list                  "<id> <state>" lines
 *   rtdrv STATE_DIR pass NODESPEC.json    converge passes (agent/converge.c)
 *                                         until no image download is pending;
 *                                         "<id> <state> <reason>" lines; with
 *                                         the spec's volumes made, grown and
 *                                         wiped in DATA_DIR/volumes
 *                                         (agent/volumes.c, reserve 5 %, at
 *                                         least 2 GiB), then a line
 *                                         "volumes committed=N warning=TEXT"
 *   rtdrv STATE_DIR capture ID PATH memory|disk   the snapshot object
 *                                         (agent/runtime_libvirt_snapshot.c);
 *                                         "ok paused_ms=N"
 *   rtdrv STATE_DIR restore SPEC.json PATH  a new instance from the object;
 *                                         "ok <state>"
 *   rtdrv STATE_DIR mark ID               the guest-up mark (guestready.h in
 *                                         STATE_DIR) bcd's listener would set
 *   rtdrv STATE_DIR up ID                 "up" or "down": that mark
 *
 * Every operation prints "ok" or "error <errno name> <reason>" (exit 1).
 * A stop (or pass) under way (a guest shutting down) is asked again until
 * it ends, unless RTDRV_ONCE is set.
 * Environment: RTDRV_NODE (node id, default node_e2e), RTDRV_URI,
 * RTDRV_DATA_DIR, RTDRV_TYPE (auto|kvm|qemu), RTDRV_STOP_MS, RTDRV_CA (image
 * CA file), RTDRV_CAPACITY ("vcpus,memory_mib"), RTDRV_USER_DATA (a file
 * served as every instance's boot data), RTDRV_ONCE (create: one call,
 * never asked again). */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/converge.h"
#include "agent/guestready.h"
#include "agent/runtime.h"
#include "agent/volumes.h"
#include "log.h"
#include "pbjson.h"
#include "util.h"

#define WAIT_MS 120000

static ProtobufCMessage *load(const ProtobufCMessageDescriptor *d, const char *path)
{
	ProtobufCMessage *m = NULL;
	bc_error err = {0};
	char *buf = NULL;
	size_t len = 0;

	if (file_read_all(path, 16 << 20, &buf, &len) < 0 ||
	    pbjson_read(d, buf, len, 16 << 20, &m, &err) < 0) {
		fprintf(stderr, "rtdrv: %s: unreadable or bad JSON\n", path);
		exit(2);
	}
	free(buf);
	return m;
}

static int user_data(void *ctx, const char *id, const char *ref, void **ret, size_t *ret_len,
		     char *reason)
{
	char *buf = NULL;
	int e = file_read_all(ctx, 1 << 20, &buf, ret_len);

	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "NOT_FOUND: no boot data for %s", id);
		return e;
	}
	*ret = buf;
	return 0;
}

static const char *env(const char *k, const char *def)
{
	const char *v = getenv(k);

	return v && *v ? v : def;
}

static struct guestready *gr;

static struct rt *open_rt(const char *state_dir)
{
	struct rt_config c = {
		.state_dir = state_dir,
		.node_id = env("RTDRV_NODE", "node_e2e"),
		.libvirt_uri = env("RTDRV_URI", NULL),
		.data_dir = env("RTDRV_DATA_DIR", NULL),
		.image_ca_file = env("RTDRV_CA", NULL),
		.domain_type = env("RTDRV_TYPE", "auto"),
		.stop_timeout_ms = (uint32_t)atoi(env("RTDRV_STOP_MS", "0")),
	};
	const char *cap = env("RTDRV_CAPACITY", NULL);
	struct rt *rt = NULL;
	int e;

	if (cap) {
		c.capacity_vcpus = (uint32_t)strtoul(cap, NULL, 10);
		c.capacity_memory_mib = strtoull(strchr(cap, ',') ? strchr(cap, ',') + 1 : "0", NULL, 10);
	}
	if (gr_open(state_dir, &gr) == 0)
		c.guest_ready = gr;
	if (getenv("RTDRV_USER_DATA")) {
		c.boot_data = user_data;
		c.boot_data_ctx = getenv("RTDRV_USER_DATA");
	}
	e = rt_open("libvirt", &c, &rt);
	if (e < 0) {
		printf("error %s cannot open the runtime\n", strerrorname_np(-e));
		exit(1);
	}
	return rt;
}

static int outcome(int e, const char *reason)
{
	if (e == 0) {
		printf("ok\n");
		return 0;
	}
	printf("error %s %s\n", strerrorname_np(-e), reason && *reason ? reason : strerror(-e));
	return 1;
}

static int do_list(struct rt *rt)
{
	struct rt_instance *v = NULL;
	size_t n = 0;
	int e = rt->ops->list(rt, &v, &n);

	for (size_t i = 0; e == 0 && i < n; i++)
		printf("%s %s\n", v[i].id, rt_state_name(v[i].state));
	free(v);
	return e == 0 ? 0 : outcome(e, NULL);
}

/* True while an item waits for an image download or a guest shutdown. */
static bool fetching(const struct conv_status *st)
{
	for (size_t i = 0; i < st->n_items; i++)
		if (strncmp(st->items[i].reason, "ImageFetching:", 14) == 0 ||
		    strncmp(st->items[i].reason, "Stopping:", 9) == 0)
			return true;
	return false;
}

/* Converge passes until no instance waits for a download or a shutdown
 * (bcd's converge thread is poked / passes every 10 s; this polls), at most
 * WAIT_MS. */
static int do_pass(struct rt *rt, const char *state_dir, const char *path)
{
	const char *data = env("RTDRV_DATA_DIR", NULL);
	_cleanup_free_ char *vdir = data ? xasprintf("%s/volumes", data)
					 : xasprintf("%s/data/volumes", state_dir);
	const struct vol_config vc = {.dir = vdir, .reserve_percent = 5, .reserve_min = 2ull << 30};
	struct conv *c = conv_new(rt);
	struct conv_status st = {0};
	int64_t until = mono_ms() + WAIT_MS;
	struct vol *vol = NULL;

	if (vol_open(&vc, &vol) < 0) {
		printf("error volumes %s\n", vdir);
		conv_free(c);
		return 1;
	}
	conv_set_volumes(c, vol);
	conv_submit(c, (Bc__Node__V1__NodeSpec *)load(&bc__node__v1__node_spec__descriptor, path));
	do {
		conv_status_clear(&st);
		conv_pass(c);
		conv_snapshot(c, &st);
	} while (fetching(&st) && mono_ms() < until && usleep(50000) == 0);
	for (size_t i = 0; i < st.n_items; i++)
		printf("%s %s %s\n", st.items[i].id, st.items[i].state, st.items[i].reason);
	if (st.has_storage && st.storage.committed)
		printf("volumes committed=%" PRIu64 " warning=%s\n", st.storage.committed,
		       st.storage.warning);
	conv_status_clear(&st);
	conv_free(c);
	vol_free(vol);
	return 0;
}

static int do_spec_op(struct rt *rt, const char *op, const char *path)
{
	Bc__Node__V1__InstanceSpec *s = (Bc__Node__V1__InstanceSpec *)load(
		&bc__node__v1__instance_spec__descriptor, path);
	char reason[RT_REASON_MAX] = "";
	int64_t until = mono_ms() + WAIT_MS;
	int e;

	/* a create answered "downloading" is asked again, as the next pass would */
	do
		e = strcmp(op, "create") == 0 ? rt->ops->create(rt, s, reason) : rt->ops->adopt(rt, s);
	while (e == -EAGAIN && strncmp(reason, "ImageFetching:", 14) == 0 && !getenv("RTDRV_ONCE") &&
	       mono_ms() < until && usleep(50000) == 0);

	bc__node__v1__instance_spec__free_unpacked(s, NULL);
	return outcome(e, reason);
}

static int do_capture(struct rt *rt, const char *id, const char *path, const char *what)
{
	char reason[RT_REASON_MAX] = "";
	int64_t paused = 0;
	int e = rt->ops->capture ? rt->ops->capture(rt, id, strcmp(what, "memory") == 0, path,
						    &paused, reason)
				 : -EOPNOTSUPP;

	if (e == 0) {
		printf("ok paused_ms=%" PRId64 "\n", paused);
		return 0;
	}
	return outcome(e, reason);
}

static int do_restore(struct rt *rt, const char *spec, const char *path)
{
	Bc__Node__V1__InstanceSpec *s = (Bc__Node__V1__InstanceSpec *)load(
		&bc__node__v1__instance_spec__descriptor, spec);
	char reason[RT_REASON_MAX] = "";
	enum rt_state st = RT_STATE_STOPPED;
	int e = rt->ops->restore ? rt->ops->restore(rt, s, path, &st, reason) : -EOPNOTSUPP;

	bc__node__v1__instance_spec__free_unpacked(s, NULL);
	if (e == 0) {
		printf("ok %s\n", rt_state_name(st));
		return 0;
	}
	return outcome(e, reason);
}

static const struct {
	const char *name;
	size_t off;
} id_ops[] = {
	{"start", offsetof(struct runtime_ops, start)},
	{"pause", offsetof(struct runtime_ops, pause)},
	{"resume", offsetof(struct runtime_ops, resume)},
	{"stop", offsetof(struct runtime_ops, stop)},
	{"destroy", offsetof(struct runtime_ops, destroy)},
};

static int do_id_op(struct rt *rt, const char *op, const char *id)
{
	for (size_t i = 0; i < ARRAY_SIZE(id_ops); i++)
		if (strcmp(id_ops[i].name, op) == 0) {
			int (*fn)(struct rt *, const char *);
			int64_t until = mono_ms() + WAIT_MS;
			int e;
			memcpy(&fn, (const char *)rt->ops + id_ops[i].off, sizeof(fn));
			/* a stop under way is asked again, as the next pass would */
			while ((e = fn(rt, id)) == -EINPROGRESS && !getenv("RTDRV_ONCE") &&
			       mono_ms() < until)
				usleep(100000);
			return outcome(e, e == -EINPROGRESS && rt->ops->last_error
						  ? rt->ops->last_error(rt) : NULL);
		}
	fprintf(stderr, "rtdrv: unknown operation %s\n", op);
	return 2;
}

int main(int argc, char **argv)
{
	struct rt *rt;
	int rc = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: rtdrv STATE_DIR create|adopt|start|pause|resume|stop|"
				"destroy|list|pass|capture|restore [ARG]\n");
		return 2;
	}
	log_init("rtdrv", LOG_LVL_INFO);
	rt = open_rt(argv[1]);
	if (strcmp(argv[2], "list") == 0)
		rc = do_list(rt);
	else if (argc < 4)
		rc = 2;
	else if (strcmp(argv[2], "mark") == 0)
		rc = outcome(gr_mark(gr, argv[3], now_ms()), NULL);
	else if (strcmp(argv[2], "up") == 0)
		printf("%s\n", gr_get(gr, argv[3]) > 0 ? "up" : "down");
	else if (strcmp(argv[2], "capture") == 0)
		rc = argc < 6 ? 2 : do_capture(rt, argv[3], argv[4], argv[5]);
	else if (strcmp(argv[2], "restore") == 0)
		rc = argc < 5 ? 2 : do_restore(rt, argv[3], argv[4]);
	else if (strcmp(argv[2], "pass") == 0)
		rc = do_pass(rt, argv[1], argv[3]);
	else if (strcmp(argv[2], "create") == 0 || strcmp(argv[2], "adopt") == 0)
		for (int i = 3; i < argc; i++)  /* several: one runtime, in turn */
			rc = do_spec_op(rt, argv[2], argv[i]) || rc;
	else
		rc = do_id_op(rt, argv[2], argv[3]);
	rt_close(rt);
	gr_close(gr);
	return rc;
}
