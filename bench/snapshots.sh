#!/usr/bin/env bash
# snapshots.sh: the snapshot rows of `make bench` (called by bench/run.sh,
# BENCH_ONLY=snapshots for these rows alone). The store is s3rver over https
# with a test CA (tests/lib/s3.sh; `make node-deps`), on loopback.
#
#   upload: a BENCH_SNAP_MIB (default 1024) MiB file of random bytes PUT to
#     a presigned URL by bcd's own upload code (agent/xfer.c xfer_put_file,
#     through build/bench/bench_xfer; the URL presigned by common/sigv4.c as
#     the controller does), beside `curl -T` of the same file to the same
#     server: MiB/s, median of BENCH_SNAP_N (default 3) rounds, alternating
#     (target bc/peer >= 0.9); and the upload's peak resident memory above
#     the process's idle (target: under 16 MiB)
#   restore -> ready: `bcctl sandbox create --from-snapshot` of a memory
#     snapshot until the sandbox is ready, beside a cold create -> ready of
#     the same template (real guests: root, a libvirtd and the guest image,
#     build/guest/guest.qcow2; skipped, saying why on stderr, otherwise);
#     median of BENCH_SNAP_N each, one sandbox at a time. A memory restore
#     should be far below a cold boot: the ratio column says how far. The
#     first restore downloads the object; bcd keeps it verified for the
#     next ones (docs/snapshots.md), so the median is a restore from the
#     host's copy. BENCH_SNAP_RESTORE=0 skips these rows
#
# Output: one tab-separated row per line: name, metric, bc value, peer
# name, peer value.
set -u

here=$(cd "$(dirname "$0")" && pwd)
unset BC_STACK_DIR BC_STACK_PERSIST STACK_SH_LOADED TAP_SH_LOADED HTTPS_SH_LOADED S3_SH_LOADED
unset BC_CTL_EXTRA_CONF BC_AGENT_EXTRA_CONF
. "$here/../tests/lib/stack.sh"
. "$here/../tests/lib/https.sh"
. "$here/../tests/lib/libvirt.sh"
. "$here/../tests/lib/s3.sh"
TAP_DONE=1 # not a TAP file

: "${BENCH_SNAP_MIB:=1024}"
: "${BENCH_SNAP_N:=3}"
: "${BENCH_GUEST_DIR:=$BC_SRC/build/guest}"
: "${BENCH_GUEST_TIMEOUT:=900}"
: "${BENCH_XFER:=$BC_SRC/build/bench/bench_xfer}"
say() { echo "bench/snapshots.sh: $*" >&2; }
ms() { date +%s%3N; }
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

[ -x "$BENCH_XFER" ] || { say "skipped: no $BENCH_XFER (make bench-bins)"; exit 0; }
W=$(mktemp -d /var/tmp/bc-bench-snap.XXXXXX)
snap_cleanup() { rm -rf "$W"; }
tap_on_exit snap_cleanup
s3_up "$W/s3" bench --tls >&2 || { say "skipped: s3rver did not start"; exit 0; }

# ------------------------------------------------------------ upload
head -c $((BENCH_SNAP_MIB << 20)) /dev/urandom >"$W/obj"
bytes=$(stat -c %s "$W/obj")
presign() { "$BENCH_XFER" presign "$S3_ENDPOINT" "$S3_BUCKET" "$1" "$S3_ACCESS_KEY_ID" "$S3_SECRET_FILE"; }
: >"$W/bc.mibs"
: >"$W/curl.mibs"
: >"$W/rss.kib"
for ((i = 0; i < BENCH_SNAP_N; i++)); do
	# the same keys each round: the store keeps one copy of each
	out=$("$BENCH_XFER" put "$(presign bench/xfer)" "$W/obj" "$S3_CA_FILE") ||
		{ say "xfer_put_file failed: $out"; exit 0; }
	say "xfer.c: $out"
	t=$(sed -n 's/.*ms=\([0-9]*\).*/\1/p' <<<"$out")
	idle=$(sed -n 's/.*rss_idle_kib=\([0-9]*\).*/\1/p' <<<"$out")
	peak=$(sed -n 's/.*rss_peak_kib=\([0-9]*\).*/\1/p' <<<"$out")
	[ -n "$t" ] && [ "$t" -gt 0 ] && echo $((bytes * 1000 / t / 1048576)) >>"$W/bc.mibs"
	echo $((peak - idle)) >>"$W/rss.kib"
	c=$(curl -sS -o /dev/null -w '%{time_total} %{http_code}' --cacert "$S3_CA_FILE" \
		-T "$W/obj" "$(presign bench/curl)") || { say "curl -T failed: $c"; exit 0; }
	say "curl -T: $c"
	[ "${c#* }" = 200 ] || { say "curl -T: HTTP ${c#* }"; exit 0; }
	awk -v s="${c% *}" -v b="$bytes" 'BEGIN { if (s > 0) printf "%d\n", b / s / 1048576 }' >>"$W/curl.mibs"
done
printf 'snapshot upload %s MiB (xfer.c, https)\tMiB_per_s\t%s\tcurl -T, same server\t%s\n' \
	"$BENCH_SNAP_MIB" "$(median <"$W/bc.mibs")" "$(median <"$W/curl.mibs")"
printf 'snapshot upload: peak RSS above idle\tMiB\t%s\ttarget\t16\n' \
	"$(median <"$W/rss.kib" | awk '{printf "%.1f", $1 / 1024}')"
