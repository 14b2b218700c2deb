# volumes_host.t: bcd's side of sandbox volumes (agent/volumes.c) on the
# fake runtime, whose volume store stands in for a filesystem of its
# capacity_disk_gib (100 GiB here, the default reserve 5 %) while the files
# are real: `sandbox-volume create` makes <id>.raw in the agent's volumes
# directory, sparse, 0600, of the volume's size; the controller's
# host_volume_storage holds what bcd computes from the files (committed =
# sizes, outstanding = unwritten bytes, available = the store less the
# blocks written); resize grows the file in place, keeping its data; a
# half-made file and a file no spec names are removed, a file of another
# name left alone; delete wipes the file (its blocks released: a reader
# that held it open reads zeros) before the host reports the generation
# that releases the booking. A host that fills up: bcd restarted with a
# reserve of 99 % cannot make a volume booked while it was down; the volume
# stays outstanding (no file, not committed), the node carries the warning
# volume-storage naming it, and the controller books nothing more there;
# with the reserve back, the volume is made and the warning ends. The
# doctor (bc-controller doctor, Doctor.Run) says why: storage-full.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,100 || bail_out "stack_up failed"

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
node=$(agent_node_id 1)
GIB=1073741824
VD=$STACK_DIR/agent-1/data/volumes

stored() { [ "$(q "SELECT count(*) FROM host_volume_storage WHERE node_id = '$node'")" = 1 ]; }
eventually 20 stored
ok $? 'the host reported its volume store'
ok "[ -d '$VD' ]" 'bcd made its volumes directory (data_dir/volumes)'

