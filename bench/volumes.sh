#!/usr/bin/env bash
# volumes.sh: the sandbox volume rows of `make bench` on real guests
# (called by bench/run.sh, BENCH_ONLY=volumes for these rows alone). Needs
# root, a libvirtd and the guest image (build/guest/guest.qcow2, `make
# guest`); prints nothing (and says why on stderr) otherwise, or while
# another bcd enforces nftables in this network namespace.
#
#   write, read: sequential dd of BENCH_VOLUME_MIB (default 256) MiB with
#     O_DIRECT inside a guest, on its volume mounted at /workspace (ext4 on
#     the virtio disk), beside the same dd on the host on a raw file in the
#     same directory as the volume's file: the virtio and ext4 overhead
#   create -> ready: SandboxVolumes.Create until bcd made the volume's file
#     (a 1 GiB volume, median of BENCH_VOLUME_N, default 5) beside `truncate
#     -s 1G` of a file there, the sparse file itself
#
# Output: one tab-separated row per line: name, metric, bc value, peer
# name, peer value.
set -u

here=$(cd "$(dirname "$0")" && pwd)
unset BC_STACK_DIR BC_STACK_PERSIST STACK_SH_LOADED TAP_SH_LOADED HTTPS_SH_LOADED
unset BC_CTL_EXTRA_CONF BC_AGENT_EXTRA_CONF
. "$here/../tests/lib/stack.sh"
. "$here/../tests/lib/https.sh"
. "$here/../tests/lib/libvirt.sh"
TAP_DONE=1 # not a TAP file

: "${BENCH_VOLUME_MIB:=256}"
: "${BENCH_VOLUME_N:=5}"
: "${BENCH_GUEST_DIR:=$BC_SRC/build/guest}"
: "${BENCH_GUEST_TIMEOUT:=600}"
say() { echo "bench/volumes.sh: $*" >&2; }

if [ "$(id -u)" -ne 0 ] || ! libvirt_up; then
	say "skipped: needs root and libvirtd (${LIBVIRT_WHY:-not root})"
	exit 0
fi
if [ ! -s "$BENCH_GUEST_DIR/guest.qcow2" ]; then
	say "skipped: no guest image in $BENCH_GUEST_DIR (make guest)"
	exit 0
fi
if _stack_nft_agents; then
	say "skipped: another bcd enforces nftables in this network namespace"
	exit 0
fi

export BC_LOG_LEVEL=warn
https_up "$BENCH_GUEST_DIR" >/dev/null || { say "https_up failed"; exit 0; }
export BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
export BC_POOL_BRIDGE=bcbv$$ BC_POOL_SUBNET=10.218.$(($$ % 250)).0/24
export BC_POOL_GATEWAY=10.218.$(($$ % 250)).1
stack_up --runtime libvirt --controllers 1 --agents 1 --agent-capacity 8,8192,50 >&2 ||
	{ say "stack_up failed"; exit 0; }
q() { psql -d bc -XAtq -c "$1"; }
ms() { date +%s%3N; }
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
VD=$STACK_DIR/data-1/volumes

# -- create -> ready (the file on the host), beside truncate
: >"$STACK_DIR/vc.times"
: >"$STACK_DIR/vt.times"
for ((i = 0; i < BENCH_VOLUME_N; i++)); do
	t0=$(ms)
	v=$(json_get "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name "bench-c$i" --size 1)" id)
	[ -n "$v" ] || { say "volume create failed"; exit 0; }
	until [ -f "$VD/$v.raw" ]; do
		[ $(($(ms) - t0)) -lt 60000 ] || { say "volume $v never made"; exit 0; }
		sleep 0.01
	done
	echo $(($(ms) - t0)) >>"$STACK_DIR/vc.times"
	t0=$(date +%s%6N)
	truncate -s 1G "$VD/../bench-peer-$i.raw"
	echo $(($(date +%s%6N) - t0)) >>"$STACK_DIR/vt.times"
	rm -f "$VD/../bench-peer-$i.raw"
	bcctl sandbox-volume delete "$v" >/dev/null
