/* hostcheck.h: `bcd --check-host`, what this host does to the libvirt
 * runtime before any VM is made (docs/operations.md, "Checking a host").
 *
 * The check that matters most: libvirt keeps each QEMU binary's
 * capabilities in /var/cache/libvirt/qemu/capabilities/<hash>.xml and
 * re-probes QEMU (~9 s of QEMU start and QMP queries on a small machine)
 * whenever an entry is found "invalid". Among its validity rules: the
 * entry's KVM flag must agree with whether /dev/kvm is read-writable by
 * QEMU's user (qemu.conf `user`, libvirt-qemu on Debian). But libvirt
 * probes QEMU as that user *with CAP_DAC_OVERRIDE* ("QEMU might run into
 * permission issues, e.g. /dev/sev (0600), override them just for the
 * purpose of probing"): with a /dev/kvm that is root-only (0600, a host
 * without udev's rule) the probe uses KVM and records it, and every later
 * lookup finds "KVM was enabled when probing, but it is not available now"
 * and probes again. Each define looks capabilities up several times: the
 * ~84 s per define seen on such a host. The converse (a /dev/kvm open to
 * QEMU's user whose KVM does not work) loops the same way. */
#ifndef BC_AGENT_HOSTCHECK_H
#define BC_AGENT_HOSTCHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

/* The QEMU user and group of a qemu.conf text (`user = "..."`,
 * `group = "..."`, comments skipped); left as passed when not set. */
void hc_qemu_user(const char *conf, char *user, size_t user_len, char *group, size_t group_len);

/* True if a device of mode/uid/gid is read-writable by uid quid whose
 * groups (primary included) are groups[0..n). No capabilities. */
bool hc_rw_for(mode_t mode, uid_t uid, gid_t gid, uid_t quid, const gid_t *groups, size_t n);

/* 1 if a libvirt QEMU capabilities cache text records KVM
 * (<flag name='kvm'/>), 0 if not, -1 if it is no such text. */
int hc_cache_kvm(const char *xml);

/* What makes libvirt's capability cache invalid on every call, from what
 * the host shows: kvm_dev (/dev/kvm exists), kvm_rw (read-writable by
 * QEMU's user), cache_kvm (hc_cache_kvm of the native emulator's entry;
 * -1: none yet). NULL when they agree; else the cause, and *fix what to
 * do (static strings). */
const char *hc_caps_mismatch(bool kvm_dev, bool kvm_rw, int cache_kvm, const char **fix);

/* The quick part, for bcd's start with runtime = libvirt: /dev/kvm's
 * access and the cached capabilities compared (no libvirt call). NULL if
 * they agree; else the cause and *fix (static strings). */
const char *hostcheck_caps(const char **fix);

/* Run every check against the libvirt at uri (NULL: qemu:///system),
 * printing one line each ("ok", "WARN", "FAIL") on out. 0 when nothing
 * failed, 1 otherwise. */
int hostcheck_run(const char *uri, FILE *out);

#endif
