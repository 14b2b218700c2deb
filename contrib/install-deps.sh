#!/usr/bin/env bash
# install-deps.sh: install every Debian package bc needs to build, test and
# run its demo. Idempotent: packages already present are not touched, and
# apt is not called at all when everything is installed.
set -euo pipefail

PKGS=(
  build-essential pkg-config make git ca-certificates curl openssl jq perl procps psmisc
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
  libpq-dev postgresql-15 postgresql-client-15
  libssl-dev libcurl4-openssl-dev libmnl-dev libnftnl-dev
  nftables iproute2
  python3-scapy python3-h2 iputils-ping
  clang libclang-rt-14-dev valgrind
  libvirt-daemon-system libvirt-dev qemu-system-x86 qemu-utils ovmf genisoimage
  nodejs npm
  # the guest image (contrib/guest/build.sh) and the e2e tests' https server and ssh
  mmdebstrap debian-archive-keyring systemd-boot-efi mtools dosfstools fdisk e2fsprogs binutils python3 openssh-client
  # tests/unit/test_sshcert.c runs a real sshd with our certificates
  openssh-server
  # tests convert the sandbox CA's PKCS#8 key for ssh-keygen -s (tests/lib/sshd.sh)
  python3-cryptography
  cloud-init python3-yaml
  # tests/integration/attack_unary.t speaks raw HTTP/2
  python3-h2
  # tests/integration/sigv4_boto3.t compares our S3 signatures with boto3's
  python3-boto3
  # tests/interop/console.t drives the web console in a real browser (puppeteer-core)
  chromium
)

missing=()
for p in "${PKGS[@]}"; do
  # nodejs from another source (e.g. nodesource) ships its own npm
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  if [ "$p" = nodejs ] && command -v node >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts a cluster on install; bc runs its own throwaway clusters.
