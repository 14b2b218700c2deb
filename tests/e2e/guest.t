# guest.t: the guest image contrib/guest/build.sh made (`make guest`), read
# without booting or mounting it: a qcow2 with no backing file, its
# sha256 file right, a GPT with the ESP first and the ext4 root last, the
# ESP holding a unified kernel image (stub + kernel + initrd + command line
# with console=ttyS0 and the root's partition UUID) as \EFI\BOOT\BOOTX64.EFI,
# and a root with sshd and cloud-init limited to NoCloud, but no SSH host
# keys or machine id of its own (each instance makes them).
. "$(dirname "$0")/../lib/tap.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
G=${E2E_GUEST_DIR:-$BC_SRC/build/guest}
[ -s "$G/guest.qcow2" ] || skip_all "no guest image in $G (make guest)"
for t in qemu-img sfdisk mdir mcopy objcopy objdump debugfs blkid jq; do
	command -v "$t" >/dev/null || skip_all "$t not installed (contrib/install-deps.sh)"
done

W=$(mktemp -d /tmp/bc-guest-t.XXXXXX)
tap_on_exit rm -rf "$W"

info=$(qemu-img info -U --output=json "$G/guest.qcow2")
is "$(printf '%s' "$info" | jq -r .format)" qcow2 "a qcow2"
is "$(printf '%s' "$info" | jq -r '."backing-filename" // "none"')" none "that names no backing file"
is "$(printf '%s' "$info" | jq -r '."format-specific".data."data-file" // "none"')" none "nor an external data file"
vsize=$(printf '%s' "$info" | jq -r '."virtual-size"')
ok "[ '$vsize' -le 1073741824 ]" "virtual size $vsize fits the smallest flavor disk (1 GiB)"
(cd "$G" && sha256sum --quiet -c guest.qcow2.sha256)
ok $? "guest.qcow2.sha256 matches the image"

qemu-img convert -U -O raw "$G/guest.qcow2" "$W/disk.raw" || bail_out "qemu-img convert"
pt=$(sfdisk --json "$W/disk.raw")
is "$(printf '%s' "$pt" | jq -r .partitiontable.label)" gpt "a GPT disk"
is "$(printf '%s' "$pt" | jq -r '.partitiontable.partitions | length')" 2 "two partitions"
is "$(printf '%s' "$pt" | jq -r '.partitiontable.partitions[0].type')" C12A7328-F81F-11D2-BA4B-00A0C93EC93B \
	"the first is the EFI system partition"
is "$(printf '%s' "$pt" | jq -r '.partitiontable.partitions[1].type')" 4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709 \
	"the second a Linux x86-64 root, last so growpart can grow it"
rootuuid=$(printf '%s' "$pt" | jq -r '.partitiontable.partitions[1].uuid' | tr 'A-F' 'a-f')
part() { # N OUT: partition N (0-based) of the disk into OUT
	local start size
	start=$(printf '%s' "$pt" | jq -r ".partitiontable.partitions[$1].start")
	size=$(printf '%s' "$pt" | jq -r ".partitiontable.partitions[$1].size")
	dd if="$W/disk.raw" of="$2" bs=512 skip="$start" count="$size" conv=sparse status=none
}
part 0 "$W/esp.img"
part 1 "$W/root.img"

export MTOOLS_SKIP_CHECK=1
like "$(mdir -b -i "$W/esp.img" ::/EFI/BOOT 2>&1)" 'BOOTX64\.EFI' "the ESP holds \\EFI\\BOOT\\BOOTX64.EFI"
mcopy -i "$W/esp.img" ::/EFI/BOOT/BOOTX64.EFI "$W/uki.efi"
sections=$(objdump -h "$W/uki.efi" | awk '{ print $2 }')
for s in .linux .initrd .cmdline .osrel; do
	printf '%s\n' "$sections" | grep -qxF -- "$s"
	ok $? "the UKI has a $s section"
done
objcopy -O binary --only-section=.cmdline "$W/uki.efi" "$W/cmdline"
objcopy -O binary --only-section=.osrel "$W/uki.efi" "$W/osrel"
like "$(cat "$W/cmdline")" 'console=ttyS0' "the command line puts the console on the serial port"
like "$(cat "$W/cmdline")" "root=PARTUUID=$rootuuid" "and mounts the root partition by its UUID"
like "$(cat "$W/cmdline")" 'no_timer_check' "no IO-APIC timer check (it panics under TCG on a loaded host)"
like "$(cat "$W/osrel")" 'VERSION_ID="12"' "Debian 12"

is "$(blkid -o value -s TYPE "$W/root.img")" ext4 "the root is ext4"
dfs() { debugfs -R "$1" "$W/root.img" 2>/dev/null; }
like "$(dfs 'stat /usr/sbin/sshd')" 'Type: regular' "OpenSSH's sshd is installed"
like "$(dfs 'stat /usr/bin/cloud-init')" 'Type: regular' "cloud-init is installed"
like "$(dfs 'ls /lib/modules')" '[0-9]+\.[0-9]+.*cloud-amd64' "the Debian cloud kernel's modules"
like "$(dfs 'cat /etc/cloud/cloud.cfg.d/90-bc-guest.cfg')" 'datasource_list: \[ NoCloud, None \]' \
	"cloud-init reads only the NoCloud seed"
like "$(dfs 'cat /etc/fstab')" "PARTUUID=$rootuuid +/ +ext4" "fstab mounts the root by partition UUID"
unlike "$(dfs 'ls /etc/ssh')" 'ssh_host_' "no SSH host keys in the image"
is "$(dfs 'cat /etc/machine-id' | tr -d '[:space:]')" "" "no machine id in the image"
done_testing
