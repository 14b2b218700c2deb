# tunnel.t: bcd's tunnel port and the controller's dialer (issue 15 item
# 5, node half): the raw protocol (common/tunnel_raw.h, bcd's default),
# then gRPC Agent.Tunnel (a bcd with tunnel_protocol = grpc, as one that
# predates raw). Fake runtime; the instances' "guest sshd" is a local TCP
# echo server, reached through the fake runtime's test-only
# fake/tunnel_targets map (agent/tunnel.h).
# - the certificates: each node's tunnel certificate (serverAuth only, SAN
#   = node id, node CA), the controller's tunnel client certificate
#   (clientAuth only, CN bc-controller-tunnel, API CA); the tunnel address
#   is recorded at join;
# - bytes round-trip through node_tunnel_dial (tests/integration/tunneldrv:
#   stdin and stdout pumped on two threads) and through node:tls
#   (tunnel_client.js) with the tunnel client certificate; the dialer
#   picks raw for a node reporting the capability tunnel.raw;
# - refused: a bad request line (openssl s_client), handshakes that fail;
# - refused: no client certificate, node 2's certificate (by bcd and via
#   the dialer), an unknown instance, another node's instance, a stopped
#   instance, port 23; the dialer answers UNAVAILABLE for a node without
#   a tunnel endpoint and for a controller without its client certificate;
# - 16 MiB through a slow reader: every byte back, bcd's RSS flat;
# - /metrics: bcd_tunnels_open while a tunnel is open, then 0; the
#   refusals by reason;
# - a bcd with tunnel_protocol = grpc: no capability, the dialer uses gRPC
#   Agent.Tunnel, @grpc/grpc-js round-trips, refusals keep their codes.
. "$(dirname "$0")/../lib/stack.sh"

# ASan keeps freed memory in quarantine (256 MiB by default): bounded
# here so bcd's RSS shows what it holds, not what it freed.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1
command -v python3 >/dev/null || plan skip_all 'python3 is required'

stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"
img=$(stack_image_create tunnel-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
DRV=$BC_BIN/../tests/integration/tunneldrv
[ -x "$DRV" ] || bail_out "no $DRV (make all)"
JS=$BC_SRC/tests/integration/tunnel_client.js
m1=$(free_tcp_port)
m2=$(free_tcp_port)
start_agent() { # N METRICS_PORT
	STACK_AGENTS=$1
	BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$2" agent_start "$1" &&
		stack_wait_nodes_ready "$1" 60
}
mk() {
	json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" --wait 30s)" id
}
start_agent 1 "$m1" || bail_out "agent 1 not ready"
inst=$(mk)
stopped=$(mk)
start_agent 2 "$m2" || bail_out "agent 2 not ready"
node1=$(agent_node_id 1)
node2=$(agent_node_id 2)
d1=$STACK_DIR/agent-1
d2=$STACK_DIR/agent-2
pki=$STACK_DIR/pki
CONF=$STACK_DIR/ctl-1.conf
bcctl --format json instance stop "$stopped" >/dev/null
eventually 30 instance_state_is "$stopped" stopped
ok $? 'the second instance is stopped'
on_node() { q "SELECT node_id FROM instances WHERE id = '$1'"; }
for try in 1 2 3 4 5; do # placement prefers the node with the most free memory
	other=$(mk)
	[ "$(on_node "$other")" = "$node2" ] && break
done
is "$(on_node "$inst")" "$node1" 'the instance runs on node 1'
is "$(on_node "$other")" "$node2" 'another instance runs on node 2'

# -- certificates
ext=$(openssl x509 -in "$d1/tunnel.pem" -noout -ext extendedKeyUsage,subjectAltName 2>/dev/null)
like "$ext" 'TLS Web Server Authentication' "node 1's tunnel certificate is for TLS servers"
ok "! printf '%s' \"\$ext\" | grep -q 'Client Authentication'" '... and not for TLS clients'
like "$ext" "DNS:$node1" '... its subjectAltName is the node id'
ok "openssl verify -CAfile '$pki/node-ca.pem' '$d1/tunnel.pem' >/dev/null 2>&1" '... signed by the node CA'
is "$(openssl x509 -in "$d1/tunnel.pem" -noout -pubkey)" "$(openssl pkey -in "$d1/node.key" -pubout)" \
	'... for the node key'
ext=$(openssl x509 -in "$pki/tunnel-client.pem" -noout -subject -ext extendedKeyUsage -nameopt RFC2253 2>/dev/null)
like "$ext" 'subject=CN=bc-controller-tunnel' 'the controller tunnel client certificate: CN bc-controller-tunnel'
like "$ext" 'TLS Web Client Authentication' '... for TLS clients'
ok "! printf '%s' \"\$ext\" | grep -q 'Server Authentication'" '... and not for TLS servers'
ok "openssl verify -CAfile '$pki/api-ca.pem' '$pki/tunnel-client.pem' >/dev/null 2>&1" '... signed by the API CA'
ok "! openssl verify -CAfile '$d1/ca.pem' '$d2/node.pem' >/dev/null 2>&1" \
	"node 2's certificate does not chain to what bcd trusts for the controller"
port1=$(sed -n 's/^tunnel_listen = 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$STACK_DIR/bcd-1.conf")
is "$(q "SELECT tunnel_address FROM nodes WHERE id = '$node1'")" "127.0.0.1:$port1" \
	"node 1's tunnel address recorded (tunnel_listen's port)"
TADDR=127.0.0.1:$port1
is "$(q "SELECT 'tunnel.raw' = ANY(capabilities) FROM nodes WHERE id = '$node1'")" t \
	"node 1's bcd reports the capability tunnel.raw (its default protocol)"
export BC_TUNNEL_RAW=1    # tunnel_client.js speaks raw until the gRPC part
out=$("$BC_BIN/bc-controller" pki add-tunnel-client --config "$CONF" 2>&1)
is $? 1 'pki add-tunnel-client refuses to replace the existing certificate'

# -- the guest: a TCP echo server standing for the instance's sshd
eport=$(free_tcp_port)
python3 -c '
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
def serve(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
' "$eport" >"$STACK_DIR/echo.log" 2>&1 &
echo_pid=$!
echo_up() { (exec 3<>"/dev/tcp/127.0.0.1/$eport") 2>/dev/null; }
eventually 60 echo_up
ok $? 'the echo server listens'
guest=$(sed -n 's/^nic=[^|]*|[^|]*|\([0-9.]*\)\/.*/\1/p' "$d1/fake/$inst.inst")
like "$guest" '^10\.77\.0\.[0-9]+$' "the instance's guest address is its IPAM address ($guest)"
for i in "$inst" "$stopped"; do
	g=$(sed -n 's/^nic=[^|]*|[^|]*|\([0-9.]*\)\/.*/\1/p' "$d1/fake/$i.inst")
	echo "$g 127.0.0.1:$eport" >>"$d1/fake/tunnel_targets"
done
metric() { # PORT NAME_AND_LABELS
	curl -s "http://127.0.0.1:$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'
}

# -- round trips
out=$(printf 'hello through the tunnel' | "$DRV" "$CONF" "$node1" "$inst" 2>"$STACK_DIR/drv.err")
is "$?/$out" '0/hello through the tunnel' \
	"node_tunnel_dial: bytes round-trip through bcd to the guest and back $(cat "$STACK_DIR/drv.err")"
out=$(printf 'hello from grpc-js' | node "$JS" "$TADDR" "$pki/node-ca.pem" "$pki/tunnel-client.pem" \
	"$pki/tunnel-client.key" "$node1" "$inst" 2>"$STACK_DIR/js.err")
is "$?/$out" '0/hello from grpc-js' 'node:tls (raw) with the tunnel client certificate: bytes round-trip'
is "$(printf x | TUNNELDRV_SAY_PROTOCOL=1 "$DRV" "$CONF" "$node1" "$inst" 2>&1 >/dev/null)" \
	'protocol raw' 'the dialer used the raw protocol for node 1'
out=$(printf 'x' | node "$JS" "$TADDR" "$pki/node-ca.pem" "$pki/tunnel-client.pem" \
	"$pki/tunnel-client.key" "$node2" "$inst" 2>&1)
ok "! printf '%s' \"\$out\" | grep -qx x" "bcd 1 does not pass for node 2 (server name checked: $out)"
is "$(metric "$m1" bcd_tunnels_total)" 3 'bcd_tunnels_total counts the three relays'
# an independent TLS client: the right certificate, a bad request line
s_client() { # CERT KEY REQUEST: bcd's answer (stdin ends a second later, then s_client)
	(printf '%s\n' "$3"; sleep 1) | timeout 20 openssl s_client -quiet -no_ign_eof \
		-connect "$TADDR" -CAfile "$pki/node-ca.pem" -verify_hostname "$node1" \
		-verify_return_error -cert "$1" -key "$2" 2>/dev/null | head -1
}
out=$(s_client "$pki/tunnel-client.pem" "$pki/tunnel-client.key" 'GET / HTTP/1.1')
like "$out" '^ERR INVALID_INPUT bad-open ' "openssl s_client with a bad request line: refused ($out)"
out=$(s_client "$pki/tunnel-client.pem" "$pki/tunnel-client.key" "BCTUNNEL/1 $inst 22 tun_s")
is "$out" OK '... and with a good one: OK'

# -- refusals
js_code() { # CERT KEY INSTANCE [PORT]
	printf 'x' | node "$JS" "$TADDR" "$pki/node-ca.pem" "$1" "$2" "$node1" "$3" "${4:-22}" 2>&1 >/dev/null |
		jq -r .code 2>/dev/null
}
is "$(js_code - - "$inst")" 16 'no client certificate: UNAUTHENTICATED'
code=$(js_code "$d2/node.pem" "$d2/node.key" "$inst")
like "$code" '^(14|16|7)$' "node 2's certificate: refused (code $code)"
# a clientAuth certificate from the API CA with another name
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bc-someone-else \
	-keyout "$STACK_DIR/other.key" -out "$STACK_DIR/other.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\nbasicConstraints=critical,CA:FALSE\n' >"$STACK_DIR/other.ext"
openssl x509 -req -in "$STACK_DIR/other.csr" -CA "$pki/api-ca.pem" -CAkey "$pki/api-ca.key" \
	-set_serial 0x77 -days 1 -extfile "$STACK_DIR/other.ext" -out "$STACK_DIR/other.pem" 2>/dev/null
is "$(js_code "$STACK_DIR/other.pem" "$STACK_DIR/other.key" "$inst")" 7 \
	'an API CA client certificate with another CN: PERMISSION_DENIED'
is "$(js_code "$pki/tunnel-client.pem" "$pki/tunnel-client.key" "$inst" 23)" 7 'port 23: PERMISSION_DENIED'
drv_err() { printf 'x' | "$DRV" "$CONF" "$@" 2>&1 >/dev/null; }
like "$(drv_err "$node1" inst_01nosuchinstancenosuchinstan)" '^error NOT_FOUND: instance .* is not on this node' \
	'an unknown instance: NOT_FOUND'
out=$(drv_err "$node1" "$other")
like "$out" '^error NOT_FOUND: ' "node 2's instance asked of node 1: NOT_FOUND ($out)"
like "$(drv_err "$node1" "$stopped")" '^error INVALID_STATE: instance .* is not running' \
	'a stopped instance: INVALID_STATE'
# the dialer with node 2's certificate as its tunnel client certificate
mkdir -p "$STACK_DIR/pki-n2"
cp "$pki"/api-ca.pem "$pki"/api-ca.key "$pki"/node-ca.pem "$pki"/node-ca.key "$STACK_DIR/pki-n2/"
sed "s|^pki_dir = .*|pki_dir = $STACK_DIR/pki-n2|" "$CONF" >"$STACK_DIR/ctl-n2.conf"
like "$(printf x | "$DRV" "$STACK_DIR/ctl-n2.conf" "$node1" "$inst" 2>&1 >/dev/null)" \
	'^error UNAVAILABLE: .*pki add-tunnel-client' 'the dialer without a tunnel client certificate: UNAVAILABLE naming the command'
cp "$d2/node.pem" "$STACK_DIR/pki-n2/tunnel-client.pem"
cp "$d2/node.key" "$STACK_DIR/pki-n2/tunnel-client.key"
out=$(printf x | "$DRV" "$STACK_DIR/ctl-n2.conf" "$node1" "$inst" 2>&1)
like "$out" '^error (UNAVAILABLE|UNAUTHENTICATED|ACCESS_DENIED)' "the dialer with node 2's certificate: refused ($out)"
is "$(metric "$m1" bcd_tunnels_total)" 4 '... no relay was opened for any refusal'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="handshake"}')" 3 \
	"refusals counted by reason: handshake (bcd 1 asked for node 2, node 2's certificate twice)"
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="bad-open"}')" 1 '... bad-open'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="port"}')" 1 'refusals counted by reason: port'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="unknown-instance"}')" 2 '... unknown-instance'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="not-running"}')" 1 '... not-running'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="no-client-cert"}')" 1 '... no-client-cert'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="not-controller"}')" 1 '... not-controller'
agent_kill 2 TERM   # its reports would give its address back
q "UPDATE nodes SET tunnel_address = '' WHERE id = '$node2'" >/dev/null
like "$(drv_err "$node2" "$other")" '^error UNAVAILABLE: node .* has no tunnel endpoint' \
	'a node without a tunnel endpoint: UNAVAILABLE'
