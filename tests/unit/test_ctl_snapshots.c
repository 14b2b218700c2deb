/* test_ctl_snapshots.c: the pure parts of controller/snapshots.c: which
 * runtimes may snapshot (snapshot_runtimes, a comma-separated list) and the
 * id a keyed snapshot derives (the same inputs, the same id; any input
 * changed, another id; always a valid snap_ id). The API against a real
 * stack and store: tests/integration/snapshots.t. */
#include <string.h>

#include "controller/snapshots.h"
#include "tap.h"
#include "util.h"

static void test_runtimes(void)
{
	ok(snap_runtime_capable("fake,libvirt", "fake"), "fake in fake,libvirt");
	ok(snap_runtime_capable("fake,libvirt", "libvirt"), "libvirt in fake,libvirt");
	ok(snap_runtime_capable(" fake , libvirt ", "libvirt"), "spaces around names are ignored");
	ok(!snap_runtime_capable("fake,libvirt", "lib"), "a prefix of a name is not the name");
	ok(!snap_runtime_capable("fake,libvirt", "libvirt2"), "nor a longer one");
	ok(!snap_runtime_capable("fake,libvirt", "cloud-hypervisor"), "a runtime not listed");
	ok(!snap_runtime_capable("", "fake"), "an empty list: none");
	ok(!snap_runtime_capable("fake,", ""), "an empty runtime never matches");
}

static void test_derive(void)
{
	char a[32], b[32], c[32], d[32], e[32];

	snap_derive_id("acme", "idn_1", "nightly", a);
	snap_derive_id("acme", "idn_1", "nightly", b);
	snap_derive_id("acme", "idn_2", "nightly", c);
	snap_derive_id("acme", "idn_1", "nightly2", d);
	snap_derive_id("other", "idn_1", "nightly", e);
	ok(id_valid("snap", a), "a derived id is a valid snap_ id (%s)", a);
	is_str(a, b, "the same tenant, caller and key: the same id");
	ok(strcmp(a, c) != 0 && strcmp(a, d) != 0 && strcmp(a, e) != 0,
	   "another caller, key or tenant: another id");
}

int main(void)
{
	test_runtimes();
	test_derive();
	done_testing();
}
