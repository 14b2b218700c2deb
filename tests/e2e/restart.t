# restart.t: bcd is SIGKILLed while three real guests run, then started
# again. Proves the agent's restart rule on real VMs: every domain is
# adopted in place (the same QEMU pids, one QEMU per instance, no firmware
# reset on any console), nothing is created, started, stopped or destroyed
# again, and nothing leaks: exactly the three taps on the bridge, three
# instance folders, the same addresses, the guards naming the same taps.
. "$(dirname "$0")/lib.sh"

e2e_need
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"

ids=()
for k in 1 2 3; do
	id=$(e2e_instance_create --key "restart-$k")
	[ -n "$id" ] && ids+=("$id")
done
is "${#ids[@]}" 3 "three instances created through the API"
[ ${#ids[@]} -eq 3 ] || bail_out "no instances"

all_running() {
	local id
	for id in "${ids[@]}"; do
		instance_state_is "$id" running && [ -n "$(e2e_qemu_pid "$id")" ] || return 1
	done
}
eventually "$E2E_BOOT_TIMEOUT" all_running
ok $? "all three running, each with its QEMU"

# the firmware prints this once per boot of the domain
fw_started() {
	local id
	for id in "${ids[@]}"; do
		e2e_console_has "$id" 'BdsDxe: starting Boot' || return 1
	done
}
eventually "$E2E_BOOT_TIMEOUT" fw_started
ok $? "every guest's firmware started booting"

declare -A pid ip tap
for id in "${ids[@]}"; do
	pid[$id]=$(e2e_qemu_pid "$id")
	json=$(e2e_instance_json "$id")
	ip[$id]=$(printf '%s' "$json" | jq -r '.nics[0].ipv4 // empty')
	tap[$id]=$(printf '%s' "$json" | jq -r '.nics[0].name // empty')
done
bridge_taps() { ip -o link show master "$E2E_BRIDGE" 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort; }
want_taps=$(for id in "${ids[@]}"; do echo "${tap[$id]}"; done | sort)
is "$(bridge_taps)" "$want_taps" "before: the three taps on $E2E_BRIDGE"
log=$STACK_DIR/bcd-1.log

# ------------------------------------------------------------ SIGKILL
agent_kill 1 KILL
ok "! pgrep -f '$STACK_DIR/bcd-1.conf' >/dev/null" "bcd is gone (SIGKILL)"
alive=0
for id in "${ids[@]}"; do kill -0 "${pid[$id]}" 2>/dev/null && alive=$((alive + 1)); done
is "$alive" 3 "the three QEMU processes keep running without bcd"
mark=$(wc -l <"$log")

agent_start 1
adopted_all() {
	local id
	for id in "${ids[@]}"; do
		tail -n +"$((mark + 1))" "$log" | grep -q "instance $id: adopted (running)" || return 1
	done
}
eventually 120 adopted_all
ok $? "the restarted bcd adopted the three running domains"
stack_wait_nodes_ready 1 120
ok $? "the node is ready again"
# a full converge pass and a report after the adoption
reported() { [ "$(tail -n +"$((mark + 1))" "$log" | grep -c 'report: generation')" -ge 2 ]; }
eventually 120 reported
ok $? "bcd reported after the restart"

after=$(tail -n +"$((mark + 1))" "$log")
for id in "${ids[@]}"; do
	is "$(e2e_qemu_pid "$id")" "${pid[$id]}" "$id: the same QEMU pid ${pid[$id]}"
	is "$(pgrep -f -c "guest=$id,")" 1 "$id: exactly one QEMU"
	is "$(grep -a -c 'BdsDxe: starting Boot' "$(e2e_console "$id")")" 1 "$id: booted once (no reset)"
	unlike "$after" "instance $id: (created|start|stop|destroyed|pause|resume)" "$id: not created, started, stopped or destroyed again"
	is "$(instance_state "$id")" running "$id: the controller still shows it running"
	is "$(e2e_instance_json "$id" | jq -r '.nics[0].ipv4 // empty')" "${ip[$id]}" "$id: the same address ${ip[$id]}"
done
is "$(bridge_taps)" "$want_taps" "after: exactly the same three taps on the bridge"
is "$(ls "$STACK_DIR/data-1/instances" | sort)" "$(printf '%s\n' "${ids[@]}" | sort)" "three instance folders, no other"
is "$(stack_domains | sort)" "$(printf '%s\n' "${ids[@]}" | sort)" "libvirt holds exactly the three domains of this node"
rules=$(nft list table bridge bcd_instances 2>/dev/null)
for id in "${ids[@]}"; do
	like "$rules" "${tap[$id]}" "the guards still name ${tap[$id]}"
done
ips=$(for id in "${ids[@]}"; do echo "${ip[$id]}"; done | sort -u | wc -l)
is "$ips" 3 "three distinct addresses"
done_testing
