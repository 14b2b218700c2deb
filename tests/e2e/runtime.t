# runtime.t: the libvirt runtime (agent/runtime_libvirt.c) on the real
# libvirtd and QEMU of this machine, driven by tests/e2e/rtdrv (one process
# per operation, so every call is also an agent restart). Images are served
# over https on loopback by tests/lib/https.sh with a throwaway CA. The
# guest is a blank disk: booting a real guest is tests/e2e's other files.
#
# Proves: define/start/pause/resume/stop/destroy, adoption without restart
# (same QEMU pid), a NIC on a tap made beforehand, the NoCloud seed (volume
# id cidata, user data from the boot-data fetch, meta-data, network-config),
# refusals with their reasons and nothing left behind (wrong sha256, a qcow2
# naming a backing file or an external data file, http, host admission),
# domains of another node never listed or touched, a create waiting for its
# image reported provisioning, and nothing leaked after destroy.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/libvirt.sh"
. "$(dirname "$0")/../lib/https.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BC_BUILD:=$BC_SRC/build}"
RTDRV=$BC_BUILD/tests/e2e/rtdrv

[ "$(id -u)" -eq 0 ] || skip_all "needs root (libvirtd, taps)"
[ -x "$RTDRV" ] || skip_all "no $RTDRV (make all)"
libvirt_up || skip_all "libvirt: $LIBVIRT_WHY"
command -v isoinfo >/dev/null || skip_all "isoinfo (genisoimage) not installed"

V="virsh -c ${LIBVIRT_URI}"
W=$(mktemp -d /tmp/bc-rt.XXXXXX)
chmod 0711 "$W"
TAG=$$
A=e2e_a$TAG B=e2e_b$TAG X=e2e_x$TAG
TAP=bcte$TAG
cleanup() {
	for d in $A $B $X e2e_o$TAG; do
		$V destroy "$d" >/dev/null 2>&1
		$V undefine --nvram "$d" >/dev/null 2>&1
	done
	ip link del "$TAP" 2>/dev/null
	rm -rf "$W"
}
tap_on_exit cleanup

mkdir -p "$W/www" "$W/st" "$W/st2"
chmod 0711 "$W/st" "$W/st2"
export RTDRV_STOP_MS=2000 RTDRV_USER_DATA=$W/user-data
export RTDRV_NODE=node_e2e$TAG
drv() { "$RTDRV" "$W/st" "$@" 2>>"$W/rtdrv.log"; }

