#!/bin/bash
# db_cache.t: the controller's prepared-statement cache (controller/db.c)
# never runs a statement other than the text it is given. It keys statements
# by the text's address; a text built at run time can land at an address an
# earlier, freed text had (snapshots' deletion once did: PostgreSQL then
# answered "bind message supplies 1 parameters, but prepared statement
# requires 0", and with equal parameter counts would have run the old
# statement). The driver (tests/integration/dbdrv) rewrites one buffer in
# place on a real PostgreSQL.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/tap.sh"
. "$here/../lib/pg.sh"

BC_BIN=${BC_BIN:-$(cd "$here/../.." && pwd)/build/bin}
DRV=$BC_BIN/../tests/integration/dbdrv
ok "test -x '$DRV'" 'the statement cache driver is built'
d=$(mktemp -d "${TMPDIR:-/tmp}/bc-dbcache.XXXXXX")
chmod 0755 "$d"
tap_on_exit rm -rf "$d"
pg_start "$d/pg" || bail_out 'pg_start'
pg_createdb bc || bail_out 'pg_createdb'

out=$(BC_LOG_LEVEL=error "$DRV" "host=$PGHOST port=$PGPORT dbname=bc user=postgres" 2>"$d/err")
is "$?" 0 'the driver ran'
printf '%s\n' "$out" | sed 's/^/# /' >&2
ans() { printf '%s\n' "$out" | awk -v s="$1" '$1 == s { sub(/^[^ ]+ /, ""); print }'; }
is "$(ans first)" first 'a text at an address: its answer'
is "$(ans literal)" literal 'a string literal beside it'
is "$(ans second)" second 'another text at the same address runs the new text, not the old statement'
is "$(ans third)" 'the third' '... with another parameter count too'
is "$(ans again)" second 'a text seen before, at the same address again'
is "$(ans literal-again)" literal 'the literal still runs its own statement'
grep -q "address now holds another text" "$d/err"
ok $? 'the mix-up is logged as an error (a statement that is not a literal)'
grep -q 'bind message supplies' "$d/pg/postgres.log"
isnt "$?" 0 'PostgreSQL never saw a parameter count that does not fit'
done_testing
