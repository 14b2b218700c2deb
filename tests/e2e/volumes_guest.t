# volumes_guest.t: sandbox volumes in real guests (libvirt, the real guest
# image), through the whole path: a template naming a volume, sandboxes
# placed on its host, the virtio disk with its serial, the platform's
# cloud-config formatting it once and mounting it, bcctl sandbox exec.
#
#   - sandbox 1 (read-write) sees the volume mounted ext4 rw at /workspace,
#     writes /workspace/note, and is deleted;
#   - sandbox 2 of the same template reads the note (formatted once: the
#     filesystem's UUID is the same);
#   - a read-only template's sandbox has it mounted ro and a write fails
#     with "Read-only file system";
#   - a resize while a sandbox runs shows in the guest's block device at
#     once, and in its filesystem at the next sandbox's boot;
#   - deleting the volume wipes its file on the host.
#
# The sandbox account has no sudo: the template's own cloud-config opens
# /workspace to it (chmod 1777 after the mounts), and sizes are read from
# /sys and df, which need no root. Every guest command goes to bcctl as ONE
# argument (ssh joins its arguments with spaces).
. "$(dirname "$0")/lib.sh"

e2e_need
e2e_up --controllers 1 --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
GIB=1073741824

W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
EX=(exec --key "$W/key")
gx() { bcctl sandbox "${EX[@]}" "$1" -- "$2" </dev/null 2>>"$W/gx.err"; }

# -- the volume
vol=$(jid "$(bcctl --format json sandbox-volume create --pool "$POOL_ID" --name e2e-mem --size 1)") ||
	bail_out "volume"
serial=$(q "SELECT serial FROM volumes WHERE id = '$vol'")
VF=$STACK_DIR/data-1/volumes/$vol.raw
made() { [ -f "$VF" ]; }
eventually 60 made
ok $? "the host made the volume's file ($VF)"

printf '#cloud-config\nruncmd:\n  - [sh, -c, "chmod 1777 /workspace || true"]\n' >"$W/ud"
tmpl() { # tmpl NAME VOLUMES
	jid "$(bcctl --format json sandbox-template create --name "$1" --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$IMAGE_ID" --user-data-file "$W/ud" --volumes "$2")"
}
trw=$(tmpl e2e-rw "e2e-mem:/workspace") || bail_out "template rw"
tro=$(tmpl e2e-ro "e2e-mem:/workspace:ro") || bail_out "template ro"
like "$trw $tro" '^sbxt_[0-9a-z]+ sbxt_[0-9a-z]+$' 'a read-write and a read-only template'

start() { # start TEMPLATE: a ready sandbox whose guest is up (cloud-init done)
	local s
	s=$(jid "$(bcctl --format json sandbox create --template "$1" --ttl 1h)") || return 1
	eventually "$E2E_BOOT_TIMEOUT" sbx_up "$s" || { diag "sandbox $s not up: $(tail -n 3 "$W/gx.err")"; diag_file "$(e2e_console "$(q "SELECT instance_id FROM sandboxes WHERE id = '$s'")")" 40; } >&2
	echo "$s"
}
sbx_up() { gx "$1" 'cloud-init status --wait' >/dev/null; }
stop() { # stop SANDBOX: deleted and its instance gone from the host
	local i
	i=$(q "SELECT instance_id FROM sandboxes WHERE id = '$1'")
	bcctl sandbox delete "$1" >/dev/null
	inst_gone() { [ "$(q "SELECT state FROM instances WHERE id = '$i'")" = deleted ]; }
	eventually 120 inst_gone
}
DEV="/dev/disk/by-id/virtio-$serial"
sys_size() { gx "$1" "echo \$((\$(cat /sys/class/block/\$(basename \$(readlink -f $DEV))/size) * 512))"; }
fs_size() { gx "$1" 'df -B1 --output=size /workspace | tail -n 1'; }

# -- sandbox 1 writes, is deleted; sandbox 2 reads
s1=$(start "$trw")
like "$(gx "$s1" 'findmnt -n -o SOURCE,FSTYPE,OPTIONS /workspace')" '^/dev/vd[a-z]+ +ext4 +rw' \
	'sandbox 1: the volume is mounted ext4 rw at /workspace'
ok "[ \"\$(gx $s1 'readlink -f $DEV')\" = \"\$(gx $s1 'findmnt -n -o SOURCE /workspace')\" ]" \
	"... it is the disk with the volume's serial ($serial)"
uuid1=$(gx "$s1" "lsblk -n -o UUID $DEV")
gx "$s1" 'echo note-from-sandbox-1 >/workspace/note && sync'
is "$(gx "$s1" 'cat /workspace/note')" note-from-sandbox-1 'sandbox 1 wrote /workspace/note'
stop "$s1"
ok $? 'sandbox 1 is deleted'
s2=$(start "$trw")
is "$(gx "$s2" 'cat /workspace/note')" note-from-sandbox-1 'sandbox 2 of the same template reads the note'
is "$(gx "$s2" "lsblk -n -o UUID $DEV")" "$uuid1" '... on the same filesystem (formatted once)'
stop "$s2"

# -- read-only
s3=$(start "$tro")
like "$(gx "$s3" 'findmnt -n -o SOURCE,FSTYPE,OPTIONS /workspace')" '^/dev/vd[a-z]+ +ext4 +ro' \
	'a read-only template: mounted ro'
is "$(gx "$s3" 'cat /workspace/note')" note-from-sandbox-1 '... the data is there'
like "$(gx "$s3" 'touch /workspace/x 2>&1; echo rc=$?')" 'Read-only file system' \
	'... and a write fails: Read-only file system'
stop "$s3"

# -- resize while a sandbox runs
s4=$(start "$trw")
is "$(sys_size "$s4")" "$GIB" "the guest's block device: 1 GiB"
fs1=$(fs_size "$s4")
bcctl sandbox-volume resize "$vol" --size 2 >/dev/null || fail 'resize'
grown() { [ "$(sys_size "$s4")" = $((2 * GIB)) ]; }
eventually 60 grown
ok $? 'a resize shows in the running guest block device at once (2 GiB)'
is "$(fs_size "$s4")" "$fs1" '... its filesystem keeps its size until the next boot'
stop "$s4"
s5=$(start "$trw")
fs2=$(fs_size "$s5")
ok "[ \"${fs2:-0}\" -gt $((GIB + GIB / 2)) ]" "the next sandbox's first boot grew the filesystem ($fs1 -> $fs2 bytes)"
is "$(gx "$s5" 'cat /workspace/note')" note-from-sandbox-1 '... keeping the data'
stop "$s5"

# -- delete wipes the file on the host
bcctl sandbox-template delete "$trw" >/dev/null && bcctl sandbox-template delete "$tro" >/dev/null
bcctl sandbox-volume delete "$vol" >/dev/null || fail 'volume delete'
wiped() { [ ! -e "$VF" ]; }
eventually 120 wiped
ok $? 'deleting the volume wipes its file on the host'
deleted() { [ "$(q "SELECT state FROM volumes WHERE id = '$vol'")" = deleted ]; }
eventually 120 deleted
ok $? '... and it becomes deleted'

done_testing
