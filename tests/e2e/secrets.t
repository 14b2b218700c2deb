# secrets.t: a secret reaches a real guest's /etc/sandbox/env. A secret
# whose value holds quotes, a newline, $, a backslash, a backquote and
# non-ASCII bytes is put with bcctl (from a file), named in a sandbox
# template's env next to a second one, and a sandbox is created from the
# template on the libvirt runtime with the real guest image. Read inside the
# guest over real OpenSSH from the host (the template's own cloud-config
# part authorizes a key for the image's default user): /etc/sandbox/env is
# root's, mode 0600, unreadable by that user, and
# `. /etc/sandbox/env; echo "$NAME"` as root prints each value byte for
# byte. The value never appears in an API answer, an event or the
# controller's or agent's log.
. "$(dirname "$0")/lib.sh"

e2e_need
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"

W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
CANARY=bc-e2e-canary-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
# quotes, $, a backslash, a backquote, non-ASCII, a newline inside
printf "it's \"%s\" \$HOME \\\\ \`id\` é€ ok\nsecond line" "$CANARY" >"$W/value"
printf 'plain-%s' "$CANARY" >"$W/value2"

out=$(bcctl --format json secret put e2e-token --from-file "$W/value") || bail_out "secret put: $out"
like "$(json_get "$out" id)" '^sec_' "the secret is put ($(json_get "$out" id))"
unlike "$out" "$CANARY" "the answer carries no value"
bcctl secret put e2e-second <"$W/value2" >/dev/null || bail_out "second secret"

cat >"$W/user-data" <<EOT
#cloud-config
ssh_authorized_keys:
  - $(cat "$W/key.pub")
EOT
out=$(bcctl --format json sandbox-template create --name e2e-secrets --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID" --user-data-file "$W/user-data" \
	--env "E2E_TOKEN=secret://root/e2e-token" --env "SECOND=secret://root/e2e-second") ||
	bail_out "template: $out"
tmpl=$(json_get "$out" id)
like "$tmpl" '^sbxt_' "a template names both secrets in its env ($tmpl)"

out=$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h) || bail_out "sandbox: $out"
sbx=$(json_get "$out" id)
id=$(json_get "$out" instance_id)
like "$sbx" '^sbx_' "a sandbox is created from it ($sbx on $id)"
unlike "$out" "$CANARY" "the sandbox answer carries no value"

instance_running() { instance_state_is "$id" running; }
eventually "$E2E_BOOT_TIMEOUT" instance_running
ok $? "its instance runs (state $(instance_state "$id"))"
ip4=$(e2e_instance_json "$id" | jq -r '.nics[0].ipv4 // empty')
like "$ip4" '^10\.214\.' "its address ($ip4)"

SSH=(ssh -i "$W/key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o ConnectTimeout=10 -o LogLevel=ERROR "debian@$ip4")
# cloud-init has written its files once it reports done
ssh_up() { "${SSH[@]}" 'cloud-init status --wait >/dev/null 2>&1; test -e /etc/sandbox/env' 2>>"$W/ssh.err"; }
eventually "$E2E_BOOT_TIMEOUT" ssh_up
ok $? "over real OpenSSH from the host to the sandbox's guest, /etc/sandbox/env exists"
if ! ssh_up; then
	[ -s "$W/ssh.err" ] && diag "ssh: $(tail -n 3 "$W/ssh.err")"
	diag "console tail:"
	diag_file "$(e2e_console "$id")" 40
fi

is "$("${SSH[@]}" 'sudo stat -c "%U:%G %a" /etc/sandbox/env' 2>/dev/null)" 'root:root 600' \
	"/etc/sandbox/env is root's, mode 0600"
"${SSH[@]}" 'cat /etc/sandbox/env' >/dev/null 2>&1
isnt $? 0 "the image's unprivileged user cannot read it"
is "$("${SSH[@]}" 'sudo sh -c '\''. /etc/sandbox/env; echo "$E2E_TOKEN"'\''' 2>/dev/null)" "$(cat "$W/value")" \
	'. /etc/sandbox/env; echo "$E2E_TOKEN" prints the value'
"${SSH[@]}" 'sudo sh -c '\''. /etc/sandbox/env; printf %s "$E2E_TOKEN"'\''' >"$W/got" 2>/dev/null
cmp -s "$W/got" "$W/value"
ok $? "... byte for byte (quotes, \$, backslash, backquote, non-ASCII, newline)"
is "$("${SSH[@]}" 'sudo sh -c '\''. /etc/sandbox/env; echo "$SECOND"'\''' 2>/dev/null)" "$(cat "$W/value2")" \
	'the second secret too'
is "$("${SSH[@]}" 'sudo bash -c '\''set -a; . /etc/sandbox/env; env | grep -c "^E2E_TOKEN="'\''' 2>/dev/null)" 1 \
	'set -a; . /etc/sandbox/env exports it'

# nowhere else
is "$(psql -d bc -XAtq -c "SELECT count(*) FROM events WHERE data::text LIKE '%$CANARY%'")" 0 \
	'no event carries the value'
is "$(cat "$STACK_DIR"/ctl-*.log "$STACK_DIR"/bcd-*.log 2>/dev/null | grep -c "$CANARY")" 0 \
	'no log line of the controller or the agent carries it'
out=$(bcctl --format json sandbox get "$sbx"; bcctl --format json sandbox-template get "$tmpl";
	bcctl --format json secret list)
unlike "$out" "$CANARY" 'no Get or List answer carries it'

bcctl sandbox delete "$sbx" >/dev/null
ok $? "the sandbox is deleted"
gone() {
	local st
	st=$(instance_state "$id")
	[ -z "$st" ] || [ "$st" = deleted ]
}
eventually 180 gone
ok $? "its instance is gone"
done_testing
