# sshd.sh: a real sshd standing for a sandbox guest's on the fake runtime
# (tests/integration/exec_relay.t, bench/exec.sh). Source after stack.sh.
#
#   guest_sshd_up INSTANCE GUEST_ADDRESS DIR
#
# starts /usr/sbin/sshd on a free loopback port (GUEST_SSHD_PORT) that
# trusts the stack's sandbox CA for the principal root@INSTANCE (the stack
# runs with sandbox_account = root: tests may not create accounts here)
# and presents a host key certified by the same CA for INSTANCE, and
# points the fake runtime's tunnel target for GUEST_ADDRESS at it (agent 1;
# agent/tunnel.h, TUNNEL_FAKE_TARGETS). Files in DIR; the sshd is stopped
# at exit. guest_sshd_restart restarts it with DIR/sshd_config as edited.
# Needs root and openssh-server.

if [ -n "${SSHD_SH_LOADED:-}" ]; then
	return 0
fi
SSHD_SH_LOADED=1

# sandbox_ca_openssh OUT: the stack's sandbox CA key (PKCS#8 PEM, as the
# controller keeps it) in OpenSSH's own format, which is what ssh-keygen -s
# signs with; OUT is created 0600.
sandbox_ca_openssh() {
	python3 - "$STACK_DIR/pki/sandbox-ssh-ca.key" "$1" <<'EOF'
import os, sys
from cryptography.hazmat.primitives import serialization as s
k = s.load_pem_private_key(open(sys.argv[1], "rb").read(), None)
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, k.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))
EOF
}

guest_sshd_stop() {
	[ -n "${GUEST_SSHD_PID:-}" ] || return 0
	kill "$GUEST_SSHD_PID" 2>/dev/null
	wait "$GUEST_SSHD_PID" 2>/dev/null
	GUEST_SSHD_PID=
}

guest_sshd_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$GUEST_SSHD_PORT") 2>/dev/null; }

guest_sshd_restart() {
	guest_sshd_stop
	mkdir -p /run/sshd
	/usr/sbin/sshd -D -e -f "$GUEST_SSHD_DIR/sshd_config" >>"$GUEST_SSHD_DIR/sshd.log" 2>&1 &
	GUEST_SSHD_PID=$!
	eventually 10 guest_sshd_listening
}

guest_sshd_up() {
	local inst=$1 guest=$2 dir=$3 ca=$STACK_DIR/pki/sandbox-ssh-ca
	GUEST_SSHD_DIR=$dir
	GUEST_SSHD_PORT=$(free_tcp_port)
	mkdir -p "$dir"
	[ -f "$dir/ca" ] || sandbox_ca_openssh "$dir/ca" || return 1
	ssh-keygen -q -t ed25519 -N '' -f "$dir/hostkey" || return 1
	ssh-keygen -q -s "$dir/ca" -h -I "host/$inst" -n "$inst" -V -1m:+1h "$dir/hostkey.pub" || return 1
	printf 'root@%s\n' "$inst" >"$dir/principals"
	cat >"$dir/sshd_config" <<EOT
ListenAddress 127.0.0.1:$GUEST_SSHD_PORT
HostKey $dir/hostkey
HostCertificate $dir/hostkey-cert.pub
PidFile $dir/sshd.pid
TrustedUserCAKeys $ca.pub
AuthorizedPrincipalsFile $dir/principals
AuthorizedKeysFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
MaxStartups 200
MaxSessions 200
Subsystem sftp internal-sftp
EOT
	tap_on_exit guest_sshd_stop
	guest_sshd_restart || return 1
	echo "$guest 127.0.0.1:$GUEST_SSHD_PORT" >>"$STACK_DIR/agent-1/fake/tunnel_targets"
}
