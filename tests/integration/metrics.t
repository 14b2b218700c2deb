# metrics.t: bcd's GET /metrics (metrics_listen): the spec it applied and its
# instances by state follow what the controller sees; anything but /metrics
# is 404.
. "$(dirname "$0")/../lib/stack.sh"

mport=$(free_tcp_port)
export BC_AGENT_EXTRA_CONF="metrics_listen = 127.0.0.1:$mport"
stack_up --controllers 1 --agents 1 --agent-capacity 4,8192,50 || bail_out "stack_up failed"
img=$(stack_image_create metrics-img) || bail_out "no image"
scrape() { curl -s --max-time 2 "http://127.0.0.1:$mport/metrics"; }

like "$(scrape)" 'bcd_up 1' 'bcd serves /metrics'
like "$(scrape)" 'bcd_net_enforced 0' 'network = none is shown as not enforced'
out=$(bcctl --format json instance create --pool "$POOL_ID" --flavor "$FLAVOR_NAME" --image "$img" --wait 20s)
is "$(json_get "$out" state)" running 'an instance runs'
running_one() { scrape | grep -qx 'bcd_instances{state="running"} 1'; }
eventually 10 running_one
ok $? 'bcd_instances{state="running"} is 1'
gen=$(psql -d bc -XAtq -c "SELECT spec_generation FROM nodes")
caught_up() { scrape | grep -qx "bcd_spec_applied_generation $gen"; }
eventually 10 caught_up
ok $? "bcd_spec_applied_generation is the node's generation ($gen)"
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/other")" 404 'another path is 404'

done_testing
