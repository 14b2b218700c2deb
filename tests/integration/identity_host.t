# identity_host.t: workload identity through a real bcd (issue 18; the
# endpoint: docs/agent.md, "The identity endpoint"; the broker:
# docs/identity.md). One controller, one fake-runtime bcd with its identity
# endpoint on (identity_endpoint = on) on the pool's gateway. The pool's
# subnet is on the loopback (127.88.0.0/24), so the test sends each request
# from an instance's own leased address (curl --interface, a raw socket
# bound to it) as its guest would through its tap:
# - bcd advertises instance.identity;
# - attest from the instance's address: bcd forwards it to Node.Attest with
#   that instance and address, the epoch is live, the sandbox ready, and
#   Recognize names it; the answer carries the capability token;
# - from another source (no instance's address): 403 unknown-source, the
#   epoch stays pending; a value of another instance: the broker's
#   bootstrap-mismatch passed through; unknown, replayed, expired values:
#   bootstrap-unknown, bootstrap-used, bootstrap-expired;
# - renew with the token works; another token: capability-invalid;
# - every malformed request (bad method/path, no body, oversized, slow,
#   garbage) is 400 or closed, counted; one request in flight per instance
#   (409 while a long-poll is held); the rate limit (429);
# - a warm claim of a template with identity binds (lifecycle bound, warm)
#   instead of being created on demand; the bootstrap is delivered through
#   the host: bcd fetches it bound to the instance and hands it once to the
#   long-poll from that instance's address (never to another address, never
#   twice; GetBootData of its reference for another instance is NOT_FOUND),
#   it is in no log, event, commands row or spec in plaintext; it attests,
#   the warm sandbox becomes ready, the reference is cleared and the sealed
#   value deleted;
# - the guest's client (contrib/guest/bc-identity.c, bound to the
#   instance's address) attests, keeps its token 0600, renews after a
#   restart, exits 0 without identity and 2 on a used value;
# - the harness's activity: bc-identity state running|idle through bcd
#   (POST /bc/identity/state, "STATE:TOKEN") moves the lifecycle and
#   publishes sandbox.running/idle; a repeat is a no-op; a bad state, a body
#   without one, another token, another address, a stranger, a sandbox not
#   yet runtime-ready are refused and counted;
# - identity_endpoint = off: the capability is no longer advertised, and a
#   cold sandbox with identity is not placed on the host until it is again;
# - every refusal is counted in bcd_identity_requests_total.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/tenant.sh"

command -v curl >/dev/null || skip_all "curl is not installed"
ip -o addr show lo 2>/dev/null | grep -q 'inet 127' || skip_all "no IPv4 loopback"

EP_PORT=$(free_tcp_port) || bail_out "no free port"
MET_PORT=$(free_tcp_port) || bail_out "no free port"
GW=127.88.0.1
export BC_POOL_SUBNET=127.88.0.0/24 BC_POOL_GATEWAY=$GW
export BC_AGENT_EXTRA_CONF="identity_endpoint = on
identity_port = $EP_PORT
metrics_listen = 127.0.0.1:$MET_PORT"
export BC_CTL_EXTRA_CONF="sandbox_reconcile_seconds = 1
identity_enabled = 1
identity_cache_seconds = 2
identity_bootstrap_seconds = 600"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create idh-img) || bail_out "no image"

jid() { json_get "$1" id; }
sbx() { bcctl --format json sandbox get "$1"; }
metric() { curl -s "http://127.0.0.1:$MET_PORT/metrics" |
	sed -n "s/^bcd_identity_requests_total{result=\"$1\"} //p"; }
# ep SRC METHOD PATH [BODY]: one request from SRC; HTTP in H, body in B
ep() {
	local args=(-s --interface "$1" -o "$STACK_DIR/ep.out" -w '%{http_code}' -m 40 -X "$2")
	[ -n "${4:-}" ] && args+=(-H 'Content-Type: text/plain' --data-binary "$4")
	H=$(curl "${args[@]}" "http://$GW:$EP_PORT$3")
	B=$(cat "$STACK_DIR/ep.out" 2>/dev/null)
}
jb() { printf '%s' "$B" | jq -r ".$1 // empty"; }
# raw SRC [slow]: the bytes on stdin from SRC; prints the status line or "closed"
cat >"$STACK_DIR/raw.py" <<'EOF'
import socket, sys, time
src, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
slow = len(sys.argv) > 4
data = sys.stdin.buffer.read()
s = socket.socket()
s.bind((src, 0))
s.settimeout(30)
s.connect((host, port))
if slow:
    s.sendall(data[:12])
    time.sleep(4)
