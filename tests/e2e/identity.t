# identity.t: workload identity on real guests (issue 18, "Must show"; the
# guest's client: contrib/guest/bc-identity.c and bc-identity.service in the
# image of `make guest`; bcd's endpoint: agent/identity_ep.c). Identity is
# on for the deployment (identity_enabled = 1); bcd runs with network =
# nftables, so its identity endpoint listens on the pool gateway:9470 and
# it advertises instance.identity.
#
#   - sandbox 1 attests from inside its guest (bc-identity.service, as the
#     user bc-identity) and becomes ready only then: its epoch went live
#     before (or as) the sandbox was stamped ready, through bcd (its log and
#     bcd_identity_requests_total{result="attested"});
#   - the sandbox account cannot read the bootstrap value (owned by
#     bc-identity, 0600); the capability token is in /run/bc-identity;
#   - Recognize(its address) names it; the sandbox account reports
#     running, then idle (sudo -u bc-identity bc-identity state);
#   - a second guest on the same host whose boot data (runcmd, as root)
#     adds the first one's address and tries to attest from it: its packets
#     are dropped by the tap guards (no connection), so it cannot attest;
#     it attests itself from its own address (control);
#   - the first guest replaying its used value (from inside, through bcd) is
#     refused bootstrap-used; a guest whose value expired before it booted
#     is refused bootstrap-expired and stays starting;
#   - deleting sandbox 1: Recognize stops answering at once (within the
#     cache bound), the instance is deleted only after the revocation plus
#     identity_cache_seconds (the order is logged as diag lines and checked
#     on the events);
#   - a warm claim of an identity template binds (lifecycle bound, warm),
#     and its already-booted guest attests with the value handed through
#     the host without a reboot (one firmware boot on its console, booted
#     before the claim).
#
# Every guest command goes to bcctl as ONE argument.
. "$(dirname "$0")/lib.sh"

CACHE=3
e2e_need
MET_PORT=$(free_tcp_port) || bail_out "no free port"
export BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$MET_PORT"
export BC_CTL_EXTRA_CONF="identity_enabled = 1
identity_cache_seconds = $CACHE
identity_bootstrap_seconds = 1800
sandbox_reconcile_seconds = 2"
e2e_up --controllers 1 --agents 1 --agent-capacity 8,8192,80 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
sbx() { bcctl --format json sandbox get "$1"; }
W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
gx() { bcctl sandbox exec --key "$W/key" "$1" -- "$2" </dev/null 2>>"$W/gx.err"; }
metric() { curl -s "http://127.0.0.1:$MET_PORT/metrics" | sed -n "s/^bcd_identity_requests_total{result=\"$1\"} //p"; }
# bootdata INSTANCE: its sealed boot data as its node gets it
bootdata() {
	local dir=$STACK_DIR/agent-1 ref
	ref=$(q "SELECT user_data_ref FROM instances WHERE id = '$1'")
	node "$BC_SRC/tests/integration/grpc_call.js" "$(ctl_url 1)" "$dir/ca.pem" "$dir/node.pem" \
		"$dir/node.key" bc/node/v1/node.proto bc.node.v1.Node GetBootData \
		"{\"instance_id\": \"$1\", \"ref\": \"$ref\"}" 2>/dev/null | jq -r .user_data | base64 -d
}
ready() { [ "$(json_get "$(sbx "$1")" state)" = ready ]; }
inst_of() { q "SELECT instance_id FROM sandboxes WHERE id = '$1'"; }
addr_of() { q "SELECT host(address) FROM ip_leases WHERE instance_id = '$1'"; }
console() { diag_file "$(e2e_console "$1")" 40; }

is "$(q "SELECT 'instance.identity' = ANY (capabilities) FROM nodes")" t \
	'bcd (network = nftables) runs its identity endpoint and advertises instance.identity'

tmpl=$(jid "$(bcctl --format json sandbox-template create --name e2e-id --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID")") || bail_out "template"

# -- sandbox 1: attests from inside its guest, ready only then
s1=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h --task e2e-t1)") ||
	bail_out "create 1"
i1=$(inst_of "$s1")
eventually 60 eval '[ -n "$(addr_of "$i1")" ]'
a1=$(addr_of "$i1")
eventually "$E2E_BOOT_TIMEOUT" ready "$s1" || { diag "sandbox $s1 not ready"; console "$i1"; } >&2
ok $? "sandbox 1 ($s1, $a1) becomes ready"
is "$(q "SELECT state || ' ' || host(address) FROM identity_epochs WHERE sandbox_id = '$s1'")" "live $a1" \
	'its epoch is live, bound to its address'
is "$(q "SELECT e.live_at <= s.ready_at FROM identity_epochs e JOIN sandboxes s ON s.id = e.sandbox_id
	WHERE s.id = '$s1'")" t 'ready only once the epoch was live (live_at <= ready_at)'
