# boot.t: a real guest through the whole stack. The guest image
# (contrib/guest, `make guest`) is registered in the catalog with its https
# URL and sha256 and served on loopback; an instance is created through the
# API with an SSH key and user data that writes a file and prints a marker.
# bcd (libvirt runtime, nftables networking) fetches and verifies the
# image, makes the overlay, the NoCloud seed, the tap and its guards, and
# boots the domain. Proves: the user data applied (the marker on the serial
# console, the file read back over real OpenSSH from the host to the guest's
# static address), the controller showing it running, pause and resume
# (bcctl and `virsh domstate` agree), and a delete removing the domain, the
# overlay, the seed, the tap and its guards.
. "$(dirname "$0")/lib.sh"

e2e_need
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"

W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
token=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
cat >"$W/user-data" <<EOT
#cloud-config
write_files:
  - path: /etc/bc-e2e
    permissions: "0644"
    content: "token $token"
runcmd:
  - [ sh, -c, 'echo "BC-E2E-MARKER \$(cat /etc/bc-e2e)" > /dev/ttyS0' ]
EOT

id=$(e2e_instance_create --ssh-key "$(cat "$W/key.pub")" --user-data-file "$W/user-data")
like "$id" '^inst_' "instance created through the API ($id)"
[ -n "$id" ] || bail_out "no instance"

instance_running() { instance_state_is "$id" running; }
eventually "$E2E_BOOT_TIMEOUT" instance_running
ok $? "the controller shows it running (state $(instance_state "$id"))"

json=$(e2e_instance_json "$id")
ip4=$(printf '%s' "$json" | jq -r '.nics[0].ipv4 // empty')
tap=$(printf '%s' "$json" | jq -r '.nics[0].name // empty')
like "$ip4" '^10\.214\.' "a static address from the pool ($ip4)"
is "$(e2e_domstate "$id")" running "virsh: the domain is running"
pid=$(e2e_qemu_pid "$id")
ok "test -n '$pid'" "QEMU runs (pid $pid)"
d=$(e2e_instance_dir "$id")
img=$STACK_DIR/data-1/images/$(cut -d' ' -f1 "$E2E_GUEST_DIR/guest.qcow2.sha256")
ok "test -f '$img'" "the image is stored under its sha256"
is "$(qemu-img info -U --output=json "$d/disk.qcow2" 2>/dev/null | jq -r '."backing-filename"')" "$img" \
	"the overlay is backed by the verified image"
like "$(grep -c 'GET /guest.qcow2' "$HTTPS_DIR/https.log")" '^[1-9]' "fetched over https from the test server"

t0=$SECONDS
marker() { e2e_console_has "$id" "BC-E2E-MARKER token $token"; }
eventually "$E2E_BOOT_TIMEOUT" marker
ok $? "the guest booted and ran the user data: marker on the serial console ($((SECONDS - t0)) s after running)"
if ! marker; then
	diag "console tail:"
	diag_file "$(e2e_console "$id")" 40
fi
like "$(grep -a -m1 'Linux version' "$(e2e_console "$id")" || true; grep -a -c 'Welcome to' "$(e2e_console "$id")")" '[1-9]' \
	"the serial log shows the boot"

