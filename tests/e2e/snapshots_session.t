# snapshots_session.t: the libvirt runtime's memory capture and restore
# (agent/runtime_libvirt_snapshot.c, agent/runtime_libvirt_save.c) on a
# private per-user libvirtd: qemu:///session as the unprivileged user
# `nobody`, with its own HOME and XDG_RUNTIME_DIR in a temp dir, so neither
# the host's libvirtd nor its domains are touched and a crash here hurts
# nothing else. Driven by tests/e2e/rtdrv, one process per operation. The
# guest is a blank disk (the domain sits in its UEFI firmware): what is
# tested is libvirt's handling of bcd's save image; a real guest's
# processes surviving is tests/e2e/snapshots.t.
#
# The reproduction: before the fix, the restore below (the save image's
# header rewritten with the new instance's definition, which has
# <os firmware='efi'> and no <loader>) killed libvirtd 9.0 with a NULL
# strcmp in qemuProcessPrepareHost. Proves: a memory capture of a running
# domain leaves it running; the restore is accepted and resumes a new
# domain with its own name, uuid and NVRAM file, the source's firmware
# loader, while the source keeps running and the daemon stays the same
# process; damaged save images inside an object (a huge data_len, a partial
# save, no QEMU stream) are refused by bcd before libvirtd is asked, with
# nothing left defined; a disk-only snapshot restores stopped; a memory
# restore is marked up (guestready.h) only when its source's guest had
# announced itself up before the capture. With the guest image
# (build/guest, `make guest`; else those tests are skipped, saying so): a
# real guest's process (started by its user data, writing "BC-ALIVE <pid>
# <file> <n>" to the serial console every 2 s) runs on in the memory
# restore, the same pid, on the restore's own console log, and its NVRAM
# file holds its source's UEFI variables (QEMU's flash travels in the
# memory stream).
. "$(dirname "$0")/../lib/tap.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BC_BUILD:=$BC_SRC/build}"
RTDRV=$BC_BUILD/tests/e2e/rtdrv

[ "$(id -u)" -eq 0 ] || skip_all "needs root (to run as nobody)"
[ -x "$RTDRV" ] || skip_all "no $RTDRV (make all)"
id nobody >/dev/null 2>&1 || skip_all "no user nobody"
for c in libvirtd virsh qemu-system-x86_64 qemu-img runuser python3; do
	command -v "$c" >/dev/null || skip_all "$c not installed"
done
runuser -u nobody -- test -x "$RTDRV" || skip_all "$RTDRV not executable by nobody"

W=$(mktemp -d /tmp/bc-lvs.XXXXXX)
chmod 0711 "$W"
mkdir -p "$W/home" "$W/run" "$W/st/data/images"
TAG=$$
S=e2e_s$TAG R=e2e_r$TAG D=e2e_d$TAG X=e2e_x$TAG U=e2e_u$TAG G=e2e_g$TAG GR=e2e_h$TAG
as_user() {
	runuser -u nobody -- env -i PATH="$PATH" HOME="$W/home" XDG_RUNTIME_DIR="$W/run" \
		RTDRV_URI=qemu:///session RTDRV_NODE=node_lvs$TAG RTDRV_USER_DATA="$W/user-data" \
		RTDRV_STOP_MS=2000 "$@"
}
V() { as_user virsh -c qemu:///session "$@"; }
drv() { as_user "$RTDRV" "$W/st" "$@" 2>>"$W/rtdrv.log"; }
daemon_pid() { cat "$W/run/libvirt/libvirtd.pid" 2>/dev/null; }
# alive PID: runs, and is not a zombie (a crashed daemon may stay one)
alive() {
	local s
	s=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)
	[ -n "$s" ] && [ "$s" != Z ]
}
cleanup() {
	local d p
	for d in $S $R $D $X $U $G $GR; do
		V destroy "$d" >/dev/null 2>&1
		V undefine --nvram "$d" >/dev/null 2>&1
	done
	for p in "$W/run/libvirt/libvirtd.pid" "$W/run/libvirt/virtlogd.pid"; do
		[ -s "$p" ] && kill "$(cat "$p")" 2>/dev/null
	done
	sleep 0.5
	rm -rf "$W"
}
tap_on_exit cleanup

