# attack_metrics.t: clients that hold /metrics connections (issue 12, item
# 13) on bcd and on the controller: 30 that connect and send nothing, 5
# that send a request head one byte a second, 5 that send requests and
# never read the answers. While they are held (counted with ss), another
# client still gets /metrics within 10 s from both daemons (the old
# endpoint served one connection at a time, 2 s each). And the endpoint
# listens on loopback when the address names only a port.
. "$(dirname "$0")/../lib/stack.sh"

command -v ss >/dev/null || bail_out "ss (iproute2) is not installed"
aport=$(free_tcp_port) || bail_out "no free port"
cport=$(free_tcp_port) || bail_out "no free port"
export BC_AGENT_EXTRA_CONF="metrics_listen = :$aport"
export BC_CTL_EXTRA_CONF="metrics_listen = :$cport"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
ATTACK=$(dirname "$0")/attack_http.py

listening_on() { ss -Htln "( sport = :$1 )" | awk '{print $4}'; }
is "$(listening_on "$aport")" "127.0.0.1:$aport" 'bcd: metrics_listen = :PORT listens on loopback only'
is "$(listening_on "$cport")" "127.0.0.1:$cport" 'controller: metrics_listen = :PORT listens on loopback only'

scrape() { curl -sS --max-time 10 "http://127.0.0.1:$1/metrics"; }
established() { ss -Htn state established "( sport = :$1 and dst $2 )" | wc -l; }
# attack NAME ARGS...: start the attacker; it holds its connections until
# attack_end NAME.
attack() {
	local name=$1
	shift
	python3 "$ATTACK" "$@" --path /metrics --stop "$STACK_DIR/$name.stop" \
		>"$STACK_DIR/$name.out" 2>"$STACK_DIR/$name.err" </dev/null &
	eval "pid_$name=\$!"
}
# attack_end NAME: stop it and wait until it has closed everything.
attack_end() { touch "$STACK_DIR/$1.stop" && eval "wait \$pid_$1"; }
attack_opened() { grep -q '^opened=' "$STACK_DIR/$1.out"; }

for d in agent:$aport controller:$cport; do
	name=${d%%:*} port=${d#*:}
	like "$(scrape "$port")" '_' "$name: /metrics answers before the attack"
	attack "$name" --port "$port" --src 127.0.0.2 --partial 5 --full-noread 5 --idle 30 --reopen
	eventually 60 attack_opened "$name"
	ok $? "$name: the attacker opened its connections"
	is "$(cat "$STACK_DIR/$name.out")" 'opened=40 failed=0' "$name: ... all 40 of them"
	held=$(established "$port" 127.0.0.2)
	ok "$([ "$held" -ge 25 ] && echo 0 || echo 1)" "$name: $held of them are established server-side (>= 25)"
	out=$(scrape "$port")
	like "$out" '^# HELP' "$name: while they are held, another client gets /metrics within 10 s"
	out=$(scrape "$port")
	like "$out" '^# HELP' "$name: ... and again"
	attack_end "$name"
done

done_testing
