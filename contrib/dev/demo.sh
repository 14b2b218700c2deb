#!/usr/bin/env bash
# demo.sh: `make demo`. A throwaway bc on this machine, in ./.demo: a private
# PostgreSQL cluster, one bc-controller, one bcd, a pool, a flavor, the guest
# image, one running instance, and a sandbox whose template names a secret
# in its env (docs/secrets.md). With libvirt (started here if it is not
# running: tests/lib/libvirt.sh) the instance is a real VM: bcd runs the
# libvirt runtime (KVM, or TCG emulation without a usable /dev/kvm) with
# nftables networking, fetches the guest image (contrib/guest, `make
# guest`, cached) over https from a loopback server with a throwaway CA,
# and boots it with user data; the demo prints the console's last lines and
# the instance's address, and how to ssh into it. When libvirt cannot run
# (not root, not installed, no image) it says why and falls back to the fake
# runtime. Everything is left running, detached (pids in .demo/pids);
# `make stop` (contrib/dev/stop.sh) ends it, domains included. Running it
# again stops the old demo and starts a fresh one.
#
# Uses the binaries in $BC_BIN (default build/bin: `make demo` builds them
# and the guest first) and the harness in tests/lib/. BC_DEMO_RUNTIME=fake
# forces the fake runtime.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
demo=$repo/.demo
guest=$repo/build/guest

say() { printf '%s\n' "$*"; }

