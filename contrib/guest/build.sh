#!/usr/bin/env bash
# build.sh: the small Debian guest that bc boots in its e2e tests and demo.
#
#   contrib/guest/build.sh [OUT_DIR]      (default build/guest; `make guest`)
#
# Output: OUT_DIR/guest.qcow2 (compressed qcow2, no backing file) and
# OUT_DIR/guest.qcow2.sha256 ("<hex>  guest.qcow2"), OUT_DIR/guest.env
# (size, sha256, build inputs hash, versions).
#
# The image is a GPT disk: partition 1 an EFI system partition (vfat) holding
# one unified kernel image (systemd-boot's stub + Debian's kernel + initrd +
# the command line, built with objcopy) as \EFI\BOOT\BOOTX64.EFI, partition 2
# an ext4 root (last, so cloud-init's growpart can grow it). The root is a
# Debian system made by mmdebstrap from Debian packages only: systemd,
# linux-image-cloud-amd64, OpenSSH's sshd and Debian's cloud-init (NoCloud
# datasource only), ifupdown for the static network-config cloud-init writes,
# and bc's workload-identity client (bc-identity.c, compiled by customize.sh
# with the host's cc; its unit bc-identity.service, its user bc-identity).
# The kernel command line has console=ttyS0, so the serial log shows the boot
# and cloud-init's output.
#
# Nothing is mounted on the host: mmdebstrap runs in a private mount
# namespace (unshare -m), the root filesystem is made by mke2fs -d from the
# folder, the ESP by mkfs.vfat on a file and mtools, the partition table by
# sfdisk on a file, and dd puts the two filesystems in place.
#
# Cache: a build takes minutes, so its result is kept outside the clone in
# BC_GUEST_CACHE (default /var/cache/bc/guest)/<hash>/, where <hash> is the
# SHA-256 of the build inputs (this script, customize.sh, the identity
# client's source bc-identity.c, the files under contrib/guest/files, the
# suite and the apt sources). A fresh clone with the
# same inputs copies the cached image in seconds. BC_GUEST_REBUILD=1 forces a
# build. Runs as root (mmdebstrap's root mode, ownership in the image).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/build/guest}
cache_root=${BC_GUEST_CACHE:-/var/cache/bc/guest}
suite=${BC_GUEST_SUITE:-bookworm}

# Fixed identities: every instance runs an overlay of the same image.
ROOT_FS_UUID=6b6c1f0e-5a3e-4b8e-9b1c-62636775657a
ROOT_PART_UUID=6b6c1f0e-5a3e-4b8e-9b1c-626367756572
ESP_PART_UUID=6b6c1f0e-5a3e-4b8e-9b1c-626367756565
ESP_MIB=64
# no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check
# can time out and panic ("IO-APIC + timer doesn't work!"); cloud images skip it
CMDLINE="root=PARTUUID=$ROOT_PART_UUID ro console=ttyS0,115200 net.ifnames=0 no_timer_check quiet loglevel=4 systemd.show_status=1"

PACKAGES=(
	systemd-sysv udev dbus kmod
	linux-image-cloud-amd64 initramfs-tools zstd
	openssh-server
	cloud-init cloud-guest-utils fdisk
	ifupdown iproute2 netbase ca-certificates sudo
)

