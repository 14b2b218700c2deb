#!/usr/bin/env bash
# stop.sh: `make stop`. Stops what `make demo` started in ./.demo: the bcd
# agents, the bc-controller replicas (TERM, KILL after 10 s), the demo's VMs
# (destroyed and undefined), its bridge and taps, the https image server and
# PostgreSQL.
# The directory (logs, state) stays until the next `make demo`. Safe to run
# when nothing runs.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
demo=$repo/.demo

if [ ! -d "$demo" ]; then
	echo "stop: no demo in $demo"
	exit 0
fi

export BC_STACK_PERSIST=1
# shellcheck source=../../tests/lib/stack.sh
. "$repo/tests/lib/stack.sh"
# shellcheck source=../../tests/lib/https.sh
. "$repo/tests/lib/https.sh"
TAP_DONE=1 # not a TAP file

stack_attach "$demo" || exit 1
stack_down
rc=$?
https_down "$demo/https"
echo "stop: demo stopped (logs and state kept in $demo)"
exit $rc
