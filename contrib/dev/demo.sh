#!/usr/bin/env bash
# demo.sh: `make demo`. A throwaway bc on this machine, in ./.demo: a private
# PostgreSQL cluster, one bc-controller, one bcd with the fake runtime, a
# pool, a flavor, an image and one running instance. Everything is left
# running, detached (pids in .demo/pids); `make stop` (contrib/dev/stop.sh)
# ends it. Running it again stops the old demo and starts a fresh one.
#
# Uses the binaries in $BC_BIN (default build/bin: `make demo` builds them
# first) and the harness in tests/lib/stack.sh.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
demo=$repo/.demo

say() { printf '%s\n' "$*"; }

if [ -d "$demo" ]; then
	say "demo: stopping the previous demo in $demo"
	bash "$repo/contrib/dev/stop.sh" >/dev/null || true
	old_pg=$(cat "$demo/pgdir" 2>/dev/null || true)
	case "$old_pg" in
	"$demo"/* | '') ;;
	*) rm -rf "$old_pg" ;;
	esac
	rm -rf "$demo"
fi

export BC_STACK_DIR=$demo BC_STACK_PERSIST=1
export BC_LOG_LEVEL=${BC_LOG_LEVEL:-info}
export BC_REPORT_INTERVAL_SECONDS=${BC_REPORT_INTERVAL_SECONDS:-10}
# shellcheck source=../../tests/lib/stack.sh
. "$repo/tests/lib/stack.sh"
TAP_DONE=1 # not a TAP file

give_up() {
	say "demo: $*" >&2
	local f
	for f in "$demo"/init.log "$demo"/ctl-*.log "$demo"/bcd-*.log; do
		[ -f "$f" ] && { say "---- $f" >&2; tail -n 25 "$f" >&2; }
	done
	bash "$repo/contrib/dev/stop.sh" >/dev/null 2>&1
	exit 1
}

say "demo: starting PostgreSQL, bc-controller and bcd (fake runtime) in $demo"
stack_up --controllers 1 --agents 1 --agent-capacity 8,16384,100 ||
	give_up "the stack did not come up"

say "demo: pool $POOL_ID, flavor $FLAVOR_NAME, node $(agent_node_id 1) ready"
img=$(stack_image_create demo-debian) || give_up "image create failed"
say "demo: image $img"
out=$(bcctl --format json instance create "${TENANT_ARGS[@]}" --pool "$POOL_ID" \
	--flavor "$FLAVOR_NAME" --image "$img" --key demo-1) || give_up "instance create failed: $out"
inst=$(json_get "$out" id)
say "demo: instance $inst created, waiting for it to run"
eventually 60 instance_state_is "$inst" running ||
	give_up "instance $inst is $(instance_state "$inst"), not running"

echo
bcctl --format table instance list "${TENANT_ARGS[@]}"
echo
cat <<EOT
The demo is running (logs and state in $demo). To use it:

  export BC_URL=$BC_URL
  export BC_TOKEN=$BC_TOKEN
  export BC_CA_FILE=$BC_CA_FILE
  export PATH=$BC_BIN:\$PATH

  (or: . $demo/env; export PATH=$BC_BIN:\$PATH)

  bcctl pool list
  bcctl node list
  bcctl flavor list
  bcctl instance get $inst
  bcctl instance create --pool $POOL_ID --flavor $FLAVOR_NAME --image $img
  bcctl --format json instance list
  bcctl instance delete $inst

Stop it with: make stop
EOT
