#!/usr/bin/python3
"""sigv4_boto3.py: common/sigv4.c against boto3, byte for byte.

For each row of a table (method, scheme, endpoint host, region, bucket,
path- or virtual-hosted-style, key prefix, key, clock, expiry), boto3
(Debian's python3-boto3, run by /usr/bin/python3) makes the presigned PUT
and GET URLs and the signed DELETE's URL and headers with its clock frozen
at the row's time; tests/integration/sigv4drv (our signer) prints its own
for the same inputs; each pair must be equal. Prints TAP.

usage: sigv4_boto3.py SIGV4DRV
"""
import datetime
import os
import subprocess
import sys
import types

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config

NOW = [datetime.datetime(2026, 12, 2, 11, 0, 0)]


class Frozen(datetime.datetime):
    """botocore signs with datetime.datetime.utcnow(): the row's clock."""

    @classmethod
    def utcnow(cls):
        return NOW[0]


botocore.auth.datetime = types.SimpleNamespace(datetime=Frozen)

KEY_ID, SECRET = 'AKIDEXAMPLE0BC', 'wJalrXUtnFEMI/K7MDENG+bPxRfiCY/EXAMPLE=KEY'
EPOCH = datetime.datetime(1970, 1, 1)

# (scheme, host, region, bucket, path_style, prefix, key, time, expires)
ROWS = [
    ('https', 's3.amazonaws.com', 'us-east-1', 'examplebucket', False, '', 'test.txt',
     datetime.datetime(2013, 5, 24), 86400),
    ('https', 's3.eu-west-1.amazonaws.com', 'eu-west-1', 'bc-snaps', False,
     'sandboxes/', 'acme/snap_01jd8x9k2m3n4p5q6r7s8t9v0w', datetime.datetime(2026, 12, 2, 11), 900),
    ('http', '127.0.0.1:9000', 'us-east-1', 'snaps', True, '', 'a b c',
     datetime.datetime(2026, 12, 2, 23, 59, 59), 60),
    ('https', 'minio.internal:9000', 'eu-central-1', 'snaps', True, 'p/q/', 'x+y=z~w',
     datetime.datetime(2027, 1, 1), 3600),
    ('https', 'rgw.example.org:8443', 'default', 'b.dots-ok', True, '',
     '\u00e9t\u00e9/\u20ac/\u6f22\u5b57 \U0001f600', datetime.datetime(2026, 2, 28, 1, 2, 3), 604800),
    ('https', 'rgw.example.org:443', 'us-west-2', 'snaps', True, 'pre fix/',
     "odd!$&'()*,;:@[]?#%key", datetime.datetime(2026, 6, 30, 12, 0, 0), 1),
    ('http', 'localhost:80', 'us-east-1', 'snaps', True, '', 'dir//double/slash/',
     datetime.datetime(2030, 1, 1), 120),
    ('http', 'objects.lan:80', 'us-east-1', 'snaps', False, 'bc/', 'k',
     datetime.datetime(2026, 12, 2, 0, 0, 1), 45),
    ('https', 's3.amazonaws.com', 'ap-southeast-2', 'examplebucket', False, '',
     'UPPER/lower/0123456789-._~', datetime.datetime(2026, 12, 31, 23, 59, 59), 300),
]


def client(scheme, host, region, path_style):
    return boto3.client(
        's3', endpoint_url=f'{scheme}://{host}', aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET, region_name=region,
        config=botocore.config.Config(
            signature_version='s3v4',
            s3={'addressing_style': 'path' if path_style else 'virtual'}))


def boto_delete(s3, bucket, key):
    """The DELETE botocore would send: captured before it is sent."""
    seen = {}

    def capture(request, **_):
        seen['url'] = request.url
        seen['h'] = {k.lower(): (v.decode() if isinstance(v, bytes) else v)
                     for k, v in request.headers.items()}
        return botocore.awsrequest.AWSResponse(
            request.url, 204, {}, types.SimpleNamespace(stream=lambda: iter([b''])))

    s3.meta.events.register('before-send.s3.DeleteObject', capture)
    s3.delete_object(Bucket=bucket, Key=key)
    h = seen['h']
    return '\t'.join([seen['url'], h['authorization'], h['x-amz-date'],
                      h['x-amz-content-sha256']])


def main():
    drv = sys.argv[1]
    lines, want = [], []
    for scheme, host, region, bucket, path_style, prefix, key, when, expires in ROWS:
        NOW[0] = when
        now = int((when - EPOCH).total_seconds())
        s3 = client(scheme, host, region, path_style)
        for method, op in (('PUT', 'put_object'), ('GET', 'get_object')):
            want.append((f'presign {method} {scheme}://{host} {bucket} {key!r}',
                         s3.generate_presigned_url(
                             op, Params={'Bucket': bucket, 'Key': prefix + key},
                             ExpiresIn=expires)))
            lines.append(['presign', method, scheme, host, region, bucket, path_style,
                          prefix, key, now, expires])
        want.append((f'signed DELETE {scheme}://{host} {bucket} {key!r}',
                     boto_delete(s3, bucket, prefix + key)))
        lines.append(['sign', 'DELETE', scheme, host, region, bucket, path_style, prefix,
                      key, now, 0])
    stdin = ''.join('\t'.join([
        mode, method, '1' if scheme == 'https' else '0', host, region, bucket,
        '1' if ps else '0', prefix.encode().hex() or '-', key.encode().hex() or '-',
        str(now), str(exp)]) + '\n'
        for mode, method, scheme, host, region, bucket, ps, prefix, key, now, exp in lines)
    env = dict(os.environ, SIGV4_ACCESS_KEY_ID=KEY_ID, SIGV4_SECRET=SECRET)
    got = subprocess.run([drv], input=stdin, capture_output=True, text=True, env=env,
                         check=True).stdout.split('\n')
    failed = 0
    for i, (name, expect) in enumerate(want):
        ours = got[i] if i < len(got) else ''
        if ours == expect:
            print(f'ok {i + 1} - {name}: same bytes as boto3')
        else:
            failed += 1
            print(f'not ok {i + 1} - {name}: same bytes as boto3')
            print(f'#   boto3: {expect}')
            print(f'#   ours:  {ours}')
    print(f'# boto3 {boto3.__version__}, botocore {botocore.__version__}')
    print(f'1..{len(want)}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
