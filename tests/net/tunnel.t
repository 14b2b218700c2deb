# tunnel.t: bcd's Agent.Tunnel reaches the guest's own address on port 22
# FROM the host's address on the instances' bridge (the pool's gateway),
# so a guest that accepts ssh only from its host still does. A whole
# stack (fake runtime, network = none) runs in a namespace whose bridge
# bcbr0 holds 10.77.0.254 first and the gateway 10.77.0.1 second: without
# the bind the kernel would pick .254. The "guest" is a namespace on the
# bridge with the instance's IPAM address and a listener on port 22 that
# answers with the address the connection came from, then echoes.
if [ -z "${BC_TUNNEL_NS:-}" ]; then
	[ "$(id -u)" -eq 0 ] || { echo '1..0 # SKIP needs root (network namespaces)'; exit 0; }
	ns=bctun$$
	ip netns add "$ns" 2>/dev/null || { echo '1..0 # SKIP cannot create network namespaces'; exit 0; }
	ip netns exec "$ns" ip link set lo up
	ip netns exec "$ns" ip link add bcbr0 type bridge
	ip netns exec "$ns" ip addr add 10.77.0.254/24 dev bcbr0
	ip netns exec "$ns" ip addr add 10.77.0.1/24 dev bcbr0
	ip netns exec "$ns" ip link set bcbr0 up
	BC_TUNNEL_NS=$ns ip netns exec "$ns" bash "$0"
	rc=$?
	for n in "$ns" "${ns}g"; do
		ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del "$n" 2>/dev/null
	done
	exit $rc
fi

. "$(dirname "$0")/../lib/stack.sh"
command -v python3 >/dev/null || plan skip_all 'python3 is required'
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
DRV=$BC_BIN/../tests/integration/tunneldrv
[ -x "$DRV" ] || bail_out "no $DRV (make all)"
img=$(stack_image_create tunnel-net-img) || bail_out "no image"
inst=$(json_get "$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
	--image "$img" --wait 30s)" id)
node1=$(agent_node_id 1)
guest=$(sed -n 's/^nic=[^|]*|[^|]*|\([0-9.]*\)\/.*/\1/p' "$STACK_DIR/agent-1/fake/$inst.inst")
like "$guest" '^10\.77\.0\.[0-9]+$' "the instance's IPAM address ($guest)"
is "$(ip -4 -o addr show dev bcbr0 | awk '{ print $4 }' | head -1)" 10.77.0.254/24 \
	"the bridge's first address is not the gateway"

g=${BC_TUNNEL_NS}g
ip netns add "$g" || bail_out "netns add $g"
ip link add bcg0 type veth peer name eth0 netns "$g"
ip link set bcg0 master bcbr0 up
ip netns exec "$g" ip link set lo up
ip netns exec "$g" ip addr add "$guest/24" dev eth0
ip netns exec "$g" ip link set eth0 up
ip netns exec "$g" python3 -c '
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 22)); s.listen(8)
def serve(c, a):
    c.sendall(("from %s\n" % a[0]).encode())
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, a = s.accept(); threading.Thread(target=serve, args=(c, a), daemon=True).start()
' >"$STACK_DIR/guest.log" 2>&1 &
up() { (exec 3<>"/dev/tcp/$guest/22") 2>/dev/null; }
eventually 10 up
ok $? "the guest's port 22 answers on the bridge"

out=$(printf 'ping' | "$DRV" "$STACK_DIR/ctl-1.conf" "$node1" "$inst" 2>"$STACK_DIR/drv.err")
is "$?/$out" "0/from 10.77.0.1
ping" "the tunnel reaches the guest's port 22 from the gateway address, and relays ($(cat "$STACK_DIR/drv.err"))"
done_testing
