# pg.t: self-test of tests/lib/pg.sh (prove --exec bash tests/lib/*.t):
# a real throwaway PostgreSQL 15 cluster, started, reused, stopped, restarted.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tap.sh"
. "$here/pg.sh"

[ -x "$PG_BIN/initdb" ] || skip_all "no PostgreSQL 15 in $PG_BIN"
d=$(mktemp -d "${TMPDIR:-/tmp}/pg-selftest.XXXXXX")
chmod 0755 "$d"
tap_on_exit rm -rf "$d"

pg_start "$d/pg"
ok $? 'pg_start'
like "$PGPORT" '^[0-9]+$' "a private port ($PGPORT)"
isnt "$PGPORT" 5432 'not the default port'
is "$PGHOST" "$d/pg" 'PGHOST is the socket directory'
is "$PGUSER" postgres 'PGUSER'
ok "[ -S '$d/pg/.s.PGSQL.$PGPORT' ]" 'the socket is in the directory'
q() { psql -X -At -d postgres -c "$1"; }
is "$(q 'show fsync')" off fsync
is "$(q 'show synchronous_commit')" off synchronous_commit
is "$(q 'show full_page_writes')" off full_page_writes
is "$(q 'show max_connections')" 300 max_connections
is "$(psql -X -At -h 127.0.0.1 -d postgres -c 'select 1')" 1 'trust on 127.0.0.1'
is "$(stat -c %U "$d/pg/data")" postgres 'the cluster belongs to postgres'

pg_createdb bc
ok $? 'pg_createdb'
pg_createdb bc
ok $? 'pg_createdb of an existing database'
psql -X -q -d bc -c 'create table t (x int); insert into t values (42)'
pg_createdb bc2 bc
ok $? 'pg_createdb from a template'
is "$(psql -X -At -d bc2 -c 'select x from t')" 42 'the template was copied'

p1=$PGPORT
pg_start "$d/pg"
ok $? 'pg_start on a running cluster'
is "$PGPORT" "$p1" 'reuses it on the same port'

pg_stop "$d/pg"
ok $? 'pg_stop'
ok "! '$PG_BIN/pg_isready' -q -h '$d/pg' -p $p1" 'the server is gone'
ok "[ ! -e '$d/pg/data/postmaster.pid' ]" 'no pid file left'
pg_stop "$d/pg"
ok $? 'pg_stop again'

pg_start "$d/pg"
ok $? 'pg_start of a stopped cluster'
is "$PGPORT" "$p1" 'on its old port'
is "$(psql -X -At -d bc2 -c 'select x from t')" 42 'the data is kept'

# a port taken by someone else: the restart moves
pg_stop "$d/pg"
exec 9> >(exec perl -MIO::Socket::INET -e '
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0],
		Listen => 1, ReuseAddr => 1) or die "bind: $!";
	$| = 1; print "bound\n"; my $x = <STDIN>;' "$p1" >"$d/squat.log" 2>&1)
eventually 5 grep -qs bound "$d/squat.log"
pg_start "$d/pg"
ok $? 'pg_start while its old port is taken'
isnt "$PGPORT" "$p1" "moved to another port ($PGPORT)"
exec 9>&-

# a stale pid file of a killed server does not block a start
kill -KILL "$(head -n 1 "$d/pg/data/postmaster.pid")"
eventually 5 bash -c "! '$PG_BIN/pg_isready' -q -h '$d/pg' -p $PGPORT"
pg_start "$d/pg"
ok $? 'pg_start after the server was killed'
is "$(psql -X -At -d bc2 -c 'select x from t')" 42 'the data survived'

done_testing