q "UPDATE nodes SET tunnel_address = '$TADDR' WHERE id = '$node2'" >/dev/null
like "$(drv_err "$node2" "$inst")" '^error UNAVAILABLE: node .* cannot be reached .*tunnel certificate' \
	"node 2's address pointing at node 1's bcd: refused (the dialer checks the node id in its certificate)"
rm -f "$STACK_DIR/pki-n2/tunnel-client.pem" "$STACK_DIR/pki-n2/tunnel-client.key"
out=$("$BC_BIN/bc-controller" pki add-tunnel-client --config "$STACK_DIR/ctl-n2.conf" 2>&1)
is $? 0 'pki add-tunnel-client adds the certificate to a deployment without one'
ok "openssl verify -CAfile '$pki/api-ca.pem' '$STACK_DIR/pki-n2/tunnel-client.pem' >/dev/null 2>&1" \
	'... signed by the API CA'
out=$(printf 'added later' | "$DRV" "$STACK_DIR/ctl-n2.conf" "$node1" "$inst" 2>&1)
is "$out" 'added later' '... and tunnels work with it'

# -- bcd_tunnels_open while one is open
mkfifo "$STACK_DIR/hold"
"$DRV" "$CONF" "$node1" "$inst" <"$STACK_DIR/hold" >"$STACK_DIR/hold.out" 2>&1 &
drv_pid=$!
exec 7>"$STACK_DIR/hold"
open_is() { [ "$(metric "$m1" bcd_tunnels_open)" = "$1" ]; }
eventually 10 open_is 1
ok $? 'bcd_tunnels_open is 1 while a tunnel is open'
printf 'bye' >&7
exec 7>&-
wait "$drv_pid"
is "$?/$(cat "$STACK_DIR/hold.out")" '0/bye' '... which relays and ends OK at the half-close'
eventually 10 open_is 0
ok $? 'bcd_tunnels_open is 0 again'