rm -f "$W/obj"

# ------------------------------------------------- restore -> ready
if [ "${BENCH_SNAP_RESTORE:-1}" != 1 ]; then
	say "restore rows skipped: BENCH_SNAP_RESTORE=$BENCH_SNAP_RESTORE"
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! libvirt_up; then
	say "restore rows skipped: needs root and libvirtd (${LIBVIRT_WHY:-not root})"
	exit 0
fi
if [ ! -s "$BENCH_GUEST_DIR/guest.qcow2" ]; then
	say "restore rows skipped: no guest image in $BENCH_GUEST_DIR (make guest)"
	exit 0
fi
if _stack_nft_agents; then
	say "restore rows skipped: another bcd enforces nftables in this network namespace"
	exit 0
fi
export BC_LOG_LEVEL=warn
https_up "$BENCH_GUEST_DIR" >/dev/null || { say "https_up failed"; exit 0; }
export BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
export BC_POOL_BRIDGE=bcbs$$ BC_POOL_SUBNET=10.219.$(($$ % 250)).0/24
export BC_POOL_GATEWAY=10.219.$(($$ % 250)).1
export BC_AGENT_EXTRA_CONF="snapshot_ca_file = $S3_CA_FILE"
export BC_CTL_EXTRA_CONF="snapshot_store_endpoint = $S3_ENDPOINT
snapshot_store_bucket = $S3_BUCKET
snapshot_store_path_style = 1
snapshot_store_prefix = bc/
snapshot_store_access_key_id = $S3_ACCESS_KEY_ID
snapshot_store_ca_file = $S3_CA_FILE"
stack_up --runtime libvirt --controllers 1 --agents 1 --agent-capacity 8,8192,50 >&2 ||
	{ say "stack_up failed"; exit 0; }
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$STACK_DIR/ctl-1.conf" \
	<"$S3_SECRET_FILE" >/dev/null 2>&1 || { say "snapshot-store set-secret failed"; exit 0; }
q() { psql -d bc -XAtq -c "$1"; }
sha=$(cut -d' ' -f1 "$BENCH_GUEST_DIR/guest.qcow2.sha256")
size=$(stat -c%s "$BENCH_GUEST_DIR/guest.qcow2")
img=$(json_get "$(bcctl --format json image create --name guest --format qcow2 \
	--url "$HTTPS_URL/guest.qcow2" --sha256 "$sha" --size "$size")" id)
tmpl=$(json_get "$(bcctl --format json sandbox-template create --name bench-snap --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")" id)
[ -n "$tmpl" ] || { say "template not created"; exit 0; }
# until SBX is ready: ms since T0, empty if it never is
ready_in() {
	local st
	while [ $(($(ms) - $2)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ]; do
		st=$(q "SELECT state FROM sandboxes WHERE id = '$1'")
		[ "$st" = ready ] && { echo $(($(ms) - $2)); return 0; }
		[ "$st" = failed ] && return 1
		sleep 0.1
	done
	return 1
}
gone() { [ "$(q "SELECT count(*) FROM instances i JOIN sandboxes s ON s.instance_id = i.id WHERE s.id = '$1' AND i.state <> 'deleted'")" = 0 ]; }
drop() {
	local s0
	bcctl sandbox delete "$1" >/dev/null
	s0=$(ms)
	until gone "$1" || [ $(($(ms) - s0)) -gt 120000 ]; do sleep 0.5; done
}
# the source: booted (the image fetched) and ready, not timed
src=$(json_get "$(bcctl --format json sandbox create --template "$tmpl" --ttl 2h)" id)
ready_in "$src" "$(ms)" >/dev/null || { say "source sandbox $src never ready"; exit 0; }
snap=$(json_get "$(bcctl --format json sandbox snapshot "$src")" id)
snap_ready() { [ "$(q "SELECT state FROM sandbox_snapshots WHERE id = '$snap'")" = ready ]; }
s0=$(ms)
until snap_ready; do
	[ $(($(ms) - s0)) -lt $((BENCH_GUEST_TIMEOUT * 1000)) ] || { say "snapshot $snap never ready"; exit 0; }
	sleep 0.5
done
say "memory snapshot $snap of $src ready in $(($(ms) - s0)) ms"
: >"$W/cold.ms"
: >"$W/restore.ms"
for ((i = 0; i < BENCH_SNAP_N; i++)); do
	t0=$(ms)
	c=$(json_get "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h)" id)
	t=$(ready_in "$c" "$t0") || { say "cold sandbox $c never ready"; exit 0; }
	echo "$t" >>"$W/cold.ms"
	drop "$c"
	t0=$(ms)
	r=$(json_get "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h --from-snapshot "$snap")" id)
	t=$(ready_in "$r" "$t0") || { say "restore $r never ready: $(q "SELECT i.reason FROM instances i JOIN sandboxes s ON s.instance_id = i.id WHERE s.id = '$r'")"; exit 0; }
	echo "$t" >>"$W/restore.ms"
	drop "$r"
	say "round $i: cold $(tail -n1 "$W/cold.ms") ms, memory restore $t ms"
done
printf 'sandbox restore (memory) -> ready\tms\t%s\tcold create -> ready\t%s\n' \
	"$(median <"$W/restore.ms")" "$(median <"$W/cold.ms")"
exit 0
