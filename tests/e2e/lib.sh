# lib.sh: the shared set-up of the e2e files that boot the real guest
# through the whole stack (boot.t, restart.t, images.t).
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_up --agent-capacity 4,4096,50 || bail_out "..."   # skips when it cannot run
#   id=$(e2e_instance_create [bcctl instance create args...])
#
# e2e_up: needs root, a libvirtd (libvirt_up starts one), the guest image
# (build/guest/guest.qcow2: `make guest`). Serves build/guest over https on
# loopback (tests/lib/https.sh), starts a stack with the libvirt runtime on
# a bridge and /24 of its own (E2E_BRIDGE, E2E_SUBNET, so it never meets the
# demo's bcbr0 or another test's), registers the guest image (IMAGE_ID).
# A file that cannot run (no root, no libvirt, no image) is skipped, saying
# why, never passed.

_e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$_e2e_dir/../lib/tap.sh"
. "$_e2e_dir/../lib/stack.sh"
. "$_e2e_dir/../lib/https.sh"
. "$_e2e_dir/../lib/libvirt.sh"

: "${E2E_GUEST_DIR:=$BC_SRC/build/guest}"
# a guest boots in seconds under KVM and in a minute or two under TCG on a
# busy 2-core machine: deadlines are generous, every wait polls
: "${E2E_BOOT_TIMEOUT:=600}"
E2E_TAG=$(($$ % 250))
E2E_BRIDGE=bce2e$$
E2E_SUBNET=10.214.$E2E_TAG.0/24
E2E_GATEWAY=10.214.$E2E_TAG.1
IMAGE_ID=''

# e2e_need: skip the file unless everything it needs is here.
e2e_need() {
	[ "$(id -u)" -eq 0 ] || skip_all "needs root (libvirtd, bridge, taps, nftables)"
	libvirt_up || skip_all "libvirt: $LIBVIRT_WHY"
	[ -s "$E2E_GUEST_DIR/guest.qcow2" ] && [ -s "$E2E_GUEST_DIR/guest.qcow2.sha256" ] ||
		skip_all "no guest image in $E2E_GUEST_DIR (make guest)"
	command -v nft >/dev/null || skip_all "nft not installed (contrib/install-deps.sh)"
	# the nftables tables are the host's: two nftables agents would fight
	! _stack_nft_agents || skip_all "another bcd with network = nftables runs on this host (make demo?)"
}

# e2e_up [stack_up options]: https server, stack, image; see the top.
e2e_up() {
	local out sha size
	e2e_need
	https_up "$E2E_GUEST_DIR" || return 1
	export BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
	export BC_POOL_BRIDGE=$E2E_BRIDGE BC_POOL_SUBNET=$E2E_SUBNET BC_POOL_GATEWAY=$E2E_GATEWAY
	stack_up --runtime libvirt "$@" || return 1
	sha=$(cut -d' ' -f1 "$E2E_GUEST_DIR/guest.qcow2.sha256")
	size=$(stat -c%s "$E2E_GUEST_DIR/guest.qcow2")
	out=$(bcctl --format json image create --name debian-guest --format qcow2 \
		--url "$HTTPS_URL/guest.qcow2" --sha256 "$sha" --size "$size") || {
		diag "image create: $out"
		return 1
	}
	IMAGE_ID=$(json_get "$out" id)
	[ -n "$IMAGE_ID" ]
}

# e2e_instance_create ARGS...: bcctl instance create in the stack's pool with
# its flavor and the guest image (E2E_IMAGE if set), plus ARGS; prints the id.
e2e_instance_create() {
	local out
	out=$(bcctl --format json instance create "${TENANT_ARGS[@]}" --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "${E2E_IMAGE:-$IMAGE_ID}" "$@") || {
		diag "instance create: $out"
		return 1
	}
	json_get "$out" id
}

# e2e_instance_json ID: `bcctl instance get` as JSON.
e2e_instance_json() {
	bcctl --format json instance get "$1" "${TENANT_ARGS[@]}" 2>/dev/null
}

# e2e_instance_dir ID [N]: the instance's folder in agent N's data_dir.
e2e_instance_dir() {
	echo "$STACK_DIR/data-${2:-1}/instances/$1"
}

# e2e_console ID [N]: the guest's serial console log (virtlogd appends it).
e2e_console() {
	echo "$(e2e_instance_dir "$@")/console.log"
}

# e2e_qemu_pid ID: the pid of the domain's QEMU (libvirt's pid file).
e2e_qemu_pid() {
	local p
	p=$(cat "/run/libvirt/qemu/$1.pid" 2>/dev/null) || return 1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}

# e2e_domstate ID: virsh's state of the domain (running, paused, shut off...).
e2e_domstate() {
	virsh -q domstate "$1" 2>/dev/null | head -n1
}

# e2e_console_has ID REGEX: the console log matches REGEX.
e2e_console_has() {
	grep -a -q -E "$2" "$(e2e_console "$1")" 2>/dev/null
}