truncate -s 1M "$W/blank.img"
SHA=$(sha256sum "$W/blank.img" | cut -d' ' -f1)
cp "$W/blank.img" "$W/st/data/images/$SHA"  # in the pool already: never fetched
printf '#cloud-config\n' >"$W/user-data"
spec() {
	cat >"$W/$1.json" <<EOF
{"id":"$1","vcpus":1,"memoryMib":"128","diskGib":"1","numaNode":-1,
 "image":{"url":"https://127.0.0.1:9/blank.img","sha256":"$SHA","format":"raw"},
 "userDataRef":"ud/$1"}
EOF
	echo "$W/$1.json"
}
chown -R nobody "$W"
chmod 0711 "$W/st"

V list >/dev/null 2>&1 || skip_all "no qemu:///session daemon for nobody: $(V list 2>&1 | head -1)"
is "$(drv create "$(spec $S)")" ok "create the source"
is "$(drv start $S)" ok "start it"
sleep 2
like "$(drv capture $S "$W/mem.obj" memory)" '^ok paused_ms=[0-9]+$' "capture with memory"
is "$(drv list)" "$S running" "the source runs after its capture"
P0=$(daemon_pid)
ok "test -n '$P0' && alive '$P0'" "the session daemon runs (pid $P0)"

# ------------------------------------------------------ the restore
is "$(drv restore "$(spec $R)" "$W/mem.obj")" "ok running" \
	"a memory restore into a new instance: resumed (libvirtd 9.0 crashed here before)"
is "$(daemon_pid)" "$P0" "... libvirtd is the same process, alive"
ok "alive '$P0'" "... and still runs"
is "$(V domstate $R 2>&1)" running "... the restore runs"
is "$(V domstate $S 2>&1)" running "... and so does its source"
XML=$(V dumpxml $R)
like "$XML" "<nvram[^>]*>$W/st/data/instances/$R/nvram.fd</nvram>" "... on its own NVRAM file"
like "$XML" "<loader[^>]*>/[^<]+</loader>" "... with the source's firmware loader"
ok "test -f '$W/st/data/instances/$R/nvram.fd'" "... its NVRAM file made from the template"
isnt "$(V domuuid $R)" "$(V domuuid $S)" "... its own uuid"
ok "! test -e '$W/st/data/instances/$R/restore.save'" "... no save image left behind"
is "$(drv up $R)" down "... not marked up: its source's guest had not announced itself"
is "$(drv mark $S)" ok "the source's guest announces itself up"
like "$(drv capture $S "$W/mem2.obj" memory)" '^ok paused_ms=[0-9]+$' "... captured with memory again"
is "$(drv restore "$(spec $U)" "$W/mem2.obj")" "ok running" "... restored"
is "$(drv up $U)" up "... and that restore is marked up at once (it will not announce again)"

# ---------------------------------------------- damaged save images
# damage OFFSET_IN_SAVE HEX NAME: a copy of mem.obj with bytes of its save
# image replaced
damage() {
	python3 - "$W/mem.obj" "$W/$3.obj" "$1" "$2" <<'EOF'
import sys
src, dst, off, hexb = sys.argv[1], sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4])
d = bytearray(open(src, 'rb').read())
base = d.index(b'LibvirtQemudSave')
d[base + off:base + off + len(hexb)] = hexb
open(dst, 'wb').write(d)
EOF
	chown nobody "$W/$3.obj"
}
damage 20 ffffff7f huge    # data_len 2 GiB: libvirtd would allocate it
damage 0 4c69627669727451656d756450617274 part  # "LibvirtQemudPart"
damage 92 3c646f6d61316e nodomain
for n in huge part nodomain; do
	like "$(drv restore "$(spec $X)" "$W/$n.obj")" '^error [A-Z]+ SnapshotRefused: ' \
		"a damaged save image ($n): refused by bcd"
	ok "! V domstate $X >/dev/null 2>&1" "... nothing left defined"
	ok "! test -e '$W/st/data/instances/$X'" "... nor its directory"
done
is "$(daemon_pid)" "$P0" "libvirtd still the same process after the damaged images"
ok "alive '$P0'" "... alive"

