# warm_ready.t: warm means booted, ready means reachable (libvirt, the real
# guest image, TCG when there is no usable /dev/kvm).
#
#   - cold: a sandbox stays starting while its instance runs and its guest
#     boots, and is ready only once the guest reported up: port 22 answers
#     from the host the moment the sandbox says ready; its readyAt is not
#     before the instance's guestReadyAt;
#   - warm: the pool's instance is paused only after its guest came up
#     (cloud-init's final message is on its console while it is paused); a
#     claim answers ready at once, warm, and the guest's port 22 answers from
#     the host within 2 s of that answer; the guest's clock is right after
#     the resume;
#   - a second guest cannot mark the first one up: its signal for the other
#     instance is counted other-instance and changes nothing;
#   - a warm guest that never reports up (its cloud-init never finishes) is
#     drained from the pool with the reason guest-never-ready;
#   - while one instance is being created, a pause and a resume of another
#     instance on the same host complete within their usual time.
. "$(dirname "$0")/lib.sh"

e2e_need
mport=$(free_tcp_port)
export BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$mport"
# a warm guest that never comes up is drained after this long (TCG boots
# take a minute or two on a busy 2-core machine)
export BC_CTL_EXTRA_CONF="warm_boot_timeout_seconds = 240"
e2e_up --agents 1 --agent-capacity 8,8192,50 || bail_out "the stack did not come up"
pass "stack with the libvirt runtime, image $IMAGE_ID served at $HTTPS_URL"
q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
metric() { curl -s "http://127.0.0.1:$mport/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
ms() { date +%s%3N; }

W=$STACK_DIR/e2e
mkdir -p "$W"
ssh-keygen -q -t ed25519 -N '' -C e2e -f "$W/key" || bail_out "ssh-keygen"
cat >"$W/user-data" <<EOT
#cloud-config
ssh_authorized_keys:
  - $(cat "$W/key.pub")
EOT
# cloud-init's final stage never ends: the guest never reports up
cat >"$W/never" <<EOT
#cloud-config
runcmd:
  - [sleep, "100000"]
EOT
tmpl() { # NAME [ARGS...]: a template id
	local name=$1 out
	shift
	out=$(bcctl --format json sandbox-template create --name "$name" --pool "$POOL_ID" \
		--flavor "$FLAVOR_NAME" --image "$IMAGE_ID" "$@") || { diag "template: $out"; return 1; }
	jid "$out"
}
port22() { timeout 1 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }
guest_ip() { q "SELECT host(address) FROM ip_leases WHERE instance_id = '$1' LIMIT 1"; }
SSHO=(-i "$W/key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o ConnectTimeout=10 -o LogLevel=ERROR)
gssh() { local ip=$1; shift; ssh "${SSHO[@]}" "debian@$ip" "$@"; }

# the never-ready pool first: its timeout runs while the rest goes on
tn=$(tmpl e2e-never --user-data-file "$W/never" --warm-min 1 --warm-max 1) || bail_out "never template"

# -- cold: starting until the guest is up, then ready and reachable
tc=$(tmpl e2e-cold --user-data-file "$W/user-data") || bail_out "cold template"
out=$(bcctl --format json sandbox create --template "$tc" --ttl 1h) || bail_out "cold sandbox: $out"
sc=$(jid "$out")
ic=$(json_get "$out" instance_id)
like "$sc" '^sbx_' "a cold sandbox ($sc on $ic)"
saw_starting_running=0
reach_at_ready=''
deadline=$(($(date +%s) + E2E_BOOT_TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ]; do
	st=$(q "SELECT s.state || ' ' || i.state FROM sandboxes s JOIN instances i ON i.id = s.instance_id WHERE s.id = '$sc'")
	[ "$st" = "starting running" ] && saw_starting_running=1
	if [ "${st%% *}" = ready ]; then
		ipc=$(guest_ip "$ic")
		port22 "$ipc" && reach_at_ready=yes || reach_at_ready=no
		break
	fi
	sleep 0.5
done
is "${st%% *}" ready "the cold sandbox becomes ready"
is "$saw_starting_running" 1 'it was still starting while its instance already ran (the guest booting)'
is "$reach_at_ready" yes "the guest's port 22 answers from the host when it says ready ($ipc)"
out=$(bcctl --format json sandbox get "$sc")
gra=$(json_get "$out" guest_ready_at)
rda=$(json_get "$out" ready_at)
ok "$([ -n "$gra" ] && [ -n "$rda" ] && [ "$rda" -ge "$gra" ] && echo 0 || echo 1)" \
	"its readyAt ($rda) is not before its guest's guestReadyAt ($gra)"

# -- a second guest cannot mark the first one up
gw=$E2E_GATEWAY
before_other=$(metric 'bcd_guest_ready_signals_total{result="other-instance"}')
mark_ic=$(q "SELECT guest_ready_at FROM instances WHERE id = '$ic'")
in_never=$(q "SELECT id FROM instances WHERE warm_template_id = '$tn' AND desired_state <> 'deleted' LIMIT 1")
# the cold guest posts for the never-ready pool's guest (not up: it must stay so)
gssh "$ipc" "exec 3<>/dev/tcp/$gw/9469 && printf 'POST /bc/ready/$in_never HTTP/1.1\\r\\nHost: $gw\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n' >&3 &&
	read -r -t 5 proto code rest <&3 && echo \$code" >"$W/other.code" 2>>"$W/ssh.err"
diag "the other guest's post answered $(cat "$W/other.code") $(tail -n 2 "$W/ssh.err")"
after_other=$(metric 'bcd_guest_ready_signals_total{result="other-instance"}')
is "$((${after_other:-0} - ${before_other:-0}))" 1 "a guest's signal for another instance is counted other-instance"
sleep 2
is "$(q "SELECT coalesce(guest_ready_at::text, 'none') FROM instances WHERE id = '$in_never'")" none \
	"... and does not mark that instance up ($in_never)"
is "$(q "SELECT guest_ready_at FROM instances WHERE id = '$ic'")" "$mark_ic" "... nor changes the sender's own mark"

# -- warm: booted before paused, reachable within 2 s of the claim
tw=$(tmpl e2e-warm --user-data-file "$W/user-data" --warm-min 1 --warm-max 1) || bail_out "warm template"
warm_ready() {
	iw=$(q "SELECT id FROM instances WHERE warm_template_id = '$tw' AND state = 'paused' AND guest_ready_at IS NOT NULL AND desired_state <> 'deleted' LIMIT 1")
	[ -n "$iw" ]
}
eventually "$E2E_BOOT_TIMEOUT" warm_ready
ok $? "the pool's instance is paused with its guest up ($iw)"
is "$(e2e_domstate "$iw")" paused 'libvirt holds the domain paused'
e2e_console_has "$iw" 'Cloud-init v\. .* finished'
ok $? "its console shows cloud-init finished before the pause"
sleep 20 # the guest's clock stands still while it is paused
t0=$(ms)
out=$(bcctl --format json sandbox create --template "$tw" --ttl 1h --wait 20s) || bail_out "claim: $out"
t1=$(ms)
sw=$(jid "$out")
is "$(json_get "$out" state):$(json_get "$out" warm)" ready:true "the claim answers ready, warm, in $((t1 - t0)) ms"
is "$(json_get "$out" instance_id)" "$iw" 'with the booted instance'
ipw=$(guest_ip "$iw")
while ! port22 "$ipw" && [ $(($(ms) - t1)) -lt 10000 ]; do sleep 0.05; done
t2=$(ms)
# A host loaded far beyond its CPUs (load average over 4 per CPU: a
# parallel build beside the tests; the guests alone stay well below)
# starves the resumed TCG guest's vCPU: then a miss is reported as TODO with
# the load and the figure, never passed silently.
read -r load1 _ </proc/loadavg
ncpu=$(nproc)
rc22=$([ $((t2 - t1)) -le 2000 ] && echo 0 || echo 1)
msg22="the claimed guest's port 22 answers from the host $((t2 - t1)) ms after the claim's answer (<= 2000)"
if [ "$rc22" = 0 ] || awk -v l="$load1" -v n="$ncpu" 'BEGIN { exit !(l <= 4 * n) }'; then
	ok "$rc22" "$msg22"
else
	todo "$rc22" "$msg22" "host loaded: load average $load1 on $ncpu CPUs"
fi
# the guest's clock read through ssh, against the host's clock before and
# after the call: how far the reading lies outside that window (0 inside
# it; the call itself takes seconds in a TCG guest on a loaded host, so
# the host's time after it is no reference). A guest still on its paused
# clock reads >= 20 s before the window.
ha=$(ms)
gt=$(gssh "$ipw" 'date +%s%3N' 2>>"$W/ssh.err")
hb=$(ms)
skew=''
if [ -n "$gt" ]; then
	if [ "$gt" -lt "$ha" ]; then skew=$((ha - gt)); elif [ "$gt" -gt "$hb" ]; then skew=$((gt - hb)); else skew=0; fi
fi
diag "guest clock right after the resume: ${skew:-?} ms outside the host's [before, after] window of the ssh call ($((hb - ha)) ms; paused >= 20 s)"
ok "$([ -n "$skew" ] && [ "$skew" -le 2000 ] && echo 0 || echo 1)" \
	"the resumed guest's clock is within 2 s of the host's (${skew:-?} ms outside the call's window)"
bcctl sandbox-template update "$tw" --warm-min 0 --warm-max 0 >/dev/null 2>&1

# -- the never-ready guest is drained with its reason
drained() { q "SELECT 1 FROM events WHERE subject = 'instance/$in_never' AND data::text LIKE '%guest-never-ready%'" | grep -q 1; }
eventually 600 drained
ok $? "the warm guest that never reported up is drained with reason guest-never-ready ($in_never)"
bcctl sandbox-template delete "$tn" >/dev/null 2>&1

# -- a pause and a resume of one instance while another is created
ip_=$(e2e_instance_create --user-data-file "$W/user-data") || bail_out "plain instance"
running() { [ "$(e2e_domstate "$ip_")" = running ] && [ "$(q "SELECT state FROM instances WHERE id = '$ip_'")" = running ]; }
eventually "$E2E_BOOT_TIMEOUT" running
ok $? "a plain instance runs ($ip_)"
domwait() { # ID STATE: ms until libvirt shows STATE (up to 120 s)
	local s; s=$(ms)
	while [ "$(e2e_domstate "$1")" != "$2" ] && [ $(($(ms) - s)) -lt 120000 ]; do sleep 0.05; done
	echo $(($(ms) - s))
}
bcctl instance pause "$ip_" >/dev/null
usual_p=$(domwait "$ip_" paused)
bcctl instance resume "$ip_" >/dev/null
usual_r=$(domwait "$ip_" running)
diag "usual: pause $usual_p ms, resume $usual_r ms"
e2e_instance_create >"$W/new.id" || bail_out "second instance"
bcctl instance pause "$ip_" >/dev/null
busy_p=$(domwait "$ip_" paused)
bcctl instance resume "$ip_" >/dev/null
busy_r=$(domwait "$ip_" running)
nid=$(cat "$W/new.id")
diag "while $nid was created: pause $busy_p ms, resume $busy_r ms"
# before bcd gave each thread its own libvirt connection and listed by name
# while a call runs (docs/agent.md, "A start or a destroy never holds the
# pass"), the pass waited for the worker's domain start on their shared
# connection (seen: pause 3.4 s and 5.7 s against 0.17 s, resume 2.6 s and
# 5.8 s against 0.5 s; with the fix: 319 vs 165 ms, 276 vs 237 ms)
ok "$([ "$busy_p" -le $((usual_p + 2000)) ] && echo 0 || echo 1)" \
	"a pause during another instance's create takes its usual time ($busy_p vs $usual_p ms)"
ok "$([ "$busy_r" -le $((usual_r + 2000)) ] && echo 0 || echo 1)" \
	"and so does a resume ($busy_r vs $usual_r ms)"
new_runs() { [ "$(q "SELECT state FROM instances WHERE id = '$nid'")" = running ]; }
eventually "$E2E_BOOT_TIMEOUT" new_runs
ok $? "the instance being created runs too ($nid)"

bcctl sandbox delete "$sc" >/dev/null
bcctl sandbox delete "$sw" >/dev/null
done_testing
