# console.t: the web console at /console/ (docs/console.md) in a real
# browser: Debian's chromium, headless, driven by npm puppeteer-core
# (console.test.mjs), against a fake-runtime stack. alice may do
# everything to sandboxes in tenant acme and owns a template with a warm
# pool; the watch stream is cut every 15 s (events_watch_max_seconds) so
# the feed's reconnection is exercised. Each node test becomes one TAP
# line here; node's output is shown as diag lines when something failed.
# Screenshots go to the artifact dir (BC_ARTIFACT_DIR, default
# build/artifacts/console), from which docs/console/*.png are taken.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/stack.sh"

CHROMIUM=${BC_CHROMIUM:-/usr/bin/chromium}
command -v node >/dev/null || skip_all "node is not installed (contrib/install-deps.sh)"
[ -x "$CHROMIUM" ] || skip_all "no $CHROMIUM (contrib/install-deps.sh installs chromium)"
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
	(cd "$here" && npm ci --no-audit --no-fund --silent) >&2 || bail_out "npm ci in tests/interop failed"
fi
ARTIFACTS=${BC_ARTIFACT_DIR:-$here/../../build/artifacts/console}
mkdir -p "$ARTIFACTS" || bail_out "cannot create $ARTIFACTS"
ARTIFACTS=$(cd "$ARTIFACTS" && pwd -P)

export BC_CTL_EXTRA_CONF="http_listen = 127.0.0.1:0
events_watch_max_seconds = 15"
stack_up --controllers 1 --agents 1 --agent-capacity 16,32768,100 || bail_out "stack_up failed"
img=$(stack_image_create console-img) || bail_out "no image"
jid() { json_get "$1" id; }
http_port=$(sed -n 's/.*serving JSON\/HTTP on .* (port \([0-9]*\)).*/\1/p' "$STACK_DIR/ctl-1.log" | tail -n1)
[ -n "$http_port" ] || bail_out "no JSON/HTTP port in ctl-1.log"

bcctl tenant create acme >/dev/null || bail_out "tenant"
alice=$(jid "$(bcctl --format json identity create --tenant acme --kind user --name alice)")
A=$(json_get "$(bcctl --format json token create --identity "$alice")" token)
printf '%s' '{"effect":"allow","actions":["compute:sandboxes:*","compute:events:read"],"resources":["*"]}' \
	>"$STACK_DIR/p.json"
p=$(jid "$(bcctl --format json policy create --tenant acme --name all --file "$STACK_DIR/p.json")")
bcctl policy attach "$p" --identity "$alice" >/dev/null || bail_out "policy attach"
tmpl=$(jid "$(BC_TOKEN=$A bcctl --format json sandbox-template create --name web --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --default-ttl 20m --max-ttl 2h --warm-min 1 --warm-max 2)")
[ -n "$tmpl" ] || bail_out "template"
node=$(agent_node_id 1)
stored() { [ "$(psql -d bc -XAtq -c "SELECT count(*) FROM host_volume_storage WHERE node_id = '$node'")" = 1 ]; }
eventually 30 stored || bail_out "the host never reported its volume store"

# the browser trusts exactly the controller's key (its SPKI pinned), not
# every certificate
spki=$(openssl s_client -connect "127.0.0.1:$http_port" -servername localhost </dev/null 2>/dev/null |
	openssl x509 -pubkey -noout | openssl pkey -pubin -outform der |
	openssl dgst -sha256 -binary | base64)
[ -n "$spki" ] || bail_out "cannot read the controller's key"

out=$STACK_DIR/console-node.out
(cd "$here" && CHROMIUM=$CHROMIUM CONSOLE_URL=https://127.0.0.1:$http_port/console/ SPKI=$spki \
	ALICE_TOKEN=$A TEMPLATE_ID=$tmpl POOL_ID=$POOL_ID ARTIFACTS=$ARTIFACTS \
	NODE_EXTRA_CA_CERTS=$BC_CA_FILE BROWSER_DIR=$STACK_DIR/chromium \
	timeout 600 node --test --test-reporter=tap console.test.mjs) >"$out" 2>&1
node_rc=$?

node_results "$out"
ok "$([ "$NODE_RESULTS" -ge 20 ]; echo $?)" "node ran the console tests ($NODE_RESULTS)"
is "$node_rc" 0 'node --test exits 0'
for f in signin sandboxes volumes; do
	ok "$([ -s "$ARTIFACTS/console-$f.png" ]; echo $?)" "screenshot console-$f.png saved in $ARTIFACTS"
done
if tap_failed; then
	diag "---- node --test output ----"
	diag "$(cat "$out")"
	diag "---- controller log (last 40 lines) ----"
	diag "$(tail -n 40 "$STACK_DIR/ctl-1.log")"
fi

done_testing