else:
    s.sendall(data)
out = b''
try:
    while True:
        b = s.recv(4096)
        if not b:
            break
        out += b
except OSError:
    pass
print(out.split(b'\r\n')[0].decode() if out else 'closed')
EOF
raw() { python3 "$STACK_DIR/raw.py" "$1" "$GW" "$EP_PORT" ${2:+slow}; }
# bootdata INSTANCE: its sealed boot data as its node gets it (GetBootData)
bootdata() {
	local dir=$STACK_DIR/agent-1 ref
	ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$1'")
	node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url 1)" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$ref\"}" 2>/dev/null | jq -r .user_data | base64 -d
}
# gbd INSTANCE REF: Node.GetBootData as the node; the gRPC code ("ok" on success)
gbd() {
	local dir=$STACK_DIR/agent-1
	node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url 1)" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$2\"}" 2>/dev/null | jq -r '.code // "ok"'
}
# stranger: an address of the pool's subnet that no instance holds now
# (leases are random in the /24: a fixed one can be an instance's)
stranger() {
	local n
	for n in $(seq 250 -1 200); do
		[ -z "$(q "SELECT 1 FROM ip_leases WHERE host(address) = '127.88.0.$n'")" ] &&
			{ echo "127.88.0.$n"; return 0; }
	done
	return 1
}
# new_sandbox TEMPLATE [FLAGS]: a sandbox whose instance runs; sets S I A
new_sandbox() {
	local out
	out=$(bcctl --format json sandbox create --template "$1" "${@:2}") || bail_out "create: $out"
	S=$(jid "$out")
	I=$(json_get "$out" instance_id)
	eventually 30 eval '[ "$(q "SELECT state FROM instances WHERE id = '"'$I'"'")" = running ]' ||
		bail_out "instance $I does not run"
	A=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$I'")
	# the agent's applied spec names the instance with its address
	eventually 30 eval '[ "$(q "SELECT n.applied_generation >= n.spec_generation FROM nodes n")" = t ]'
}

is "$(q "SELECT 'instance.identity' = ANY (capabilities) FROM nodes")" t \
	'bcd with its identity endpoint advertises instance.identity'

tmpl=$(jid "$(bcctl --format json sandbox-template create --name idh --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img")") || bail_out "template"

# -- a cold sandbox: attest through bcd from its own address
new_sandbox "$tmpl" --task t1
s1=$S i1=$I a1=$A
like "$a1" '^127\.88\.0\.[0-9]+$' "its instance has an address on the pool's subnet ($a1)"
b1=$(bootdata "$i1" | grep -oE 'bcb_[0-9a-f]{64}' | head -1)
like "$b1" '^bcb_' 'its sealed boot data carries the bootstrap value'
bootdata "$i1" | grep -q "/etc/sandbox/identity/endpoint"
ok $? '... and the endpoint file for the identity client'
bootdata "$i1" | grep -q "/etc/sandbox/identity/host"
ok $((! $?)) '... and no host-delivery marker (a cold sandbox)'
eventually 60 eval '[ -n "$(q "SELECT 1 FROM instances WHERE id = '"'$i1'"' AND guest_ready_at IS NOT NULL")" ]'
ok $? 'its guest reported up'
is "$(json_get "$(sbx "$s1")" state)" starting 'not ready before its epoch is live'

ep "$(stranger)" POST /bc/identity/attest "$b1"
is "$H/$(jb code)/$(jb reason)" 403/ACCESS_DENIED/unknown-source \
	'from an address no instance holds: 403 unknown-source'
ep 127.0.0.1 POST /bc/identity/attest "$b1"
is "$H/$(jb reason)" 403/unknown-source 'from the host itself: refused too'
is "$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$s1'")" pending 'the epoch stays pending'

ep "$a1" POST /bc/identity/attest "bcb_$(printf '%064d' 0)"
is "$H/$(jb code)/$(jb reason)" 403/ACCESS_DENIED/bootstrap-unknown \
	"an unknown value: the broker's refusal passed through"