diag "sandbox 1: guest up $(q "SELECT i.guest_ready_at FROM instances i WHERE id = '$i1'"), epoch live $(q "SELECT live_at FROM identity_epochs WHERE sandbox_id = '$s1'"), ready $(q "SELECT ready_at FROM sandboxes WHERE id = '$s1'")"
like "$(grep "instance $i1: identity endpoint: attested" "$STACK_DIR/bcd-1.log")" "from $a1" \
	'bcd forwarded the attestation from its tap address'
ok "$([ "$(metric attested)" -ge 1 ] && echo 0 || echo 1)" 'bcd_identity_requests_total{result="attested"}'
is "$(gx "$s1" 'systemctl is-active bc-identity.service')" active 'bc-identity.service runs in the guest'
is "$(gx "$s1" 'stat -c %U /proc/$(systemctl show -p MainPID --value bc-identity.service)')" bc-identity \
	'... as its own user bc-identity'
is "$(gx "$s1" 'stat -c "%U %a" /etc/sandbox/identity/bootstrap')" 'bc-identity 600' \
	'the bootstrap value is bc-identity 0600'
gx "$s1" 'cat /etc/sandbox/identity/bootstrap' >/dev/null
ok $((! $?)) '... unreadable by the sandbox account'
is "$(json_get "$(bcctl --format json identity recognize "$a1")" sandbox_id)" "$s1" \
	'Recognize(its address) names sandbox 1'
# the harness's activity from inside (docs/identity.md, "Running and idle")
gx "$s1" 'sudo -n -u bc-identity /usr/local/lib/bc/bc-identity state running' >/dev/null
ok $? 'the sandbox account reports running through sudo -u bc-identity bc-identity state'
is "$(json_get "$(sbx "$s1")" lifecycle)" running '... its lifecycle is running'
gx "$s1" 'sudo -n -u bc-identity /usr/local/lib/bc/bc-identity state idle' >/dev/null
is "$?/$(json_get "$(sbx "$s1")" lifecycle)" 0/idle '... then idle'
gx "$s1" 'cat /run/bc-identity/token' >/dev/null
ok $((! $?)) '... while the capability token stays unreadable by the sandbox account'

# -- replay from inside: the first guest sends its used value through bcd
b1=$(bootdata "$i1" | grep -oE 'bcb_[0-9a-f]{64}' | head -1)
like "$b1" '^bcb_' "the test knows sandbox 1's value (GetBootData as its node)"
replay=$(gx "$s1" "python3 -c 'import http.client as h; c = h.HTTPConnection(\"$E2E_GATEWAY\", 9470, timeout=20); c.request(\"POST\", \"/bc/identity/attest\", \"$b1\"); r = c.getresponse(); print(r.status, r.read().decode())'")
like "$replay" '^403 .*"reason": "bootstrap-used"' "a replay of the used value from inside the guest: 403 bootstrap-used ($replay)"

# -- a spoofing second guest: the first one's address, from its boot data
cat >"$W/spoof.ud" <<EOF
#cloud-config
write_files:
  - path: /usr/local/sbin/bc-spoof
    permissions: "0755"
    content: |
      #!/bin/sh
      ip addr add $a1/32 dev eth0
      python3 -c 'import socket; s = socket.socket(); s.settimeout(15); s.bind(("$a1", 0)); s.connect(("$E2E_GATEWAY", 9470)); print("connected")' >/var/tmp/spoof.out 2>&1
      echo rc=\$? >>/var/tmp/spoof.out
      ip addr del $a1/32 dev eth0
      chmod 644 /var/tmp/spoof.out
runcmd:
  - [/usr/local/sbin/bc-spoof]
EOF
tsp=$(jid "$(bcctl --format json sandbox-template create --name e2e-spoof --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID" --user-data-file "$W/spoof.ud")") || bail_out "spoof template"
s2=$(jid "$(bcctl --format json sandbox create --template "$tsp" --ttl 1h --task e2e-t2)") || bail_out "create 2"
i2=$(inst_of "$s2")
eventually "$E2E_BOOT_TIMEOUT" ready "$s2" || { diag "sandbox $s2 not ready"; console "$i2"; } >&2
ok $? 'the second guest attests itself from its own address (control)'
eventually 120 eval '[ -n "$(gx "$s2" "cat /var/tmp/spoof.out")" ]'
spoof=$(gx "$s2" 'cat /var/tmp/spoof.out')
diag "spoofing guest: $spoof"
unlike "$spoof" 'connected' "from the first guest's address it cannot even connect to bcd's endpoint (guards)"
like "$spoof" 'rc=1' '... its attempt failed'
is "$(q "SELECT count(*) FROM identity_epochs WHERE state = 'live' AND host(address) = '$a1'")" 1 \
	"the first guest's address holds exactly its own live epoch"
is "$(q "SELECT host(address) FROM identity_epochs WHERE sandbox_id = '$s2'")" "$(addr_of "$i2")" \
	"the second guest's epoch holds its own address"

