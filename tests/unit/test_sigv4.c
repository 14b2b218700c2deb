/* test_sigv4.c: common/sigv4.c against AWS's published Signature Version 4
 * examples for S3 (the "examplebucket" requests of 2013-05-24 in the S3 API
 * reference: a presigned GET of test.txt, GET ?lifecycle and a listing with
 * max-keys=2&prefix=J), S3's URI encoding and the refusals. boto3's answers
 * for many more inputs: tests/integration/sigv4_boto3.t. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sigv4.h"
#include "tap.h"

#define T20130524 1369353600 /* 2013-05-24T00:00:00Z */

static const struct sigv4_cred aws = {
	.access_key_id = "AKIAIOSFODNN7EXAMPLE",
	.secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

static struct sigv4_req example(const char *method, const char *key)
{
	return (struct sigv4_req){.method = method, .https = true, .host = "s3.amazonaws.com",
				  .region = "us-east-1", .bucket = "examplebucket", .key = key,
				  .now = T20130524};
}

static void test_presign_example(void)
{
	struct sigv4_req q = example("GET", "test.txt");
	struct sigv4_trace t = {0};
	char *url = NULL;

	is_int(sigv4_presign(&q, &aws, 86400, &url, &t), 0, "presign: the AWS example signs");
	is_str(t.canonical_request,
	       "GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
	       "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
	       "20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n"
	       "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD",
	       "presign: the canonical request is AWS's");
	is_str(t.string_to_sign,
	       "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
	       "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04",
	       "presign: the string to sign is AWS's");
	is_str(url,
	       "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
	       "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2F"
	       "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
	       "X-Amz-SignedHeaders=host&X-Amz-Signature="
	       "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
	       "presign: the URL and its signature are AWS's");
	free(url);
	sigv4_trace_free(&t);
}

static void test_header_examples(void)
{
	struct sigv4_req q = example("GET", NULL);
	struct sigv4_signed s = {0};
	struct sigv4_trace t = {0};

	q.query = "lifecycle=";
	is_int(sigv4_sign(&q, &aws, &s, &t), 0, "sign: GET ?lifecycle signs");
	is_str(t.canonical_request,
	       "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
	       "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\nx-amz-date:20130524T000000Z\n\n"
	       "host;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
	       "sign: the canonical request is AWS's");
	is_str(t.string_to_sign,
	       "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
	       "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
	       "sign: the string to sign is AWS's");
	is_str(s.authorization,
	       "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
	       "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="
	       "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
	       "sign: the lifecycle example's signature is AWS's");
	is_str(s.amz_date, "20130524T000000Z", "sign: x-amz-date");
	is_str(s.content_sha256, SIGV4_EMPTY_SHA256, "sign: x-amz-content-sha256 of no body");
	is_str(s.url, "https://examplebucket.s3.amazonaws.com/?lifecycle=", "sign: the URL");
	sigv4_signed_free(&s);
	sigv4_trace_free(&t);

	q.query = "max-keys=2&prefix=J";
	is_int(sigv4_sign(&q, &aws, &s, NULL), 0, "sign: the listing signs");
	ok(s.authorization && strstr(s.authorization, "Signature=34b48302e7b5fa45bde8084f4b7868a8"
				     "6f0a534bc59db6670ed5711ef69dc6f7"),
	   "sign: the listing example's signature is AWS's");
	sigv4_signed_free(&s);
}

static void test_styles(void)
{
	struct sigv4_req q = example("DELETE", "snap/a b");
	struct sigv4_signed s = {0};
	char *url = NULL;

	q.path_style = true;
	q.host = "127.0.0.1:9000";
	q.https = false;
	is_int(sigv4_sign(&q, &aws, &s, NULL), 0, "path-style DELETE signs");
	is_str(s.url, "http://127.0.0.1:9000/examplebucket/snap/a%20b", "path-style URL");
	sigv4_signed_free(&s);
	q.key = NULL;
	q.method = "HEAD";
	is_int(sigv4_sign(&q, &aws, &s, NULL), 0, "HEAD bucket signs");
	is_str(s.url, "http://127.0.0.1:9000/examplebucket", "path-style bucket URL");
	sigv4_signed_free(&s);

	q = example("PUT", "x");
	q.host = "s3.amazonaws.com:443";
	q.prefix = "bc/snapshots/";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), 0, "prefix + key presigns");
	ok(url && strncmp(url, "https://examplebucket.s3.amazonaws.com:443/bc/snapshots/x?",
			  strlen("https://examplebucket.s3.amazonaws.com:443/bc/snapshots/x?")) == 0,
	   "the URL keeps the port and the prefix leads the key: %s", url);
	free(url);
	q.bucket = "dotted.bucket";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL,
	       "a bucket with a dot is refused virtual-hosted");
	q.path_style = true;
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), 0, "and taken path-style");
	free(url);
}

static void test_encode(void)
{
	static const struct {
		const char *in, *keep, *query;
	} cases[] = {
		{"a b", "a%20b", "a%20b"},
		{"\xc3\xa9t\xc3\xa9/\xe2\x82\xac", "%C3%A9t%C3%A9/%E2%82%AC", "%C3%A9t%C3%A9%2F%E2%82%AC"},
		{"~-._", "~-._", "~-._"},
		{"a+b=c", "a%2Bb%3Dc", "a%2Bb%3Dc"},
		{"x/y//z/", "x/y//z/", "x%2Fy%2F%2Fz%2F"},
		{"?#&%*'()!$,;:@[]", "%3F%23%26%25%2A%27%28%29%21%24%2C%3B%3A%40%5B%5D",
		 "%3F%23%26%25%2A%27%28%29%21%24%2C%3B%3A%40%5B%5D"},
		{"\x01\x7f\xff", "%01%7F%FF", "%01%7F%FF"},
		{"AZaz09", "AZaz09", "AZaz09"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *a = NULL, *b = NULL;
		sigv4_uri_encode(cases[i].in, strlen(cases[i].in), true, &a);
		sigv4_uri_encode(cases[i].in, strlen(cases[i].in), false, &b);
		is_str(a, cases[i].keep, "encode (key) case %zu", i);
		is_str(b, cases[i].query, "encode (query value) case %zu", i);
		free(a);
		free(b);
	}
}

static void test_refusals(void)
{
	struct sigv4_req q = example("PUT", "k");
	struct sigv4_cred nokey = {.access_key_id = "AK", .secret = ""};
	char *url = NULL, big[SIGV4_KEY_MAX + 2];

	is_int(sigv4_presign(&q, &aws, 0, &url, NULL), -EINVAL, "expires 0 refused");
	is_int(sigv4_presign(&q, &aws, SIGV4_EXPIRES_MAX + 1, &url, NULL), -EINVAL,
	       "expires above a week refused");
	is_int(sigv4_presign(&q, &aws, SIGV4_EXPIRES_MAX, &url, NULL), 0, "a week is allowed");
	free(url);
	is_int(sigv4_presign(&q, &nokey, 60, &url, NULL), -EINVAL, "an empty secret refused");
	q.method = "POST";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL, "another method refused");
	q = example("PUT", "k");
	q.host = "S3.amazonaws.com";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL, "an uppercase host refused");
	q.host = "s3.amazonaws.com/evil";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL, "a host with a path refused");
	q = example("PUT", big);
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL, "a key over 1024 bytes refused");
	q.query = "a=b";
	q.key = "k";
	is_int(sigv4_presign(&q, &aws, 60, &url, NULL), -EINVAL, "a presign takes no query");
}

int main(void)
{
	test_presign_example();
	test_header_examples();
	test_styles();
	test_encode();
	test_refusals();
	done_testing();
}