# --------------------------------------------------------------- ssh
SSH=(ssh -i "$W/key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o ConnectTimeout=10 -o LogLevel=ERROR "debian@$ip4")
ssh_file() { "${SSH[@]}" cat /etc/bc-e2e 2>>"$W/ssh.err"; }
ssh_up() { [ "$(ssh_file)" = "token $token" ]; }
eventually 180 ssh_up
ok $? "over real OpenSSH from the host to $ip4: the file the user data wrote"
[ -s "$W/ssh.err" ] && ! ssh_up && diag "ssh: $(tail -n 3 "$W/ssh.err")"
is "$("${SSH[@]}" 'ip -4 -o addr show dev eth0 | awk "{print \$4}"' 2>/dev/null)" "$ip4/24" \
	"the guest has its static address from network-config"
is "$("${SSH[@]}" 'echo "${SSH_CLIENT%% *}"' 2>/dev/null)" "$E2E_GATEWAY" \
	"the guest sees the connection come from the host's bridge address"
# both parts of the MIME multipart: the platform's (hostname, the key that
# let us in) and the caller's (the file above)
is "$("${SSH[@]}" hostname 2>/dev/null)" "${id//_/-}" "the platform's part set the hostname to the instance id"
cistat() { "${SSH[@]}" 'cloud-init status --wait >/dev/null 2>&1; cloud-init status' 2>/dev/null; }
like "$(cistat)" 'status: done' "cloud-init finished without errors"

# -------------------------------------------------------- pause / resume
out=$(bcctl --format json instance pause "$id" "${TENANT_ARGS[@]}" 2>&1)
ok $? "bcctl instance pause"
paused() { instance_state_is "$id" paused && [ "$(e2e_domstate "$id")" = paused ]; }
eventually 120 paused
ok $? "paused: the controller says $(instance_state "$id"), virsh says $(e2e_domstate "$id")"
is "$(e2e_qemu_pid "$id")" "$pid" "the same QEMU process while paused"
out=$(bcctl --format json instance resume "$id" "${TENANT_ARGS[@]}" 2>&1)
ok $? "bcctl instance resume"
resumed() { instance_state_is "$id" running && [ "$(e2e_domstate "$id")" = running ]; }
eventually 120 resumed
ok $? "resumed: the controller says $(instance_state "$id"), virsh says $(e2e_domstate "$id")"
eventually 60 ssh_up
ok $? "the guest answers over ssh again after resume"

# --------------------------------------------------------------- delete
# the guards in force: the base chains and the half they use (half_a or
# half_b); the other half stays whole until the next load, for packets that
# entered it before the commit, and is unreachable (tests/net/tamper.t)
no_guard() {
	local t h
	t=$(nft list table bridge bcd_instances 2>/dev/null) || return 0
	h=$(printf '%s\n' "$t" | sed -n 's/.*chain half_\([ab]\) .*/\1/p')
	[ -n "$h" ] || return 1
	! printf '%s\n' "$t" | awk -v h="${h}_" -v tap="$tap" '
		/^\t(chain|set|map) / { name = $2 }
		index($0, tap) && (index(name, h) == 1 || name !~ /^[ab]_/) { found = 1 }
		END { exit !found }'
}
ok "ip link show '$tap' >/dev/null 2>&1" "the tap $tap exists before the delete"
like "$(nft list table bridge bcd_instances 2>/dev/null)" "$tap" "the guards name the tap"
ok "! no_guard" "... in the rules in force"
out=$(bcctl --format json instance delete "$id" "${TENANT_ARGS[@]}" 2>&1)
ok $? "bcctl instance delete"
gone() {
	local st
	st=$(instance_state "$id")
	[ -z "$st" ] || [ "$st" = deleted ]
}
eventually 180 gone
ok $? "the controller shows it deleted"
no_domain() { ! virsh -q dominfo "$id" >/dev/null 2>&1; }
eventually 60 no_domain
ok $? "the domain is gone from libvirt"
ok "! kill -0 '$pid' 2>/dev/null" "its QEMU process ended"
no_dir() { [ ! -e "$d/disk.qcow2" ] && [ ! -e "$d/seed.iso" ]; }
eventually 60 no_dir
ok $? "the overlay and the seed are removed"
# bcd drops a deleted instance's tap and guards with the first spec that no
# longer names it; the controller must push one when the deletion finishes
no_tap() { ! ip link show "$tap" >/dev/null 2>&1; }
eventually 60 no_tap
ok $? "the tap is removed"
eventually 10 no_guard
ok $? "its guards are gone from the rules in force"
done_testing