done
printf 'volume create -> file on the host\tp50_us\t%s\ttruncate -s 1G\t%s\n' \
	"$(($(median <"$STACK_DIR/vc.times") * 1000))" "$(median <"$STACK_DIR/vt.times")"

# -- dd in a guest on its volume, beside dd on the host
sha=$(cut -d' ' -f1 "$BENCH_GUEST_DIR/guest.qcow2.sha256")
size=$(stat -c%s "$BENCH_GUEST_DIR/guest.qcow2")
img=$(json_get "$(bcctl --format json image create --name guest --format qcow2 \
	--url "$HTTPS_URL/guest.qcow2" --sha256 "$sha" --size "$size")" id)
ssh-keygen -q -t ed25519 -N '' -f "$STACK_DIR/bench-key"
gib=$(((BENCH_VOLUME_MIB * 2 + 1023) / 1024 + 1))
vol=$(json_get "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name bench-dd --size "$gib")" id)
printf '#cloud-config\nruncmd:\n  - [sh, -c, "chmod 1777 /workspace || true"]\n' >"$STACK_DIR/bench-ud"
tmpl=$(json_get "$(bcctl --format json sandbox-template create --name bench-vol --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --user-data-file "$STACK_DIR/bench-ud" \
	--volumes "bench-dd:/workspace")" id)
[ -n "$vol" ] && [ -n "$tmpl" ] || { say "volume or template not created"; exit 0; }
sbx=$(json_get "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h)" id)
gx() { bcctl sandbox exec "$sbx" --key "$STACK_DIR/bench-key" -- "$1" </dev/null 2>/dev/null; }
t0=$(ms)
until gx 'cloud-init status --wait >/dev/null && findmnt -n /workspace >/dev/null'; do
	[ $(($(ms) - t0)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ] || { say "sandbox $sbx never reachable"; exit 0; }
	sleep 1
done
# one dd, timed inside the guest: its ms
guest_dd() {
	gx "s=\$(date +%s%N); dd $1 bs=1M count=$BENCH_VOLUME_MIB status=none; e=\$(date +%s%N); echo \$(((e - s) / 1000000))"
}
host_dd() {
	local s e
	s=$(date +%s%N)
	dd $1 bs=1M count="$BENCH_VOLUME_MIB" status=none
	e=$(date +%s%N)
	echo $(((e - s) / 1000000))
}
gw=$(guest_dd "if=/dev/zero of=/workspace/bench oflag=direct conv=fsync")
gr=$(guest_dd "if=/workspace/bench of=/dev/null iflag=direct")
peer=$VD/../bench-peer-dd.raw
hw=$(host_dd "if=/dev/zero of=$peer oflag=direct conv=fsync")
hr=$(host_dd "if=$peer of=/dev/null iflag=direct")
rm -f "$peer"
mibs() { [ -n "$1" ] && [ "$1" -gt 0 ] && echo $((BENCH_VOLUME_MIB * 1000 / $1)); }
say "guest write/read ms: ${gw:-?}/${gr:-?}; host write/read ms: $hw/$hr"
[ -n "$gw" ] && printf 'volume: guest dd write %s MiB (O_DIRECT)\tMiB_per_s\t%s\thost dd, raw file\t%s\n' \
	"$BENCH_VOLUME_MIB" "$(mibs "$gw")" "$(mibs "$hw")"
[ -n "$gr" ] && printf 'volume: guest dd read %s MiB (O_DIRECT)\tMiB_per_s\t%s\thost dd, raw file\t%s\n' \
	"$BENCH_VOLUME_MIB" "$(mibs "$gr")" "$(mibs "$hr")"
bcctl sandbox delete "$sbx" >/dev/null
exit 0
