#!/bin/bash
# sigv4_boto3.t: the snapshot store's signer (common/sigv4.c) makes the
# same presigned PUT/GET URLs and the same signed DELETE (URL, Authorization,
# x-amz-date, x-amz-content-sha256) as boto3 for the same inputs and clock,
# byte for byte: path- and virtual-hosted-style, key prefixes, default and
# other ports, spaces, unicode, '~', '+', '=', reserved characters, double
# slashes, expiries from 1 s to a week (sigv4_boto3.py, with Debian's
# python3-boto3; the driver is tests/integration/sigv4drv).
. "$(dirname "$0")/../lib/tap.sh"

BC_BIN=${BC_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
DRV=$BC_BIN/../tests/integration/sigv4drv
HERE=$(cd "$(dirname "$0")" && pwd)

ok "test -x '$DRV'" 'the signer driver is built'
/usr/bin/python3 -c 'import boto3' 2>/dev/null
ok $? "Debian's python3-boto3 is installed (contrib/install-deps.sh)"
out=$(/usr/bin/python3 "$HERE/sigv4_boto3.py" "$DRV" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/# /' >&2
n=$(printf '%s\n' "$out" | grep -c '^ok ')
bad=$(printf '%s\n' "$out" | grep -c '^not ok ')
is "$rc" 0 'every URL and signed request is boto3'"'"'s'
ok "[ '$n' -ge 27 ] && [ '$bad' -eq 0 ]" "27 comparisons ran, all equal (ok $n, not ok $bad)"
done_testing