new_sandbox "$tmpl" --task t2
s2=$S i2=$I a2=$A
b2=$(bootdata "$i2" | grep -oE 'bcb_[0-9a-f]{64}' | head -1)
ep "$a1" POST /bc/identity/attest "$b2"
is "$H/$(jb reason)" 403/bootstrap-mismatch \
	"another instance's value from this instance's address: bootstrap-mismatch"
is "$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$s2'")" pending '... its epoch stays pending'

ep "$a1" POST /bc/identity/attest "$b1"
is "$H" 200 'attest from its own address: 200'
is "$(jb sandboxId)" "$s1" '... names its sandbox'
e1=$(jb epochId)
is "$e1" "$(q "SELECT id FROM identity_epochs WHERE sandbox_id = '$s1'")" '... and its epoch'
cap=$(jb capabilityToken)
like "$cap" '^bcc_' '... with its capability token'
is "$(jb renewAfterSeconds)" 480 '... to renew after 480 s'
lease=$(jb leaseExpiresAt)
ok "$([ "$lease" -gt "$(($(date +%s) * 1000 + 500000))" ] && echo 0 || echo 1)" "... a lease of about 600 s ($lease)"
is "$(q "SELECT state || ' ' || host(address) || ' ' || node_id FROM identity_epochs WHERE id = '$e1'")" \
	"live $a1 $(agent_node_id 1)" 'the epoch is live, bound to the address and the node bcd vouched for'
eventually 30 eval '[ "$(json_get "$(sbx "$s1")" state)" = ready ]'
ok $? 'the sandbox is ready once attested'
is "$(json_get "$(sbx "$s1")" lifecycle)" runtime-ready '... lifecycle runtime-ready'
is "$(json_get "$(bcctl --format json identity recognize "$a1")" sandbox_id)" "$s1" \
	'Recognize(its address) names it'
