# console_off.t: the controller config key console (docs/console.md). With
# console = 0 the web console's paths answer 404 like any unknown path,
# while the rest of the JSON/HTTP port (the control: /healthz, the API)
# still answers; with the key absent (on by default) tests/interop/console.t
# drives the console in a browser, and here a second controller on the same
# database, its key absent, serves /console/.
. "$(dirname "$0")/../lib/stack.sh"

P1=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$P1
console = 0"
stack_up --controllers 1 --agents 0 || bail_out "stack_up failed"

get() { curl -sS --cacert "$BC_CA_FILE" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$1$2"; }
is "$(get "$P1" /healthz)" 200 'console = 0: /healthz answers (control)'
is "$(get "$P1" /console/)" 404 'console = 0: /console/ is 404'
is "$(get "$P1" /console/app.js)" 404 'console = 0: /console/app.js is 404'
is "$(curl -sS --cacert "$BC_CA_FILE" "https://127.0.0.1:$P1/console/" | jq -r .error.code)" NOT_FOUND \
	'... with the JSON error body NOT_FOUND'
body=$(curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
	-H 'Content-Type: application/json' --data '{}' "https://127.0.0.1:$P1/api/compute/sandboxtemplates/list")
is "$(printf '%s' "$body" | jq -r '.items | type')" array 'console = 0: the API still answers (control)'

# a second controller with the key absent: the console is on
P2=$(free_tcp_port) || bail_out "no free port"
conf=$STACK_DIR/ctl-on.conf
grep -v '^console = \|^http_listen = \|^listen = \|^metrics_listen = \|^replica = ' "$STACK_DIR/ctl-1.conf" >"$conf"
G2=$(free_tcp_port) || bail_out "no free port"
printf 'http_listen = 127.0.0.1:%s\nlisten = 127.0.0.1:%s\nreplica = ctl-9\n' "$P2" "$G2" >>"$conf"
"$BC_BIN/bc-controller" serve --config "$conf" >"$STACK_DIR/ctl-on.log" 2>&1 &
on_pid=$!
tap_on_exit kill "$on_pid"
up() { [ "$(get "$P2" /healthz 2>/dev/null)" = 200 ]; }
eventually 30 up || diag "$(tail -n 20 "$STACK_DIR/ctl-on.log")"
is "$(get "$P2" /console/)" 200 'console absent: /console/ is 200'
hdrs=$(curl -sS --cacert "$BC_CA_FILE" -D - -o /dev/null "https://127.0.0.1:$P2/console/app.js")
ok "$(printf '%s' "$hdrs" | grep -qi "^content-security-policy: default-src 'none'"; echo $?)" \
	'... app.js with the strict CSP'
done_testing
