# event_catalog.t: every event type the controller can publish (each type
# named in controller/*.c and migrations/*.sql, and the instance states a
# host reports, which node_report.c publishes as 'instance.' || state) is
# documented in docs/ and has its data's keys checked against a real stack
# by an integration test: a want table entry (event_payloads.t,
# event_payloads_iam.t), an event_keys check (tests/lib/stack.sh) or a
# "TYPE keys" loop entry. A new type without both fails here. No stack.
. "$(dirname "$0")/../lib/tap.sh"

cd "$(dirname "$0")/../.." || bail_out "no checkout"
P='instance|sandbox|node|tenant|identity|token|delegation|policy|quota|offer|pool|secret|tunnel'
types=$({
	grep -ohE "\"($P)\.[a-z][a-z.-]*\"" controller/*.c | tr -d '"'
	grep -ohE "'($P)\.[a-z][a-z.-]*'" controller/*.c migrations/*.sql | tr -d "'"
	# node_report.c: 'instance.' || state, for each state a host reports
	printf 'instance.%s\n' running paused stopped error
} | grep -vE '\.(h|c|conf)$' | LC_ALL=C sort -u)
n=$(printf '%s\n' "$types" | grep -c .)
ok "[ $n -ge 40 ]" "$n event types found in the sources" || diag "$types"
grep -q "'instance.' || u.state" controller/node_report.c
ok $? "node_report.c still publishes instance.<state> (else update this test's list)"

for t in $types; do
	short=".${t#*.}"
	if grep -qF "\`$t\`" docs/*.md ||
		{ [ "${t%%.*}" = sandbox ] && grep -qF "\`$short\`" docs/sandboxes.md; }; then
		pass "$t is documented"
	else
		fail "$t is documented (no \`$t\` in docs/)"
	fi
	if grep -qE "(\[\"|\"|event_keys )${t//./\\.}[ \"]" tests/integration/*.t; then
		pass "$t: a test checks its data's keys"
	else
		fail "$t: a test checks its data's keys (no want entry, event_keys or loop entry)"
	fi
done

done_testing
