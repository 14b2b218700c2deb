#!/usr/bin/env bash
# libvirt.sh: the real-VM row of `make bench` (called by bench/run.sh, which
# prints it in its table). Needs root and a libvirtd; prints nothing (and
# says why on stderr) otherwise, or while another bcd enforces nftables in
# this network namespace (its tables would be replaced by this stack's).
#
#   Instances.Create -> running: `bc_bench push` through a whole stack of
#     its own (controller, spec push, bcd with `runtime = libvirt`: host
#     admission, image header check, overlay, NoCloud seed, define, start,
#     Node.Report, the controller's update), a blank image already fetched
#     by a first instance
#   peer: `virsh create` (define + start of a transient domain) of the same
#     domain XML, on the same overlay, seed, NVRAM and tap, with the bc
#     domain shut off and bcd stopped meanwhile
#
# Output: one tab-separated row per line: name, metric, bc value, peer
# name, peer value. Knob: BENCH_LIBVIRT_N (default 5) of each.
set -u

here=$(cd "$(dirname "$0")" && pwd)
unset BC_STACK_DIR BC_STACK_PERSIST STACK_SH_LOADED TAP_SH_LOADED HTTPS_SH_LOADED
# run.sh's stack holds the ports its extra config names (metrics_listen,
# http_listen): this stack is another, with its own
unset BC_CTL_EXTRA_CONF BC_AGENT_EXTRA_CONF
. "$here/../tests/lib/stack.sh"
. "$here/../tests/lib/https.sh"
. "$here/../tests/lib/libvirt.sh"
TAP_DONE=1 # not a TAP file

: "${BENCH_LIBVIRT_N:=5}"
: "${BC_BENCH:=$BC_SRC/build/bench/bc_bench}"
say() { echo "bench/libvirt.sh: $*" >&2; }

if [ "$(id -u)" -ne 0 ] || ! libvirt_up; then
	say "skipped: needs root and libvirtd (${LIBVIRT_WHY:-not root})"
	exit 0
fi
if _stack_nft_agents; then
	say "skipped: another bcd enforces nftables in this network namespace"
	exit 0
fi

tmp=$(mktemp -d /tmp/bcbench-lv.XXXXXX)
chmod 0711 "$tmp"
tap_on_exit rm -rf "$tmp"
mkdir -p "$tmp/www"
truncate -s 1M "$tmp/www/blank.img"
https_up "$tmp/www" "$tmp/https" >/dev/null || { say "https_up failed"; exit 0; }

export BC_LOG_LEVEL=warn BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
export BC_POOL_BRIDGE=bcbl$$ BC_POOL_SUBNET=10.216.$(($$ % 250)).0/24
export BC_POOL_GATEWAY=10.216.$(($$ % 250)).1
stack_up --runtime libvirt --controllers 1 --agents 1 --agent-capacity 64,65536,100 >&2 ||
	{ say "stack_up failed"; exit 0; }
sha=$(sha256sum "$tmp/www/blank.img" | cut -d' ' -f1)
img=$(json_get "$(bcctl --format json image create --name blank --format raw \
	--url "$HTTPS_URL/blank.img" --sha256 "$sha" --size 1048576)" id)
tls=(--ca "$BC_CA_FILE" --token "$BC_TOKEN")
push() {
	"$BC_BENCH" push --target "$BC_URL" "${tls[@]}" --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" --count "$1" 2>>"$STACK_DIR/bench-client.log"
}
push 1 >/dev/null  # the image download is not part of the figure
out=$(push "$BENCH_LIBVIRT_N")
p50=$(for kv in $out; do [ "${kv%%=*}" = p50_us ] && echo "${kv#*=}"; done)

# the peer: one of those domains' XML, as virsh create, on its own files
id=$(bcctl --format json instance list | jq -r '[.items[] | select(.state == "running")][0].id // empty')
[ -n "$id" ] || { say "no running instance: $out"; exit 0; }
agent_kill 1 >/dev/null 2>&1  # bcd would start it again
V="virsh -c $LIBVIRT_URI"
$V dumpxml --inactive "$id" | sed -e "s|<name>$id</name>|<name>bcpeer$$</name>|" -e '/<uuid>/d' \
	>"$tmp/peer.xml"
$V destroy "$id" >/dev/null
times=()
for ((i = 0; i < BENCH_LIBVIRT_N; i++)); do
	t0=${EPOCHREALTIME/[.,]/}
	$V create "$tmp/peer.xml" >/dev/null || { say "virsh create failed"; exit 0; }
	t1=${EPOCHREALTIME/[.,]/}
	times+=($((t1 - t0)))
	$V destroy "bcpeer$$" >/dev/null
done
peer=$(printf '%s\n' "${times[@]}" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
printf 'Instances.Create -> running, libvirt\tp50_us\t%s\tvirsh create, same XML\t%s\n' \
	"$p50" "$peer"
exit 0