# -- an expired value: the guest boots after its value expired
s3=$(jid "$(bcctl --format json sandbox create --template "$tmpl" --ttl 1h --task e2e-t3)") || bail_out "create 3"
q "UPDATE identity_epochs SET bootstrap_expires_at = now() - interval '1 second' WHERE sandbox_id = '$s3'" >/dev/null
i3=$(inst_of "$s3")
expired() { grep -q "attestation for instance $i3 .* refused: the bootstrap value of epoch .* has expired" "$STACK_DIR/ctl-1.log"; }
eventually "$E2E_BOOT_TIMEOUT" expired || console "$i3" >&2
ok $? 'a guest whose value expired is refused bootstrap-expired'
is "$(json_get "$(sbx "$s3")" state)/$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$s3'")" \
	starting/pending '... and its sandbox stays starting, its epoch pending'
bcctl sandbox delete "$s3" >/dev/null

# -- delete: revoke first, the instance only after the cache lifetime
t_del=$(date +%s%3N)
bcctl sandbox delete "$s1" >/dev/null || bail_out "delete 1"
gone() { ! bcctl identity recognize "$a1" >/dev/null 2>&1; }
eventually $((CACHE + 5)) gone
ok $? "Recognize stops answering for $a1 within the cache bound ($CACHE s)"
t_nf=$(date +%s%3N)
inst_deleted() { [ "$(q "SELECT state FROM instances WHERE id = '$i1'")" = deleted ]; }
eventually 300 inst_deleted
ok $? 'the instance is deleted'
ord=$(q "SELECT string_agg(type || '@' || to_char(created_at, 'HH24:MI:SS.MS'), ' ' ORDER BY created_at, id) FROM events
	WHERE (subject = 'sandbox/$s1' AND type = 'sandbox.identity.revoked') OR (subject = 'instance/$i1' AND type IN ('instance.deleting', 'instance.deleted'))")
diag "delete order: Delete at $t_del ms, Recognize NOT_FOUND by $t_nf ms; events: $ord"
diag "$(grep -E "sandbox $s1: (identity revoked|recognition cache lifetime passed)" "$STACK_DIR/ctl-1.log")"
like "$ord" '^sandbox\.identity\.revoked@.* instance\.deleting@.* instance\.deleted@' \
	'revoked first, then the instance deleting, then deleted'
is "$(q "SELECT (SELECT min(created_at) FROM events WHERE subject = 'instance/$i1' AND type = 'instance.deleting')
	>= (SELECT created_at FROM events WHERE subject = 'sandbox/$s1' AND type = 'sandbox.identity.revoked')
	+ interval '$CACHE seconds'")" t "the instance was deleted no sooner than $CACHE s after the revocation"

# -- a warm claim: bound, attests without a reboot
tw=$(jid "$(bcctl --format json sandbox-template create --name e2e-id-warm --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$IMAGE_ID" --warm-min 1 --warm-max 1)") || bail_out "warm template"
pooled() {
	w=$(q "SELECT id FROM instances WHERE warm_template_id = '$tw' AND state = 'paused' AND guest_ready_at IS NOT NULL
		AND desired_state <> 'deleted'")
	[ -n "$w" ]
}
eventually "$E2E_BOOT_TIMEOUT" pooled
ok $? "a booted warm guest is pooled ($w)"
t_claim=$(date +%s)
out=$(bcctl --format json sandbox create --template "$tw" --ttl 1h --task e2e-warm) || bail_out "claim: $out"
sw=$(jid "$out")
is "$(json_get "$out" warm)/$(json_get "$out" instance_id)/$(json_get "$out" lifecycle)" "true/$w/bound" \
	'the warm claim binds the pooled instance (not created on demand)'
eventually 300 ready "$sw" || console "$w" >&2
ok $? 'the claimed guest attests with the value the host handed over, and is ready'
is "$(q "SELECT state FROM identity_epochs WHERE sandbox_id = '$sw'")" live '... its epoch live'
ok "$([ "$(metric served)" -ge 1 ] && echo 0 || echo 1)" 'bcd handed the value over (served)'
is "$(grep -a -c 'BdsDxe: starting Boot' "$(e2e_console "$w")")" 1 'one boot on its serial console (the firmware started it once): no reboot'
# boot time = now - uptime (the guest's clocks stood still while paused, so
# this is later than the real boot, and still before the claim)
up=$(gx "$sw" 'echo $(( $(date +%s) - $(cut -d. -f1 /proc/uptime) ))')
ok "$([ -n "$up" ] && [ "$up" -lt "$t_claim" ] && echo 0 || echo 1)" "the guest booted before the claim ($up < $t_claim)"
is "$(json_get "$(bcctl --format json identity recognize "$(addr_of "$w")")" sandbox_id)" "$sw" 'Recognize names the warm sandbox'

bcctl sandbox delete "$s2" >/dev/null
bcctl sandbox delete "$sw" >/dev/null
done_testing
