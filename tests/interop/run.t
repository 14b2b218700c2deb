# run.t: the Node.js interop suite (client.test.js) against a real stack:
# one controller, one fake-runtime agent, a pool, a flavor and an image made
# with bcctl. Each top-level node test becomes one TAP line here; node's own
# output is shown as diag lines when something failed.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/stack.sh"

command -v node >/dev/null || skip_all "node is not installed (contrib/install-deps.sh)"
if [ ! -d "$here/node_modules/@grpc/grpc-js" ] || [ ! -d "$here/node_modules/@grpc/proto-loader" ]; then
	(cd "$here" && npm ci --no-audit --no-fund --silent) >&2 || bail_out "npm ci in tests/interop failed"
fi

stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
image_id=$(stack_image_create interop-img)
[ -n "$image_id" ] || bail_out "image create failed"

out=$STACK_DIR/node-test.tap
(
	cd "$here" &&
		BC_URL=$BC_URL BC_CA_FILE=$BC_CA_FILE BC_TOKEN=$BC_TOKEN BC_TENANT=$BC_TENANT \
			BC_POOL_ID=$POOL_ID BC_FLAVOR=$FLAVOR_NAME BC_IMAGE_ID=$image_id \
			BC_BCCTL=$BC_BIN/bcctl \
			timeout 300 node --test --test-reporter=tap client.test.js
) >"$out" 2>&1
node_rc=$?

# top-level results are the unindented "ok N - name" / "not ok N - name"
# lines (with node's # SKIP / # TODO directives kept as they are)
node_results "$out"
ok "$([ "$NODE_RESULTS" -gt 0 ]; echo $?)" "node ran the suite ($NODE_RESULTS tests)"
is "$node_rc" 0 'node --test exits 0'
if tap_failed; then
	diag "---- node --test output ----"
	diag "$(cat "$out")"
fi

done_testing
