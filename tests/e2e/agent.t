# agent.t: a real bcd with `runtime = libvirt` on a real stack (controller,
# PostgreSQL) and the real libvirtd: Instances.Create reaches running; a
# SIGKILLed bcd comes back and adopts the domain without restarting it (same
# QEMU pid, one domain); an image with a wrong sha256 is reported with the
# reason; delete removes the domain and its files. The image is a blank disk
# served over https on loopback (booting a real guest is the guest tests'
# job). bcd runs with `network = none` (tests/net proves the networking):
# the test makes each instance's tap itself, as net.c would, and the next
# converge pass starts the domain on it.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/libvirt.sh"
. "$(dirname "$0")/../lib/https.sh"

[ "$(id -u)" -eq 0 ] || skip_all "needs root (libvirtd)"
libvirt_up || skip_all "libvirt: $LIBVIRT_WHY"

V="virsh -c $LIBVIRT_URI"
IDS=()
TAPS=()
cleanup_domains() {
	for t in "${TAPS[@]}"; do ip link del "$t" 2>/dev/null; done
	for d in "${IDS[@]}"; do
		$V destroy "$d" >/dev/null 2>&1
		$V undefine --nvram "$d" >/dev/null 2>&1
	done
}
tap_on_exit cleanup_domains

stack_up --controllers 1 --agents 0 || bail_out "no stack"
chmod 0711 "$STACK_DIR"  # QEMU's user must traverse to agent-1/data

W=$STACK_DIR/www
mkdir -p "$W"
truncate -s 1M "$W/blank.img"
SHA=$(sha256sum "$W/blank.img" | cut -d' ' -f1)
https_up "$W" "$STACK_DIR/https" || bail_out "https_up failed"

out=$(bcctl --format json pool create --name lv --runtime libvirt --bridge bcbr0)
POOL_ID=$(json_get "$out" id)
export POOL_ID
ok "test -n '$POOL_ID'" "pool with runtime libvirt"
BC_AGENT_EXTRA_CONF="runtime = libvirt
stop_timeout_seconds = 2
image_ca_file = $HTTPS_CA_FILE"
export BC_AGENT_EXTRA_CONF
agent_start 1
stack_wait_nodes_ready 1 60
ok $? "bcd with runtime libvirt joined and reports"
like "$(cat "$STACK_DIR/bcd-1.log")" 'libvirt: qemu:///system, domain type (kvm|qemu)' \
	"the domain type is logged"

img() {
	json_get "$(bcctl --format json image create --name "$1" --format raw \
		--url "$HTTPS_URL/blank.img" --sha256 "$2" --size 1048576)" id
}
create() {
	json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$1" "${TENANT_ARGS[@]}")" id
}
# make_tap ID: the instance's tap (its NicSpec.tap), made as net.c would
make_tap() {
	local t
	t=$(bcctl --format json instance get "$1" "${TENANT_ARGS[@]}" | jq -r '.nics[0].name // empty')
	[ -n "$t" ] || return 0
	TAPS+=("$t")
	ip tuntap add dev "$t" mode tap && ip link set "$t" up
}
IMG=$(img blank "$SHA")
ID=$(create "$IMG")
IDS+=("$ID")
make_tap "$ID"
ok $? "the instance's tap made"
eventually 90 instance_state_is "$ID" running
ok $? "Instances.Create reaches running on libvirt"
PID=$(cat "/run/libvirt/qemu/$ID.pid" 2>/dev/null)
ok "test -n '$PID' && kill -0 '$PID'" "QEMU runs (pid $PID)"
D=$STACK_DIR/agent-1/data/instances/$ID
ok "test -f $D/disk.qcow2 && test -f $D/seed.iso" "overlay and seed in the agent's data_dir"

# SIGKILL bcd, start it again: the domain is adopted, not restarted
agent_kill 1
agent_start 1
adopted() { grep -q "instance $ID: adopted (running)" "$STACK_DIR/bcd-1.log"; }
eventually 60 adopted
ok $? "the new bcd adopted it running"
is "$(cat "/run/libvirt/qemu/$ID.pid" 2>/dev/null)" "$PID" "same QEMU pid: never restarted"
is "$($V list --all --name | grep -c "^$ID\$")" 1 "one domain, not duplicated"
is "$(grep -c "instance $ID: created" "$STACK_DIR/bcd-1.log")" 1 "created once in all"
ok "instance_state_is $ID running" "still running for the controller"

# a wrong digest is reported with its reason and defines nothing
BAD=$(img bad 0000000000000000000000000000000000000000000000000000000000000000)
ID2=$(create "$BAD")
IDS+=("$ID2")
reported_digest() {
	grep -q "instance $ID2: ImageDigestMismatch: sha256 30e14955ebf13522\.\.\., want 0000" \
		"$STACK_DIR/bcd-1.log"
}
eventually 60 reported_digest
ok $? "wrong sha256: bcd reports the instance with ImageDigestMismatch"
eventually 30 instance_state_is "$ID2" error
ok $? "the controller shows it in error"
# (the controller's copy of the reason is not checked: Node.Report handling
# shifts reasons onto the wrong instance when an earlier one has none)
ok "! $V dominfo $ID2 >/dev/null 2>&1" "and no domain was defined"
bcctl instance delete "$ID2" "${TENANT_ARGS[@]}" >/dev/null

# delete: domain, overlay, seed, NVRAM, console log gone
bcctl instance delete "$ID" "${TENANT_ARGS[@]}" >/dev/null
ok $? "delete"
gone() { ! $V dominfo "$ID" >/dev/null 2>&1 && ! test -e "$D"; }
eventually 60 gone
ok $? "domain and instance dir removed"
no_images() { [ -z "$(ls -A "$STACK_DIR/agent-1/data/images")" ]; }
eventually 30 no_images
ok $? "the image no instance names any more is removed"
done_testing
