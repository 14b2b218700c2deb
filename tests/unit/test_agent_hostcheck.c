/* test_agent_hostcheck.c: the pure parts of `bcd --check-host`
 * (agent/hostcheck.c): QEMU's user from qemu.conf, a device's access for
 * a user, the KVM flag of libvirt's capability cache, and the mismatch
 * that makes libvirt re-probe QEMU on every call. */
#include <string.h>

#include "agent/hostcheck.h"
#include "tap.h"

int main(void)
{
	char user[64] = "libvirt-qemu", group[64] = "libvirt-qemu";
	const char *fix = "untouched", *why;
	gid_t kvm_groups[] = {107, 64055}, none[] = {64055};

	hc_qemu_user("# user = \"root\"\n#group = \"root\"\n", user, sizeof(user), group,
		     sizeof(group));
	is_str(user, "libvirt-qemu", "commented user lines keep the default");
	hc_qemu_user("x = 1\n  user = \"qemu\"\ngroup=\"kvm\"\n", user, sizeof(user), group,
		     sizeof(group));
	is_str(user, "qemu", "user = \"qemu\" read");
	is_str(group, "kvm", "group=\"kvm\" read");

	ok(!hc_rw_for(0020600, 0, 0, 64055, kvm_groups, 2), "0600 root:root: not for QEMU's user");
	ok(hc_rw_for(0020660, 0, 107, 64055, kvm_groups, 2), "0660 root:kvm: for a kvm member");
	ok(!hc_rw_for(0020660, 0, 107, 64055, none, 1), "0660 root:kvm: not for a non-member");
	ok(hc_rw_for(0020666, 0, 0, 64055, none, 1), "0666: for anyone");
	ok(hc_rw_for(0020600, 64055, 0, 64055, none, 1), "0600 owned by the user: for it");
	ok(!hc_rw_for(0020640, 0, 107, 64055, kvm_groups, 2), "group read-only is not enough");

	is_int(hc_cache_kvm("<qemuCaps>\n  <flag name='kvm'/>\n"), 1, "cache with KVM");
	is_int(hc_cache_kvm("<qemuCaps>\n  <flag name='sdl'/>\n"), 0, "cache without KVM");
	is_int(hc_cache_kvm("garbage"), -1, "not a cache");
	is_int(hc_cache_kvm(NULL), -1, "no cache");

	why = hc_caps_mismatch(true, false, 1, &fix);
	ok(why && strstr(why, "CAP_DAC_OVERRIDE"), "root-only /dev/kvm + KVM cached: the cause named");
	ok(fix && strstr(fix, "chmod 0660 /dev/kvm"), "... and the fix");
	why = hc_caps_mismatch(true, true, 0, &fix);
	ok(why && strstr(why, "found no KVM"), "open /dev/kvm + no KVM cached: named");
	ok(hc_caps_mismatch(false, false, 1, &fix) != NULL, "KVM cached without /dev/kvm: named");
	ok(hc_caps_mismatch(true, true, 1, &fix) == NULL && fix == NULL, "open + KVM: consistent");
	ok(hc_caps_mismatch(false, false, 0, &fix) == NULL, "no /dev/kvm, no KVM: consistent");
	ok(hc_caps_mismatch(true, false, 0, &fix) == NULL, "root-only, no KVM cached: consistent");
	ok(hc_caps_mismatch(true, false, -1, &fix) == NULL, "no cache yet: nothing to say");
	done_testing();
}
