# volumes.t: sandbox volumes on the real libvirtd and QEMU of this machine
# (agent/volumes.c with agent/runtime_libvirt.c), driven by tests/e2e/rtdrv
# converge passes over NodeSpecs that list a volume and an instance that
# attaches it. The guest is a blank disk: what is checked is what QEMU
# holds, not a guest's filesystem (tests/e2e's guest tests boot a real one).
#
# Proves: the pass makes the volume's sparse raw file before the instance
# that attaches it is created; the domain has it as a virtio disk with the
# volume's serial; a resize grows the file and the running QEMU's block
# device at once (virDomainBlockResize: domblkinfo's capacity, same QEMU
# pid); a smaller size never shrinks it; a spec without the volume (and the
# instance) destroys the instance and wipes the file (a reader that held it
# open reads zeros).
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/libvirt.sh"
. "$(dirname "$0")/../lib/https.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BC_BUILD:=$BC_SRC/build}"
RTDRV=$BC_BUILD/tests/e2e/rtdrv

[ "$(id -u)" -eq 0 ] || skip_all "needs root (libvirtd)"
[ -x "$RTDRV" ] || skip_all "no $RTDRV (make all)"
libvirt_up || skip_all "libvirt: $LIBVIRT_WHY"

V="virsh -c ${LIBVIRT_URI}"
W=$(mktemp -d /tmp/bc-vol.XXXXXX)
chmod 0711 "$W"
TAG=$$
A=e2e_v$TAG
VOL=vol_e2e$TAG
SERIAL=bcv-e2e$TAG
cleanup() {
	$V destroy "$A" >/dev/null 2>&1
	$V undefine --nvram "$A" >/dev/null 2>&1
	rm -rf "$W"
}
tap_on_exit cleanup

mkdir -p "$W/www" "$W/st"
chmod 0711 "$W/st"
export RTDRV_STOP_MS=2000 RTDRV_NODE=node_e2ev$TAG
truncate -s 1M "$W/www/blank.img"
https_up "$W/www" "$W/https" || bail_out "https_up failed"
export RTDRV_CA=$HTTPS_CA_FILE
PORT=${HTTPS_URL##*:}
SHA=$(sha256sum "$W/www/blank.img" | cut -d' ' -f1)
MIB=1048576
F=$W/st/data/volumes/$VOL.raw

# node GENERATION SIZE_BYTES: the volume and the instance attaching it
node() {
	cat >"$W/node$1.json" <<EOF
{"generation":"$1","nodeId":"node_e2ev$TAG",
 "volumes":[{"id":"$VOL","serial":"$SERIAL","sizeBytes":"$2"}],
 "instances":[{"id":"$A","desiredState":"DESIRED_RUNNING","vcpus":1,"memoryMib":"128",
  "diskGib":"1","numaNode":-1,
  "image":{"url":"https://127.0.0.1:$PORT/blank.img","sha256":"$SHA","format":"raw"},
  "volumes":[{"volumeId":"$VOL","serial":"$SERIAL"}]}]}
EOF
	echo "$W/node$1.json"
}
pass() { "$RTDRV" "$W/st" pass "$1" 2>>"$W/rtdrv.log"; }
dev_of() { $V domblklist "$A" | awk -v f="$F" '$2 == f { print $1 }'; }
capacity() { $V domblkinfo "$A" "$(dev_of)" | awk '/^Capacity:/ { print $2 }'; }

# ---------------------------------------------------------------- create
OUT=$(pass "$(node 1 $((64 * MIB)))")
like "$OUT" "^$A running " 'the pass makes the volume, then creates and starts the instance'
like "$OUT" "volumes committed=$((64 * MIB)) warning=\$" '... and reports 64 MiB committed, no warning'
is "$(stat -c '%s %a' "$F")" "$((64 * MIB)) 600" "$VOL.raw: 64 MiB, mode 0600"
ok "[ $(($(stat -c '%b * %B' "$F"))) -lt $MIB ]" '... sparse'
DEV=$(dev_of)
like "$DEV" '^vd[a-z]$' "the domain attaches it as a virtio disk ($DEV)"
ok "$V dumpxml '$A' | grep -q '<serial>$SERIAL</serial>'" '... with the volume serial'
is "$(capacity)" $((64 * MIB)) 'QEMU sees 64 MiB'
PID=$(cat "/run/libvirt/qemu/$A.pid" 2>/dev/null)
ok "test -n '$PID' && kill -0 '$PID'" "QEMU runs (pid $PID)"

# ---------------------------------------------------------------- resize
OUT=$(pass "$(node 2 $((128 * MIB)))")
like "$OUT" "^$A running " 'resize: the instance keeps running'
is "$(stat -c %s "$F")" $((128 * MIB)) 'the file grew to 128 MiB'
is "$(capacity)" $((128 * MIB)) 'the running QEMU was told at once: its block device is 128 MiB'
is "$(cat "/run/libvirt/qemu/$A.pid")" "$PID" '... same QEMU pid: no restart'
ok "grep -q 'instance $A: told volume $VOL is $((128 * MIB)) bytes' '$W/rtdrv.log'" \
	'bcd logged the block resize'

OUT=$(pass "$(node 3 $((32 * MIB)))")
is "$(stat -c %s "$F")" $((128 * MIB)) 'a smaller size never shrinks the file'
is "$(capacity)" $((128 * MIB)) '... nor the guest disk'

# ---------------------------------------------------------------- delete
printf 'secret%.0s' $(seq 700) | dd of="$F" bs=4096 seek=256 conv=notrunc status=none
exec 7<"$F"
echo '{"generation":"4","nodeId":"node_e2ev'$TAG'"}' >"$W/node4.json"
like "$(pass "$W/node4.json")" "^$A deleted " 'a spec without them: the instance is destroyed'
ok "[ ! -e '$F' ]" '... and the volume file removed'
is "$(dd if=/proc/self/fd/7 bs=4096 skip=256 count=1 status=none | tr -d '\0' | wc -c)" 0 \
	'... wiped first: a reader that held it open reads zeros'
exec 7<&-

done_testing
