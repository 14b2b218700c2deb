# mcp.t: the official TypeScript MCP SDK (mcp.test.mjs) as the client of
# `bcctl mcp` over stdio, on a fake-runtime stack: alice (compute:sandboxes:*
# in tenant acme) owns a template; carol has no policy. run_command,
# write_file and read_file go through the whole exec path with a real sshd
# standing for the guest's, as tests/integration/exec_relay.t does
# (tests/lib/sshd.sh: needs root and openssh-server, else those subtests
# are skipped and say so). Each node subtest becomes one TAP line here;
# node's output is shown as diag lines when something failed. The same
# client then speaks the Streamable HTTP transport at /mcp of the
# controller's JSON/HTTP port, and raw requests check its own rules
# (sessions, credentials, Origin, methods, protocol version).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/stack.sh"
. "$here/../lib/sshd.sh"
. "$here/../lib/s3.sh"

command -v node >/dev/null || skip_all "node is not installed (contrib/install-deps.sh)"
if [ ! -d "$here/node_modules/@modelcontextprotocol/sdk" ]; then
	(cd "$here" && npm ci --no-audit --no-fund --silent) >&2 || bail_out "npm ci in tests/interop failed"
fi

# snapshot_sandbox: a real S3-compatible store (s3rver over http on
# loopback, behind the test-only switches) that bcd's fake runtime uploads to
S3D=$(mktemp -d /tmp/bc-mcp-s3.XXXXXX) || bail_out "no temp dir"
[ "${BC_KEEP_STACK:-0}" = 1 ] || tap_on_exit rm -rf "$S3D"
s3_up "$S3D" snaps || bail_out "s3rver did not start"
export BC_CTL_EXTRA_CONF="sandbox_account = root
http_listen = 127.0.0.1:0
mcp_max_sessions = 64
mcp_allowed_origins = https://console.example
snapshot_store_endpoint = $S3_ENDPOINT
snapshot_store_bucket = $S3_BUCKET
snapshot_store_path_style = 1
snapshot_store_access_key_id = $S3_ACCESS_KEY_ID
snapshot_store_allow_http_loopback_for_tests = 1"
export BC_AGENT_EXTRA_CONF="snapshot_store_allow_http_loopback_for_tests = 1"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,100 || bail_out "stack_up failed"
"$BC_BIN/bc-controller" snapshot-store set-secret --config "$STACK_DIR/ctl-1.conf" <"$S3_SECRET_FILE" \
	>/dev/null 2>&1 || bail_out "set-secret"
img=$(stack_image_create mcp-img) || bail_out "no image"
jid() { json_get "$1" id; }
http_port=$(sed -n 's/.*serving JSON\/HTTP on .* (port \([0-9]*\)).*/\1/p' "$STACK_DIR/ctl-1.log" | tail -n1)
[ -n "$http_port" ] || bail_out "no JSON/HTTP port in ctl-1.log"

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
carol=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name carol)")
C=$(json_get "$(bcctl --format json token create --identity "$carol")" token)
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:*"],"resources":["*"]}' >"$STACK_DIR/p.json"
p=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/p.json")")
bcctl policy attach "$p" --identity "$alice" >/dev/null || bail_out "policy attach"
tmpl=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox-template create --name m --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --max-ttl 4h)")
[ -n "$tmpl" ] || bail_out "template"

# the sandbox run_command and the file tools reach: its guest's sshd is a
# real sshd on this machine (root only)
W=$STACK_DIR/w
mkdir -p "$W"
EXEC_SANDBOX=
if [ "$(id -u)" -eq 0 ] && [ -x /usr/sbin/sshd ]; then
	ptmpl=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox-template create --name x --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$img" --network private)") || bail_out "template x"
	xs=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox create --template "$ptmpl" --ttl 30m --wait 20s)")
	ready() { [ "$(psql -d bc -XAtq -c "SELECT state FROM sandboxes WHERE id = '$xs'")" = ready ]; }
	eventually 30 ready || bail_out "sandbox $xs not ready"
	inst=$(psql -d bc -XAtq -c "SELECT instance_id FROM sandboxes WHERE id = '$xs'")
	guest=$(psql -d bc -XAtq -c "SELECT host(address) FROM ip_leases WHERE instance_id = '$inst' LIMIT 1")
	guest_sshd_up "$inst" "$guest" "$W/sshd" || bail_out "sshd did not start"
	ssh-keygen -q -t ed25519 -N '' -C alice -f "$W/id" || bail_out "ssh-keygen"
	EXEC_SANDBOX=$xs
else
	diag "not root or no /usr/sbin/sshd: run_command, write_file and read_file are skipped"
fi

out=$STACK_DIR/mcp-node.out
(cd "$here" && BC_BIN=$BC_BIN BC_URL=$BC_URL BC_CA_FILE=$BC_CA_FILE MCP_HOME=$STACK_DIR/home \
	ALICE_TOKEN=$A CAROL_TOKEN=$C TEMPLATE_ID=$tmpl POOL_ID=$POOL_ID \
	EXEC_SANDBOX=$EXEC_SANDBOX MCP_KEY=$W/id MCP_DIR=$W \
	MCP_URL=https://127.0.0.1:$http_port/mcp NODE_EXTRA_CA_CERTS=$BC_CA_FILE \
	timeout 600 node --test --test-reporter=tap mcp.test.mjs) >"$out" 2>&1
node_rc=$?

node_results "$out"
ok "$([ "$NODE_RESULTS" -ge 17 ]; echo $?)" "node ran the MCP subtests ($NODE_RESULTS)"
is "$node_rc" 0 'node --test exits 0'
ok "$(! grep -q 'Sanitizer' "$out"; echo $?)" 'no sanitizer report from bcctl mcp (its stderr is in the output)'
if tap_failed; then
	diag "---- node --test output ----"
	diag "$(cat "$out")"
fi

done_testing