# ------------------------------------------------------ disk only
like "$(drv capture $S "$W/disk.obj" disk)" '^ok paused_ms=[0-9]+$' "capture the disk only"
is "$(drv restore "$(spec $D)" "$W/disk.obj")" "ok stopped" "a disk-only restore: defined, boots fresh"
is "$(drv list | sort)" "$(printf '%s running\n%s running\n%s running\n%s stopped' $S $R $U $D | sort)" \
	"the runtime lists the source, the memory restores and the disk restore"

# ------------------------------------------------------ a real guest
: "${BC_GUEST_DIR:=$BC_BUILD/guest}"
GI=$BC_GUEST_DIR/guest.qcow2
if [ ! -s "$GI" ] || [ ! -s "$GI.sha256" ]; then
	skip "no guest image in $BC_GUEST_DIR (make guest)" 8
else
	for d in $S $R $D $U; do drv destroy "$d" >/dev/null; done  # room for the guests
	GSHA=$(cut -d' ' -f1 "$GI.sha256")
	cp "$GI" "$W/st/data/images/$GSHA" && chown nobody "$W/st/data/images/$GSHA"
	gspec() {
		cat >"$W/$1.json" <<EOF
{"id":"$1","vcpus":1,"memoryMib":"512","diskGib":"4","numaNode":-1,
 "image":{"url":"https://127.0.0.1:9/guest.qcow2","sha256":"$GSHA","format":"qcow2"},
 "userDataRef":"ud/$1"}
EOF
		chown nobody "$W/$1.json"
		echo "$W/$1.json"
	}
	cat >"$W/user-data" <<'EOF'
#!/bin/sh
echo snap-marker-42 > /root/marker
setsid sh -c 'n=0; while :; do n=$((n + 1)); echo "BC-ALIVE $$ $(cat /root/marker) $n" > /dev/ttyS0; sleep 2; done' >/dev/null 2>&1 </dev/null &
EOF
	con() { echo "$W/st/data/instances/$1/console.log"; }
	alive_pid() { grep -a -o -E 'BC-ALIVE [0-9]+ snap-marker-42 [0-9]+' "$(con "$1")" 2>/dev/null | tail -n1 | cut -d' ' -f2; }
	has_alive() { [ -n "$(alive_pid "$1")" ]; }
	alive_n() { grep -a -c -E "BC-ALIVE $2 snap-marker-42" "$(con "$1")" 2>/dev/null; }
	is "$(drv create "$(gspec $G)")$(drv start $G)" okok "a real guest created and started"
	eventually "${BC_E2E_BOOT_TIMEOUT:-900}" has_alive $G
	ok $? "... its process reports on the console (pid $(alive_pid $G))"
	GPID=$(alive_pid $G)
	like "$(drv capture $G "$W/guest.obj" memory)" '^ok paused_ms=[0-9]+$' "the real guest captured with memory"
	cp "$W/st/data/instances/$G/nvram.fd" "$W/g.nvram"
	is "$(drv restore "$(gspec $GR)" "$W/guest.obj")" "ok running" "... restored into a new instance"
	# QEMU's flash is RAM the stream carries: on resume it writes it to the
	# new NVRAM file, which libvirt had made from the template
	tmplv=$(V dumpxml $GR | sed -n "s/.*<nvram template='\([^']*\)'.*/\1/p")
	cmp -s "$W/g.nvram" "$W/st/data/instances/$GR/nvram.fd"
	ok $? "... its NVRAM file holds the source's UEFI variables"
	! cmp -s "$W/g.nvram" "$tmplv"
	ok $? "... which are not the firmware's template (${tmplv:-none named})"
	eventually 120 has_alive $GR
	is "$(alive_pid $GR)" "$GPID" "... where the same process (pid $GPID) reports on the restore's own console"
	n1=$(alive_n $GR "$GPID")
	sleep 6
	n2=$(alive_n $GR "$GPID")
	ok "[ '$n2' -gt '$n1' ]" "... and goes on running ($n1 then $n2 lines)"
fi
ok "! grep -q 'Sanitizer\|runtime error' '$W/rtdrv.log'" "no sanitizer report"
done_testing
