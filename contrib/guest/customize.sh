#!/usr/bin/env bash
# customize.sh ROOT FILES: mmdebstrap's customize hook for contrib/guest/build.sh.
# Runs on the host with ROOT the new system (mmdebstrap's private mount
# namespace has /dev, /proc, /sys mounted inside ROOT for chroot calls).
set -euo pipefail
root=$1
files=$2
here=$(cd "$(dirname "$0")" && pwd)

# root by partition UUID (fixed in build.sh); the ESP is not mounted
cat >"$root/etc/fstab" <<EOT
# bc guest
PARTUUID=6b6c1f0e-5a3e-4b8e-9b1c-626367756572 / ext4 defaults,errors=remount-ro 0 1
EOT
echo bc-guest >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tbc-guest\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"

install -m 0644 "$files/90-bc-guest.cfg" "$root/etc/cloud/cloud.cfg.d/90-bc-guest.cfg"

# the workload-identity client (docs/identity.md): compiled with the host's
# cc (Debian 12, as the guest; libc only), run by its own system user, its
# unit enabled (it starts only where the boot data gives it an identity)
install -d -m 0755 "$root/usr/local/lib/bc"
cc -std=gnu17 -O2 -Wall -Wextra -o "$root/usr/local/lib/bc/bc-identity" "$here/bc-identity.c"
chmod 0755 "$root/usr/local/lib/bc/bc-identity"
chroot "$root" useradd --system --user-group --no-create-home --home-dir /nonexistent \
	--shell /usr/sbin/nologin bc-identity
install -m 0644 "$files/bc-identity.service" "$root/etc/systemd/system/bc-identity.service"
chroot "$root" systemctl enable bc-identity.service >/dev/null 2>&1
# the harness's running/idle: `sudo -u bc-identity .../bc-identity state running`
install -d -m 0755 "$root/etc/sudoers.d"
install -m 0440 "$files/bc-identity.sudoers" "$root/etc/sudoers.d/bc-identity"

# every instance makes its own identity at first boot: no host keys, no
# machine id, no random seed in the image (cloud-init's ssh module makes the
# host keys before ssh.service starts)
rm -f "$root"/etc/ssh/ssh_host_*
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root/var/lib/systemd/random-seed"

# nothing periodic or slow at boot in a short-lived sandbox
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
	dpkg-db-backup.timer systemd-networkd-wait-online.service; do
	chroot "$root" systemctl disable "$u" >/dev/null 2>&1 || true
done
chroot "$root" systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1 || true
# the config stage's modules run in the final stage (files/90-bc-guest.cfg):
# one Python start less per boot
chroot "$root" systemctl mask cloud-config.service >/dev/null 2>&1

# logs and caches of the build
rm -rf "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
	"$root"/var/log/apt/* "$root"/var/cache/debconf/*-old "$root"/tmp/* 2>/dev/null || true
