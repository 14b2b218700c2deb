# sandbox_ca.t: the deployment's sandbox SSH CA (controller/sandbox_ca.c)
# with a real PostgreSQL and no stack:
# - `bc-controller init` makes the ed25519 key (0600) and its public line
#   (0644) that ssh-keygen reads, the line holding the key's own public half
#   (derived apart by openssl); a second init keeps the same key;
# - `pki add-sandbox-ca` refuses to replace it (exit 1, the key unchanged)
#   and, once it is gone, adds a new one (no database needed) and prints
#   the same line it wrote; a key path in a missing folder is created;
# - sandbox_account: a POSIX user name is accepted, anything else refused
#   at config load, naming the key.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/pg.sh"

: "${BC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
if [ -z "${BC_BIN:-}" ]; then
	BC_BIN=$BC_SRC/build/asan/bin
	[ -x "$BC_BIN/bc-controller" ] || BC_BIN=$BC_SRC/build/bin
fi
CTL=$BC_BIN/bc-controller
[ -x "$CTL" ] || bail_out "no bc-controller in $BC_BIN (run make or make asan)"
command -v ssh-keygen >/dev/null || bail_out "ssh-keygen is needed (openssh-client)"

TMP=$(mktemp -d)
tap_on_exit rm -rf "$TMP"
chmod 755 "$TMP"
pg_start "$TMP/pg" || bail_out "pg_start failed"
pg_createdb bc || bail_out "createdb failed"
cat >"$TMP/ctl.conf" <<CONF
database = host=$TMP/pg port=$PGPORT dbname=bc user=postgres
pki_dir = $TMP/pki
migrations_dir = $BC_SRC/migrations
CONF
key=$TMP/pki/sandbox-ssh-ca.key
pub=$TMP/pki/sandbox-ssh-ca.pub

# the raw ed25519 public key of a PKCS#8 file, base64, by openssl alone
raw_pub() { openssl pkey -in "$1" -pubout -outform DER | tail -c 32 | base64 -w0; }
# the same 32 bytes from an OpenSSH line (blob: string type, string key)
line_pub() { awk '{print $2}' "$1" | base64 -d | tail -c 32 | base64 -w0; }

"$CTL" init --config "$TMP/ctl.conf" >"$TMP/init.out" 2>&1
ok $? 'bc-controller init succeeds'
is "$(stat -c %a "$key" 2>/dev/null)" 600 'init made the sandbox SSH CA key, mode 0600'
is "$(stat -c %a "$pub" 2>/dev/null)" 644 '... and its public line, mode 0644'
like "$(cat "$pub")" '^ssh-ed25519 [A-Za-z0-9+/]+=* bc sandbox SSH CA$' '... one ssh-ed25519 line'
like "$(ssh-keygen -l -f "$pub" 2>&1)" '^256 SHA256:.*\(ED25519\)$' '... that ssh-keygen reads'
like "$(raw_pub "$key")" '^[A-Za-z0-9+/]{43}=$' 'openssl reads the key file as ed25519'
is "$(line_pub "$pub")" "$(raw_pub "$key")" '... whose public half the line holds'
like "$(cat "$TMP/init.out")" "wrote the sandbox SSH CA $key" 'init said so'
sum1=$(sha256sum "$key")

"$CTL" init --config "$TMP/ctl.conf" >"$TMP/init2.out" 2>&1
ok $? 'a second init succeeds'
is "$(sha256sum "$key")" "$sum1" '... and keeps the same CA key'

"$CTL" pki add-sandbox-ca --config "$TMP/ctl.conf" >"$TMP/add.out" 2>&1
is $? 1 'pki add-sandbox-ca refuses when the deployment has one'
like "$(cat "$TMP/add.out")" 'never replaced' '... saying it is never replaced'
is "$(sha256sum "$key")" "$sum1" '... the key unchanged'

rm -f "$key" "$pub"
"$CTL" pki add-sandbox-ca --pki-dir "$TMP/pki" >"$TMP/add2.out" 2>"$TMP/add2.err"
ok $? 'pki add-sandbox-ca adds one to a deployment without (no database key needed)'
is "$(stat -c %a "$key" 2>/dev/null)" 600 '... key mode 0600'
is "$(tail -n 1 "$TMP/add2.out")" "$(cat "$pub")" '... printing the public line it wrote'
is "$(line_pub "$pub")" "$(raw_pub "$key")" '... of that key'
isnt_sum=$(sha256sum "$key")
ok '[ "$isnt_sum" != "$sum1" ]' '... a new key'

"$CTL" pki add-sandbox-ca --pki-dir "$TMP/pki" --sandbox-ca-key-file "$TMP/other/dir/ca.key" \
	>"$TMP/add3.out" 2>&1
ok $? 'sandbox_ca_key_file in a missing folder'
is "$(stat -c %a "$TMP/other/dir/ca.key" 2>/dev/null)" 600 '... key there, mode 0600'
like "$(ssh-keygen -l -f "$TMP/other/dir/ca.pub" 2>&1)" 'ED25519' '... public line beside it'

"$CTL" pki --pki-dir "$TMP/pki" >"$TMP/usage.out" 2>&1
is $? 1 'pki without a verb: usage'
like "$(cat "$TMP/usage.out")" 'add-sandbox-ca' '... listing add-sandbox-ca'

for good in sandbox dev-user _ci9; do
	"$CTL" pki add-sandbox-ca --pki-dir "$TMP/pki" --sandbox-account "$good" >"$TMP/acc.out" 2>&1
	unlike "$(cat "$TMP/acc.out")" 'sandbox_account' "sandbox_account $good is accepted"
done
for bad in Root 9lives 'a b' 'a.b' ''; do
	"$CTL" pki add-sandbox-ca --pki-dir "$TMP/pki" --sandbox-account "$bad" >"$TMP/acc.out" 2>&1
	rc=$?
	ok '[ $rc = 1 ] && grep -q "sandbox_account must be a POSIX user name" "$TMP/acc.out"' \
		"sandbox_account '$bad' is refused at config load"
done

done_testing
