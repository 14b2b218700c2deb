# http.t: the JSON/HTTP transport of a real controller (http_listen), driven
# with curl: the same handlers, auth and errors as gRPC (docs/http.md).
# - an instance created with POST /api/compute/instances/create is the same
#   object bcctl get shows over gRPC; list and delete work too;
# - no token is 401, a malformed body 400 naming the field, an unknown
#   flavor 400, an oversized body 413 with maxBytes, the node API 404;
# - the admin API answers the admin token at /api/admin/pools/list;
# - Events.Watch streams newline-delimited JSON (backlog, then live events,
#   resumable, ended by its deadline with an error line).
. "$(dirname "$0")/../lib/stack.sh"

command -v curl >/dev/null || skip_all "curl is not installed"
HTTP_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:$HTTP_PORT"
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create http-img) || bail_out "no image"
BASE=https://127.0.0.1:$HTTP_PORT

like "$(cat "$STACK_DIR/ctl-1.log")" "serving JSON/HTTP on 127.0.0.1:$HTTP_PORT \\(port $HTTP_PORT\\)" \
	'the controller logs the bound HTTP port'

# api PATH BODY [CURL ARGS...]: POST with the admin token; prints the body,
# then the HTTP status on a last line of its own.
api() {
	local path=$1 body=$2
	shift 2
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
		-H 'Content-Type: application/json' --data-binary "$body" \
		-w '\n%{http_code}' "$@" "$BASE$path"
}
status_of() { printf '%s\n' "$1" | tail -n 1; }
body_of() { printf '%s\n' "$1" | sed '$d'; }

# -- health
out=$(curl -sS --cacert "$BC_CA_FILE" -w '\n%{http_code}' "$BASE/healthz")
is "$(status_of "$out")" 200 'GET /healthz is 200'
is "$(body_of "$out" | jq -r .status)" SERVING '... SERVING'

# -- create over HTTP, read over gRPC
out=$(api /api/compute/instances/create \
	"{\"poolId\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"imageId\":\"$img\",\"sshKeys\":[\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6C http\"]}")
is "$(status_of "$out")" 200 'POST /api/compute/instances/create is 200'
created=$(body_of "$out")
id=$(printf '%s' "$created" | jq -r .id)
like "$id" '^inst_' '... and returns the instance'
is "$(printf '%s' "$created" | jq -r .flavor)" "$FLAVOR_NAME" '... with the flavor asked for'
is "$(printf '%s' "$created" | jq -r 'has("nodeId") and has("deletedAt")')" true \
	'... every field present, defaults included'
grpc=$(bcctl --format json instance get "$id")
is "$?" 0 'bcctl get (gRPC) finds it'
is "$(json_get "$grpc" pool_id)" "$POOL_ID" '... in the same pool'
is "$(json_get "$grpc" image_id)" "$(printf '%s' "$created" | jq -r .imageId)" '... with the same image'
is "$(json_get "$grpc" created_at)" "$(printf '%s' "$created" | jq -r .createdAt)" '... created at the same time'
out=$(api /api/compute/instances/get "{\"instanceId\":\"$id\"}")
is "$(status_of "$out")" 200 'POST /api/compute/instances/get is 200'
is "$(body_of "$out" | jq -r .id)" "$id" '... the same instance'
out=$(api /api/compute/Instances/Get "{\"instanceId\":\"$id\"}")
is "$(status_of "$out")" 200 'the exact-case spelling /api/compute/Instances/Get works too'

# -- list
out=$(api /api/compute/instances/list '{}')
is "$(status_of "$out")" 200 'POST /api/compute/instances/list is 200'
is "$(body_of "$out" | jq --arg id "$id" '[.items[] | select(.id == $id)] | length')" 1 \
	'... and lists it'
out=$(api /api/compute/instances/list '')
is "$(status_of "$out")" 200 'an empty body is an empty request'

# -- refusals
out=$(curl -sS --cacert "$BC_CA_FILE" -H 'Content-Type: application/json' --data '{}' \
	-w '\n%{http_code}' "$BASE/api/compute/instances/list")