log() { printf 'guest: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# apt_sources: the host's enabled Debian sources (one-line or deb822 files),
# or BC_GUEST_SOURCES. The guest is built from the mirror this host uses.
apt_sources() {
	local f
	if [ -n "${BC_GUEST_SOURCES:-}" ]; then
		echo "$BC_GUEST_SOURCES"
		return
	fi
	if [ -s /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
		echo /etc/apt/sources.list
	fi
	for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && grep -qi 'debian' "$f" && echo "$f"
	done
	return 0
}

# inputs_hash: SHA-256 over everything that decides the image's content.
inputs_hash() {
	{
		echo "suite=$suite"
		echo "packages=${PACKAGES[*]}"
		# relative names only: every clone of the same inputs hits the cache
		(cd "$here" && find build.sh customize.sh bc-identity.c files -type f | LC_ALL=C sort |
			xargs -r sha256sum)
		# shellcheck disable=SC2046
		cat $(apt_sources) 2>/dev/null
	} | sha256sum | cut -d' ' -f1
}

need_tools() {
	local t missing=()
	for t in mmdebstrap unshare mke2fs mkfs.vfat mcopy mmd sfdisk objcopy qemu-img sha256sum flock cc; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	[ -f /usr/lib/systemd/boot/efi/linuxx64.efi.stub ] || missing+=(systemd-boot-efi)
	[ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: run contrib/install-deps.sh"
	[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap root mode, file ownership in the image)"
}

# align N A: N rounded up to a multiple of A.
align() { echo $(( ($1 + $2 - 1) / $2 * $2 )); }

# make_rootfs DIR: Debian into DIR, configured for NoCloud + sshd + serial.
make_rootfs() {
	local dir=$1 src
	local -a srcs
	mapfile -t srcs < <(apt_sources)
	[ ${#srcs[@]} -gt 0 ] || die "no Debian apt sources found (set BC_GUEST_SOURCES)"
	log "mmdebstrap $suite (${#PACKAGES[@]} packages) from ${srcs[*]}"
	local inc
	inc=$(IFS=,; echo "${PACKAGES[*]}")
	unshare --mount --propagation private -- \
		mmdebstrap --mode=root --variant=minbase --quiet \
		--include="$inc" \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--essential-hook="mkdir -p \"\$1/etc/initramfs-tools/conf.d\" \"\$1/usr/share/initramfs-tools/modules.d\" && cp '$here/files/initramfs.conf' \"\$1/etc/initramfs-tools/conf.d/bc-guest.conf\" && cp '$here/files/initramfs-modules' \"\$1/usr/share/initramfs-tools/modules.d/bc-guest\"" \
		--customize-hook="'$here/customize.sh' \"\$1\" '$here/files'" \
		"$suite" "$dir" "${srcs[@]}"
}

# make_uki ROOT OUT: systemd-boot's stub + the kernel, initrd, command line.
make_uki() {
	local root=$1 uki=$2 stub=/usr/lib/systemd/boot/efi/linuxx64.efi.stub
	local work kernel initrd last off osrel cmdl initrd_off linux_off
	work=$(dirname "$uki")
	kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)
	initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)
	[ -f "$kernel" ] && [ -f "$initrd" ] || die "no kernel or initrd in the root"
	printf '%s' "$CMDLINE" >"$work/cmdline"
	cp "$root/usr/lib/os-release" "$work/os-release"
	# sections go after the stub's last one, page aligned
	last=0
	while read -r sz vma; do
		[ $((16#$vma + 16#$sz)) -gt "$last" ] && last=$((16#$vma + 16#$sz))
	done < <(objdump -h "$stub" | awk '$1 ~ /^[0-9]+$/ { print $3, $4 }')
	osrel=$(align "$last" 4096)
	cmdl=$(align $((osrel + $(stat -Lc%s "$work/os-release"))) 4096)
	initrd_off=$(align $((cmdl + $(stat -Lc%s "$work/cmdline"))) 4096)
	linux_off=$(align $((initrd_off + $(stat -Lc%s "$initrd"))) 4096)
	objcopy \
		--add-section .osrel="$work/os-release" --change-section-vma .osrel="$(printf 0x%x "$osrel")" \
		--add-section .cmdline="$work/cmdline" --change-section-vma .cmdline="$(printf 0x%x "$cmdl")" \
		--add-section .initrd="$initrd" --change-section-vma .initrd="$(printf 0x%x "$initrd_off")" \
		--add-section .linux="$kernel" --change-section-vma .linux="$(printf 0x%x "$linux_off")" \
		"$stub" "$uki"
	log "UKI $(basename "$kernel") + $(basename "$initrd"): $(stat -c%s "$uki") bytes"
}

# make_disk ROOT WORK RAW: GPT disk image RAW (ESP + ext4 root), no mounts.
make_disk() {
	local root=$1 work=$2 raw=$3 used_kib root_mib esp=$work/esp.img rootimg=$work/root.img
	make_uki "$root" "$work/BOOTX64.EFI"
	# the ESP: mkfs.vfat on a file, files in with mtools
	rm -f "$esp"
	mkfs.vfat -C -n ESP -i 62636765 "$esp" $((ESP_MIB * 1024)) >/dev/null
	MTOOLS_SKIP_CHECK=1 mmd -i "$esp" ::/EFI ::/EFI/BOOT
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
	# the root: the folder's size plus room to work, mke2fs -d from the folder
	rm -rf "$root/boot"/initrd.img-* "$root/boot"/vmlinuz-* "$root/boot"/System.map-* 2>/dev/null || true
	used_kib=$(du -sk --apparent-size "$root" | cut -f1)
	root_mib=$(align $((used_kib * 13 / 10 / 1024 + 256)) 64)
	rm -f "$rootimg"
	mke2fs -q -t ext4 -L root -U "$ROOT_FS_UUID" -E root_owner=0:0 -m 1 \
		-d "$root" "$rootimg" "${root_mib}M" >/dev/null
	# the disk: 1 MiB, ESP, root, 1 MiB for the backup GPT
	rm -f "$raw"
	truncate -s $(( (1 + ESP_MIB + root_mib + 1) * 1024 * 1024 )) "$raw"
	sfdisk --quiet "$raw" <<EOT
label: gpt
first-lba: 2048
start=2048, size=$((ESP_MIB * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=$ESP_PART_UUID, name=esp
start=$(((1 + ESP_MIB) * 2048)), size=$((root_mib * 2048)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$ROOT_PART_UUID, name=root
EOT
	dd if="$esp" of="$raw" bs=1M seek=1 conv=notrunc,sparse status=none
	dd if="$rootimg" of="$raw" bs=1M seek=$((1 + ESP_MIB)) conv=notrunc,sparse status=none
	log "disk: ESP ${ESP_MIB} MiB, root ${root_mib} MiB (content $((used_kib / 1024)) MiB)"
}

# build_into DIR: a full build, the result in DIR (guest.qcow2, .sha256, .env).
build_into() {
	local dir=$1 work t0=$SECONDS
	work=$(mktemp -d "$dir/work.XXXXXX")
	WORK=$work
	make_rootfs "$work/root"
	make_disk "$work/root" "$work" "$work/disk.raw"
	qemu-img convert -c -O qcow2 -o compression_type=zlib "$work/disk.raw" "$dir/guest.qcow2.tmp"
	mv "$dir/guest.qcow2.tmp" "$dir/guest.qcow2"
	(cd "$dir" && sha256sum guest.qcow2 >guest.qcow2.sha256.tmp && mv guest.qcow2.sha256.tmp guest.qcow2.sha256)
	{
		echo "GUEST_SHA256=$(cut -d' ' -f1 "$dir/guest.qcow2.sha256")"
		echo "GUEST_SIZE=$(stat -c%s "$dir/guest.qcow2")"
		echo "GUEST_VIRTUAL_SIZE=$(qemu-img info --output=json "$dir/guest.qcow2" | jq -r '."virtual-size"')"
		echo "GUEST_KERNEL=$(ls "$work/root"/lib/modules | sort -V | tail -n1)"
		echo "GUEST_SUITE=$suite"
		echo "GUEST_BUILD_SECONDS=$((SECONDS - t0))"
	} >"$dir/guest.env"
	rm -rf "$work"
	log "built in $((SECONDS - t0)) s: $(stat -c%s "$dir/guest.qcow2") bytes"
}

# prune_cache KEEP: drop cached builds of other inputs but the newest two.
prune_cache() {
	local keep=$1 d n=0
	for d in $(ls -1dt "$cache_root"/*/ 2>/dev/null); do
		d=${d%/}
		[ "$d" = "$keep" ] && continue
		n=$((n + 1))
		[ $n -le 1 ] && continue
		( flock -n 9 && rm -rf "$d" ) 9>"$d/.lock" 2>/dev/null || true
	done
}

WORK=
trap 'rm -rf "${WORK:-/nonexistent}"' EXIT

main() {
	local hash dir
	need_tools
	hash=$(inputs_hash)
	dir=$cache_root/$hash
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
	if [ "${BC_GUEST_REBUILD:-0}" = 1 ] || ! (cd "$dir" && [ -f guest.env ] && sha256sum --quiet -c guest.qcow2.sha256 2>/dev/null); then
		rm -f "$dir/guest.env"
		log "building (inputs $hash) in $dir"
		build_into "$dir"
		prune_cache "$dir"
	else
		log "cached (inputs $hash)"
		touch "$dir/guest.env"
	fi
	mkdir -p "$out"
	if ! cmp -s "$dir/guest.qcow2.sha256" "$out/guest.qcow2.sha256" 2>/dev/null ||
		! (cd "$out" && sha256sum --quiet -c guest.qcow2.sha256 2>/dev/null); then
		cp --reflink=auto "$dir/guest.qcow2" "$out/guest.qcow2.tmp"
		mv "$out/guest.qcow2.tmp" "$out/guest.qcow2"
	fi
	cp "$dir/guest.qcow2.sha256" "$dir/guest.env" "$out/"
	echo "GUEST_CACHE_DIR=$dir" >>"$out/guest.env"
	log "$out/guest.qcow2 sha256 $(cut -d' ' -f1 "$out/guest.qcow2.sha256")"
}

main "$@"
