# https.t: the test https file server of tests/lib/https.sh.
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/https.sh"

plan 9
root=$(mktemp -d)
tap_on_exit rm -rf "$root"
mkdir -p "$root/files"
head -c 3000000 /dev/urandom >"$root/files/blob.bin"
echo secret >"$root/outside.txt"

https_up "$root/files"
ok $? 'https_up starts the server'
like "$HTTPS_URL" '^https://127\.0\.0\.1:[0-9]+$' 'HTTPS_URL is a loopback https URL'

got=$(curl -fsS --cacert "$HTTPS_CA_FILE" "$HTTPS_URL/blob.bin" | sha256sum | cut -d' ' -f1)
is "$got" "$(sha256sum <"$root/files/blob.bin" | cut -d' ' -f1)" 'a file comes back byte for byte, verified against the test CA'

len=$(curl -fsSI --cacert "$HTTPS_CA_FILE" "$HTTPS_URL/blob.bin" | tr -d '\r' | awk 'tolower($1) == "content-length:" { print $2 }')
is "$len" 3000000 'HEAD tells the Content-Length'

curl -fsS "$HTTPS_URL/blob.bin" -o /dev/null 2>/dev/null
isnt "$?" 0 'a client without the test CA refuses the server'

code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$HTTPS_CA_FILE" --path-as-is "$HTTPS_URL/../outside.txt")
isnt "$code" 200 "nothing outside the served folder ($code)"

code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$HTTPS_CA_FILE" "$HTTPS_URL/missing.qcow2")
is "$code" 404 'a missing file is 404'

port=${HTTPS_URL##*:}
https_down
ok $? 'https_down'
port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }
eventually 10 port_free "$port"
ok $? 'the port is free again'
done_testing