# ------------------------------------------------------------ fixtures
truncate -s 1M "$W/www/blank.img"
qemu-img create -q -f qcow2 -F raw -b /etc/hostname "$W/www/backing.qcow2" 64M
qemu-img create -q -f qcow2 -o data_file="$W/www/ext.raw" "$W/www/datafile.qcow2" 64M
qemu-img create -q -f qcow2 "$W/www/clean.qcow2" 64M
sha() { sha256sum "$1" | cut -d' ' -f1; }
printf '#cloud-config\nwrite_files:\n  - path: /run/bc-e2e\n    content: hello\n' >"$W/user-data"
https_up "$W/www" "$W/https" || bail_out "https_up failed"
export RTDRV_CA=$HTTPS_CA_FILE
PORT=${HTTPS_URL##*:}
ok "test -n '$PORT'" "https image server on 127.0.0.1:$PORT"

# spec ID IMAGE SHA [FORMAT] [extra JSON fields]
spec() {
	cat >"$W/$1.json" <<EOF
{"id":"$1","vcpus":1,"memoryMib":"128","diskGib":"1","numaNode":-1,
 "image":{"url":"https://127.0.0.1:$PORT/$2","sha256":"$3","format":"${4:-raw}"},
 "userDataRef":"ud/$1"${5:+,$5}}
EOF
	echo "$W/$1.json"
}

# ------------------------------------------------------ define and run
ip tuntap add dev "$TAP" mode tap 2>/dev/null
ip link set "$TAP" up
NIC='"nics":[{"tap":"'$TAP'","mac":"52:54:00:e2:e0:01","ipv4":"10.77.0.5","ipv4Prefix":24}]'
is "$(drv create "$(spec $A blank.img "$(sha "$W/www/blank.img")" raw "$NIC")")" ok "create $A"
is "$(drv list)" "$A stopped" "listed stopped"
I=$W/st/data/instances/$A
IMG=$W/st/data/images/$(sha "$W/www/blank.img")
ok "test -f $IMG" "image stored under its sha256"
is "$(qemu-img info --output=json "$I/disk.qcow2" | jq -r '."backing-filename"')" "$IMG" \
	"overlay backed by the image's absolute path"
is "$(qemu-img info --output=json "$I/disk.qcow2" | jq -r '."backing-filename-format"')" raw \
	"with an explicit backing format"
is "$(qemu-img info --output=json "$I/disk.qcow2" | jq -r '."virtual-size"')" 1073741824 \
	"overlay has the flavor's disk size"
like "$(isoinfo -d -i "$I/seed.iso")" 'Volume id: cidata' "seed volume id cidata"
is "$(isoinfo -R -i "$I/seed.iso" -x /user-data)" "$(cat "$W/user-data")" \
	"seed user-data is the boot data"
like "$(isoinfo -R -i "$I/seed.iso" -x /meta-data)" "instance-id: \"$A\"" "seed meta-data"
like "$(isoinfo -R -i "$I/seed.iso" -x /network-config)" 'macaddress: "52:54:00:e2:e0:01"' \
	"seed network-config matches the NIC by MAC"
XML=$($V dumpxml "$A")
like "$XML" "<bc:node>node_e2e$TAG</bc:node>|<node>node_e2e$TAG</node>" "metadata names the node"
like "$XML" "<target dev='$TAP' managed='no'/>" "NIC on the tap made beforehand"
like "$XML" "<os firmware='efi'>" "UEFI"
like "$XML" "<domain type='(kvm|qemu)'" "domain type kvm or qemu"

is "$(drv start $A)" ok "start"
is "$(drv list)" "$A running" "running"
PID=$(cat "/run/libvirt/qemu/$A.pid" 2>/dev/null)
ok "test -n '$PID' && kill -0 '$PID'" "QEMU runs (pid $PID)"
ok "test -f $I/nvram.fd" "per-domain NVRAM in the instance dir"
is "$(drv start $A)" ok "start again: idempotent"
is "$(drv pause $A)" ok "pause"
is "$(drv list)" "$A paused" "paused"
is "$(drv resume $A)" ok "resume"
is "$(drv list)" "$A running" "running again"

# ------------------------------------------------------------- adoption
cat >"$W/node.json" <<EOF
{"generation":"1","nodeId":"node_e2e$TAG","ipamGateway":"10.77.0.1",
 "instances":[$(sed 's/"id"/"desiredState":"DESIRED_RUNNING","id"/' "$W/$A.json")]}
EOF
UNNAMED=2222222222222222222222222222222222222222222222222222222222222222
touch "$W/st/data/images/$UNNAMED" "$W/st/data/images/.$UNNAMED.part.999999"
is "$("$RTDRV" "$W/st" pass "$W/node.json" 2>>"$W/rtdrv.log")" "$A running " \
	"a fresh runtime's converge pass adopts it running"
is "$(ls -A "$W/st/data/images")" "$(basename "$IMG")" \
	"the pass removed an image no spec names and a stale partial download, kept $A's"
is "$(cat "/run/libvirt/qemu/$A.pid")" "$PID" "same QEMU pid: never restarted"
is "$(drv adopt "$W/$A.json")" ok "adopt"
is "$(cat "/run/libvirt/qemu/$A.pid")" "$PID" "same QEMU pid after adopt"

# ----------------------------------------------------------- other node
is "$(RTDRV_NODE=node_other "$RTDRV" "$W/st2" list 2>>"$W/rtdrv.log")" "" \
	"another node does not list it"
is "$(RTDRV_NODE=node_other "$RTDRV" "$W/st2" destroy $A 2>>"$W/rtdrv.log")" ok \
	"another node's destroy of the same name is 0 ..."
is "$(drv list)" "$A running" "... and leaves it running"
is "$(drv create "$W/$A.json")" "error EEXIST File exists" "create again: EEXIST"

# ---------------------------------------------------------------- stop
T0=$(date +%s)
like "$(RTDRV_ONCE=1 RTDRV_STOP_MS=60000 drv stop $A)" \
	'^error EINPROGRESS Stopping: waiting for the guest to shut down' \
	"a stop does not wait for the guest: in progress"
ok "test $(($(date +%s) - T0)) -lt 15" "... answered within seconds, not the stop timeout"
is "$(drv list)" "$A running" "still running (no OS answers ACPI)"
T0=$(date +%s)
is "$(drv stop $A)" ok "stop asked again until the timeout: forced off"
is "$(drv list)" "$A stopped" "stopped"
ok "test $(($(date +%s) - T0)) -lt 30" "stop bounded by stop_timeout"
is "$(drv stop $A)" ok "stop again: idempotent"
is "$(drv start $A)" ok "started again"
sed -e 's/DESIRED_RUNNING/DESIRED_STOPPED/' -e 's/"generation":"1"/"generation":"2"/' \
	"$W/node.json" >"$W/node-stop.json"
is "$("$RTDRV" "$W/st" pass "$W/node-stop.json" 2>>"$W/rtdrv.log")" "$A stopped " \
	"converge passes: desired stopped, shut down then forced, reported stopped"

# -------------------------------------------------------------- destroy
is "$(drv destroy $A)" ok "destroy"
ok "! $V dominfo $A >/dev/null 2>&1" "domain gone"
ok "! test -e $I" "instance dir gone (overlay, seed, NVRAM, console log)"
ok "! ls /var/lib/libvirt/qemu/nvram/ 2>/dev/null | grep -q $A" "no NVRAM left in libvirt's dir"
is "$(drv destroy $A)" ok "destroy again: 0"
is "$(drv list)" "" "nothing listed"

# ------------------------------------------------------------- refusals
nothing_left() { ! test -e "$W/st/data/instances/$1" && ! $V dominfo "$1" >/dev/null 2>&1; }
WRONG=0000000000000000000000000000000000000000000000000000000000000000
GETS0=$(grep -c 'GET /blank.img' "$HTTPS_DIR/https.log")
OUT=$(drv create "$(spec $B blank.img $WRONG)" "$W/$B.json")
like "$OUT" '^error EBADMSG ImageDigestMismatch: sha256 30e14955ebf13522\.\.\., want 0000000000000000' \
	"wrong sha256 refused with the reason"
is "$(grep -c ImageDigestMismatch <<<"$OUT")" 2 "a second create in the same process: refused again"
is "$(($(grep -c 'GET /blank.img' "$HTTPS_DIR/https.log") - GETS0))" 1 \
	"... from memory: the image was downloaded once"
ok "nothing_left $B" "no domain or instance dir"
is "$(ls -A "$W/st/data/images" | grep -c "$WRONG")" 0 "no image under the wrong digest"
is "$(ls -A "$W/st/data/images" | grep -c part)" 0 "no partial download left"

like "$(drv create "$(spec $B backing.qcow2 "$(sha "$W/www/backing.qcow2")" qcow2)")" \
	'^error EINVAL ImageRefused: qcow2 image names a backing file' \
	"qcow2 naming a backing file refused"
ok "nothing_left $B" "nothing defined"
like "$(drv create "$(spec $B datafile.qcow2 "$(sha "$W/www/datafile.qcow2")" qcow2)")" \
	'^error EINVAL ImageRefused: qcow2 image names an external data file' \
	"qcow2 naming an external data file refused"
like "$(drv create "$(spec $B clean.qcow2 "$(sha "$W/www/clean.qcow2")" raw)")" \
	'^error EINVAL ImageRefused: image is qcow2, declared raw' "qcow2 declared raw refused"
sed -i "s|https://127.0.0.1|http://127.0.0.1|" "$(spec $B blank.img "$(sha "$W/www/blank.img")")"
like "$(drv create "$W/$B.json")" '^error EINVAL ImageRefused: only https URLs' "http refused"
ok "nothing_left $B" "nothing defined"

# host admission: configured capacity, then the host's huge pages
spec $B blank.img "$(sha "$W/www/blank.img")" raw '"vcpus":3' >/dev/null
sed -i 's/"vcpus":1,//' "$W/$B.json"
like "$(RTDRV_CAPACITY=2,4096 drv create "$W/$B.json")" '^error ENOSPC ResourcesExhausted: vcpus' \
	"3 vCPUs on a 2-vCPU capacity"
spec $B blank.img "$(sha "$W/www/blank.img")" raw >/dev/null
is "$(drv create "$(spec $X blank.img "$(sha "$W/www/blank.img")")")" ok "$X takes 128 MiB"
like "$(RTDRV_CAPACITY=8,200 drv create "$W/$B.json")" '^error ENOSPC ResourcesExhausted: memory' \
	"the other domain's memory counts against the capacity"
is "$(drv destroy $X)" ok "$X destroyed"
FREE1G=$(cat /sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages 2>/dev/null || echo 0)
if [ "$FREE1G" -lt 1 ]; then
	spec $B blank.img "$(sha "$W/www/blank.img")" raw '"hugePages":"1G","memoryMib":"1024"' >/dev/null
	sed -i 's/"memoryMib":"128",//' "$W/$B.json"
	like "$(drv create "$W/$B.json")" '^error ENOSPC ResourcesExhausted: huge pages 1G \(0 free, 1 needed\)' \
		"1G huge pages the host does not have"
else
	skip "the host has free 1G huge pages" 1
fi
ok "nothing_left $B" "admission refusals define nothing"

# a create waiting for its image is provisioning, retried by the next pass
ABSENT=1111111111111111111111111111111111111111111111111111111111111111
cat >"$W/node2.json" <<EOF
{"generation":"2","nodeId":"node_e2e$TAG",
 "instances":[{"id":"$B","desiredState":"DESIRED_RUNNING","vcpus":1,"memoryMib":"128","numaNode":-1,
  "image":{"url":"https://127.0.0.1:1/blank.img","sha256":"$ABSENT","format":"raw"}}]}
EOF
like "$("$RTDRV" "$W/st" pass "$W/node2.json" 2>>"$W/rtdrv.log")" \
	"^$B provisioning ImageFetchFailed: " "image unreachable: provisioning with the reason"
ok "nothing_left $B" "nothing defined while provisioning"
is "$(ls -A "$W/st/data/images")" "" "images no spec names are gone (refused ones included)"

# a download runs off the converge thread: a create whose image server
# never answers is told "downloading" at once, and closing the runtime
# cancels the download, leaving nothing
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True); time.sleep(600)' >"$W/silent.port" &
SILENT_PID=$!
eventually 10 test -s "$W/silent.port"
SILENT=$(cat "$W/silent.port")
SLOW=3333333333333333333333333333333333333333333333333333333333333333
spec $B blank.img $SLOW >/dev/null
sed -i "s|https://127.0.0.1:$PORT/|https://127.0.0.1:$SILENT/|" "$W/$B.json"
T0=$(date +%s)
like "$(RTDRV_ONCE=1 drv create "$W/$B.json")" '^error EAGAIN ImageFetching: 3333333333333333\.\.\. downloading' \
	"a create whose image downloads is answered at once: ImageFetching"
