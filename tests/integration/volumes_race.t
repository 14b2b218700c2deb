# volumes_race.t: two replicas booking volumes concurrently on one host
# never book past its headroom. The fake runtime reports a volume store of
# its capacity_disk_gib (60 GiB, a reserve of 5 % but at least 2 GiB: 57
# GiB of headroom); 100 creates of 5 GiB, half through each replica, all at
# once: exactly the 11 that fit are made, the others are
# CAPACITY_UNAVAILABLE (volume-storage), and what is booked stays within
# the store. Every create locks the host's row and reads its headroom again
# under the lock (controller/volumes.c).
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 2 --agents 1 --agent-capacity 16,32768,60 || bail_out "stack_up failed"

q() { psql -d bc -XAtq -c "$1"; }
node=$(agent_node_id 1)
GIB=1073741824
stored() { [ "$(q "SELECT count(*) FROM host_volume_storage WHERE node_id = '$node'")" = 1 ]; }
eventually 20 stored
ok $? 'the host reported its volume store'
is "$(q "SELECT (available_bytes - reserved_bytes) / $GIB FROM host_volume_storage")" 57 \
	'57 GiB of headroom'

pids=()
for i in $(seq 1 100); do
	bcctl_n $((i % 2 + 1)) --format json sandbox-volume create --pool "$POOL_ID" --name "r$i" \
		--size 5 >"$STACK_DIR/r$i.out" 2>&1 &
	pids+=($!)
done
wait "${pids[@]}" # never a bare wait: the stack's daemons are children too
# A create that neither made a volume nor was refused for the store (a
# loaded machine: a deadline, or the per-principal rate limit's
# RESOURCE_EXHAUSTED) says so here and is sent again, one at a time, after
# the storm: the storm still ran every other create at once, and the retry
# must then be refused like the others (or it would be over-booking).
retried=0
for i in $(seq 1 100); do
	f=$STACK_DIR/r$i.out
	grep -q '"serial"\|volume-storage' "$f" && continue
	diag "r$i answered neither a volume nor volume-storage: $(head -c 300 "$f" | tr '\n' ' ')"
	retried=$((retried + 1))
	bcctl_n $((i % 2 + 1)) --format json sandbox-volume create --pool "$POOL_ID" --name "r$i" \
		--size 5 >"$f" 2>&1
done
ok "[ $retried -le 50 ]" "at most half of the creates were cut short by the load ($retried sent again)"
is "$(q "SELECT count(*) FROM volumes WHERE state = 'ready'")" 11 \
	'100 concurrent 5 GiB creates through two replicas: exactly the 11 that fit'
is "$(grep -l 'volume-storage' "$STACK_DIR"/r*.out | wc -l)" 89 \
	'... the 89 others CAPACITY_UNAVAILABLE volume-storage'
is "$(q "SELECT sum(disk_gib) FROM allocations WHERE node_id = '$node' AND owner_kind = 'volume' AND released_at IS NULL")" \
	55 '55 GiB booked, within the 57 of the store'
is "$(q "SELECT count(DISTINCT created_by) FROM volumes")" 1 'one caller'
made1=$(grep -l '"serial"' $(for i in $(seq 2 2 100); do echo "$STACK_DIR/r$i.out"; done) | wc -l)
made2=$(grep -l '"serial"' $(for i in $(seq 1 2 100); do echo "$STACK_DIR/r$i.out"; done) | wc -l)
diag "made through replica 1: $made1, replica 2: $made2"
is $((made1 + made2)) 11 'the answers say the same'

done_testing