# -- 16 MiB through a slow reader: constant memory. A warm-up transfer
# through a slow reader first (gRPC's flow-control windows and the
# allocator's pools reach their size), then bcd's RSS must not grow while
# four times as much goes through, as it would if a relay queued what the
# reader has not taken yet, or if gRPC's windows grew with the transfer.
bcd1=$(_stack_get_pid bcd-1)
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$bcd1/status"; }
slow_transfer() { # BYTES: sets MAX (KiB) and RC
	head -c "$1" /dev/urandom >"$STACK_DIR/big"
	"$DRV" "$CONF" "$node1" "$inst" 150 <"$STACK_DIR/big" >"$STACK_DIR/big.out" 2>"$STACK_DIR/big.err" &
	local pid=$! r
	MAX=$(rss)
	while kill -0 "$pid" 2>/dev/null; do
		r=$(rss)
		[ "$r" -gt "$MAX" ] && MAX=$r
		sleep 0.1
	done
	wait "$pid"
	RC=$?
}
slow_transfer 4194304
is "$RC" 0 'a 4 MiB warm-up through a slow reader ends OK'
rss0=$MAX
slow_transfer 4194304
is "$RC" 0 '... twice'
[ "$MAX" -gt "$rss0" ] && rss0=$MAX
slow_transfer 16777216
is "$RC" 0 '16 MiB through a slow reader: the tunnel ends OK'
is "$(sha256sum <"$STACK_DIR/big.out")" "$(sha256sum <"$STACK_DIR/big")" '... every byte back, in order'
growth=$((MAX - rss0))
diag "bcd RSS at most ${rss0} KiB during 4 MiB, ${MAX} KiB during 16 MiB"
# (gRPC's own flow-control windows, left to grow, made this 6-9 MiB)
ok "[ $growth -lt 4096 ]" "bcd's RSS stays flat: +${growth} KiB (< 4 MiB) for 4x the bytes"

# -- a bcd joined before Agent.Tunnel (no tunnel.pem) renews at start and
# serves the port from the restart that follows, at its new address
agent_kill 1 TERM
serial0=$(openssl x509 -in "$d1/node.pem" -noout -serial)
rm -f "$d1/tunnel.pem"
STACK_AGENTS=1 BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$m1
tunnel_max = 1" agent_start 1
eventually 60 test -f "$d1/tunnel.pem"
ok $? 'bcd without tunnel.pem renews at start and gets one'
ok "grep -q 'no tunnel certificate (tunnel.pem) yet: renewing now' '$STACK_DIR/bcd-1.log'" '... and says why'
isnt "$(openssl x509 -in "$d1/node.pem" -noout -serial)" "$serial0" '... with a new node certificate'
is "$(openssl x509 -in "$d1/tunnel.pem" -noout -pubkey)" "$(openssl pkey -in "$d1/node.key" -pubout)" \
	'... both for the new key'