ok "test $(($(date +%s) - T0)) -lt 15" "neither the create nor the close waited for the download"
kill "$SILENT_PID" 2>/dev/null
is "$(ls -A "$W/st/data/images" | grep -c "$SLOW")" 0 "the cancelled download left nothing"
ok "nothing_left $B" "nothing defined"

# a start libvirt refuses (its tap does not exist: net.c did not make it)
# is reported error with libvirt's own message; an empty spec destroys it
cat >"$W/node3.json" <<EOF
{"generation":"3","nodeId":"node_e2e$TAG",
 "instances":[{"id":"$X","desiredState":"DESIRED_RUNNING","vcpus":1,"memoryMib":"128","numaNode":-1,
  "image":{"url":"https://127.0.0.1:$PORT/blank.img","sha256":"$(sha "$W/www/blank.img")","format":"raw"},
  "nics":[{"tap":"bctn$TAG","mac":"52:54:00:e2:e0:02"}]}]}
EOF
OUT=$("$RTDRV" "$W/st" pass "$W/node3.json" 2>>"$W/rtdrv.log")
like "$OUT" "^$X error start failed: .*specified dev doesn't exist" "start refused: error with libvirt's reason"
note "$OUT"
echo '{"generation":"4","nodeId":"node_e2e'$TAG'"}' >"$W/node4.json"
is "$("$RTDRV" "$W/st" pass "$W/node4.json" 2>>"$W/rtdrv.log")" "$X deleted " \
	"a spec that no longer names it: destroyed, reported deleted"
