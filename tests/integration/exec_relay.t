# exec_relay.t: the whole exec path on the fake runtime, with a real sshd
# standing for the guest's: bcctl sandbox exec and cp (stock OpenSSH and
# scp), Sandboxes.Exec, Tunnels.Connect on a replica, node_tunnel_dial,
# bcd's Agent.Tunnel, and sshd on a loopback port that trusts the
# deployment's sandbox CA for "root@<instance>" (sandbox_account = root:
# the test may not create accounts on this machine) and presents a host
# certificate from the same CA. The fake runtime maps the instance's
# guest address to that sshd (agent/tunnel.h, TUNNEL_FAKE_TARGETS, a test
# knob).
#
#   - exec runs a command and returns its output and exit status; stdin is
#     piped (1 MiB of random bytes round-trip through `cat`);
#   - cp round-trips a 10 MiB file and a directory;
#   - the host certificate pins the guest: ssh checks it (StrictHostKeyChecking)
#     and a guest presenting an uncertified key is refused;
#   - the grant's path opens the same tunnel as a WebSocket (npm ws), and
#     ssh runs over it;
#   - Tunnels.List shows an open session, Tunnels.Close ends it;
#   - a policy withdrawn during a session closes it at the next re-check
#     (tunnel_recheck_seconds = 3 here), a deleted sandbox within seconds;
#   - the controller's memory stays flat while 32 MiB go through a reader
#     that reads slowly.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/sshd.sh"

if [ "$(id -u)" -ne 0 ] || [ ! -x /usr/sbin/sshd ]; then
	plan skip_all "needs root and /usr/sbin/sshd (openssh-server)"
