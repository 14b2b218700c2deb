# guestready.t: the guest-up signal (agent/guestsig.c) with real sockets.
# A whole stack (fake runtime, guest_ready = on) runs in a namespace whose
# bridge bcbr0 holds the pool's gateway 10.77.0.1; each "guest" is a
# namespace on the bridge with its instance's IPAM address. The fake
# runtime's own marking is held off (fake/guest_ready_delay_ms), so only
# the listener can mark a guest up; a mark is the file
# state_dir/guest-ready/<id> (agent/guestready.h), the counters are bcd's
# bcd_guest_ready_signals_total{result}.
if [ -z "${BC_GR_NS:-}" ]; then
	[ "$(id -u)" -eq 0 ] || { echo '1..0 # SKIP needs root (network namespaces)'; exit 0; }
	ns=bcgr$$
	ip netns add "$ns" 2>/dev/null || { echo '1..0 # SKIP cannot create network namespaces'; exit 0; }
	ip netns exec "$ns" ip link set lo up
	ip netns exec "$ns" ip link add bcbr0 type bridge
	ip netns exec "$ns" ip addr add 10.77.0.1/24 dev bcbr0
	ip netns exec "$ns" ip link set bcbr0 up
	BC_GR_NS=$ns ip netns exec "$ns" bash "$0"
	rc=$?
	for n in "$ns" "${ns}a" "${ns}b" "${ns}c" "${ns}d"; do
		ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del "$n" 2>/dev/null
	done
	exit $rc
fi

. "$(dirname "$0")/../lib/stack.sh"
command -v python3 >/dev/null || plan skip_all 'python3 is required'
MPORT=$(free_tcp_port)
export BC_AGENT_EXTRA_CONF="guest_ready = on
metrics_listen = 127.0.0.1:$MPORT"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
AD=$STACK_DIR/agent-1
mkdir -p "$AD/fake"
echo 100000000 >"$AD/fake/guest_ready_delay_ms"   # the fake never marks by itself
img=$(stack_image_create guestready-img) || bail_out "no image"

# new_guest LETTER: an instance, and a namespace on the bridge with its address
declare -A ID IP
new_guest() {
	local g=$1 ns=${BC_GR_NS}$1 inst addr
	inst=$(json_get "$(bcctl --format json instance create --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --wait 30s)" id)
	addr=$(sed -n 's/^nic=[^|]*|[^|]*|\([0-9.]*\)\/.*/\1/p' "$AD/fake/$inst.inst")
	ID[$g]=$inst
	IP[$g]=$addr
	ip netns add "$ns" || bail_out "netns add $ns"
	ip link add "bcg${g}0" type veth peer name eth0 netns "$ns"
	ip link set "bcg${g}0" master bcbr0 up
	ip netns exec "$ns" ip link set lo up
	ip netns exec "$ns" ip addr add "${addr:-10.77.0.99}/24" dev eth0
	ip netns exec "$ns" ip link set eth0 up
	ip netns exec "$ns" ip route add default via 10.77.0.1
}
in_g() { local g=$1; shift; ip netns exec "${BC_GR_NS}$g" "$@"; }

# post G ID [RAW]: guest G sends "POST /bc/ready/ID" (or RAW as it is);
# prints the status code bcd answered ("none" without an answer)
post() {
	in_g "$1" python3 -c '
import socket, sys
raw = sys.argv[2].encode().decode("unicode_escape") if len(sys.argv) > 2 else \
    "POST /bc/ready/%s HTTP/1.1\r\nHost: 10.77.0.1\r\nContent-Length: 0\r\n\r\n" % sys.argv[1]
s = socket.create_connection(("10.77.0.1", 9469), timeout=5)
s.sendall(raw.encode())
try:
    print(s.recv(100).split()[1].decode())
except Exception:
    print("none")
' "$2" ${3:+"$3"} 2>/dev/null || echo none
}
# metric RESULT: bcd_guest_ready_signals_total{result="RESULT"}
metric() {
	python3 -c '
import sys, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
for l in t.splitlines():
    if l.startswith("bcd_guest_ready_signals_total{result=\"%s\"}" % sys.argv[2]):
        print(int(float(l.split()[1])))
' "$MPORT" "$1"
}
marked() { [ -s "$AD/guest-ready/$1" ]; }
# sshd G: a listener on guest G's port 22 (accept and close)
# sshd G [GO]: a listener on G's port 22; with GO, started now but bound
# only once the file GO exists (a loaded machine may take seconds to start
# python, longer than bcd's 10 s of checks after a signal)
sshd() {
	in_g "$1" python3 -c '
import os, socket, sys, time
while len(sys.argv) > 1 and not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 22)); s.listen(8)
while True:
    s.accept()[0].close()
