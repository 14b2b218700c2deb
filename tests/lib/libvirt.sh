# libvirt.sh: a running libvirtd for the tests and the demo, without systemd.
#
#   . tests/lib/libvirt.sh
#   libvirt_up || skip_all "libvirt: $LIBVIRT_WHY"
#
# libvirt_up: if `virsh -c qemu:///system` (LIBVIRT_URI) answers, nothing is
# done. Otherwise virtlogd (domains' console logs go through it) and
# libvirtd are started as daemons (`-d`), as root, and waited for (up to
# LIBVIRT_WAIT_S, default 60 s). They are left running afterwards: they are
# the host's daemons, shared by every test and the demo, and stopping them
# would kill other tests' domains. On failure it returns 1 with the reason in
# LIBVIRT_WHY.
#
# libvirt_kvm: true when /dev/kvm is usable (bcd then defines kvm domains,
# otherwise qemu/TCG ones).
#
# libvirt_up also makes the host's /dev/kvm agree with libvirt's QEMU
# capabilities (as root, once per boot: /run/bc-kvm-checked), or every
# libvirt call re-probes QEMU and one define took 84 s to 4 min
# (docs/operations.md, "libvirt keeps its QEMU capabilities"; bcd
# --check-host names the same causes). A /dev/kvm whose KVM cannot run a
# guest (QEMU stops on "KVM internal error" in OVMF's first instructions: a
# software /dev/kvm) is removed, so that libvirt and bcd use TCG; a working
# one that QEMU's user cannot open (0600, no udev rule) gets udev's group
# kvm and mode 0660. Both are the fixes docs/operations.md gives an
# operator; each is said on stderr.

: "${LIBVIRT_URI:=qemu:///system}"
: "${LIBVIRT_WAIT_S:=60}"
LIBVIRT_WHY=''

_libvirt_answers() {
	virsh -c "$LIBVIRT_URI" -q version >/dev/null 2>&1
}

libvirt_up() {
	local n
	LIBVIRT_WHY=''
	if ! command -v virsh >/dev/null 2>&1 || ! command -v libvirtd >/dev/null 2>&1; then
		LIBVIRT_WHY='virsh/libvirtd not installed (contrib/install-deps.sh)'
		return 1
	fi
	[ "$(id -u)" -ne 0 ] || _libvirt_host_kvm
	_libvirt_answers && return 0
	if [ "$(id -u)" -ne 0 ]; then
		LIBVIRT_WHY="$LIBVIRT_URI does not answer and starting libvirtd needs root"
		return 1
	fi
	if ! pgrep -x virtlogd >/dev/null 2>&1; then
		/usr/sbin/virtlogd -d || { LIBVIRT_WHY='virtlogd -d failed'; return 1; }
	fi
	if ! pgrep -x libvirtd >/dev/null 2>&1; then
		/usr/sbin/libvirtd -d || { LIBVIRT_WHY='libvirtd -d failed'; return 1; }
	fi
	n=$((LIBVIRT_WAIT_S * 5))
	while [ $n -gt 0 ]; do
		_libvirt_answers && return 0
		sleep 0.2
		n=$((n - 1))
	done
	LIBVIRT_WHY="$LIBVIRT_URI did not answer within ${LIBVIRT_WAIT_S}s"
	return 1
}

# _libvirt_kvm_runs: QEMU runs OVMF under KVM for 3 s without KVM stopping
# it (a working KVM runs it until the timeout; a broken one stops the guest
# at once with "KVM internal error", or QEMU exits).
_libvirt_kvm_runs() {
	local err rc
	err=$(timeout 3 qemu-system-x86_64 -accel kvm -M q35 -m 64 -nodefaults -display none \
		-monitor none -serial none -bios /usr/share/ovmf/OVMF.fd 2>&1 >/dev/null)
	rc=$?
	[ "$rc" -eq 124 ] && [[ $err != *"KVM internal error"* ]]
}

# _libvirt_qemu_user: the user libvirt runs QEMU as (qemu.conf, Debian's
# default libvirt-qemu).
_libvirt_qemu_user() {
	local u
	u=$(sed -n 's/^[[:space:]]*user[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' \
		/etc/libvirt/qemu.conf 2>/dev/null | tail -n 1)
	echo "${u:-libvirt-qemu}"
}

# _libvirt_host_kvm: see the top.
_libvirt_host_kvm() {
	local stamp=/run/bc-kvm-checked u
	[ -c /dev/kvm ] && [ ! -e "$stamp" ] || return 0
	command -v qemu-system-x86_64 >/dev/null && [ -f /usr/share/ovmf/OVMF.fd ] || return 0
	if ! _libvirt_kvm_runs; then
		echo "libvirt.sh: /dev/kvm cannot run a guest here (KVM internal error): removing it, so that libvirt and bcd use TCG" >&2
		rm -f /dev/kvm
	else
		u=$(_libvirt_qemu_user)
		if id "$u" >/dev/null 2>&1 && ! runuser -u "$u" -- test -r /dev/kvm -a -w /dev/kvm &&
			getent group kvm >/dev/null; then
			echo "libvirt.sh: /dev/kvm works but $u cannot open it: chgrp kvm, chmod 0660 (udev's rule)" >&2
			chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
		fi
	fi
	: >"$stamp"
}

libvirt_kvm() {
	[ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]
}
