# agent.t: a real bcd with `runtime = libvirt` on a real stack (controller,
# PostgreSQL) and the real libvirtd: Instances.Create reaches running; a
# SIGKILLed bcd comes back and adopts the domain without restarting it (same
# QEMU pid, one domain); the caller's user data reaches the NoCloud seed
# through Node.GetBootData; an image with a wrong sha256 is reported with
# the reason; delete removes the domain and its files. The image is a blank disk
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
command -v isoinfo >/dev/null || skip_all "isoinfo (genisoimage) not installed"

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

# boot data: the caller's user data reaches the seed through
# Node.GetBootData (the controller's MIME multipart, parts decoded here)
printf '#cloud-config\nwrite_files:\n  - path: /run/bc-agent-t\n    content: marker-%s\n' "$$" \
	>"$STACK_DIR/ud.yaml"
ID3=$(json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$IMG" --user-data-file "$STACK_DIR/ud.yaml" "${TENANT_ARGS[@]}")" id)
IDS+=("$ID3")
make_tap "$ID3"
D3=$STACK_DIR/agent-1/data/instances/$ID3
eventually 60 test -s "$D3/seed.iso"
ok $? "the instance with user data got its seed"
UD=$(isoinfo -R -i "$D3/seed.iso" -x /user-data 2>/dev/null)
like "$UD" 'Content-Type: multipart/mixed' "its user-data is the controller's MIME multipart"
like "$(printf '%s' "$UD" | python3 -c 'import email, sys
m = email.message_from_bytes(sys.stdin.buffer.read())
print(b"".join(p.get_payload(decode=True) or b"" for p in m.walk() if not p.is_multipart()).decode())')" \
	"content: marker-$$" "... carrying the caller's part"
like "$(isoinfo -R -i "$D3/seed.iso" -x /meta-data 2>/dev/null)" "instance-id: \"$ID3\"" \
	"meta-data names the instance"
bcctl instance delete "$ID3" "${TENANT_ARGS[@]}" >/dev/null

# a wrong digest is reported with its reason and defines nothing
BAD=$(img bad 0000000000000000000000000000000000000000000000000000000000000000)
ID2=$(create "$BAD")
IDS+=("$ID2")
# The download and the pass that reports its failure may wait behind
# another instance's slow libvirt call, or a first download that failed
# (held HOLD_MS before the next try) on a loaded machine: wait for the
# state the controller holds, which bcd reports only after its pass logged
# the reason, then read the log.
eventually 240 instance_state_is "$ID2" error
ok $? "the controller shows it in error"
like "$(bcctl --format json instance get "$ID2" "${TENANT_ARGS[@]}" | jq -r .reason)" \
	'^ImageDigestMismatch: ' "... with the reason"
ok "grep -q 'instance $ID2: ImageDigestMismatch: sha256 30e14955ebf13522\.\.\., want 0000' \
	'$STACK_DIR/bcd-1.log'" "wrong sha256: bcd reports the instance with ImageDigestMismatch"
is "$(bcctl --format json instance get "$ID" "${TENANT_ARGS[@]}" | jq -r '.reason // ""')" "" \
	"and the running instance with none"
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