' ${2:+"$2"} </dev/null >/dev/null 2>&1 &
}

new_guest a
new_guest b
new_guest c
like "${IP[a]}/${IP[b]}/${IP[c]}" '^10\.77\.0\.[0-9]+/10\.77\.0\.[0-9]+/10\.77\.0\.[0-9]+$' \
	"three instances with IPAM addresses (${IP[a]}, ${IP[b]}, ${IP[c]})"
ip netns add "${BC_GR_NS}d"
ip link add bcgd0 type veth peer name eth0 netns "${BC_GR_NS}d"
ip link set bcgd0 master bcbr0 up
in_g d ip link set lo up
in_g d ip addr add 10.77.0.99/24 dev eth0
in_g d ip link set eth0 up
listening() { [ "$(metric malformed)" != "" ]; }
eventually 10 listening
ok $? "bcd serves its metrics with the signal counters"
up() { in_g a bash -c '(exec 3<>/dev/tcp/10.77.0.1/9469) 2>/dev/null'; }
eventually 10 up
ok $? "bcd listens on the gateway's port 9469"
marked "${ID[a]}"
ok $((! $?)) "no instance is marked up before any signal (the fake's own marking held off)"

is "$(post a x 'GET / HTTP/1.1\r\n\r\n')" 400 "a GET: 400"
is "$(metric malformed)" 1 "counted malformed"
is "$(post d "${ID[a]}")" 403 "a signal from an address no instance holds: 403"
is "$(metric unknown-source)" 1 "counted unknown-source"
is "$(post b "${ID[a]}")" 403 "guest b speaks for instance a: 403"
is "$(metric other-instance)" 1 "counted other-instance"
sleep 1
marked "${ID[a]}"
ok $((! $?)) "and a is not marked up"

# a's own signal while its sshd does not listen yet: taken, the mark waits
# (bcd checks guest:22 every second, 10 times)
sshd a "$STACK_DIR/a.go"
is "$(post a "${ID[a]}")" 204 "guest a's own signal: 204"
sleep 1
marked "${ID[a]}"
ok $((! $?)) "no mark while the guest's port 22 does not answer"
touch "$STACK_DIR/a.go"
eventually 15 marked "${ID[a]}"
ok $? "marked once sshd answers (within the ~10 s of checks)"
is "$(metric accepted)" 1 "counted accepted"
is "$(post a "${ID[a]}")" 409 "a signal after the mark: 409"
is "$(metric repeated)" 1 "counted repeated"

# b signals, its sshd never answers: no mark, counted no-ssh
is "$(post b "${ID[b]}")" 204 "guest b's own signal: 204"
nossh() { [ "$(metric no-ssh)" = 1 ]; }
eventually 20 nossh
ok $? "b's port 22 never answered: counted no-ssh"
marked "${ID[b]}"
ok $((! $?)) "and b is not marked up"

# early: an instance that does not run
bcctl instance stop "${ID[b]}" >/dev/null 2>"$STACK_DIR/err"
stopped() { grep -q '^state=stopped' "$AD/fake/${ID[b]}.inst" 2>/dev/null || [ "$(json_get "$(bcctl --format json instance get "${ID[b]}")" state)" = stopped ]; }
eventually 20 stopped
ok $? "instance b stopped ($(cat "$STACK_DIR/err"))"
sleep 1
is "$(post b "${ID[b]}")" 425 "a signal from a stopped instance: 425"
is "$(metric early)" 1 "counted early"

# the guest's side as the controller renders it (tests/unit/golden)
sshd c
script=$STACK_DIR/guest-ready
python3 -c '
import sys, yaml
cc = yaml.safe_load(open(sys.argv[1]))
for f in cc["write_files"]:
    if f["path"] == "/usr/local/lib/bc/guest-ready":
        sys.stdout.write(f["content"])
' "$BC_SRC/tests/unit/golden/bootdata_ready.cfg" | sed "s/^id=[^ ]*/id=${ID[c]}/" >"$script"
grep -q "^id=${ID[c]} port=9469" "$script"
ok $? "the rendered guest-up script, for instance c"
out=$(in_g c timeout 60 bash "$script" 2>&1)
is "$?/$out" "0/bc: guest-up signal: 204" "it signals and ends when bcd answers 204"
eventually 10 marked "${ID[c]}"
ok $? "instance c marked up"
is "$(metric accepted)" 2 "two accepted in all"
log_once=$(grep -c "for ${ID[a]} ignored: repeated" "$STACK_DIR/bcd-1.log")
is "$log_once" 1 "a result is logged once per instance"
done_testing
