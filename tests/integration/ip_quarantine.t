# ip_quarantine.t: an address released from an instance is not leased to
# another one for ip_quarantine_seconds (default 120 s; migration 0010,
# node_place.c lease_try): a host cut off from the controller may still run
# the instance that held it until its fence acts. A /29 pool has five
# leasable addresses: five instances fill it (a sixth is refused
# ipam-exhausted, the control that the pool really is full); one is
# deleted and its lease goes; a create right after must be refused too
# (before the quarantine it got the released address), and once the
# quarantine has passed (aged in SQL) the address is leased again.
. "$(dirname "$0")/../lib/stack.sh"

export BC_POOL_SUBNET=10.81.0.0/29 BC_POOL_GATEWAY=10.81.0.1
stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create quarantine-img) || bail_out "no image"

q() { psql -d bc -XAtq -c "$1"; }
mk() {
	bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" \
		--image "$img" "$@" 2>"$STACK_DIR/err"
}
ids=()
for i in 1 2 3 4 5; do
	out=$(mk --wait 30s) || bail_out "instance $i: $(cat "$STACK_DIR/err")"
	ids+=("$(json_get "$out" id)")
done
is "$(q "SELECT count(*) FROM ip_leases WHERE pool_id = '$POOL_ID'")" 5 'five instances hold the five addresses'
mk >/dev/null
ok "[ $? -ne 0 ]" 'a sixth is refused'
like "$(cat "$STACK_DIR/err")" 'ipam-exhausted' '... ipam-exhausted: the pool is full'

victim=${ids[0]}
addr=$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$victim'")
bcctl instance delete "$victim" >/dev/null || bail_out "delete"
eventually 30 eval '[ "$(q "SELECT state FROM instances WHERE id = '"'$victim'"'")" = deleted ]'
ok $? "an instance deleted"
is "$(q "SELECT count(*) FROM ip_leases WHERE address = '$addr'")" 0 "... its address $addr released"

out=$(mk)
rc=$?
ok "[ $rc -ne 0 ]" 'a create right after is refused: the released address is in quarantine'
like "$(cat "$STACK_DIR/err")" 'ipam-exhausted' '... ipam-exhausted'
is "$(q "SELECT count(*) FROM ip_leases WHERE address = '$addr'")" 0 '... nobody holds the address'

q "UPDATE ip_quarantine SET released_at = now() - interval '1 day' WHERE address = '$addr'" >/dev/null
out=$(mk --wait 30s)
ok $? 'past the quarantine a create succeeds'
id=$(json_get "$out" id)
is "$(q "SELECT host(address) FROM ip_leases WHERE instance_id = '$id'")" "$addr" "... with the released address"

done_testing
