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

libvirt_kvm() {
	[ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]
}
