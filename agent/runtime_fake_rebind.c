/* runtime_fake_rebind.c: the fake runtime's identity rebind (runtime.h,
 * rebind; docs/rebind.md).
 *
 * No guest reads a disk here: the fake stands in for the hot-plug and the
 * guest's answer. It checks what a real runtime would hand the guest (the
 * instance held and running, an archive that fits the disk before its
 * acknowledgement area, a nonce of hex digits), writes the archive to
 * state_dir/fake/<id>.rebind.tar (mode 0600, replaced atomically, so a test
 * can read what the guest would), appends
 *   ts=<ms> op=rebind id=<id> nonce=<nonce> bytes=<n>
 * to the ledger and acknowledges. Test hooks, for one instance (<id>.fail,
 * <id>.slow) or for every one (all.fail, all.slow, since a restore's id is
 * known only once it is made): "rebind" in the .fail file makes the guest
 * refuse it (-EIO, no ledger line); "rebind=MS" in the .slow file delays it
 * (op=slow is logged first), as a guest that takes its time or never
 * answers before bcd is killed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rebind_bundle.h"
#include "runtime_fake_int.h"
#include "util.h"

int fake_rebind(struct rt *rt, const Bc__Node__V1__InstanceSpec *spec, const void *tar,
		size_t len, const char *nonce, char *reason)
{
	_cleanup_free_ char *path = NULL, *line = NULL;
	enum rt_state st;
	int e;

	if (!rt_id_valid(spec->id) || !len || len % 512 || len > RB_DISK_BYTES - RB_ACK_BYTES ||
	    strlen(nonce) != RB_NONCE_LEN || strspn(nonce, "0123456789abcdef") != RB_NONCE_LEN)
		return -EINVAL;
	if ((e = fake_state(rt, spec->id, &st)) < 0 || st != RT_STATE_RUNNING) {
		snprintf(reason, RT_REASON_MAX, "instance %s is not running", spec->id);
		return e < 0 ? e : -EINVAL;
	}
	fake_slow(rt, spec->id, "rebind");
	fake_slow(rt, "all", "rebind");
	if (fake_fail(rt, spec->id, "rebind") || fake_fail(rt, "all", "rebind")) {
		snprintf(reason, RT_REASON_MAX, "the guest did not acknowledge the bundle (injected)");
		return -EIO;
	}
	path = xasprintf("%s/%s.rebind.tar", fake_dir(rt), spec->id);
	if ((e = file_write_atomic(path, tar, len, 0600)) < 0) {
		snprintf(reason, RT_REASON_MAX, "cannot write %s: %s", path, strerror(-e));
		return e;
	}
	line = xasprintf("ts=%" PRId64 " op=rebind id=%s nonce=%s bytes=%zu\n", now_ms(), spec->id,
			 nonce, len);
	fake_ledger(rt, line);
	return 0;
}