if [ -d "$demo" ]; then
	say "demo: stopping the previous demo in $demo"
	bash "$repo/contrib/dev/stop.sh" >/dev/null || true
	real=$(readlink -f "$demo")
	old_pg=$(cat "$demo/pgdir" 2>/dev/null || true)
	case "$old_pg" in
	"$real"/* | '') ;;
	*) rm -rf "$old_pg" ;;
	esac
	[ -L "$demo" ] && rm -rf "$real"
	rm -rf "$demo"
fi

# qemu_can_reach DIR: every parent of DIR lets others traverse it, as
# QEMU's own user must to reach the VM files bcd keeps under it.
qemu_can_reach() {
	local d=$1
	while [ "$d" != / ] && [ -n "$d" ]; do
		d=$(dirname "$d")
		[ "$(( 0$(stat -c %a "$d") & 1 ))" -eq 1 ] || return 1
	done
	return 0
}

export BC_STACK_DIR=$demo BC_STACK_PERSIST=1
export BC_LOG_LEVEL=${BC_LOG_LEVEL:-info}
export BC_REPORT_INTERVAL_SECONDS=${BC_REPORT_INTERVAL_SECONDS:-10}
# shellcheck source=../../tests/lib/stack.sh
. "$repo/tests/lib/stack.sh"
# shellcheck source=../../tests/lib/https.sh
. "$repo/tests/lib/https.sh"
# shellcheck source=../../tests/lib/libvirt.sh
. "$repo/tests/lib/libvirt.sh"
TAP_DONE=1 # not a TAP file

give_up() {
	say "demo: $*" >&2
	local f
	for f in "$demo"/init.log "$demo"/ctl-*.log "$demo"/bcd-*.log; do
		[ -f "$f" ] && { say "---- $f" >&2; tail -n 25 "$f" >&2; }
	done
	bash "$repo/contrib/dev/stop.sh" >/dev/null 2>&1
	exit 1
}

# pick_runtime: libvirt when this host can run real VMs, else fake (why).
pick_runtime() {
	if [ "${BC_DEMO_RUNTIME:-}" = fake ]; then
		why="BC_DEMO_RUNTIME=fake"
	elif [ "$(id -u)" -ne 0 ]; then
		why="not root (bcd needs root for taps, nftables and libvirt)"
	elif ! libvirt_up; then
		why="libvirt cannot run here: $LIBVIRT_WHY"
	elif [ ! -s "$guest/guest.qcow2" ] || [ ! -s "$guest/guest.qcow2.sha256" ]; then
		why="no guest image in $guest (make guest)"
	else
		runtime=libvirt
		return
	fi
	runtime=fake
}

runtime=fake why=''
pick_runtime
if [ "$runtime" = libvirt ] && ! qemu_can_reach "$demo"; then
	# a checkout under a private directory (/root, a mktemp -d folder):
	# the demo's state lives where QEMU can reach it, .demo points there
	real=/var/lib/bc-demo/$(printf '%s' "$repo" | sha256sum | cut -c1-12)
	say "demo: $repo is not reachable by QEMU's user (a parent is not o+x): the demo's VMs live in $real ($demo links to it)"
	mkdir -p "$real" && chmod 0755 /var/lib/bc-demo "$real" && ln -sfn "$real" "$demo" ||
		give_up "cannot make $real"
fi
mkdir -p "$demo"
if [ "$runtime" = libvirt ]; then
	https_up "$guest" "$demo/https" || give_up "the https image server did not start"
	export BC_IMAGE_CA_FILE=$HTTPS_CA_FILE
	kvm=TCG
	[ -c /dev/kvm ] && grep -qE '^kvm_(intel|amd) ' /proc/modules 2>/dev/null && kvm=KVM
	say "demo: starting PostgreSQL, bc-controller and bcd (libvirt runtime, $kvm) in $demo"
else
	say "demo: FALLING BACK TO THE FAKE RUNTIME (no VM will run): $why"
	say "demo: starting PostgreSQL, bc-controller and bcd (fake runtime) in $demo"
fi
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,100 --runtime "$runtime" ||
	give_up "the stack did not come up"
say "demo: pool $POOL_ID, flavor $FLAVOR_NAME, node $(agent_node_id 1) ready"

if [ "$runtime" = libvirt ]; then
	sha=$(cut -d' ' -f1 "$guest/guest.qcow2.sha256")
	out=$(bcctl --format json image create --name debian-guest --format qcow2 \
		--url "$HTTPS_URL/guest.qcow2" --sha256 "$sha" --size "$(stat -c%s "$guest/guest.qcow2")") ||
		give_up "image create failed: $out"
	img=$(json_get "$out" id)
	[ -f "$demo/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C bc-demo -f "$demo/id_ed25519"
	cat >"$demo/user-data" <<'EOT'
#cloud-config
write_files:
  - path: /etc/motd
    content: "a bc demo sandbox\n"
runcmd:
  - [ sh, -c, 'echo "bc-demo: user data applied on $(hostname) at $(date -u +%T)" > /dev/ttyS0' ]
EOT
	create_args=(--ssh-key "$(cat "$demo/id_ed25519.pub")" --user-data-file "$demo/user-data")
else
	img=$(stack_image_create demo-debian) || give_up "image create failed"
	create_args=()
fi
say "demo: image $img"
out=$(bcctl --format json instance create "${TENANT_ARGS[@]}" --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --key demo-1 "${create_args[@]}") ||
	give_up "instance create failed: $out"
inst=$(json_get "$out" id)
say "demo: instance $inst created, waiting for it to run"
# agent_alive: bcd still runs (else the demo stops at once with its log)
agent_alive() { _proc_alive "$(_stack_get_pid bcd-1)"; }
running_or_dead() { ! agent_alive || instance_state_is "$inst" running; }
eventually 600 running_or_dead
agent_alive || give_up "bcd exited: $(grep -E 'level=(error|fatal)' "$demo/bcd-1.log" | tail -n 3)"
instance_state_is "$inst" running ||
	give_up "instance $inst is $(instance_state "$inst") ($(bcctl --format json instance get "$inst" | jq -r '.reason // empty')), not running"

if [ "$runtime" = libvirt ]; then
	console=$demo/data-1/instances/$inst/console.log
	ip4=$(bcctl --format json instance get "$inst" | jq -r '.nics[0].ipv4 // empty')
	say "demo: $inst runs; waiting for the guest to boot and apply its user data (up to 10 min under TCG)"
	booted() { grep -a -q 'bc-demo: user data applied' "$console" 2>/dev/null; }
	if eventually 600 booted; then
		say "demo: booted"
	else
		say "demo: the guest has not reported yet; its console so far:"
	fi
	echo
	say "---- last lines of the console ($console)"
	tail -n 15 "$console" | tr -d '\r' | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g'
	say "----"
	echo
	say "demo: $inst address $ip4 (bridge $STACK_BRIDGE, gateway ${BC_POOL_GATEWAY:-10.77.0.1})"
fi

# -- a sandbox whose guest gets a secret: the value is put write-only (from
# stdin), a template names it in env, and the sandbox's instance finds it in
# /etc/sandbox/env (its user data prints it on the console under libvirt)
printf 'hello from a bc secret' | bcctl secret put demo-greeting >/dev/null ||
	give_up "secret put failed"
cat >"$demo/sandbox-user-data" <<'EOT'
#cloud-config
runcmd:
  - [ sh, -c, '. /etc/sandbox/env; echo "bc-demo: sandbox env GREETING=$GREETING" > /dev/ttyS0' ]
EOT
out=$(bcctl --format json sandbox-template create --name demo --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --user-data-file "$demo/sandbox-user-data" \
	--env GREETING=secret://root/demo-greeting --max-ttl 24h) || give_up "template create failed: $out"
tmpl=$(json_get "$out" id)
cold_t0=$(date +%s%3N)
out=$(bcctl --format json sandbox create --template "$tmpl" --ttl 2h --key demo-sbx-1) ||
	give_up "sandbox create failed: $out"
sbx=$(json_get "$out" id)
sbx_inst=$(json_get "$out" instance_id)
say "demo: secret demo-greeting put; template $tmpl names it; sandbox $sbx (instance $sbx_inst) created"
sbx_ready() { ! agent_alive || [ "$(json_get "$(bcctl --format json sandbox get "$sbx")" state)" = ready ]; }
eventually 600 sbx_ready || say "demo: sandbox $sbx is not ready yet"
agent_alive || give_up "bcd exited: $(grep -E 'level=(error|fatal)' "$demo/bcd-1.log" | tail -n 3)"
exec_hint=''
if [ "$runtime" = libvirt ]; then
	sbx_console=$demo/data-1/instances/$sbx_inst/console.log
	said() { grep -a -q 'bc-demo: sandbox env' "$sbx_console" 2>/dev/null; }
	if eventually 600 said; then
		say "demo: the sandbox's guest read its env: $(grep -a -o 'bc-demo: sandbox env.*' "$sbx_console" | tr -d '\r' | head -n 1)"
	else
		say "demo: the sandbox's guest has not printed its env yet ($sbx_console)"
	fi
	# -- run code inside: a certificate from the sandbox SSH CA for the
	# demo's key, a single-use ticket, stock ssh through the tunnel
	# (controller -> bcd -> the guest's port 22)
	shell_up() { bcctl sandbox exec "$1" --key "$demo/id_ed25519" -- true </dev/null >/dev/null 2>&1; }
	eventually 600 shell_up "$sbx"
	cold_ms=$(($(date +%s%3N) - cold_t0))
	say "demo: bcctl sandbox exec $sbx -- uname -a"
	bcctl sandbox exec "$sbx" --key "$demo/id_ed25519" -- uname -a ||
		say "demo: sandbox exec failed (see $demo/ctl-1.log and $demo/bcd-1.log)"
	# -- a warm pool holds booted guests, paused: a claim resumes one
	out=$(bcctl --format json sandbox-template create --name demo-warm --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --warm-min 1 --warm-max 1) ||
		give_up "warm template create failed: $out"
	wtmpl=$(json_get "$out" id)
	say "demo: template $wtmpl keeps one warm guest; waiting for it to boot and be paused"
	warm_booted() {
		[ -n "$(psql -d bc -XAtq -c "SELECT id FROM instances WHERE warm_template_id = '$wtmpl' AND state = 'paused' AND guest_ready_at IS NOT NULL AND desired_state <> 'deleted' LIMIT 1")" ]
	}
	if eventually 600 warm_booted; then
		warm_t0=$(date +%s%3N)
		out=$(bcctl --format json sandbox create --template "$wtmpl" --ttl 2h --wait 20s)
		wsbx=$(json_get "$out" id)
		eventually 60 shell_up "$wsbx"
		warm_ms=$(($(date +%s%3N) - warm_t0))
		say "demo: from bcctl sandbox create to a shell in the sandbox: warm $wsbx ${warm_ms} ms, cold $sbx ${cold_ms} ms"
	else
		say "demo: the warm guest did not come up in 10 minutes (see $demo/bcd-1.log)"
	fi
	exec_hint="  bcctl sandbox exec $sbx --key $demo/id_ed25519          (a shell in the sandbox)
  bcctl sandbox cp --key $demo/id_ed25519 ./file $sbx:/tmp/
  bcctl sandbox create --template $wtmpl --wait 20s        (a booted guest from the warm pool)"
else
	say "demo: no guest runs under the fake runtime, so sandbox exec has no sshd to reach"
fi

echo
bcctl --format table instance list "${TENANT_ARGS[@]}"
echo
bcctl --format table sandbox list
echo
bcctl --format table secret list
echo
cat <<EOT
The demo is running (logs and state in $demo). To use it:

  export BC_URL=$BC_URL
  export BC_TOKEN=$BC_TOKEN
  export BC_CA_FILE=$BC_CA_FILE
  export PATH=$BC_BIN:\$PATH

  (or: . $demo/env; export PATH=$BC_BIN:\$PATH)

  bcctl pool list
  bcctl node list
  bcctl instance get $inst
  bcctl instance pause $inst; bcctl instance resume $inst
  bcctl instance create --pool $POOL_ID --flavor $FLAVOR_NAME --image $img
  bcctl --format json instance list
  bcctl instance delete $inst
  bcctl sandbox get $sbx; bcctl sandbox extend $sbx --by 30m; bcctl sandbox delete $sbx
  bcctl sandbox create --template $tmpl --wait 20s
$exec_hint
  printf 'new value' | bcctl secret put demo-greeting     (rotates it: the next sandbox gets it)
EOT
if [ "$runtime" = libvirt ]; then
	cat <<EOT

  ssh -i $demo/id_ed25519 -o StrictHostKeyChecking=no debian@$ip4
  virsh list; virsh console $inst        (Ctrl-] leaves)
  tail -f $console
EOT
fi
echo
echo "Stop it with: make stop"