grep -q "$cap" "$STACK_DIR"/*.log
ok $((! $?)) 'the capability token is in no log'
grep -q "$b1" "$STACK_DIR"/*.log
ok $((! $?)) 'the bootstrap value is in no log'

ep "$a1" POST /bc/identity/attest "$b1"
is "$H/$(jb code)/$(jb reason)" 403/ACCESS_DENIED/bootstrap-used 'a replay: bootstrap-used'

# expired: the third sandbox's value is past its expiry
new_sandbox "$tmpl" --task t3
s3=$S i3=$I a3=$A
b3=$(bootdata "$i3" | grep -oE 'bcb_[0-9a-f]{64}' | head -1)
q "UPDATE identity_epochs SET bootstrap_expires_at = now() - interval '1 second' WHERE sandbox_id = '$s3'" >/dev/null
ep "$a3" POST /bc/identity/attest "$b3"
is "$H/$(jb reason)" 403/bootstrap-expired 'an expired value: bootstrap-expired'

# -- renew
ep "$a1" POST /bc/identity/renew "$cap"
is "$H/$(jb epochId)" "200/$e1" 'renew with the token from the same address: 200, its epoch'
is "$(jb capabilityToken)" '' '... the token is not repeated'
ok "$([ "$(jb leaseExpiresAt)" -ge "$lease" ] && echo 0 || echo 1)" '... the lease runs from now again'
ep "$a1" POST /bc/identity/renew "bcc_$(printf '%064d' 0)"
is "$H/$(jb code)/$(jb reason)" 403/ACCESS_DENIED/capability-invalid 'another token: capability-invalid'
ep "$a2" POST /bc/identity/renew "$cap"
is "$H/$(jb reason)" 403/capability-invalid "the token from another instance's address: capability-invalid"

# -- malformed requests, from an instance's own address
is "$(printf 'PUT /bc/identity/attest HTTP/1.1\r\n\r\n' | raw "$a2")" 'HTTP/1.1 400 Bad Request' 'another method: 400'
is "$(printf 'POST /bc/identity/x HTTP/1.1\r\nContent-Length: 1\r\n\r\na' | raw "$a2")" 'HTTP/1.1 400 Bad Request' 'another path: 400'
is "$(printf 'POST /bc/identity/attest HTTP/1.1\r\n\r\n' | raw "$a2")" 'HTTP/1.1 400 Bad Request' 'a POST without a body: 400'
is "$(printf 'POST /bc/identity/attest HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n' | raw "$a2")" \
	'HTTP/1.1 400 Bad Request' 'chunked: 400'
is "$(printf 'POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 2\r\n\r\nabEXTRA' | raw "$a2")" \
	'HTTP/1.1 400 Bad Request' 'bytes after the body: 400'
is "$( (printf 'GET /bc/identity/bootstrap HTTP/1.1\r\nX: '; head -c 5000 /dev/zero | tr '\0' a) | raw "$a2")" \
	'HTTP/1.1 400 Bad Request' 'more than 4 KiB: 400'
is "$(printf 'POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 3\r\n\r\na\0b' | raw "$a2")" \
	'HTTP/1.1 400 Bad Request' 'a NUL byte: 400'
is "$(printf 'POST /bc/identity/attest HTTP/1.1\r\nContent-Length: 8\r\n\r\nbcb_0000' | raw "$a2" slow)" closed \
	'a request not whole within 2 s: closed without an answer'
is "$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$s2'")" pending 'none of them touched the epoch'
ok "$([ "$(metric malformed)" -ge 8 ] && echo 0 || echo 1)" "bcd_identity_requests_total{result=\"malformed\"} counts them ($(metric malformed))"
n=$(grep -c "identity request from $a2 (instance $i2) refused: malformed" "$STACK_DIR/bcd-1.log")
is "$n" 1 'logged once per (instance, result)'

# -- one in flight per instance: a long-poll held, a second request refused
curl -s --interface "$a2" -o /dev/null -m 60 "http://$GW:$EP_PORT/bc/identity/bootstrap" &
poll=$!
# its connection is up (and bcd, polling every 250 ms, has read the request
# a moment later); a value that would change nothing were it not refused
held() { ss -Htn state established "( dport = :$EP_PORT and src $a2 )" | grep -q .; }
eventually 10 held
sleep 1
ep "$a2" POST /bc/identity/attest "bcb_$(printf '%064d' 1)"
is "$H/$(jb code)/$(jb reason)" 409/CONFLICT/request-in-flight 'a second request while one is in flight: 409'
kill "$poll" 2>/dev/null
wait "$poll" 2>/dev/null
sleep 1

# -- the rate limit: a burst of 10, then 429 (one more every 6 s: the
# bound allows for the time the requests took)
codes="" t0=$(date +%s%3N)
for k in $(seq 1 40); do
	ep "$a3" POST /bc/identity/renew "bcc_x$k"
	codes="$codes $H"
	[ "$H" = 429 ] && break
done
t1=$(date +%s%3N)
like "$codes" '^( 403)+ 429$' "a burst is answered by the broker, then refused 429 ($codes)"
n=$(printf '%s\n' $codes | grep -c 403)
ok "$([ "$n" -ge 9 ] && [ "$n" -le $((10 + (t1 - t0) / 6000 + 1)) ] && echo 0 || echo 1)" \
	"... after the bucket's 10 (one taken before) and one per 6 s ($n in $((t1 - t0)) ms)"
ok "$([ "$(metric rate-limited)" -ge 1 ] && echo 0 || echo 1)" 'counted rate-limited'
ok "$([ "$(metric unknown-source)" -ge 2 ] && echo 0 || echo 1)" 'counted unknown-source'
ok "$([ "$(metric busy)" -ge 1 ] && echo 0 || echo 1)" 'counted busy'
ok "$([ "$(metric attested)" = 1 ] && [ "$(metric renewed)" = 1 ] && echo 0 || echo 1)" 'counted attested 1, renewed 1'
ok "$([ "$(metric refused)" -ge 6 ] && echo 0 || echo 1)" "counted the broker's refusals ($(metric refused))"

# -- the guest's identity client (contrib/guest/bc-identity.c) against bcd
DRV=$BC_BIN/../tests/integration/bc-identity
[ -x "$DRV" ] || DRV=$BC_SRC/build/tests/integration/bc-identity
[ -x "$DRV" ] || bail_out "no $DRV: make builds it"
new_sandbox "$tmpl" --task t4
s4=$S i4=$I a4=$A
G=$STACK_DIR/guest4
mkdir -p "$G/etc" "$G/run" "$G/none"
bootdata "$i4" | grep -oE 'bcb_[0-9a-f]{64}' | head -1 >"$G/etc/bootstrap"
echo "$GW:$EP_PORT" >"$G/etc/endpoint"
# guest RUNDIR: the client in the foreground (in the background it is
# started directly, so that "$!" is its own pid and kill stops it)
guest() { BC_IDENTITY_DIR=$G/etc BC_IDENTITY_RUN=$1 BC_IDENTITY_SOURCE=$a4 "$DRV"; }
BC_IDENTITY_DIR=$G/none BC_IDENTITY_RUN=$G/run BC_IDENTITY_SOURCE=$a4 "$DRV" >"$G/none.log" 2>&1
is "$?/$(cat "$G/none.log")" 0/ 'no bootstrap and no host marker: the client exits 0, quietly'
BC_IDENTITY_DIR=$G/etc BC_IDENTITY_RUN=$G/run BC_IDENTITY_SOURCE=$a4 "$DRV" >"$G/client.log" 2>&1 &
cpid=$!
eventually 30 eval '[ "$(json_get "$(sbx "$s4")" state)" = ready ]'
ok $? 'the client attests through bcd from its instance address: the sandbox is ready'
like "$(cat "$G/client.log")" "identity live: sandbox $s4" '... and says so'
is "$(stat -c %a "$G/run/token" 2>/dev/null)" 600 'it keeps the capability token in its run dir, 0600'
like "$(cat "$G/run/token")" '^bcc_' '... the token'
grep -q -e "$(cat "$G/etc/bootstrap")" -e "$(cat "$G/run/token")" "$G/client.log"
ok $((! $?)) 'it prints neither the value nor the token'
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
r0=$(metric renewed)
BC_IDENTITY_DIR=$G/etc BC_IDENTITY_RUN=$G/run BC_IDENTITY_SOURCE=$a4 "$DRV" >"$G/restart.log" 2>&1 &
cpid=$!
eventually 20 eval '[ "$(metric renewed)" -gt "$r0" ]'
ok $? 'restarted with its token kept, it renews (not attests again)'
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
kill -0 "$cpid" 2>/dev/null
ok $((! $?)) 'the client is stopped'
mkdir -p "$G/run2"
guest "$G/run2" >"$G/replay.log" 2>&1
is "$?" 2 'a client replaying a used value ends with status 2 (no restart)'
like "$(cat "$G/replay.log")" 'attestation refused: 403 ACCESS_DENIED bootstrap-used' '... saying why'

# -- the harness's activity: bc-identity state, through bcd, from its address
gstate() { BC_IDENTITY_DIR=$G/etc BC_IDENTITY_RUN=$G/run BC_IDENTITY_SOURCE=$a4 "$DRV" state "$@"; }
eventually 30 eval '[ "$(json_get "$(sbx "$s4")" lifecycle)" = runtime-ready ]'
ok $? "its sandbox is runtime-ready"
gstate running >"$G/state.log" 2>&1
is "$?" 0 'bc-identity state running: exit 0'
like "$(cat "$G/state.log")" 'reported running: the sandbox is running' '... and says so'
is "$(json_get "$(sbx "$s4")" lifecycle)" running '... the lifecycle is running'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.running' AND subject = 'sandbox/$s4'")" 1 \
	'... sandbox.running published'
grep -q "$(cat "$G/run/token")" "$G/state.log" "$STACK_DIR"/*.log
ok $((! $?)) '... the token in no log'
cap4=$(cat "$G/run/token")
ep "$a4" POST /bc/identity/state "idle:$cap4"
is "$H/$(jb lifecycle)/$(jb changed)/$(jb sandboxId)" "200/idle/true/$s4" \
	'POST /bc/identity/state idle from its address: 200, idle, changed'
ep "$a4" POST /bc/identity/state "idle:$cap4"
is "$H/$(jb lifecycle)/$(printf '%s' "$B" | jq -r .changed)" 200/idle/false 'the same state again: a no-op'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.idle' AND subject = 'sandbox/$s4'")" 1 \
	'... one sandbox.idle'
ep "$a4" POST /bc/identity/state "sleeping:$cap4"
is "$H/$(jb code)" 400/INVALID_INPUT 'a state other than running or idle: 400 INVALID_INPUT (the broker)'
ep "$a4" POST /bc/identity/state "$cap4"
is "$H/$(jb reason)" 400/malformed-request 'a body without its state: 400 malformed'
ep "$a4" POST /bc/identity/state "running:bcc_$(printf '%064d' 0)"
is "$H/$(jb code)/$(jb reason)" 403/ACCESS_DENIED/capability-invalid 'another token: capability-invalid'
ep "$a2" POST /bc/identity/state "running:$cap4"
is "$H/$(jb reason)" 403/capability-invalid "its token from another instance's address: capability-invalid"
ep "$(stranger)" POST /bc/identity/state "running:$cap4"
is "$H/$(jb reason)" 403/unknown-source 'from an address no instance holds: unknown-source'
is "$(json_get "$(sbx "$s4")" lifecycle)" idle 'none of them moved the lifecycle'
q "UPDATE sandboxes SET lifecycle = 'identity-live' WHERE id = '$s4'" >/dev/null
gstate running >"$G/state2.log" 2>&1
is "$?" 2 'a sandbox not yet runtime-ready: the client ends with status 2'
like "$(cat "$G/state2.log")" 'state report refused: 409 INVALID_STATE lifecycle' '... saying why'
q "UPDATE sandboxes SET lifecycle = 'idle' WHERE id = '$s4'" >/dev/null
gstate bogus >/dev/null 2>&1
is "$?" 1 'bc-identity state with another word: usage, exit 1'
BC_IDENTITY_DIR=$G/etc BC_IDENTITY_RUN=$G/none BC_IDENTITY_SOURCE=$a4 "$DRV" state idle >/dev/null 2>&1
is "$?" 1 'without a kept token: exit 1'
ok "$([ "$(metric reported)" = 3 ] && echo 0 || echo 1)" "counted reported 3 ($(metric reported))"

# -- a warm claim with identity: bound, the value through the host
wt=$(jid "$(bcctl --format json sandbox-template create --name idh-warm --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --warm-min 1 --warm-max 1)") || bail_out "warm template"
pooled() {
	w=$(q "SELECT id FROM instances WHERE warm_template_id = '$wt' AND state = 'paused'
		AND guest_ready_at IS NOT NULL AND desired_state <> 'deleted'")
	[ -n "$w" ]
}
eventually 90 pooled
ok $? "a warm instance of the template is pooled ($w)"
wa=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$w'")
wb=$(bootdata "$w")
like "$wb" '/etc/sandbox/identity/host' "its boot data tells its identity client to wait for the host"
like "$wb" "/etc/sandbox/identity/endpoint" '... and where the endpoint is'
is "$(printf '%s' "$wb" | grep -cE 'bcb_[0-9a-f]{64}')" 0 '... and holds no bootstrap value'
# its client waits before the claim (a long-poll from its address; bcd ends
# one after 25 s with 204 and the client asks again, as bc-identity does:
# on a loaded machine the claim below can take longer than one)
warm_poll() {
	local i code
	for i in 1 2 3 4; do
		code=$(curl -s --interface "$wa" -o "$STACK_DIR/warm.out" -w '%{http_code}' -m 60 \
			"http://$GW:$EP_PORT/bc/identity/bootstrap")
		[ "$code" = 204 ] || break
	done
	echo "$code" >"$STACK_DIR/warm.code"
}
warm_poll &
wpoll=$!
sleep 1
ep "$(stranger)" GET /bc/identity/bootstrap
is "$H/$(jb reason)" 403/unknown-source 'a stranger asking for a bootstrap: 403 unknown-source'
out=$(bcctl --format json sandbox create --template "$wt" --task tw) || bail_out "warm claim: $out"
sw=$(jid "$out")
is "$(json_get "$out" warm)/$(json_get "$out" instance_id)" "true/$w" \
	'a warm claim with identity takes the pooled instance (its host advertises the capability)'
is "$(json_get "$(sbx "$sw")" lifecycle)" bound '... lifecycle bound, not created-on-demand'
is "$(q "SELECT count(*) FROM events WHERE type = 'sandbox.bound' AND subject = 'sandbox/$sw'")" 1 \
	'sandbox.bound published'
ref=$(q "SELECT identity_bootstrap_ref FROM instances WHERE id = '$w'")
like "$ref" '^sealed_' 'the value is sealed for the instance and named by a reference'
is "$(gbd "$i1" "$ref")" 5 "GetBootData of that reference for another instance of the node: NOT_FOUND"
wait "$wpoll"
is "$(cat "$STACK_DIR/warm.code")" 200 "the long-poll from the warm instance's address gets the value once claimed"
bw=$(cat "$STACK_DIR/warm.out")
like "$bw" '^bcb_[0-9a-f]{64}$' '... the bootstrap value'
is "$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$sw' AND bootstrap_hash = '$(printf '%s' "$bw" | sha256sum | cut -d' ' -f1)'")" \
	pending "... its sandbox's pending epoch's"
grep -q "$bw" "$STACK_DIR"/*.log
ok $((! $?)) '... in no log'
is "$(q "SELECT count(*) FROM events WHERE data::text LIKE '%$bw%'")" 0 '... in no event'
is "$(q "SELECT count(*) FROM commands WHERE args::text LIKE '%$bw%'")" 0 '... in no commands row'
grep -q "$bw" "$STACK_DIR/agent-1/spec.pb"
ok $((! $?)) '... not in the NodeSpec bcd holds'
grep -q "$ref" "$STACK_DIR/agent-1/spec.pb"
ok $? '... which names its reference'
ep "$wa" GET /bc/identity/bootstrap
is "$H/$B" 204/ 'handed out once: the next long-poll ends without it (204)'
ep "$wa" POST /bc/identity/attest "$bw"
is "$H/$(jb sandboxId)" "200/$sw" 'the warm guest attests with it through bcd'
eventually 30 eval '[ "$(json_get "$(sbx "$sw")" state)" = ready ]'
ok $? 'the warm sandbox is ready once attested (no reboot)'
is "$(json_get "$(sbx "$sw")" lifecycle)" runtime-ready '... lifecycle runtime-ready'
is "$(json_get "$(bcctl --format json identity recognize "$wa")" sandbox_id)" "$sw" 'Recognize names it'
is "$(q "SELECT coalesce(identity_bootstrap_ref, 'none') FROM instances WHERE id = '$w'")" none \
	'the reference is cleared once the epoch is live'
is "$(q "SELECT count(*) FROM sealed_blobs WHERE ref = '$ref'")" 0 '... and the sealed value deleted'
is "$(gbd "$w" "$ref")" 5 '... GetBootData of it: NOT_FOUND'
ok "$([ "$(metric served)" = 1 ] && [ "$(metric no-bootstrap)" -ge 1 ] && echo 0 || echo 1)" \
	'counted served 1, no-bootstrap'

# -- without the endpoint bcd does not advertise the capability
agent_kill 1 TERM
BC_AGENT_EXTRA_CONF=${BC_AGENT_EXTRA_CONF/identity_endpoint = on/identity_endpoint = off}
agent_start 1 || bail_out "agent restart"
eventually 30 eval '[ "$(q "SELECT '"'instance.identity'"' = ANY (capabilities) FROM nodes")" = f ]'
ok $? 'identity_endpoint = off: bcd no longer advertises instance.identity'

# -- ... and takes no sandbox with identity: its guest could never attest
out=$(bcctl --format json sandbox create --template "$tmpl" --task t9) || bail_out "create: $out"
s9=$(jid "$out") i9=$(json_get "$out" instance_id)
sleep 3 # three reconcile passes (sandbox_reconcile_seconds = 1)
is "$(q "SELECT coalesce(node_id, 'none') || ' ' || needs_identity FROM instances WHERE id = '$i9'")" \
	'none true' 'a cold identity sandbox is not placed on a host without the capability'
like "$(q "SELECT reason FROM instances WHERE id = '$i9'")" '^Unschedulable' '... its instance says Unschedulable'
agent_kill 1 TERM
BC_AGENT_EXTRA_CONF=${BC_AGENT_EXTRA_CONF/identity_endpoint = off/identity_endpoint = on}
agent_start 1 || bail_out "agent restart"
eventually 60 eval '[ "$(q "SELECT state FROM instances WHERE id = '"'$i9'"'")" = running ]'
ok $? '... and is placed, and runs, once the host advertises it again'
bcctl sandbox delete "$s9" >/dev/null || fail 'delete'

done_testing
