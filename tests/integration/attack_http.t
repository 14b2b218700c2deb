# attack_http.t: a slowloris client against the JSON/HTTP port of a real
# controller (issue 12, item 5). From one address (127.0.0.2) it holds 560
# connections that present no credential: 520 plain TCP connections that
# never start TLS, 20 that finish the handshake and send nothing, 20 that
# send a request head one byte a second. While they are held (counted with
# ss on the server side), an authenticated JSON/HTTP call from another
# address answers within 10 s (the old thread-per-connection server had
# 512 threads, all held by the attack until its 30 s read timeout).
# Then 700 idle connections from 127.0.0.3 meet the per-address cap
# (http_max_connections_per_address, 600 here): the excess is closed at
# once and the call still answers. Last, the handshake and header timeouts
# drop the connections that never completed a request.
. "$(dirname "$0")/../lib/stack.sh"
. "$(dirname "$0")/../lib/compute_http.sh"

command -v ss >/dev/null || bail_out "ss (iproute2) is not installed"
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT
http_max_connections = 2000
http_max_connections_per_address = 600
http_handshake_timeout_seconds = 30
http_header_timeout_seconds = 30"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
ATTACK=$(dirname "$0")/attack_http.py

# established SRC: server-side connections of the HTTP port from SRC.
established() {
	ss -Htn state established "( sport = :$HTTP_PORT and dst $1 )" | wc -l
}
# close_wait SRC: client-side connections from SRC the server has closed.
close_wait() {
	ss -Htn state close-wait "( dport = :$HTTP_PORT and src $1 )" | wc -l
}
# legit: an authenticated list from 127.0.0.1 within 10 s; prints the status.
legit() {
	curl -sS -o /dev/null --max-time 10 --cacert "$BC_CA_FILE" \
		-H "Authorization: Bearer $BC_TOKEN" -H 'Content-Type: application/json' \
		--data-binary '{}' -w '%{http_code}' \
		"https://127.0.0.1:$HTTP_PORT/api/compute/instances/list"
}
# attack NAME ARGS...: start the attacker; it holds its connections until
# attack_end NAME.
attack() {
	local name=$1
	shift
	python3 "$ATTACK" --port "$HTTP_PORT" "$@" --stop "$STACK_DIR/$name.stop" \
		>"$STACK_DIR/$name.out" 2>"$STACK_DIR/$name.err" </dev/null &
	eval "pid_$name=\$!"
}
# attack_end NAME: stop it and wait until it has closed everything.
attack_end() { touch "$STACK_DIR/$1.stop" && eval "wait \$pid_$1"; }
attack_opened() { grep -q '^opened=' "$STACK_DIR/$1.out"; }

is "$(legit)" 200 'before the attack, the JSON/HTTP call answers 200'

# -- 560 held connections from one address
attack a --src 127.0.0.2 --tls "$BC_CA_FILE" --tls-silent 20 --partial 20 --idle 520
eventually 120 attack_opened a
ok $? 'the attacker opened its connections'
is "$(cat "$STACK_DIR/a.out")" 'opened=560 failed=0' '... all 560 of them'
held=$(established 127.0.0.2)
ok "$([ "$held" -ge 560 ] && echo 0 || echo 1)" \
	"the server holds them: $held established from 127.0.0.2 (>= 560)"
is "$(legit)" 200 'while they are held, the JSON/HTTP call answers 200 within 10 s'
is "$(legit)" 200 '... and again'
is "$(established 127.0.0.2)" "$held" '... and the attack connections are still open'

# -- the per-address cap
attack b --src 127.0.0.3 --idle 700
eventually 120 attack_opened b
ok $? 'a second attacker opened 700 idle connections from 127.0.0.3'
capped() { [ "$(close_wait 127.0.0.3)" -ge 100 ] && [ "$(established 127.0.0.3)" -le 600 ]; }
eventually 30 capped
ok $? "the cap closed the excess: $(close_wait 127.0.0.3) closed by the server, $(established 127.0.0.3) established (<= 600)"
is "$(legit)" 200 'with both attacks held, the JSON/HTTP call answers 200 within 10 s'

# -- the timeouts drop what never completes a request
dropped() { [ "$(established 127.0.0.2)" -eq 0 ] && [ "$(established 127.0.0.3)" -eq 0 ]; }
eventually 120 dropped
ok $? 'the handshake and header timeouts closed every attack connection'
attack_end a
attack_end b
is "$(legit)" 200 'after the attack, the JSON/HTTP call answers 200'
like "$(cat "$STACK_DIR/ctl-1.log")" 'per-address cap' 'the controller logs connections refused by the cap'

done_testing