is "$(status_of "$out")" 401 'no token: 401'
is "$(body_of "$out" | jq -r .error.code)" UNAUTHENTICATED '... UNAUTHENTICATED'
out=$(curl -sS --cacert "$BC_CA_FILE" -H 'Authorization: Bearer bct_nope' --data-binary '{}' \
	-H 'Content-Type: application/json' -w '\n%{http_code}' "$BASE/api/compute/instances/list")
is "$(status_of "$out")" 401 'an unknown token: 401'
out=$(api /api/compute/instances/create '{"poolId": 42}')
is "$(status_of "$out")" 400 'malformed body: 400'
is "$(body_of "$out" | jq -r .error.code)" INVALID_INPUT '... INVALID_INPUT'
is "$(body_of "$out" | jq -r .error.details.field)" poolId '... naming the field'
out=$(api /api/compute/instances/create '{"poolId": "x", "color": "red"}')
is "$(status_of "$out")" 400 'unknown field: 400'
is "$(body_of "$out" | jq -r .error.details.field)" color '... naming it'
out=$(api /api/compute/instances/create "{\"poolId\":\"$POOL_ID\",\"flavor\":\"no-such\",\"imageId\":\"$img\"}")
is "$(status_of "$out")" 400 'unknown flavor: 400'
is "$(body_of "$out" | jq -r .error.details.field)" flavor '... details.field is flavor'
head -c 1100000 /dev/zero | tr '\0' ' ' >"$STACK_DIR/big.json"
out=$(api /api/compute/instances/list "@$STACK_DIR/big.json")
is "$(status_of "$out")" 413 'body over max_message_bytes: 413'
is "$(body_of "$out" | jq -r .error.details.maxBytes)" 1048576 '... with details.maxBytes'
out=$(api /api/node/node/report '{}')
is "$(status_of "$out")" 404 'the node API is not served: 404'
out=$(api /api/compute/instances/nope '{}')
is "$(status_of "$out")" 404 'unknown method: 404'
is "$(body_of "$out" | jq -r .error.code)" NOT_FOUND '... NOT_FOUND'
out=$(curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
	-w '\n%{http_code}' "$BASE/api/compute/instances/list")
