# mcp.t: an agent's session through MCP alone, on a real guest (issue 19):
# the official TypeScript MCP SDK (tests/interop/mcp_guest.test.mjs) starts
# `bcctl mcp` over stdio against a stack with the libvirt runtime and the
# guest image, creates a sandbox, runs python3 -c 'print(6*7)' in it with
# run_command, writes and reads back a binary file, and deletes it. The
# fake-runtime layer (tests/interop/mcp.t) covers every other tool and rule.
. "$(dirname "$0")/lib.sh"

command -v node >/dev/null || skip_all "node is not installed (contrib/install-deps.sh)"
interop=$BC_SRC/tests/interop
[ -d "$interop/node_modules/@modelcontextprotocol/sdk" ] ||
	(cd "$interop" && npm ci --no-audit --no-fund --silent) >&2 || bail_out "npm ci in tests/interop failed"

e2e_need
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID"
jid() { json_get "$1" id; }
W=$STACK_DIR/mcp
mkdir -p "$W/home"
ssh-keygen -q -t ed25519 -N '' -C mcp-e2e -f "$W/key" || bail_out "ssh-keygen"

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}' >"$W/p.json"
pol=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$W/p.json")")
bcctl policy attach "$pol" --identity "$alice" >/dev/null || bail_out "policy attach"
out=$(BC_TOKEN=$A bcctl --format json sandbox-template create --name e2e-mcp --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID") || bail_out "template: $out"
tmpl=$(jid "$out")

res=$W/node.out
(cd "$interop" && BC_BIN=$BC_BIN BC_URL=$BC_URL BC_CA_FILE=$BC_CA_FILE MCP_HOME=$W/home \
	ALICE_TOKEN=$A TEMPLATE_ID=$tmpl MCP_KEY=$W/key BOOT_TIMEOUT=$E2E_BOOT_TIMEOUT \
	timeout $((E2E_BOOT_TIMEOUT * 2 + 300)) node --test --test-reporter=tap mcp_guest.test.mjs) >"$res" 2>&1
node_rc=$?
node_results "$res"
is "$NODE_RESULTS" 6 'node ran the six MCP steps'
is "$node_rc" 0 'node --test exits 0'
sbx=$(psql -d bc -XAtq -c "SELECT id FROM sandboxes WHERE template_id = '$tmpl' ORDER BY created_at LIMIT 1")
gone() { [ "$(psql -d bc -XAtq -c "SELECT state FROM sandboxes WHERE id = '$sbx'")" = deleted ]; }
eventually 120 gone
ok $? "the sandbox ($sbx) is deleted"
if tap_failed; then
	diag "---- node --test output ----"
	diag "$(cat "$res")"
fi
done_testing