# what bcd should report, from the files: available committed outstanding
from_files() {
	local alloc=0 size=0 unwritten=0 s b f
	for f in "$VD"/*.raw; do
		[ -f "$f" ] || continue
		read -r s b < <(stat -c '%s %b' "$f")
		size=$((size + s))
		alloc=$((alloc + b * 512))
		unwritten=$((unwritten + s - b * 512))
	done
	echo "$((100 * GIB - alloc)) $size $unwritten"
}
row() { q "SELECT available_bytes || ' ' || committed_bytes || ' ' || outstanding_bytes FROM host_volume_storage"; }
row_is_files() { [ "$(row)" = "$(from_files)" ]; }

# -- create: a sparse raw file of the volume's size
v1=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name mem --size 3)") ||
	bail_out 'create'
f1=$VD/$v1.raw
made() { [ -f "$1" ]; }
eventually 20 made "$f1"
ok $? "sandbox-volume create: $v1.raw appears in the agent's volumes directory"
is "$(stat -c '%s %a' "$f1")" "$((3 * GIB)) 600" '... 3 GiB long, mode 0600'
ok "[ -f '$f1' ] && [ $(($(stat -c '%b * %B' "$f1" 2>/dev/null || echo 1048576))) -lt 1048576 ]" \
	'... sparse: under 1 MiB of blocks'
ok "[ -f '$f1' ] && ! ls '$VD' | grep -q '\.tmp$'" '... no half-made file left'
committed() { [ "$(q "SELECT committed_bytes FROM host_volume_storage")" = "$1" ]; }
eventually 20 committed $((3 * GIB))
ok $? 'host_volume_storage: 3 GiB committed'
is "$(row)" "$(from_files)" 'host_volume_storage holds what the files say (available, committed, outstanding)'
is "$(q "SELECT reserved_bytes FROM host_volume_storage")" $((5 * GIB)) '... reserved 5 % of the store'

# a guest's write: 2 blocks allocated, outstanding shrinks by them
printf 'secret%.0s' $(seq 700) | dd of="$f1" bs=4096 seek=256 conv=notrunc status=none
read_at() { dd if="$1" bs=4096 skip=256 count=1 status=none | tr -d '\0' | wc -c; }
ok "[ $(read_at "$f1") -gt 0 ]" 'written: 4200 bytes at 1 MiB'
eventually 20 row_is_files
ok $? 'the written blocks move outstanding and available in the next report'

# -- resize grows the file in place
bcctl sandbox-volume resize "$v1" --size 5 >/dev/null || fail 'resize'
grown() { [ "$(stat -c %s "$f1")" = $((5 * GIB)) ]; }
eventually 20 grown
ok $? 'resize to 5 GiB: the file is 5 GiB long'
ok "[ $(read_at "$f1") -gt 0 ]" '... its data kept'
eventually 20 committed $((5 * GIB))
ok $? '... 5 GiB committed'

# -- a half-made file and a file no spec names go; another name stays
orphan=vol_00000000000000000000000000
mkdir -p "$VD"
: >"$VD/$orphan.raw"
truncate -s 1G "$VD/$orphan.raw"
: >"$VD/$v1.raw.tmp"
: >"$VD/notes.txt"
cleaned() { [ ! -e "$VD/$orphan.raw" ] && [ ! -e "$VD/$v1.raw.tmp" ]; }
eventually 30 cleaned
ok $? 'an orphan <id>.raw and a half-made <id>.raw.tmp are removed on a pass'
ok "[ -e '$VD/notes.txt' ]" "... a file of another name is not bcd's: left alone"
ok "[ -f '$f1' ]" '... the volume itself stays'

# -- delete: wiped, then the booking released once the host applied it
v2=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name gone --size 2)") ||
	bail_out 'create v2'
f2=$VD/$v2.raw
eventually 20 made "$f2"
ok $? "$v2.raw made"
printf 'secret%.0s' $(seq 700) | dd of="$f2" bs=4096 seek=256 conv=notrunc status=none
exec 7<"$f2"   # a reader that keeps the file open past its unlink
# the bytes at 1 MiB that are not zero, as that reader reads them
fd7_data() { if [ -r /dev/fd/7 ]; then dd if=/dev/fd/7 bs=4096 skip=256 count=1 status=none | tr -d '\0' | wc -c; else echo closed; fi; }
ok "[ \"\$(fd7_data)\" != closed ] && [ \$(fd7_data) -gt 0 ]" 'the reader sees the data before the delete'
gen=$(q "SELECT spec_generation FROM nodes WHERE id = '$node'")
bcctl sandbox-volume delete "$v2" >/dev/null || fail 'delete'
dead() { [ "$(q "SELECT state FROM volumes WHERE id = '$v2'")" = deleted ]; }
eventually 30 dead
ok $? 'the volume row becomes deleted'
ok "[ ! -e '$f2' ]" '... by then its file is gone from the host'
is "$(fd7_data)" 0 \
	'... and wiped: its blocks were released before the unlink (the open reader reads zeros)'
exec 7<&-
is "$(q "SELECT deleting_generation > $gen AND (SELECT applied_generation FROM nodes WHERE id = '$node') >= deleting_generation FROM volumes WHERE id = '$v2'")" \
	t '... deleted after the host applied a generation without it'
is "$(q "SELECT count(*) FROM allocations WHERE owner_id = '$v2' AND released_at IS NULL")" 0 \
	'... its booking released'
ok "grep -q 'volume $v2: wipe done' '$STACK_DIR/bcd-1.log'" "bcd logged the wipe"

# -- a host that fills up: a booking made while bcd was down, bcd back
# with a reserve of 99 % of its store
agent_kill 1 TERM
v3=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name late --size 10)") ||
	bail_out 'create while the agent is down'
BC_AGENT_EXTRA_CONF='volume_reserve_percent = 99' agent_start 1 || bail_out 'agent restart'
warned() {
	bcctl --format json node get "$node" |
		jq -e --arg v "$v3" '.warnings[]? | select(startswith("volume-storage: volume " + $v + " needs 10737418240 bytes, 0 bytes free over the reserve"))' >/dev/null
}
eventually 30 warned
ok $? 'the node warns volume-storage, naming the volume, the bytes it needs and the bytes free'
ok "[ ! -e '$VD/$v3.raw' ]" '... no file made for it'
is "$(q "SELECT reserved_bytes || ' ' || committed_bytes FROM host_volume_storage")" \
	"$((99 * GIB)) $((5 * GIB))" '... the store reports the 99 GiB reserve, the volume stays outstanding (not committed)'
is "$(q "SELECT state FROM volumes WHERE id = '$v3'")" ready '... its row stays ready (booked)'
out=$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name more --size 1 2>&1)
like "$out" 'CAPACITY_UNAVAILABLE' 'the full host takes no more volumes (CAPACITY_UNAVAILABLE)'
is "$(q "SELECT count(*) FROM volumes WHERE name = 'more'")" 0 '... and leaves no row'
ok "grep -q 'volume-storage: volume $v3 needs' '$STACK_DIR/bcd-1.log'" 'bcd logged why'
out=$("$BC_BIN/bc-controller" doctor --config "$STACK_DIR/ctl-1.conf" 2>&1)
is $? 1 'bc-controller doctor fails on the full host'
like "$out" "fail vps.volumes.storage-full $node: the volumes booked on it exceed what its volume store can hold by [0-9]+ GiB" \
	'... and says why: vps.volumes.storage-full on the host'
out=$(bcctl --format json doctor run)
is "$(printf '%s' "$out" | jq -r '[.findings[] | select(.check == "vps.volumes.storage-full") | .severity + " " + (.nodeId // .node_id)] | join(",")') $(printf '%s' "$out" | jq -r '.ok // false')" \
	"fail $node false" 'Doctor.Run (bcctl doctor run) reports the same, ok false'

agent_kill 1 TERM
agent_start 1 || bail_out 'agent restart'
eventually 30 made "$VD/$v3.raw"
ok $? 'the reserve back to 5 %: the volume is made'
unwarned() { ! bcctl --format json node get "$node" | jq -e '.warnings[]? | select(startswith("volume-storage"))' >/dev/null; }
eventually 30 unwarned
ok $? '... and the warning ends'
eventually 20 committed $((15 * GIB))
ok $? '... 15 GiB committed'
out=$("$BC_BIN/bc-controller" doctor --config "$STACK_DIR/ctl-1.conf" 2>&1)
is "$? $out" '0 ok' 'the doctor is content again'

done_testing