is "$(status_of "$out")" 405 'GET on a method: 405'
out=$(curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" --data '{}' \
	-H 'Content-Type: text/plain' -w '\n%{http_code}' "$BASE/api/compute/instances/list")
is "$(status_of "$out")" 415 'Content-Type text/plain: 415'

# -- usage
out=$(api /api/compute/usage/list '{"meter": "vps.vcpu.hours"}')
is "$(status_of "$out")" 200 'POST /api/compute/usage/list is 200'
is "$(body_of "$out" | jq -r 'has("items") and has("totalCostCents")')" true '... with items and totals'
out=$(api /api/compute/usage/list '{"limit": 1001}')
is "$(body_of "$out" | jq -r '.error.code + " " + .error.details.field')" 'INVALID_INPUT limit' \
	'... limit 1001: INVALID_INPUT naming limit'

# -- admin
out=$(api /api/admin/pools/list '{}')
is "$(status_of "$out")" 200 'POST /api/admin/pools/list with the admin token is 200'
is "$(body_of "$out" | jq --arg p "$POOL_ID" '[.items[] | select(.id == $p)] | length')" 1 \
	'... lists pool p1'

# -- Events.Watch: a chunked body of newline-delimited JSON, one event a line
# (curl --no-buffer prints each as it arrives)
W=$STACK_DIR/watch
watch() { # OUT BODY [CURL ARGS...]: the stream into OUT, its head into OUT.head
	local out=$1 body=$2
	shift 2
	curl -sS -N --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
		-H 'Content-Type: application/json' --data-binary "$body" -D "$out.head" "$@" \
		"$BASE/api/compute/events/watch" >"$out" 2>"$out.err"
}
watch "$W.live" '{"typePrefix": "instance."}' &
wpid=$!
eventually 30 grep -qs '"type":"instance.created"' "$W.live"
ok $? 'Events.Watch over HTTP streams the backlog at once'
grep -qi '^content-type: application/x-ndjson' "$W.live.head"
ok $? '... as application/x-ndjson'
grep -qi '^transfer-encoding: chunked' "$W.live.head"
ok $? '... chunked'
created_ev=$(jq -r "select(.subject == \"instance/$id\" and .type == \"instance.created\") | .id" "$W.live")
like "$created_ev" '^[0-9]+$' '... with the instance.created of our instance'

# -- delete over HTTP
out=$(api /api/compute/instances/delete "{\"instanceId\":\"$id\"}")
is "$(status_of "$out")" 200 'POST /api/compute/instances/delete is 200'
eventually 30 instance_state_is "$id" deleted
ok $? '... and the instance ends deleted (seen over gRPC)'

eventually 30 grep -q "\"type\":\"instance.deleted\",\"subject\":\"instance/$id\"" "$W.live"
ok $? 'the open stream delivers the deletion events as they commit'
kill -0 "$wpid" 2>/dev/null
ok $? '... while it stays open'
ok "jq -e . '$W.live' >/dev/null" 'every line is a JSON object'
is "$(jq -r .id "$W.live" | sort -n -c 2>&1 && jq -r .id "$W.live" | uniq -d | wc -l)" 0 \
	'... ids in order, none twice'
kill "$wpid" 2>/dev/null
wait "$wpid" 2>/dev/null

# resume after an id; the deadline (x-timeout-ms) ends the stream with an error line
watch "$W.resume" "{\"afterId\": $created_ev, \"typePrefix\": \"instance.\"}" -H 'x-timeout-ms: 3000'
is "$?" 0 'a stream with x-timeout-ms ends by itself'
is "$(head -n 1 "$W.resume" | jq -r '.id > '"$created_ev")" true 'resumed after the id given'
is "$(jq -r "select(.subject == \"instance/$id\") | .type" "$W.resume" | grep -c -x -e instance.deleting -e instance.deleted)" 2 \
	'... with the deleting and deleted events'
is "$(jq -r "select(.subject == \"instance/$id\") | .type" "$W.resume" | grep -c -x instance.created)" 0 \
	'... and not the creation before it'
is "$(tail -n 1 "$W.resume" | jq -r .error.code)" DEADLINE_EXCEEDED \
	'... and a last line carrying the error'
out=$(curl -sS --cacert "$BC_CA_FILE" -H 'Content-Type: application/json' --data '{}' \
	-w '\n%{http_code}' "$BASE/api/compute/events/watch")
is "$(status_of "$out")" 401 'Events.Watch without a token: 401, before any stream'
out=$(api /api/compute/events/watch '{"tenantId": "nobody"}')
is "$(status_of "$out")" 404 "... another tenant's events: 404"
is "$(body_of "$out" | jq -r .error.code)" NOT_FOUND '... NOT_FOUND'
out=$(api /api/compute/events/watch '{"typePrefix": 7}')
is "$(status_of "$out")" 400 '... a malformed request: 400'
is "$(body_of "$out" | jq -r .error.details.field)" typePrefix '... naming the field'

# -- keep-alive: curl reuses one connection for two URLs
n=$(curl -sS -v --cacert "$BC_CA_FILE" -H "Authorization: Bearer $BC_TOKEN" \
	-H 'Content-Type: application/json' --data '{}' \
	"$BASE/api/compute/instances/list" "$BASE/api/admin/pools/list" 2>&1 >/dev/null |
	grep -c 'Re-using existing connection')
is "$n" 1 'two requests on one keep-alive connection'

# -- a stream open while the controller shuts down ends cleanly and does not
# hold the shutdown
watch "$W.stop" '{"typePrefix": "instance."}' &
wpid=$!
eventually 30 grep -qsi '^content-type: application/x-ndjson' "$W.stop.head"
ok $? 'a stream is open'
cpid=$(_stack_get_pid ctl-1)
kill -TERM "$cpid"
ctl_gone() { ! _proc_alive "$cpid"; }
eventually 60 ctl_gone
ok $? 'the controller exits on SIGTERM with the stream open'
wait "$wpid"
is "$?" 0 '... and the stream ends with a complete chunked body (curl exit 0)'

done_testing
