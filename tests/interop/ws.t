# ws.t: the npm `ws` client (ws.test.js) over TLS against the JSON/HTTP
# transport's WebSocket routes, served by `test_rpc_ws --serve` (a unit
# test binary: make unit-bins, or make asan for build/asan). Each node
# subtest becomes one TAP line here; node's output is shown as diag lines
# when something failed.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"

: "${BC_SRC:=$(cd "$here/../.." && pwd)}"
: "${BC_BIN:=$BC_SRC/build/bin}"
server=${BC_WS_SERVER:-$BC_BIN/../tests/unit/test_rpc_ws}

command -v node >/dev/null || skip_all "node is not installed (contrib/install-deps.sh)"
[ -x "$server" ] || skip_all "$server not built (make unit-bins)"
if [ ! -d "$here/node_modules/ws" ]; then
	(cd "$here" && npm ci --no-audit --no-fund --silent) >&2 || bail_out "npm ci in tests/interop failed"
fi

out=$(mktemp)
tap_on_exit rm -f "$out"
(cd "$here" && BC_WS_SERVER=$server timeout 300 node --test --test-reporter=tap ws.test.js) >"$out" 2>&1
node_rc=$?

# the subtests are the "ok N - name" lines indented once
node_results "$out" '    '
ok "$([ "$NODE_RESULTS" -ge 6 ]; echo $?)" "node ran the WebSocket subtests ($NODE_RESULTS)"
is "$node_rc" 0 'node --test exits 0'
if tap_failed; then
	diag "---- node --test output ----"
	diag "$(cat "$out")"
fi

done_testing