ok "nothing_left $X" "domain and files gone"

# NUMA node and pinned vCPUs, as the flavor asks: applied by libvirt
if [ -d /sys/devices/system/node/node0 ] && [ "$(nproc)" -ge 2 ]; then
	spec $X blank.img "$(sha "$W/www/blank.img")" raw '"numaNode":0,"pinnedVcpus":[1,0]' >/dev/null
	sed -i -e 's/"numaNode":-1,//' -e 's/"vcpus":1/"vcpus":2/' "$W/$X.json"
	is "$(drv create "$W/$X.json")" ok "create with NUMA node 0 and pinned vCPUs"
	is "$(drv start $X)" ok "started"
	like "$($V vcpupin $X | tr -s ' ')" ' 0 1
 1 0' "vCPU 0 on host CPU 1, vCPU 1 on host CPU 0"
	like "$($V numatune $X | tr -s ' ')" 'numa_mode : strict
numa_nodeset : 0' "memory bound to node 0, strict"
	is "$(drv destroy $X)" ok "destroyed"
else
	skip "no NUMA node 0 or fewer than 2 CPUs" 5
fi

# -------------------------------------------------------- golden XML
for g in "$BC_SRC"/tests/unit/golden/domxml_*.xml; do
	virt-xml-validate "$g" domain >/dev/null 2>&1
	ok $? "libvirt's schema accepts $(basename "$g")"
done

is "$(ls -A "$W/st/data/instances")" "" "no instance dir left"
ok "! grep -q 'Sanitizer\|runtime error' $W/rtdrv.log" "no sanitizer report"
done_testing