roundtrip() { [ "$(printf again | "$DRV" "$CONF" "$node1" "$inst" 2>/dev/null)" = again ]; }
eventually 60 roundtrip
ok $? 'tunnels work again, at the port the restarted bcd reported'

# -- tunnel_max (1 since that restart)
rm -f "$STACK_DIR/hold"
mkfifo "$STACK_DIR/hold"
"$DRV" "$CONF" "$node1" "$inst" <"$STACK_DIR/hold" >"$STACK_DIR/hold.out" 2>&1 &
drv_pid=$!
exec 7>"$STACK_DIR/hold"
eventually 10 open_is 1
ok $? 'one tunnel open'
like "$(drv_err "$node1" "$inst")" '^error RESOURCE_EXHAUSTED: tunnels at their limit \(tunnel_max = 1\)' \
	'a second one beyond tunnel_max: RESOURCE_EXHAUSTED'
is "$(metric "$m1" 'bcd_tunnels_refused_total{reason="limit"}')" 1 '... counted (limit)'
exec 7>&-
wait "$drv_pid"
eventually 10 open_is 0
is "$(printf 'after' | "$DRV" "$CONF" "$node1" "$inst" 2>&1)" after 'the first one closed, a new tunnel opens'

# -- a guest that never answers once the controller half-closed (its VM
# gone, no FIN ever): when the controller's call ends, bcd ends the
# guest's side too, so no tunnel holds a thread (nor bcd's shutdown)
bport=$(free_tcp_port)
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4); held = []
while True: held.append(s.accept()[0])
' "$bport" >/dev/null 2>&1 &
bh_pid=$!
bh_up() { (exec 3<>"/dev/tcp/127.0.0.1/$bport") 2>/dev/null; }
eventually 10 bh_up
sed -i "s|^$guest .*|$guest 127.0.0.1:$bport|" "$d1/fake/tunnel_targets"
"$DRV" "$CONF" "$node1" "$inst" </dev/null >/dev/null 2>&1 &
drv_pid=$!
eventually 10 open_is 1
ok $? 'a tunnel to a guest that never answers stays open after the half-close'
kill -KILL "$drv_pid"
wait "$drv_pid" 2>/dev/null
eventually 10 open_is 0
ok $? 'the controller side went away: bcd closed the guest side and the tunnel'
kill "$bh_pid" 2>/dev/null
sed -i "s|^$guest .*|$guest 127.0.0.1:$eport|" "$d1/fake/tunnel_targets"

# -- a bcd that speaks only gRPC Agent.Tunnel (tunnel_protocol = grpc, as
# one that predates raw): no capability, the dialer falls back to gRPC
unset BC_TUNNEL_RAW
agent_kill 1 TERM
STACK_AGENTS=1 BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$m1
tunnel_protocol = grpc" agent_start 1
no_cap() { [ "$(q "SELECT 'tunnel.raw' = ANY(capabilities) FROM nodes WHERE id = '$node1'")" = f ]; }
eventually 60 no_cap
ok $? 'a bcd with tunnel_protocol = grpc does not report tunnel.raw'
TADDR=127.0.0.1:$(q "SELECT tunnel_address FROM nodes WHERE id = '$node1'" | sed 's/.*://')
grpc_rt() { [ "$(printf 'via grpc' | "$DRV" "$CONF" "$node1" "$inst" 2>/dev/null)" = 'via grpc' ]; }
eventually 30 grpc_rt
ok $? 'the dialer round-trips through the gRPC-only bcd'
is "$(printf x | TUNNELDRV_SAY_PROTOCOL=1 "$DRV" "$CONF" "$node1" "$inst" 2>&1 >/dev/null)" \
	'protocol grpc' '... with gRPC Agent.Tunnel'
out=$(printf 'hello from grpc-js' | node "$JS" "$TADDR" "$pki/node-ca.pem" "$pki/tunnel-client.pem" \
	"$pki/tunnel-client.key" "$node1" "$inst" 2>"$STACK_DIR/js.err")
is "$?/$out" '0/hello from grpc-js' "@grpc/grpc-js round-trips through it ($(cat "$STACK_DIR/js.err"))"
is "$(js_code - - "$inst")" 16 '... no client certificate: UNAUTHENTICATED'
is "$(js_code "$STACK_DIR/other.pem" "$STACK_DIR/other.key" "$inst")" 7 \
	'... another CN: PERMISSION_DENIED'
like "$(drv_err "$node1" "$stopped")" '^error INVALID_STATE: instance .* is not running' \
	'... a stopped instance: INVALID_STATE'

kill "$echo_pid" 2>/dev/null
done_testing