fi
# ASan keeps freed memory in quarantine (256 MiB by default): bounded here
# so the controller's RSS shows what it holds, not what it freed
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1
export BC_CTL_EXTRA_CONF="sandbox_account = root
tunnel_recheck_seconds = 3
http_listen = 127.0.0.1:0"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,200 || bail_out "stack_up failed"
img=$(stack_image_create relay-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
W=$STACK_DIR/w
mkdir -p "$W"
CA=$STACK_DIR/pki/sandbox-ssh-ca
http_port=$(sed -n 's/.*serving JSON\/HTTP on .* (port \([0-9]*\)).*/\1/p' "$STACK_DIR/ctl-1.log" | tail -n1)

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:*","compute:tunnels:*"],"resources":["*"]}' >"$W/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$W/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null
abc() { BC_TOKEN=$A bcctl "$@"; }
tmpl=$(jid "$(abc --format json sandbox-template create --name r --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --network private)") || bail_out "template"
s=$(jid "$(abc --format json sandbox create --template "$tmpl" --ttl 30m --wait 20s)")
inst=$(q "SELECT instance_id FROM sandboxes WHERE id = '$s'")
ready() { [ "$(q "SELECT state FROM sandboxes WHERE id = '$s'")" = ready ]; }
eventually 30 ready
ok $? "a ready sandbox ($s on $inst)"
guest=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$inst' LIMIT 1")
like "$guest" '^[0-9.]+$' "its guest address ($guest)"

# -- the "guest's" sshd (tests/lib/sshd.sh)
guest_sshd_up "$inst" "$guest" "$W/sshd" || bail_out "sshd did not start"
pass "sshd stands for the guest on 127.0.0.1:$GUEST_SSHD_PORT"

ssh-keygen -q -t ed25519 -N '' -C alice -f "$W/id" || bail_out "ssh-keygen"
EX=(sandbox exec "$s" --key "$W/id")

# -- exec
out=$(abc "${EX[@]}" -- echo hello from the guest </dev/null 2>"$W/exec.err")
is "$out" 'hello from the guest' 'bcctl sandbox exec runs a command through the tunnel'
[ -s "$W/exec.err" ] && diag "$(tail -n 5 "$W/exec.err")"
abc "${EX[@]}" -- 'exit 3' </dev/null 2>/dev/null
is $? 3 "and exits with its status"
head -c 1048576 /dev/urandom >"$W/in"
abc "${EX[@]}" -- cat <"$W/in" >"$W/out" 2>/dev/null
cmp -s "$W/in" "$W/out"
ok $? 'stdin is piped through: 1 MiB of random bytes back byte for byte'
is "$(q "SELECT 'tunnel.raw' = ANY(capabilities) FROM nodes")" t \
	"the node's bcd reports the capability tunnel.raw"
like "$(grep -c 'for the controller (.*, raw)$' "$STACK_DIR/bcd-1.log")" '^[1-9]' \
	'... and the controller reached it over the raw protocol (bcd logs each raw tunnel)'
is "$(grep -c "Accepted publickey for root" "$W/sshd/sshd.log")" 3 'sshd accepted our certificate each time'
like "$(grep -m1 'Accepted publickey' "$W/sshd/sshd.log")" "ID bc:$alice:$s:ssh_" 'with the grant key id'
out=$(abc "${EX[@]}" -- -oProxyCommand=touch\ "$W/pwned" </dev/null 2>&1)
ok "[ ! -e '$W/pwned' ]" 'a command word -oProxyCommand=... runs in the guest, never as an ssh option'

# -- bcctl over the grant's WebSocket path (BC_TUNNEL_URL: the JSON/HTTP
# port), no gRPC between bcctl and the controller
abc_ws() { BC_TUNNEL_URL=127.0.0.1:$http_port abc "$@"; }
abc_ws "${EX[@]}" -- cat <"$W/in" >"$W/out.ws" 2>"$W/ws.err"
is $? 0 "bcctl with BC_TUNNEL_URL: exec through the WebSocket route ($(tail -n 2 "$W/ws.err"))"
cmp -s "$W/in" "$W/out.ws"
ok $? '... 1 MiB of random bytes back byte for byte'
abc_ws "${EX[@]}" -- 'exit 3' </dev/null 2>/dev/null
is $? 3 '... and the exit status'
out=$(BC_TUNNEL_URL=127.0.0.1:$(free_tcp_port) abc "${EX[@]}" -- echo no </dev/null 2>&1)
ok "[ \"\$(printf '%s' \"\$out\" | grep -c '^no\$')\" = 0 ]" \
	"... which it really uses: a tunnel URL where nothing listens fails the exec ($(printf '%s' "$out" | head -n 1))"

# -- cp
head -c 10485760 /dev/urandom >"$W/big"
mkdir -p "$W/tree/sub" && printf 'x' >"$W/tree/a" && head -c 99999 /dev/urandom >"$W/tree/sub/b"
abc sandbox cp --key "$W/id" "$W/big" "$s:$W/big.up" </dev/null 2>"$W/cp.err"
cmp -s "$W/big" "$W/big.up"
ok $? 'cp uploads 10 MiB byte for byte'
abc sandbox cp --key "$W/id" "$s:$W/big.up" "$W/big.down" </dev/null 2>>"$W/cp.err"
cmp -s "$W/big" "$W/big.down"
ok $? 'and downloads it'
abc sandbox cp --key "$W/id" --recursive "$W/tree" "$s:$W/tree.up" </dev/null 2>>"$W/cp.err"
diff -r "$W/tree" "$W/tree.up" >/dev/null
ok $? 'a directory is copied'
[ -s "$W/cp.err" ] && diag "$(tail -n 5 "$W/cp.err")"

# -- the host certificate pins the guest
hc=$(q "SELECT host_certified FROM instances WHERE id = '$inst'")
if [ "$hc" = t ]; then
	ssh-keygen -q -t ed25519 -N '' -f "$W/otherhost"
	cp "$W/sshd/sshd_config" "$W/sshd/sshd_config.keep"
	sed -i "s|^HostKey .*|HostKey $W/otherhost|; /^HostCertificate/d" "$W/sshd/sshd_config"
	guest_sshd_restart
	out=$(abc "${EX[@]}" -- echo x </dev/null 2>&1)
	isnt "$?" 0 "a guest presenting an uncertified host key is refused ($(printf '%s' "$out" | tail -n1))"
	cp "$W/sshd/sshd_config.keep" "$W/sshd/sshd_config"
	guest_sshd_restart
	is "$(abc "${EX[@]}" -- echo back </dev/null 2>/dev/null)" back 'the certified key is accepted again'
else
	fail "the sandbox's instance has a host certificate (certifyHostKey)"
fi

# -- WebSocket: the grant's path, ssh over npm ws
grant() {
	BC_TOKEN=$A node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url 1)" "$BC_CA_FILE" - - \
		bc/compute/v1/sandboxes.proto bc.compute.v1.Sandboxes Exec \
		"{\"sandbox_id\": \"$s\", \"public_key\": \"$(cat "$W/id.pub")\"}"
}
gr=$(grant)
printf '%s' "$gr" | jq -r .certificate >"$W/id-cert.pub"
printf '@cert-authority %s %s\n' "$inst" "$(cut -d' ' -f1-2 "$CA.pub")" >"$W/kh"
wsurl="wss://127.0.0.1:$http_port/api/compute/$(printf '%s' "$gr" | jq -r .path)"
out=$(ssh -F none -i "$W/id" -o CertificateFile="$W/id-cert.pub" -o IdentitiesOnly=yes -o BatchMode=yes \
	-o StrictHostKeyChecking=yes -o UserKnownHostsFile="$W/kh" -o HostKeyAlias="$inst" \
	-o ProxyCommand="node $BC_SRC/tests/integration/tunnel_ws.js '$wsurl' $BC_CA_FILE" \
	-o LogLevel=ERROR root@ws echo over websocket </dev/null 2>"$W/ws.err")
is "$out" 'over websocket' 'ssh runs over the WebSocket route (npm ws as ProxyCommand)'
[ "$out" = 'over websocket' ] || diag "$(tail -n 5 "$W/ws.err")"
node "$BC_SRC/tests/integration/tunnel_ws.js" "$wsurl" "$BC_CA_FILE" </dev/null >/dev/null 2>"$W/ws2.err"
like "$(cat "$W/ws2.err")" '"close":1011' 'the same path again: closed 1011 (the ticket is spent)'
like "$(cat "$W/ws2.err")" 'invalid, expired or already used' '... saying why'

# -- Tunnels.List and Tunnels.Close
abc "${EX[@]}" -- sleep 300 </dev/null >/dev/null 2>&1 &
sess=$!
open_n() { q "SELECT count(*) FROM tunnels WHERE sandbox_id = '$s' AND opened_at IS NOT NULL AND closed_at IS NULL"; }
eventually 20 eval '[ "$(open_n)" -ge 1 ]'
out=$(abc --format json sandbox tunnels "$s")
is "$(printf '%s' "$out" | jq -r '[.items[] | select(.state == "open")] | length')" 1 'sandbox tunnels lists the open session'
tun=$(printf '%s' "$out" | jq -r '.items[0].id')
is "$(printf '%s' "$out" | jq -r '.items[0].identity_id // .items[0].identityId')" "$alice" '... and whose it is'
abc sandbox close-tunnels "$s" --tunnel "$tun" >/dev/null
gone_pid() { ! kill -0 "$sess" 2>/dev/null; }
eventually 10 gone_pid
ok $? 'sandbox close-tunnels ended the session'
is "$(q "SELECT close_reason FROM tunnels WHERE id = '$tun'")" 'closed by Tunnels.Close' '... and the row says so'

# -- re-check: a withdrawn policy closes the session
abc "${EX[@]}" -- sleep 300 </dev/null >/dev/null 2>&1 &
sess=$!
eventually 20 eval '[ "$(open_n)" -ge 1 ]'
bcctl policy detach "$pol" --identity "$alice" >/dev/null
t0=$(date +%s)
eventually 15 gone_pid
rc=$?
took=$(($(date +%s) - t0))
ok $rc "withdrawing the policy closed the session at the next re-check ($took s, every 3 s here)"
like "$(q "SELECT close_reason FROM tunnels WHERE sandbox_id = '$s' ORDER BY closed_at DESC NULLS LAST LIMIT 1")" \
	'^re-check refused: .*compute:sandboxes:exec' '... the re-check refused exec'
bcctl policy attach "$pol" --identity "$alice" >/dev/null

# -- memory: 32 MiB through a slow reader leave the controller's RSS flat,
# with bcctl over gRPC and over the WebSocket route
ctl_pid=$(_stack_get_pid ctl-1)
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
slow_read() { # BCCTL_WRAPPER: sets R0, R1 (the highest RSS while it ran)
	"$1" "${EX[@]}" -- 'head -c 1048576 /dev/zero' </dev/null >/dev/null 2>&1 # warm
	R0=$(rss "$ctl_pid")
	"$1" "${EX[@]}" -- 'head -c 33554432 /dev/zero' </dev/null 2>/dev/null |
		python3 -c 'import sys, time
n = 0
while True:
    b = sys.stdin.buffer.read(65536)
    if not b: break
    n += len(b); time.sleep(0.002)
print(n)' >"$W/slow.n" &
	local pid=$! r
	R1=$R0
	while kill -0 "$pid" 2>/dev/null; do
		r=$(rss "$ctl_pid")
		[ "$r" -gt "$R1" ] && R1=$r
		sleep 0.2
	done
	wait "$pid"
}
for route in abc abc_ws; do
	slow_read "$route"
	is "$(cat "$W/slow.n")" 33554432 "32 MiB went through a slow reader ($route)"
	ok "[ $((R1 - R0)) -lt 16384 ]" "the controller's RSS grew at most $((R1 - R0)) KiB while it ran (< 16 MiB: nothing queued per tunnel)"
done

# -- deleting the sandbox closes a session
abc "${EX[@]}" -- sleep 300 </dev/null >/dev/null 2>&1 &
sess=$!
eventually 20 eval '[ "$(open_n)" -ge 1 ]'
abc sandbox delete "$s" >/dev/null
eventually 15 gone_pid
ok $? 'deleting the sandbox ended the session'
kill "$sess" 2>/dev/null
done_testing
